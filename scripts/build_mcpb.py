"""Build ``dist/sysmcp-<version>.mcpb``: a Claude Desktop bundle (MCPB manifest v0.4, server type ``uv``).

The bundle carries sysmcp's own sources (so it needs no PyPI release of sysmcp) and a small
``pyproject.toml`` naming the runtime dependencies; the host's uv makes the environment. The
directories the user picks in the host's settings (``user_config.roots``, several allowed) reach
``server/main.py`` as arguments, one per directory, and become ``--root`` options.

    python scripts/build_mcpb.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sysmcp import __version__  # noqa: E402
from sysmcp.tools import ALL_TOOLS  # noqa: E402

#: Fixed timestamp for every member: the same sources give the same bundle bytes.
EPOCH = (2020, 2, 2, 0, 0, 0)

ENTRY_POINT = '''\
"""sysmcp as a Claude Desktop bundle: each argument is a directory the user chose (a --root)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sysmcp.cli import main  # noqa: E402

# An unset choice may arrive empty or as the unexpanded placeholder: neither is a root.
roots = [arg for arg in sys.argv[1:] if arg and not arg.startswith("${")]
sys.argv = ["sysmcp", *(part for root in roots for part in ("--root", root))]
main()
'''

BUNDLE_README = """\
# sysmcp bundle

Read-only sysadmin tools for MCP. Installed by Claude Desktop from the .mcpb file; the host's uv
creates the environment from pyproject.toml and runs server/main.py. See the sysmcp README.
"""


def manifest() -> dict[str, Any]:
    return {
        "manifest_version": "0.4",
        "name": "sysmcp",
        "display_name": "sysmcp — sysadmin tools",
        "version": __version__,
        "description": "Read-only sysadmin tools: which disk is full, what fills a directory, duplicate "
        "files, checksums.",
        "long_description": "sysmcp answers questions about this machine's storage and files and never "
        "changes anything: disk usage per filesystem (df), what fills a directory (du, with a treemap view "
        "in hosts that show MCP Apps), duplicate files, SHA-256 and checksum manifests. Choose directories "
        "below to confine it; without any, the whole filesystem is in scope.",
        "author": {"name": "sysmcp developers"},
        "server": {
            "type": "uv",
            "entry_point": "server/main.py",
            "mcp_config": {
                "command": "uv",
                "args": [
                    "run",
                    "--quiet",
                    "--directory",
                    "${__dirname}",
                    "server/main.py",
                    "${user_config.roots}",
                ],
            },
        },
        "tools": [{"name": tool.name, "description": tool.title} for tool in ALL_TOOLS],
        "user_config": {
            "roots": {
                "type": "directory",
                "title": "Directories sysmcp may look at",
                "description": "Every tool is confined to these directories (and what is below them). "
                "Leave empty to allow the whole filesystem, read-only.",
                "multiple": True,
                "required": False,
            }
        },
        "compatibility": {"platforms": ["linux", "darwin"], "runtimes": {"python": ">=3.11"}},
        "keywords": ["sysadmin", "disk", "du", "df", "checksum", "duplicates"],
        "license": "MIT",
    }


def bundle_pyproject() -> str:
    """The runtime dependencies of sysmcp, for a project uv runs without installing it as a package."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    dependencies = ", ".join(json.dumps(dep) for dep in project["dependencies"])
    return (
        "[project]\n"
        'name = "sysmcp-bundle"\n'
        f'version = "{__version__}"\n'
        f'requires-python = "{project["requires-python"]}"\n'
        f"dependencies = [{dependencies}]\n\n"
        "[tool.uv]\n"
        "package = false\n"
    )


def sources() -> list[Path]:
    """sysmcp's package files as the wheel has them: code, views, py.typed; no caches."""
    found = [
        path
        for path in sorted((REPO / "sysmcp").rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo")
    ]
    return found


def build(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"sysmcp-{__version__}.mcpb"
    members: list[tuple[str, bytes]] = [
        ("manifest.json", (json.dumps(manifest(), indent=2, ensure_ascii=False) + "\n").encode()),
        ("pyproject.toml", bundle_pyproject().encode()),
        ("README.md", BUNDLE_README.encode()),
        ("server/main.py", ENTRY_POINT.encode()),
        ("LICENSE", (REPO / "LICENSE").read_bytes()),  # the manifest says MIT: the text travels with it
    ]
    members += [(path.relative_to(REPO).as_posix(), path.read_bytes()) for path in sources()]
    partial = target.with_suffix(".part")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name, EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    partial.replace(target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="output directory (default: dist/)")
    print(build(parser.parse_args().out))


if __name__ == "__main__":
    main()
