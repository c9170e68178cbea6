"""``sysmcp call``'s exit statuses as a script sees them (issue 27, defects 2 to 5).

One rule: whatever is refused before any work is a usage error (2), said in one line on stderr, with
no traceback and no progress (the work never started); a partial result has a status of its own (3).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from sysmcp.cli.outfile import open_output
from tests.profile import UNDER_POSIX_PROFILE, needs_proc

SYSMCP = [sys.executable, "-m", "sysmcp"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SYSMCP, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def refused(done: subprocess.CompletedProcess[str], words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "progress" not in done.stderr
    assert done.stdout == ""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "a.txt").write_bytes(b"abc")
    return root


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("{tmp}/nonexistent/x.sums", "no such directory"),
        ("{tmp}", "is a directory"),
        pytest.param("/proc/version", "cannot be written", marks=needs_proc),
    ],
    ids=["missing directory", "a directory", "read-only procfs file"],
)
def test_an_output_file_that_cannot_be_written_is_refused_before_the_work(
    tree: Path, tmp_path: Path, target: str, words: str
) -> None:
    refused(run("call", "hash_tree", f"path={tree}", "-o", target.format(tmp=tmp_path)), words)
    assert not (tmp_path / "nonexistent").exists()


def test_a_fleet_output_directory_that_cannot_take_a_file_is_refused_before_the_work() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("a second user needs root and setpriv")
    with tempfile.TemporaryDirectory(prefix="sysmcp-out-", dir="/tmp") as box:
        os.chmod(box, 0o755)  # root's: nobody may look in, not create a file
        command = [*SYSMCP, "call", "--host", "web1", "disk_usage", "hosts=web1", "-o", box]
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert os.listdir(box) == []
    refused(done, f"sysmcp call: -o {box}: cannot create a file in it")


def test_a_new_output_file_in_a_writable_directory_is_written(tree: Path, tmp_path: Path) -> None:
    done = run("call", "hash_tree", f"path={tree}", "-o", str(tmp_path / "sums"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "sums").read_text().endswith("  a.txt\n")
    assert "bytes, replacing" not in done.stderr


def test_an_output_path_with_dot_dot_after_a_symlink_is_written_where_the_kernel_leads(
    tree: Path, tmp_path: Path
) -> None:
    """``-o a/link/../sums`` with a/link leading to b/c names b/sums, as ``> a/link/../sums`` does: the
    path was normalised by its text first, and a/sums written, a file no one named."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "link").symlink_to(tmp_path / "b" / "c")
    done = run("call", "hash_tree", f"path={tree}", "-o", f"{tmp_path}/a/link/../sums")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "b" / "sums").read_text().endswith("  a.txt\n")
    assert not (tmp_path / "a" / "sums").exists()


def test_an_output_path_ending_in_a_slash_names_a_directory_and_is_refused_before_the_work(
    tree: Path, tmp_path: Path
) -> None:
    """``-o new/`` names a directory, as the kernel reads it (``> new/`` fails: is a directory); the
    slash was dropped and a file called new written."""
    refused(run("call", "hash_tree", f"path={tree}", "-o", f"{tmp_path}/new/"), "is a directory")
    assert not (tmp_path / "new").exists()


def test_an_existing_output_file_is_replaced_and_said_so(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "sums").write_text("an older manifest, longer than the new one\n" * 10)
    done = run("call", "hash_tree", f"path={tree}", "-o", str(tmp_path / "sums"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "sums").read_text().endswith("  a.txt\n") and "older" not in (
        tmp_path / "sums"
    ).read_text()
    assert f"to {tmp_path / 'sums'} (" in done.stderr and " bytes, replacing the file there)" in done.stderr


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (("dir_usage", "path=usr"), "path='usr' is relative"),
        (("verify_checksums", "manifest=SHA256SUMS"), "manifest='SHA256SUMS' is relative"),
        (("dir_usage", "path=/usr", "path=/etc"), "path= given more than once"),
        (("file_sha256", "path=/etc/hostname"), None),
    ],
    ids=["relative path", "relative manifest", "repeated key", "(accepted)"],
)
def test_arguments_refused_before_any_work_are_usage_errors(
    arguments: tuple[str, ...], words: str | None
) -> None:
    done = run("call", *arguments)
    if words is None:
        assert done.returncode in (0, 1), done.stderr  # a real answer: not refused as usage
    else:
        refused(done, words)


