"""The parallel tree hasher: the manifest sha256sum would write, whatever the processes and runs."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysmcp.engine.calls import never_cancelled, no_progress
from sysmcp.engine.hashing import ALGORITHMS, TreeRequest, format_line
from sysmcp.engine.hashing import _treehash as treehash
from sysmcp.engine.hashing._treehash import hash_tree_parallel
from sysmcp.engine.parallel import Sharing
from sysmcp.engine.walk import Listing, Node, SkipCounter, WalkOptions, mount_table


def build(root: Path) -> bytes:
    """80 directories two deep (odd names among the files) and the manifest it must give, sorted by name.

    Two deep, so that the walk's split hands subtrees to the second process (a shallow tree is split
    up in the first one).
    """
    expected: list[tuple[bytes, bytes]] = []
    for d in range(40):
        for s in range(2):
            folder = b"dir%02d/sub%d" % (d, s)
            os.makedirs(os.fsencode(root) + b"/" + folder)
            for f in range(12):
                name = b"f%02d" % f if f % 7 else b"odd \xff\nname %d" % f
                data = os.urandom(f * 37)
                with open(os.fsencode(root) + b"/" + folder + b"/" + name, "wb") as out:
                    out.write(data)
                relative = folder + b"/" + name
                line = format_line(relative, hashlib.sha256(data).hexdigest(), ALGORITHMS["sha256"])
                expected.append((relative, line))
    os.mkfifo(root / "dir00" / "fifo")
    (root / "dir01" / "link").symlink_to(root / "dir00")
    return b"".join(line for _, line in sorted(expected))


def sha256_request(root: bytes, **overrides: Any) -> TreeRequest:
    """The request every test here makes: sha256 in GNU style, the default walk, a minute's budget."""
    settings: dict[str, Any] = {"timeout_s": 60, "keep_limit": 1 << 30, "first_lines": 10, **overrides}
    return TreeRequest(root, ALGORITHMS["sha256"], "gnu", WalkOptions(), **settings)


def run(root: Path, **kwargs: Any) -> treehash.TreeHash:
    skipped = SkipCounter()
    sharing = Sharing(processes=kwargs.pop("processes", 2), split_after_s=kwargs.pop("split_after_s", 0))
    result = hash_tree_parallel(
        sha256_request(os.fsencode(root), sharing=sharing, **kwargs),
        skipped,
        no_progress,
        never_cancelled,
    )
    assert skipped.as_dict() == {"special_file": 1, "symlink": 1}  # the FIFO and dir01/link, both said
    return result


def test_two_processes_and_many_runs_merge_into_the_sorted_manifest(tmp_path: Path) -> None:
    expected = build(tmp_path)
    result = run(tmp_path, run_bytes=2000)  # dozens of runs per process
    assert result.processes == 2
    assert result.stopped is None and result.walk_complete
    assert result.manifest is not None and bytes(result.manifest) == expected
    assert result.files == 960 and result.manifest_bytes == len(expected)
    assert result.first == expected.splitlines(keepends=True)[:10]
    assert result.non_utf8 == 80 * 2


def test_a_manifest_over_the_keep_limit_is_counted_and_its_first_lines_kept(tmp_path: Path) -> None:
    expected = build(tmp_path)
    result = run(tmp_path, keep_limit=1000, first_lines=5)
    assert result.manifest is None
    assert result.files == 960 and result.manifest_bytes == len(expected)
    assert result.first == expected.splitlines(keepends=True)[:5]


def test_one_process_gives_the_same_manifest(tmp_path: Path) -> None:
    expected = build(tmp_path)
    manifest = run(tmp_path, processes=1).manifest
    assert manifest is not None and bytes(manifest) == expected


