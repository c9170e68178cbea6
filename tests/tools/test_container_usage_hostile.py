"""container_usage against an engine that says anything: a rootless engine on a user's socket, or the
``docker``/``podman`` command of such an engine, is another user's word. What it gives malformed is
that item's figure unknown, never a failed survey nor a figure it did not give."""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.containers import ContainersRequest, Survey, _command, survey
from sysmcp.engine.containers._command import decimal_size
from sysmcp.engine.containers._survey import _command_figures, _walk
from sysmcp.engine.faults import NotFound, Unavailable
from sysmcp.reclaim import _classes
from sysmcp.tools.container_usage import answer, render
from sysmcp.tools.errors import words
from tests.tools.recorded_engine import recorded_engine

HUGE = 10**400  # JSON allows it; no float holds it
NOBODY = 65534

#: A Docker engine's API answers, enough for a survey with no image, container nor volume.
ENGINE_ANSWERS: dict[str, Any] = {
    "/version": {"Version": "24.0.7"},
    "/info": {"DockerRootDir": "", "Driver": "overlay2"},
    "/system/df": {},
    "/containers/json": [],
}

#: What ``docker info --format json`` prints, enough to be Docker's (no ``store``: not Podman's).
DOCKER_INFO = {"ServerVersion": "24.0.7", "DockerRootDir": "/nonexistent/docker", "Driver": "overlay2"}


def _stub(box: Path, monkeypatch: pytest.MonkeyPatch, command: str, says: dict[str, Any]) -> None:
    """A ``command`` first on PATH that prints ``says[<its first argument>]`` as JSON (as docker's and
    podman's ``--format json`` do: ``Infinity`` and ``NaN`` as Python's JSON writes them)."""
    (box / f"{command}.json").write_text(json.dumps(says))
    stub = box / command
    stub.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(box / 'calls')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        f"print(json.dumps(json.load(open({str(box / f'{command}.json')!r}))[sys.argv[1]]))\n"
    )
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{box}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("DOCKER_HOST", raising=False)


def _by_command(command: str, **request: Any) -> Survey:
    return survey(ContainersRequest(sockets=(), commands=(command,), walk=False, timeout_s=60, **request))


def _asked(box: Path, what: str) -> int:
    """How many times the stub command was asked ``what`` ('container inspect')."""
    calls = box / "calls"
    return sum(line.startswith(what) for line in calls.read_text().splitlines()) if calls.exists() else 0


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "bin").mkdir()
    yield tmp_path / "bin"


# -- docker's command: sizes as rounded decimal text ----------------------------------------------

#: Figures no docker prints, each failing the whole survey or giving a size nobody measured before.
MALFORMED_SIZES = [
    "1.2.3GB",  # float('1.2.3'): ValueError, the survey failed
    "1..5MB",  # the same
    ".GB",  # float('.'): the same
    "9" * 400 + "GB",  # float: inf, int(inf): OverflowError, the survey failed
    "99999999999999999999PB",  # 10**35 bytes: more than any disk (a size no file can have)
    "NaNkB",
    "-5MB",
    "-1B",
    "1e999GB",
    "inf GB",
    "0x10MB",
    "",
    "N/A",
    "12",  # no unit
    "1.5EB",  # a unit docker's figures never reach here
    "1.5MB then more",
]


def _docker_df(size: str) -> dict[str, Any]:
    """``docker system df -v --format json`` with ``size`` as one container's, one volume's and one
    image's size, beside a well-formed one of each."""
    return {
        "Images": [
            {"ID": "sha256:good", "Repository": "good", "Tag": "1", "Size": "2MB", "SharedSize": "0B"},
            {"ID": "sha256:bad", "Repository": "bad", "Tag": "1", "Size": size, "SharedSize": size},
        ],
        "Containers": [
            {"ID": "c1", "Names": "good", "Image": "good:1", "State": "exited", "Size": "1.5MB"},
            {"ID": "c2", "Names": "bad", "Image": "bad:1", "State": "exited", "Size": size},
        ],
        "Volumes": [
            {"Name": "good", "Links": "1", "Size": "3kB", "Mountpoint": "/nonexistent/docker/volumes/good"},
            {"Name": "bad", "Links": "1", "Size": size, "Mountpoint": "/nonexistent/docker/volumes/bad"},
        ],
        "BuildCache": [{"Size": "4MB", "InUse": True}, {"Size": size, "InUse": False}],
    }


