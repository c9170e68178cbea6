"""what_changed's engine alone: a typed ``Comparison`` in, ``Findings`` of facts out, a real store
in a temporary directory, a fake clock for the snapshots and a frozen one for the scan's budget
(no MCP, no wall clock, no sleeps)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from sysmcp.engine.opens import _safeopen as safeopen
from sysmcp.engine.opens._safeopen import _step as step
from sysmcp.engine.usage import UsageRequest, scan_usage
from sysmcp.engine.walk import WalkOptions
from sysmcp.history.compare import Comparison, Findings, compare
from sysmcp.history.diff import STOP_EVERY, BaselineDiff
from sysmcp.history.recording import Unreadable, baseline_of, record_baseline, record_scan, series_of
from sysmcp.history.snapshots import DirTotals, ScanSnapshot, Unread
from sysmcp.history.store import Store
from sysmcp.tools.what_changed import notes_of, render

MiB = 1 << 20
DAY = 86400.0


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def frozen() -> float:
    """The scan's budget clock: it never moves, so the budget never runs out and nothing is split."""
    return 0.0


def write(path: Path, size: int, clock: Clock) -> None:
    """``size`` more bytes in ``path``, modified a minute before the fake clock's now."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.write(os.urandom(size))
    os.utime(path, (clock.now - 60, clock.now - 60))


def asked(root: Path, clock: Clock, since: float | None = None) -> Comparison:
    return Comparison(
        path=os.fsencode(root),
        since=since,
        until=None,
        now=clock.now,
        timeout_s=60.0,
        options=WalkOptions(),
        files_kept=1000,
    )


def on(request: Comparison, store: Store | None, clock: Clock) -> Comparison:
    """The request against ``store`` (None: history off), snapshots on ``clock``, the budget frozen."""
    return replace(request, store=lambda: store, clock=clock, monotonic=frozen)


def run(
    request: Comparison, store: Store | None, clock: Clock
) -> tuple[Findings, list[tuple[float, float | None]]]:
    progress: list[tuple[float, float | None]] = []
    found = compare(on(request, store, clock), lambda done, total: progress.append((done, total)))
    return found, progress


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "state", Clock())


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "tree"


@pytest.mark.parametrize("history", [True, False])
def test_what_the_fresh_scan_left_out_is_counted_in_the_findings(
    root: Path, store: Store, clock: Clock, history: bool
) -> None:
    write(root / "kept" / "a", 4096, clock)
    write(root / "cache" / "b", 4096, clock)
    os.mkfifo(root / "pipe")
    request = replace(asked(root, clock), options=WalkOptions(exclude=("cache",)))
    found, _ = run(request, store if history else None, clock)
    assert found.skipped.as_dict() == {"excluded": 1, "special_file": 1}


def test_a_first_comparison_keeps_a_snapshot_and_the_next_one_diffs_against_it(
    root: Path, store: Store, clock: Clock
) -> None:
    write(root / "logs" / "a.log", 2 * MiB, clock)
    write(root / "data" / "b", 1 * MiB, clock)
    first, progress = run(asked(root, clock, since=clock.now - DAY), store, clock)
    assert first.history and first.fresh and first.new is not None and first.old is None
    assert first.diff is None and first.lower_bound is not None and first.lower_bound.files == 2
    assert progress and progress[-1][0] >= 4  # the fresh scan's entries, through the typed callback
    assert [info.taken for info in store.snapshots("scan")] == [clock.now]

    write(root / "logs" / "c.log", 3 * MiB, clock)
    clock.now += DAY
    second, _ = run(asked(root, clock), store, clock)  # since None: the snapshot before the newest
    assert second.old is not None and second.old.id == first.new.id and second.fresh
    assert second.diff is not None and second.diff.comparable and second.diff.seconds == DAY
    grew = {change.path: change for change in second.diff.changes}
    assert grew[b"logs"].kind == "grew" and grew[b"logs"].delta >= 3 * MiB
    assert b"data" not in grew  # unchanged
    assert second.lower_bound is None and second.oldest_instead is None and not second.not_kept


def test_a_since_older_than_every_snapshot_compares_with_the_oldest_and_says_when_it_was(
    root: Path, store: Store, clock: Clock
) -> None:
    write(root / "a" / "f", 2 * MiB, clock)
    first, _ = run(asked(root, clock), store, clock)
    assert first.new is not None
    clock.now += DAY
    outcome, _ = run(asked(root, clock, since=clock.now - 30 * DAY), store, clock)
    assert outcome.old is not None and outcome.old.id == first.new.id
    assert outcome.oldest_instead == first.new.taken
    assert any(
        note.startswith("no snapshot as old as asked: compared with the oldest") for note in notes_of(outcome)
    )
    # Something was compared: no second walk for a lower bound, and none shown beside the comparison.
    assert outcome.lower_bound is None, outcome.lower_bound


def test_what_the_roots_hide_is_left_out_of_the_diff(root: Path, store: Store, clock: Clock) -> None:
    write(root / "shown" / "f", 2 * MiB, clock)
    write(root / "hidden" / "f", 2 * MiB, clock)
    run(asked(root, clock), store, clock)
    write(root / "shown" / "g", 2 * MiB, clock)
    write(root / "hidden" / "g", 2 * MiB, clock)
    clock.now += DAY

    def visible(name: bytes | str) -> bool:
        return b"hidden" not in os.fsencode(name)

    outcome, _ = run(replace(asked(root, clock), visible=visible), store, clock)
    assert outcome.diff is not None and outcome.diff.comparable
    assert {change.path for change in outcome.diff.changes} == {b"shown"}


def test_a_largest_file_gone_behind_a_symlink_is_removed_not_sized_where_the_symlink_leads(
    root: Path, store: Store, clock: Clock, tmp_path: Path
) -> None:
    """``a`` turned into a symlink out of the tree since the last scan: ``a/big`` is gone from the tree,
    and the file of that name outside is never looked at (its size would tell what lies outside)."""
    write(root / "a" / "big", 4 * MiB, clock)
    write(root / "b" / "kept", 1, clock)
    for _ in range(2):  # two snapshots, each keeping a/big among the largest files
        run(asked(root, clock), store, clock)
        clock.now += DAY
    write(tmp_path / "outside" / "big", 1 * MiB, clock)
    shutil.rmtree(root / "a")
    (root / "a").symlink_to(tmp_path / "outside")
    found, _ = run(asked(root, clock), store, clock)
    assert found.diff is not None and found.diff.comparable
    assert [row.path for row in found.diff.removed_files] == [b"a/big"]
    assert found.diff.shrunk_files == []


def test_what_the_roots_hide_is_left_out_of_the_integrity_part(
    root: Path, store: Store, clock: Clock
) -> None:
    """A baseline's names are judged where they lead, as the scan's: a file outside the roots (a
    stored '../x' among them) is never named as added, removed or changed."""
    write(root / "shown" / "f", 1, clock)
    write(root / "hidden" / "f", 1, clock)
    (root.parent / "outside").write_bytes(b"x")

    def baseline(names: list[str]) -> None:
        manifest = "".join(f"{'0' * 64}  {name}\n" for name in names).encode()
        kept = record_baseline(store, os.fsencode(root), manifest, "sha256", WalkOptions(), False, clock)
        assert kept.kept

    baseline(["shown/f", "hidden/old", "../outside"])
    clock.now += DAY
    write(root / "shown" / "g", 1, clock)
    write(root / "hidden" / "g", 1, clock)

    def visible(name: bytes | str) -> bool:
        real = os.path.normpath(os.fsdecode(name))
        return real.startswith(os.fspath(root)) and "hidden" not in real

    outcome, _ = run(replace(asked(root, clock), visible=visible), store, clock)
    assert outcome.integrity is not None and outcome.integrity.comparable
    assert outcome.integrity.added == [b"shown/g"]
    assert outcome.integrity.removed == []  # hidden/old and ../outside are not this call's to name
    assert outcome.integrity.content == [b"shown/f"]  # the baseline's digest was made up


def test_a_directory_swapped_for_a_symlink_after_the_hash_does_not_lead_the_baseline_out_of_the_tree(
    root: Path, tmp_path: Path, clock: Clock
) -> None:
    """``a/f`` was hashed, then ``a`` became a symlink out of the tree before the baseline's looks:
    the file of that name outside is never looked at (its size, mode and owner would tell what lies
    outside), so ``a/f`` is left out as gone; ``kept`` is looked at as before."""
    write(root / "kept", 1, clock)
    write(tmp_path / "outside" / "f", 3, clock)
    os.symlink(tmp_path / "outside", root / "a")
    manifest = f"{'0' * 64}  a/f\n{'1' * 64}  kept\n".encode()
    series = series_of(root, WalkOptions())
    baseline = baseline_of(series, os.fsencode(root), manifest, "sha256", False, clock.now)
    assert list(baseline.files) == [b"kept"]
    assert baseline.files[b"kept"].size == 1


def test_one_integrity_baseline_is_compared_at_once_with_the_tree_hashed_now(
    root: Path, store: Store, clock: Clock
) -> None:
    for name in ("passwd", "shadow", "hosts", "old.conf"):
        write(root / name, 100, clock)
    os.chmod(root / "shadow", 0o640)
    manifest = b"".join(
        hashlib.sha256((root / name).read_bytes()).hexdigest().encode() + b"  " + name.encode() + b"\n"
        for name in ("hosts", "old.conf", "passwd", "shadow")
    )
    assert record_baseline(store, os.fsencode(root), manifest, "sha256", WalkOptions(), False, clock).kept
    write(root / "passwd", 10, clock)  # content
    os.chmod(root / "shadow", 0o600)  # metadata only
    (root / "old.conf").unlink()  # removed
    write(root / "new.conf", 5, clock)  # added
    clock.now += 60
    outcome, progress = run(asked(root, clock), store, clock)
    found = outcome.integrity
    assert found is not None and found.comparable and outcome.baselines == 1
    assert (found.added, found.removed, found.content) == ([b"new.conf"], [b"old.conf"], [b"passwd"])
    assert found.metadata == [(b"shadow", ("mode",))]
    then, now = found.files[b"shadow"]
    assert (then.mode, now.mode) == (0o640, 0o600)
    assert found.files[b"passwd"][1].size == 110
    assert progress  # the hashing reported as it went


def test_without_a_store_it_scans_for_the_files_modified_since_and_records_nothing(
    root: Path, clock: Clock
) -> None:
    write(root / "new.log", 1 * MiB, clock)
    outcome, _ = run(asked(root, clock, since=clock.now - DAY), None, clock)
    assert not outcome.history and outcome.new is None and outcome.notes == []
    assert outcome.lower_bound is not None and outcome.lower_bound.files == 1


class Cancelled(Exception):
    pass


def test_a_raised_checkpoint_stops_the_fresh_scan_and_nothing_is_kept(
    root: Path, store: Store, clock: Clock
) -> None:
    for n in range(20):
        write(root / f"d{n}" / "f", 4096, clock)
    asks: list[int] = []

    def cancel() -> None:
        asks.append(1)
        raise Cancelled

    with pytest.raises(Cancelled):
        compare(on(asked(root, clock), store, clock), cancel=cancel)
    assert asks == [1]  # the first checkpoint raised and nothing ran after it
    assert store.snapshots("scan") == []


def out_of_time(
    root: Path, store: Store, clock: Clock, names: list[str], then: Callable[[], object] = lambda: None
) -> BaselineDiff:
    """The integrity check of a baseline of ``names`` with no time left to hash anything now (``then``
    runs between the baseline and the check)."""
    manifest = b"".join(f"{'0' * 64}  {name}\n".encode() for name in names)
    assert record_baseline(store, os.fsencode(root), manifest, "sha256", WalkOptions(), False, clock).kept
    then()
    ticks = iter(range(0, 10**6, 1000))  # every look at the budget's clock is 1,000 s later: no time left
    outcome = compare(
        replace(on(asked(root, clock), store, clock), until=clock.now, monotonic=lambda: next(ticks))
    )
    assert outcome.integrity is not None and outcome.integrity_stopped is not None
    return outcome.integrity


def test_the_integrity_check_out_of_time_counts_files_not_reached_never_as_removed(
    root: Path, store: Store, clock: Clock
) -> None:
    for name in ("a", "b", "c"):
        write(root / name, 100, clock)
    found = out_of_time(root, store, clock, ["a", "b", "c", "gone"])
    assert (
        found.comparable and found.removed == [] and found.not_checked == 3
    )  # "gone" was never kept: its lstat failed


def test_names_not_hashed_in_time_in_one_directory_cost_one_walk_from_the_root_not_one_each(
    root: Path, store: Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"d/e/f{n:02d}" for n in range(50)]
    for name in names:
        write(root / name, 10, clock)
    steps: list[bytes] = []  # each directory opened on the way down from /

    def counted(name: bytes, dir_fd: int, flags: int) -> int:
        steps.append(name)
        return step(name, dir_fd, flags)

    spy = lambda: monkeypatch.setattr(safeopen, "_step", counted)  # noqa: E731 - after the baseline
    found = out_of_time(root, store, clock, [*names, "d/e/gone"], then=spy)
    assert found.removed == [] and found.not_checked == 50  # "gone" was never kept: its lstat failed
    down = [os.fsencode(p) for p in (root / "d/e").parts[1:]]  # one walk from the root, not 50
    to_root = [os.fsencode(p) for p in root.parent.parts[1:]]  # then the disk reading's (statvfs unfollowed)
    assert steps == down + to_root


def test_names_not_hashed_in_time_behind_a_directory_now_a_symlink_are_gone_not_looked_at_outside(
    root: Path, store: Store, clock: Clock, tmp_path: Path
) -> None:
    for name in ("x", "y"):
        write(tmp_path / "outside" / name, 10, clock)
        write(root / "a" / name, 10, clock)
    write(root / "b" / "kept", 10, clock)

    def swap() -> None:  # a/ turned into a link out of the tree after the baseline
        shutil.rmtree(root / "a")
        (root / "a").symlink_to(tmp_path / "outside")

    found = out_of_time(root, store, clock, ["a/x", "a/y", "b/kept"], then=swap)
    assert found.removed == [b"a/x", b"a/y"] and found.not_checked == 1


def test_a_cancel_while_hashing_for_the_integrity_check_stops_the_call(
    root: Path, store: Store, clock: Clock
) -> None:
    write(root / "a", 100, clock)
    manifest = f"{'0' * 64}  a\n".encode()
    assert record_baseline(store, os.fsencode(root), manifest, "sha256", WalkOptions(), False, clock).kept

    def cancel() -> None:
        raise Cancelled

    with pytest.raises(Cancelled):
        compare(replace(on(asked(root, clock), store, clock), until=clock.now), cancel=cancel)


@pytest.mark.parametrize("cut", ["older_than", "min_size"])
def test_a_scan_filtered_by_age_or_cut_by_size_keeps_no_largest_files_and_the_next_comparison_names_none(
    root: Path, store: Store, clock: Clock, cut: str
) -> None:
    """dir_usage older_than=… lists only old files, min_size=… only large ones: neither list is the
    tree's largest files, so a file missing from it is not called new by the next comparison."""
    write(root / "logs" / "app.log", 2 * MiB, clock)
    write(root / "logs" / "small", 4096, clock)
    os.utime(root / "logs" / "app.log", (clock.now - 2 * DAY, clock.now - 2 * DAY))  # listed by both cuts
    request = UsageRequest(1000, 0, 1, True, 0, 60.0, root=os.fsencode(root))
    filtered = {
        "older_than": replace(request, older_than=clock.now - DAY),
        "min_size": replace(request, min_size=MiB),
    }
    kept = record_scan(store, filtered[cut], lambda r: scan_usage(r, clock=frozen), clock)
    assert kept.snapshot is not None and kept.snapshot.files == [] and not kept.snapshot.lists_files
    clock.now += DAY
    write(root / "logs" / "small", MiB, clock)
    found, _ = run(asked(root, clock), store, clock)
    assert found.diff is not None and found.diff.comparable
    assert found.diff.new_files == [] and found.diff.unlisted == [found.old]


