"""container_usage against a real Docker engine the test starts, and against sockets that misbehave."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.containers import (
    Container,
    ContainersRequest,
    DataRootWalk,
    LogFile,
    Survey,
    Volume,
    find_socket,
    known_sockets,
    survey,
)
from sysmcp.engine.containers._api import Api
from sysmcp.engine.containers._command import ask
from sysmcp.engine.containers._survey import _log, _read_logs, _reconciled, _walk
from sysmcp.engine.faults import NotFound, PermissionRefused, Unavailable, WrongKind
from sysmcp.engine.paths import PathPolicy
from sysmcp.protocol.failures import ArgumentError
from sysmcp.reclaim import PlanRequest, build_plan, choose
from sysmcp.reclaim._classes import RootsLayout, containers
from sysmcp.tools.container_usage import answer, render
from sysmcp.tools.errors import words
from sysmcp.tools.reclaim_plan import render as render_plan
from sysmcp.tools.registry import ToolOutput
from sysmcp.tools.typed import ABSENT
from tests.harness import RecordingPeer as Recorder
from tests.harness import call_tool, python_as_nobody, tool_context
from tests.profile import UNDER_POSIX_PROFILE
from tests.tools.docker_lab import Lab, running_docker, why_not
from tests.tools.recorded_engine import recorded_engine

pytestmark = pytest.mark.anyio
NOBODY = 65534
KIB = 1024
MIB = 1024 * KIB


async def call(roots: list[Path] | None = None, peer: Recorder | None = None, **args: Any) -> ToolOutput:
    return await call_tool("container_usage", tool_context(roots, peer=peer, progress_token="c"), **args)


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    with running_docker() as lab:
        lab.busybox_image("bb:1")
        lab.busybox_image(None)  # dangling
        # A logging container left running, its volume holding 200 KiB.
        lab.docker("volume", "create", "data")
        lab.docker("volume", "create", "orphan")  # 100 KiB that no container uses any more
        lab.docker(
            "run", "--rm", "-v", "orphan:/o", "bb:1", "dd", "if=/dev/zero", "of=/o/old", "bs=1k", "count=100"
        )
        lab.docker(
            "run", "-d", "--name", "writer", "-v", "data:/data", "bb:1",
            "sh", "-c", "dd if=/dev/zero of=/data/blob bs=1k count=200 2>/dev/null; echo written; sleep 3600",
        )  # fmt: skip
        # A stopped container with 300 KiB in its writable layer and a rotation limit on its log.
        lab.docker(
            "run", "--name", "stopped", "--log-opt", "max-size=1m", "bb:1",
            "sh", "-c", "dd if=/dev/zero of=/junk bs=1k count=300 2>/dev/null; echo done",
        )  # fmt: skip
        lab.docker("commit", "stopped", "bb:2")  # shares bb:1's layer
        for _ in range(200):  # the writer's "written" is in its log before the figures are read
            if "written" in lab.docker("logs", "writer"):
                break
            subprocess.run(["sleep", "0.1"], check=True)
        yield lab


async def test_the_answer_holds_the_engines_own_figures_for_images_containers_volumes_and_logs(
    lab: Lab,
) -> None:
    peer = Recorder()
    output = await call(peer=peer, socket=str(lab.socket))
    s = output.structured
    assert s["engine"].startswith("Docker ")
    assert s["data_root"] == str(lab.data_root)
    images = {tag: row for row in s["images"]["largest"] for tag in row["tags"]}
    assert images["bb:1"]["bytes"] == int(lab.docker("image", "inspect", "bb:1", "--format", "{{.Size}}"))
    assert (
        images["bb:1"]["shared_bytes"] > 0
        and images["bb:2"]["shared_bytes"] == images["bb:1"]["shared_bytes"]
    )
    assert s["images"]["count"] == 3 and s["images"]["dangling"] == 1
    containers = {row["name"]: row for row in s["containers"]["largest"]}
    for name in ("writer", "stopped"):
        rw = int(lab.docker("inspect", "--size", name, "--format", "{{.SizeRw}}"))
        assert containers[name]["writable_bytes"] == rw
    assert containers["stopped"]["writable_bytes"] >= 300 * KIB
    assert containers["stopped"]["state"] == "exited" and containers["writer"]["state"] == "running"
    assert s["containers"]["stopped_writable_bytes"] == containers["stopped"]["writable_bytes"]
    volumes = {row["name"]: row for row in s["volumes"]["largest"]}
    assert volumes["data"]["bytes"] >= 200 * KIB and volumes["data"]["containers"] == 1
    assert volumes["orphan"]["containers"] == 0 and s["volumes"]["dangling"] == 1
    logs = {row["container"]: row for row in s["logs"]["largest"]}
    for name in ("writer", "stopped"):
        path = lab.docker("inspect", name, "--format", "{{.LogPath}}")
        assert logs[name]["path"] == path and logs[name]["bytes"] == os.stat(path).st_size > 0
    assert logs["stopped"]["max_size"] == "1m" and logs["writer"]["max_size"] is None
    assert s["logs"]["without_limit"] == 1
    assert "1 with no rotation limit (max-size)" in output.text
    assert any(p["progress"] for p in peer.progress)


async def test_the_data_root_walk_matches_du_and_names_what_the_engine_does_not_count(lab: Lab) -> None:
    output = await call(socket=str(lab.socket))
    rec = output.structured["reconciliation"]
    du = subprocess.run(
        ["du", "-sx", "--block-size=1", str(lab.data_root)], capture_output=True, text=True, check=True
    )
    # The engine keeps writing a little (its database, the writer's log): close, not equal.
    assert abs(rec["walked_disk_bytes"] - int(du.stdout.split()[0])) <= 256 * KIB
    assert rec["complete"] and rec["difference_bytes"] == rec["walked_bytes"] - rec["accounted_bytes"]
    names = {part["name"] for part in rec["parts"]}
    assert {"containers", "volumes", "image"} <= names
    # The running writer's mounts (its overlay root, its shm) are other filesystems: not entered.
    assert rec["skipped"].get("other_filesystem", 0) >= 1 and "inside not entered" in output.text
    assert "the engine does not count" in output.text or "less" in output.text


async def test_outside_the_roots_no_path_is_named_and_the_data_root_is_not_walked(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{lab.socket}")  # the operator's: asked outside the roots
    with tempfile.TemporaryDirectory() as elsewhere:
        output = await call(roots=[Path(elsewhere)])
    s = output.structured
    assert s["data_root"] is None and s["reconciliation"] is None
    assert all(row["path"] is None for row in s["logs"]["largest"] + s["volumes"]["largest"])
    assert s["logs"]["count"] == 2 and s["logs"]["not_measured"] == 2  # nor stat'ed there
    assert str(lab.data_root) not in output.text
    assert "outside the allowed roots: neither walked nor read" in output.text


async def test_a_socket_that_accepts_and_never_answers_is_an_error_within_the_timeout(tmp_path: Path) -> None:
    path = str(tmp_path / "silent.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.bind(path)
        silent.listen(4)  # connections queue and are never read
        with pytest.raises(Unavailable) as caught:
            await call(socket=path, timeout_s=0.2)
    assert "did not answer GET /info within 0.2 s" in words(caught.value)


def test_a_data_root_another_user_cannot_read_leaves_the_engines_figures_and_says_why(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a second user needs root")
    box = tempfile.TemporaryDirectory(prefix="sysmcp-dr-", dir="/tmp")
    os.chmod(box.name, 0o755)
    data_root = Path(box.name, "docker")
    data_root.mkdir(mode=0o710)  # as Docker makes /var/lib/docker: a docker-group user cannot list it
    said = {**ENGINE, "/info": {**ENGINE["/info"], "DockerRootDir": str(data_root)}}
    probe = (
        "from sysmcp.engine.containers import ContainersRequest, survey\n"
        "from sysmcp.tools.container_usage import answer, render\n"
        f"print(render(answer(survey(ContainersRequest(socket={box.name + '/e.sock'!r})), 10, 0.0, None)))\n"
    )
    with box, recorded_engine(said, f"{box.name}/e.sock", mode=0o666):
        done = python_as_nobody(probe)
    assert done.returncode == 0, done.stderr
    assert (
        "The data root could not be read here (Permission denied): the engine's figures only" in done.stdout
    )


def test_a_socket_that_drips_its_answer_is_given_up_at_the_timeout_not_after_the_last_byte(
    tmp_path: Path,
) -> None:
    path, done = str(tmp_path / "drip.sock"), threading.Event()
    body = b" " * 400 + b"{}"  # JSON all the same: 20 s at one byte each 50 ms

    def drip(server: socket.socket) -> None:
        connection, _ = server.accept()
        with connection:
            connection.recv(4096)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
            for byte in body:
                if done.wait(0.05):  # the client gave up: stop at once
                    return
                try:
                    connection.sendall(bytes([byte]))
                except OSError:
                    return

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(1)
        feeder = threading.Thread(target=drip, args=(server,))
        feeder.start()
        try:
            with Api(path, 0.5) as api, pytest.raises(Unavailable) as caught:
                api.get("/info")
        finally:
            done.set()
            feeder.join()
    assert "did not answer GET /info within 0.5 s" in words(caught.value)


@contextmanager
def answering_once(path: str, reply: bytes) -> Iterator[None]:
    """A socket at ``path`` that answers one request with ``reply``, whatever was asked: a service that
    is no engine, or an engine answering badly."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(1)

        def answer_once() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(4096)
                connection.sendall(reply)

        peer = threading.Thread(target=answer_once)
        peer.start()
        try:
            yield
        finally:
            peer.join()


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"220 mail.internal ESMTP secret-banner\r\n", "an answer that is not HTTP"),
        (b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"Driver": "x"}', "85 bytes short"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n" + b"[" * 100000 + b"]" * 100000, "not JSON"),
        (
            b'HTTP/1.1 500 Oops\r\nContent-Length: 34\r\n\r\n{"message": "\\u001b[2Jboom\\nX: 1"}',
            "HTTP 500: \\033[2Jboom\\nX: 1",
        ),
        (b"HTTP/1.1 404 Not Found\r\nContent-Length: 22\r\n\r\nsecret-banner, in full", "with HTTP 404"),
        (  # 12 MB that would be 4 million Python lists: refused unparsed
            b"HTTP/1.1 200 OK\r\nContent-Length: 12000004\r\n\r\n[" + b"[]," * 4_000_000 + b"[]]",
            "has 8,000,002 JSON brackets, commas and colons, over the 8,000,000 of any engine's answer: not parsed",
        ),
    ],
    ids=[
        "another-service",
        "closed-mid-answer",
        "nested-too-deep",
        "error-with-escapes",
        "another-http-service-error",
        "too-many-values",
    ],
)
def test_a_socket_answering_as_no_engine_does_is_an_engine_fault_that_repeats_none_of_its_words(
    tmp_path: Path, reply: bytes, said: str
) -> None:
    path = str(tmp_path / "odd.sock")
    with answering_once(path, reply), Api(path, 10) as api, pytest.raises(Unavailable) as caught:
        api.get("/info")
    assert said in words(caught.value) and "secret-banner" not in words(caught.value)