def test_a_value_that_starts_like_json_must_be_json() -> None:
    done = run("call", "dir_usage", "path=/usr", 'exclude=[".git"')
    assert done.returncode == 2 and "starts like JSON but is not valid JSON" in done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_hosts_and_a_malformed_inventory_are_usage_errors(tmp_path: Path) -> None:
    refused(run("call", "--host", "web1", "disk_usage", "hosts=nosuch"), "unknown host or group: 'nosuch'")
    bad = tmp_path / "bad.ini"
    bad.write_text("web1 ansible_port=abc\n")
    refused(run("call", "--inventory", str(bad), "disk_usage"), "line 1: ansible_port must be a port number")


def test_hosts_with_a_host_option_that_names_no_host_is_refused_by_call_itself() -> None:
    refused(run("call", "--host", "", "disk_usage", "hosts=all"), "sysmcp call: hosts= needs a fleet")


def test_log_level_is_honoured_in_call_mode(tree: Path) -> None:
    quiet = run("call", "file_sha256", f"path={tree / 'a.txt'}")
    loud = run("call", "--log-level", "info", "file_sha256", f"path={tree / 'a.txt'}")
    assert quiet.returncode == loud.returncode == 0
    assert '"event": "initialized"' not in quiet.stderr
    assert '"event": "initialized"' in loud.stderr  # the server's own log line, at the level asked


def partial_reply(**extra: Any) -> dict[str, Any]:
    data = {"complete": False, "stopped_reason": "time budget of 1 s reached", **extra}
    return {"result": {"content": [{"type": "text", "text": "PARTIAL RESULT: …"}], "structuredContent": data}}


def test_a_partial_result_exits_3_with_one_line_on_stderr_when_stdout_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sysmcp.cli.call import CallOptions, _report

    assert _report("hash_tree", partial_reply(), CallOptions()) == 3
    out, err = capsys.readouterr()
    assert "PARTIAL RESULT" in out
    assert err == "sysmcp call: PARTIAL RESULT (time budget of 1 s reached): exit 3\n"


def test_a_problem_found_before_the_budget_ran_out_still_exits_1() -> None:
    from sysmcp.cli.call import exit_status

    checked = partial_reply(all_ok=False, failed=1)["result"]
    assert exit_status("verify_checksums", checked) == 1
    only_unfinished = partial_reply(all_ok=False, failed=0, missing=0, unreadable=0)["result"]
    assert exit_status("verify_checksums", only_unfinished) == 3
    fleet = {"structuredContent": {"view": {}, "hosts": [{"status": "ok", "result": {"complete": False}}]}}
    assert exit_status("dir_usage", fleet) == 3


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (
            ("call", "dir_usage", "/var"),
            "sysmcp call: expected KEY=VALUE, got '/var' (did you mean path=/var?)",
        ),
        (
            ("call", "verify_checksums", "~/SHA256SUMS"),
            "sysmcp call: expected KEY=VALUE, got '~/SHA256SUMS' (did you mean manifest=~/SHA256SUMS?)",
        ),
        (
            ("call", "--fleet-concurrency", "x", "disk_usage"),
            "sysmcp call: argument --fleet-concurrency/--fleet-forks: invalid int value: 'x' "
            "(see: sysmcp call --help)",
        ),
        (("bogus",), "sysmcp: argument command: invalid choice: 'bogus'"),
        (("snapshot", "--limit", "3"), "sysmcp: unrecognized arguments: --limit"),
    ],
    ids=["a bare path", "a bare manifest", "a bad option value", "an unknown command", "an unknown option"],
)
def test_a_usage_error_is_one_line_naming_what_is_wrong(arguments: tuple[str, ...], line: str) -> None:
    done = run(*arguments)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(line), done.stderr


def test_arguments_the_server_refuses_are_usage_errors_too(tmp_path: Path) -> None:
    refused(run("call", "disk_usage", "explain=true"), "explain needs a path")
    refused(run("call", "--root", str(tmp_path), "dir_usage", "path=/etc"), "outside the operator's roots")


