"""Valid, minimal arguments for every tool sysmcp lists, built on real files in a temporary directory.

Known tools get hand-written rows that must succeed. A tool added later without a row still gets
called, with arguments made from its input schema, so the interop tests keep covering ALL_TOOLS; such
a call only has to complete (it may report a business error) until someone adds its row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

Fixture = Callable[[Path], dict[str, Any]]


def make_files(root: Path) -> dict[str, Path]:
    """A small tree: a few files of different sizes, a duplicate pair and a sha256sum manifest."""
    tree = root / "tree"
    (tree / "sub").mkdir(parents=True, exist_ok=True)
    files = {
        "small": tree / "small.txt",
        "big": tree / "sub" / "big.bin",
        "copy": tree / "sub" / "copy.txt",
    }
    files["small"].write_bytes(b"hello sysmcp\n")
    files["big"].write_bytes(bytes(range(256)) * 4096)  # 1 MiB: enough for a progress notification
    files["copy"].write_bytes(b"hello sysmcp\n")
    manifest = root / "SHA256SUMS"
    manifest.write_text(
        "".join(
            f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.relative_to(tree).as_posix()}\n"
            for path in (files["small"], files["big"])
        )
    )
    return {"tree": tree, "manifest": manifest, **files}


ROWS: dict[str, Fixture] = {
    "disk_usage": lambda root: {"path": str(root / "tree")},
    "dir_usage": lambda root: {"path": str(root / "tree")},
    "file_sha256": lambda root: {"path": str(root / "tree" / "sub" / "big.bin")},
    "hash_tree": lambda root: {"path": str(root / "tree")},
    "verify_checksums": lambda root: {"manifest": str(root / "SHA256SUMS"), "base_dir": str(root / "tree")},
    "find_duplicates": lambda root: {"path": str(root / "tree")},
    "deleted_open_files": lambda root: {"path": str(root / "tree")},
    "disk_io": lambda root: {"sample_s": 0.2},
    "disk_health": lambda root: {"timeout_s": 5},
    "what_changed": lambda root: {"path": str(root / "tree")},
}

#: Tools that report progress for these arguments (their work runs in a metered worker).
REPORTS_PROGRESS = frozenset({"dir_usage", "file_sha256"})


def from_schema(schema: dict[str, Any], root: Path) -> dict[str, Any]:
    """Required arguments only, each with the plainest valid value its schema allows."""
    arguments: dict[str, Any] = {}
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        spec = properties.get(name, {})
        if "default" in spec:
            arguments[name] = spec["default"]
        elif "enum" in spec:
            arguments[name] = spec["enum"][0]
        elif spec.get("type") == "integer":
            arguments[name] = max(int(spec.get("minimum", 1)), 1)
        elif spec.get("type") == "number":
            arguments[name] = float(spec.get("minimum", 1))
        elif spec.get("type") == "boolean":
            arguments[name] = False
        elif spec.get("type") == "array":
            arguments[name] = []
        elif "path" in name or "dir" in name or "file" in name:
            arguments[name] = str(root / "tree")
        else:
            arguments[name] = "x"
    return arguments


def plan(tools: dict[str, dict[str, Any]], root: Path) -> dict[str, tuple[dict[str, Any], bool]]:
    """For each tool name (→ input schema): its arguments, and whether the call must succeed."""
    make_files(root)
    return {
        name: (ROWS[name](root), True) if name in ROWS else (from_schema(schema, root), False)
        for name, schema in tools.items()
    }