async def test_no_engine_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(NotFound) as caught:
        await call(socket=str(tmp_path / "absent.sock"))
    assert "No container engine at" in words(caught.value) and "'socket'" in words(caught.value)


def test_another_users_socket_is_refused_with_its_owner_named() -> None:
    if os.geteuid() != 0:
        pytest.skip("a second user needs root")
    box = tempfile.TemporaryDirectory(prefix="sysmcp-sock-", dir="/tmp")
    os.chmod(box.name, 0o755)  # the second user reaches the socket, and only its mode refuses
    path = os.path.join(box.name, "root-only.sock")
    with box, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as owned:
        owned.bind(path)
        os.chmod(path, 0o600)
        owned.listen(4)
        probe = (
            "from sysmcp.engine.containers import ContainersRequest, survey\n"
            "from sysmcp.tools.errors import words\n"
            "try:\n"
            f"    survey(ContainersRequest(socket={path!r}, timeout_s=5))\n"
            "except Exception as exc:\n"
            "    print(type(exc).__name__, words(exc))\n"
        )
        done = subprocess.run(
            [
                "setpriv",
                "--reuid",
                str(NOBODY),
                "--regid",
                str(NOBODY),
                "--clear-groups",
                sys.executable,
                "-c",
                probe,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).parents[2],
        )
    assert done.stdout.startswith(PermissionRefused.__name__), done.stderr
    assert (
        "owner uid 0" in done.stdout
        and "mode 0600" in done.stdout
        and "member of the socket's group" in done.stdout
    )


@pytest.mark.skipif(
    UNDER_POSIX_PROFILE,
    reason="O_PATH is Linux's: the portable profile, like macOS, has none, and there a socket is connected to by path",
)
def test_a_refused_socket_inside_the_roots_is_said_to_be_whose_it_is_not_whose_a_symlink_swapped_in_leads_to(
    tmp_path: Path,
) -> None:
    """The owner in the refusal was looked up by the path string once the pinned connect had failed,
    so a directory swapped for a symlink in between named the owner and mode of a file outside."""
    if os.geteuid() != 0:
        pytest.skip("a second user needs root")
    box = Path(tempfile.mkdtemp(prefix="sysmcp-sock-", dir="/tmp"))
    try:
        os.chmod(box, 0o755)
        inside, outside = box / "inside", box / "outside"
        (inside / "srv").mkdir(parents=True)
        outside.mkdir()
        os.chown(inside, NOBODY, NOBODY)  # nobody may swap what lies in it
        os.chown(inside / "srv", NOBODY, NOBODY)
        (outside / "e.sock").write_bytes(b"")
        os.chown(outside / "e.sock", 4242, 4242)
        os.chmod(outside / "e.sock", 0o640)
        path = inside / "srv" / "e.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as owned:
            owned.bind(str(path))
            os.chmod(path, 0o600)
            owned.listen(4)
            probe = (
                "import os\n"
                "from sysmcp.engine.containers._api import Api\n"
                "from sysmcp.tools.errors import words\n"
                "connect = Api.connect\n"
                "def swapped(self):  # the swap, between the refused connect and the look at its owner\n"
                "    try:\n"
                "        connect(self)\n"
                "    finally:\n"
                f"      if not os.path.islink({str(inside / 'srv')!r}):\n"
                f"        os.rename({str(inside / 'srv')!r}, {str(inside / 'kept')!r})\n"
                f"        os.symlink({str(outside)!r}, {str(inside / 'srv')!r})\n"
                "Api.connect = swapped\n"
                "try:\n"
                f"    Api({str(path)!r}, 5, pinned=True).get('/info')\n"
                "except Exception as exc:\n"
                "    print(type(exc).__name__, words(exc))\n"
            )
            done = python_as_nobody(probe)
        assert done.stdout.startswith(PermissionRefused.__name__), done.stderr
        assert "owner uid 0" in done.stdout and "mode 0600" in done.stdout, done.stdout
    finally:
        shutil.rmtree(box)


class Stop(Exception):
    """What the caller's cancel raises (the protocol layer raises its own)."""


def test_the_survey_reports_every_container_inspected_and_the_walk(lab: Lab) -> None:
    phases: list[str] = []
    survey(ContainersRequest(socket=str(lab.socket)), lambda phase, done, seen: phases.append(phase))
    assert phases.count("inspect") == len(lab.docker("ps", "-aq").split()) and "walk" in phases


def test_a_survey_cancelled_during_the_walk_stops_and_leaves_no_thread_asking_the_engine(lab: Lab) -> None:
    phases: list[str] = []

    def cancel_once_walking() -> None:
        if "walk" in phases:
            raise Stop

    with pytest.raises(Stop):
        survey(
            ContainersRequest(socket=str(lab.socket)),
            lambda phase, done, seen: phases.append(phase),
            cancel_once_walking,
        )
    assert not [t for t in threading.enumerate() if t.name.startswith("engine-api")]


def test_an_engine_call_that_fails_ends_the_data_root_walk_at_its_next_checkpoint(tmp_path: Path) -> None:
    for n in range(3000):  # a walk of many checkpoints
        (tmp_path / "root" / f"d{n // 100}" / str(n)).mkdir(parents=True)
    failed, after = threading.Event(), []

    def failing(check: Any) -> None:
        failed.set()
        raise Unavailable("The engine at e.sock answered GET /system/df with HTTP 500", reason="engine_fault")

    def cancel() -> None:  # the walk's checkpoints: the first waits for the engine call to have failed
        if failed.wait(60):
            after.append(1)

    found = Survey("e.sock", "", str(tmp_path / "root"), "overlay2", "json-file", 0)
    with pytest.raises(Unavailable, match="HTTP 500"):
        _reconciled(found, ContainersRequest(), [failing], lambda *_: None, cancel)
    assert found.walked is None and len(after) <= 3, len(after)  # not the rest of the walk


RECORDED = Path(__file__).parent / "data" / "podman-4.3.1-compat.json"


@pytest.fixture
def podman_socket() -> Iterator[str]:
    """A Unix-socket HTTP server answering with Podman 4.3.1's recorded compatible-API answers."""
    answers = json.loads(RECORDED.read_text())
    with (
        tempfile.TemporaryDirectory(prefix="sysmcp-pm-") as box,
        recorded_engine(answers, f"{box}/podman.sock") as path,
    ):
        yield path


async def test_podmans_compatible_api_is_read_and_its_missing_layer_total_estimated(
    podman_socket: str,
) -> None:
    output = await call(socket=podman_socket, walk=False)
    s = output.structured
    assert s["engine"] == "Podman 4.3.1" and s["storage_driver"] == "overlay"
    assert s["images"]["layer_bytes"] == 1997895 and s["images"]["layer_bytes_estimated"]
    assert "(estimated: the engine gave no total)" in output.text and "logs unknown" in output.text
    [container] = s["containers"]["largest"]
    assert (
        container["name"] == "pc1" and container["writable_bytes"] == 12 and container["state"] == "created"
    )
    assert s["volumes"]["dangling"] == 1 and s["logs"]["without_limit"] == 1
    assert s["reconciliation"] is None and "not walked" in output.text


ENGINE: dict[str, Any] = {
    "/version": {"Version": "24.0.7"},
    "/info": {"DockerRootDir": "/nonexistent/docker", "Driver": "overlay2", "LoggingDriver": "json-file"},
    "/system/df": {"LayersSize": 10, "Images": [], "Containers": [], "Volumes": []},
    "/containers/json": [],
}


@contextmanager
def engine_saying(**answers: Any) -> Iterator[str]:
    """A recorded engine answering ``ENGINE`` with ``answers`` in place ('system_df' for /system/df)."""
    said = {**ENGINE, **{"/" + key.replace("_", "/"): value for key, value in answers.items()}}
    with (
        tempfile.TemporaryDirectory(prefix="sysmcp-en-") as box,
        recorded_engine(said, f"{box}/e.sock") as path,
    ):
        yield path


