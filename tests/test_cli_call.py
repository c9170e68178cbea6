"""``sysmcp call`` as an admin uses it: exit statuses, help, --json, -o, Ctrl-C, pipes, progress on a terminal.

Every test runs the real command; terminal behaviour is checked on a real pseudo-terminal (``pty``),
where Ctrl-C is the byte 0x03 the terminal turns into SIGINT, as it does for a person.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import anyio
import pytest

from tests.profile import needs_proc

SYSMCP = [sys.executable, "-m", "sysmcp"]
ZERO = "0" * 64


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SYSMCP, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"abc")
    (root / "sub" / "b.txt").write_bytes(b"hello\n")
    return root


class Terminal:
    """A command on a pseudo-terminal: everything it writes (stdout and stderr), and its exit status."""

    def __init__(self, *args: str) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its controlling terminal, stdin, stdout and stderr
            # NOFLSH: a ^C must not make the terminal discard output still queued (a line's end, half a
            # line), which would glue two wire lines together in what the test reads.
            attributes = termios.tcgetattr(0)
            attributes[3] |= termios.NOFLSH
            termios.tcsetattr(0, termios.TCSANOW, attributes)
            os.execv(sys.executable, [*SYSMCP, *args])
        self.output = b""

    def read_until(self, pattern: bytes, timeout: float = 30) -> bytes:
        deadline = time.monotonic() + timeout
        while pattern not in self.output:
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in {self.output[-2000:]!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                assert chunk, f"ended without {pattern!r}: {self.output[-2000:]!r}"
                self.output += chunk
        return self.output

    def wait(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if ready:
                with contextlib.suppress(OSError):  # EIO: the child closed the terminal
                    self.output += os.read(self.fd, 65536)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            assert time.monotonic() < deadline, self.output[-2000:]


def sparse(path: Path, size: int = 64 << 30) -> Path:
    with path.open("wb") as handle:
        handle.truncate(size)  # nothing on disk, minutes to hash: surely still running when interrupted
    return path


# -- exit statuses as the replaced tools ------------------------------------------------------------


def test_a_digest_mismatch_exits_1_and_a_match_0(tree: Path) -> None:
    digest = hashlib.sha256(b"abc").hexdigest()
    good = run("call", "file_sha256", f"path={tree / 'a.txt'}", f"expected={digest}")
    assert good.returncode == 0 and "MISMATCH" not in good.stdout
    bad = run("call", "file_sha256", f"path={tree / 'a.txt'}", f"expected={ZERO}")
    assert bad.returncode == 1 and "MISMATCH" in bad.stdout


def test_verify_checksums_not_all_ok_exits_1_like_sha256sum_c(tree: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text(f"{hashlib.sha256(b'abc').hexdigest()}  a.txt\n")
    assert run("call", "verify_checksums", f"manifest={manifest}", f"base_dir={tree}").returncode == 0
    manifest.write_text(f"{ZERO}  a.txt\n")
    failed = run("call", "verify_checksums", f"manifest={manifest}", f"base_dir={tree}")
    assert failed.returncode == 1 and "FAILED" in failed.stdout


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file: nothing would be unreadable")
def test_hash_tree_with_an_unreadable_file_prints_the_result_and_exits_1(tree: Path) -> None:
    (tree / "sub" / "b.txt").chmod(0)
    done = run("call", "hash_tree", f"path={tree}")
    assert done.returncode == 1 and "a.txt" in done.stdout


def test_hash_tree_exit_status_counts_unreadable_files_and_directories() -> None:
    from sysmcp.cli.call import exit_status

    def result(files: int, dirs: int) -> dict[str, object]:
        return {"structuredContent": {"unreadable_count": files, "skipped": {"unreadable": dirs}}}

    assert exit_status("hash_tree", result(0, 0)) == 0
    assert exit_status("hash_tree", result(1, 0)) == 1
    assert exit_status("hash_tree", result(0, 2)) == 1


def test_dir_usage_with_an_unreadable_directory_exits_1_as_du_does() -> None:
    from sysmcp.cli.call import exit_status

    def result(**skipped: int) -> dict[str, object]:
        return {"structuredContent": {"complete": True, "skipped": skipped}}

    assert exit_status("dir_usage", result(unreadable=1)) == 1  # du: cannot read directory …: exit 1
    assert exit_status("dir_usage", result(excluded=3, other_filesystem=1, vanished=2)) == 0


def test_usage_errors_exit_2_before_any_server_starts(tree: Path) -> None:
    unknown = run("call", "rm_rf", "path=/")
    assert (
        unknown.returncode == 2
        and "unknown tool 'rm_rf'" in unknown.stderr
        and "disk_usage" in unknown.stderr
    )
    missing = run("call", "file_sha256")
    assert missing.returncode == 2 and "'path' is required" in missing.stderr
    assert "sysmcp call file_sha256 --help" in missing.stderr


# -- help -------------------------------------------------------------------------------------------


def test_call_help_lists_the_tools_and_the_exit_statuses() -> None:
    done = run("call", "--help")
    assert done.returncode == 0
    for name in (
        "disk_usage",
        "dir_usage",
        "file_sha256",
        "find_duplicates",
        "hash_tree",
        "verify_checksums",
    ):
        assert re.search(rf"^  {name}\s+\S", done.stdout, re.MULTILINE), name
    assert "130" in done.stdout and "MISMATCH" in done.stdout


def test_call_help_names_every_status_call_exits_with_as_command_line_md_does() -> None:
    """A script's author reads the statuses here: one left out (129, a dropped ssh session) reads as
    a status call never gives."""
    table = (Path(__file__).parent.parent / "docs" / "command-line.md").read_text(encoding="utf-8")
    documented = {
        int(n) for n, meaning in re.findall(r"^  \| (\d+) \| (.*)$", table, re.M) if "`call`" in meaning
    }
    shown = {int(n) for n in re.findall(r"^  (\d+) ", run("call", "--help").stdout, re.M)}
    assert documented <= shown, documented - shown
    assert {0, 1, 2, 3, 129, 130, 141, 143} <= shown


def test_tool_help_shows_its_arguments_with_descriptions_and_an_example() -> None:
    done = run("call", "file_sha256", "--help")
    assert done.returncode == 0
    assert "path=<string>  (required)" in done.stdout and "expected=<string>" in done.stdout
    assert "64 hex digits" in done.stdout
    assert "examples:\n  sysmcp call file_sha256 path=" in done.stdout


def test_tool_help_shows_every_value_an_array_takes_and_every_bound_of_the_real_schema() -> None:
    from sysmcp.cli.call import _tools, tool_help

    for name, tool in _tools(allow_reclaim=True).items():
        shown = tool_help(name, allow_reclaim=True)
        for key, spec in tool.input_schema.get("properties", {}).items():
            line = next(line for line in shown.splitlines() if line.startswith(f"  {key}=<"))
            for value in [*spec.get("enum", ()), *spec.get("items", {}).get("enum", ())]:
                assert value in line, (name, key, value)
            for bound in (spec.get("minimum"), spec.get("maximum")):
                assert bound is None or str(bound) in line, (name, key, bound)
    assert "  top_n=<integer 1..50>  (default: 5)" in tool_help("dir_usage")


def test_call_without_a_tool_says_which_tools_exist() -> None:
    done = run("call")
    assert done.returncode == 2 and "which tool?" in done.stderr and "hash_tree" in done.stderr


# -- full results -----------------------------------------------------------------------------------


def test_json_prints_the_structured_result(tree: Path) -> None:
    done = run("call", "--json", "file_sha256", f"path={tree / 'a.txt'}")
    assert done.returncode == 0
    assert json.loads(done.stdout)["sha256"] == hashlib.sha256(b"abc").hexdigest()


def test_output_writes_the_whole_manifest_behind_the_link(tree: Path, tmp_path: Path) -> None:
    for i in range(30):
        (tree / f"f{i:02}").write_text(str(i))
    saved = tmp_path / "SHA256SUMS"
    done = run("call", "hash_tree", f"path={tree}", "max_lines=2", "-o", str(saved))
    assert done.returncode == 0, done.stderr
    # What was written where, in plain words: the file, the manifest's own description, never the
    # sysmcp:// link that died with the server this command started.
    wrote = next(line for line in done.stderr.splitlines() if line.startswith("sysmcp call: saved"))
    assert wrote.startswith(f"sysmcp call: saved the full result to {saved} (")
    assert "sha256 manifest" in wrote and "of 32 files" in wrote
    assert "sysmcp://" not in done.stderr and "sysmcp://" not in done.stdout
    assert f"Full manifest: {saved}" in done.stdout
    lines = saved.read_text().splitlines()
    assert len(lines) == 32  # every file, not the two shown inline
    checked = subprocess.run(["sha256sum", "--strict", "-c", str(saved)], cwd=tree, capture_output=True)
    assert checked.returncode == 0, checked.stdout


def test_output_of_an_answer_without_a_link_says_the_result_was_saved_there(
    tree: Path, tmp_path: Path
) -> None:
    saved = tmp_path / "digest.json"
    done = run("call", "--json", "file_sha256", f"path={tree / 'a.txt'}", "-o", str(saved))
    assert done.returncode == 0, done.stderr
    size = len(saved.read_bytes())
    assert f"sysmcp call: saved the structured result (JSON) to {saved} ({size:,} bytes)\n" in done.stderr
    assert json.loads(saved.read_text())["sha256"] == hashlib.sha256(b"abc").hexdigest()


# -- interruptions and pipes ------------------------------------------------------------------------


def test_ctrl_c_cancels_the_call_prints_one_line_and_exits_130(tmp_path: Path) -> None:
    big = sparse(tmp_path / "big.bin")
    terminal = Terminal("call", "file_sha256", f"path={big}")
    terminal.read_until(b"ETA")  # running, and showing progress
    os.write(terminal.fd, b"\x03")
    assert terminal.wait() == 130
    after = terminal.output.split(b"\x03", 1)[-1].decode()
    assert "Traceback" not in terminal.output.decode() and "KeyboardInterrupt" not in after
    erased, _, left = after.rpartition("\r\x1b[K")  # the progress line is cleared, then one line follows
    assert "\n" not in erased
    assert left.replace("^C", "").strip() == "sysmcp call: interrupted; the call was cancelled on the server"


def hashing_call(path: Path) -> subprocess.Popen[str]:
    """``sysmcp call file_sha256`` of ``path`` running in the background, its stderr and stdout piped."""
    return subprocess.Popen(
        [*SYSMCP, "call", "file_sha256", f"path={path}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_cancels_the_call_and_exits_143_as_a_shell_reports_a_terminated_command(
    tmp_path: Path,
) -> None:
    big = sparse(tmp_path / "big.bin")
    call = hashing_call(big)
    assert call.stderr is not None
    assert call.stderr.readline().startswith("progress: ")  # running
    call.send_signal(signal.SIGTERM)
    assert call.wait(timeout=30) == 143
    assert (
        call.stderr.read().splitlines()[-1]
        == "sysmcp call: interrupted; the call was cancelled on the server"
    )


def test_ctrl_c_sends_notifications_cancelled_for_the_call_and_gets_no_answer(tmp_path: Path) -> None:
    big = sparse(tmp_path / "big.bin")
    terminal = Terminal("call", "--raw", "file_sha256", f"path={big}")
    terminal.read_until(b'"method":"notifications/progress"')
    os.write(terminal.fd, b"\x03")
    assert terminal.wait() == 130
    wire = [line.replace("^C", "").strip() for line in terminal.output.decode().splitlines()]
    sent = [json.loads(line[2:]) for line in wire if line.startswith("→ ")]
    received = [json.loads(line[2:]) for line in wire if line.startswith("← ")]
    (call,) = [m for m in sent if m.get("method") == "tools/call"]
    assert [m["params"]["requestId"] for m in sent if m.get("method") == "notifications/cancelled"] == [
        call["id"]
    ]
    assert not [m for m in received if m.get("id") == call["id"]]


def test_a_closed_pipe_ends_the_call_quietly(tmp_path: Path) -> None:
    for i in range(200):
        (tmp_path / f"f{i:03}").write_text(str(i))
    done = subprocess.run(
        f"{sys.executable} -m sysmcp call hash_tree path={tmp_path} max_lines=1000 | head -3",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert len(done.stdout.splitlines()) == 3
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


@needs_proc  # the server is found as the call's child in /proc
def test_a_server_killed_mid_call_is_named_with_its_signal_and_exits_1(tmp_path: Path) -> None:
    big = sparse(tmp_path / "big.bin", 1 << 40)
    call = hashing_call(big)
    assert call.stderr is not None and call.stderr.readline().startswith("progress: ")
    (server,) = Path(f"/proc/{call.pid}/task/{call.pid}/children").read_text().split()
    os.kill(int(server), signal.SIGKILL)
    assert call.wait(timeout=30) == 1
    said = call.stderr.read().splitlines()[-1]
    assert said == "sysmcp call: the server stopped before answering (killed by SIGKILL)"


# -- progress ---------------------------------------------------------------------------------------


def test_progress_on_a_terminal_is_one_line_rewritten_in_place_and_cleared(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(1 << 20) * 256)  # 256 MiB, real data: a few progress updates
    terminal = Terminal("call", "file_sha256", f"path={big}")
    assert terminal.wait(timeout=120) == 0
    text = terminal.output.decode()
    before, _, answer = text.rpartition("\r\x1b[K")  # the last clear comes just before the answer
    assert "\n" not in before  # every update rewrote the same line
    assert before.count("\r\x1b[K") >= 1 and "%" in before and "progress:" not in text
    assert answer.lstrip().startswith(hashlib.sha256(big.read_bytes()).hexdigest())


def test_a_file_name_drives_no_terminal_and_minus_o_keeps_the_manifest_as_sha256sum_writes_it(
    tmp_path: Path,
) -> None:
    """The answer's text is what a model reads, and what any client may print: a name's ESC is
    escaped in it, on a terminal or in a pipe. The exact bytes ``sha256sum -c`` needs are in the
    full manifest, which ``-o`` saves."""
    name = "\x1b[2J\x1b]0;owned\x07red"  # clear the screen, retitle the window, ring the bell
    (tmp_path / name).write_text("x")
    terminal = Terminal("call", "hash_tree", f"path={tmp_path}")
    assert terminal.wait(timeout=60) == 0
    shown = terminal.output.decode().replace("\r\x1b[K", "")  # the progress line's own rewrites
    assert "\x1b" not in shown and "\x07" not in shown
    assert "  \\033[2J\\033]0;owned\\ared\r\n" in shown  # the terminal's newline is \r\n
    piped = run("call", "hash_tree", f"path={tmp_path}")
    assert "\x1b" not in piped.stdout and "  \\033[2J\\033]0;owned\\ared\n" in piped.stdout
    saved = tmp_path.parent / f"{tmp_path.name}.sums"
    assert run("call", "hash_tree", f"path={tmp_path}", "-o", str(saved)).returncode == 0
    assert f"  {name}\n" in saved.read_text()  # the bytes sha256sum -c needs


def test_json_on_a_terminal_escapes_what_would_reorder_or_drive_it_and_stays_the_same_json(
    tmp_path: Path,
) -> None:
    name = "report\u202eexe.txt\u009b2J"  # a right-to-left override, then a C1 CSI
    (tmp_path / name).write_text("x")
    terminal = Terminal("call", "--json", "dir_usage", f"path={tmp_path}", "show=files")
    assert terminal.wait(timeout=60) == 0
    shown = terminal.output.decode()
    assert "\u202e" not in shown and "\u009b" not in shown
    assert "report\\u202eexe.txt\\u009b2J" in shown  # JSON's own escapes: json.loads gives the name back
    piped = json.loads(run("call", "--json", "dir_usage", f"path={tmp_path}", "show=files").stdout)
    assert name in json.dumps(piped, ensure_ascii=False)


def test_raw_on_a_terminal_escapes_what_would_reorder_or_drive_it_and_a_pipe_gets_the_wire_as_is(
    tmp_path: Path,
) -> None:
    name = "report\u202eexe.txt\u009b2J"  # a right-to-left override, then a C1 CSI: raw on the wire
    (tmp_path / name).write_text("x")
    terminal = Terminal("call", "--raw", "dir_usage", f"path={tmp_path}", "show=files")
    assert terminal.wait(timeout=60) == 0
    shown = terminal.output.decode()
    assert "\u202e" not in shown and "\u009b" not in shown
    assert "report\\u202eexe.txt\\u009b2J" in shown
    piped = run("call", "--raw", "dir_usage", f"path={tmp_path}", "show=files").stdout
    assert name in piped


def test_progress_off_a_terminal_is_plain_lines(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (8 << 20))
    done = run("call", "file_sha256", f"path={big}")
    assert done.returncode == 0 and "\r" not in done.stderr and "\x1b" not in done.stderr
    assert all(line.startswith("progress: ") for line in done.stderr.splitlines()), done.stderr


def test_a_root_that_does_not_exist_is_a_usage_error_of_call(tmp_path: Path) -> None:
    done = run("call", "--root", str(tmp_path / "nope"), "disk_usage")
    assert done.returncode == 2 and "--root must name existing directories" in done.stderr


def test_a_root_whose_name_starts_with_a_dash_reaches_the_server_as_the_root_it_is(tmp_path: Path) -> None:
    """``--root=-data``, a directory of that name where call runs: call found it there, then handed it to
    its server as ``--root -data``, which the server's parser read as an option with no value ("argument
    --root: expected one argument"): the call "stopped before answering (exit 2)"."""
    (tmp_path / "-data").mkdir()
    done = subprocess.run(
        [*SYSMCP, "call", "--no-history", "--root=-data", "disk_usage", f"path={tmp_path / '-data'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{tmp_path / '-data'} is on ")


def test_a_server_that_stops_before_answering_shows_its_words_and_passes_its_status_on(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Issue 27 (4): it said only "the server stopped before answering" and exited 1."""
    from sysmcp.cli.call import CallOptions, run_call

    assert run_call("disk_usage", {}, CallOptions(server_args=["--no-such-option"])) == 2
    err = capfd.readouterr().err
    assert "unrecognized arguments: --no-such-option" in err  # the server's own words
    assert err.endswith("sysmcp call: the server stopped before answering (exit 2)\n")
    assert "Traceback" not in err


def test_an_answer_too_complex_to_read_is_said_as_such_not_as_the_server_stopping(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The client refuses a line of more JSON values than it reads (here a bound of 200, below any
    listing's): the server is alive and well, yet it said "the server stopped before answering"."""
    from sysmcp.cli.call import EXIT_PROBLEM, CallOptions, run_call
    from sysmcp.protocol.client import ClientSession

    assert ClientSession.__init__.__kwdefaults__ is not None
    monkeypatch.setitem(ClientSession.__init__.__kwdefaults__, "max_values", 200)
    monkeypatch.setitem(ClientSession.__init__.__kwdefaults__, "chars_per_value", 1 << 30)
    for n in range(150):
        (tmp_path / f"f{n}").write_bytes(b"x")
    options = CallOptions(server_args=["--root", str(tmp_path), "--no-history"])
    assert run_call("dir_usage", {"path": str(tmp_path), "show": "all", "top_n": 50}, options) == EXIT_PROBLEM
    err = capfd.readouterr().err
    assert "stopped" not in err, err
    assert err.endswith(" may hold more than 200 JSON values, more than any answer of its length holds\n"), (
        err
    )
    assert "sysmcp call: its answer could not be read: its answer is too large/complex: a line of " in err


@pytest.mark.parametrize(
    "args", [("call", "--help"), ("call", "file_sha256", "--help"), ("call", "disk_usage")], ids=str
)
def test_output_into_a_pipe_nobody_reads_is_a_quiet_exit_141(args: tuple[str, ...]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte: every write fails with EPIPE
    try:
        done = subprocess.run(
            [*SYSMCP, *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    finally:
        os.close(write)
    assert done.returncode == 141 and "Traceback" not in done.stderr, done.stderr


def test_output_writes_nothing_for_a_tool_error(tmp_path: Path) -> None:
    saved = tmp_path / "out"
    done = run("call", "file_sha256", f"path={tmp_path / 'missing'}", "-o", str(saved))
    assert done.returncode == 1 and "No such file" in done.stderr and not saved.exists()


# -- history options reach the server it spawns ---------------------------------------------------


def _scans(state: Path) -> list[str]:
    from sysmcp.history.store import Store

    if not state.exists():
        return []
    return [os.fsdecode(info.series.root) for info in Store.open(state).snapshots("scan")]


@pytest.mark.parametrize("before", [False, True], ids=["after-call", "before-call"])
def test_state_dir_is_where_the_spawned_server_records(tree: Path, tmp_path: Path, before: bool) -> None:
    state = tmp_path / "state"
    option = ["--state-dir", str(state)]
    args = [*option, "call"] if before else ["call", *option]
    done = run(*args, "dir_usage", f"path={tree}")
    assert done.returncode == 0, done.stderr
    assert _scans(state) == [str(tree)]


def test_a_state_dir_with_dot_dot_after_a_symlink_is_where_the_kernel_leads(
    tree: Path, tmp_path: Path
) -> None:
    """``--state-dir a/link/../state`` with a/link leading to b/c is b/state, for ``snapshot`` and for the
    server ``call`` spawns: the path was normalised by its text first, and history kept in a/state, a
    directory no one named."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "link").symlink_to(tmp_path / "b" / "c")
    named = f"{tmp_path}/a/link/../state"
    snapshotted = run("--state-dir", named, "snapshot", str(tree))
    assert snapshotted.returncode == 0, snapshotted.stderr
    assert _scans(tmp_path / "b" / "state") == [str(tree)] and not (tmp_path / "a" / "state").exists()
    shutil.rmtree(tmp_path / "b" / "state")
    called = subprocess.run(
        [*SYSMCP, "call", "--state-dir", "link/../state", "dir_usage", f"path={tree}"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path / "a",
    )
    assert called.returncode == 0, called.stderr
    assert _scans(tmp_path / "b" / "state") == [str(tree)] and not (tmp_path / "a" / "state").exists()


def test_no_history_reaches_the_spawned_server(tree: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    env_state = tmp_path / "env-state"
    done = subprocess.run(
        [*SYSMCP, "call", "--no-history", "dir_usage", f"path={tree}"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "SYSMCP_STATE_DIR": str(env_state)},
    )
    assert done.returncode == 0, done.stderr
    assert _scans(env_state) == [] and _scans(state) == []


def test_a_log_line_of_the_call_goes_to_stderr_never_into_the_answer() -> None:
    """``sysmcp call``'s stdout is the answer (piped to jq): a line its client logs (an oversized
    line from the server, say) goes to stderr as JSON, not to stdout through structlog's default."""
    script = (
        "import sys\n"
        "from sysmcp import cli\n"
        "from sysmcp.cli import call\n"
        "from sysmcp.logconfig import get_logger\n"
        "def run_call(tool, arguments, options):\n"
        "    get_logger('sysmcp.protocol.client').warning('oversized line from server dropped', length=9)\n"
        "    return 0\n"
        "call.run_call = run_call\n"
        "sys.exit(cli.main(['call', 'disk_usage', 'path=/']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "oversized line from server dropped" in done.stderr


@pytest.mark.slow
@pytest.mark.spawns_server
def test_after_an_answer_the_server_is_waited_for_not_killed_while_it_winds_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server's wind-down after its input closes (a fleet's ssh masters told to exit, the state
    database checkpointed) may take longer than an interrupted call's grace: it is not cut short.
    The "server" here is a wrapper whose own wind-down takes 3 s, then leaves a mark."""
    from sysmcp.cli.call import INTERRUPT_GRACE, CallOptions, run_call

    mark = tmp_path / "wound-down"
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f'#!/bin/sh\n"{sys.executable}" "$@"\nstatus=$?\nsleep 3\ntouch "{mark}"\nexit $status\n'
    )
    wrapper.chmod(0o755)
    assert INTERRUPT_GRACE < 3
    monkeypatch.setattr(sys, "executable", str(wrapper))
    status = run_call("file_sha256", {"path": str(wrapper)}, CallOptions(server_args=["--no-history"]))
    assert status == 0, capsys.readouterr()
    assert mark.exists()


def test_a_server_that_cannot_be_started_is_one_line_and_exit_1_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``sysmcp call`` run by a user who may not execute the interpreter it would start the server
    with: a sentence naming it and why, exit 1."""
    from sysmcp.cli.call import CallOptions, run_call

    interpreter = tmp_path / "python"
    interpreter.write_text("#!/bin/sh\n")
    interpreter.chmod(0o644)  # not executable
    monkeypatch.setattr(sys, "executable", str(interpreter))
    status = run_call("file_sha256", {"path": str(interpreter)}, CallOptions())
    said = capsys.readouterr().err
    assert status == 1
    assert said.strip() == f"sysmcp call: cannot start the server ({interpreter}: Permission denied)"


def test_a_fleet_hosts_words_on_stderr_cannot_drive_the_terminal_while_stdout_is_piped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sysmcp.cli.call import CallOptions, _report

    forged = "\x1b]0;owned\x07\x1b[2J"  # retitle the window, clear the screen
    entry = {"host": "web1", "status": "ok", "result": {"complete": False, "stopped_reason": forged}}
    link = {"type": "resource_link", "uri": "sysmcp://hosts/web1/results/1", "description": forged}
    reply = {
        "result": {
            "content": [{"type": "text", "text": "1 of 1 host answered."}, link],
            "structuredContent": {"hosts": [entry], "view": {}},
        },
        "_full": (["sysmcp://hosts/web1/results/1"], "full\n"),
    }
    controller, terminal = os.openpty()
    with open(terminal, "w", encoding="utf-8") as stderr:
        monkeypatch.setattr(sys, "stderr", stderr)
        status = _report("dir_usage", reply, CallOptions(output=str(tmp_path / "out"), json_output=False))
    chunks = []  # one read returns what one write put there: read to the end (EIO once the pty's other end is closed)
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    shown = b"".join(chunks).decode()
    assert status == 3
    assert "\x1b" not in shown and "\x07" not in shown, shown
    assert "PARTIAL RESULT (\\033]0;owned\\a\\033[2J)" in shown and ": \\033]0;owned" in shown


@pytest.mark.parametrize("command", [["call"], []], ids=["call", "serve"])
def test_ctrl_c_while_the_command_is_still_starting_exits_130_without_a_traceback(
    tmp_path: Path, command: list[str]
) -> None:
    """Ctrl-C before the call (or the server) is under way: an inventory still being written (``--inventory
    <(slow-generator)``), the imports of a cold start. It was a KeyboardInterrupt traceback and a death by
    SIGINT; a command stopped there has nothing to cancel, so it ends as one stopped by Ctrl-C, quietly."""
    fifo = tmp_path / "inventory"
    os.mkfifo(fifo)
    started = subprocess.Popen(
        [*SYSMCP, *command, "--inventory", str(fifo), *(["disk_usage"] if command else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    writer = -1
    deadline = time.monotonic() + 60
    while writer < 0:  # the command has opened the inventory: it is reading it, and will wait for more
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            assert time.monotonic() < deadline and started.poll() is None
            time.sleep(0.01)
    try:
        started.send_signal(signal.SIGINT)
        stdout, stderr = started.communicate(timeout=30)
    finally:
        os.close(writer)
    assert started.returncode == 130, stderr.decode()
    assert b"Traceback" not in stderr and b"KeyboardInterrupt" not in stderr, stderr.decode()
    assert stdout == b""


@needs_proc  # the server is found as the call's child, and its input's pipe among the call's descriptors
def test_a_second_ctrl_c_while_the_server_winds_down_ends_the_call_and_the_server_at_once(
    tmp_path: Path,
) -> None:
    """The first Ctrl-C cancels the call and waits a moment for the server; a second (the admin still
    waiting) raised KeyboardInterrupt in the event loop, whose tasks then waited for the server for ever:
    the call hung until a third, and a server that was not reading its input was left behind. Here the
    server is blocked opening an inventory (a FIFO) no one writes again: it can only be killed."""
    fifo = tmp_path / "inventory"
    os.mkfifo(fifo)
    call = subprocess.Popen(
        [*SYSMCP, "call", "--inventory", str(fifo), "disk_usage", "hosts=all"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    children = Path(f"/proc/{call.pid}/task/{call.pid}/children")
    deadline = time.monotonic() + 60
    server = ""
    while not server:  # the call reads the inventory (as often as it opens it), then starts its server
        assert time.monotonic() < deadline and call.poll() is None
        server = children.read_text().strip()
        if server:
            break
        with contextlib.suppress(OSError):  # ENXIO: no reader now
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.write(writer, b"web1\n")
            os.close(writer)
        time.sleep(0.01)
    server_input = os.readlink(f"/proc/{server}/fd/0")

    def call_holds_server_input() -> bool:
        links = []
        for fd in os.listdir(f"/proc/{call.pid}/fd"):
            with contextlib.suppress(OSError):
                links.append(os.readlink(f"/proc/{call.pid}/fd/{fd}"))
        return server_input in links

    while not call_holds_server_input():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    call.send_signal(signal.SIGINT)
    while call_holds_server_input():  # the call closed the server's input: it waits for it to exit
        assert time.monotonic() < deadline and call.poll() is None
        time.sleep(0.01)
    call.send_signal(signal.SIGINT)
    try:
        _, stderr = call.communicate(timeout=30)
        server_left = (
            Path(f"/proc/{server}").exists() and Path(f"/proc/{server}/stat").read_text().split()[2] != "Z"
        )
    finally:
        call.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(server), signal.SIGKILL)
    assert call.returncode == 130, stderr.decode()
    assert b"Traceback" not in stderr and b"KeyboardInterrupt" not in stderr, stderr.decode()
    assert not server_left


@pytest.mark.anyio
async def test_ctrl_c_after_the_answer_gives_the_winding_down_server_a_grace_and_a_second_kills_it() -> None:
    """The answer in, the server winds down at its own pace (a fleet's ssh masters, a checkpoint): Ctrl-C
    then bounds that wait to ``INTERRUPT_GRACE``, and a second ends the server at once."""
    from sysmcp.cli.call import INTERRUPT_GRACE, Interrupts

    interrupts = Interrupts(conversation_over=True)
    server = await anyio.open_process([sys.executable, "-c", "import time; time.sleep(600)"])
    async with server:
        interrupts.server = server
        with anyio.CancelScope(shield=True) as waiting:
            interrupts.winding_down = waiting
            before = anyio.current_time()
            interrupts.take(signal.SIGINT)
            assert not interrupts.conversation.cancel_called
            assert before + INTERRUPT_GRACE <= waiting.deadline <= anyio.current_time() + INTERRUPT_GRACE
            assert server.returncode is None
            interrupts.take(signal.SIGINT)
            with anyio.fail_after(30):
                assert await server.wait() == -signal.SIGKILL