def test_the_first_comparison_keeps_the_largest_files_so_the_next_names_one_removed_and_one_rewritten_grown(
    root: Path, store: Store, clock: Clock
) -> None:
    """The reviewer's case: with no baseline, the first call walks for the files modified in the last
    day (its lower bound) and still keeps the tree's largest files, so the next call names the 2 MiB
    rotated log as removed and the log rewritten in place grown, not new."""
    write(root / "logs" / "app.log.1", 2 * MiB, clock)
    write(root / "logs" / "app.log", 100 << 10, clock)
    first, progress = run(asked(root, clock), store, clock)
    assert first.new is not None and {f.path for f in first.new.files} == {b"logs/app.log.1", b"logs/app.log"}
    assert (
        first.lower_bound is not None and first.lower_bound.files == 2 and first.lower_bound.stopped is None
    )
    assert [done for done, _ in progress] == sorted(done for done, _ in progress)  # two walks, one count
    (root / "logs" / "app.log.1").unlink()
    (root / "logs" / "app.log").unlink()
    clock.now += 600
    write(root / "logs" / "app.log", MiB, clock)  # rewritten after the first call
    second, _ = run(asked(root, clock, since=first.new.taken), store, clock)
    assert second.diff is not None and second.diff.comparable and second.diff.unlisted == []
    assert [f.path for f in second.diff.removed_files] == [b"logs/app.log.1"]
    assert second.diff.new_files == []
    assert [(then.disk, now.disk) for then, now in second.diff.grown_files] == [(100 << 10, MiB)]