@pytest.mark.parametrize(
    "answers",
    [
        {"info": ["not", "an", "object"]},
        {"system_df": {"Images": [1, 2]}},
        {"system_df": {"Containers": [{"Id": "a", "Mounts": ["data"]}]}},
        {"system_df": {"Volumes": [{"Name": "v", "UsageData": [3]}]}},
        {"version": {"Components": ["Engine"]}},
    ],
)
async def test_an_engine_answer_in_a_shape_no_engine_gives_is_an_engine_fault_not_an_internal_error(
    answers: dict[str, Any],
) -> None:
    with engine_saying(**answers) as path, pytest.raises(Unavailable) as caught:
        await call(socket=path, walk=False)
    assert "answered in a shape no engine gives" in words(caught.value)


async def test_odd_numbers_from_the_engine_are_unknown_never_negative_nor_a_failure() -> None:
    df = {
        "LayersSize": -5,
        "Containers": [
            {"Id": "a", "Names": ["/nan"], "Created": float("nan"), "SizeRw": True},
            {"Id": "b", "Names": ["/huge"], "Created": 10**400, "SizeRw": -1},
            {"Id": "c", "Names": ["/word"], "Created": "yesterday", "SizeRw": 7},
        ],
    }
    with engine_saying(system_df=df) as path:
        output = await call(socket=path, walk=False)
    s = output.structured
    json.dumps(s, allow_nan=False)  # no NaN on the wire
    assert s["images"]["layer_bytes"] == 0
    assert {row["name"]: row["writable_bytes"] for row in s["containers"]["largest"]} == {
        "word": 7,
        "nan": None,
        "huge": None,
    }
    assert s["containers"]["not_measured"] == 2
    assert {row["age_s"] for row in s["containers"]["largest"]} == {None}  # not 56 years (since 1970)
    assert "huge  unknown, , age unknown" in output.text, output.text


async def test_names_the_engine_gives_cannot_add_lines_or_drive_a_terminal_in_the_text() -> None:
    df = {
        "Images": [{"Id": "sha256:1", "RepoTags": ["evil\nImages: 0 images:1"], "Size": 10}],
        "Containers": [{"Id": "a", "Names": ["/x\nContainers: 0"], "Image": "i\x1b[2J", "SizeRw": 5}],
        "Volumes": [{"Name": "v\rw", "UsageData": {"Size": 3, "RefCount": 0}}],
    }
    version = {"Version": "1\nDocker 99 at /x: all clean"}
    with engine_saying(system_df=df, version=version) as path:
        output = await call(socket=path, walk=False)
    lines = output.text.splitlines()
    assert not any(line.startswith(("Docker 99", "Images: 0", "Containers: 0")) for line in lines), lines
    assert "\x1b" not in output.text and "\r" not in output.text
    assert "x\\nContainers: 0" in output.text and "i\\033[2J" in output.text
    assert output.structured["containers"]["largest"][0]["name"] == "x\nContainers: 0"  # JSON escapes it


def _keep(root: Path, container: str, name: str, config: dict[str, Any]) -> None:
    """A container's files as Docker keeps them in its data root."""
    where = root / "containers" / container
    where.mkdir(parents=True)
    log = where / f"{container}-json.log"
    log.write_bytes(b"x" * 1234)
    (where / "config.v2.json").write_text(json.dumps({"Name": f"/{name}", "LogPath": str(log)}))
    (where / "hostconfig.json").write_text(json.dumps({"LogConfig": config}))


def test_dockers_containers_and_their_logs_are_read_from_its_data_root_without_asking_the_engine(
    tmp_path: Path,
) -> None:
    _keep(tmp_path, "a" * 64, "web", {"Type": "json-file", "Config": {"max-size": "10m"}})
    _keep(tmp_path, "b" * 64, "db", {"Type": "json-file", "Config": {}})
    seen: list[int] = []
    with Api(str(tmp_path / "no-engine.sock"), 1) as nobody:  # asking it would raise NotFound
        logs = _read_logs(nobody, str(tmp_path), lambda _, done, __: seen.append(done), lambda: None)
    found = sorted(
        (log.container, log.file.max_size, log.bytes, Path(log.file.path).parent.name) for log in logs
    )
    assert found == [("db", None, 1234, "b" * 64), ("web", "10m", 1234, "a" * 64)]
    assert seen == [1, 2]


def test_a_container_whose_files_the_data_root_cannot_give_is_read_through_the_engine(
    lab: Lab, tmp_path: Path
) -> None:
    containers = lab.data_root / "containers"
    for kept in containers.iterdir():
        shutil.copytree(kept, tmp_path / "containers" / kept.name)
    (tmp_path / "containers" / kept.name / "hostconfig.json").unlink()  # being created, say
    with Api(str(lab.socket), 30) as api:
        logs = _read_logs(api, str(tmp_path), lambda *_: None, lambda: None)
    assert sorted(log.container for log in logs) == sorted(
        lab.docker("ps", "-a", "--format", "{{.Names}}").split()
    )
    assert all(log.bytes is not None for log in logs)


def _du(path: Path, *options: str) -> dict[str, int]:
    """du -x's figures (``options``: its unit) for ``path`` and each directory in it, by name ('' the root)."""
    out = subprocess.run(
        ["du", "-x", "--max-depth=1", *options, str(path)], capture_output=True, text=True, check=True
    ).stdout
    sizes = {}
    for line in out.splitlines():
        size, name = line.split("\t", 1)
        sizes["" if name == str(path) else Path(name).name] = int(size)
    return sizes


def test_the_data_root_walk_gives_dus_totals_for_the_root_and_each_directory_in_it(tmp_path: Path) -> None:
    (tmp_path / "layers" / "a" / "deep").mkdir(parents=True)
    (tmp_path / "layers" / "a" / "deep" / "f").write_bytes(b"x" * 70_000)
    (tmp_path / "layers" / "a" / "twice").write_bytes(b"y" * 9_000)
    os.link(tmp_path / "layers" / "a" / "twice", tmp_path / "layers" / "again")  # one inode, two names
    (tmp_path / "layers" / "link").symlink_to("a/twice")
    os.mkfifo(tmp_path / "layers" / "pipe")
    (tmp_path / "logs").mkdir()
    with open(tmp_path / "logs" / "sparse", "wb") as sparse:
        sparse.truncate(5_000_000)  # 5 MB apparent, nothing allocated
    (tmp_path / "top-file").write_bytes(b"z" * 100)
    walked = survey_walk(tmp_path)
    apparent, disk = _du(tmp_path, "-b"), _du(tmp_path, "-B1")
    assert (walked.apparent, walked.disk) == (apparent[""], disk[""])
    assert walked.parts == (
        ("layers", apparent["layers"], disk["layers"]),  # the larger on disk first
        ("logs", apparent["logs"], disk["logs"]),
    )
    assert walked.stopped is None and walked.skipped == {"special_file": 1}


def test_a_mount_inside_the_data_root_is_not_entered_and_counted(tmp_path: Path) -> None:
    (tmp_path / "overlay2" / "merged").mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "sysmcp-test", str(tmp_path / "overlay2" / "merged")],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and a mount namespace that allows it)")
    try:
        (tmp_path / "overlay2" / "merged" / "inside").write_bytes(b"i" * 50_000)
        walked = survey_walk(tmp_path)
        assert walked.skipped == {"other_filesystem": 1}
        assert walked.apparent == _du(tmp_path, "-b")[""] < 50_000
    finally:
        subprocess.run(["umount", str(tmp_path / "overlay2" / "merged")], check=False)


def test_a_data_root_walk_past_its_time_budget_stops_and_says_why(tmp_path: Path) -> None:
    for n in range(3):
        (tmp_path / f"d{n}" / "below").mkdir(parents=True)
    walked = survey_walk(tmp_path, timeout_s=0)
    assert walked.stopped is not None and "time budget" in walked.stopped
    assert walked.apparent < _du(tmp_path, "-b")[""]


def test_a_data_root_walk_is_cancelled_at_its_checkpoints(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)

    class Cancelled(Exception):
        pass

    def cancel() -> None:
        raise Cancelled

    with pytest.raises(Cancelled):
        _walk(str(tmp_path), 60, lambda *_: None, cancel)


def survey_walk(root: Path, timeout_s: float = 60) -> DataRootWalk:
    seen: list[int] = []
    walked = _walk(str(root), timeout_s, lambda entries, _: seen.append(entries), lambda: None)
    assert seen and seen == sorted(seen)  # progress only grows
    return walked


