"""The operator's fleet, free of I/O: Ansible INI inventory text (or plain names) → hosts and groups.

The other forms (Ansible YAML, ``ansible-inventory --list`` JSON, ssh_config) are read in
``sources.py`` into the same ``_RawInventory`` shape and built here, with Ansible's variable precedence.

The inventory is the operator's configuration, never the model's: the model can only name what is
listed here, and ``resolve`` is the one place that turns its names into hosts. A malformed inventory is
refused whole, with the line number, so a fleet is never half loaded.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import string
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from sysmcp.render import and_more, plural

#: Ansible's older spellings, still honoured by it: the newer name wins when both are set.
ALIASES = {
    "ansible_ssh_host": "ansible_host",
    "ansible_ssh_port": "ansible_port",
    "ansible_ssh_user": "ansible_user",
}
#: ``-o`` options an inventory's ssh args may set: how to reach the host, never what runs there.
_OPTION = re.compile(r"[A-Za-z][A-Za-z0-9]*=.+")
_NOT_FROM_INVENTORY = frozenset(
    {"localcommand", "permitlocalcommand", "remotecommand", "controlpath", "controlmaster"}
)
#: What a host name may hold: it becomes an ssh destination, so nothing an option or a shell could read.
_NAME = re.compile(r"[A-Za-z0-9_.@%+\-\[\]:]+")
_RANGE = re.compile(r"\[([^\[\]]*)\]")
#: What a shell reads: ssh writes the address and the user into the operator's ProxyCommand (%h, %r),
#: which a shell runs. Never in them, whoever filled the variable (a cloud plugin reads instances' tags).
#: A backslash is let through but not last (as OpenSSH's own check of a user): in the shell it only
#: escapes the next character (CORP\alice reaches the command as CORPalice; nothing runs), but a last one
#: would escape the character that follows %r in the operator's line (a space or a closing quote).
_SHELL = re.compile(r"""[\s\x00-\x1f\x7f'"`$;&<>|(){}]|\\$""")
MAX_RANGE = 10_000  # hosts one pattern may expand to: web[1:100000000] is a typo, not a fleet
#: Characters of a host name: a DNS name is at most 253. Each name is in the instructions (the first 50),
#: in ssh's argv (past 128 KiB it cannot start), and a file name under ``sysmcp call -o DIR``.
MAX_NAME = 255
#: Unknown names the model gave that an error quotes (each cut to ``NAME_QUOTED`` characters): the
#: model's own list, of any length, is not echoed back whole.
UNKNOWN_QUOTED = 10
NAME_QUOTED = 80
#: Distinct globs one call may give: each is matched against every host, on the event loop every
#: session shares (300 globs over 10,000 hosts took it for 2.5 s). Groups are the way to name many.
MAX_GLOBS = 100


class InventoryError(ValueError):
    """A malformed inventory; ``line`` is where (0 for names given on the command line)."""

    def __init__(self, line: int, message: str, source: str = "inventory") -> None:
        super().__init__(f"{source} line {line}: {message}" if line else f"{source}: {message}")
        self.line = line
        self.message = message


@contextmanager
def naming(source: str) -> Iterator[None]:
    """Re-raise an ``InventoryError`` from within as one of ``source``: the readers' helpers raise
    theirs naming no source, and the reader that knows its input's name gives it here, once."""
    try:
        yield
    except InventoryError as exc:
        raise InventoryError(exc.line, exc.message, source) from None


class UnknownHosts(ValueError):
    """Names the model gave that the inventory does not list; the text says what it does list."""


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    address: str | None = None  # ansible_host: where ssh connects (``ssh.destination``)
    port: int | None = None  # ansible_port → ssh -o Port
    user: str | None = None  # ansible_user → ssh -o User
    command: str | None = None  # sysmcp_command: the remote command for this host
    jump: str | None = None  # ProxyJump (-J, from the inventory's ssh args or ssh_config): its bastions
    options: tuple[str, ...] = ()  # further ``-o Key=Value`` from the inventory's ssh args
    #: ansible_connection when it is not ssh (``local``, winrm, docker …): the host is refused in those
    #: words, never dialled over ssh by its name. None: ssh.
    connection: str | None = None


@dataclass(frozen=True)
class Inventory:
    hosts: dict[str, Host] = field(default_factory=dict)  # in inventory order
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)  # every host of each group
    #: Each host's variables after Ansible's precedence, as text (what ``ansible-inventory --list``
    #: gives as hostvars): kept for checking and for messages, read only through ``Host``.
    variables: dict[str, dict[str, str]] = field(default_factory=dict, compare=False)

    def __bool__(self) -> bool:
        return bool(self.hosts)

    @property
    def group_names(self) -> list[str]:
        return [name for name in self.groups if name not in ("all", "ungrouped")]

    def resolve(self, names: Sequence[str]) -> list[str]:
        """Hosts named by host names, group names, shell globs over host names or ``"all"``, in
        inventory order, each once. Any name that matches nothing refuses the whole call, and so does a
        choice of no host at all (groups without hosts only: "0 of 0 hosts answered" would say nothing).
        Each name is looked at once however often it is given ("all" 20,000 times took 6 s), and more
        than ``MAX_GLOBS`` globs refuse the call before any is matched."""
        chosen: set[str] = set()
        unknown: list[str] = []
        distinct = list(dict.fromkeys(names))
        globs = [
            name for name in distinct if name not in self.groups and name not in self.hosts and _is_glob(name)
        ]
        if len(globs) > MAX_GLOBS:
            raise UnknownHosts(
                f"{len(globs):,} globs in one call, more than the {MAX_GLOBS} it may give: name a group "
                f"instead (groups: {', '.join(self.group_names) or 'none besides all'}), or a wider glob"
            )
        for name in distinct:
            if name in self.groups:
                chosen.update(self.groups[name])
            elif name in self.hosts:
                chosen.add(name)
            elif _is_glob(name) and (matched := _matching(name, self.hosts)):
                chosen.update(matched)
            else:
                unknown.append(name)
        if unknown or not chosen:
            groups = ", ".join(g for g in self.group_names if self.groups[g]) or "none besides all"
            quoted = ", ".join(_quoted(name) for name in unknown[:UNKNOWN_QUOTED])
            if len(unknown) > UNKNOWN_QUOTED:
                quoted += f" {and_more(len(unknown) - UNKNOWN_QUOTED)}"
            said = (
                f"unknown host or group: {quoted}"
                if unknown
                else f"no host in group {', '.join(map(repr, names))}"  # every name is a group without hosts
            )
            raise UnknownHosts(
                f"{said}. The inventory has {plural(len(self.hosts), 'host')}; groups: {groups} "
                '(or "all", or a glob over host names such as "web*")'
            )
        return [host for host in self.hosts if host in chosen]


