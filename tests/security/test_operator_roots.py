"""The operator's roots (``--root``, ``SYSMCP_ROOTS``) over real pipes, and how the command line checks them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sysmcp.engine.paths import real_root
from tests.wire import SERVER, result_text, spawn

pytestmark = pytest.mark.anyio


@pytest.fixture
def base(tmp_path: Path) -> Path:
    base = real_root(tmp_path)
    for name in ("srv", "srv-evil", "other"):
        (base / name).mkdir()
        (base / name / "f.txt").write_text(name)
    (base / "srv" / "out").symlink_to(base / "other")
    return base


async def test_root_flag_confines_every_tool_and_refusals_name_the_rule(base: Path) -> None:
    async with spawn("--root", str(base / "srv")) as wire:
        init = await wire.initialize()
        assert str(base / "srv") in init["result"]["instructions"]
        assert not (await wire.call("file_sha256", {"path": str(base / "srv" / "f.txt")}))["result"][
            "isError"
        ]
        for path in (
            base / "srv-evil" / "f.txt",
            base / "srv" / "out" / "f.txt",
            base / "srv" / ".." / "other",
        ):
            for tool in ("file_sha256", "dir_usage", "disk_usage"):
                reply = await wire.call(tool, {"path": str(path)})
                assert reply["result"]["isError"], (tool, path)
                text = result_text(reply)
                assert "outside the operator's roots" in text
                assert str(base / "other") not in text  # the hidden target is never named


async def test_roots_environment_variable_confines_like_the_flag(base: Path) -> None:
    async with spawn(env={"SYSMCP_ROOTS": f"{base / 'srv'}:{base / 'srv-evil'}"}) as wire:
        await wire.initialize()
        assert not (await wire.call("file_sha256", {"path": str(base / "srv-evil" / "f.txt")}))["result"][
            "isError"
        ]
        assert (await wire.call("file_sha256", {"path": str(base / "other" / "f.txt")}))["result"]["isError"]


async def test_a_symlinked_root_is_resolved_once_at_start(base: Path) -> None:
    (base / "alias").symlink_to(base / "srv")
    async with spawn("--root", str(base / "alias")) as wire:
        await wire.initialize()
        assert not (await wire.call("file_sha256", {"path": str(base / "srv" / "f.txt")}))["result"][
            "isError"
        ]
        assert not (await wire.call("file_sha256", {"path": str(base / "alias" / "f.txt")}))["result"][
            "isError"
        ]


def test_roots_that_name_nothing_are_refused_instead_of_widening_to_everything(base: Path) -> None:
    for args, env in (
        (["--root", str(base / "missing")], {}),
        (["--root", str(base / "srv" / "f.txt")], {}),
        ([], {"SYSMCP_ROOTS": ":"}),
    ):
        done = subprocess.run(
            [*SERVER, *args], env={"PATH": "/usr/bin:/bin", **env}, input=b"", capture_output=True
        )
        assert done.returncode == 2, (args, env, done.stderr)
        assert done.stdout == b""
        assert b"SYSMCP_ROOTS" in done.stderr or b"--root" in done.stderr