def test_a_path_outside_the_roots_is_a_usage_error_for_snapshot_as_for_call(tmp_path: Path) -> None:
    inside = tmp_path / "in"
    inside.mkdir()
    done = run("snapshot", "--state-dir", str(tmp_path / "s"), "--root", str(inside), str(tmp_path))
    assert done.returncode == 2 and "outside the operator's roots" in done.stderr


def test_a_bad_keep_says_what_keep_takes(tmp_path: Path) -> None:
    for bad in ("bogus", "1d,2d", "1d,2d,3x"):
        done = run("snapshot", "--state-dir", str(tmp_path), "--keep", bad, str(tmp_path))
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("sysmcp snapshot: --keep takes H,D,W: how long to keep hourly, daily")
        assert f"got {bad!r}" in done.stderr


def test_a_bad_max_size_names_the_option_given(tmp_path: Path) -> None:
    """It named a 'size' argument the command line does not have."""
    for bad in ("-5", "1e400", "lots"):
        done = run("snapshot", "--state-dir", str(tmp_path), "--max-size", bad, str(tmp_path))
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("sysmcp snapshot: --max-size must be a size such as 4096"), done.stderr
        assert f"got {bad!r}" in done.stderr and "'size'" not in done.stderr


def test_only_the_commands_that_start_a_server_offer_allow_reclaim() -> None:
    for command in ("snapshot", "history"):
        done = run(command, "--help")
        assert done.returncode == 0 and "--allow-reclaim" not in done.stdout, command
    for command in ("serve", "call"):
        assert "--allow-reclaim" in run(command, "--help").stdout, command


def test_a_fleet_host_file_that_cannot_be_written_is_named_with_how_many_were_written_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sysmcp.cli.call import CallOptions, _report

    (tmp_path / "web2.json").mkdir()  # where web2's result would go: a directory
    reply = {
        "result": {"content": [{"type": "text", "text": "3 of 3 hosts answered."}], "structuredContent": {}},
        "_per_host": {"web1.json": "{}\n", "web2.json": "{}\n", "web3.json": "{}\n"},
    }
    assert _report("disk_usage", reply, CallOptions(output=str(tmp_path))) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"sysmcp call: -o {tmp_path}: web2.json: Is a directory (1 of 3 host results written)\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["web1.json"]


def test_two_fleet_hosts_whose_names_make_one_file_name_each_keep_their_own_file(tmp_path: Path) -> None:
    import anyio

    from sysmcp.cli.call import _per_host

    names = (".web", "web", "a/b", "a_b", "c")
    hosts: list[dict[str, Any]] = [{"host": name, "status": "ok", "result": {"said": name}} for name in names]
    no_links: Any = None  # hosts with no links: nothing is read through a session
    files = anyio.run(_per_host, no_links, {"structuredContent": {"hosts": hosts}})
    assert sorted(files) == ["a_b-2.json", "a_b.json", "c.json", "web-2.json", "web.json"]
    assert sorted(json.loads(text)["said"] for text in files.values()) == sorted(names)