def test_a_lower_bound_walk_out_of_time_after_the_recorded_one_says_it_stopped(
    root: Path, store: Store, clock: Clock
) -> None:
    """The first call's two walks share one budget: the second, left none, stops and says so (the
    snapshot of the first is whole)."""
    for n in range(3):
        write(root / f"d{n}" / "f", 4096, clock)
    budget = [0.0, 0.0]  # the budget clock's time, and its step once the snapshot is taken

    def budget_clock() -> float:
        budget[0] += budget[1]
        return budget[0]

    def snapshot_clock() -> float:  # called when the first walk's snapshot is taken: the budget is spent
        budget[1] = 1000.0
        return clock.now

    request = replace(on(asked(root, clock), store, clock), clock=snapshot_clock, monotonic=budget_clock)
    found = compare(request)
    assert found.new is not None and not found.new.partial
    assert found.lower_bound is not None and found.lower_bound.stopped is not None


def test_files_a_baseline_that_stopped_early_did_not_reach_are_never_called_added(
    root: Path, store: Store, clock: Clock
) -> None:
    """hash_tree out of time keeps what it hashed, marked partial: the files it did not reach are
    not in it, and were there all along. A complete baseline, even older, is preferred."""
    for name in ("a", "b", "c"):
        write(root / name, 100, clock)

    def manifest(*names: str) -> bytes:
        return b"".join(
            hashlib.sha256((root / n).read_bytes()).hexdigest().encode() + b"  " + n.encode() + b"\n"
            for n in names
        )

    def baseline(partial: bool, *names: str) -> None:
        kept = record_baseline(
            store, os.fsencode(root), manifest(*names), "sha256", WalkOptions(), partial, clock
        )
        assert kept.kept
        clock.now += 60

    baseline(True, "a")  # b and c not reached in time
    write(root / "a", 1, clock)
    only_partial = run(asked(root, clock), store, clock)[0].integrity
    assert only_partial is not None and only_partial.comparable
    assert (only_partial.added, only_partial.content) == ([], [b"a"])
    assert only_partial.reason is not None and "stopped early" in only_partial.reason
    baseline(False, "a", "b")  # complete: c was added after it
    baseline(True, "a")
    write(root / "c", 1, clock)
    preferred = run(asked(root, clock), store, clock)[0].integrity
    assert preferred is not None and preferred.reason is None
    assert (preferred.added, preferred.content) == ([b"c"], [])


