"""The inventories admins already have, read into one shape: Ansible YAML, the JSON that
``ansible-inventory --list`` (and every dynamic inventory plugin) prints, an ssh_config's ``Host``
entries. Ansible INI and plain lists of names are ``inventory.parse_ini``'s. Free of I/O.

YAML is read by PyYAML's safe loader, imported only when a YAML inventory is read; anchors, aliases
and merge keys as Ansible reads them, bounded in what they expand to; keys given twice are refused
with their line.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from sysmcp.fleet.inventory import (
    Inventory,
    InventoryError,
    _build,
    _group_name,
    _RawInventory,
    check_name,
    expand,
    naming,
)

Value = Any  # a YAML scalar (str, int, float, bool, None, date), list or dict


# -- YAML, through PyYAML ------------------------------------------------------------------------


#: Values a YAML inventory may hold once its aliases are expanded: far more than any fleet's variables,
#: far fewer than a few aliased lines can make (nine levels of nine aliases are 387 million).
MAX_EXPANDED_VALUES = 1_000_000
#: Characters of scalars aliases may add to what the document itself holds.
MAX_EXPANDED_CHARS = 64 << 20
_MERGE_TAGS = ("tag:yaml.org,2002:merge", "tag:yaml.org,2002:value")


def parse_yaml(text: str, source: str = "inventory") -> Value:
    """A YAML document as Python values, through PyYAML's safe loader (what Ansible builds on).

    Anchors, aliases and merge keys (``<<: *defaults``) are read as Ansible reads them, the document
    expanded at most to ``MAX_EXPANDED_VALUES`` values (and ``MAX_EXPANDED_CHARS`` characters more
    than it holds) and never into itself (an alias is one shared value in Python, but every reader of
    the inventory walks each use of it). A key given twice in one
    mapping is refused rather than silently overwritten (a merged key the mapping gives again is its
    own, as YAML has it); faults name their line."""
    import yaml  # here: only a YAML inventory needs it, and a fleet host's start never reads one

    class Loader(yaml.SafeLoader):
        #: each mapping's own keys (not its ``<<``), as written: PyYAML merges a mapping's ``<<`` into
        #: its node in place the first time it or any mapping merging it is built, which may be before
        #: it is itself built (a shallower mapping merging it is built first)
        own_keys: dict[int, list[yaml.Node]]

        def compose_document(self) -> yaml.Node | None:
            node: yaml.Node | None = super().compose_document()
            if node is not None:
                _expanded_size(node, {}, set(), source, len(text) + MAX_EXPANDED_CHARS)
            self.own_keys = {}
            return node

        def flatten_mapping(self, node: yaml.MappingNode) -> None:
            if id(node) not in self.own_keys:  # not yet merged into: its value is as written
                self.own_keys[id(node)] = [key for key, _ in node.value if key.tag not in _MERGE_TAGS]
            super().flatten_mapping(node)

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            if id(node) not in self.own_keys:
                self.flatten_mapping(node)
            for key_node in self.own_keys[id(node)]:
                key = self.construct_object(key_node, deep)
                if key in seen:
                    line = key_node.start_mark.line + 1
                    raise InventoryError(line, f"{key!r} is given twice in one mapping", source)
                seen.add(key)
            return super().construct_mapping(node, deep)

    try:
        return yaml.load(text, Loader=Loader)  # a SafeLoader: no Python objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or "not valid YAML"
        if "'\\t'" in problem:
            problem = "YAML indentation must be spaces, not tabs"
        elif "<block" in problem:
            problem = f"unexpected indentation ({exc.context}: {problem})"
        raise InventoryError(mark.line + 1 if mark else 0, problem, source) from None
    except yaml.YAMLError as exc:
        raise InventoryError(0, f"not valid YAML: {exc}", source) from None
    except RecursionError:  # [[[[… a few kilobytes deep: PyYAML composes recursively
        raise InventoryError(0, "not an inventory: nested too deeply", source) from None


def _expanded_size(
    node: Any, sizes: dict[int, tuple[int, int]], open_nodes: set[int], source: str, max_chars: int
) -> tuple[int, int]:
    """How many values, and characters of scalars, ``node`` stands for with every alias in it expanded;
    each node is counted once however often it is aliased, so this costs the document's length, not
    the expansion's. Characters, because a long string aliased a thousand times is a thousand values
    but a thousand times its length in every list variable kept as its JSON."""
    import yaml

    if isinstance(node, yaml.ScalarNode):
        return 1, len(node.value)
    key = id(node)
    if key in sizes:
        return sizes[key]
    line = node.start_mark.line + 1
    if key in open_nodes:
        raise InventoryError(
            line, "a YAML alias refers to the value that holds it (it would hold itself)", source
        )
    open_nodes.add(key)
    children = (
        [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else node.value
    )
    values, chars = 1, 0
    for child in children:
        child_values, child_chars = _expanded_size(child, sizes, open_nodes, source, max_chars)
        values, chars = values + child_values, chars + child_chars
        if values > MAX_EXPANDED_VALUES:
            raise InventoryError(
                line,
                f"YAML aliases expand this value to more than {MAX_EXPANDED_VALUES:,} values",
                source,
            )
        if chars > max_chars:
            raise InventoryError(
                line,
                f"YAML aliases expand this value to more than {max_chars:,} characters "
                f"({MAX_EXPANDED_CHARS >> 20} MiB more than the whole file holds)",
                source,
            )
    open_nodes.discard(key)
    sizes[key] = values, chars
    return values, chars


# -- Ansible's YAML inventory --------------------------------------------------------------------


def _variables(value: Value, where: str, number: int) -> dict[str, tuple[str, int]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InventoryError(number, f"the vars of {where} must be a mapping")
    found: dict[str, tuple[str, int]] = {}
    for key, item in value.items():
        if item is None:
            continue
        text = json.dumps(item, default=str) if isinstance(item, (dict, list)) else str(item)
        found[str(key)] = (text, number)
    return found


def _add_host(parsed: _RawInventory, host: str, group: str, host_vars: Value) -> None:
    """``host`` of ``group`` with its variables; as Ansible has it, a host of ``all`` itself is ungrouped."""
    check_name(host, 0)
    parsed.add_host(
        host, "ungrouped" if group == "all" else group, _variables(host_vars, f"host {host!r}", 0)
    )


def from_yaml(text: str, source: str = "inventory") -> Inventory:
    """An Ansible YAML inventory: groups with ``hosts``, ``vars`` and ``children``, from ``all``
    (or any top-level groups)."""
    with naming(source):
        data = parse_yaml(text, source)
        if data is None:
            return Inventory()
        if not isinstance(data, dict):
            raise InventoryError(1, "a YAML inventory is a mapping of groups")
        parsed = _RawInventory()

        def group(name: str, body: Value, trail: tuple[str, ...]) -> None:
            _group_name(name, 0)
            if name in trail:
                raise InventoryError(0, f"groups contain each other: {' → '.join((*trail, name))}")
            parsed.direct.setdefault(name, {})
            parsed.group_line.setdefault(name, 0)
            if body is None:
                return
            if not isinstance(body, dict):
                raise InventoryError(0, f"group {name!r} must be a mapping (hosts, vars, children)")
            unknown = set(body) - {"hosts", "vars", "children"}
            if unknown:
                raise InventoryError(
                    0, f"group {name!r} has {', '.join(sorted(unknown))}: only hosts, vars, children"
                )
            hosts = body.get("hosts") or {}
            if not isinstance(hosts, dict):
                raise InventoryError(0, f"the hosts of {name!r} must be a mapping of host names")
            for pattern, host_vars in hosts.items():
                for host in expand(str(pattern), 0):
                    _add_host(parsed, host, name, host_vars)
            parsed.group_vars.setdefault(name, {}).update(_variables(body.get("vars"), f"group {name!r}", 0))
            children = body.get("children") or {}
            if not isinstance(children, dict):
                raise InventoryError(0, f"the children of {name!r} must be a mapping of groups")
            for child, child_body in children.items():
                parsed.children.setdefault(name, []).append((str(child), 0))  # twice is harmless: sets below
                group(str(child), child_body, (*trail, name))

        for name, body in data.items():
            group(str(name), body, ())
        return _build(parsed)


# -- ansible-inventory --list ------------------------------------------------------------------------


def from_json(text: str, source: str = "inventory") -> Inventory:
    """The JSON ``ansible-inventory --list`` (or a dynamic inventory script) prints: groups with
    ``hosts``/``children``/``vars`` (or a bare list of hosts), and ``_meta.hostvars``."""
    with naming(source):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InventoryError(0, f"not JSON: {exc}") from None
        except RecursionError:
            raise InventoryError(0, "not an inventory: nested too deeply") from None
        if not isinstance(data, dict):
            raise InventoryError(0, "an inventory's JSON is an object of groups")
        meta = data.get("_meta") or {}
        hostvars = meta.get("hostvars") or {} if isinstance(meta, dict) else {}
        if not isinstance(hostvars, dict):
            raise InventoryError(0, "_meta.hostvars must be an object")
        parsed = _RawInventory()
        for name, body in data.items():
            if name == "_meta":
                continue
            _group_name(name, 0)
            parsed.direct.setdefault(name, {})
            if isinstance(body, list):
                body = {"hosts": body}
            if not isinstance(body, dict):
                raise InventoryError(0, f"group {name!r} must be an object or a list of hosts")
            for host in _strings(body.get("hosts"), f"the hosts of {name!r}"):
                _add_host(parsed, host, name, hostvars.get(host))
            for child in _strings(body.get("children"), f"the children of {name!r}"):
                parsed.children.setdefault(name, []).append((child, 0))
                parsed.direct.setdefault(child, {})
            parsed.group_vars[name] = _variables(body.get("vars"), f"group {name!r}", 0)
        for host in hostvars:  # a host only in _meta (some plugins): ungrouped
            if host not in parsed.host_vars:
                _add_host(parsed, str(host), "ungrouped", hostvars.get(host))
        return _build(parsed)


def _strings(value: Value, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InventoryError(0, f"{what} must be a list of names")
    return list(value)


# -- ssh_config ------------------------------------------------------------------------------------


#: An ssh_config ``Include``'s words → each file it names, in ssh's order, as (its name, its text).
Includer = Callable[[str], list[tuple[str, str]]]
MAX_INCLUDE_DEPTH = 16  # as ssh's own (READCONF_MAX_DEPTH)


def from_ssh_config(text: str, source: str = "ssh_config", include: Includer | None = None) -> Inventory:
    """Every literal name of an ssh_config's ``Host`` lines (no patterns), with the ``ProxyJump``
    ssh would use for it (the first value that applies, as ssh reads its config). ssh itself reads
    the rest of the file (give it as ``--ssh-config`` too, or it is used as that when none is).
    ``Include`` lines are read where they stand through ``include`` (the I/O is the caller's); a Host
    block an included file opens ends with that file, as in ssh. Without ``include`` they are refused."""
    with naming(source):
        blocks: list[tuple[list[str], dict[str, tuple[str, int]]]] = []
        names: list[str] = []

        def read(text: str, current: dict[str, tuple[str, int]] | None, depth: int) -> None:
            for number, raw in enumerate(text.splitlines(), start=1):
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                match = re.match(r"(\w+)\s*=?\s*(.*)", line)
                if match is None:
                    raise InventoryError(number, f"not an ssh_config line: {line!r}")
                keyword, value = match.group(1), match.group(2).strip()
                if keyword.lower() == "host":
                    patterns = value.split()
                    current = {}
                    blocks.append((patterns, current))
                    for name in patterns:
                        if not any(c in name for c in "*?!") and name not in names:
                            names.append(check_name(name, number))
                elif keyword.lower() == "match":
                    current = None  # Match blocks are ssh's to evaluate; sysmcp takes no host from them
                elif keyword.lower() == "include":
                    outer = (
                        current  # the block the Include stands in: where an included file's first lines go
                    )

                    def read_included(body: str, outer: dict[str, tuple[str, int]] | None = outer) -> None:
                        read(body, outer, depth + 1)

                    _included(value, number, depth, include, read_included)
                elif current is not None:
                    current.setdefault(keyword.lower(), (value, number))
                elif not blocks:
                    blocks.append((["*"], {keyword.lower(): (value, number)}))

        read(text, None, 0)
        parsed = _RawInventory(host_order=list(names), direct={"ungrouped": dict.fromkeys(names)})
        for name in names:
            for patterns, settings in blocks:
                if _ssh_matches(name, patterns) and "proxyjump" in settings:
                    jump, number = settings["proxyjump"]
                    if jump.lower() != "none":
                        parsed.host_vars[name] = {"ansible_ssh_common_args": (f"-J {jump}", number)}
                    break
            parsed.host_vars.setdefault(name, {})
        return _build(parsed)


def _included(
    words: str, number: int, depth: int, include: Includer | None, read: Callable[[str], None]
) -> None:
    """Read each file an ``Include`` on line ``number`` names; a fault in one names that file and its line."""
    if include is None:
        raise InventoryError(
            number, "Include is not read here: list the included files' hosts in the inventory"
        )
    if depth >= MAX_INCLUDE_DEPTH:
        raise InventoryError(
            number, f"Include nested more than {MAX_INCLUDE_DEPTH} deep (a file that includes itself?)"
        )
    try:
        files = include(words)
    except ValueError as exc:
        raise InventoryError(number, f"Include {words}: {exc}") from None
    for path, body in files:
        try:
            read(body)
        except InventoryError as exc:
            said = (
                exc.message
                if exc.message.startswith("Include nested")
                else f"{path} line {exc.line}: {exc.message}"
            )
            raise InventoryError(number, said) from None


def _ssh_matches(name: str, patterns: Iterable[str]) -> bool:
    matched = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if fnmatch.fnmatchcase(name, pattern.lstrip("!")):
            if negated:
                return False
            matched = True
    return matched


# -- which form a file is ------------------------------------------------------------------------------


def detect(text: str, path: str = "") -> str:
    """``json``, ``yaml``, ``ssh_config`` or ``ini`` (plain lists of names are INI)."""
    lowered = path.lower()
    if lowered.endswith(".json"):
        return "json"
    if lowered.endswith((".yml", ".yaml")):
        return "yaml"
    meaningful = [
        line for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("#", ";"))
    ]
    if not meaningful:
        return "ini"
    first = meaningful[0].strip()
    if first.startswith("{"):
        return "json"
    if (
        re.match(r"(?i)(host|match|include)\s+[^:=\s]", first)
        or "ssh_config" in lowered
        or lowered.endswith("/.ssh/config")
    ):
        return "ssh_config"
    if first == "---" or (
        re.fullmatch(r"[^\s=\[][^=]*:(\s.*)?", first) and not re.fullmatch(r"\S+:\d+(\s.*)?", first)
    ):
        return "yaml"
    return "ini"


__all__ = ["Includer", "detect", "from_json", "from_ssh_config", "from_yaml", "parse_yaml"]