def test_a_file_swapped_after_the_listing_is_refused_not_hashed(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "victim").write_bytes(b"original")
    (tmp_path / "secret").write_bytes(b"not in the tree")
    original = treehash.ListingHasher.listing

    def swap_then_hash(self: treehash.ListingHasher, listing: Listing, dir_fd: int | None) -> None:
        victim = tmp_path / "a" / "victim"
        if victim.exists() and not victim.is_symlink():
            victim.unlink()
            victim.symlink_to(tmp_path / "secret")  # between the walk's lstat and the open
        original(self, listing, dir_fd)

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(treehash.ListingHasher, "listing", swap_then_hash)
    try:
        skipped = SkipCounter()
        result = hash_tree_parallel(
            sha256_request(os.fsencode(tmp_path / "a"), keep_limit=1 << 20, sharing=Sharing(processes=1)),
            skipped,
            no_progress,
            never_cancelled,
        )
    finally:
        monkeypatch.undo()
    assert result.files == 0 and result.manifest is not None and not result.manifest
    assert result.unreadable_count == 1 and result.unreadable[0][0] == b"victim"


def test_the_merge_reads_ahead_in_bounded_memory_however_many_runs(tmp_path: Path) -> None:
    """A million files make about a hundred runs; reading 64 KiB ahead in each cost 6 MB of the peak."""
    digest = hashlib.sha256(b"").hexdigest()
    with tempfile.TemporaryFile() as spill:
        runs = treehash.Runs(spill, run_bytes=80 << 10)
        for i in range(200_000):  # 200 runs of 80 KiB (each record about 100 bytes), in no order
            name = b"d%03d/f%07d" % (i % 997, (i * 7919) % 200_000)
            runs.add(name, format_line(name, digest, ALGORITHMS["sha256"]))
        part = runs.summary()
        assert len(part["extents"]) >= 200
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            merged = treehash.merge([(spill, part)], keep_limit=0, first_lines=100, cancel=lambda: None)
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
    names = sorted(b"d%03d/f%07d" % (i % 997, (i * 7919) % 200_000) for i in range(200_000))
    assert merged.manifest is None and merged.files == 0
    assert merged.first == [format_line(name, digest, ALGORITHMS["sha256"]) for name in names[:100]]
    assert peak < 4 << 20, f"the merge's peak: {peak / 1e6:.1f} MB"


def hash_with_a_swap(root: Path, swap: Callable[[], None], **overrides: Any) -> treehash.TreeHash:
    """Hash ``root`` in one process, running ``swap`` between the walk's listing and the hashing."""
    original = treehash.ListingHasher.listing

    def swap_then_hash(self: treehash.ListingHasher, listing: Listing, dir_fd: int | None) -> None:
        swap()
        original(self, listing, dir_fd)

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(treehash.ListingHasher, "listing", swap_then_hash)
    try:
        return hash_tree_parallel(
            sha256_request(os.fsencode(root), keep_limit=1 << 20, sharing=Sharing(processes=1), **overrides),
            SkipCounter(),
            no_progress,
            never_cancelled,
        )
    finally:
        monkeypatch.undo()


def entries_carry_inodes(path: Path) -> bool:
    dev = os.stat(path).st_dev
    return any(m.dev == dev and m.fstype in treehash.ENTRY_INODES_TRUSTED for m in mount_table())


def test_a_file_renamed_over_after_the_listing_is_refused_not_hashed(tmp_path: Path) -> None:
    if not entries_carry_inodes(tmp_path):
        pytest.skip("the test directory's filesystem gives entries no trusted inode numbers")
    (tmp_path / "victim").write_bytes(b"original")
    (tmp_path / "other").write_bytes(b"swapped in")
    moved: list[bool] = []

    def swap() -> None:
        if not moved:
            moved.append(True)
            os.rename(tmp_path / "other", tmp_path / "victim")  # a new inode under the listed name

    result = hash_with_a_swap(tmp_path, swap)
    assert result.files == 0 and result.unreadable_count == 2
    assert dict(result.unreadable) == {
        b"other": "vanished before it could be hashed",
        b"victim": "the file was replaced while it was being opened",
    }