def _is_glob(name: str) -> bool:
    return any(ch in name for ch in "*?[")


def _matching(glob: str, names: Iterable[str]) -> list[str]:
    """``names`` that ``glob`` matches as ``fnmatchcase`` does (case counts everywhere), compiled once."""
    match = re.compile(fnmatch.translate(glob)).match
    return [name for name in names if match(name)]


def _quoted(name: str) -> str:
    """A name as an error quotes it: its repr, its first ``NAME_QUOTED`` characters only."""
    return repr(name) if len(name) <= NAME_QUOTED else f"{name[:NAME_QUOTED]!r}… ({len(name):,} characters)"


def check_name(name: str, line: int = 0) -> str:
    if not _NAME.fullmatch(name) or name.startswith("-"):
        raise InventoryError(line, f"{_quoted(name)} is not a host name")
    if len(name) > MAX_NAME:
        raise InventoryError(line, f"{_quoted(name)} is not a host name: longer than {MAX_NAME} characters")
    return name


def from_names(names: Iterable[str], source: str = "--host") -> Inventory:
    """Hosts named on the command line or in ``SYSMCP_HOSTS``: no variables, no groups but ``all``."""
    hosts: dict[str, Host] = {}
    with naming(source):
        for name in names:
            name = name.strip()
            if name:
                hosts.setdefault(name, Host(check_name(name)))
    order = tuple(hosts)
    return Inventory(hosts, {"all": order, "ungrouped": order} if order else {})


