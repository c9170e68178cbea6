"""What a test needs, read from its source, as the markers ``tests/conftest.py`` puts on it at collection:

- ``root``: root, mount namespaces, loop filesystems or sshd (``unshare``, ``mkfs``, ``setpriv``, a
  skip unless ``geteuid() == 0``);
- ``spawns_server``: starts a sysmcp process (``tests.wire.spawn``, ``SERVER``, ``-m sysmcp`` in an argv
  or a shell line);
- ``interop``: drives another MCP client (node, the SDKs, a browser): anything from ``tests/interop``.

A test carries a marker when its own source (decorators included) shows the sign, or when a helper,
constant or fixture it names does, in its module or imported from another module of ``tests`` (at the
top of the module or in the test's own body): a test calling a local ``session()`` that runs
``-m sysmcp`` spawns a server. ``slow`` is put by hand.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

SIGNS = {
    "root": re.compile(r"\bunshare\b|\bmkfs\b|\blosetup\b|\bsetpriv\b|\bgeteuid\(\) != 0|\bsshd\b"),
    "spawns_server": re.compile(
        r'(?<![.\w])spawn\(|\bSERVER\b|"-m",\s*"sysmcp"|-m sysmcp\b|run_module\(\s*"sysmcp"'
    ),
}
INTEROP = "tests.interop"
TESTS = Path(__file__).resolve().parent


class _Module:
    """A module of ``tests``: each top-level name's own markers, what it names, and its imports."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.own: dict[str, set[str]] = {}
        self.refs: dict[str, set[str]] = {}
        self.imported: dict[str, tuple[str, str]] = {}  # local name → (module of tests, its name)
        self.imported_within: dict[str, dict[str, tuple[str, str]]] = {}  # the same, inside one definition
        path = TESTS.parent.joinpath(*name.split(".")).with_suffix(".py")
        if not path.exists():
            path = path.with_suffix("") / "__init__.py"
        source = path.read_text(encoding="utf-8") if path.exists() else ""
        lines = source.splitlines()
        interop = name == INTEROP or name.startswith(INTEROP + ".")
        for node in ast.parse(source).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests"):
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = (node.module or "", alias.name)
                continue
            names = _defined(node)
            if not names:
                continue
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            text = "\n".join(lines[first - 1 : node.end_lineno])
            marks = {marker for marker, sign in SIGNS.items() if sign.search(text)}
            if interop:
                marks.add("interop")
            refs = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            within = _imports_of_tests(node)
            for defined in names:
                self.own[defined] = marks
                self.refs[defined] = refs - {defined}
                self.imported_within[defined] = within


def _imports_of_tests(node: ast.stmt) -> dict[str, tuple[str, str]]:
    """What a definition imports from ``tests`` in its own body (``from tests.x import y`` in a test)."""
    return {
        alias.asname or alias.name: (inner.module or "", alias.name)
        for inner in ast.walk(node)
        if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("tests")
        for alias in inner.names
    }


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


@functools.cache
def _module(name: str) -> _Module:
    return _Module(name)


def markers(module: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> set[str]:
    """The markers of ``name`` in the module ``module`` of ``tests``, through what it names."""
    if (module, name) in seen or not (module == "tests" or module.startswith("tests.")):
        return set()
    seen |= {(module, name)}
    found = _module(module)
    if name in found.imported:
        return markers(*found.imported[name], seen)
    marks = set(found.own.get(name, set()))
    within = found.imported_within.get(name, {})
    for ref in found.refs.get(name, set()):
        marks |= markers(*within[ref], seen) if ref in within else markers(module, ref, seen)
    return marks


def item_markers(module: str, function: str, fixtures: list[str]) -> set[str]:
    """A test's markers: its function's, and those of the fixtures it uses (its module's or conftest's)."""
    marks = markers(module, function)
    for fixture in fixtures:
        marks |= markers(module, fixture) | markers("tests.conftest", fixture)
    return marks