def test_where_entries_carry_other_inode_numbers_the_name_is_looked_at_again(tmp_path: Path) -> None:
    """overlayfs across filesystems (containers) and FUSE: the file the name leads to at open is hashed."""
    (tmp_path / "victim").write_bytes(b"original")
    (tmp_path / "other").write_bytes(b"swapped in")
    moved: list[bool] = []

    def swap() -> None:
        if not moved:
            moved.append(True)
            os.rename(tmp_path / "other", tmp_path / "victim")

    result = hash_with_a_swap(tmp_path, swap, trusted=frozenset())
    assert result.files == 1 and result.manifest is not None
    assert bytes(result.manifest) == format_line(
        b"victim", hashlib.sha256(b"swapped in").hexdigest(), ALGORITHMS["sha256"]
    )


def test_a_file_swapped_for_a_fifo_after_the_listing_is_refused_without_blocking(tmp_path: Path) -> None:
    (tmp_path / "victim").write_bytes(b"original")
    swapped: list[bool] = []

    def swap() -> None:
        if not swapped:
            swapped.append(True)
            (tmp_path / "victim").unlink()
            os.mkfifo(tmp_path / "victim")  # no writer: a blocking open would hang here

    result = hash_with_a_swap(tmp_path, swap)
    assert result.files == 0
    assert result.unreadable == [(b"victim", "not a regular file: a FIFO (named pipe)")]


def test_files_of_directories_read_while_the_walk_is_split_are_in_the_manifest(tmp_path: Path) -> None:
    """Splitting reads some directories itself and closes them: their files are hashed after all."""
    expected: list[tuple[bytes, bytes]] = []
    for d in range(6):
        for folder in (b"top%d" % d, b"top%d/sub" % d):
            os.makedirs(os.fsencode(tmp_path) + b"/" + folder, exist_ok=True)
            for f in range(5):
                relative = folder + b"/f%d" % f
                data = os.urandom(d * 50 + f)
                (tmp_path / os.fsdecode(relative)).write_bytes(data)
                line = format_line(relative, hashlib.sha256(data).hexdigest(), ALGORITHMS["sha256"])
                expected.append((relative, line))
    skipped = SkipCounter()
    result = hash_tree_parallel(
        sha256_request(
            os.fsencode(tmp_path), keep_limit=1 << 20, sharing=Sharing(processes=2, split_after_s=0)
        ),
        skipped,
        no_progress,
        never_cancelled,
    )
    assert result.manifest is not None and bytes(result.manifest) == b"".join(
        line for _, line in sorted(expected)
    )
    assert result.files == 60 and not skipped.as_dict()


def hashed_path(path: Path) -> treehash.TreeHash:
    reports: list[float] = []
    result = treehash.hash_path(
        sha256_request(os.fsencode(path), sharing=Sharing(processes=1), shown=str(path)),
        lambda done, total: reports.append(done),
        never_cancelled,
    )
    assert reports, "progress is reported"
    return result


def test_hash_path_gives_one_files_manifest_relative_to_its_directory(tmp_path: Path) -> None:
    (tmp_path / "one").write_bytes(b"abc")
    result = hashed_path(tmp_path / "one")
    assert result.base == os.fsencode(tmp_path) and result.files == 1 and result.walk_complete
    assert result.manifest is not None and bytes(result.manifest) == format_line(
        b"one", hashlib.sha256(b"abc").hexdigest(), ALGORITHMS["sha256"]
    )
    tree = hashed_path(tmp_path)
    assert tree.base == os.fsencode(tmp_path) and tree.files == 1 and tree.seconds >= 0


def test_hash_path_refuses_what_it_cannot_hash_with_engine_errors(tmp_path: Path) -> None:
    from sysmcp.engine.faults import NotFound, WrongKind
    from sysmcp.tools.errors import words

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(WrongKind) as fifo:
        hashed_path(tmp_path / "fifo")
    assert words(fifo.value) == (
        f"Cannot hash {tmp_path / 'fifo'}: it is a FIFO (named pipe); give a directory or a regular file"
    )
    with pytest.raises(NotFound) as missing:
        hashed_path(tmp_path / "absent")
    assert words(missing.value) == f"No such file or directory: {tmp_path / 'absent'}"


