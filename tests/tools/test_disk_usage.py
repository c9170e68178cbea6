"""disk_usage with injected mount-table and statvfs providers: filtering, hung and unreadable mounts, figures."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from sysmcp.engine.faults import InvalidPath, NotFound
from sysmcp.engine.mounts import Figures, FsStats, Mount, MountTable, SampleClock, percent_used
from sysmcp.engine.paths import PathPolicy
from sysmcp.history import state
from sysmcp.protocol.context import RequestContext
from sysmcp.protocol.failures import ArgumentError
from sysmcp.results import ResultStore
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.disk_usage import INPUT_SCHEMA, TOOL, DiskUsage
from sysmcp.tools.errors import as_tool_error
from sysmcp.tools.registry import ToolContext
from tests.harness import call_tool, tool_context

pytestmark = pytest.mark.anyio

GiB = 1 << 30


def context(roots: list[Path] | None = None) -> ToolContext:
    return tool_context(roots)


def stats(
    total_gib: int = 100,
    used_gib: int = 10,
    avail_gib: int | None = None,
    files: int = 1000,
    ffree: int = 900,
) -> FsStats:
    """A filesystem in 1 MiB blocks; without ``avail_gib`` nothing is reserved."""
    blocks, used = total_gib << 10, used_gib << 10
    free = blocks - used
    avail = free if avail_gib is None else avail_gib << 10
    return FsStats(1 << 20, blocks, free, avail, files, ffree)


class FakeUsage:
    """statvfs by table; paths in ``hang`` block until ``release`` is set (a dead NFS server)."""

    def __init__(self, answers: dict[str, FsStats | OSError], hang: tuple[str, ...] = ()) -> None:
        self.answers = answers
        self.hang = set(hang)
        self.release = threading.Event()
        self.calls: list[str] = []
        self.threads: dict[str, threading.Thread] = {}

    def __call__(self, path: str) -> FsStats:
        self.calls.append(path)
        self.threads[path] = threading.current_thread()
        if path in self.hang:
            self.release.wait(30)
        answer = self.answers[path]
        if isinstance(answer, OSError):
            raise answer
        return answer


@pytest.fixture
def released() -> Iterator[list[FakeUsage]]:
    """Fakes registered here are released at test end, so no thread stays blocked."""
    fakes: list[FakeUsage] = []
    yield fakes
    for fake in fakes:
        fake.release.set()
        for thread in fake.threads.values():
            if thread is not threading.main_thread():
                thread.join(5)


ROOT = Mount("/", "/dev/sda1", "ext4", ("rw", "relatime"), dev="8:1")
DATA = Mount("/data", "/dev/sdb1", "xfs", ("rw",), dev="8:17")
NFS = Mount("/mnt/nfs", "server:/export", "nfs4", ("rw", "vers=4.2"), dev="0:50")
TMP = Mount("/tmp", "tmpfs", "tmpfs", ("rw",), dev="0:30")
PROC = Mount("/proc", "proc", "proc", ("rw",), dev="0:21")
CGROUP = Mount("/sys/fs/cgroup", "cgroup2", "cgroup2", ("rw",), dev="0:28")


def tool(mounts: list[Mount], usage: FakeUsage, timeout: float = 0.2) -> DiskUsage:
    table = MountTable(mounts)
    return DiskUsage(lambda: table, usage, timeout=timeout)


async def call(handler: DiskUsage, ctx: ToolContext | None = None, **args: Any) -> tuple[str, dict[str, Any]]:
    output = await call_tool(
        "disk_usage", ctx or context(), handler=handler, **{"unit": "percent", "all": False, **args}
    )
    assert output.is_error is False
    return output.text, output.structured


def by_point(structured: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {fs["mount_point"]: fs for fs in structured["filesystems"]}


# -- figures --------------------------------------------------------------------------------------


def test_percent_is_dfs_used_over_used_plus_available_rounded_up() -> None:
    assert percent_used(900, 50) == 95  # 94.7 → 95; used / total would say 90
    assert percent_used(90, 10) == 90
    assert percent_used(901, 99) == 91  # 90.1 rounds up, as df does
    assert percent_used(0, 100) == 0
    assert percent_used(0, 0) is None


def test_figures_are_integer_bytes_with_reserved_blocks_apart() -> None:
    fig = Figures.from_stats(FsStats(4096, 1000, 150, 50, 200, 20))
    assert (fig.total, fig.used, fig.free, fig.reserved) == (4096_000, 850 * 4096, 50 * 4096, 100 * 4096)
    assert fig.percent == 95  # 850 / 900
    assert (fig.inodes_total, fig.inodes_used, fig.inodes_free, fig.inodes_percent) == (200, 180, 20, 90)
    assert all(isinstance(value, int) for value in fig)


async def test_a_filesystem_without_inode_counts_says_not_applicable() -> None:
    usage = FakeUsage({"/": stats(), "/data": stats(files=0, ffree=0)})
    text, structured = await call(tool([ROOT, DATA], usage))
    assert by_point(structured)["/data"]["inodes"] is None
    assert by_point(structured)["/"]["inodes"] == {
        "total": 1000,
        "used": 100,
        "free": 900,
        "percent_used": 10,
    }
    assert "inodes n/a" in text
    text, _ = await call(tool([ROOT, DATA], usage), path="/data")
    assert text.endswith("; inodes not applicable (none reported).")


# -- which filesystems ----------------------------------------------------------------------------


async def test_pseudo_filesystems_are_left_out_unless_all_is_asked_but_memory_ones_with_a_size_stay() -> None:
    shm = Mount("/dev/shm", "tmpfs", "tmpfs", ("rw",), dev="0:31")
    ramfs = Mount("/mnt/ram", "ramfs", "ramfs", ("rw",), dev="0:32")  # ramfs has no size: as df, left out
    usage = FakeUsage(
        {
            "/": stats(),
            "/tmp": stats(),
            "/dev/shm": stats(1, 1),
            "/mnt/ram": FsStats(4096, 0, 0, 0, 0, 0),
            "/proc": FsStats(4096, 0, 0, 0, 0, 0),
            "/sys/fs/cgroup": stats(0, 0),
        }
    )
    handler = tool([PROC, ROOT, TMP, CGROUP, shm, ramfs], usage)
    text, structured = await call(handler)
    assert list(by_point(structured)) == ["/dev/shm", "/", "/tmp"]  # a full /dev/shm first
    assert by_point(structured)["/dev/shm"]["alerts"] == ["space"]
    assert text.startswith(
        "3 filesystems (as df: memory filesystems included, pseudo ones with all), fullest"
    )
    _, everything = await call(handler, all=True)
    assert set(by_point(everything)) == {"/", "/tmp", "/proc", "/sys/fs/cgroup", "/dev/shm", "/mnt/ram"}


async def test_zero_size_real_filesystems_are_left_out_as_df_does() -> None:
    empty = Mount("/mnt/empty", "/dev/loop0", "ext4", dev="7:0")
    usage = FakeUsage({"/": stats(), "/mnt/empty": FsStats(4096, 0, 0, 0, 0, 0)})
    _, structured = await call(tool([ROOT, empty], usage))
    assert list(by_point(structured)) == ["/"]


async def test_a_filesystem_mounted_twice_is_listed_once_at_its_shortest_mount_point() -> None:
    bind = Mount("/srv/data", "/dev/sdb1", "xfs", ("rw",), root="/", dev="8:17")
    subtree = Mount("/export", "/dev/sdb1", "xfs", ("rw",), root="/projects", dev="8:17")
    usage = FakeUsage({"/": stats(), "/srv/data": stats(), "/data": stats(), "/export": stats()})
    handler = tool([ROOT, bind, DATA, subtree], usage)
    _, structured = await call(handler)
    assert list(by_point(structured)) == ["/", "/data"]
    _, everything = await call(handler, all=True)
    assert len(everything["filesystems"]) == 4


async def test_with_roots_only_the_filesystems_in_scope_are_listed(tmp_path: Path) -> None:
    usage = FakeUsage({"/": stats(), "/data": stats()})
    _, structured = await call(tool([ROOT, DATA], usage), context([Path("/data")]))
    assert list(by_point(structured)) == ["/data"]
    _, structured = await call(tool([ROOT, DATA], usage), context([tmp_path]))
    assert list(by_point(structured)) == ["/"]  # the filesystem holding the root


# -- order and alerts -----------------------------------------------------------------------------


async def test_fullest_first_and_over_90_percent_of_space_or_inodes_is_called_out() -> None:
    home = Mount("/home", "/dev/sdc1", "ext4", dev="8:33")
    image = Mount("/snap/core", "/dev/loop1", "squashfs", ("ro",), read_only=True, dev="7:1")
    usage = FakeUsage(
        {
            "/": stats(100, 50),
            "/data": stats(100, 95),  # space 95 %
            "/home": stats(100, 10, files=1000, ffree=50),  # inodes 95 %
            "/snap/core": stats(1, 1),  # 100 %, but read-only: nothing to warn about
        }
    )
    text, structured = await call(tool([ROOT, DATA, home, image], usage))
    assert [fs["mount_point"] for fs in structured["filesystems"]] == ["/snap/core", "/data", "/home", "/"]
    alerts = {fs["mount_point"]: fs["alerts"] for fs in structured["filesystems"]}
    assert alerts == {"/data": ["space"], "/home": ["inodes"], "/": [], "/snap/core": []}
    assert "Over 90 %: /data (space), /home (inodes)." in text
    assert "fullest first" in text and "fullest first" in structured["order"]


async def test_exactly_90_percent_is_not_over_the_threshold() -> None:
    usage = FakeUsage({"/": stats(100, 90)})
    text, structured = await call(tool([ROOT], usage))
    assert structured["filesystems"][0]["percent_used"] == 90
    assert structured["filesystems"][0]["alerts"] == [] and "Over 90" not in text


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        ("percent", "/  ext4 /dev/sda1  26% used (26.0 GiB), 74.0 GiB free of 100.0 GiB; inodes 10%"),
        ("mb", "/  ext4 /dev/sda1  26,624 MiB used, 75,776 MiB free of 102,400 MiB (26% used); inodes 10%"),
        ("human", "/  ext4 /dev/sda1  26.0 GiB used, 74.0 GiB free of 100.0 GiB (26%); inodes 10%"),
        (
            "bytes",
            f"/  ext4 /dev/sda1  {26 * GiB} bytes used, {74 * GiB} free of {100 * GiB} (26%); inodes 10%",
        ),
    ],
)
async def test_the_unit_chooses_how_the_text_states_usage(unit: str, expected: str) -> None:
    usage = FakeUsage({"/": stats(100, 26)})
    text, structured = await call(tool([ROOT], usage), unit=unit)
    assert text.splitlines()[1] == expected
    assert structured["filesystems"][0]["used_bytes"] == 26 * GiB


def test_whole_mib_round_up_as_df_m_does() -> None:
    from sysmcp.tools.disk_usage import _amount

    assert [_amount(size, "mb") for size in (0, 4096, 1 << 20, (1 << 20) + 1, 8384512)] == [
        "0 MiB",
        "1 MiB",
        "1 MiB",
        "2 MiB",
        "8 MiB",
    ]


# -- never hangs ----------------------------------------------------------------------------------


async def test_a_hung_mount_becomes_an_entry_and_the_rest_still_arrives(released: list[FakeUsage]) -> None:
    usage = FakeUsage({"/": stats(), "/data": stats(), "/mnt/nfs": stats()}, hang=("/mnt/nfs",))
    released.append(usage)
    handler = tool([ROOT, NFS, DATA], usage, timeout=0.2)
    text, structured = await call(handler)
    nfs = by_point(structured)["/mnt/nfs"]
    assert nfs["status"] == "no_answer" and "did not answer within 0.2 s" in nfs["reason"]
    assert "total_bytes" not in nfs
    assert by_point(structured)["/"]["status"] == by_point(structured)["/data"]["status"] == "ok"
    assert structured["filesystems"][-1]["mount_point"] == "/mnt/nfs"  # unanswered last
    assert "Did not answer: /mnt/nfs." in text
    assert usage.threads["/mnt/nfs"].daemon  # it can never keep the process alive at exit
    assert usage.threads["/"] is threading.current_thread()  # local filesystems need no thread


async def test_a_mount_still_hung_is_not_probed_again_so_threads_cannot_pile_up(
    released: list[FakeUsage],
) -> None:
    usage = FakeUsage({"/": stats(), "/mnt/nfs": stats()}, hang=("/mnt/nfs",))
    released.append(usage)
    handler = tool([ROOT, NFS], usage, timeout=0.2)
    await call(handler)
    for _ in range(5):
        _, structured = await call(handler)
        assert "not probed again" in by_point(structured)["/mnt/nfs"]["reason"]
    assert usage.calls.count("/mnt/nfs") == 1
    assert handler.disks.prober.outstanding == 1
    usage.release.set()
    usage.threads["/mnt/nfs"].join(5)
    assert handler.disks.prober.outstanding == 0
    _, structured = await call(handler)  # answered again once the server is back
    assert by_point(structured)["/mnt/nfs"]["status"] == "ok"
    assert usage.calls.count("/mnt/nfs") == 2


async def test_concurrent_calls_share_one_probe_of_a_slow_mount(released: list[FakeUsage]) -> None:
    usage = FakeUsage({"/": stats(), "/mnt/nfs": stats()}, hang=("/mnt/nfs",))
    released.append(usage)
    handler = tool([ROOT, NFS], usage, timeout=5)
    results: list[dict[str, Any]] = []

    async def one() -> None:
        results.append((await call(handler))[1])

    async with anyio.create_task_group() as group:
        group.start_soon(one)
        group.start_soon(one)
        await anyio.wait_all_tasks_blocked()
        usage.release.set()
    assert [by_point(r)["/mnt/nfs"]["status"] for r in results] == ["ok", "ok"]
    assert usage.calls.count("/mnt/nfs") == 1


async def test_the_number_of_stuck_probes_is_bounded(released: list[FakeUsage]) -> None:
    mounts = [ROOT] + [Mount(f"/mnt/n{i}", f"srv:/{i}", "nfs", dev=f"0:{60 + i}") for i in range(4)]
    usage = FakeUsage({m.mount_point: stats() for m in mounts}, hang=tuple(m.mount_point for m in mounts[1:]))
    released.append(usage)
    table = MountTable(mounts)
    handler = DiskUsage(lambda: table, usage, timeout=0.2, max_stuck=2)
    _, structured = await call(handler)
    reasons = [fs.get("reason", "") for fs in structured["filesystems"][1:]]
    assert sum("did not answer within" in r for r in reasons) == 2
    assert sum("not probed" in r and "still stuck" in r for r in reasons) == 2
    assert handler.disks.prober.outstanding == 2


async def test_a_path_behind_a_symlink_into_a_hung_mount_does_not_hang_the_call(
    tmp_path: Path, released: list[FakeUsage]
) -> None:
    net = tmp_path / "net"
    (net / "deep").mkdir(parents=True)
    (tmp_path / "link").symlink_to(net / "deep")
    mounts = [ROOT, Mount(str(net), "server:/export", "nfs4", dev="0:50")]
    usage = FakeUsage({str(net / "deep"): stats()}, hang=(str(net / "deep"),))
    released.append(usage)
    text, structured = await call(tool(mounts, usage, timeout=0.2), path=str(tmp_path / "link"))
    entry = structured["filesystems"][0]
    assert entry["status"] == "no_answer" and entry["mount_point"] == str(net)
    assert "did not answer within 0.2 s" in text
    assert usage.threads[str(net / "deep")].daemon


ABANDON_SCRIPT = """
import threading, anyio
from sysmcp.engine.mounts._mounts import Mount, MountTable
from sysmcp.engine.mounts import FsStats
from sysmcp.tools.disk_usage import DiskUsage
from tests.tools.test_disk_usage import context

