"""Fleet in one room: the tools layer never imports the fleet, and the registry knows no fleet at all
(the circle registry ↔ merging, once hidden by a function-level import, stays gone)."""

from __future__ import annotations

import ast
from pathlib import Path

import sysmcp

PACKAGE = Path(sysmcp.__file__).parent


def imported(path: Path) -> set[str]:
    """Every module a file imports, at any depth of the file (function-level imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_tools_layer_never_imports_the_fleet() -> None:
    for path in sorted((PACKAGE / "tools").glob("*.py")):
        assert not {m for m in imported(path) if m.startswith("sysmcp.fleet")}, path.name


def test_the_registry_imports_nothing_fleet_shaped() -> None:
    assert not imported(PACKAGE / "tools" / "registry.py") & {"sysmcp.tools.merging", "sysmcp.fleet"}


def test_the_server_reaches_the_fleet_only_through_its_gateway() -> None:
    fleet = {
        m
        for m in imported(PACKAGE / "server" / "methods.py")
        if m.startswith("sysmcp.fleet") or m == "sysmcp.tools.merging"
    }
    assert fleet == {"sysmcp.fleet.gateway"}