def split_hosts_env(value: str) -> list[str]:
    """``SYSMCP_HOSTS``: names separated by commas or colons (the two ways people write lists)."""
    return [part for part in re.split(r"[,:\s]+", value) if part]


def merge(first: Inventory, second: Inventory) -> Inventory:
    """Both fleets; a host in both keeps the first's variables."""
    hosts = dict(first.hosts)
    for name, host in second.hosts.items():
        hosts.setdefault(name, host)
    groups: dict[str, dict[str, None]] = {}
    for inventory in (first, second):
        for group, members in inventory.groups.items():
            groups.setdefault(group, {}).update(dict.fromkeys(members))
    index = {name: place for place, name in enumerate(hosts)}
    ordered = {group: _in_order(members, index) for group, members in groups.items()}
    return Inventory(hosts, ordered, {**second.variables, **first.variables})


def _in_order(members: Iterable[str], index: dict[str, int]) -> tuple[str, ...]:
    """A group's hosts in inventory order (``index``: each host's place): sorted, not found by scanning
    every host for every group (85 s for 20,000 hosts in 2,000 groups)."""
    return tuple(sorted(members, key=index.__getitem__))


# -- Ansible INI ---------------------------------------------------------------------------------


@dataclass
class _RawInventory:
    host_order: list[str] = field(default_factory=list)
    host_vars: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)  # value, line
    direct: dict[str, dict[str, None]] = field(default_factory=dict)  # group → its own hosts, in order
    children: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    group_vars: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    group_line: dict[str, int] = field(default_factory=dict)

    def add_host(self, name: str, group: str, variables: dict[str, tuple[str, int]]) -> None:
        """``name`` in ``group`` (each listed once, in the order first seen), ``variables`` added to its own."""
        if name not in self.host_vars:
            self.host_order.append(name)
        self.host_vars.setdefault(name, {}).update(variables)
        self.direct.setdefault(group, {})[name] = None


def parse_ini(text: str, source: str = "inventory") -> Inventory:
    """An Ansible INI inventory: host lines (with ``key=value`` variables and ``name:port``),
    ``[group]``, ``[group:children]``, ``[group:vars]``, comments, ranges such as ``web[01:20]``."""
    with naming(source):
        parsed = _RawInventory()
        section, kind = "ungrouped", "hosts"
        for number, raw in enumerate(text.splitlines(), start=1):
            line = _strip_comment(raw)
            if not line:
                continue
            if line.startswith("["):
                section, kind = _header(line, number)
                parsed.group_line.setdefault(section, number)
                parsed.direct.setdefault(section, {})
                continue
            try:
                words = shlex.split(line, comments=False, posix=True)
            except ValueError as exc:
                raise InventoryError(number, f"cannot split the line ({exc})") from None
            if kind == "children":
                if len(words) != 1:
                    raise InventoryError(number, "a [group:children] line names one group")
                parsed.children.setdefault(section, []).append((_group_name(words[0], number), number))
            elif kind == "vars":
                key, value = _assignment(line, number)
                parsed.group_vars.setdefault(section, {})[key] = (value, number)
            else:
                _host_line(parsed, section, words, number)
        return _build(parsed)


def _strip_comment(raw: str) -> str:
    line = raw.strip()
    if line.startswith(("#", ";")):
        return ""
    # An inline comment: whitespace then '#' (a '#' inside a value, such as a URL fragment, stays).
    match = re.search(r"\s#", line)
    return line[: match.start()].strip() if match else line


def _header(line: str, number: int) -> tuple[str, str]:
    if not line.endswith("]"):
        raise InventoryError(number, f"a section header must end with ']': {line!r}")
    inner = line[1:-1].strip()
    name, _, suffix = inner.partition(":")
    if suffix and suffix not in ("children", "vars"):
        raise InventoryError(number, f"unknown section kind {suffix!r} (children or vars)")
    return _group_name(name, number), suffix or "hosts"