never = threading.Event()
def usage(path):
    if path == "/mnt/nfs":
        never.wait()  # never released: the process must still exit
    return FsStats(4096, 100, 50, 50, 10, 5)

table = MountTable([Mount("/", "/dev/sda1", "ext4"), Mount("/mnt/nfs", "srv:/x", "nfs4")])
handler = DiskUsage(lambda: table, usage, timeout=0.2)
output = anyio.run(handler, {"unit": "percent", "all": False}, context())
print(output.structured["filesystems"][-1]["status"])
"""


def test_a_thread_stuck_in_a_hung_mount_does_not_keep_the_process_alive() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(ABANDON_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no_answer"


# -- errors ---------------------------------------------------------------------------------------


async def test_an_unreadable_mount_is_an_entry_with_the_reason() -> None:
    secret = Mount("/root/vault", "/dev/sdd1", "ext4", dev="8:49")
    usage = FakeUsage({"/": stats(), "/root/vault": PermissionError(13, "Permission denied")})
    text, structured = await call(tool([ROOT, secret], usage))
    vault = by_point(structured)["/root/vault"]
    assert vault["status"] == "error" and vault["reason"] == "cannot read usage: Permission denied"
    assert "/root/vault  ext4 /dev/sdd1  cannot read usage: Permission denied" in text
    assert by_point(structured)["/"]["status"] == "ok"


async def test_an_unreadable_path_is_an_entry_not_a_failed_call(tmp_path: Path) -> None:
    usage = FakeUsage({str(tmp_path): PermissionError(13, "Permission denied")})
    text, structured = await call(tool([ROOT], usage), path=str(tmp_path))
    assert structured["filesystems"][0]["status"] == "error"
    assert structured["path"] == str(tmp_path)
    assert f"{tmp_path} is on / (ext4 /dev/sda1): cannot read usage: Permission denied." == text


async def test_a_missing_path_is_a_tool_error(tmp_path: Path) -> None:
    usage = FakeUsage({str(tmp_path / "gone"): FileNotFoundError(2, "No such file or directory")})
    with pytest.raises(NotFound) as raised:
        await tool([ROOT], usage)({"path": str(tmp_path / "gone"), "unit": "percent"}, context())
    assert "No such file or directory" in as_tool_error(raised.value).message


@pytest.mark.parametrize(("path", "message"), [("var/log", "relative"), ("/tmp/\ud800x", "usable")])
async def test_a_path_that_cannot_name_a_file_is_a_tool_error(path: str, message: str) -> None:
    with pytest.raises(InvalidPath, match=message):  # worded for the model at the server's boundary
        await tool([ROOT], FakeUsage({}))({"path": path, "unit": "percent"}, context())


# -- one path -------------------------------------------------------------------------------------


async def test_a_path_deep_inside_a_bind_mount_resolves_to_that_mount(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    bind = Mount(str(tmp_path), "/dev/sdb1", "xfs", ("rw", "noatime"), root="/exports/x", dev="8:17")
    usage = FakeUsage({str(deep): stats(100, 95)})
    text, structured = await call(tool([ROOT, bind], usage), path=str(deep))
    entry = structured["filesystems"][0]
    assert (entry["mount_point"], entry["device"], entry["fs_type"], entry["fs_root"]) == (
        str(tmp_path),
        "/dev/sdb1",
        "xfs",
        "/exports/x",
    )
    assert entry["options"] == ["rw", "noatime"] and entry["read_only"] is False
    assert text.startswith(f"{deep} is on {tmp_path} (xfs /dev/sdb1, bind mount of /exports/x): 95% used")
    assert "inodes 10% used (100 of 1,000)" in text and "⚠ over 90 %: space" in text


async def test_the_path_answer_mentions_reserved_space() -> None:
    usage = FakeUsage({"/": stats(100, 10, avail_gib=80)})
    text, structured = await call(tool([ROOT], usage), path="/")
    assert structured["filesystems"][0]["reserved_bytes"] == 10 * GiB
    assert "10.0 GiB reserved for root" in text and "12% used" in text  # 10 / (10 + 80)


async def test_what_btrfs_keeps_back_is_not_called_a_root_reserve() -> None:
    """btrfs has no blocks reserved for root: the gap between free and available is its own, and root
    cannot write into it either."""
    pool = Mount("/", "/dev/sda2", "btrfs", ("rw", "subvol=/@"), dev="0:31")
    text, structured = await call(tool([pool], FakeUsage({"/": stats(100, 10, avail_gib=80)})), path="/")
    assert structured["filesystems"][0]["reserved_bytes"] == 10 * GiB
    assert "10.0 GiB kept back by btrfs" in text and "reserved for root" not in text


@pytest.mark.parametrize("unit", ["percent", "mb", "human", "bytes"])
async def test_the_text_always_states_used_free_and_reserved_bytes(unit: str) -> None:
    usage = FakeUsage({"/": stats(252, 120, avail_gib=120)})  # 12 GiB reserved: used + free < total
    for args in ({"unit": unit}, {"unit": unit, "path": "/"}):
        text, _ = await call(tool([ROOT], usage), None, **args)
        used, free, reserved = {
            "percent": ("(120.0 GiB)", "120.0 GiB free", "12.0 GiB reserved for root"),
            "mb": ("122,880 MiB used", "122,880 MiB free", "12,288 MiB reserved for root"),
            "human": ("120.0 GiB used", "120.0 GiB free", "12.0 GiB reserved for root"),
            "bytes": (f"{120 * GiB} bytes used", f"{120 * GiB} free", f"{12 * GiB} reserved for root"),
        }[unit]
        assert used in text and free in text and reserved in text, text


# -- sampling ---------------------------------------------------------------------------------------


class FakeClock(SampleClock):
    """Sampling's clock, moved only by its own sleeps: a window takes no real time and the samples
    fall where they are asked for, however loaded the machine."""

    def __init__(self) -> None:
        self.time = 1000.0

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.time += seconds
        await anyio.lowlevel.checkpoint()


class Filling:
    """statvfs of a filesystem that fills at ``per_s`` bytes a second of ``clock`` (the event loop's
    when none is given)."""

    def __init__(
        self, per_s: float, free_gib: int = 10, inodes_per_s: float = 0, clock: SampleClock | None = None
    ) -> None:
        self.per_s, self.inodes_per_s = per_s, inodes_per_s
        self.free = free_gib * GiB
        self.start: float | None = None
        self.clock = clock or SampleClock()

    def __call__(self, path: str) -> FsStats:
        now = self.clock.now()
        if self.start is None:
            self.start = now
        used = int((now - self.start) * self.per_s) // 4096
        inodes = int((now - self.start) * self.inodes_per_s)
        blocks = (20 * GiB) // 4096
        free = self.free // 4096 - used
        return FsStats(4096, blocks, free, free, 1_000_000, 500_000 - inodes)


async def test_sampling_gives_the_fill_rate_and_the_time_to_full() -> None:
    clock = FakeClock()
    usage = Filling(15 << 20, inodes_per_s=100, clock=clock)
    handler = DiskUsage(lambda: MountTable([ROOT]), usage, clock=clock)
    text, structured = await call(handler, sample_s=0.5)
    rate = structured["filesystems"][0]["rate"]
    assert structured["sample_s"] == 0.5 and rate["samples"] >= 3
    assert rate["seconds"] == pytest.approx(0.5) and clock.time == pytest.approx(1000.5)
    assert rate["fill_rate_bytes_per_s"] == pytest.approx(15 << 20, rel=0.05)
    left = structured["filesystems"][0]["free_bytes"]
    assert rate["seconds_to_full"] == pytest.approx(left / (15 << 20), rel=0.05)
    assert rate["inode_fill_rate_per_s"] == pytest.approx(100, rel=0.1)
    assert rate["seconds_to_inodes_full"] == pytest.approx(5000, rel=0.1)
    assert "full in about 11 min at 15.0 MiB/s" in text, text
    assert "Filling now: / (" in text


async def test_a_filesystem_freeing_space_or_steady_has_no_time_to_full() -> None:
    for per_s, phrase in ((-(2 << 20), "freeing 2.0 MiB/s"), (0, "no change in")):
        clock = FakeClock()
        handler = DiskUsage(lambda: MountTable([ROOT]), Filling(per_s, clock=clock), clock=clock)
        text, structured = await call(handler, path="/", sample_s=0.3)
        rate = structured["filesystems"][0]["rate"]
        assert rate["seconds_to_full"] is None and rate["seconds_to_inodes_full"] is None
        assert phrase in text, text
        assert (rate["fill_rate_bytes_per_s"] < 0) == (per_s < 0)


async def test_sampling_reports_progress_and_stops_at_once_when_cancelled() -> None:
    """A client that cancels a 60 s window on hearing of its first step: not one sample more is taken.
    The window runs on a clock moved by its own sleeps, so the step comes at once however loaded."""
    seen: list[dict[str, Any]] = []
    clock = FakeClock()
    filling = Filling(1 << 20, clock=clock)
    probed: list[float] = []

    def usage(path: str) -> FsStats:
        probed.append(clock.now())
        return filling(path)

    with anyio.fail_after(5), anyio.CancelScope() as scope:

        class Canceller:
            async def notify(self, method: str, params: dict[str, Any]) -> None:
                seen.append(params)
                scope.cancel()
                self.probed_then = len(probed)

        client = Canceller()
        request = RequestContext(1, "tools/call", client, progress_token="t")
        handler = DiskUsage(lambda: MountTable([ROOT]), usage, clock=clock)
        await handler(
            {"unit": "percent", "all": False, "sample_s": 60},
            ToolContext(request, PathPolicy(), ResultStore()),
        )
    assert scope.cancelled_caught
    assert seen and all(p["total"] == 60 for p in seen)
    assert "sampling free space" in seen[-1]["message"]
    assert len(probed) == client.probed_then and clock.now() < 1000 + 60


def test_a_sampling_call_is_never_answered_at_once() -> None:
    handler = DiskUsage(lambda: MountTable([ROOT]), FakeUsage({"/": stats()}))
    assert handler.answers_at_once({"path": "/"}) is True
    assert handler.answers_at_once({"path": "/", "sample_s": 2}) is False
    assert handler.answers_at_once({"sample_s": 1}) is False


def test_with_history_on_a_call_waits_for_its_write_and_the_event_loop_opens_no_store(tmp_path: Path) -> None:
    handler = DiskUsage(lambda: MountTable([ROOT]), FakeUsage({"/": stats()}))
    state.configure(tmp_path / "state")
    try:
        assert handler.answers_at_once({"path": "/"}) is False  # the reading's write is a worker's
        assert not (tmp_path / "state").exists()  # asked without opening (creating) the store
    finally:
        state.configure(None)


@pytest.mark.parametrize(("value", "message"), [(61, "<= 60"), (-1, ">= 0"), ("2s", "must be a number")])
def test_out_of_range_sample_s_is_refused_clearly(value: Any, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        validate_arguments(INPUT_SCHEMA, {"sample_s": value})


def test_the_docs_state_the_formula_rounding_order_and_timeout() -> None:
    """docs/tools.md says what the description leaves out (a model reads the description every turn)."""
    docs = (Path(__file__).parents[2] / "docs" / "tools.md").read_text(encoding="utf-8")
    section = docs.split("## `disk_usage`", 1)[1].split("\n## ", 1)[0]
    for phrase in ("used / (used + free)", "rounded up", "fullest first", "90 %", "5 s", "`all`"):
        assert phrase in section
    assert "fullest first" in TOOL.description


def test_times_to_full_read_as_a_person_says_them() -> None:
    from sysmcp.tools.disk_usage import duration_phrase

    assert duration_phrase(3 * 3600 + 600) == "3 h 10 min"
    assert duration_phrase(2 * 86400 + 4 * 3600) == "2 d 4 h"
    assert duration_phrase(11 * 86400 + 3600) == "11 d"
    assert duration_phrase(45) == "45 s"
    assert duration_phrase(5 * 60 + 7) == "5 min 7 s"
    assert duration_phrase(3600) == "1 h"


async def test_a_users_fuse_mount_named_with_terminal_escapes_is_shown_escaped() -> None:
    """fusermount lets any user mount at a directory of theirs, naming the source and type as they like;
    mountinfo escapes only space, tab, newline and backslash, so ESC reaches the table raw."""
    evil = Mount("/home/u/x\x1b[2J", "src\x1b]0;t\x07", "fuse.\x1b[31m", ("rw",), dev="0:90")
    usage = FakeUsage({"/": stats(), evil.mount_point: stats()})
    text, _ = await call(tool([ROOT, evil], usage), all=True)
    assert "/home/u/x\\033[2J" in text and "src\\033]0;t\\a" in text and "fuse.\\033[31m" in text
    assert "\x1b" not in text and "\x07" not in text
    text, _ = await call(tool([ROOT, evil], usage), path=evil.mount_point)
    assert "\x1b" not in text