def test_a_fleet_host_whose_links_cannot_be_read_any_more_keeps_its_structured_answer() -> None:
    import anyio

    from sysmcp.cli.call import _per_host
    from sysmcp.protocol.client import RemoteError

    class GoneLinks:
        async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
            raise RemoteError(-32002, f"Resource not found: {params['uri']}")

    link = "sysmcp://hosts/web1/results/abc/SHA256SUMS"
    hosts = [{"host": "web1", "status": "ok", "result": {"manifest": link, "files": 3}}]
    session: Any = GoneLinks()
    files = anyio.run(_per_host, session, {"structuredContent": {"hosts": hosts}})
    assert list(files) == ["web1.json"] and json.loads(files["web1.json"])["files"] == 3


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A drop box any user may write (as /tmp): a name in it may be a link another user planted."""
    box = tmp_path / "shared"
    box.mkdir()
    box.chmod(0o777)
    return box


@pytest.mark.parametrize("plant", ["symlink", "hard link", "dangling symlink"])
def test_an_output_name_another_user_could_have_planted_as_a_link_is_refused_and_nothing_written_through(
    tree: Path, tmp_path: Path, shared: Path, plant: str
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    if plant == "symlink":
        (shared / "sums").symlink_to(victim)
    elif plant == "hard link":
        os.link(victim, shared / "sums")
    else:
        (shared / "sums").symlink_to(tmp_path / "new-victim")
    done = run("call", "hash_tree", f"path={tree}", "-o", str(shared / "sums"))
    refused(done, f"sysmcp call: -o {shared / 'sums'}: cannot be written: ")
    assert victim.read_text() == "precious\n" and not (tmp_path / "new-victim").exists()


def test_an_output_name_swapped_for_a_link_while_the_call_ran_is_not_written_through(
    tmp_path: Path, shared: Path
) -> None:
    from sysmcp.cli.call import check_output

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (shared / "sums").write_text("old\n")
    assert check_output(str(shared / "sums")) is None  # a plain file when the call started
    (shared / "sums").unlink()
    (shared / "sums").symlink_to(victim)  # the swap, once the work is under way
    with pytest.raises(OSError, match="a symbolic link in a directory other users can write"):
        open_output(str(shared / "sums"))
    assert victim.read_text() == "precious\n"


def test_a_fleets_new_directory_is_not_made_through_a_directory_on_the_way_swapped_for_a_link(
    tmp_path: Path, shared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sysmcp.cli.call import _save_per_host, check_output

    elsewhere = tmp_path / "elsewhere"  # /etc, say
    elsewhere.mkdir()
    (shared / "reports").mkdir()
    assert check_output(str(shared / "reports" / "today"), directory=True) is None
    (shared / "reports").rmdir()
    (shared / "reports").symlink_to(elsewhere)  # the swap, once the work is under way
    assert _save_per_host(str(shared / "reports" / "today"), {"web1.json": "{}\n"}) is False
    assert list(elsewhere.iterdir()) == []
    assert "a symbolic link in a directory other users can write" in capsys.readouterr().err


@pytest.mark.parametrize("plant", ["file", "FIFO"])
def test_a_file_another_user_owns_in_a_shared_directory_is_not_written_to(
    tree: Path, shared: Path, plant: str
) -> None:
    # Theirs to read: what root writes there (a manifest of /root) would be another user's.
    planted = shared / "sums"
    if plant == "file":
        planted.write_text("theirs\n")
    else:
        os.mkfifo(planted)
    os.chown(planted, 65534, 65534)
    listener = os.open(planted, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO with a reader: the write would go
    try:
        with pytest.raises(OSError, match="a file another user owns, in a directory other users can write"):
            open_output(str(planted))
        if plant == "file":
            refused(run("call", "hash_tree", f"path={tree}", "-o", str(planted)), "a file another user owns")
            assert planted.read_text() == "theirs\n"
        else:
            assert os.read(listener, 100) == b""
    finally:
        os.close(listener)


def test_a_file_the_directorys_owner_owns_is_written_as_on_a_root_squashed_nfs(tmp_path: Path) -> None:
    # There root's own directory and files belong to nobody: the directory's owner could replace its
    # names anyway, so their file is no plant.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sums").write_text("old\n")
    for made in (theirs, theirs / "sums"):
        os.chown(made, 65534, 65534)
    with open(open_output(str(theirs / "sums")), "w") as handle:
        handle.write("new\n")
    assert (theirs / "sums").read_text() == "new\n"


def test_a_link_in_a_directory_only_its_owner_may_write_is_written_through(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("old content, longer than the new\n")
    (tmp_path / "link").symlink_to(tmp_path / "target")  # as /dev/stdout: nobody else could have put it there
    with open(open_output(str(tmp_path / "link")), "w") as handle:
        handle.write("new\n")
    assert (tmp_path / "target").read_text() == "new\n"


def test_a_fleet_host_file_planted_as_a_link_is_not_written_through(
    tmp_path: Path, shared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sysmcp.cli.call import _save_per_host

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (shared / "web1.json").symlink_to(victim)
    assert _save_per_host(str(shared), {"web1.json": "{}\n"}) is False
    assert victim.read_text() == "precious\n"
    assert "web1.json: a symbolic link in a directory other users can write" in capsys.readouterr().err


@pytest.mark.parametrize("fleet", [False, True], ids=["a file", "a fleet's directory"])
def test_a_directory_on_the_way_planted_as_a_link_by_another_user_is_not_followed(
    tree: Path, tmp_path: Path, shared: Path, fleet: bool
) -> None:
    elsewhere = tmp_path / "elsewhere"  # /etc, say: root's, where nothing is to be written
    elsewhere.mkdir()
    (shared / "reports").symlink_to(elsewhere)
    if fleet:
        done = run("call", "--host", "web1", "disk_usage", "hosts=web1", "-o", str(shared / "reports"))
        words = (
            f"sysmcp call: -o {shared / 'reports'}: cannot be written: {shared / 'reports'}: a symbolic link"
        )
    else:
        done = run("call", "hash_tree", f"path={tree}", "-o", str(shared / "reports" / "sums"))
        words = (
            f"cannot be written: {shared / 'reports'}: a symbolic link in a directory other users can write"
        )
    refused(done, words)
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(OSError, match="a symbolic link in a directory other users can write"):
        open_output(
            str(shared / "reports" / "web1.json")
        )  # swapped in after the check: the write refuses too
    assert list(elsewhere.iterdir()) == []


def test_an_output_file_under_a_directory_the_user_may_only_search_is_written() -> None:
    # /home/alice 0711, a root-squashed NFS export: a plain open goes through, so must -o. Without O_PATH
    # (macOS, the portable profile) it is gone through by name: root's, in sticky /tmp, nobody can swap it.
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("a second user needs root and setpriv")
    from tests.harness import python_as_nobody

    with tempfile.TemporaryDirectory(prefix="sysmcp-out-", dir="/tmp") as box:
        os.chmod(box, 0o711)  # root's: nobody may go through it, not list it
        mine = Path(box) / "mine"
        mine.mkdir()
        os.chown(mine, 65534, 65534)
        probe = (
            "import os; from sysmcp.cli.outfile import open_output; "
            f"os.write(open_output({str(mine / 'report')!r}), b'done')"
        )
        done = python_as_nobody(probe)
        assert done.returncode == 0, done.stderr
        assert (mine / "report").read_bytes() == b"done"


def test_a_directory_another_user_may_swap_and_this_one_may_only_search_is_refused_with_what_to_do() -> None:
    """Without O_PATH it cannot be held open, and by name its owner could swap it for a link between the
    check and the write: refused, saying why and what to do. With O_PATH it is held: written."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("a second user needs root and setpriv")
    from tests.harness import python_as_nobody

    with tempfile.TemporaryDirectory(prefix="sysmcp-out-", dir="/tmp") as box:
        os.chown(box, 4321, 4321)  # another user's, 0711: theirs to rename away and replace in sticky /tmp
        os.chmod(box, 0o711)
        mine = Path(box) / "mine"
        mine.mkdir()
        os.chown(mine, 65534, 65534)
        probe = (
            "import os; from sysmcp.cli.outfile import open_output\n"
            f"try: os.write(open_output({str(mine / 'report')!r}), b'done')\n"
            "except OSError as exc: print(exc.strerror)"
        )
        done = python_as_nobody(probe)
        assert done.returncode == 0, done.stderr
        if UNDER_POSIX_PROFILE:
            assert done.stdout == (
                f"{box}: Permission denied: this system opens each directory on the way to read it, and this "
                "one may only be searched, in a directory other users can write; write to a directory you "
                "may read\n"
            )
            assert not (mine / "report").exists()
        else:
            assert (mine / "report").read_bytes() == b"done"


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (
            ("snapshot", "--timeout", "0", "/nonexistent"),
            "sysmcp snapshot: argument --timeout: must be a number above 0",
        ),
        (
            ("snapshot", "--timeout", "nan", "/nonexistent"),
            "sysmcp snapshot: argument --timeout: must be a number above 0",
        ),
        (
            ("history", "--limit", "-1"),
            "sysmcp history: argument --limit: must be a number above 0, got '-1'",
        ),
        (
            ("call", "--host", "web1", "--fleet-deadline", "nan", "disk_usage", "hosts=web1"),
            "sysmcp: --fleet-",
        ),
        (("--host", "web1", "--connect-timeout", "nan"), "sysmcp: --fleet-concurrency, --connect-timeout"),
    ],
    ids=[
        "a zero timeout",
        "a NaN timeout",
        "a negative limit",
        "a NaN fleet deadline",
        "a NaN connect timeout",
    ],
)
def test_a_number_option_that_means_nothing_is_refused_before_any_work(
    arguments: tuple[str, ...], line: str
) -> None:
    refused(run(*arguments), line)