@pytest.mark.parametrize("size", MALFORMED_SIZES, ids=repr)
def test_a_malformed_size_from_dockers_command_is_that_items_size_unknown_not_a_failed_survey(
    box: Path, monkeypatch: pytest.MonkeyPatch, size: str
) -> None:
    _stub(box, monkeypatch, "docker", {"info": DOCKER_INFO, "system": _docker_df(size), "container": []})
    found = _by_command("docker")
    assert {c.name: c.writable for c in found.containers} == {"good": 1_500_000, "bad": None}
    assert {v.name: v.size for v in found.volumes} == {"good": 3000, "bad": None}
    assert found.build_cache.bytes == 4_000_000
    assert {i.tags: (i.size, i.unique) for i in found.images} == {
        ("good:1",): (2_000_000, 2_000_000),
        ("bad:1",): (None, None),
    }
    usage = answer(found, 10, 0.0, None)
    assert usage.images.not_measured == 1 and usage.images.largest[1].bytes is None
    text = render(usage)
    assert (
        "Images: 2 images, 1.9 MiB of layers (estimated: the engine gave no total) (1 of unknown size)"
        in text
    )
    assert "         ?  bad:1  size unknown, 0 containers" in text, text
    assert "writable layers at least 1.4 MiB (1 unknown)" in text, text
    assert "         ?  bad  exited, bad:1" in text, text
    assert "Volumes: 2 volumes, at least 2.9 KiB (1 unknown)" in text, text


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("0B", 0),
        ("1.982MB", 1_982_000),
        ("1.001MB", 1_001_000),  # read exactly: not 1000999 (float's 1.001 * 10**6)
        ("1.2GB (50%)", 1_200_000_000),
        ("  512kB ", 512_000),
        ("3 B", 3),
        ("2.5TB", 2_500_000_000_000),
    ],
)
def test_the_sizes_dockers_command_prints_are_read_back(text: str, size: int) -> None:
    assert decimal_size(text) == size


#: Counts docker prints as decimal text ('N/A' where the engine did not count): anything else unknown.
MALFORMED_COUNTS = ["-1", "-5", "N/A", "1e3", "NaN", "Infinity", "", " ", "1.5", "9" * 30, True, 2.0, None]


@pytest.mark.parametrize("links", MALFORMED_COUNTS, ids=repr)
def test_a_malformed_count_from_dockers_command_is_unknown_never_a_dangling_volume(
    box: Path, monkeypatch: pytest.MonkeyPatch, links: Any
) -> None:
    df = {"Volumes": [{"Name": "v", "Links": links, "Size": "3kB", "Mountpoint": ""}]}
    _stub(box, monkeypatch, "docker", {"info": DOCKER_INFO, "system": df, "container": []})
    found = _by_command("docker")
    assert [(v.refs, v.dangling) for v in found.volumes] == [(None, False)]
    assert "containers using it unknown" in render(answer(found, 10, 0.0, None))


# -- podman's command: exact figures as JSON numbers ------------------------------------------------

PODMAN_INFO = {
    "host": {"logDriver": "k8s-file"},
    "store": {"graphRoot": "/nonexistent/storage", "graphDriverName": "vfs"},
    "version": {"Version": "4.3.1"},
}

#: JSON no podman prints for a size or count: each is unknown (the survey failed on Infinity, the
#: render on 10**400; -1 was a dangling volume, true one container, "12" and 1.5 counts nobody gave).
HOSTILE_NUMBERS = [
    float("inf"),
    float("-inf"),
    float("nan"),
    HUGE,
    2**63,
    -1,
    True,
    False,
    "12",
    1.5,
    [],
    {},
]


