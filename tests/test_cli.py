"""The command line as users run it: ``sysmcp --version``, ``sysmcp call``, the terminal hint."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from sysmcp import __version__
from sysmcp.cli.call import key_value

SYSMCP = [sys.executable, "-m", "sysmcp"]


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SYSMCP, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def test_version_prints_the_package_version() -> None:
    done = run("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"sysmcp {__version__}"


def test_call_prints_the_tool_text_and_exits_zero(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"abc")
    done = run("call", "file_sha256", f"path={tmp_path / 'a.txt'}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  ")


def test_call_exits_non_zero_on_a_tool_error(tmp_path: Path) -> None:
    done = run("call", "file_sha256", f"path={tmp_path / 'missing'}")
    assert done.returncode == 1 and "No such file" in done.stderr and done.stdout == ""


def test_call_parses_json_values_and_reports_bad_arguments(tmp_path: Path) -> None:
    done = run("call", "dir_usage", f"path={tmp_path}", "top_n=99")
    assert done.returncode == 2 and "'top_n' must be <= 50" in done.stderr


def test_call_raw_shows_both_directions_of_the_wire() -> None:
    done = run("call", "--raw", "disk_usage", "path=/")
    lines = done.stdout.splitlines()
    assert done.returncode == 0
    assert any(line.startswith('→ {"jsonrpc":"2.0","id":1,"method":"initialize"') for line in lines)
    assert any(line.startswith("← ") and '"structuredContent"' in line for line in lines)


def test_call_shows_progress_on_stderr(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"\0" * (8 << 20))
    done = run("call", "file_sha256", f"path={big}")
    assert done.returncode == 0 and "progress:" in done.stderr and "progress:" not in done.stdout


def test_a_malformed_key_value_is_a_usage_error_in_one_line() -> None:
    done = run("call", "disk_usage", "pathslash")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "sysmcp call: expected KEY=VALUE, got 'pathslash'\n"


def test_a_code_of_digits_only_stays_the_text_the_tool_takes_while_numbers_stay_numbers() -> None:
    # reclaim's confirmation code and plan id are hex, so digits only now and then: "call reclaim
    # again with confirm='4817290356'" must work from the shell too, not fail as "must be a string".
    assert key_value("confirm=4817290356", "reclaim") == ("confirm", "4817290356")
    assert key_value("plan_id=123456789012", "reclaim") == ("plan_id", "123456789012")
    assert key_value("top_n=3", "dir_usage") == ("top_n", 3)
    assert key_value('items=["a"]', "reclaim") == ("items", ["a"])


def test_nan_infinity_and_an_overflowing_number_are_refused_as_usage_errors_not_a_traceback() -> None:
    # Python's json reads NaN and Infinity; JSON has no such number and the wire cannot carry one.
    assert key_value("timeout_s=NaN", "dir_usage") == ("timeout_s", "NaN")
    assert key_value("timeout_s=1e400", "dir_usage") == ("timeout_s", "1e400")
    assert key_value("timeout_s=2.5", "dir_usage") == ("timeout_s", 2.5)
    done = run("call", "dir_usage", "path=/usr", "timeout_s=NaN")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == (
        "sysmcp call: Invalid arguments: 'timeout_s' must be a number, got string 'NaN'"
        " (see: sysmcp call dir_usage --help)\n"
    )


def test_options_after_the_subcommand_mean_what_they_mean_before_it(tmp_path: Path) -> None:
    refused = run("serve", "--root", str(tmp_path / "nope"))
    assert refused.returncode == 2 and "--root" in refused.stderr
    (tmp_path / "a.txt").write_bytes(b"abc")
    outside = run("call", "--root", str(tmp_path), "file_sha256", "path=/etc/hostname")
    assert outside.returncode == 2 and "outside the operator's roots" in outside.stderr
    inside = run(
        "--root", str(tmp_path), "call", "--log-level", "ERROR", "file_sha256", f"path={tmp_path / 'a.txt'}"
    )
    assert inside.returncode == 0 and inside.stdout.startswith("ba7816bf")


def test_roots_given_before_and_after_the_subcommand_add_up(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for root in (first, second):
        root.mkdir()
        (root / "a.txt").write_bytes(b"abc")
    for root in (first, second):
        done = run(
            "--root", str(first), "call", "--root", str(second), "file_sha256", f"path={root / 'a.txt'}"
        )
        assert done.returncode == 0 and done.stdout.startswith("ba7816bf"), done.stdout
    outside = run("--root", str(first), "call", "--root", str(second), "file_sha256", "path=/etc/hostname")
    assert outside.returncode == 2 and "outside the operator's roots" in outside.stderr


def test_every_log_line_on_stderr_is_json_including_library_logs() -> None:
    done = run("--log-level", "debug")  # stdin is /dev/null: serve, then stop at end of input
    lines = done.stderr.splitlines()
    assert done.returncode == 0 and done.stdout == ""
    records = [json.loads(line) for line in lines]
    assert any(r.get("logger") == "asyncio" for r in records)  # a standard-library logger, as JSON
    assert all({"event", "level", "timestamp"} <= r.keys() for r in records)


def test_a_root_that_does_not_exist_is_refused_at_start(tmp_path: Path) -> None:
    done = run("--root", str(tmp_path / "nope"))
    assert done.returncode == 2 and "--root" in done.stderr


@pytest.mark.anyio
async def test_on_a_terminal_it_prints_a_hint_on_stderr_and_keeps_serving() -> None:
    primary, secondary = pty.openpty()
    try:
        process = await anyio.open_process(
            SYSMCP, stdin=secondary, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        async with process:
            assert process.stderr is not None
            seen = b""
            with anyio.fail_after(20):
                while b"sysmcp call" not in seen:
                    seen += await process.stderr.receive()
            assert b"Model Context Protocol" in seen
            assert process.returncode is None  # still waiting for a client, not exited
            process.terminate()
            with anyio.fail_after(5):
                assert await process.wait() == 0
    finally:
        os.close(primary)
        os.close(secondary)


def test_serving_with_stdin_from_dev_null_or_a_file_exits_zero_at_end_of_input(tmp_path: Path) -> None:
    empty = subprocess.run(SYSMCP, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert empty.returncode == 0 and empty.stdout == b"", empty.stderr
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    with requests.open("rb") as stdin:
        done = subprocess.run(SYSMCP, stdin=stdin, capture_output=True, timeout=30)
    assert done.returncode == 0 and done.stdout == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'


@pytest.mark.spawns_server  # the README's lines run the sysmcp command of this environment
def test_the_readme_checksum_example_runs_as_written(tmp_path: Path) -> None:
    """It assumed /tmp/srv/www existed and hid every line, so "exit status 1" came of any failure."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = next(
        b for b in re.findall(r"```console\n(.*?)```", readme, flags=re.S) if "verify_checksums" in b
    )
    block = block.replace("/tmp/srv", str(tmp_path / "srv"))
    script = "\n".join(line[2:] for line in block.splitlines() if line.startswith("$ "))
    shown = [line for line in block.splitlines() if not line.startswith("$ ")]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    said = (done.stdout + done.stderr).splitlines()
    said = [line for line in said if not line.startswith("progress:")]
    timing = re.compile(r"hashed in [\d.]+ s")  # the one part that differs from run to run
    assert sorted(timing.sub("", line) for line in said) == sorted(timing.sub("", line) for line in shown)
