"""``sysmcp call`` with the fleet options: forwarded to the server it spawns, real sshd hosts behind it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysmcp.cli import build_parser
from sysmcp.cli.call import _server_args
from sysmcp.cli.options import fleet_options
from sysmcp.fleet.fanout import DEFAULT_DEADLINE
from tests.fleet.lab import SHARED, Lab, unavailable

pytestmark = pytest.mark.slow

SAME, OTHER = "listen 80;\n", "listen 8080;\n"
CONF = "etc/app.conf"


def call(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sysmcp", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    lab = Lab(tmp_path_factory.mktemp("callfleet"))
    try:
        lab.add("web1", files={CONF: SAME})
        lab.add("web2", files={CONF: SAME})
        lab.add("odd", files={CONF: OTHER})
        lab.add("refused", start=False)
        lab.inventory({"web": ["web1", "web2"]})
        yield lab
    finally:
        lab.close()


def fleet(lab: Lab) -> list[str]:
    """Every host here answers: the connect timeout is a guard (8 s was too short under a CPU hog)."""
    return lab.gateway_args(60)


def test_every_fleet_option_is_forwarded_from_either_side_of_call() -> None:
    before = ["--host", "a", "call", "--host", "b", "--inventory", "hosts.ini", "--ssh-config", "cfg"]
    after = ["--remote-command", "sysmcp", "--fleet-concurrency", "3", "--connect-timeout", "2.5"]
    args = build_parser().parse_args([*before, *after, "disk_usage"])
    handed = [
        "--inventory",
        "/tmp/sysmcp-call-x/inventory",
    ]  # what call read of hosts.ini, in a file of its own
    assert _server_args(args, [], handed) == [
        "--log-level=warning",
        *("--host=a", "--host=b", "--ssh-config=cfg"),
        *("--remote-command=sysmcp", "--fleet-concurrency=3", "--connect-timeout=2.5"),
        *handed,
    ]
    assert _server_args(build_parser().parse_args(["call", "disk_usage"]), [], []) == ["--log-level=warning"]


def test_the_fleet_options_configure_the_fleet_a_zero_keeps_the_default_and_a_negative_is_refused() -> None:
    given = [
        "--host",
        "web1",
        "--fleet-concurrency",
        "3",
        "--connect-timeout",
        "2.5",
        "--fleet-deadline",
        "0",
    ]
    more = [
        "--jump-handshakes",
        "4",
        "--ssh-config",
        "cfg",
        "--remote-command",
        "sysmcp serve",
        "--fleet-memory",
        "8",
    ]
    options = fleet_options(build_parser().parse_args([*given, *more]))
    assert list(options.inventory.hosts) == ["web1"]
    assert (options.fleet_concurrency, options.connect_timeout, options.fleet_deadline) == (
        3,
        2.5,
        DEFAULT_DEADLINE,
    )
    assert (options.jump_handshakes, options.ssh_config, options.remote_command) == (4, "cfg", "sysmcp serve")
    assert options.fleet_memory == 8
    with pytest.raises(ValueError, match="must be positive"):
        fleet_options(build_parser().parse_args(["--host", "web1", "--fleet-deadline", "-1"]))
    with pytest.raises(ValueError, match="--fleet-memory must be positive"):
        fleet_options(build_parser().parse_args(["--host", "web1", "--fleet-memory", "-1"]))


def test_hosts_without_a_fleet_is_a_usage_error() -> None:
    done = call("call", "disk_usage", "hosts=all")
    assert done.returncode == 2 and "hosts= needs a fleet" in done.stderr


def test_a_comma_list_and_a_json_array_of_hosts_both_reach_the_hosts(lab: Lab) -> None:
    path = str(lab.base / SHARED / CONF)
    digest = hashlib.sha256(SAME.encode()).hexdigest()
    listed = call("call", *fleet(lab), "file_sha256", f"path={path}", f"expected={digest}", "hosts=web1,web2")
    assert listed.returncode == 0, listed.stderr
    assert "2 of 2 hosts answered" in listed.stdout
    array = call("call", *fleet(lab), "--json", "file_sha256", f"path={path}", 'hosts=["web"]')
    assert array.returncode == 0, array.stderr
    hosts = json.loads(array.stdout)["hosts"]
    assert {(h["host"], h["status"], h["result"]["sha256"]) for h in hosts} == {
        ("web1", "ok", digest),
        ("web2", "ok", digest),
    }


def test_an_inventory_given_as_a_pipe_is_read_once_and_its_hosts_answer(lab: Lab) -> None:
    path = str(lab.base / SHARED / CONF)
    digest = hashlib.sha256(SAME.encode()).hexdigest()
    given = fleet(lab)
    inventory = given[given.index("--inventory") + 1]
    rest = given[: given.index("--inventory")] + given[given.index("--inventory") + 2 :]
    script = 'exec "$0" -m sysmcp call --inventory <(cat "$1") "${@:2}"'  # /dev/fd/63: one reading
    done = subprocess.run(
        [
            "bash",
            "-c",
            script,
            sys.executable,
            inventory,
            *rest,
            "file_sha256",
            f"path={path}",
            f"expected={digest}",
            "hosts=web",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "2 of 2 hosts answered" in done.stdout


def test_one_host_with_a_mismatch_makes_the_fleet_call_exit_1(lab: Lab) -> None:
    path = str(lab.base / SHARED / CONF)
    digest = hashlib.sha256(SAME.encode()).hexdigest()
    done = call("call", *fleet(lab), "file_sha256", f"path={path}", f"expected={digest}", "hosts=web1,odd")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "odd" in done.stdout


def test_an_unreachable_host_prints_its_status_and_exits_1(lab: Lab) -> None:
    done = call("call", *fleet(lab), "disk_usage", "hosts=refused")
    assert done.returncode == 1
    assert "0 of 1 host answered, 1 unreachable" in done.stderr
    assert "refused: unreachable" in done.stderr


def test_output_dir_gets_each_hosts_full_manifest_not_the_merged_summary(lab: Lab, tmp_path: Path) -> None:
    target = tmp_path / "manifests"
    base = str(lab.base / SHARED)
    done = call("call", *fleet(lab), "hash_tree", f"path={base}", "hosts=web1,odd,refused", "-o", str(target))
    assert done.returncode == 1, done.stderr  # refused has no result
    assert sorted(p.name for p in target.iterdir()) == ["odd.SHA256SUMS", "web1.SHA256SUMS"]
    same = hashlib.sha256(SAME.encode()).hexdigest()
    other = hashlib.sha256(OTHER.encode()).hexdigest()
    assert (target / "web1.SHA256SUMS").read_text() == f"{same}  {CONF}\n"
    assert (target / "odd.SHA256SUMS").read_text() == f"{other}  {CONF}\n"
    assert "wrote 2 host results" in done.stderr
    sums = call("call", *fleet(lab), "disk_usage", "hosts=web", "-o", str(tmp_path / "df"))
    assert sorted(p.name for p in (tmp_path / "df").iterdir()) == ["web1.json", "web2.json"], sums.stderr
    assert "filesystems" in json.loads((tmp_path / "df" / "web1.json").read_text())


def test_a_host_result_that_cannot_be_written_is_one_line_and_exit_1_not_a_traceback(
    lab: Lab, tmp_path: Path
) -> None:
    target = tmp_path / "manifests"
    (target / "web1.SHA256SUMS").mkdir(parents=True)  # where web1's file would go: a directory
    base = str(lab.base / SHARED)
    done = call("call", *fleet(lab), "hash_tree", f"path={base}", "hosts=web1", "-o", str(target))
    assert done.returncode == 1, done.stderr
    assert (
        f"sysmcp call: -o {target}: web1.SHA256SUMS: Is a directory (0 of 1 host result written)"
        in done.stderr
    )
    assert "Traceback" not in done.stderr


def test_a_hosts_names_that_are_not_utf8_reach_the_fleets_answer_exactly(lab: Lab) -> None:
    """web1 holds ``byte\\x80`` (the byte) and ``byte\\\\x80`` (four characters). Its structured content
    showed both as ``byte\\\\x80``, and so did the gateway's merged table and JSON: the two files were one
    name there. The gateway now reads each host's names back to their bytes (``exact_bytes``), shows
    them apart in its text, and lists them in its own ``exact_bytes``."""
    from tests.security.test_exact_names import undone

    here = lab.base / "web1" / SHARED / "names"
    here.mkdir(exist_ok=True)
    for index, name in enumerate([b"byte\x80", b"byte\\x80"]):
        with open(os.fsencode(here) + b"/" + name, "wb") as made:
            made.write(b"x" * (1000 * (index + 1)))
    where = str(lab.base / SHARED / "names")
    asked = ["dir_usage", f"path={where}", "show=files", "hosts=web1"]
    answer = call("call", *fleet(lab), "--json", *asked)
    assert answer.returncode == 0, answer.stderr
    result = undone(json.loads(answer.stdout))["hosts"][0]["result"]
    assert sorted(os.fsencode(f["path"]) for f in result["largest_files"]) == sorted(
        os.fsencode(where) + b"/" + name for name in (b"byte\x80", b"byte\\x80")
    ), answer.stdout
    text = call("call", *fleet(lab), *asked)
    assert f"{where}/byte\\200" in text.stdout and f"{where}/byte\\\\x80" in text.stdout, text.stdout
