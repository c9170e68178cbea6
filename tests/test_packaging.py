"""The packages hosts install from: the MCP Registry's server.json, the Claude Desktop bundle, the wheel."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator, Draft202012Validator, FormatChecker

from sysmcp import __version__
from sysmcp.cli import ROOTS_ENV, build_parser
from sysmcp.server import SERVER_DETAILS
from sysmcp.tools import ALL_TOOLS
from tests.wire import answered_session

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = Path(__file__).parent / "schemas"
VIEW_FILES = {
    "sysmcp/views/dir-usage.html",
    "sysmcp/views/disks.html",
    "sysmcp/views/head.html",
    "sysmcp/views/body.html",
    "sysmcp/views/bridge.js",
}


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def errors(validator: Draft7Validator | Draft202012Validator, value: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)]


# -- server.json ---------------------------------------------------------------------------------

SERVER_JSON = load(REPO / "server.json")


def test_server_json_is_valid_against_the_registry_schema() -> None:
    schema = load(SCHEMAS / "registry" / "server.schema.json")
    validator = Draft202012Validator(schema, format_checker=FormatChecker())
    assert errors(validator, SERVER_JSON) == []
    assert (
        SERVER_JSON["$schema"]
        == "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
    )


def test_the_registry_schema_rejects_a_broken_server_json() -> None:
    """The check above can fail: a name without a namespace and a version range are refused."""
    schema = load(SCHEMAS / "registry" / "server.schema.json")
    broken = json.loads(json.dumps(SERVER_JSON))
    broken["name"] = "sysmcp"
    broken["packages"][0]["version"] = "latest"
    assert len(errors(Draft202012Validator(schema), broken)) == 2


def test_server_json_names_the_pypi_package_over_stdio_at_this_version() -> None:
    assert SERVER_JSON["version"] == __version__
    (package,) = SERVER_JSON["packages"]
    assert (package["registryType"], package["identifier"], package["version"]) == (
        "pypi",
        "sysmcp",
        __version__,
    )
    assert package["transport"] == {"type": "stdio"}
    assert package["runtimeHint"] == "uvx"


def test_server_json_documents_every_environment_variable_and_the_options_sysmcp_reads() -> None:
    (package,) = SERVER_JSON["packages"]
    read = set()
    for source in (REPO / "sysmcp").rglob("*.py"):
        read |= set(re.findall(r"\"(SYSMCP_[A-Z_]+)\"", source.read_text(encoding="utf-8")))
    documented = {variable["name"] for variable in package["environmentVariables"]}
    assert ROOTS_ENV in documented
    assert documented == read
    options = {action for a in build_parser()._actions for action in a.option_strings}
    for argument in package["packageArguments"]:
        assert argument["name"] in options
        assert argument["description"]


def test_the_readme_carries_the_mcp_name_line_the_registry_checks() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"mcp-name: {SERVER_JSON['name']}" in readme


# -- the .mcpb bundle ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mcpb")
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_mcpb.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path == out / f"sysmcp-{__version__}.mcpb"
    return path


@pytest.mark.slow  # builds the bundle
def test_the_bundle_manifest_is_valid_against_the_v0_4_schema(bundle: Path) -> None:
    with zipfile.ZipFile(bundle) as archive:
        manifest = json.loads(archive.read("manifest.json"))
    schema = load(SCHEMAS / "mcpb" / "mcpb-manifest-v0.4.schema.json")
    assert errors(Draft7Validator(schema, format_checker=FormatChecker()), manifest) == []
    assert manifest["manifest_version"] == "0.4" and manifest["version"] == __version__
    assert manifest["server"]["type"] == "uv"
    roots = manifest["user_config"]["roots"]
    assert (roots["type"], roots["multiple"], roots["required"]) == ("directory", True, False)
    assert "${user_config.roots}" in manifest["server"]["mcp_config"]["args"]
    assert [tool["name"] for tool in manifest["tools"]] == [tool.name for tool in ALL_TOOLS]


@pytest.mark.slow  # builds the bundle
def test_the_bundle_holds_the_sources_the_views_and_its_entry_point(bundle: Path) -> None:
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
        assert {
            "manifest.json",
            "pyproject.toml",
            "server/main.py",
            "sysmcp/cli/__init__.py",
            "LICENSE",
        } <= names
        assert names >= VIEW_FILES
        assert not [n for n in names if "__pycache__" in n or n.startswith((".venv", "server/lib"))]
        assert "package = false" in archive.read("pyproject.toml").decode()


@pytest.mark.slow  # builds the bundle and runs it
def test_the_bundle_runs_as_the_host_would_start_it_with_the_chosen_roots(
    bundle: Path, tmp_path: Path
) -> None:
    """The manifest's command, with ${__dirname} and the two chosen directories substituted."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    home = tmp_path / "extension"
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(home)
        config = json.loads(archive.read("manifest.json"))["server"]["mcp_config"]
    chosen = [tmp_path / "srv", tmp_path / "logs"]
    for root in chosen:
        root.mkdir()
    (chosen[0] / "data").write_bytes(b"x" * 10_000)
    args: list[str] = []
    for arg in config["args"]:
        if arg == "${user_config.roots}":
            args += [str(root) for root in chosen]  # a multiple choice expands to one argument each
        else:
            args.append(arg.replace("${__dirname}", str(home)))
    assert config["command"] == "uv"
    lines: list[dict[str, Any]] = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "dir_usage", "arguments": {"path": str(chosen[0])}},
        },
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "dir_usage", "arguments": {"path": str(tmp_path)}},
        },
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", ROOTS_ENV)}
    replies, stderr, _ = answered_session([uv, *args], lines, env=env, timeout=300)
    assert {1, 2, 3} <= replies.keys(), stderr[-2000:]
    assert replies[1]["result"]["serverInfo"] == {
        "name": "sysmcp",
        "version": __version__,
        "title": "sysmcp — sysadmin tools",
        **SERVER_DETAILS,  # 2025-11-25: website, description, icon
    }
    assert replies[2]["result"]["structuredContent"]["totals"]["files"] == 1
    refused = replies[3]["result"]
    assert refused["isError"] and "outside the operator's roots" in refused["content"][0]["text"]


# -- the wheel -----------------------------------------------------------------------------------


@pytest.mark.slow  # builds the wheel
def test_the_wheel_ships_the_views(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    done = subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("sysmcp-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert VIEW_FILES | {"sysmcp/views/common.css", "sysmcp/views/__init__.py"} <= set(archive.namelist())