def test_one_file_in_a_directory_that_may_be_searched_but_not_listed_is_hashed() -> None:
    """As ``sha256sum dir/f`` reads it: a single file needs search (x) permission on its directory, not
    read (r) permission (a 0711 home directory, a /var/lib/* directory). A second user (``nobody``)
    hashes a file in a root-owned 0711 directory."""
    import shutil

    from sysmcp import platform
    from tests.harness import python_as_nobody

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("a second user needs root and setpriv")
    if not platform.has_o_path():
        pytest.skip("no O_PATH: directories are opened for reading on the way (read permission needed)")
    with tempfile.TemporaryDirectory(prefix="sysmcp-xonly-", dir="/tmp") as box:
        os.chmod(box, 0o711)
        target = os.path.join(box, "f")
        Path(target).write_bytes(b"abc")
        os.chmod(target, 0o644)
        probe = (
            "import os\n"
            "from sysmcp.engine.calls import never_cancelled, no_progress\n"
            "from sysmcp.engine.hashing import ALGORITHMS, TreeRequest, hash_path\n"
            "from sysmcp.engine.walk import WalkOptions\n"
            f"root = os.fsencode({target!r})\n"
            "request = TreeRequest(root, ALGORITHMS['sha256'], 'gnu', WalkOptions(), 60, 1 << 30, 10)\n"
            "result = hash_path(request, no_progress, never_cancelled)\n"
            "print(result.files, result.unreadable_count, bytes(result.manifest or b'').decode().strip())\n"
        )
        done = python_as_nobody(probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0", hashlib.sha256(b"abc").hexdigest(), "f"]


def test_what_a_hash_could_not_read_is_counted_once_per_directory_until_the_names_are_cut() -> None:
    """An integrity baseline says how many unreadable entries it could not record: directories are named
    up to the bound, so below it their names are the count (a directory refused again when reopened
    after a split is counted twice but is one); past it, the walk's count."""
    from sysmcp.engine.hashing._treehash import MAX_UNREADABLE_KEPT, TreeHash

    twice = TreeHash(unreadable_count=2, skipped={"unreadable": 3}, skipped_named=["a", "b"])
    assert twice.unread_total == 4
    many = [f"d{n}" for n in range(MAX_UNREADABLE_KEPT)]
    cut = TreeHash(unreadable_count=2, skipped={"unreadable": 1500}, skipped_named=many)
    assert cut.unread_total == 1502


def test_asked_for_them_every_directory_link_and_special_file_is_recorded_once_by_whichever_process_listed_it(
    tmp_path: Path,
) -> None:
    """An integrity baseline's other entries, from a walk split between two processes: each directory,
    the FIFO and the link (its target's exact bytes, read without following it: nothing below the link
    is recorded) once, with its type, mode and owner."""
    build(tmp_path)
    result = run(tmp_path, nodes=True)
    assert result.processes == 2 and result.nodes is not None and result.nodes_unrecorded == 0
    by_name = {node[0]: node[1:] for node in result.nodes}
    assert len(by_name) == len(result.nodes) == 40 + 80 + 2
    expected_dirs = {b"dir%02d" % d for d in range(40)} | {
        b"dir%02d/sub%d" % (d, s) for d in range(40) for s in range(2)
    }
    assert {name for name, node in by_name.items() if node[0] == stat.S_IFDIR} == expected_dirs
    st = os.lstat(tmp_path / "dir00" / "sub0")
    assert by_name[b"dir00/sub0"] == (
        stat.S_IFDIR,
        stat.S_IMODE(st.st_mode),
        st.st_uid,
        st.st_gid,
        None,
        None,
    )
    assert by_name[b"dir00/fifo"][0] == stat.S_IFIFO
    assert by_name[b"dir01/link"][0] == stat.S_IFLNK
    assert by_name[b"dir01/link"][-1] == os.fsencode(tmp_path / "dir00")


def test_past_their_bound_the_other_entries_are_counted_not_kept(tmp_path: Path) -> None:
    build(tmp_path)
    result = run(tmp_path, nodes=True, max_nodes=50)
    assert result.nodes is not None and len(result.nodes) == 50
    assert len(result.nodes) + result.nodes_unrecorded == 122


def test_the_bound_on_other_entries_holds_for_all_processes_together_not_for_each(tmp_path: Path) -> None:
    """Each process checks what all of them keep before it keeps more, so the parent never gathers
    one bound's worth per process: past it by at most one listing (here 16 entries) per other process.
    128 directories two deep, so that the split hands subtrees to the children."""
    for d in range(16):
        for s in range(8):
            folder = tmp_path / f"dir{d:02d}" / f"sub{s}"
            folder.mkdir(parents=True)
            for n in range(10):
                (folder / f"link{n:02d}").symlink_to(f"../target/{n}")
    skipped = SkipCounter()
    request = sha256_request(
        os.fsencode(tmp_path), sharing=Sharing(processes=3, split_after_s=0), nodes=True, max_nodes=100
    )
    result = hash_tree_parallel(request, skipped, no_progress, never_cancelled)
    assert result.processes == 3 and result.nodes is not None
    assert len(result.nodes) == 100 and len(result.nodes) + result.nodes_unrecorded == 16 + 128 + 1280
    assert result.nodes_gathered <= 100 + 2 * 16
    assert list(result.nodes) == sorted(result.nodes)


def test_not_asked_for_no_other_entry_is_recorded(tmp_path: Path) -> None:
    build(tmp_path)
    result = run(tmp_path)
    assert (result.nodes, result.nodes_unrecorded) == (None, 0)


def test_a_kept_node_costs_a_compact_record_not_a_tuple_of_objects(tmp_path: Path) -> None:
    """Up to 250,000 kept nodes are held until the merge: a link (a 30-byte name, a 20-byte target)
    kept as the walk's tuple of seven objects cost 222 bytes, as one packed record it costs 117."""

    def listing(first: int) -> list[Node]:  # made as the walk makes a directory's: new objects each
        return [
            (
                b"usr/lib/x86_64-linux-gnu/l%05d" % i,
                stat.S_IFLNK,
                0o777,
                0,
                0,
                None,
                b"libexample.so.%05d.1" % i,
            )
            for i in range(first, first + 100)
        ]

    with tempfile.TemporaryFile() as spill:
        runs = treehash.Runs(spill)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for first in range(0, 10_000, 100):
                runs.add_nodes(listing(first))
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        merged = treehash.merge([(spill, runs.summary())], keep_limit=0, first_lines=0, cancel=lambda: None)
    assert held / 10_000 < 150, held / 10_000
    assert merged.nodes is not None
    assert list(merged.nodes) == [node for first in range(0, 10_000, 100) for node in listing(first)]


#: Every node a walk can make on Linux: a name without NUL (a path may not hold one), any type, any
#: permission bits, any owner (up to 4294967294, the largest a stat gives), a device number of any
#: major and minor, a link target up to 4,096 bytes of any byte (readlink may give NULs back only from a
#: forged filesystem, and the record keeps them: the target is read by its offset, not to a NUL).
_any_node = st.tuples(
    st.binary(min_size=1, max_size=300).filter(lambda name: b"\0" not in name),
    st.sampled_from([stat.S_IFDIR, stat.S_IFLNK, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFIFO, stat.S_IFSOCK]),
    st.integers(0, 0o7777),
    st.integers(0, (1 << 32) - 1),
    st.integers(0, (1 << 32) - 1),
    st.none() | st.integers(0, (1 << 64) - 1),
    st.none() | st.binary(max_size=4096),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_any_node, unique_by=lambda node: node[0], max_size=20))
def test_a_packed_node_reads_back_as_it_was_and_the_records_sort_as_their_names(nodes: list[Node]) -> None:
    """The merge sorts the records themselves and keeps the first ``max_nodes``: that must be the
    first by name, and each must unpack to the node the walk made, to the last bit of every field."""
    records = sorted(map(treehash.pack_node, nodes))
    assert list(treehash.PackedNodes(records)) == sorted(nodes, key=lambda node: node[0])