def test_reclaim_without_allow_reclaim_says_which_option_serves_it_not_unknown_tool() -> None:
    said = "sysmcp call: reclaim is served only with --allow-reclaim: sysmcp call --allow-reclaim reclaim …"
    refused(run("call", "reclaim", "plan_id=x", 'items=["a"]'), said)
    refused(run("call", "reclaim", "--help"), said)


def test_fleet_host_files_that_replace_files_already_there_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sysmcp.cli.call import _save_per_host

    (tmp_path / "web1.json").write_text("yesterday's\n")
    assert _save_per_host(str(tmp_path), {"web1.json": "{}\n", "web2.json": "{}\n"}) is True
    assert (tmp_path / "web1.json").read_text() == "{}\n"
    said = capsys.readouterr().err
    assert said == f"sysmcp call: wrote 2 host results (6 bytes) to {tmp_path}/, replacing 1 file there\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "arguments", [("call", "disk_usage"), ("call", "--raw", "disk_usage"), ("call", "--help"), ("history",)]
)
def test_stdout_on_a_full_disk_is_one_write_error_line_and_exit_1_as_sha256sum_not_a_traceback(
    tmp_path: Path, arguments: tuple[str, ...]
) -> None:
    if arguments[0] == "history":  # a history to list (with none kept there, it says so on stderr)
        from sysmcp.history.store import Store

        Store.open(tmp_path).close()
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [*SYSMCP, *arguments, *(["--state-dir", str(tmp_path)] if arguments[0] == "history" else [])],
            stdout=full,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == f"sysmcp {arguments[0]}: write error: No space left on device"
    assert "Traceback" not in done.stderr