@pytest.mark.parametrize("value", HOSTILE_NUMBERS, ids=repr)
def test_a_hostile_number_from_podmans_command_is_unknown_not_a_failed_survey(
    box: Path, monkeypatch: pytest.MonkeyPatch, value: Any
) -> None:
    says = {
        "info": PODMAN_INFO,
        "images": [],
        "ps": [
            {"Id": "a1", "Names": ["good"], "State": "exited", "Size": {"rwSize": 7}},
            {"Id": "b2", "Names": ["bad"], "State": "exited", "Size": {"rwSize": value}},
        ],
        "volume": [
            {"Name": "good", "Mountpoint": "/nonexistent/storage/volumes/good", "MountCount": 0},
            {"Name": "bad", "Mountpoint": "/nonexistent/storage/volumes/bad", "MountCount": value},
        ],
        "container": [],
    }
    _stub(box, monkeypatch, "podman", says)
    found = _by_command("podman")
    assert {c.name: c.writable for c in found.containers} == {"good": 7, "bad": None}
    assert {v.name: (v.refs, v.dangling) for v in found.volumes} == {"good": (0, True), "bad": (None, False)}
    text = render(answer(found, 10, 0.0, None))
    assert "         ?  bad  exited" in text and "Volumes: 2 volumes, size unknown; 1 dangling" in text, text


# -- many containers: the inspects of their logs, through the command ------------------------------


def _many(count: int) -> dict[str, Any]:
    """``docker``'s answers for ``count`` containers, each inspect naming its log."""
    ids = [f"c{n}" for n in range(count)]
    df = {"Containers": [{"ID": c, "Names": c, "State": "exited", "Size": "1kB"} for c in ids]}
    inspects = [
        {"Id": c, "LogPath": f"/nonexistent/{c}.log", "HostConfig": {"LogConfig": {"Type": "json-file"}}}
        for c in ids
    ]
    return {"info": DOCKER_INFO, "system": df, "container": inspects}


def test_the_commands_inspects_stop_at_their_time_budget_and_the_containers_left_are_counted(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stub(box, monkeypatch, "docker", _many(3))
    found = _by_command("docker", inspect_timeout_s=0)
    assert _asked(box, "container inspect") == 0
    assert [(log.container, log.inspected) for log in found.logs] == [(c, False) for c in ("c0", "c1", "c2")]
    assert "3 containers not inspected within the time budget" in render(answer(found, 10, 0.0, None))
    kept = _by_command("docker")
    assert [(log.container, log.inspected, log.file.path) for log in kept.logs] == [
        (c, True, f"/nonexistent/{c}.log") for c in ("c0", "c1", "c2")
    ]


class Stop(Exception):
    """What the survey's check raises once it stopped."""


def test_a_survey_stopped_while_the_command_inspects_asks_no_further_inspect(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_command, "INSPECT_AT_ONCE", 1)  # one command for each container
    _stub(box, monkeypatch, "docker", _many(3))

    def check() -> None:  # the survey stops (cancelled) once the first inspect was asked
        if _asked(box, "container inspect"):
            raise Stop

    found = Survey("", "Docker 24.0.7", "/nonexistent/docker", "overlay2", "json-file", 0, command="docker")
    with pytest.raises(Stop):
        _command_figures("docker", found, ContainersRequest(timeout_s=60), lambda *_: None, check)
    assert _asked(box, "container inspect") == 1


# -- a slow engine: the survey's stop ends the GET under way --------------------------------------


def test_a_survey_cancelled_while_the_engine_holds_a_get_returns_without_waiting_for_its_timeout(
    tmp_path: Path,
) -> None:
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": "", "Driver": "overlay2"},
        "/system/df": {},
        "/containers/json": [],
    }
    asked: list[str] = []

    def cancel() -> None:  # the caller cancels once the engine holds /system/df (it measures for minutes)
        if "/system/df" in asked:
            raise Stop

    with recorded_engine(answers, str(tmp_path / "e.sock"), slow={"/system/df": 600}, asked=asked) as path:
        began = time.monotonic()
        with pytest.raises(Stop):
            survey(ContainersRequest(socket=path, walk=False, timeout_s=60), cancel=cancel)
        took = time.monotonic() - began
    # Not the GET's 60 s timeout: a bound far from what a loaded machine takes (a fraction of a second).
    assert took < 30, took
    assert not [t for t in threading.enumerate() if t.name.startswith("engine-api")]


# -- an engine that lists one thing again ---------------------------------------------------------