def _group_name(name: str, number: int) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_\-.]+", name):
        raise InventoryError(number, f"{name!r} is not a group name")
    return name


def _assignment(word: str, number: int) -> tuple[str, str]:
    key, sep, value = word.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InventoryError(number, f"expected key=value, got {word!r}")
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return key, value


def _host_line(parsed: _RawInventory, section: str, words: list[str], number: int) -> None:
    pattern, *assignments = words
    if "=" in pattern:
        raise InventoryError(number, f"a host line starts with the host name, got {pattern!r}")
    variables: dict[str, tuple[str, int]] = {}
    if re.fullmatch(r".+:\d+", pattern) and not pattern.startswith("["):
        pattern, port = pattern.rsplit(":", 1)
        variables["ansible_port"] = (port, number)
    for word in assignments:
        key, value = _assignment(word, number)
        variables[key] = (value, number)
    for name in expand(pattern, number):
        parsed.add_host(check_name(name, number), section, variables)


def expand(pattern: str, number: int = 0) -> list[str]:
    """``web[01:03]`` → web01, web02, web03 (leading zeros kept); ``db-[a:c]``; ``[1:9:2]`` strides."""
    match = _RANGE.search(pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    parts = match.group(1).split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise InventoryError(number, f"a range is [start:end] or [start:end:step], got [{match.group(1)}]")
    start, end = parts[0], parts[1]
    step = 1
    if len(parts) == 3:
        if not _small_number(parts[2]) or int(parts[2]) < 1:
            raise InventoryError(number, f"a range's step must be a positive integer: {parts[2]!r}")
        step = int(parts[2])
    width: int | None = None  # letters; for numbers, the leading zeros' width
    if _small_number(start) and _small_number(end):
        first, last, width = int(start), int(end), len(start) if start.startswith("0") else 0
    elif len(start) == len(end) == 1 and start in string.ascii_letters and end in string.ascii_letters:
        first, last = ord(start), ord(end)
    else:
        raise InventoryError(number, f"a range needs two numbers or two letters, got [{start}:{end}]")
    if first > last:
        raise InventoryError(number, f"range [{start}:{end}] runs backwards")
    if (last - first) // step >= MAX_RANGE:  # counted before a name is made: web[1:100000000] fills no memory
        raise InventoryError(number, f"range [{start}:{end}] expands to over {MAX_RANGE:,} hosts")
    values = [chr(i) if width is None else str(i).zfill(width) for i in range(first, last + 1, step)]
    rest = expand(tail, number)
    if len(values) * len(rest) > MAX_RANGE:
        raise InventoryError(number, f"{pattern!r} expands to over {MAX_RANGE:,} hosts")
    return [head + value + more for value in values for more in rest]


def _small_number(text: str) -> bool:
    """Decimal digits ``int()`` reads without refusing (past 4,300 it raises a ValueError of its own):
    at most 100, far past any port or range an inventory means."""
    return text.isdecimal() and len(text) <= 100


def _build(parsed: _RawInventory) -> Inventory:
    for kids in parsed.children.values():
        for kid, number in kids:
            if kid not in parsed.direct and kid not in parsed.children:
                raise InventoryError(number, f"child group {kid!r} is not defined anywhere")
    members = _members(parsed)
    depth = _depths(parsed, members)
    ordered = sorted((g for g in members if g != "all"), key=lambda g: (depth.get(g, 1), g))
    grouped = {h for group, hs in members.items() if group not in ("all", "ungrouped") for h in hs}
    # A host listed both before any section and in a group is not ungrouped (as Ansible has it).
    members["ungrouped"] = {h: None for h in members.get("ungrouped", {}) if h not in grouped}
    within: dict[str, list[str]] = {}  # host → its groups but all, in the order their vars apply
    for group in ordered:
        for host in members[group]:
            within.setdefault(host, []).append(group)
    hosts: dict[str, Host] = {}
    merged: dict[str, dict[str, str]] = {}
    for name in parsed.host_order:
        # As Ansible: [all:vars] first, then each group's, parents before children and siblings by
        # name (a child's vars win over its parent's), the host's own last.
        variables: dict[str, tuple[str, int]] = dict(parsed.group_vars.get("all", {}))
        for group in within.get(name, ()):
            variables.update(parsed.group_vars.get(group, {}))
        variables.update(parsed.host_vars[name])
        hosts[name] = _host(name, variables)
        merged[name] = {key: value for key, (value, _) in variables.items()}
    index = {name: place for place, name in enumerate(hosts)}
    groups = {"all": tuple(hosts)}
    for group in members:
        if group != "all":
            groups[group] = _in_order(members[group], index)
    return Inventory(hosts, groups, merged)


def _members(parsed: _RawInventory) -> dict[str, dict[str, None]]:
    """Every host of each group (its own, then its children's), each group after all its children.
    Walked with a stack of its own, not recursion: a chain of thousands of children is an inventory."""
    members: dict[str, dict[str, None]] = {}
    for top in [*parsed.direct, *parsed.children]:
        if top in members:
            continue
        stack = [(top, iter(parsed.children.get(top, [])))]  # each group's children not yet looked at
        trail = {top: None}  # the groups on the stack, each the parent of the next
        while stack:
            group, kids = stack[-1]
            for kid, _ in kids:
                if kid in trail:
                    cycle = " → ".join((*trail, kid))
                    raise InventoryError(parsed.group_line.get(kid, 0), f"groups contain each other: {cycle}")
                if kid not in members:
                    stack.append((kid, iter(parsed.children.get(kid, []))))
                    trail[kid] = None
                    break
            else:
                stack.pop()
                del trail[group]
                found = dict(parsed.direct.get(group, {}))
                for kid, _ in parsed.children.get(group, []):
                    found.update(members[kid])
                members[group] = found
    return members


def _depths(parsed: _RawInventory, members: dict[str, dict[str, None]]) -> dict[str, int]:
    """Each group's depth below ``all`` (Ansible's: one more than its deepest parent). ``members``
    holds each group after its children, so read backwards each comes after its parents."""
    parents: dict[str, set[str]] = {}
    for parent, kids in parsed.children.items():
        for kid, _ in kids:
            parents.setdefault(kid, set()).add(parent)
    found: dict[str, int] = {"all": 0}
    for group in reversed(members):
        if group not in found:
            found[group] = 1 + max((found[p] for p in parents.get(group, ()) if p != group), default=0)
    return found


def _ssh_args(value: tuple[str, int], key: str) -> tuple[str | None, str | None, int | None, list[str]]:
    """``ansible_ssh_common_args``/``_extra_args``: ``-J``, ``-o Key=Value``, ``-p``, ``-l``, ``-i``
    (jump, user, port, options); anything else refuses the inventory, naming it."""
    text, number = value
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InventoryError(number, f"cannot split {key} ({exc})") from None
    jump: str | None = None
    user: str | None = None
    port: int | None = None
    options: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        flag, inline = word[:2], word[2:]
        if flag not in ("-J", "-o", "-p", "-l", "-i") or not word.startswith("-"):
            raise InventoryError(
                number, f"{key}: {word!r} is not an ssh option sysmcp passes on (-J, -o, -p, -l, -i)"
            )
        if not inline:
            index += 1
            if index == len(words):
                raise InventoryError(number, f"{key}: {flag} needs a value")
            inline = words[index]
        index += 1
        if inline.startswith("-") or not inline.strip():
            raise InventoryError(number, f"{key}: the value of {flag} must not start with '-': {inline!r}")
        if flag == "-J":
            jump = _word(f"{key}: -J", inline, number)
        elif flag == "-l":
            user = _word(f"{key}: -l", inline, number)
        elif flag == "-i":
            options.append(_key_file(inline))
        elif flag == "-p":
            port = _port(inline, number, f"{key}: -p needs a port number")
        else:
            if not _OPTION.fullmatch(inline) or inline.split("=", 1)[0].lower() in _NOT_FROM_INVENTORY:
                raise InventoryError(number, f"{key}: -o {inline!r} is not a Key=Value sysmcp passes on")
            option, setting = inline.split("=", 1)
            if option.lower() == "proxyjump":
                jump = _word(f"{key}: ProxyJump", setting.strip(), number)
            elif option.lower() in ("hostname", "user"):  # checked as ansible_host and ansible_user are
                options.append(f"{option}={_word(f'{key}: {option}', setting.strip(), number)}")
            else:
                options.append(inline)
    return jump, user, port, options


def _word(key: str, value: str, number: int) -> str:
    """An address, user or jump that reaches ssh: one word, not an option, nothing a shell reads. Nor
    a jump's later hop: ssh hands ``b,-oProxyCommand=x``'s rest to another ssh as its ``-J`` value."""
    if not value or any(hop.startswith("-") for hop in value.split(",")) or _SHELL.search(value):
        raise InventoryError(
            number,
            f"{key} must be one word not starting with '-' (nor after a comma), without shell characters, "
            f"got {value!r}",
        )
    return value


def _port(text: str, number: int, what: str) -> int:
    if not _small_number(text) or not 0 < int(text) < 65536:
        raise InventoryError(number, f"{what}, got {text!r}")
    return int(text)


def _key_file(path: str) -> str:
    """``IdentityFile=PATH`` as ssh's ``-o`` reads it: a path with a space in quotes (ssh splits the rest)."""
    return f'IdentityFile="{path}"' if any(c.isspace() for c in path) else f"IdentityFile={path}"


def _host(name: str, variables: dict[str, tuple[str, int]]) -> Host:
    for old, new in ALIASES.items():
        if old in variables and new not in variables:
            variables = {**variables, new: variables[old]}

    def get(key: str) -> str | None:
        value = variables.get(key)
        return value[0] if value is not None else None

    port: int | None = None
    if (raw_port := variables.get("ansible_port")) is not None:
        port = _port(*raw_port, "ansible_port must be a port number")
    for key in ("ansible_host", "ansible_user"):
        if (value := variables.get(key)) is not None:
            _word(key, value[0], value[1])
    command = variables.get("sysmcp_command")
    if command is not None and not command[0].strip():
        raise InventoryError(command[1], "sysmcp_command is empty")
    jump: str | None = None
    options: list[str] = []
    user = get("ansible_user")
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):  # Ansible's order: extra last
        if (args := variables.get(key)) is not None:
            more_jump, more_user, more_port, more = _ssh_args(args, key)
            jump, user, port = more_jump or jump, more_user or user, more_port or port
            options += more
    if (key_file := variables.get("ansible_ssh_private_key_file")) is not None:
        if key_file[0].startswith("-") or not key_file[0].strip():
            raise InventoryError(key_file[1], "ansible_ssh_private_key_file must be a path")
        options.append(_key_file(key_file[0]))
    connection = _connection(get("ansible_connection"))
    return Host(
        name, get("ansible_host"), port, user, get("sysmcp_command"), jump, tuple(options), connection
    )


#: ansible_connection values that are OpenSSH or stand in for it (paramiko speaks the same protocol).
SSH_CONNECTIONS = frozenset({"ssh", "smart", "paramiko", "paramiko_ssh"})


def _connection(given: str | None) -> str | None:
    """A host's ansible_connection as ``Host.connection``: None for ssh, ``local``, or the plugin named."""
    value = (given or "ssh").strip()
    short = value.removeprefix("ansible.builtin.").removeprefix("ansible.legacy.")  # both hold the built-ins
    if short in SSH_CONNECTIONS:
        return None
    return "local" if short == "local" else value


__all__ = [
    "Host",
    "Inventory",
    "InventoryError",
    "UnknownHosts",
    "expand",
    "from_names",
    "merge",
    "parse_ini",
    "split_hosts_env",
]