async def test_a_socket_file_nobody_listens_on_is_no_engine(tmp_path: Path) -> None:
    path = str(tmp_path / "stale.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(path)  # bound, never listening: what a dead engine leaves behind
        with pytest.raises(NotFound) as caught:
            await call(socket=path)
    assert "nothing listening on the socket" in words(caught.value)


def test_the_socket_asked_is_the_one_named_then_docker_hosts() -> None:
    assert find_socket("/a.sock", {"DOCKER_HOST": "unix:///b.sock"}) == "/a.sock"
    assert find_socket(None, {"DOCKER_HOST": "unix:///b.sock"}) == "/b.sock"


# -- where no socket is reachable: the engine's command ----------------------------------------


def _no_socket(commands: tuple[str, ...], walk: bool = True) -> ContainersRequest:
    return ContainersRequest(sockets=(), commands=commands, walk=walk, timeout_s=60)


def test_with_no_socket_found_the_docker_command_is_asked_and_gives_the_apis_figures_rounded(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A docker context (what ssh:// and tcp:// engines are reached by) that the socket search cannot see.
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    subprocess.run(
        ["docker", "context", "create", "lab", "--docker", f"host=unix://{lab.socket}"],
        check=True,
        capture_output=True,
    )
    monkeypatch.setenv("DOCKER_CONTEXT", "lab")
    by_api = survey(ContainersRequest(socket=str(lab.socket)))
    by_command = survey(_no_socket(("docker",)))
    assert by_command.command == "docker" and by_command.socket == ""
    assert by_command.data_root == by_api.data_root and by_command.driver == by_api.driver
    assert by_command.walked is not None and by_command.walked.parts
    sizes = {c.name: c.writable for c in by_api.containers}
    for container in by_command.containers:  # docker prints 4 significant digits
        assert (
            abs((container.writable or 0) - (sizes[container.name] or 0))
            <= (sizes[container.name] or 0) / 500
        )
    assert {(log.container, log.file) for log in by_command.logs} == {
        (log.container, log.file) for log in by_api.logs
    }
    assert {v.name: v.refs for v in by_command.volumes} == {v.name: v.refs for v in by_api.volumes}
    assert sorted(i.tags for i in by_command.images) == sorted(i.tags for i in by_api.images)
    text = render(answer(by_command, 10, 0.0, None))
    assert "through its command `docker` (no API socket)" in text.splitlines()[0]


@pytest.fixture
def podman_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Podman's own command on a storage of the test's own: an imported busybox image, a container
    created (this VM's runc cannot start one), a volume nobody uses."""
    if os.geteuid() != 0 or not shutil.which("podman") or not shutil.which("busybox"):
        pytest.skip("needs root, podman and busybox (Debian's podman, busybox-static)")
    store = Path(tempfile.mkdtemp(prefix="sysmcp-pm-", dir="/tmp"))
    conf = store / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{store}/root"\nrunroot = "{store}/run"\n')
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", str(conf))
    (store / "rootfs" / "bin").mkdir(parents=True)
    shutil.copy(shutil.which("busybox") or "", store / "rootfs" / "bin" / "busybox")
    (store / "rootfs" / "bin" / "sh").symlink_to("busybox")
    tar = subprocess.run(
        ["tar", "-C", str(store / "rootfs"), "-c", "."], capture_output=True, check=True
    ).stdout
    try:
        for argv, given in (
            (["import", "-", "pm:1"], tar),
            (["create", "--name", "pc1", "pm:1", "true"], None),
        ):
            subprocess.run(["podman", *argv], input=given, capture_output=True, check=True, timeout=120)
        subprocess.run(["podman", "volume", "create", "pv1"], capture_output=True, check=True, timeout=60)
        yield store
    finally:
        subprocess.run(["podman", "rm", "-af"], capture_output=True, check=False, timeout=60)
        subprocess.run(["umount", "-R", "-l", str(store)], capture_output=True, check=False)
        shutil.rmtree(store, ignore_errors=True)


def test_podmans_own_command_is_asked_where_it_has_no_socket_with_exact_figures(podman_store: Path) -> None:
    found = survey(_no_socket(("podman",)))
    assert found.command == "podman" and found.engine.startswith("Podman ")
    assert found.data_root == str(podman_store / "root") and found.driver == "vfs"
    [image] = found.images
    assert image.tags == ("localhost/pm:1",) and (image.size or 0) > 1_000_000 and image.containers == 1
    assert found.layers == image.size and found.layers_estimated
    [container] = found.containers
    assert (container.name, container.state, container.writable) == ("pc1", "created", 0)
    assert [(v.name, v.refs, v.dangling) for v in found.volumes] == [("pv1", 0, True)]
    [log] = found.logs
    assert (
        log.container == "pc1"
        and log.file.path.startswith(str(podman_store / "root"))
        and log.file.max_size is None
    )
    assert found.walked is not None and found.walked.apparent >= image.size


@pytest.mark.skipif(
    UNDER_POSIX_PROFILE,
    reason="the portable profile, like macOS, reads no mountinfo: no mount bound on itself is seen",
)
def test_podmans_overlay_store_bound_on_itself_is_walked_so_its_layers_are_on_both_sides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """containers/storage bind-mounts its overlay/ on itself while a container is mounted: a walk that
    enters no mount missed every layer and writable layer, and the answer said the engine counted
    megabytes more than the data root holds (it is what du -x counts, and where the engine's bytes lie)."""
    if os.geteuid() != 0 or not shutil.which("podman") or not shutil.which("busybox"):
        pytest.skip("needs root, podman and busybox (Debian's podman, busybox-static)")
    store = Path(tempfile.mkdtemp(prefix="sysmcp-pmo-", dir="/tmp"))
    conf = store / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{store}/root"\nrunroot = "{store}/run"\n')
    env = {**os.environ, "CONTAINERS_STORAGE_CONF": str(conf)}
    (store / "rootfs" / "bin").mkdir(parents=True)
    shutil.copy(shutil.which("busybox") or "", store / "rootfs" / "bin" / "busybox")
    tar = subprocess.run(
        ["tar", "-C", str(store / "rootfs"), "-c", "."], capture_output=True, check=True
    ).stdout

    def podman(*argv: str, given: bytes | None = None) -> str:
        done = subprocess.run(["podman", *argv], input=given, capture_output=True, env=env, timeout=120)
        if done.returncode:
            pytest.skip(f"podman {argv[0]} failed here: {done.stderr.decode()[-300:]}")
        return done.stdout.decode().strip()

    try:
        podman("import", "-", "pm:1", given=tar)
        podman("create", "--name", "pc1", "pm:1", "true")
        merged = Path(podman("mount", "pc1"))  # the container's root: its writable layer is written here
        (merged / "data.bin").write_bytes(b"w" * 3_000_000)
        bound = store / "root" / "overlay"
        with open("/proc/self/mountinfo") as table:
            if f" {bound} {bound} " not in table.read():
                pytest.skip("this podman does not bind-mount its overlay directory on itself")
        monkeypatch.setenv("CONTAINERS_STORAGE_CONF", str(conf))
        found = survey(_no_socket(("podman",)))
        [container] = found.containers
        assert container.writable is not None and container.writable >= 3_000_000
        assert found.walked is not None and found.walked.stopped is None
        parts = {name: apparent for name, apparent, _ in found.walked.parts}
        assert parts.get("overlay", 0) >= found.layers + container.writable, parts
        assert found.walked.apparent >= found.accounted  # the engine's bytes are all in the data root
    finally:
        subprocess.run(["podman", "umount", "-a"], capture_output=True, env=env, check=False, timeout=60)
        subprocess.run(["podman", "rm", "-af"], capture_output=True, env=env, check=False, timeout=60)
        subprocess.run(["umount", "-R", "-l", str(store)], capture_output=True, check=False)
        shutil.rmtree(store, ignore_errors=True)


#: What Podman 4.3.1's command prints for one created container and one volume nobody uses: ``volume ls``
#: gives no sizes, and the container's log is not readable here.
PODMAN_SAYS = {
    "info": {
        "host": {"logDriver": "k8s-file"},
        "store": {"graphRoot": "/nonexistent/storage", "graphDriverName": "vfs"},
        "version": {"Version": "4.3.1"},
    },
    "images": [
        {"Id": "9f1c", "Names": ["localhost/pm:1"], "Size": 1_200_000, "SharedSize": 0, "Containers": 1}
    ],
    "ps": [
        {
            "Id": "7032c576",
            "Names": ["pc1"],
            "Image": "localhost/pm:1",
            "State": "created",
            "Created": 1_700_000_000,
            "Size": {"rwSize": 0, "rootFsSize": 1_200_000},
        }
    ],
    "volume": [{"Name": "pv1", "Mountpoint": "/nonexistent/storage/volumes/pv1/_data", "MountCount": 0}],
    "container": [
        {
            "Id": "7032c576",
            "HostConfig": {
                "LogConfig": {"Type": "k8s-file", "Path": "/nonexistent/storage/pc1/ctr.log", "Size": "0B"}
            },
        }
    ],
}


@pytest.fixture
def podman_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``podman`` first on PATH that prints ``PODMAN_SAYS`` for its subcommand."""
    (tmp_path / "says.json").write_text(json.dumps(PODMAN_SAYS))
    stub = tmp_path / "podman"
    stub.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"print(json.dumps(json.load(open({str(tmp_path / 'says.json')!r}))[sys.argv[1]]))\n"
    )
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_through_podmans_command_sizes_nobody_measured_are_totalled_as_unknown_not_zero(
    podman_command: None,
) -> None:
    usage = answer(survey(_no_socket(("podman",), walk=False)), 10, 0.0, None)
    text = render(usage)
    assert "Volumes: 1 volume, size unknown; 1 dangling (size unknown)" in text, text
    assert "Log files: 1 file, size unknown" in text, text
    assert (usage.volumes.not_measured, usage.volumes.dangling_not_measured, usage.logs.not_measured) == (
        1,
        1,
        1,
    )


def test_a_total_of_sizes_some_unknown_is_at_least_the_known_ones_with_the_unknown_counted() -> None:
    found = Survey("", "Docker 24.0.7", "/var/lib/docker", "overlay2", "json-file", 0)
    found.volumes = [
        Volume("kept", 3 * 1024 * 1024, 1, ""),
        Volume("cold", None, 0, ""),
        Volume("x", None, 2, ""),
    ]
    usage = answer(found, 10, 0.0, None)
    assert "Volumes: 3 volumes, at least 3.0 MiB (2 unknown); 1 dangling (size unknown)" in render(usage)
    assert (usage.volumes.bytes, usage.volumes.not_measured) == (3 * 1024 * 1024, 2)
    assert "Log files: 0 files, 0 B" in render(usage)


def test_writable_layers_of_unknown_size_are_totalled_as_unknown_and_the_reconciliation_as_bounds() -> None:
    found = Survey("", "Docker 24.0.7", "/var/lib/docker", "overlay2", "json-file", 10 * MIB)
    found.containers = [
        Container("a", "web", "nginx", "running", 0.0, 2 * MIB, ()),
        Container("b", "cold", "busybox", "exited", 0.0, None, ()),
    ]
    found.walked = DataRootWalk(apparent=20 * MIB, disk=20 * MIB, stopped=None, parts=(), skipped={})
    usage = answer(found, 10, 0.0, None)
    text = render(usage)
    assert "writable layers at least 2.0 MiB (1 unknown), of stopped ones size unknown" in text, text
    assert (usage.containers.not_measured, usage.containers.stopped_not_measured) == (1, 1)
    rec = usage.reconciliation
    assert rec is not None and (rec.accounted_bytes, rec.not_measured, rec.difference_bytes) == (
        12 * MIB,
        1,
        8 * MIB,
    )
    # The cold container's layer is somewhere in those 8 MiB: no exact difference is claimed.
    assert "account for at least 12.0 MiB (1 size unknown): at most 8.0 MiB on disk" in text, text
    found.walked = DataRootWalk(apparent=10 * MIB, disk=10 * MIB, stopped=None, parts=(), skipped={})
    assert "(1 size unknown): at least 2.0 MiB less" in render(answer(found, 10, 0.0, None))


def test_a_walk_that_did_not_see_all_of_the_data_root_gives_its_difference_as_a_floor_or_none() -> None:
    found = Survey("", "Docker 24.0.7", "/var/lib/docker", "overlay2", "json-file", 10 * MIB)
    found.containers = [Container("a", "web", "nginx", "exited", 0.0, 2 * MIB, ())]
    for stopped, skipped in (("time budget", {}), (None, {"unreadable": 2})):
        found.walked = DataRootWalk(20 * MIB, 20 * MIB, stopped, (), skipped)
        text = render(answer(found, 10, 0.0, None))
        assert "account for 12.0 MiB: at least 8.0 MiB on disk that the engine does not count" in text, text
    found.containers.append(Container("b", "cold", "busybox", "exited", 0.0, None, ()))
    text = render(answer(found, 10, 0.0, None))
    assert "(1 size unknown): the difference cannot be told" in text, text


def test_with_every_size_known_the_reconciliation_states_its_difference_exactly() -> None:
    found = Survey("", "Docker 24.0.7", "/var/lib/docker", "overlay2", "json-file", 10 * MIB)
    found.containers = [Container("a", "web", "nginx", "exited", 0.0, 2 * MIB, ())]
    found.walked = DataRootWalk(apparent=20 * MIB, disk=20 * MIB, stopped=None, parts=(), skipped={})
    usage = answer(found, 10, 0.0, None)
    text = render(usage)
    assert "writable layers 2.0 MiB, of stopped ones 2.0 MiB" in text, text
    assert "account for 12.0 MiB: 8.0 MiB on disk that the engine does not count" in text, text
    assert usage.containers.not_measured is ABSENT and usage.reconciliation is not None
    assert usage.reconciliation.not_measured is ABSENT


def test_a_path_the_engine_gives_that_climbs_out_of_the_roots_with_dotdot_is_not_named() -> None:
    found = Survey("", "Docker 24.0.7", "/srv/docker/../../etc/docker", "overlay2", "json-file", 0)
    found.volumes = [
        Volume("out", 1, 0, "/srv/docker/volumes/../../../etc/_data"),
        Volume("in", 1, 0, "/srv/docker/volumes/in/_data"),
        Volume("through", 1, 0, "/x/../srv/docker/volumes/t/_data"),  # /x may be a symlink: not inside
    ]
    usage = answer(found, 10, 0.0, [Path("/srv/docker")])
    assert {v.name: v.path for v in usage.volumes.largest} == {
        "out": None,
        "in": "/srv/docker/volumes/in/_data",
        "through": None,
    }
    assert usage.data_root is None and "etc" not in render(usage)


def test_a_command_that_never_answers_is_given_up_at_its_timeout() -> None:
    with pytest.raises(Unavailable) as caught:
        ask(["sleep", "30"], 0.2)
    assert "gave no answer within 0.2 s" in words(caught.value)


def test_with_no_socket_and_no_engine_command_the_error_says_both(tmp_path: Path) -> None:
    with pytest.raises(NotFound) as caught:
        survey(_no_socket((str(tmp_path / "no-docker"),)))
    said = words(caught.value)
    assert "No container engine socket found" in said and "no-docker is not installed" in said


# -- reclaim_plan's container classes --------------------------------------------------------


def _engine_only(lab: Lab) -> RootsLayout:
    nowhere = b"/nonexistent"
    return RootsLayout(
        apt=nowhere, dnf=nowhere, yum=nowhere, pacman=nowhere, apk=nowhere, log=nowhere, journal=(),
        coredump=(), core_dirs=(), homes=(), home_parents=(), proc=nowhere, container_socket=str(lab.socket),
    )  # fmt: skip


def test_reclaim_plans_stopped_containers_dangling_volumes_and_logs_each_with_the_engines_command(
    lab: Lab,
) -> None:
    plan = build_plan(PlanRequest(layout=_engine_only(lab), classes=("container",)))
    by_command = {item.command: item for item in plan.items}
    host = f"docker -H unix://{lab.socket}"
    stopped_rw = int(lab.docker("inspect", "--size", "stopped", "--format", "{{.SizeRw}}"))
    assert by_command[f"{host} container prune"].bytes == stopped_rw
    orphan = by_command[f"{host} volume rm -- orphan"]
    assert orphan.bytes >= 100 * KIB and orphan.safety == "risky"
    for name in ("writer", "stopped"):
        path = lab.docker("inspect", name, "--format", "{{.LogPath}}")
        log = by_command[f"truncate -s 0 {path}"]
        assert [entry.path for entry in log.entries] == [os.fsencode(path)]
        assert log.bytes == os.stat(path).st_blocks * 512 > 0
        said = "keeps the file open and goes on writing" if name == "writer" else "its container is stopped"
        assert said in (log.note or ""), log.note
    assert "no rotation limit" in (
        by_command[f"truncate -s 0 {lab.docker('inspect', 'writer', '--format', '{{.LogPath}}')}"].note or ""
    )
    assert all(item.klass == "container" for item in plan.items)
    assert {item.action for item in plan.items if item.entries} == {"truncate"}  # logs: reclaim empties them
    assert {item.action for item in plan.items if not item.entries} == {"command"}
    with pytest.raises(Exception, match="freed by its vendor's command"):
        choose(plan, [orphan.id])


def test_names_an_engine_gives_are_never_options_to_its_command_nor_escapes_in_the_plans_text(
    tmp_path: Path,
) -> None:
    """An engine names its volumes and containers (one on another user's socket may name them anything):
    a dangling volume ``-f`` went into ``docker volume rm -f …`` as the option, and a container named with
    ESC and CR reached the plan's text (and reclaim's question) raw in the cost, clearing and forging
    its line. Names now follow ``--``, and the cost is escaped as ``ls -b`` does."""
    name = "-c\x1b[2K\rwould remove: forged"
    log = tmp_path / "x-json.log"
    log.write_bytes(b"x" * 100_000)
    said = {
        **ENGINE,
        "/system/df": {
            "LayersSize": 10,
            "Images": [],
            "Containers": [{"Id": "x", "Names": ["/" + name], "State": "exited", "SizeRw": 0}],
            "Volumes": [
                {"Name": "-f", "UsageData": {"RefCount": 0, "Size": 4096}},
                {"Name": "v\x1b[31m", "UsageData": {"RefCount": 0, "Size": 4096}},
            ],
        },
        "/containers/json": [{"Id": "x", "Names": ["/" + name], "State": "exited"}],
        "/containers/x/json": {
            "Id": "x",
            "Name": "/" + name,
            "LogPath": str(log),
            "HostConfig": {"LogConfig": {"Type": "json-file"}},
        },
    }
    with recorded_engine(said, str(tmp_path / "e.sock")) as path:
        plan = build_plan(PlanRequest(layout=RootsLayout(container_socket=path), classes=("container",)))
    (volumes,) = [item for item in plan.items if " volume rm " in (item.command or "")]
    words = (volumes.command or "").split(" rm -- ", 1)[1]  # as a POSIX sh reads them back
    read_back = subprocess.run(
        ["sh", "-c", f"printf '%s\\0' {words}"], capture_output=True, check=True
    ).stdout
    assert read_back.split(b"\0")[:-1] == [b"-f", b"v\x1b[31m"], words
    (emptied,) = [item for item in plan.items if item.entries]
    shown = "\"$(printf '\\055c\\033[2K\\rwould remove: forged')\""
    assert emptied.cost.endswith(f" logs -- {shown} loses what the log held"), emptied.cost
    text = render_plan(plan, str(tmp_path))
    assert "\x1b" not in text and "\r" not in text, text
    assert "\"$(printf 'v\\033[31m')\"" in text and shown in text, text


async def test_a_paused_container_is_not_stopped_neither_in_the_totals_nor_in_the_prune_planned() -> None:
    df = {
        "Containers": [
            {"Id": "p", "Names": ["/paused"], "State": "paused", "SizeRw": 5 * MIB},
            {"Id": "r", "Names": ["/restarting"], "State": "restarting", "SizeRw": 3 * MIB},
            {"Id": "e", "Names": ["/exited"], "State": "exited", "SizeRw": 1 * MIB},
        ]
    }
    with engine_saying(system_df=df) as path:
        output = await call(socket=path, walk=False)
        plan = build_plan(PlanRequest(layout=RootsLayout(container_socket=path), classes=("container",)))
    # docker container prune leaves paused and restarting containers alone: it frees the exited one's layer.
    (prune,) = [item for item in plan.items if (item.command or "").endswith("container prune")]
    assert prune.bytes == 1 * MIB
    assert "writable layers 9.0 MiB, of stopped ones 1.0 MiB" in output.text, output.text
    totals = output.structured["containers"]
    assert (totals["stopped"], totals["stopped_writable_bytes"]) == (1, 1 * MIB)


def test_reclaim_leaves_out_an_engine_that_is_not_there(tmp_path: Path) -> None:
    layout = RootsLayout(container_socket=str(tmp_path / "absent.sock"), container_engines=("docker",))
    assert containers(layout) == []


async def test_with_roots_a_socket_named_outside_them_is_refused_and_never_connected_to(
    tmp_path: Path,
) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    with recorded_engine(ENGINE, str(outside / "e.sock")) as path:
        with pytest.raises(ArgumentError, match=f"is outside the operator's roots.*{inside}"):
            await call(roots=[inside], socket=path, walk=False)
        (inside / "link.sock").symlink_to(path)  # a symlink inside to a socket outside: its target counts
        with pytest.raises(ArgumentError, match="is outside"):
            await call(roots=[inside], socket=str(inside / "link.sock"), walk=False)
        assert (await call(socket=path, walk=False)).structured["engine"] == "Docker 24.0.7"  # no roots
    with recorded_engine(ENGINE, str(inside / "e.sock")) as path:
        assert (await call(roots=[inside], socket=path, walk=False)).structured["socket"] == path


def test_with_roots_the_engines_well_known_sockets_may_be_named_as_they_are_asked_unnamed() -> None:
    known = known_sockets({"DOCKER_HOST": "unix:///srv/d.sock", "XDG_RUNTIME_DIR": "/run/user/7"})
    assert known == [
        "/srv/d.sock",
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/run/podman/podman.sock",
        "/run/user/7/podman/podman.sock",
    ]


@pytest.mark.parametrize("named", ["outside", "inside/link"])  # as it is, or through a symlink inside
async def test_a_data_root_and_log_files_the_engine_names_outside_the_roots_are_never_looked_at(
    tmp_path: Path, named: str
) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    container = "c" * 64
    _keep(outside, container, "from-its-files", {"Type": "json-file", "Config": {}})
    (inside / "link").symlink_to(outside)
    secret = outside / "secret"
    secret.write_bytes(b"s" * 4321)
    answers = {
        **ENGINE,
        "/info": {"DockerRootDir": str(tmp_path / named), "Driver": "overlay2", "LoggingDriver": "json-file"},
        "/system/df": {"LayersSize": 10, "Containers": [{"Id": container, "Names": ["/web"], "SizeRw": 1}]},
        "/containers/json": [{"Id": container, "Names": ["/web"]}],
        f"/containers/{container}/json": {
            "LogPath": str(tmp_path / named / "secret"),
            "HostConfig": {"LogConfig": {}},
        },
    }
    with recorded_engine(answers, str(inside / "e.sock")) as path:
        output = await call(roots=[inside], socket=path)
        s = output.structured
        # Its data root's files not read (the engine asked for the container instead), its log not stat'ed.
        assert [(log["container"], log["bytes"]) for log in s["logs"]["largest"]] == [("web", None)]
        assert s["reconciliation"] is None
        if named == "outside":  # a path is named as the engine gives it: through the link, inside
            assert s["data_root"] is None and s["logs"]["largest"][0]["path"] is None
        assert (
            "outside the allowed roots: neither walked nor read, its logs unmeasured" in output.text
            and "4,321" not in output.text
        )
        # Without roots, the same engine's data root and log are read.
        s = (await call(socket=path)).structured
        assert [(log["container"], log["bytes"]) for log in s["logs"]["largest"]] == [
            ("from-its-files", 1234)
        ]


async def test_a_system_df_not_answered_in_time_leaves_what_the_engines_lists_say_and_says_it_is_partial(
    tmp_path: Path,
) -> None:
    answers = {
        **ENGINE,
        "/system/df": {"LayersSize": 10**9, "Images": [], "Containers": [], "Volumes": []},
        "/images/json": [
            {"Id": "sha256:" + "a" * 64, "RepoTags": ["web:1"], "Size": 5000, "SharedSize": -1},
            {"Id": "sha256:" + "b" * 64, "RepoTags": [], "Size": 3000, "SharedSize": -1},
        ],
        "/containers/json": [
            {
                "Id": "c1",
                "Names": ["/web"],
                "Image": "web:1",
                "ImageID": "sha256:" + "a" * 64,
                "State": "exited",
            }
        ],
        "/volumes": {"Volumes": [{"Name": "data", "Mountpoint": "/nonexistent/v"}], "Warnings": None},
        "/containers/c1/json": {"LogPath": "", "HostConfig": {}},
    }
    with recorded_engine(answers, str(tmp_path / "e.sock"), slow={"/system/df": 5}) as path:
        output = await call(socket=path, walk=False, timeout_s=0.5)
    s = output.structured
    assert "GET /system/df" in s["partial"] and "0.5 s" in s["partial"]
    assert s["images"]["count"] == 2 and s["images"]["dangling"] == 1 and s["images"]["layer_bytes"] == 0
    assert {row["tags"][0] if row["tags"] else "": row["bytes"] for row in s["images"]["largest"]} == {
        "web:1": 5000,
        "": 3000,
    }
    assert all(row["unique_bytes"] == 0 for row in s["images"]["largest"])  # not known: never overstated
    assert [row["containers"] for row in s["images"]["largest"]] == [1, 0]  # counted from the list
    assert s["containers"]["stopped"] == 1 and s["containers"]["not_measured"] == 1
    assert s["volumes"]["count"] == 1 and s["volumes"]["not_measured"] == 1
    lines = output.text.splitlines()
    assert lines[1].startswith("Partial: the engine did not give its sizes within 0.5 s"), lines
    assert "Images: 2 images, layer total not known" in output.text and "Build cache" not in output.text
    assert "data  containers using it unknown" in output.text  # not "used by 0 containers"
    # What the images hold alone is unknown there, not 0 B.
    assert "Images: 2 images, layer total not known; 1 dangling (unique bytes unknown)" in output.text
    assert "web:1  unique and shared bytes unknown, 1 container" in output.text, output.text
    assert "0 B unique" not in output.text and "unique 0 B" not in output.text


async def test_numbers_past_any_disks_size_from_the_engine_are_unknown_not_an_internal_error() -> None:
    huge = 10**400  # JSON allows it; no float holds it
    df = {
        "LayersSize": huge,
        "Images": [{"Id": "i", "RepoTags": ["a:1"], "Size": huge, "SharedSize": huge, "Containers": huge}],
        "Containers": [{"Id": "c", "Names": ["/c"], "SizeRw": 2**63, "State": "exited"}],
        "Volumes": [{"Name": "v", "UsageData": {"Size": huge, "RefCount": huge}}],
        "BuildCache": [{"Size": huge, "InUse": True}],
        "BuilderSize": huge,
    }
    with engine_saying(system_df=df) as path:
        output = await call(socket=path, walk=False)
    s = output.structured
    assert s["images"]["layer_bytes"] == 0 and s["images"]["largest"][0]["bytes"] is None
    assert s["images"]["not_measured"] == 1 and "?  a:1  size unknown" in output.text, output.text
    assert s["containers"]["not_measured"] == 1 and s["volumes"]["not_measured"] == 1
    assert s["build_cache"]["bytes"] == 0


async def test_names_and_options_of_the_wrong_type_from_the_engine_are_left_out_not_an_internal_error() -> (
    None
):
    df = {
        "Images": [{"Id": "i", "RepoTags": [[["deep"]], 5, "web:1"]}, {"Id": "j", "RepoTags": "abc"}],
        "Containers": [{"Id": "c", "Names": "/web", "State": "exited"}],
    }
    inspect = {
        "LogPath": "/nonexistent/c-json.log",
        "HostConfig": {"LogConfig": {"Type": "json-file", "Config": {"max-size": {"a": 1}}}},
    }
    answers = {
        **ENGINE,
        "/system/df": df,
        "/containers/json": [{"Id": "c", "Names": ["/web"]}],
        "/containers/c/json": inspect,
    }
    with (
        tempfile.TemporaryDirectory(prefix="sysmcp-en-") as box,
        recorded_engine(answers, f"{box}/e.sock") as path,
    ):
        output = await call(socket=path, walk=False)
    s = output.structured
    assert sorted(tuple(row["tags"]) for row in s["images"]["largest"]) == [(), ("web:1",)]
    assert s["containers"]["largest"][0]["name"] == "c"  # Names not a list: its id, as with none
    assert s["logs"]["largest"][0]["max_size"] is None


async def test_a_relative_data_root_or_log_path_from_the_engine_is_not_looked_at_from_the_servers_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rel" / "d").mkdir(parents=True)
    (tmp_path / "rel.log").write_bytes(b"x" * 99)
    monkeypatch.chdir(tmp_path)
    answers = {
        **ENGINE,
        "/info": {"DockerRootDir": "rel", "Driver": "overlay2"},
        "/containers/json": [{"Id": "c", "Names": ["/web"]}],
        "/containers/c/json": {"LogPath": "rel.log", "HostConfig": {}},
    }
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path:
        s = (await call(socket=path)).structured
    assert s["reconciliation"] is None and s["logs"]["largest"][0]["bytes"] is None


def test_a_containers_files_that_are_a_fifo_too_large_or_too_deep_are_asked_of_the_engine(
    tmp_path: Path,
) -> None:
    fifo, big = "f" * 64, "b" * 64
    _keep(tmp_path, fifo, "from-its-files", {"Type": "json-file", "Config": {}})
    (tmp_path / "containers" / fifo / "hostconfig.json").unlink()
    os.mkfifo(tmp_path / "containers" / fifo / "hostconfig.json")  # an open would wait for a writer
    _keep(tmp_path, big, "from-its-files", {"Type": "json-file", "Config": {}})
    padded = {"Name": "/from-its-files", "LogPath": "", "Pad": " " * (2 * MIB)}
    (tmp_path / "containers" / big / "config.v2.json").write_text(json.dumps(padded))
    deep = "d" * 64
    _keep(tmp_path, deep, "from-its-files", {"Type": "json-file", "Config": {}})
    (tmp_path / "containers" / deep / "config.v2.json").write_text("[" * 100_000)  # past the parser's depth
    names = {fifo: "fifo", big: "big", deep: "deep"}
    answers = {
        "/containers/json": [{"Id": c, "Names": [f"/{name}"]} for c, name in names.items()],
        **{f"/containers/{c}/json": {"LogPath": "", "HostConfig": {}} for c in names},
    }
    logs: list[Any] = []
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path, Api(path, 5) as api:
        reading = threading.Thread(
            target=lambda: logs.extend(_read_logs(api, str(tmp_path), lambda *_: None, lambda: None)),
            daemon=True,
        )
        reading.start()
        reading.join(10)
        if reading.is_alive():  # let the blocked open go, so the thread ends
            os.close(os.open(tmp_path / "containers" / fifo / "hostconfig.json", os.O_RDWR))
    assert not reading.is_alive() and sorted(log.container for log in logs) == ["big", "deep", "fifo"]


@pytest.mark.parametrize("link", ["containers", "container"])  # the containers directory, or one container's
async def test_a_data_root_inside_the_roots_whose_containers_lead_outside_them_through_a_symlink_is_not_read_there(
    tmp_path: Path, link: str
) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    root, container = inside / "docker", "c" * 64
    _keep(outside, container, "from-outside", {"Type": "json-file", "Config": {"max-size": "7m"}})
    if link == "containers":
        root.mkdir(parents=True)
        (root / "containers").symlink_to(outside / "containers")
    else:
        (root / "containers").mkdir(parents=True)
        (root / "containers" / container).symlink_to(outside / "containers" / container)
    answers = {
        **ENGINE,
        "/info": {"DockerRootDir": str(root), "Driver": "overlay2", "LoggingDriver": "json-file"},
        "/containers/json": [{"Id": container, "Names": ["/web"]}],
        f"/containers/{container}/json": {"LogPath": str(root / "web.log"), "HostConfig": {"LogConfig": {}}},
    }
    (root / "web.log").write_bytes(b"w" * 99)
    with recorded_engine(answers, str(inside / "e.sock")) as path:
        s = (await call(roots=[inside], socket=path)).structured
    # The engine asked for the container: nothing of the files outside the roots (their name, their limit).
    assert [(log["container"], log["max_size"], log["bytes"]) for log in s["logs"]["largest"]] == [
        ("web", None, 99)
    ]


def test_a_log_files_directory_swapped_for_a_symlink_out_of_the_roots_once_checked_is_not_followed(
    tmp_path: Path,
) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    (inside / "logs").mkdir(parents=True)
    outside.mkdir()
    (inside / "logs" / "web.log").write_bytes(b"w" * 99)
    (outside / "web.log").write_bytes(b"s" * 4321)
    looked: list[str] = []

    def may_look(path: str) -> bool:  # inside the roots; the second look is at the resolved path
        looked.append(path)
        if len(looked) == 2:  # another user's swap, between the check and the stat
            (inside / "logs").rename(inside / "kept")
            (inside / "logs").symlink_to(outside)
        return path.startswith(f"{inside}/")

    def log_bytes(path: Path, may_look: Callable[[str], bool]) -> int | None:
        return _log("", LogFile("", str(path), None), may_look, None).bytes

    assert log_bytes(inside / "logs" / "web.log", may_look) is None
    assert log_bytes(inside / "kept" / "web.log", lambda path: path.startswith(f"{inside}/")) == 99


def test_a_data_root_whose_directory_is_swapped_for_a_symlink_out_of_the_roots_once_checked_is_not_walked(
    tmp_path: Path,
) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    (inside / "srv" / "docker").mkdir(parents=True)
    (outside / "docker").mkdir(parents=True)
    (outside / "docker" / "secret").write_bytes(b"s" * 4321)
    looked: list[str] = []

    def may_walk(path: str) -> bool:  # the second look is at the resolved path
        looked.append(path)
        if len(looked) == 2:  # another user's swap, between the check and the walk
            (inside / "srv").rename(inside / "kept")
            (inside / "srv").symlink_to(outside)
        return path.startswith(f"{inside}/")

    found = Survey("e.sock", "", str(inside / "srv" / "docker"), "overlay2", "json-file", 0)
    _reconciled(found, ContainersRequest(may_walk=may_walk), [lambda _: None], lambda *_: None, lambda: None)
    assert found.walked is None and found.unwalkable is not None  # refused, not walked outside


@pytest.mark.skipif(
    UNDER_POSIX_PROFILE,
    reason="O_PATH is Linux's: the portable profile, like macOS, has none, and there a socket is connected to by path",
)
async def test_a_socket_named_inside_the_roots_whose_directory_is_swapped_for_a_symlink_once_resolved_is_not_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    (inside / "srv").mkdir(parents=True)
    outside.mkdir()
    resolve = PathPolicy.resolve

    def swapped(
        policy: PathPolicy, raw: str
    ) -> Path:  # another user's swap, between the check and the connect
        real = resolve(policy, raw)
        (inside / "srv").rename(inside / "kept")
        (inside / "srv").symlink_to(outside)
        return real

    theirs = {**ENGINE, "/version": {"Version": "6.6.6"}}
    with (
        recorded_engine(ENGINE, str(inside / "srv" / "e.sock")) as path,
        recorded_engine(theirs, str(outside / "e.sock")),
    ):
        monkeypatch.setattr(PathPolicy, "resolve", swapped)
        with pytest.raises(Exception, match="symbolic link"):  # refused, not the engine outside asked
            await call(roots=[inside], socket=path, walk=False)


@pytest.mark.parametrize("kind", ["fifo", "file", "directory"])
@pytest.mark.parametrize("roots", [False, True], ids=["no-roots", "roots"])  # connected by path, or pinned
async def test_a_socket_named_that_is_a_fifo_a_file_or_a_directory_is_said_to_be_what_it_is(
    tmp_path: Path, kind: str, roots: bool
) -> None:
    path = tmp_path / "e.sock"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "file":
        path.write_bytes(b"{}")
    else:
        path.mkdir()
    said = {"fifo": "a FIFO (named pipe)", "file": "a regular file", "directory": "a directory"}[kind]
    with pytest.raises(WrongKind) as caught:
        await call(roots=[tmp_path] if roots else None, socket=str(path), walk=False)
    assert f"{path} is {said}, not a socket: name the engine's API socket" in words(caught.value)
    assert "nothing listening" not in words(caught.value)


@pytest.mark.parametrize("kind", ["fifo", "missing"])
async def test_a_socket_named_with_a_terminal_escape_is_said_escaped(tmp_path: Path, kind: str) -> None:
    """The path is echoed in the error the model reads (and ``sysmcp call`` prints): its ESC went as it
    came, able to clear a terminal."""
    path = tmp_path / "e\x1b[2J.sock"
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises((WrongKind, NotFound)) as caught:
        await call(socket=str(path), walk=False)
    said = words(caught.value)
    assert "\x1b" not in said and f"{tmp_path}/e\\033[2J.sock" in said, said


async def test_with_roots_a_symlink_inside_them_to_an_engines_own_socket_asks_that_socket_and_any_other_is_refused_saying_what_may_be_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    (outside / "run").mkdir(parents=True)
    (outside / "var-run").symlink_to(outside / "run")  # as /var/run leads to /run
    known = str(outside / "var-run" / "e.sock")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{known}")  # the operator's: a socket the engine listens on
    (inside / "docker.sock").symlink_to(known)
    (inside / "other.sock").symlink_to(outside / "run" / "other.sock")
    with (
        recorded_engine(ENGINE, str(outside / "run" / "e.sock")),
        recorded_engine(ENGINE, str(outside / "run" / "other.sock")),
    ):
        s = (await call(roots=[inside], socket=str(inside / "docker.sock"), walk=False)).structured
        assert (s["engine"], s["socket"]) == ("Docker 24.0.7", known)  # asked at its own path
        with pytest.raises(ArgumentError) as caught:
            await call(roots=[inside], socket=str(inside / "other.sock"), walk=False)
    said = str(caught.value)
    assert f"{inside / 'other.sock'}" in said and "is outside the operator's roots" in said
    assert (
        f"An engine's own socket may be named outside them, as it is or through a symlink to it: {known}, /var/run/docker.sock"
        in said
    )
    assert "or leave 'socket' out" in said


async def test_with_roots_a_name_outside_them_is_not_followed_to_tell_whether_it_leads_to_an_engines_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolving the name given to see if it leads to a known socket made the call an oracle for what
    names outside the roots lead to; now only where the way leaves the roots is compared, by name."""
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    (outside / "run").mkdir(parents=True)
    known = str(outside / "run" / "e.sock")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{known}")
    (outside / "leads-there").symlink_to(known)  # outside: what it leads to is not to be learnt
    (outside / "run-link").symlink_to(outside / "run")
    (inside / "by-name.sock").symlink_to(known)  # inside, naming the known socket: still asked
    (inside / "through-outside.sock").symlink_to(outside / "leads-there")
    with recorded_engine(ENGINE, known):
        for named in (
            outside / "leads-there",
            outside / "run-link" / "e.sock",
            inside / "through-outside.sock",
        ):
            with pytest.raises(ArgumentError, match="is outside the operator's roots"):
                await call(roots=[inside], socket=str(named), walk=False)
        s = (await call(roots=[inside], socket=str(inside / "by-name.sock"), walk=False)).structured
        assert s["socket"] == known


async def test_a_data_root_named_through_a_symlink_says_the_directory_walked_and_counts_what_lies_there(
    tmp_path: Path,
) -> None:
    real = tmp_path / "disks" / "docker"
    (real / "volumes" / "data" / "_data").mkdir(parents=True)
    (real / "volumes" / "data" / "_data" / "blob").write_bytes(b"v" * 5000)
    (tmp_path / "docker").symlink_to(real)  # as an operator moves /var/lib/docker to a larger disk
    answers = {
        **ENGINE,
        "/info": {
            "DockerRootDir": str(tmp_path / "docker"),
            "Driver": "overlay2",
            "LoggingDriver": "json-file",
        },
        "/system/df": {
            "LayersSize": 0,
            "Volumes": [
                {
                    "Name": "data",
                    "Mountpoint": str(real / "volumes/data/_data"),
                    "UsageData": {"Size": 5000, "RefCount": 1},
                }
            ],
        },
    }
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path:
        output = await call(roots=[tmp_path], socket=path)
    s = output.structured
    assert s["data_root"] == str(tmp_path / "docker") and s["reconciliation"]["path"] == str(real)
    assert f"On disk: the data root (walked at {real}, where it leads) holds" in output.text, output.text
    assert s["reconciliation"]["accounted_bytes"] == 5000  # the volume lies in the directory walked


async def test_an_engines_megabytes_of_names_tags_and_paths_are_cut_and_counted_not_carried_whole() -> None:
    long = "x\x1b[2J" * 1_000_000  # 5,000,000 characters, escapes in them
    df = {
        "LayersSize": 1,
        "Images": [
            {"Id": "sha256:" + "a" * 64, "RepoTags": [f"t{n}:1" for n in range(200_000)], "Size": 5},
            {"Id": "sha256:" + "b" * 64, "RepoTags": [long], "Size": 6},
        ],
        "Containers": [{"Id": "c", "Names": ["/" + long], "Image": long, "State": long}],
        "Volumes": [{"Name": long, "Mountpoint": "/v" * 1_000_000, "UsageData": {"Size": 1, "RefCount": 0}}],
    }
    info = {"DockerRootDir": "/a" * 100_000, "Driver": long, "LoggingDriver": "json-file"}
    with engine_saying(system_df=df, info=info, version={"Version": long}) as path:
        output = await call(socket=path)
    s = output.structured
    assert len(output.text) < 64 * KIB and len(json.dumps(s)) < 64 * KIB  # not the 30 MB the engine gave
    assert s["engine"].endswith("… (5,000,007 characters)") and "\x1b" not in output.text
    tags = {row["tags"][0]: row for row in s["images"]["largest"]}
    assert tags["t0:1"]["tags_not_shown"] == 199_990 and len(tags["t0:1"]["tags"]) == 10
    assert "t9:1 (and 199,990 more tags)" in output.text
    assert s["containers"]["largest"][0]["name"].endswith("… (5,000,000 characters)")
    assert s["volumes"]["largest"][0]["path"].endswith("… (2,000,000 characters)")
    # A data root no path can be: not resolved (hours of realpath on 100,000 components), and said why.
    assert s["data_root"].endswith("… (200,000 characters)") and s["reconciliation"] is None
    assert "could not be read here (its name is 200,000 characters long, longer than any path)" in output.text


async def test_a_container_removed_between_the_list_and_its_inspect_is_left_out_and_an_odd_id_asks_no_other_url(
    tmp_path: Path,
) -> None:
    answers = {
        **ENGINE,
        "/containers/json": [
            {"Id": "gone", "Names": ["/gone"]},
            {"Id": "c1\x1b[2J/../../version", "Names": ["/odd"]},
            {"Id": "c2", "Names": ["/kept"]},
        ],
        "/containers/c2/json": {"LogPath": "/nonexistent/c2.log", "HostConfig": {}},
    }
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path:
        output = await call(socket=path, walk=False)
    # Asked and answered 404 (no such container): neither fails the survey, nor reaches /version.
    assert [row["container"] for row in output.structured["logs"]["largest"]] == ["kept"]


def test_the_engines_inspects_stop_at_their_time_budget_and_the_containers_left_are_counted(
    tmp_path: Path,
) -> None:
    ids = [f"c{n}" for n in range(3)]
    answers = {
        **ENGINE,  # its data root keeps no container's files (Podman): one inspect each
        "/containers/json": [{"Id": c, "Names": [f"/{c}"]} for c in ids],
        **{f"/containers/{c}/json": {"LogPath": f"/nonexistent/{c}.log", "HostConfig": {}} for c in ids},
    }
    with recorded_engine(answers, str(tmp_path / "e.sock")) as path:
        spent = survey(ContainersRequest(socket=path, walk=False, inspect_timeout_s=0))
        kept = survey(ContainersRequest(socket=path, walk=False))
    text = render(answer(spent, 10, 0.0, None))
    assert [(log.container, log.inspected) for log in spent.logs] == [(c, False) for c in ids]
    assert (
        "Log files: 0 files, 0 B; 3 containers not inspected within the time budget: their logs unknown"
        in text
    )
    assert answer(spent, 10, 0.0, None).logs.not_inspected == 3
    assert [(log.container, log.inspected, log.file.path) for log in kept.logs] == [
        (c, True, f"/nonexistent/{c}.log") for c in ids
    ]
    assert "not inspected" not in render(answer(kept, 10, 0.0, None))


def test_an_error_answer_of_megabytes_is_not_parsed_for_its_message(tmp_path: Path) -> None:
    path, body = str(tmp_path / "odd.sock"), b"[" + b"[]," * 1_500_000 + b'{"message": "boom"}]'
    with answering_once(path, b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n" % len(body) + body):
        tracemalloc.start()
        try:
            with Api(path, 10) as api, pytest.raises(Unavailable) as caught:
                api.get("/info")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert words(caught.value).endswith("answered GET /info with HTTP 500")
    assert peak < 4 * len(body), peak  # the body and its reading, not 1.5 million lists (100 MB)


def test_an_engine_command_that_fails_with_escapes_in_its_error_is_said_without_them(tmp_path: Path) -> None:
    stub = tmp_path / "docker"  # what docker prints for a daemon's error: the daemon's own words
    stub.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "sys.stderr.write('Error response from daemon: \\x1b]0;pwned\\x07\\x1b[2Jgone\\n')\nsys.exit(1)\n"
    )
    stub.chmod(0o755)
    with pytest.raises(NotFound) as caught:
        survey(_no_socket((str(stub),)))
    said = words(caught.value)
    assert "\x1b" not in said and "\x07" not in said
    assert "failed: Error response from daemon: \\033]0;pwned\\a\\033[2Jgone" in said


def test_a_walk_stopped_out_of_descriptors_says_so_first_and_never_blames_the_time_budget() -> None:
    """A data root walk that ran out of file descriptors said 'walk stopped at its time budget': the model
    would give it more time, which stops at the same directory. The reason is the walk's own, said first."""
    found = Survey("", "Docker 24.0.7", "/var/lib/docker", "overlay2", "json-file", 10 * MIB)
    reason = "out of file descriptors, this process's limit of 32 open files reached; raise it with ulimit -n"
    found.walked = DataRootWalk(20 * MIB, 20 * MIB, reason, (), {})
    usage = answer(found, 10, 0.0, None)
    text = render(usage)
    assert text.split("\n")[0] == (
        f"PARTIAL RESULT: the walk of the data root stopped early ({reason}); the engine's figures are whole, "
        "what the walk found on disk is not."
    ), text
    assert "time budget" not in text, text
    assert usage.reconciliation is not None and usage.reconciliation.stopped_reason == reason
    found.walked = DataRootWalk(20 * MIB, 20 * MIB, None, (), {})
    assert not render(answer(found, 10, 0.0, None)).startswith("PARTIAL")