def test_an_image_container_volume_or_log_file_the_engine_lists_again_is_counted_once(
    tmp_path: Path,
) -> None:
    log = tmp_path / "a-json.log"
    log.write_bytes(b"x" * 1000)
    df = {
        "Images": [{"Id": "sha256:i", "RepoTags": [], "Size": 5000, "SharedSize": 0}] * 2,
        "Containers": [{"Id": "a", "Names": ["/web"], "State": "exited", "SizeRw": 300}] * 2
        + [{"Id": "b", "Names": ["/copy"], "State": "exited", "SizeRw": 7}],
        "Volumes": [{"Name": "v", "UsageData": {"Size": 200, "RefCount": 0}}] * 2,
    }
    inspect = {"LogPath": str(log), "HostConfig": {"LogConfig": {"Type": "json-file"}}}
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": "", "Driver": "overlay2"},
        "/system/df": df,
        "/containers/json": [{"Id": "a", "Names": ["/web"]}] * 2 + [{"Id": "b", "Names": ["/copy"]}],
        "/containers/a/json": inspect,
        "/containers/b/json": inspect,  # another container naming the same file
    }
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path:
        found = survey(ContainersRequest(socket=path, walk=False))
    usage = answer(found, 10, 0.0, None)
    assert (usage.images.count, usage.images.dangling_unique_bytes) == (1, 5000)
    assert (usage.containers.count, usage.containers.stopped_writable_bytes) == (2, 307)
    assert (usage.volumes.count, usage.volumes.dangling_bytes) == (1, 200)
    assert (usage.logs.count, usage.logs.bytes) == (1, 1000)
    assert usage.repeated == 5  # the image, container a, the volume; a's log again, and b's (the same file)
    assert "The engine listed 5 entries again" in render(usage)