def test_a_directory_on_the_way_the_user_may_not_even_search_is_plain_permission_denied() -> None:
    """No advice about directories that may only be searched for one that may not be searched at all."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("a second user needs root and setpriv")
    from tests.harness import python_as_nobody

    with tempfile.TemporaryDirectory(prefix="sysmcp-out-", dir="/tmp") as box:
        os.chown(box, 4321, 4321)
        os.chmod(box, 0o700)
        probe = (
            "import os; from sysmcp.cli.outfile import open_output\n"
            f"try: open_output({str(Path(box) / 'report')!r})\n"
            "except OSError as exc: print(exc.strerror)"
        )
        done = python_as_nobody(probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout in (f"{box}: Permission denied\n", "Permission denied\n")  # no O_PATH / O_PATH


def test_a_fleet_hosts_link_with_a_name_past_a_file_systems_is_written_and_so_are_the_others(
    tmp_path: Path,
) -> None:
    import anyio

    from sysmcp.cli.call import CallOptions, _per_host, _report

    class Texts:
        async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
            return {"contents": [{"uri": params["uri"], "text": "said\n"}]}

    long_ext = "sysmcp://hosts/evil/results/1/x." + "e" * 1_000
    hosts = [
        {"host": "evil", "status": "ok", "result": {"manifest": long_ext}},
        {"host": "web1", "status": "ok", "result": {"files": 3}},
    ]
    session: Any = Texts()
    files = anyio.run(_per_host, session, {"structuredContent": {"hosts": hosts}})
    reply = {
        "result": {"content": [{"type": "text", "text": "2 of 2 hosts answered."}], "structuredContent": {}},
        "_per_host": files,
    }
    assert _report("disk_usage", reply, CallOptions(output=str(tmp_path))) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil." + "e" * 16, "web1.json"]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (
            ["--protocol-version", "2026-07-28"],
            "--protocol-version 2026-07-28: sysmcp call speaks 2024-11-05",
        ),
        (
            ["--protocol-version", "2025-13-01"],
            "--protocol-version 2025-13-01: sysmcp call speaks 2024-11-05",
        ),
        (["--protocol-version", "2025-03-26"], "the exit status and --json come from the structured result"),
        (["--json", "--protocol-version", "2024-11-05"], "which 2024-11-05 does not have: give --raw"),
    ],
    ids=["modern", "unknown", "unstructured", "json-unstructured"],
)
def test_a_protocol_version_the_call_cannot_use_as_asked_is_a_usage_error(
    tree: Path, options: list[str], words: str
) -> None:
    """A version the handshake does not speak was silently answered with 2025-11-25 (the call ran on
    another version than the one asked for, exit 0). On a version without structured results a MISMATCH
    exited 0 (the status is read from structuredContent) and ``--json`` printed ``null``."""
    wrong = "sha256:" + "0" * 64
    refused(run("call", *options, "file_sha256", f"path={tree / 'a.txt'}", f"expected={wrong}"), words)


def test_raw_shows_a_version_without_structured_results_and_exits_by_its_error_flag(tree: Path) -> None:
    done = run("call", "--raw", "--protocol-version", "2024-11-05", "file_sha256", f"path={tree / 'a.txt'}")
    assert done.returncode == 0, done.stderr
    sent = [json.loads(line[2:]) for line in done.stdout.splitlines() if line.startswith("→ ")]
    assert sent[0]["params"]["protocolVersion"] == "2024-11-05"
    answer = json.loads(done.stdout.splitlines()[-1][2:])
    assert answer["result"]["isError"] is False and "structuredContent" not in answer["result"]


def test_what_changed_stopped_while_comparing_exits_3_and_says_why_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """what_changed has no ``stopped_reason``: its ``reason`` says why it is incomplete. Before, the
    line on stderr said only 'stopped early'."""
    from sysmcp.cli.call import CallOptions, _report

    why = (
        "comparing the two snapshots stopped early (its time budget ran out) after 12,288 directories "
        "in name order: what changed is not known"
    )
    reply = {
        "result": {
            "content": [
                {"type": "text", "text": "PARTIAL RESULT: comparing the two snapshots stopped early"}
            ],
            "structuredContent": {"complete": False, "comparable": False, "reason": why},
        }
    }
    assert _report("what_changed", reply, CallOptions()) == 3
    assert capsys.readouterr().err == f"sysmcp call: PARTIAL RESULT ({why}): exit 3\n"


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (  # comparing ran out of time: its reason's words, not the choice beside them
            {
                "complete": False,
                "comparable": False,
                "reason": "comparing the two snapshots stopped early (its time budget ran out) after 12,288 "
                "directories in name order: what changed is not known",
                "stopped_reason": "time_budget",
            },
            "comparing the two snapshots stopped early (its time budget ran out) after 12,288 directories "
            "in name order: what changed is not known",
        ),
        (  # no reason (nothing to compare with): the choice said in words
            {"complete": False, "comparable": False, "reason": None, "stopped_reason": "scan_stopped"},
            "the scan made now stopped at its time budget",
        ),
        (
            {"complete": False, "comparable": False, "reason": None, "stopped_reason": "snapshot_pruned"},
            "a prune deleted a snapshot as it was compared",
        ),
    ],
)
def test_what_changed_cut_short_says_why_in_words_beside_its_stopped_reason(
    capsys: pytest.CaptureFixture[str], data: dict[str, object], said: str
) -> None:
    """what_changed's ``stopped_reason`` is a choice (time_budget, scan_stopped, snapshot_pruned), not
    words as the other tools' are: taken first, the line on stderr read 'PARTIAL RESULT (time_budget)'
    where it gave the reason's words."""
    from sysmcp.cli.call import CallOptions, _report

    reply = {"result": {"content": [{"type": "text", "text": "PARTIAL RESULT"}], "structuredContent": data}}
    assert _report("what_changed", reply, CallOptions()) == 3
    assert capsys.readouterr().err == f"sysmcp call: PARTIAL RESULT ({said}): exit 3\n"


def test_a_container_usage_whose_walk_stopped_early_exits_3_and_says_why() -> None:
    """Its answer says PARTIAL RESULT first: ``sysmcp call`` exited 0, as for a whole one."""
    from sysmcp.cli.call import exit_status, partial_reason

    why = "out of file descriptors, this process's limit of 32 open files reached"
    cut = {"structuredContent": {"reconciliation": {"complete": False, "stopped_reason": why}}}
    assert exit_status("container_usage", cut) == 3
    assert partial_reason(cut) == why
    whole = {"structuredContent": {"reconciliation": {"complete": True}}}
    assert exit_status("container_usage", whole) == 0
    assert exit_status("container_usage", {"structuredContent": {"reconciliation": None}}) == 0
