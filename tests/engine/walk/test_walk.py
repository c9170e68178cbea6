"""The shared walker on real trees: what it yields, what it counts, and what it refuses to follow."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sysmcp.engine.walk import (
    Listing,
    MountPoint,
    ScanConfig,
    Scanner,
    ScanStopped,
    SkipCounter,
    Subtree,
    SubtreeTotals,
    WalkOptions,
    mount_table,
    read_run,
    walk_files,
)
from sysmcp.engine.walk._types import FileEntry
from tests.descriptors import counted_alone, open_descriptors
from tests.profile import UNDER_POSIX_PROFILE


def _noop() -> None:
    return None


def files_under(root: Path, options: WalkOptions | None = None) -> tuple[list[FileEntry], SkipCounter]:
    skipped = SkipCounter()
    found = list(walk_files(os.fsencode(root), options or WalkOptions(), skipped, _noop))
    return found, skipped


def scan_totals(
    root: Path, options: WalkOptions | None = None, fd_budget: int = 64, config: ScanConfig | None = None
) -> tuple[SubtreeTotals, SkipCounter]:
    skipped = SkipCounter()
    scanner = Scanner(
        os.fsencode(root),
        options or WalkOptions(),
        skipped,
        fd_budget=fd_budget,
        config=config or ScanConfig(),
    )
    finished = [e for e in scanner.events() if isinstance(e, SubtreeTotals)]
    assert finished[-1].relative == ""
    return finished[-1], skipped


def du(root: Path, *flags: str) -> int:
    out = subprocess.run(["du", "-sx", *flags, os.fsencode(root)], capture_output=True, check=False)
    return int(out.stdout.split()[0])


def build_mixed_tree(root: Path) -> None:
    """Hard links, a sparse file, a symlink loop, a dangling symlink, odd names, nested directories."""
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "one.txt").write_bytes(b"1" * 1000)
    (root / "a" / "b" / "two.bin").write_bytes(b"2" * 70_000)
    os.link(root / "a" / "b" / "two.bin", root / "a" / "b" / "c" / "two-again.bin")
    with (root / "sparse.img").open("wb") as sparse:
        sparse.truncate(50 << 20)
        sparse.write(b"data")
    (root / "a" / "b" / "c" / "loop").symlink_to("..")
    (root / "dangling").symlink_to("/nonexistent/target")
    (root / "with space.txt").write_bytes(b"s" * 10)
    (root / "new\nline").write_bytes(b"n" * 20)
    (root / os.fsdecode(b"bad-\xff-utf8")).write_bytes(b"b" * 30)
    (root / "empty").mkdir()


def test_walk_files_yields_every_regular_file_as_bytes_including_odd_names(tmp_path: Path) -> None:
    build_mixed_tree(tmp_path)
    found, skipped = files_under(tmp_path)
    relative = sorted(e.relative for e in found)
    assert relative == sorted(
        [
            b"a/one.txt",
            b"a/b/two.bin",
            b"a/b/c/two-again.bin",
            b"sparse.img",
            b"with space.txt",
            b"new\nline",
            b"bad-\xff-utf8",
        ]
    )
    for entry in found:
        assert entry.path == os.fsencode(tmp_path) + b"/" + entry.relative
        assert entry.stat.st_size == os.lstat(entry.path).st_size
    assert skipped.as_dict() == {}


def test_symlinks_are_never_followed_so_a_loop_ends(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "self").symlink_to(tmp_path)
    (tmp_path / "d" / "up").symlink_to("..")
    (tmp_path / "d" / "f").write_bytes(b"x")
    (tmp_path / "elsewhere").symlink_to("/usr")
    found, _ = files_under(tmp_path)
    assert [e.relative for e in found] == [b"d/f"]


def test_special_files_are_skipped_and_counted(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        (tmp_path / "plain").write_bytes(b"p")
        found, skipped = files_under(tmp_path)
    assert [e.relative for e in found] == [b"plain"]
    assert skipped.as_dict() == {"special_file": 2}


def test_totals_equal_du_apparent_and_disk_bytes(tmp_path: Path) -> None:
    build_mixed_tree(tmp_path)
    total, _ = scan_totals(tmp_path)
    assert total.apparent == du(tmp_path, "-b")
    assert total.disk == du(tmp_path, "-B1")
    assert total.disk < 1 << 20 < total.apparent  # the sparse file's blocks, not its length
    assert total.files == 7 - 1  # the hard link is one file


@pytest.mark.parametrize("list_at_once", [0, 1 << 30], ids=["streamed", "listed at once"])
def test_big_and_small_directories_are_read_alike(tmp_path: Path, list_at_once: int) -> None:
    """Directories bigger than ``list_at_once`` are streamed through scandir, smaller ones listed at once."""
    build_mixed_tree(tmp_path)
    for i in range(3000):  # more than one checkpoint interval in one directory
        (tmp_path / "a" / f"entry-{i:05d}").write_bytes(b"e" * (i % 7))
    config = ScanConfig(list_at_once=list_at_once)
    total, skipped = scan_totals(tmp_path, config=config)
    assert total.apparent == du(tmp_path, "-b")
    assert total.disk == du(tmp_path, "-B1")
    assert total.files == 7 - 1 + 3000
    scanner = Scanner(os.fsencode(tmp_path), WalkOptions(), SkipCounter(), config=config)
    listings = [event for event in scanner.events() if isinstance(event, Listing)]
    assert sum(len(listing.files) + len(listing.links) for listing in listings) == 7 + 3000  # every name
    assert skipped.as_dict() == {}


@pytest.mark.parametrize("list_at_once", [0, 1 << 30], ids=["streamed", "listed at once"])
def test_a_big_directory_is_checked_between_chunks_and_stops_with_what_it_counted(
    tmp_path: Path, list_at_once: int
) -> None:
    for i in range(25):
        (tmp_path / f"f{i:02d}").write_bytes(b"x" * (i + 1))
    calls: list[int] = []
    scanner: Scanner

    def checkpoint() -> None:  # once before the root is read, then after every 10 names
        calls.append(scanner.entries)
        if len(calls) == 3:
            raise ScanStopped("enough")

    config = ScanConfig(list_at_once=list_at_once, check_every=10)
    scanner = Scanner(os.fsencode(tmp_path), WalkOptions(), SkipCounter(), checkpoint, config=config)
    events = list(scanner.events())
    assert calls == [1, 11, 21]  # the root itself, then 10 and 20 of its names
    (root,) = [e for e in events if isinstance(e, SubtreeTotals)]
    assert root.partial and scanner.stopped == "enough"
    assert scanner.entries == 21 and root.files == 20
    first = os.listdir(tmp_path)[:20]  # the order the directory gives its names (scandir's too)
    assert root.apparent == os.lstat(tmp_path).st_size + sum(
        (tmp_path / name).stat().st_size for name in first
    )


def test_hard_links_are_counted_once_but_every_name_is_walked(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"x" * 5000)
    os.link(tmp_path / "x", tmp_path / "y")
    os.link(tmp_path / "x", tmp_path / "z")
    total, _ = scan_totals(tmp_path)
    assert total.apparent == os.lstat(tmp_path).st_size + 5000 == du(tmp_path, "-b")
    found, _ = files_under(tmp_path)
    assert sorted(e.relative for e in found) == [b"x", b"y", b"z"]


def test_excluded_names_and_relative_paths_are_skipped_and_counted(tmp_path: Path) -> None:
    (tmp_path / "keep" / "node_modules").mkdir(parents=True)
    (tmp_path / "keep" / "node_modules" / "big.js").write_bytes(b"j" * 100)
    (tmp_path / "keep" / "a.log").write_bytes(b"l")
    (tmp_path / "keep" / "a.txt").write_bytes(b"t")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "c.txt").write_bytes(b"c")
    options = WalkOptions(exclude=("node_modules", "*.log", "cache/*"))
    found, skipped = files_under(tmp_path, options)
    assert [e.relative for e in found] == [b"keep/a.txt"]
    assert skipped.as_dict() == {"excluded": 3}


def test_a_deep_tree_is_walked_with_few_descriptors(tmp_path: Path) -> None:
    deep = tmp_path
    for level in range(40):
        deep = deep / f"l{level}"
        deep.mkdir()
        (deep / "f").write_bytes(b"z" * level)
        (deep / "side").mkdir()
        (deep / "side" / "g").write_bytes(b"g")
    total, skipped = scan_totals(tmp_path, fd_budget=3)
    assert skipped.as_dict() == {}
    assert total.files == 80 and total.dirs == 81
    assert total.apparent == du(tmp_path, "-b")


def test_a_directory_swapped_for_a_symlink_mid_walk_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "inside").write_bytes(b"v")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    swapped = False
    calls = 0

    def swap() -> None:  # the second checkpoint: after the root was listed, before 'victim' is opened
        nonlocal swapped, calls
        calls += 1
        if calls == 2:
            swapped = True
            (tmp_path / "victim").rename(tmp_path / "moved-away")
            (tmp_path / "victim").symlink_to(outside)

    try:
        found = list(walk_files(os.fsencode(tmp_path), WalkOptions(), skipped := SkipCounter(), swap))
    finally:
        shutil.rmtree(outside)
    assert swapped
    assert [e.relative for e in found] == [b"moved-away/inside"] or found == []
    assert b"secret" not in b"".join(e.path for e in found)
    assert skipped.as_dict() == {"vanished": 1}


def test_a_directory_replaced_by_another_mid_walk_is_not_entered(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "old").write_bytes(b"o")
    calls = 0

    def replace() -> None:  # after the root was listed, before 'd' is opened
        nonlocal calls
        calls += 1
        if calls == 2:
            (tmp_path / "d").rename(tmp_path.parent / f"{tmp_path.name}-old-d")
            (tmp_path / "d").mkdir()
            (tmp_path / "d" / "new").write_bytes(b"n")

    found = list(walk_files(os.fsencode(tmp_path), WalkOptions(), skipped := SkipCounter(), replace))
    assert found == [] and skipped.as_dict() == {"vanished": 1}


def test_a_stop_from_the_checkpoint_ends_with_partial_totals(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "f").write_bytes(b"f" * 100)
    calls = 0

    def budget() -> None:
        nonlocal calls
        calls += 1
        if calls > 3:
            raise ScanStopped("time budget")

    scanner = Scanner(os.fsencode(tmp_path), WalkOptions(), SkipCounter(), budget)
    events = list(scanner.events())
    root = events[-1]
    assert isinstance(root, SubtreeTotals) and root.relative == "" and root.partial
    assert scanner.stopped == "time budget"
    assert 0 < root.files < 5


def test_cancellation_from_the_checkpoint_propagates_and_closes_descriptors(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"d{i}").mkdir()

    class Cancelled(Exception):
        pass

    def cancel() -> None:
        raise Cancelled

    def walk() -> int:
        before = open_descriptors()
        with pytest.raises(Cancelled):
            list(Scanner(os.fsencode(tmp_path), WalkOptions(), SkipCounter(), cancel).events())
        return open_descriptors() - before

    assert counted_alone(walk) == 0


def test_listings_come_before_the_directory_finishes(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_bytes(b"f")
    order = [
        (type(e).__name__, e.relative)
        for e in Scanner(os.fsencode(tmp_path), WalkOptions(), SkipCounter()).events()
    ]
    assert order == [("Listing", ""), ("Listing", "sub"), ("SubtreeTotals", "sub"), ("SubtreeTotals", "")]


@pytest.fixture
def world_readable_tmp() -> Iterator[Path]:
    """A tree an unprivileged child can reach (pytest's own tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="sysmcp-walk-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for child in path.rglob("*"):
            if child.is_dir() and not child.is_symlink():
                child.chmod(0o755)
        shutil.rmtree(path)


def run_unprivileged(work: Callable[[], object]) -> object:
    """Run ``work`` in a forked child that dropped root (so permissions apply); return its JSON result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            os.close(read_end)
            os.setgid(65534)
            os.setuid(65534)
            os.write(write_end, json.dumps(work()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0, "the unprivileged child failed"
    return json.loads(data)


def test_unreadable_directories_are_skipped_counted_and_sized_like_du(world_readable_tmp: Path) -> None:
    root = world_readable_tmp
    (root / "open").mkdir()
    (root / "open" / "f").write_bytes(b"o" * 10)
    (root / "locked").mkdir()
    (root / "locked" / "hidden").write_bytes(b"h" * 10_000)
    (root / "locked").chmod(0o000)

    def work() -> object:
        total, skipped = scan_totals(root)
        found, _ = files_under(root)
        du_run = subprocess.run(["du", "-sxb", str(root)], capture_output=True, check=False)
        return [
            total.apparent,
            skipped.as_dict(),
            [e.relative.decode() for e in found],
            du_run.stdout.decode(),
        ]

    result = run_unprivileged(work) if os.geteuid() == 0 else work()
    assert isinstance(result, list)
    apparent, skipped, found, du_out = result
    assert skipped == {"unreadable": 1}
    assert found == ["open/f"]
    assert apparent == int(du_out.split()[0])


@pytest.mark.parametrize("typed", [False, True], ids=["lstat", "by-type"])
def test_a_listable_directory_without_search_permission_is_one_unreadable_directory_named(
    world_readable_tmp: Path, typed: bool
) -> None:
    """Mode 0644 on a directory: its names can be listed, none of its entries looked at (du: "cannot
    access" per entry). It is one unreadable directory, named, not one unnamed "unreadable" per entry
    (which made the answer say "and 4 more" unreadable directories that do not exist)."""
    root = world_readable_tmp
    (root / "nosearch" / "sub").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (root / "nosearch" / name).write_bytes(b"x" * 10)
    (root / "nosearch").chmod(0o644)

    def work() -> object:
        total, skipped = scan_totals(root, config=ScanConfig(regular_by_type=typed))
        du_run = subprocess.run(["du", "-sxb", str(root)], capture_output=True, check=False)
        return [total.apparent, skipped.as_dict(), skipped.named, du_run.stdout.decode()]

    result = run_unprivileged(work) if os.geteuid() == 0 else work()
    assert isinstance(result, list)
    apparent, skipped, named, du_out = result
    assert skipped == {"unreadable": 1}
    assert named == ["nosearch"]
    if not typed:  # by type, regular files' sizes are not in the totals (hash_tree opens them)
        assert apparent == int(du_out.split()[0])


def test_other_filesystems_are_not_entered_by_default(tmp_path: Path) -> None:
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    (tmp_path / "here").write_bytes(b"h")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "sysmcp-test", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and a mount namespace that allows it)")
    try:
        (mount_point / "there").write_bytes(b"t")
        found, skipped = files_under(tmp_path)
        assert [e.relative for e in found] == [b"here"]
        assert skipped.as_dict() == {"other_filesystem": 1}
        total, _ = scan_totals(tmp_path)
        assert total.apparent == du(tmp_path, "-b")
        crossing, _ = files_under(tmp_path, WalkOptions(one_file_system=False))
        assert sorted(e.relative for e in crossing) == [b"here", b"mnt/there"]
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


def test_pseudo_filesystems_are_skipped_even_when_crossing_filesystems(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "f").write_bytes(b"f")
    mounted = subprocess.run(
        ["mount", "-t", "proc", "sysmcp-test", str(tmp_path / "proc")], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a proc filesystem here (needs root)")
    try:
        found, skipped = files_under(tmp_path, WalkOptions(one_file_system=False))
        assert [e.relative for e in found] == [b"f"]
        assert skipped.as_dict() == {"pseudo_filesystem": 1}
    finally:
        subprocess.run(["umount", str(tmp_path / "proc")], check=False)


def test_a_consumer_that_stops_early_leaves_no_descriptor_open(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "f").write_bytes(b"f")

    def walk() -> list[int]:
        before = open_descriptors()
        walker = walk_files(os.fsencode(tmp_path), WalkOptions(), SkipCounter(), _noop)
        next(walker)
        held = open_descriptors() - before
        walker.close()
        return [held, open_descriptors() - before]

    held, left_open = counted_alone(walk)
    assert held > 0 and left_open == 0


def test_mount_points_from_the_mount_table_are_skipped_without_being_looked_at(tmp_path: Path) -> None:
    """A hung NFS mount would not answer even lstat: the walk must not touch names the table calls mounts."""
    for name in ("nfs", "bind", "proc", "plain"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_bytes(b"f")
    root = os.fsencode(tmp_path)
    dev = os.stat(tmp_path).st_dev
    table = [
        MountPoint(root + b"/nfs", dev + 1, "nfs4"),  # pretend: another (dead) filesystem
        MountPoint(
            root + b"/bind", dev, "ext4"
        ),  # a bind mount of our own filesystem: du -x walks it, we do not
        MountPoint(root + b"/proc", dev + 2, "proc"),
        MountPoint(b"/elsewhere", dev + 3, "nfs4"),
    ]
    skipped = SkipCounter()
    scanner = Scanner(root, WalkOptions(), skipped, mounts=table)
    listings = [e for e in scanner.events() if isinstance(e, Listing)]
    entered = {e.relative for e in listings}
    assert entered == {"", "plain"}
    assert skipped.as_dict() == {"other_filesystem": 2, "pseudo_filesystem": 1}
    crossing = SkipCounter()
    scanner = Scanner(root, WalkOptions(one_file_system=False), crossing, mounts=table)
    assert {e.relative for e in scanner.events() if isinstance(e, Listing)} == {"", "bind", "plain", "nfs"}
    assert crossing.as_dict() == {"pseudo_filesystem": 1}


def test_the_mount_table_decodes_escaped_mount_points(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_bytes(
        b"36 35 98:0 / /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
        b"37 35 0:21 / /proc rw - proc proc rw\n"
    )
    table = mount_table(str(mountinfo))
    assert [(m.point, m.dev, m.fstype) for m in table] == [
        (b"/mnt/with space", os.makedev(98, 0), "ext3"),
        (b"/proc", os.makedev(0, 21), "proc"),
    ]
    assert mount_table(str(tmp_path / "missing")) == []


DEAD_FUSE_WALK = """
import ctypes, os, sys
from sysmcp.engine.walk._walk import Scanner, SkipCounter, WalkOptions, SubtreeTotals

root = sys.argv[1]
os.mkdir(os.path.join(root, "sub"))
open(os.path.join(root, "sub", "file"), "wb").write(b"x" * 100)
dead = os.path.join(root, "sub", "dead")
os.mkdir(dead)
fd = os.open("/dev/fuse", os.O_RDWR)  # never served: every request to this mount waits forever
options = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
if ctypes.CDLL(None, use_errno=True).mount(b"deadfuse", dead.encode(), b"fuse.deadfuse", 0, options):
    print("skip: cannot mount fuse here:", os.strerror(ctypes.get_errno()))
    sys.exit(0)
skipped = SkipCounter()
events = list(Scanner(root.encode(), WalkOptions(), skipped).events())
print(skipped.as_dict(), [e.files for e in events if isinstance(e, SubtreeTotals) and e.relative == ""])
"""


def test_a_hung_mount_below_the_root_does_not_stall_the_walk(tmp_path: Path) -> None:
    """A FUSE mount whose daemon never answers hangs even lstat (and du): the walk must not touch it."""
    unshare = shutil.which("unshare")
    if unshare is None or not Path("/dev/fuse").exists():
        pytest.skip("needs unshare and /dev/fuse")
    if subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("cannot create a private mount namespace here")
    done = subprocess.run(
        [unshare, "-m", "--propagation", "private", sys.executable, "-c", DEAD_FUSE_WALK, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    if done.stdout.startswith("skip:"):
        pytest.skip(done.stdout.strip())
    assert done.stdout.strip() == "{'other_filesystem': 1} [1]"


BIND_LOOP_WALK = """
import json, os, subprocess, sys
from sysmcp.engine.walk._walk import Scanner, SkipCounter, WalkOptions, SubtreeTotals

root = sys.argv[1]
os.makedirs(os.path.join(root, "sub", "loop"))
open(os.path.join(root, "sub", "file"), "wb").write(b"x" * 100_000)
subprocess.run(["mount", "--bind", root, os.path.join(root, "sub", "loop")], check=True)
skipped = SkipCounter()
events = list(Scanner(root.encode(), WalkOptions(one_file_system=False), skipped).events())
top = [e for e in events if isinstance(e, SubtreeTotals) and e.relative == ""][0]
du = subprocess.run(["du", "-s", "--block-size=1", root], capture_output=True, text=True, check=True)
print(json.dumps([skipped.as_dict(), top.files, top.disk, int(du.stdout.split()[0])]))
"""


@pytest.mark.skipif(
    UNDER_POSIX_PROFILE,
    reason="the portable profile, like macOS, reads no mountinfo: no mount table to find the loop in",
)
def test_a_bind_mount_of_a_directory_above_it_is_not_walked_twice_across_filesystems(tmp_path: Path) -> None:
    """Without one_file_system, a bind mount of the root inside itself is a loop: its tree is counted
    once, as ``du -s`` counts it (it was counted twice), and the skip is said."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0 or shutil.which("du") is None:
        pytest.skip("needs root, unshare and du")
    if subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("cannot create a private mount namespace here")
    done = subprocess.run(
        [unshare, "-m", "--propagation", "private", sys.executable, "-c", BIND_LOOP_WALK, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    skipped, files, disk, du = json.loads(done.stdout)
    assert skipped == {"directory_loop": 1} and files == 1 and disk == du


def build_deep_tree(root: Path, depth: int = 8) -> None:
    """A chain ``l0/l1/…`` whose every level also has two leaf directories with files of distinct sizes."""
    level = root
    for d in range(depth):
        for leaf in ("x", "y"):
            (level / leaf).mkdir(parents=True)
            (level / leaf / "data").write_bytes(b"v" * (100 * d + (7 if leaf == "x" else 13)))
        (level / "top.txt").write_bytes(b"t" * (d + 1))
        level = level / f"l{d}"
        level.mkdir()


def totals_by_directory(events: list[SubtreeTotals]) -> dict[str, tuple[int, int, int, int]]:
    return {e.relative: (e.apparent, e.disk, e.files, e.dirs) for e in events}


def split_walk(
    root: Path, fd_budget: int, at_depth: int, target: int
) -> tuple[list[SubtreeTotals], list[Subtree], list[SubtreeTotals]]:
    """Walk, hand out what waits once the walk is ``at_depth`` deep, walk those subtrees, then settle."""
    skipped = SkipCounter()
    scanner = Scanner(os.fsencode(root), WalkOptions(), skipped, fd_budget=fd_budget)
    finished: list[SubtreeTotals] = []
    subtrees: list[Subtree] = []
    for event in scanner.events():
        if isinstance(event, SubtreeTotals):
            finished.append(event)
        elif event.depth >= at_depth and not scanner.detached:
            subtrees, _ = scanner.detach(limit=100, target=target)
    assert scanner.detached
    for subtree in subtrees:
        finished += [
            e for e in scanner.spawn(subtree, skipped, _noop, None).events() if isinstance(e, SubtreeTotals)
        ]
    settled = scanner.settle([(subtree, True) for subtree in subtrees])
    scanner.close()
    return finished, subtrees, settled


@pytest.mark.parametrize("fd_budget", [2, 64])
@pytest.mark.parametrize("target", [1, 6], ids=["as waiting", "split further"])
def test_subtrees_handed_out_and_walked_apart_add_up_to_the_same_totals(
    tmp_path: Path, fd_budget: int, target: int
) -> None:
    build_deep_tree(tmp_path)
    whole = [
        e
        for e in Scanner(os.fsencode(tmp_path), WalkOptions(), SkipCounter()).events()
        if isinstance(e, SubtreeTotals)
    ]
    finished, subtrees, settled = split_walk(tmp_path, fd_budget, at_depth=5, target=target)
    assert subtrees or target > 1  # the split walk may read every small directory itself
    split = totals_by_directory(finished + settled)
    assert len(finished + settled) == len(whole)  # every directory's totals handed out exactly once
    assert split == totals_by_directory(whole)
    assert split[""] == (du(tmp_path, "-b"), du(tmp_path, "-B1"), 3 * 8, 1 + 3 * 8)
    assert settled[-1].relative == "" and not any(e.partial for e in settled)


@pytest.mark.parametrize("target", [2, 40])  # 40: more pieces than the queue holds (33+ processes)
def test_a_split_directory_with_more_subdirectories_than_the_limit_hands_the_rest_out_as_one_subtree(
    tmp_path: Path, target: int
) -> None:
    """The rest of a wide directory is one more piece, walked from the listing already read: none of its
    subdirectories dropped as vanished, and the directory never read again, even when the split wants
    more pieces than the queue holds."""
    for i in range(30):
        (tmp_path / "wide" / f"d{i:02d}").mkdir(parents=True)
        (tmp_path / "wide" / f"d{i:02d}" / "f").write_bytes(b"f" * (i + 1))
    whole = [
        e
        for e in Scanner(os.fsencode(tmp_path), WalkOptions(), SkipCounter()).events()
        if isinstance(e, SubtreeTotals)
    ]
    skipped = SkipCounter()
    scanner = Scanner(os.fsencode(tmp_path), WalkOptions(), skipped)
    events = scanner.events()
    assert isinstance(next(events), Listing)  # the root's: "wide" waits, and is read by the split
    subtrees, listings = scanner.detach(limit=10, target=target)
    finished = [e for e in events if isinstance(e, SubtreeTotals)]
    assert len(subtrees) == 10
    files = [f"{listing.relative}/{name}" for listing in listings for name, _ in listing.files]
    for subtree in subtrees:
        for event in scanner.spawn(subtree, skipped, _noop, None).events():
            if isinstance(event, SubtreeTotals):
                finished.append(event)
            else:
                files += [f"{event.relative}/{name}" for name, _ in event.files]
    finished += scanner.settle([(subtree, True) for subtree in subtrees])
    scanner.close()
    assert skipped.as_dict() == {}  # none dropped as vanished
    assert sorted(files) == [f"wide/d{i:02d}/f" for i in range(30)]  # each once
    assert len(finished) == len(whole)  # every directory's totals handed out exactly once
    assert totals_by_directory(finished) == totals_by_directory(whole)


def test_a_handed_out_directory_swapped_for_a_symlink_is_not_followed(tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    build_deep_tree(tree, depth=3)
    (outside / "secret").mkdir(parents=True)
    (outside / "secret" / "big").write_bytes(b"s" * 50_000)
    skipped = SkipCounter()
    scanner = Scanner(os.fsencode(tree), WalkOptions(), skipped)
    events = scanner.events()
    first = next(events)  # the root's listing: everything below is still waiting
    assert isinstance(first, Listing) and first.relative == ""
    subtrees, _ = scanner.detach(limit=100, target=1)
    leaf = next(s for s in subtrees if s.relative == "x")
    shutil.rmtree(tree / "x")
    (tree / "x").symlink_to(outside / "secret")
    list(events)
    walked = [e for e in scanner.spawn(leaf, skipped, _noop, None).events()]
    scanner.close()
    assert walked == []  # not entered: the name is a symlink now
    assert skipped.as_dict().get("vanished") == 1
    assert (leaf.apparent, leaf.disk, leaf.dirs) == (0, 0, 0)  # and nothing of it is counted


def test_a_spilled_run_reads_back_whole_records_of_either_framing_however_its_reads_cut_them() -> None:
    """Size records carry a header of any bytes before their NUL-ended name; manifest records a line
    after the NUL, up to its newline (a name may hold a newline). Reads of 7 bytes cut most records."""
    sized = [b"\0\n\0\n" + b"name\nwith a newline\0", b"\xff\0\0\0" + b"b\0"]
    lines = [b"new\nline\0\\hex  new\\nline\n", b"plain\0hex  plain\n"]
    with tempfile.TemporaryFile() as spill:
        spill.write(b"".join(sized + lines))
        spill.flush()
        size = len(b"".join(sized))
        fd = spill.fileno()
        assert list(read_run(fd, 0, size, 7, header=4)) == sized
        assert list(read_run(fd, size, spill.tell() - size, 7, line=True)) == lines
        with pytest.raises(ValueError, match="no header"):  # a line after a header is no framing of ours
            next(read_run(fd, 0, size, 7, header=4, line=True))


def test_a_directory_of_the_root_that_cannot_be_read_keeps_its_row_in_walk_totals() -> None:
    """container_usage's data root as another user sees it (rootless Podman's storage holds directories
    of subordinate uids): a directory of the root it cannot read is still a part, with its own size,
    and counted as skipped; the others are walked. ``nobody`` walks a root-made tree."""
    import shutil
    import tempfile

    from tests.harness import python_as_nobody

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("a second user needs root and setpriv")
    with tempfile.TemporaryDirectory(prefix="sysmcp-totals-", dir="/tmp") as box:
        os.chmod(box, 0o755)
        (Path(box) / "open").mkdir(mode=0o755)
        (Path(box) / "open" / "f").write_bytes(b"x" * 5000)
        (Path(box) / "locked").mkdir(mode=0o000)
        os.chmod(Path(box) / "locked", 0o000)
        probe = (
            "from sysmcp.engine.walk import walk_totals\n"
            f"whole, parts, stopped, skipped = walk_totals({box!r}, 60, lambda *_: None, lambda: None)\n"
            "print(sorted(parts), parts['open'].apparent >= 5000, stopped, skipped.as_dict())\n"
        )
        done = python_as_nobody(probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['locked', 'open'] True None {'unreadable': 1}"


def test_a_directory_walk_totals_may_list_but_not_search_is_one_unreadable_directory() -> None:
    """Mode r without x: its names can be listed, none looked at (lstat: permission denied). That is
    this user's permission, not the filesystem's error, and one directory, however many names it holds."""
    import shutil
    import tempfile

    from tests.harness import python_as_nobody

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("a second user needs root and setpriv")
    with tempfile.TemporaryDirectory(prefix="sysmcp-totals-", dir="/tmp") as box:
        os.chmod(box, 0o755)
        half = Path(box) / "half"
        half.mkdir()
        for name in ("a", "b", "c"):
            (half / name).write_bytes(b"x")
        os.chmod(half, 0o644)
        probe = (
            "from sysmcp.engine.walk import walk_totals\n"
            f"whole, parts, stopped, skipped = walk_totals({box!r}, 60, lambda *_: None, lambda: None)\n"
            "print(sorted(parts), stopped, skipped.as_dict(), skipped.named)\n"
        )
        done = python_as_nobody(probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['half'] None {'unreadable': 1} ['half']"