# -- an engine on another user's socket names another user's file as a log -------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a socket and a file to another user (needs root)")
def test_a_log_file_an_engine_on_another_users_socket_names_is_measured_only_if_it_is_that_users(
    tmp_path: Path,
) -> None:
    tmp_path.chmod(0o755)
    theirs, others = tmp_path / "theirs.log", tmp_path / "shadow"
    theirs.write_bytes(b"x" * 300)
    os.chown(theirs, NOBODY, NOBODY)
    others.write_bytes(b"y" * 5000)  # root's: not the rootless engine's to name
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": "", "Driver": "overlay2"},
        "/system/df": {},
        "/containers/json": [{"Id": "a", "Names": ["/a"]}, {"Id": "b", "Names": ["/b"]}],
        "/containers/a/json": {"LogPath": str(theirs), "HostConfig": {}},
        "/containers/b/json": {"LogPath": str(others), "HostConfig": {}},
    }
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path:
        os.chown(path, NOBODY, NOBODY)  # a rootless engine's socket
        found = survey(ContainersRequest(socket=path, walk=False))
        os.chown(path, 0, 0)  # root's engine: its word is any file's
        trusted = survey(ContainersRequest(socket=path, walk=False))
    assert {(log.container, log.bytes) for log in found.logs} == {("a", 300), ("b", None)}
    assert {(log.container, log.foreign) for log in found.logs} == {("a", False), ("b", True)}
    usage = answer(found, 10, 0.0, None)
    assert (usage.logs.bytes, usage.logs.not_measured, usage.logs.not_the_engines) == (300, 1, 1)
    assert "1 file named not the engine's user's (another user's socket): not measured" in render(usage)
    assert {(log.container, log.bytes) for log in trusted.logs} == {("a", 300), ("b", 5000)}


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a socket to another user (needs root)")
def test_an_engine_on_another_users_socket_that_swaps_it_for_a_link_to_roots_file_is_still_that_users(
    tmp_path: Path,
) -> None:
    """A rootless engine's user owns the directory of its socket: once connected to, they may put a
    symlink to a file of root's in its place. Its owner looked up by name then was root's, so the
    engine's word was taken for any file's: its log named /etc/shadow measured, and planned for emptying."""
    tmp_path.chmod(0o755)
    others = tmp_path / "shadow"
    others.write_bytes(b"y" * 5000)  # root's: not the rootless engine's to name
    sock = tmp_path / "run" / "e.sock"
    sock.parent.mkdir()
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": "", "Driver": "overlay2"},
        "/system/df": {},
        "/containers/json": [{"Id": "b", "Names": ["/b"]}],
        "/containers/b/json": {"LogPath": str(others), "HostConfig": {}},
    }
    others_asked = {"/system/df": threading.Event(), "/version": threading.Event()}

    def swap(url: str) -> None:  # once every connection is made: the name now leads to root's file
        if url in others_asked:
            others_asked[url].set()
        elif url == "/info":
            assert all(event.wait(30) for event in others_asked.values())
            os.rename(sock, sock.with_name("hidden.sock"))
            sock.symlink_to(others)

    with recorded_engine(answers, str(sock), keep_alive=True, on_ask=swap) as path:
        os.chown(path, NOBODY, NOBODY)  # a rootless engine's socket
        found = survey(ContainersRequest(socket=path, walk=False))
    assert found.speaker == NOBODY, found.speaker
    assert [(log.container, log.bytes, log.foreign) for log in found.logs] == [("b", None, True)]


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a socket to another user (needs root)")
def test_a_log_a_rootless_engine_names_is_not_planned_for_emptying_after_it_swaps_its_socket_for_a_link(
    tmp_path: Path,
) -> None:
    """The plan's owner rule, told of the socket the survey reached, not of its name looked up after the
    survey: by then the engine's user had put a symlink to a file of root's in its place."""
    tmp_path.chmod(0o755)
    others = tmp_path / "shadow"
    others.write_bytes(b"y" * 5000)
    sock = tmp_path / "run" / "e.sock"
    sock.parent.mkdir()
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": "", "Driver": "overlay2"},
        "/system/df": {},
        "/containers/json": [{"Id": "b", "Names": ["/b"]}],
        "/containers/b/json": {"LogPath": str(others), "HostConfig": {}},
    }

    def swap(url: str) -> None:  # the last GET: every connection was made
        if url == "/containers/b/json":
            os.rename(sock, sock.with_name("hidden.sock"))
            sock.symlink_to(others)

    with recorded_engine(answers, str(sock), keep_alive=True, on_ask=swap) as path:
        os.chown(path, NOBODY, NOBODY)  # a rootless engine's socket
        planned = _classes.containers(_classes.RootsLayout(container_socket=path))
    logs = [p for p in planned if ":log:" in p.key]
    assert [(p.action, p.command) for p in logs] == [("command", f"truncate -s 0 {others}")], logs
    assert f"listens on a socket of uid {NOBODY}'s" in (logs[0].note or ""), logs[0].note


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a socket to another user (needs root)")
def test_an_engine_socket_whose_name_leads_to_another_users_socket_between_two_gets_is_not_believed(
    tmp_path: Path,
) -> None:
    """A name another user can re-point (a symlink in their directory, reached through DOCKER_HOST) that
    leads to root's engine when first connected to, then to their own engine: an engine answers each GET
    on a connection of its own (HTTP/1.0), so the later GETs' paths were their engine's, believed as root's."""
    tmp_path.chmod(0o755)
    others = tmp_path / "shadow"
    others.write_bytes(b"y" * 5000)
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": "", "Driver": "overlay2"},
        "/system/df": {},
        "/containers/json": [{"Id": "b", "Names": ["/b"]}],
        "/containers/b/json": {"LogPath": "", "HostConfig": {}},
    }
    theirs = {**answers, "/containers/b/json": {"LogPath": str(others), "HostConfig": {}}}
    link = tmp_path / "link.sock"

    def swap(url: str) -> None:  # the list answered by root's engine, the inspect asked of theirs
        if url == "/containers/json":
            link.unlink()
            link.symlink_to(tmp_path / "theirs.sock")

    with (
        recorded_engine(answers, str(tmp_path / "roots.sock"), on_ask=swap),
        recorded_engine(theirs, str(tmp_path / "theirs.sock")) as their_path,
    ):
        os.chown(their_path, NOBODY, NOBODY)
        link.symlink_to(tmp_path / "roots.sock")
        try:
            found = survey(ContainersRequest(socket=str(link), walk=False))
        except Unavailable as refused:
            assert "another's now" in str(refused), refused
        else:
            assert [log.bytes for log in found.logs] == [None], found.logs


# -- a data root that is no directory --------------------------------------------------------------