#: The integrity check in another process, as root without the capabilities that let root read any file:
#: root on a root-squashed NFS export, which may read only what others may.
SQUASHED_ROOT = """
import os, sys
from dataclasses import replace
from pathlib import Path
from sysmcp.engine.walk import WalkOptions
from sysmcp.history.compare import Comparison, compare
from sysmcp.history.snapshots import ScanSnapshot
from sysmcp.history.store import Store
now, state, root = float(sys.argv[1]), sys.argv[2], sys.argv[3]
store = Store.open(Path(state), lambda: now)
asked = Comparison(os.fsencode(root), None, None, now, 60.0, WalkOptions(), 1000)
found = compare(replace(asked, store=lambda: store, clock=lambda: now))
print(repr((found.integrity.added, found.integrity.removed, getattr(found.integrity, "unreadable", None))))
"""


def compared_as_squashed_root(clock: Clock, state: Path, root: Path) -> str:
    """What ``SQUASHED_ROOT`` prints: the comparison made by root without its read-anything
    capabilities (root on a root-squashed NFS export)."""
    probe = [sys.executable, "-c", SQUASHED_ROOT, str(clock.now), str(state), str(root)]
    done = subprocess.run(
        ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *probe],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_baseline_files_still_there_that_root_squashed_cannot_read_now_are_unreadable_not_removed(
    root: Path, tmp_path: Path, clock: Clock
) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("root without its read-anything capabilities needs root and setpriv")
    names = ["open", "locked", "closed/f", "gone"]
    for name in names:
        write(root / name, 100, clock)
    manifest = b"".join(
        f"{hashlib.sha256((root / name).read_bytes()).hexdigest()}  {name}\n".encode() for name in names
    )
    store = Store.open(tmp_path / "state", clock)
    assert record_baseline(store, os.fsencode(root), manifest, "sha256", WalkOptions(), False, clock).kept
    store.close()
    (root / "gone").unlink()
    for theirs, mode in (("locked", 0o600), ("closed", 0o700)):  # another user's, theirs alone to read
        os.chown(root / theirs, 4321, 4321)
        os.chmod(root / theirs, mode)
    squashed = compared_as_squashed_root(clock, tmp_path / "state", root)
    # the directory it cannot list now is named too: a file added in it could not be seen
    assert squashed == repr(([], [b"gone"], [b"closed/", b"closed/f", b"locked"])) + "\n"


