"""The layering rules of docs/ARCHITECTURE.md, checked on the source: imports parsed with ``ast``,
against the import table read from ARCHITECTURE.md itself (one table, never two to keep in step).

Why parse instead of import: an import rule broken inside a function (a lazy import that hides a
circle) is as broken as one at the top, and parsing sees both without running anything.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "sysmcp"
ARCHITECTURE = PACKAGE.parent / "docs" / "ARCHITECTURE.md"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, name: str, *, top_level_only: bool) -> Iterator[str]:
    """The sysmcp modules ``name``'s source imports (``from a import b``: ``a.b`` when it is a module)."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                continue  # annotations only: no import at run time
            if top_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(child, ast.Import):
                yield from (alias.name for alias in child.names if alias.name.startswith("sysmcp"))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                if not base.startswith("sysmcp"):
                    continue
                for alias in child.names:
                    yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
            else:
                pending.append(child)


def import_graph(*, top_level_only: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[name] = {
            found for found in _imports(tree, name, top_level_only=top_level_only) if found != name
        }
    return graph


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start] & graph.keys())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child] & graph.keys()))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


GRAPH = import_graph(top_level_only=False)


def test_the_graph_sees_imports_at_any_depth() -> None:
    # The parser itself: the server's imports are known, and a function-level import counts.
    assert "sysmcp.tools.registry" in GRAPH["sysmcp.server.methods"]
    assert "sysmcp.engine.walk" in GRAPH["sysmcp.engine.usage"]
    assert {"sysmcp.server", "sysmcp.protocol.session"} <= GRAPH["sysmcp.cli.serve"]  # imported in functions


def import_table(text: str) -> dict[str, set[str]]:
    """ARCHITECTURE.md's "What may import what": each row's rooms → the rooms it may import (the
    backquoted names of its second cell; words in parentheses are comments)."""
    section = text.split("## What may import what", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 2 or not cells[0].startswith("`"):
            continue  # prose, the header or its rule
        allowed = set(re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", cells[1])))
        for room in re.findall(r"`([^`]+)`", cells[0]):
            assert room not in table, f"{room} has two rows"
            table[room] = allowed
    return table


def room_of(module: str) -> str:
    """The room of a sysmcp module as the table names it: ``engine/``, ``render.py``, ``__init__.py``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    return f"{parts[1]}/" if (PACKAGE / parts[1]).is_dir() else f"{parts[1]}.py"


TABLE = import_table(ARCHITECTURE.read_text(encoding="utf-8"))


def room_imports() -> dict[str, dict[str, set[str]]]:
    """Each room → each room it imports → the modules of it that do (at any depth)."""
    found: dict[str, dict[str, set[str]]] = {}
    for name, imported in GRAPH.items():
        for other in {room_of(module) for module in imported} - {room_of(name)}:
            found.setdefault(room_of(name), {}).setdefault(other, set()).add(name)
    return found


def test_the_import_table_has_one_row_for_each_room_of_sysmcp() -> None:
    assert sorted(TABLE) == sorted({room_of(name) for name in MODULES})
    assert TABLE["platform.py"] == set() and "logconfig.py" in TABLE["protocol/"]  # the table was read
    assert {named for allowed in TABLE.values() for named in allowed} <= set(TABLE)


def test_every_import_is_one_the_table_allows_function_level_ones_included() -> None:
    wrong = {
        f"{importer} imports {other}": sorted(modules)
        for importer, others in room_imports().items()
        for other, modules in others.items()
        if other not in TABLE.get(importer, set())
    }
    assert wrong == {}


def _private_room(module: str) -> str | None:
    """The package whose private module ``module`` is (``sysmcp.engine.walk._walk``: ``sysmcp.engine.walk``)."""
    parts = module.split(".")
    for at, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:at])
    return None


def test_a_room_s_private_modules_are_imported_only_by_that_room() -> None:
    """Other rooms come in by the front door (``from sysmcp.engine.walk import Scanner``), never by a
    module whose name starts with ``_``: a room may then rearrange its inside freely."""
    wrong = {
        f"{importer} imports {module}"
        for importer, imported in GRAPH.items()
        for module in imported
        if (room := _private_room(module)) is not None and not within(importer, (room,))
    }
    assert sorted(wrong) == []


def test_the_table_allows_no_import_the_code_does_not_make() -> None:
    """The map is true to the code both ways: a row naming a room nothing in it imports is stale."""
    made = room_imports()
    stale = {row: sorted(allowed - set(made.get(row, {}))) for row, allowed in TABLE.items()}
    assert {row: rooms for row, rooms in stale.items() if rooms} == {}


def test_the_rooms_of_the_import_table_form_no_circle() -> None:
    """The layers: an engine that may import a tool, or engine/ that may import history/, would close one."""
    assert cycles({row: allowed & TABLE.keys() for row, allowed in TABLE.items()}) == []


def test_no_import_circle_between_modules_at_import_time() -> None:
    assert cycles(import_graph(top_level_only=True)) == []


def test_no_import_circle_even_through_imports_inside_functions() -> None:
    assert cycles(GRAPH) == []


#: Who may fork worker processes and collect their parts: the parallel walk driver (``FanOut`` and
#: ``collect_within`` called only there) and the fork primitive it drives (``os.fork``).
FORKING = {"FanOut", "collect_within", "fork"}
MAY_FORK = {
    "sysmcp.engine.parallel._driver": {"FanOut", "collect_within"},
    "sysmcp.engine.parallel._fork": {"fork"},
}


def _called(tree: ast.AST) -> set[str]:
    """The names of what a module calls (``f(...)`` and ``x.f(...)``: ``f``)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                found.add(node.func.id)
            elif isinstance(node.func, ast.Attribute):
                found.add(node.func.attr)
    return found


def test_only_the_parallel_walk_driver_forks_and_collects_workers() -> None:
    wrong = {
        name: sorted(
            (_called(ast.parse(path.read_text(encoding="utf-8"))) & FORKING) - MAY_FORK.get(name, set())
        )
        for name, path in MODULES.items()
    }
    assert {name: calls for name, calls in wrong.items() if calls} == {}


#: System work an engine does and a tool module never does itself: listing directories, reading
#: links, walking trees (``os.<name>``), and asking psutil about processes, devices or mounts.
SYSTEM_WORK = {"listdir", "scandir", "readlink", "walk", "fwalk"}


def _system_work(tree: ast.AST) -> list[str]:
    """What of ``SYSTEM_WORK`` and psutil a module's source reaches for, at any depth."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "psutil"]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.split(".")[0] == "psutil":
                found.append(node.module)
            elif node.module == "os":
                found += [f"os.{alias.name}" for alias in node.names if alias.name in SYSTEM_WORK]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "os"
            and node.func.attr in SYSTEM_WORK
        ):
            found.append(f"os.{node.func.attr}()")
    return sorted(set(found))


def test_no_tool_module_lists_directories_reads_links_or_asks_psutil() -> None:
    """Issue 22: no tool module holds an engine; the engine layer does the system work."""
    wrong = {
        name: _system_work(ast.parse(path.read_text(encoding="utf-8")))
        for name, path in MODULES.items()
        if within(name, ("sysmcp.tools",))
    }
    assert {name: found for name, found in wrong.items() if found} == {}