@pytest.mark.parametrize(
    ("made", "why"),
    [
        ("loop", "Too many levels of symbolic links"),
        ("file", "it is not a directory"),
        ("missing", "No such file or directory"),
    ],
)
def test_a_data_root_that_is_a_symlink_loop_a_file_or_missing_says_why_it_was_not_walked(
    tmp_path: Path, made: str, why: str
) -> None:
    root = tmp_path / "data"
    if made == "loop":
        root.symlink_to(tmp_path / "other")
        (tmp_path / "other").symlink_to(root)
    elif made == "file":
        root.write_text("not a directory")
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": str(root), "Driver": "overlay2"},
        "/system/df": {},
        "/containers/json": [],
    }
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path:
        found = survey(ContainersRequest(socket=path))
    assert found.walked is None and found.unwalkable == why
    assert f"The data root could not be read here ({why}): the engine's figures only." in render(
        answer(found, 10, 0.0, None)
    )


# -- docker's command reaching an engine on another host -------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="reclaim empties a log itself only as root or its owner")
def test_an_engine_on_another_host_names_no_file_here_to_walk_measure_or_empty(
    box: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docker's context (or DOCKER_HOST) reaching ssh:// or tcp://: the paths its engine names are that
    host's; one that names this machine's files (its /var/log/syslog as a container's log) names none."""
    root, syslog = tmp_path / "root", tmp_path / "syslog"
    (root / "containers").mkdir(parents=True)
    (root / "containers" / "blob").write_bytes(b"z" * 4096)
    syslog.write_bytes(b"s" * 7000)
    says = {
        **_many(1),
        "info": {**DOCKER_INFO, "DockerRootDir": str(root)},
        "context": "ssh://me@far.example",
    }
    says["container"][0]["LogPath"] = str(syslog)
    _stub(box, monkeypatch, "docker", says)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(_classes, "ContainersRequest", functools.partial(ContainersRequest, sockets=()))
    planned = _classes.containers(_classes.RootsLayout(container_engines=("docker",)))
    assert [p.command for p in planned if str(syslog) in repr(p)] == []  # was: truncate -s 0 …/syslog
    found = survey(ContainersRequest(sockets=(), commands=("docker",), timeout_s=60))
    assert found.walked is None
    assert [(log.container, log.file.path, log.bytes) for log in found.logs] == [("c0", str(syslog), None)]
    text = render(answer(found, 10, 0.0, None))
    assert "could not be read here (it is on the engine's host, ssh://me@far.example)" in text, text
    assert syslog.stat().st_size == 7000


def test_a_docker_without_contexts_reaching_another_host_by_docker_host_is_judged_remote(
    box: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A docker whose ``context`` command fails (before 19.03, which reached ssh:// hosts already, or
    one whose context store cannot be read) says nothing of where it reaches: DOCKER_HOST then does.
    Else the other host's data root and log paths were walked and measured here as this machine's."""
    root, syslog = tmp_path / "root", tmp_path / "syslog"
    (root / "containers").mkdir(parents=True)
    syslog.write_bytes(b"s" * 7000)
    says = {**_many(1), "info": {**DOCKER_INFO, "DockerRootDir": str(root)}}  # no 'context': it fails
    says["container"][0]["LogPath"] = str(syslog)
    _stub(box, monkeypatch, "docker", says)
    monkeypatch.setenv("DOCKER_HOST", "ssh://me@far.example")
    found = survey(ContainersRequest(sockets=(), commands=("docker",), timeout_s=60))
    assert _asked(box, "context") == 1
    assert found.remote and found.walked is None, (found.endpoint, found.walked)
    assert [(log.container, log.bytes) for log in found.logs] == [("c0", None)]


def test_an_engine_command_answering_json_nested_past_the_parsers_depth_is_no_engine_not_an_internal_error(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stub(box, monkeypatch, "docker", {})
    (box / "docker").write_text(f"#!{sys.executable}\nprint('[' * 200_000 + ']' * 200_000)\n")
    with pytest.raises(NotFound) as caught:
        _by_command("docker")
    assert "`docker info --format` answered with something not JSON" in words(caught.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a socket to another user (needs root)")
def test_a_data_root_an_engine_on_another_users_socket_names_that_is_not_that_users_is_neither_walked_nor_read(
    tmp_path: Path,
) -> None:
    tmp_path.chmod(0o755)
    root = tmp_path / "someone-elses"  # root's, as another user's home or / would be
    kept = root / "containers" / "a"
    kept.mkdir(parents=True)
    (kept / "config.v2.json").write_text(json.dumps({"Name": "/their-secret-project", "LogPath": ""}))
    (kept / "hostconfig.json").write_text("{}")
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": str(root), "Driver": "overlay2"},
        "/system/df": {},
        "/containers/json": [{"Id": "a", "Names": ["/web"]}],
        "/containers/a/json": {"LogPath": "", "HostConfig": {}},
    }
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path:
        os.chown(path, NOBODY, NOBODY)  # a rootless engine's socket
        found = survey(ContainersRequest(socket=path))
        os.chown(path, 0, 0)  # root's engine: any directory may be its data root
        trusted = survey(ContainersRequest(socket=path))
    assert found.walked is None and [log.container for log in found.logs] == ["web"]
    text = render(answer(found, 10, 0.0, None))
    assert f"could not be read here (it is uid 0's, not the engine's user's, uid {NOBODY})" in text, text
    assert trusted.walked is not None and [log.container for log in trusted.logs] == ["their-secret-project"]


# -- a data root of very many directories ----------------------------------------------------------


def test_a_data_root_of_more_directories_than_are_kept_says_how_many_are_not_named(tmp_path: Path) -> None:
    root = tmp_path / "data"
    for n in range(60):
        (root / f"d{n:02}").mkdir(parents=True)
        (root / f"d{n:02}" / "f").write_bytes(b"x" * (n + 1) * 100)
    found = Survey("", "Docker 24.0.7", str(root), "overlay2", "json-file", 0)
    found.walked = _walk(str(root), 60, lambda *_: None, lambda: None)
    usage = answer(found, 10, 0.0, None)
    assert usage.reconciliation is not None
    assert (len(usage.reconciliation.parts), usage.reconciliation.parts_not_shown) == (50, 10)
    by_directory = next(line for line in render(usage).splitlines() if "by directory:" in line)
    assert by_directory.startswith("  by directory: d59 ") and by_directory.endswith(
        " KiB, and 54 more directories"
    ), by_directory


def test_the_containers_files_in_the_data_root_are_read_within_the_inspects_time_budget(
    tmp_path: Path,
) -> None:
    root = tmp_path / "data"
    for n in range(3):
        kept = root / "containers" / f"c{n}"
        kept.mkdir(parents=True)
        (kept / "config.v2.json").write_text(json.dumps({"Name": f"/c{n}", "LogPath": f"/nonexistent/c{n}"}))
        (kept / "hostconfig.json").write_text("{}")
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": str(root), "Driver": "overlay2"},
        "/system/df": {},
        "/containers/json": [{"Id": f"c{n}", "Names": [f"/c{n}"]} for n in range(3)],
    }
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path:
        spent = survey(ContainersRequest(socket=path, walk=False, inspect_timeout_s=0))
        kept_all = survey(ContainersRequest(socket=path, walk=False))
    assert [(log.container, log.inspected) for log in spent.logs] == [(f"c{n}", False) for n in range(3)]
    assert sorted((log.container, log.file.path) for log in kept_all.logs) == [
        (f"c{n}", f"/nonexistent/c{n}") for n in range(3)
    ]


# -- paths no file can have ------------------------------------------------------------------------


def test_a_log_path_or_data_root_with_a_nul_byte_is_not_looked_at_not_a_failed_survey(tmp_path: Path) -> None:
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": f"{tmp_path}/data\0root", "Driver": "overlay2"},
        "/system/df": {},
        "/containers/json": [{"Id": "a", "Names": ["/a"]}, {"Id": "b", "Names": ["/b"]}],
        "/containers/a/json": {"LogPath": f"{tmp_path}/a\0.log", "HostConfig": {}},
        "/containers/b/json": {"LogPath": str(tmp_path / "b.log"), "HostConfig": {}},
    }
    (tmp_path / "b.log").write_bytes(b"b" * 20)
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path:
        found = survey(ContainersRequest(socket=path))
    assert sorted((log.container, log.bytes) for log in found.logs) == [("a", None), ("b", 20)]
    text = render(answer(found, 10, 0.0, None))
    assert "could not be read here (its name holds a NUL byte, which no path can)" in text, text


def test_a_survey_cancelled_while_the_engines_command_measures_kills_it_and_returns_at_once(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stub(box, monkeypatch, "docker", {"info": DOCKER_INFO, "context": "unix:///nonexistent.sock"})
    script = (box / "docker").read_text()  # as the stub, but 'system df' measures for ten minutes
    (box / "docker").write_text(
        script.replace("print(", "import time\nif sys.argv[1] == 'system': time.sleep(600)\nprint(", 1)
    )

    def cancel() -> None:  # the caller cancels once docker measures (system df -v: minutes on a large host)
        if _asked(box, "system df"):
            raise Stop

    began = time.monotonic()
    with pytest.raises(Stop):
        survey(ContainersRequest(sockets=(), commands=("docker",), walk=False, timeout_s=60), cancel=cancel)
    took = time.monotonic() - began
    assert took < 30, took  # not the command's 60 s timeout: a fraction of a second
    assert not [t for t in threading.enumerate() if t.name.startswith("engine-api")]


def test_a_log_path_naming_a_directory_a_device_or_a_symlink_is_no_log_file_measured(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to("/" + "x" * 200)  # a symlink's own size: its target's length
    (tmp_path / "real.log").write_bytes(b"r" * 30)
    named = {
        "d": str(tmp_path / "dir"),
        "n": "/dev/null",
        "l": str(tmp_path / "link"),
        "r": str(tmp_path / "real.log"),
    }
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": "", "Driver": "overlay2"},
        "/system/df": {},
        "/containers/json": [{"Id": c, "Names": [f"/{c}"]} for c in named],
        **{f"/containers/{c}/json": {"LogPath": path, "HostConfig": {}} for c, path in named.items()},
    }
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path:
        found = survey(ContainersRequest(socket=path, walk=False))
    assert {log.container: log.bytes for log in found.logs} == {"d": None, "n": None, "l": None, "r": 30}


def test_a_survey_cancelled_while_the_engine_holds_its_version_returns_without_waiting_for_its_timeout(
    tmp_path: Path,
) -> None:
    answers = {
        "/version": {"Version": "24.0.7"},
        "/info": {"DockerRootDir": "", "Driver": "overlay2"},
        "/system/df": {},
        "/containers/json": [{"Id": "a", "Names": ["/a"]}],
        "/containers/a/json": {"LogPath": "", "HostConfig": {}},
    }
    asked: list[str] = []
    inspected = threading.Event()

    def cancel() -> None:  # once all but /version is answered: the survey waits for that alone
        if inspected.is_set() and "/version" in asked:
            raise Stop

    with recorded_engine(answers, str(tmp_path / "e.sock"), slow={"/version": 600}, asked=asked) as path:
        began = time.monotonic()
        with pytest.raises(Stop):
            survey(
                ContainersRequest(socket=path, walk=False, timeout_s=60),
                lambda phase, done, seen: inspected.set(),
                cancel,
            )
        took = time.monotonic() - began
    assert took < 30, took  # not the GET's 60 s timeout


def test_a_survey_cancelled_while_the_engine_holds_its_info_returns_without_waiting_for_its_timeout(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    def cancel() -> None:
        if "/info" in asked:
            raise Stop

    with recorded_engine(
        dict(ENGINE_ANSWERS), str(tmp_path / "e.sock"), slow={"/info": 600}, asked=asked
    ) as path:
        began = time.monotonic()
        with pytest.raises(Stop):
            survey(ContainersRequest(socket=path, walk=False, timeout_s=60), cancel=cancel)
        took = time.monotonic() - began
    assert took < 30, took  # not the GET's 60 s timeout


@pytest.mark.parametrize(
    "created",
    ["0001-01-01 00:00:00 +0000 UTC", "1969-12-31 23:59:59 +0000 UTC"],
)
def test_a_creation_time_out_of_range_from_dockers_command_is_age_unknown_not_two_thousand_years(
    box: Path, monkeypatch: pytest.MonkeyPatch, created: str
) -> None:
    df = {"Containers": [{"ID": "c", "Names": "old", "State": "exited", "Size": "1kB", "CreatedAt": created}]}
    _stub(box, monkeypatch, "docker", {"info": DOCKER_INFO, "system": df, "container": []})
    usage = answer(_by_command("docker"), 10, 1_800_000_000.0, None)
    assert usage.containers.largest[0].age_s is None
    assert "exited, , age unknown" in render(usage), render(usage)