def test_an_implant_this_user_cannot_read_now_is_added_or_unreadable_never_left_out(
    root: Path, tmp_path: Path, clock: Clock
) -> None:
    """A file and a directory added since the baseline, another user's alone to read (root squashed on
    NFS, a server not run as root): the file is added, the directory unreadable with its slash. Both
    were in no list at all: '0 added' over a tree holding them."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("root without its read-anything capabilities needs root and setpriv")
    write(root / "open", 100, clock)
    manifest = f"{hashlib.sha256((root / 'open').read_bytes()).hexdigest()}  open\n".encode()
    store = Store.open(tmp_path / "state", clock)
    assert record_baseline(store, os.fsencode(root), manifest, "sha256", WalkOptions(), False, clock).kept
    store.close()
    write(root / "implant", 100, clock)
    write(root / "hid" / "implant", 100, clock)
    for theirs, mode in (("implant", 0o600), ("hid", 0o700)):
        os.chown(root / theirs, 4321, 4321)
        os.chmod(root / theirs, mode)
    squashed = compared_as_squashed_root(clock, tmp_path / "state", root)
    assert squashed == repr(([b"implant"], [], [b"hid/"])) + "\n"


def test_what_a_baseline_could_not_read_and_root_squashed_cannot_read_now_stays_unreadable_never_added(
    root: Path, tmp_path: Path, clock: Clock
) -> None:
    """Recorded as unreadable (a file, and directories as prefixes), and still unreadable to root on a
    root-squashed export now: unreadable, neither added nor removed; every such directory is named (more
    than a walk's answer names), and a file added elsewhere is still added."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("root without its read-anything capabilities needs root and setpriv")
    shut = [f"shut{n}" for n in range(7)]
    for name in ["open", "locked", *(f"{d}/f" for d in shut)]:
        write(root / name, 100, clock)
    manifest = f"{hashlib.sha256((root / 'open').read_bytes()).hexdigest()}  open\n".encode()
    unreadable = Unreadable([(b"locked", "permission denied")], [d.encode() for d in shut], 1 + len(shut))
    store = Store.open(tmp_path / "state", clock)
    kept = record_baseline(
        store, os.fsencode(root), manifest, "sha256", WalkOptions(), False, clock, unreadable
    )
    assert (kept.kept, kept.unread, kept.unrecorded) == (True, 8, 0)
    store.close()
    write(root / "new", 100, clock)
    for theirs, mode in (("locked", 0o600), *((d, 0o700) for d in shut)):  # another user's alone
        os.chown(root / theirs, 4321, 4321)
        os.chmod(root / theirs, mode)
    squashed = compared_as_squashed_root(clock, tmp_path / "state", root)
    assert squashed == repr(([b"new"], [], [b"locked", *(f"{d}/".encode() for d in shut)])) + "\n"


def test_unreadable_files_past_the_bound_are_counted_as_unrecorded_not_named(
    root: Path, store: Store, clock: Clock
) -> None:
    """The engine names a bounded number of what it could not read; the rest are counted, and the
    baseline keeps that count so what_changed can say those would be called added."""
    write(root / "locked", 100, clock)
    unreadable = Unreadable([(b"locked", "permission denied"), (b"gone", "permission denied")], [], 1500)
    kept = record_baseline(store, os.fsencode(root), b"", "sha256", WalkOptions(), False, clock, unreadable)
    assert (kept.unread, kept.unrecorded) == (1, 1498)  # one gone since is neither recorded nor counted
    saved = store.load_baseline(store.snapshots("baseline")[0].id)
    assert saved is not None and list(saved.unread) == [b"locked"] and saved.unrecorded == 1498
    found = run(asked(root, clock), store, clock)[0].integrity
    assert found is not None and found.unrecorded == 1498 and found.unread_then == [b"locked"]


def test_what_the_roots_hide_is_left_out_of_what_a_baseline_could_not_read(
    root: Path, store: Store, clock: Clock
) -> None:
    """The files and directories a baseline could not read are names as its files are: one outside the
    roots (a stored '../x' among them) is never named, not even as unreadable or not comparable."""
    for name in ("shown/f", "hidden/f", "hidden/d/f"):
        write(root / name, 1, clock)
    (root.parent / "outside").write_bytes(b"x")
    unreadable = Unreadable(
        [(b"shown/f", "permission denied"), (b"hidden/f", "permission denied")], [b"hidden/d"], 3
    )
    series = series_of(root, WalkOptions())
    baseline = baseline_of(series, os.fsencode(root), b"", "sha256", False, clock.now, unreadable)
    baseline.unread[b"../outside"] = Unread("permission denied")  # as a damaged or forged store may hold
    assert store.save_baseline(baseline).ok

    def visible(name: bytes | str) -> bool:
        real = os.path.normpath(os.fsdecode(name))
        return real.startswith(os.fspath(root)) and "hidden" not in real

    outcome, _ = run(replace(asked(root, clock), visible=visible), store, clock)
    found = outcome.integrity
    assert found is not None and found.comparable
    assert (found.unread_then, found.not_comparable, found.added, found.removed) == ([b"shown/f"], [], [], [])
    everything, _ = run(asked(root, clock), store, clock)  # the same without roots: each is named
    found = everything.integrity
    assert found is not None
    assert (found.unread_then, found.not_comparable) == ([b"hidden/f", b"shown/f"], [b"hidden/d/f"])


class HeldWhileLoading(Store):
    """A store another process locks (a real connection, exclusive) as a snapshot is about to be loaded."""

    holder: sqlite3.Connection | None = None

    def load_scan(self, sid: int, *, dirs: bool = True) -> ScanSnapshot | None:
        if self.holder is None:
            self.close()  # this thread's connection: the exclusive lock needs it gone
            self.holder = sqlite3.connect(self.path, isolation_level=None)
            self.holder.execute("PRAGMA locking_mode = EXCLUSIVE")
            self.holder.execute("BEGIN EXCLUSIVE")
            self.holder.execute("COMMIT")
        return super().load_scan(sid, dirs=dirs)


def test_a_snapshot_that_could_not_be_loaded_is_said_unread_not_none(
    tmp_path: Path, root: Path, clock: Clock
) -> None:
    """Another process holding the store as the snapshots are loaded: 'no snapshot to compare with'
    would be false; the answer says the store could not be read."""
    write(root / "a" / "f", 2 * MiB, clock)
    store = HeldWhileLoading.open(tmp_path / "state", clock, busy_ms=20)
    assert isinstance(store, HeldWhileLoading)
    plain = Store.open(tmp_path / "state", clock)
    run(asked(root, clock), plain, clock)
    clock.now += 60
    run(asked(root, clock), plain, clock)  # two snapshots, the newest a minute old: no scan made now
    plain.close()
    try:
        found, _ = run(asked(root, clock), store, clock)
    finally:
        if store.holder is not None:
            store.holder.close()
    assert found.diff is None and found.unread is not None and "locked" in found.unread, found
    assert any(note.startswith("the history store could not be read") for note in notes_of(found))


def two_large_snapshots(root: Path, store: Store, clock: Clock, dirs: int) -> Comparison:
    """Two snapshots of ``dirs`` directories each, a day apart, every directory grown, saved as a scan
    saves them; the comparison of the two (until now: no scan made now)."""
    root.mkdir()
    series = series_of(os.fsencode(root), WalkOptions())
    for taken, size in ((clock.now - DAY, MiB), (clock.now, 2 * MiB)):
        tree = {b"": DirTotals(dirs * size, dirs * size, dirs)}
        tree |= {b"d%06d" % i: DirTotals(size, size, 1) for i in range(dirs)}
        assert store.save_scan(ScanSnapshot(series, taken, False, MiB, tree)).ok
    return replace(asked(root, clock, since=clock.now - DAY), until=clock.now)


def test_comparing_two_large_snapshots_stops_when_the_budget_runs_out_and_says_so(
    root: Path, store: Store, clock: Clock
) -> None:
    """The budget's clock moves a second each time it is read: a 3 s budget runs out at the third
    time the comparison asks, thousands of directories before the end; the answer says it stopped
    and names no change, where before the two were compared whole whatever the budget."""
    dirs = 5 * STOP_EVERY
    request = replace(on(two_large_snapshots(root, store, clock, dirs), store, clock), timeout_s=3.0)
    ticks = iter(range(1_000_000))
    found = compare(replace(request, monotonic=lambda: float(next(ticks))))
    diff = found.diff
    assert diff is not None and not diff.comparable, diff
    assert (
        diff.stopped == "its time budget ran out"
        and diff.changes == []
        and diff.compared == 3 * STOP_EVERY < dirs
    )
    text, answer, _ = render(str(root), found, {"top_n": 10})
    assert text.startswith(
        "PARTIAL RESULT: comparing the two snapshots stopped early (its time budget ran out)"
    )
    assert answer.complete is False and answer.comparable is False
    assert found.stopped == answer.stopped_reason == "time_budget"
    again = compare(on(two_large_snapshots(root / "again", store, clock, dirs), store, clock))
    whole = again.diff
    assert whole is not None and whole.comparable and len(whole.changes) == dirs
    assert again.stopped is None and render(str(root), again, {"top_n": 10})[1].stopped_reason is None


def test_a_cancel_while_two_large_snapshots_are_compared_stops_the_call_within_a_few_thousand_rows(
    root: Path, store: Store, clock: Clock
) -> None:
    """The call is cancelled (the event set) once 1,000 directories have been looked at; the cancel is
    asked, and raises, before ``STOP_EVERY`` more are, not after the snapshots were read and compared
    whole (every directory of both sides looked at, as before)."""
    request = two_large_snapshots(root, store, clock, 10 * STOP_EVERY)
    cancelled = threading.Event()
    looked_at = {"all": 0, "when cancelled": 0}

    def visible(path: bytes | str) -> bool:
        looked_at["all"] += 1
        if looked_at["all"] == 1000:
            looked_at["when cancelled"] = looked_at["all"]
            cancelled.set()
        return True

    def cancel() -> None:
        if cancelled.is_set():
            raise Cancelled

    with pytest.raises(Cancelled):
        compare(replace(on(request, store, clock), visible=visible), cancel=cancel)
    assert cancelled.is_set()
    assert looked_at["all"] - looked_at["when cancelled"] <= STOP_EVERY, looked_at


class PrunedWhileCompared(Store):
    """A store whose older snapshot another process prunes between its head being read and its
    directories being: a retention run of a recording timer at the wrong moment."""

    doomed: int | None = None

    def with_dir_rows(self, work: Callable[..., object], default: object) -> object:  # type: ignore[override]
        def prune(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM snapshots WHERE id = ?", (self.doomed,))

        assert self._write("prune", prune).ok
        return super().with_dir_rows(work, default)


def test_a_snapshot_pruned_between_its_head_and_its_directories_is_not_compared_as_empty(
    root: Path, tmp_path: Path, clock: Clock
) -> None:
    """The older snapshot is deleted after it was chosen and its totals read: its directories, read
    next, are none. Compared as they came, every directory of the newer one 'appeared'; the diff is
    now not made and the store's words say why."""
    store = PrunedWhileCompared.open(tmp_path / "pruned", clock)
    assert isinstance(store, PrunedWhileCompared)
    request = two_large_snapshots(root, store, clock, 3)
    store.doomed = min(info.id for info in store.snapshots("scan"))
    found = compare(on(request, store, clock))
    assert found.diff is None, found.diff
    assert found.unread is not None and "deleted" in found.unread, found.unread
    assert any("could not be read" in note for note in notes_of(found))
    answer = render(str(root), found, {"top_n": 10})[1]
    assert found.stopped == answer.stopped_reason == "snapshot_pruned"
    assert answer.complete is False  # nothing was compared: not a whole answer


def test_files_tied_in_size_at_the_cut_of_the_largest_are_never_called_removed_from_an_unchanged_tree(
    root: Path, store: Store, clock: Clock
) -> None:
    """The reviewer's case: 6,000 files of one size, two snapshots of the unchanged tree whose lists of
    the largest files were cut among equals differently (a walk keeping 1,000, one keeping 100): a file
    kept by the older and not the newer is still there, so it is not called removed (nor one kept by
    the newer alone new); how many may have been cut among equals is said instead."""
    for d in range(300):
        for f in range(20):
            write(root / f"d{d}" / f"f{f}", 4096, clock)
    request = UsageRequest(1000, 0, 1, True, 0, 60.0, root=os.fsencode(root))
    older = record_scan(store, request, lambda r: scan_usage(r, clock=frozen), clock)
    clock.now += 60
    newer = record_scan(store, replace(request, top_files=100), lambda r: scan_usage(r, clock=frozen), clock)
    assert older.snapshot is not None and newer.snapshot is not None
    assert {f.path for f in older.snapshot.files} != {f.path for f in newer.snapshot.files}  # cut apart
    clock.now += 60
    found, _ = run(asked(root, clock), store, clock)
    assert not found.fresh and found.diff is not None and found.diff.comparable
    assert found.diff.removed_files == [] and found.diff.new_files == [] and found.diff.shrunk_files == []
    text, answer, _ = render(str(root), found, {"top_n": 10})
    assert "Largest files removed" not in text and "Largest new files" not in text
    assert answer.removed_files in (None, []) and answer.new_files in (None, [])
    assert len(found.diff.tied_files) == 100  # kept by the older only: said, not named
    assert "100 files the older snapshot kept, of just the size of the smallest the newer kept" in text


def test_a_fresh_scan_looks_again_at_files_tied_at_the_cut_and_names_only_the_one_gone(
    root: Path, store: Store, clock: Clock
) -> None:
    """Compared with a scan of now, a file the older snapshot kept that is missing from the newer list
    at just its smallest size is looked at again: the one deleted is removed, the rest still there are
    neither removed nor said to be cut among equals."""
    for d in range(300):
        for f in range(20):
            write(root / f"d{d}" / f"f{f}", 4096, clock)
    request = UsageRequest(1000, 0, 1, True, 0, 60.0, root=os.fsencode(root))
    older = record_scan(store, replace(request, top_files=100), lambda r: scan_usage(r, clock=frozen), clock)
    assert older.snapshot is not None and len(older.snapshot.files) == 100
    gone = older.snapshot.files[-1].path
    (root / os.fsdecode(gone)).unlink()
    clock.now += DAY
    found, _ = run(asked(root, clock), store, clock)
    assert found.fresh and found.diff is not None and found.diff.comparable
    assert [f.path for f in found.diff.removed_files] == [gone] and found.diff.tied_files == []
    assert found.diff.shrunk_files == [] and found.diff.new_files == []
    text, _, _ = render(str(root), found, {"top_n": 10})
    assert "cut from it among equals" not in text
