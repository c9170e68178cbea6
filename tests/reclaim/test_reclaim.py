"""Reclaim plans against real files: exact bytes per class, hard links, the script, acting on changes."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import os
import random
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from sysmcp.engine.faults import NotFound, Refused
from sysmcp.engine.paths import escaped
from sysmcp.engine.procs import mapped_anywhere
from sysmcp.reclaim import (
    ApplyRequest,
    FileResult,
    Item,
    LogRecord,
    Plan,
    PlannedFile,
    PlanRequest,
    apply_items,
    build_plan,
    confirmation_code,
    render_script,
)
from sysmcp.reclaim._classes import RootsLayout
from tests.profile import needs_proc, needs_xattrs


def write(path: Path, size: int) -> int:
    """A file of ``size`` bytes; its disk bytes (what removing it frees)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return os.lstat(path).st_blocks * 512


def layout(base: Path) -> RootsLayout:
    b = os.fsencode(base)
    return RootsLayout(
        apt=b + b"/var/cache/apt",
        dnf=b + b"/var/cache/dnf",
        yum=b + b"/var/cache/yum",
        pacman=b + b"/var/cache/pacman/pkg",
        apk=b + b"/var/cache/apk",
        log=b + b"/var/log",
        journal=(b + b"/var/log/journal",),
        coredump=(b + b"/var/lib/systemd/coredump",),
        core_dirs=(b + b"/tmp",),
        homes=(b + b"/home/ann",),
        proc=b + b"/no-proc",
        container_engines=(),
    )


def tree(base: Path) -> dict[str, int]:
    """One of each class, and decoys that no class may take; the expected disk bytes per class."""
    expected = {
        "package_cache": write(base / "var/cache/apt/archives/vim_9.deb", 50_000)
        + write(base / "var/cache/apt/pkgcache.bin", 9_000)
        + write(base / "var/cache/dnf/updates/packages/x.rpm", 7_000)
        + write(base / "var/cache/pacman/pkg/y-1-x86_64.pkg.tar.zst", 6_000)
        + write(base / "var/cache/apk/z-1.apk", 5_000),
        "language_cache": write(base / "home/ann/.cache/pip/http/a", 12_000)
        + write(base / "home/ann/.npm/_cacache/content/b", 8_000)
        + write(base / "home/ann/.cargo/registry/cache/c.crate", 4_000)
        + write(base / "home/ann/go/pkg/mod/cache/d.zip", 3_000)
        + write(base / "home/ann/.cache/go-build/e", 2_000)
        + write(base / "home/ann/.cache/uv/f", 1_000),
        "journal": write(base / "var/log/journal/m/system@0001-0002.journal", 40_000)
        + write(base / "var/log/journal/m/user-1000.journal~", 10_000),
        "rotated_log": write(base / "var/log/syslog.1", 30_000)
        + write(base / "var/log/syslog.2.gz", 20_000)
        + write(base / "var/log/apt/history.log.3.gz", 3_000)
        + write(base / "var/log/messages-20260101", 2_000),
        "core_dump": write(base / "var/lib/systemd/coredump/core.bash.1000.zst", 25_000)
        + write(base / "tmp/core.4242", 15_000),
        "trash": write(base / "home/ann/.local/share/Trash/files/old.iso", 60_000)
        + write(base / "home/ann/.local/share/Trash/info/old.iso.trashinfo", 100),
    }
    for decoy in (
        "var/log/syslog",
        "var/log/journal/m/system.journal",
        "var/cache/apt/archives/lock",
        "home/ann/notes.txt",
        "tmp/core.txt",
    ):
        write(base / decoy, 1_000)
    os.symlink(base / "var/log/syslog", base / "var/log/link.1")  # a symlink is never an item
    return expected


def by_class(plan: Plan) -> dict[str, int]:
    totals: dict[str, int] = {}
    for item in plan.items:
        totals[item.klass] = totals.get(item.klass, 0) + item.bytes
    return totals


def test_each_class_is_found_with_its_exact_disk_bytes_and_nothing_else(tmp_path: Path) -> None:
    expected = tree(tmp_path)
    plan = build_plan(PlanRequest(layout=layout(tmp_path)))
    assert by_class(plan) == expected
    paths = {os.fsdecode(e.path) for item in plan.items for e in item.entries}
    assert not any(
        p.endswith(("/syslog", "/system.journal", "/lock", "notes.txt", "core.txt", "link.1")) for p in paths
    )
    assert [item.bytes for item in plan.items] == sorted((item.bytes for item in plan.items), reverse=True)
    apt = next(item for item in plan.items if item.entries and item.entries[0].path.endswith(b".deb"))
    assert apt.command == "apt-get clean" and apt.safety == "regenerable cache"
    journal = next(item for item in plan.items if item.klass == "journal")
    assert "journalctl --rotate" in (journal.note or "")


def test_identity_is_kept_per_path(tmp_path: Path) -> None:
    write(tmp_path / "var/log/syslog.1", 5_000)
    plan = build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",)))
    entry = plan.items[0].entries[0]
    st = os.lstat(entry.path)
    who = entry.identity
    assert (who.dev, who.ino, who.size, who.mtime_ns, who.ctime_ns) == (
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
    )


def test_a_hard_link_counts_once_and_only_when_every_link_goes(tmp_path: Path) -> None:
    disk = write(tmp_path / "var/log/a.1", 40_000)
    os.link(tmp_path / "var/log/a.1", tmp_path / "var/log/b.1")  # both in the plan: counted once
    other = write(tmp_path / "var/log/c.1", 20_000)
    os.link(tmp_path / "var/log/c.1", tmp_path / "home-keep")  # a link outside the plan keeps the blocks
    item = build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",))).items[0]
    assert item.bytes == disk
    assert item.shared == other


def test_the_scope_keeps_only_items_below_it(tmp_path: Path) -> None:
    tree(tmp_path)
    scope = (os.fsencode(tmp_path / "var/log"),)
    plan = build_plan(PlanRequest(layout=layout(tmp_path), scope=scope))
    assert {item.klass for item in plan.items} == {"journal", "rotated_log"}


def test_duplicates_keep_the_first_copy(tmp_path: Path) -> None:
    data = os.urandom(30_000)
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(data)
    groups = [[os.fsencode(tmp_path / n) for n in ("a", "b", "c")]]
    plan = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups))
    (item,) = plan.items
    assert [e.path for e in item.entries] == groups[0][1:]
    assert item.bytes == 2 * os.lstat(tmp_path / "a").st_blocks * 512


@needs_xattrs
def test_the_hard_link_note_names_a_kept_copy_whose_name_is_not_utf8_exactly(tmp_path: Path) -> None:
    """The note 'or replace each extra by a hard link to …' names the kept copy as the review escapes
    every name (``\\200``): not with U+FFFD for the byte, which reads alike for every byte not UTF-8."""
    base = os.fsencode(tmp_path)
    groups = []
    for odd in (b"\x80", b"\x81"):
        data = os.urandom(9_000)
        kept, extra = base + b"/kept" + odd, base + b"/extra" + odd
        for path in (kept, extra):
            with open(path, "wb") as handle:
                handle.write(data)
        os.utime(kept, (1_000_000_000, 1_000_000_000))  # the older copy is the one kept
        groups.append([kept, extra])
    plan = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups))
    notes = {item.keep.path: escaped(item.note or "") for item in plan.items if item.keep is not None}
    assert sorted(notes) == sorted(group[0] for group in groups)
    for kept, note in notes.items():
        assert f"hard link to {escaped(kept)}:" in note, note
        assert "\ufffd" not in note


def older_copy_in(base: Path, place: str) -> tuple[Path, Path, list[list[bytes]]]:
    """A file in ``place`` (ann's trash, the logs), older than its one copy in her documents: by age
    alone, the one kept."""
    data = os.urandom(30_000)
    there, copy = base / place, base / "home/ann/docs/report.odt"
    for path, mtime in ((there, 1_000_000_000), (copy, 1_500_000_000)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (mtime, mtime))
    return there, copy, [[os.fsencode(there), os.fsencode(copy)]]


TRASHED = "home/ann/.local/share/Trash/files/report.odt"


def test_choosing_every_item_of_a_plan_never_removes_the_last_copy_of_a_file_in_the_trash(
    tmp_path: Path,
) -> None:
    trashed, copy, groups = older_copy_in(tmp_path, TRASHED)
    plan = build_plan(PlanRequest(layout=layout(tmp_path), classes=("trash", "duplicate"), duplicates=groups))
    apply_items(ApplyRequest(plan, [item.id for item in plan.items], lambda path: True))
    assert not trashed.exists() and copy.exists()  # the trash emptied; the copy outside it is no extra of it
    assert [item.klass for item in plan.items] == ["trash"]


@pytest.mark.parametrize(
    "place",
    [TRASHED, "var/log/app/report.odt", "home/ann/.cache/pip/report.odt", "tmp/core.4242", "home/ann/core"],
)
def test_a_copy_where_a_class_takes_files_from_is_never_kept_even_when_that_class_is_not_planned(
    tmp_path: Path, place: str
) -> None:
    """Emptying the trash, logrotate or ``pip cache purge`` would take the kept copy later; so would the
    next plan's core dumps a stray ``core`` file at the top of /tmp or a home."""
    _there, copy, groups = older_copy_in(tmp_path, place)
    (tmp_path / "home/ann/docs/report (2).odt").write_bytes(copy.read_bytes())
    groups[0].append(os.fsencode(tmp_path / "home/ann/docs/report (2).odt"))
    plan = build_plan(PlanRequest(layout=layout(tmp_path), classes=("duplicate",), duplicates=groups))
    (item,) = plan.items
    assert item.keep is not None and item.keep.path == os.fsencode(copy)
    assert [e.path for e in item.entries] == [groups[0][2]]


def duplicate_sets(base: bytes, directories: list[bytes]) -> list[list[bytes]]:
    """In each directory two identical files, ``a`` (the kept copy) and ``b``: one set each."""
    groups = []
    for directory in directories:
        os.makedirs(base + b"/" + directory)
        data = os.urandom(9_000)
        for name in (b"a", b"b"):
            with open(base + b"/" + directory + b"/" + name, "wb") as handle:
                handle.write(data)
        groups.append([base + b"/" + directory + b"/a", base + b"/" + directory + b"/b"])
    return groups


def each_item_acts_on_its_own_files(plan: Plan) -> None:
    assert len({item.id for item in plan.items}) == len(plan.items) == 2
    for item in plan.items:
        (applied,) = apply_items(ApplyRequest(plan, [item.id], lambda path: True))
        assert applied.item is item and [o.done for o in applied.outcomes] == [True]
        assert item.keep is not None and os.path.exists(item.keep.path)
        assert not os.path.exists(item.entries[0].path)


def test_two_places_whose_names_differ_only_in_bytes_that_are_not_utf8_are_items_with_ids_of_their_own(
    tmp_path: Path,
) -> None:
    groups = duplicate_sets(os.fsencode(tmp_path), [b"\xff", b"\xfe"])
    request = PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups)
    each_item_acts_on_its_own_files(build_plan(request))


def test_two_items_whose_places_hash_alike_still_get_ids_of_their_own(tmp_path: Path) -> None:
    """An id holds 32 bits of its class and place: among ~77,000 duplicate sets two share them as
    often as not, and each must still be an item of its own to name."""
    seen: dict[str, int] = {}
    for n in itertools.count():  # two directories whose kept copies would have the same id
        digest = hashlib.blake2s(f"duplicate\0{tmp_path}/{n}/a".encode(), digest_size=4).hexdigest()
        if digest in seen:
            break
        seen[digest] = n
    groups = duplicate_sets(os.fsencode(tmp_path), [b"%d" % seen[digest], b"%d" % n])
    plan = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups))
    assert f"duplicate-{digest}" in {item.id for item in plan.items}  # ids are made as this test made them
    each_item_acts_on_its_own_files(plan)


def plan_of(tmp_path: Path, names: list[bytes]) -> Plan:
    log = tmp_path / "var/log"
    log.mkdir(parents=True, exist_ok=True)
    for name in names:
        with open(os.fsencode(log) + b"/" + name, "wb") as handle:
            handle.write(b"x" * 5000)
    return build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",)))


def hostile(count: int) -> list[bytes]:
    """Names no shell must misread: quotes, $(…), backticks, newlines (also last), leading -, bytes
    that are not UTF-8, globs, spaces, control bytes; each ends like a rotated log."""
    rng = random.Random(25)
    pieces = [
        b"'",
        b'"',
        b"$(touch PWNED)",
        b"`id`",
        b"\n",
        b"-",
        b"--apply",
        b"\xff\xfe",
        b"*",
        b"?",
        b" ",
        b"\t",
        b"\\",
        b"%s",
        b"%%",
        b";",
        b"|",
        b"&",
        b"\x01",
        b"\xc3\xa9",
        b"!",
        b"~",
        b"{a,b}",
    ]
    names: set[bytes] = set()
    while len(names) < count:
        body = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        name = (
            body + str(len(names)).encode() + rng.choice([b".1", b".2.gz", b".gz", b"-20260101"])
        ).replace(b"/", b"_")
        if name.startswith(b"."):
            name = b"_" + name
        names.add(name)
    return sorted(names)


@pytest.mark.parametrize("raw", [b"/a\n", b"/a\n\n", b"/\xff'$(x)`y`%s\\", b"/plain path", b"/it's"])
def test_every_quoted_name_expands_to_its_exact_bytes(raw: bytes) -> None:
    from sysmcp.reclaim._script import quote

    setup, word = quote(raw)
    done = subprocess.run(["sh", "-c", f"{setup}printf '%s' {word}"], capture_output=True, check=True)
    assert done.stdout == raw


def run_script(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    path = cwd / "plan.sh"
    path.write_text(script, encoding="ascii")
    return subprocess.run(["sh", str(path), *args], capture_output=True, cwd=cwd, check=False, timeout=300)


def test_the_script_is_valid_sh_and_its_dry_run_prints_every_planned_path_escaped_on_its_line(
    tmp_path: Path,
) -> None:
    # 250 names: each of hostile()'s pieces is in 28 or more of them and begins 3 or more; the dry run
    # tests each name, and a thousand took seconds.
    plan = plan_of(tmp_path / "t", hostile(250))
    planned = [e.path for item in plan.items for e in item.entries]
    assert len(planned) == 250
    script = render_script(plan)
    assert script.isascii()
    assert subprocess.run(["sh", "-n"], input=script.encode(), check=False).returncode == 0
    work = tmp_path / "cwd"
    work.mkdir()
    done = run_script(script, cwd=work)
    assert done.returncode == 0, done.stderr
    expected = b"".join(b"would remove: " + escaped(path).encode() + b"\n" for path in planned)
    assert done.stdout.startswith(expected)
    assert done.stdout[len(expected) :].startswith(b"dry run: nothing was changed (0 skipped)")
    assert not (work / "PWNED").exists() and all(os.path.lexists(p) for p in planned)


def test_the_script_applies_and_skips_what_changed_replaced_or_became_a_symlink(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, [b"same.1", b"grown.1", b"new-inode.1", b"link.1", b"-dash \n.1"])
    log = tmp_path / "var/log"
    with open(log / "grown.1", "ab") as handle:
        handle.write(b"more")
    (log / "new-inode.tmp").write_bytes(b"x" * 5000)
    os.replace(log / "new-inode.tmp", log / "new-inode.1")  # same name and size, another inode
    os.unlink(log / "link.1")
    os.symlink(log / "grown.1", log / "link.1")
    done = run_script(render_script(plan), "--apply", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"removed: {log}/same.1\n".encode() in out
    assert f"removed: {log}/-dash \\n.1\n".encode() in out and not os.path.lexists(log / "-dash \n.1")
    for name in ("grown.1", "new-inode.1", "link.1"):
        assert f"skipped: {log}/{name}: ".encode() in out
        assert os.path.lexists(log / name)
    assert not (log / "same.1").exists()
    assert b"done: 2 files acted on, 3 skipped" in out


def test_reclaim_skips_modified_replaced_and_symlinked_files_and_a_swapped_directory(tmp_path: Path) -> None:
    log = tmp_path / "var/log"
    (log / "sub").mkdir(parents=True)
    (log / "sub/inner.1").write_bytes(b"y" * 8000)
    plan = plan_of(tmp_path, [b"same.1", b"grown.1", b"new-inode.1", b"link.1"])
    with open(log / "grown.1", "ab") as handle:
        handle.write(b"more")
    (log / "new-inode.tmp").write_bytes(b"x" * 5000)
    os.replace(log / "new-inode.tmp", log / "new-inode.1")  # same name and size, another inode
    os.unlink(log / "link.1")
    os.symlink(log / "grown.1", log / "link.1")
    elsewhere = tmp_path / "elsewhere"
    os.rename(log / "sub", elsewhere)
    os.symlink(elsewhere, log / "sub")  # the directory on the way is a symlink now: never followed
    (item,) = plan.items
    (applied,) = apply_items(ApplyRequest(plan, [item.id], lambda path: True))
    reasons = {os.fsdecode(os.path.basename(o.path)): o.reason for o in applied.outcomes}
    assert reasons == {
        "same.1": None,
        "grown.1": "changed",
        "new-inode.1": "changed",
        "link.1": "symlink",
        "inner.1": "symlink",
    }
    assert not (log / "same.1").exists() and (elsewhere / "inner.1").exists()


def test_reclaim_refuses_whole_a_plan_naming_a_file_outside_the_allowed_roots(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, [b"a.1"])
    with pytest.raises(Refused, match="outside the roots") as refused:
        apply_items(ApplyRequest(plan, [plan.items[0].id], lambda path: False))
    assert "a.1" not in str(refused.value)  # a name outside the roots is never told
    assert (tmp_path / "var/log/a.1").exists()


def test_reclaim_removes_every_link_of_a_planned_inode(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, [b"a.1"])
    os.link(tmp_path / "var/log/a.1", tmp_path / "var/log/b.1")
    plan = build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",)))
    (applied,) = apply_items(ApplyRequest(plan, [plan.items[0].id], lambda path: True))
    assert all(o.done for o in applied.outcomes), applied.outcomes  # the ctime the first unlink moved is ours


def test_an_unknown_item_is_refused_and_codes_bind_the_exact_list(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, [b"a.1"])
    with pytest.raises(NotFound):
        apply_items(ApplyRequest(plan, ["nope"], lambda path: True))
    item_id = plan.items[0].id
    assert confirmation_code(b"k" * 32, plan, [item_id]) != confirmation_code(b"k" * 32, plan, [item_id, "x"])
    assert confirmation_code(b"k" * 32, plan, [item_id]) != confirmation_code(b"j" * 32, plan, [item_id])


NAMESPACE = textwrap.dedent(
    """
    import json, os, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    image = sys.argv[2]  # an ext4 image for a loop mount over /var/cache/apt, or "" for tmpfs there too
    for place in ("/var/cache/apt", "/var/log", "/home"):
        os.makedirs(place, exist_ok=True)
        if place == "/var/cache/apt" and image:
            subprocess.run(["mount", "-o", "loop", image, place], check=True)
        else:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", place], check=True)
    from tests.reclaim.test_reclaim import write
    from sysmcp.reclaim._plan import PlanRequest, ApplyRequest, apply_items, build_plan
    from sysmcp.reclaim._plan import PlanRequest, apply_items, build_plan
    from sysmcp.reclaim._classes import RootsLayout
    expected = {
        "package_cache": write(__import__("pathlib").Path("/var/cache/apt/archives/big_1.deb"), 5_000_000),
        "rotated_log": write(__import__("pathlib").Path("/var/log/syslog.1"), 3_000_000),
        "language_cache": write(__import__("pathlib").Path("/home/bob/.cache/pip/w"), 2_000_000),
    }
    layout = RootsLayout(homes=(b"/home/bob",), coredump=(), core_dirs=(), container_engines=(), journal=(),
                         proc=b"/nonexistent")
    plan = build_plan(PlanRequest(layout=layout))
    found = {}
    for item in plan.items:
        found[item.klass] = found.get(item.klass, 0) + item.bytes
    results = apply_items(ApplyRequest(plan, [item.id for item in plan.items], lambda path: True))
    freed = {a.item.klass: a.freed for a in results}
    fs = subprocess.run(["stat", "-f", "-c", "%T", "/var/cache/apt"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"expected": expected, "found": found, "freed": freed, "apt_fs": fs}))

    """
)


def test_in_a_private_mount_namespace_on_tmpfs_and_a_loop_ext4_the_bytes_freed_match_the_plan(
    tmp_path: Path,
) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0 or not os.path.exists("/proc/self/mountinfo"):
        pytest.skip("needs root and unshare to mount tmpfs over /var/cache/apt, /var/log and /home privately")
    if subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("unshare -m is not permitted here")
    image = ""
    mkfs = shutil.which("mkfs.ext4")
    if mkfs is not None:  # a loop filesystem where one can be made; tmpfs everywhere otherwise
        image = str(tmp_path / "apt.img")
        with open(image, "wb") as handle:
            handle.truncate(64 << 20)
        subprocess.run([mkfs, "-q", "-F", image], check=True, capture_output=True)
    repo = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [unshare, "-m", "--propagation", "private", sys.executable, "-c", NAMESPACE, repo, image],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    import json

    report = json.loads(done.stdout)
    assert report["found"] == report["expected"]
    assert (report["apt_fs"] != "tmpfs") is bool(image), report["apt_fs"]  # the loop ext4 really was there
    for klass, planned in report["expected"].items():
        assert abs(report["freed"][klass] - planned) <= 0.05 * planned, (klass, report)


HOLDER = textwrap.dedent(
    """
    import os, sys
    handle = open(sys.argv[1], "wb")
    handle.write(b"x" * int(sys.argv[2]))
    handle.flush()
    os.fsync(handle.fileno())
    os.unlink(sys.argv[1])
    print(os.fstat(handle.fileno()).st_blocks * 512, flush=True)
    sys.stdin.read()  # hold the file until the test closes our stdin
    """
)


@needs_proc
def test_a_deleted_file_held_open_is_planned_with_its_holder_and_truncated(tmp_path: Path) -> None:
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/PID/fd (Linux)")
    name = tmp_path / "app.log"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(name), "3000000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        disk = int(holder.stdout.readline())
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(tmp_path),)
        )
        plan = build_plan(request)
        (item,) = plan.items
        assert item.bytes == disk and item.action == "truncate" and item.safety == "risky"
        assert [(h["pid"], h["mode"]) for h in item.holders] == [(holder.pid, "w")]
        assert "restarting" in (item.note or "")
        (applied,) = apply_items(
            ApplyRequest(plan, [item.id], lambda path: path.startswith(os.fsencode(tmp_path)))
        )
        fd_path = item.entries[0].path
        if maps_hidden_from_this_user():  # a sandbox's supervisor, say: it could map the file unseen
            assert [(o.done, o.reason) for o in applied.outcomes] == [(False, "maps_unreadable")]
            assert os.stat(fd_path).st_size == 3_000_000
        else:
            assert [(o.done, o.reason) for o in applied.outcomes] == [(True, None)]
            assert os.stat(fd_path).st_size == 0
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait(timeout=30)


def maps_hidden_from_this_user() -> bool:
    """Whether reclaim, asked here, cannot rule out that some process maps a deleted file (a process
    whose maps may not be read, even by root in a sandbox; processes /proc does not list): it then
    truncates none. Asked of the engine's own look, for an inode no file has."""
    return mapped_anywhere(b"/proc/self/fd/0", 0, 1 << 62) == "unseen"


HOLD_ONE = textwrap.dedent(
    """
    import sys
    handle = open(sys.argv[1], sys.argv[2])
    print("held", flush=True)
    sys.stdin.read()
    """
)


@needs_proc
def test_a_deleted_file_that_any_holder_writes_is_risky_and_names_the_writer(tmp_path: Path) -> None:
    """A reader that happens to hold the file first does not make truncating it look harmless."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/PID/fd (Linux)")
    name = tmp_path / "app.log"
    name.write_bytes(b"y" * 2_000_000)
    holders = []
    try:
        for mode in ("rb", "ab"):  # the reader first: its descriptor is met first in pid order
            process = subprocess.Popen(
                [sys.executable, "-c", HOLD_ONE, str(name), mode],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            holders.append(process)
            assert process.stdout is not None and process.stdout.readline() == b"held\n"
        name.unlink()
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(tmp_path),)
        )
        (item,) = build_plan(request).items
        assert item.safety == "risky"
        assert sorted((h["pid"], h["mode"]) for h in item.holders) == sorted(
            [(holders[0].pid, "r"), (holders[1].pid, "w")]
        )
        assert f"(pid {holders[1].pid})" in (item.note or "") and "restarting" in (item.note or "")
    finally:
        for process in holders:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=30)


MAPPING_DATABASE = textwrap.dedent(
    """
    import mmap, os, sys
    handle = open(sys.argv[1], "w+b")
    handle.write(b"d" * 2_000_000)
    handle.flush()
    pages = mmap.mmap(handle.fileno(), 0)  # a database's way: its file open and mapped, shared
    os.unlink(sys.argv[1])
    print("mapped", flush=True)
    sys.stdin.read()
    pages[-1] = 1  # a page past the end of a truncated file would kill it here (SIGBUS)
    """
)


@needs_proc
def test_a_deleted_file_held_by_a_descriptor_and_mapped_is_not_planned_for_truncation(tmp_path: Path) -> None:
    """Truncating it through the descriptor would kill the process at its next touch of the mapping."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/PID/fd (Linux)")
    name = tmp_path / "data.mdb"
    database = subprocess.Popen(
        [sys.executable, "-c", MAPPING_DATABASE, str(name)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert database.stdout is not None and database.stdout.readline() == b"mapped\n"
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(tmp_path),)
        )
        assert build_plan(request).items == ()
    finally:
        assert database.stdin is not None
        database.stdin.close()
        assert database.wait(timeout=30) == 0


MAPS_WHEN_TOLD = textwrap.dedent(
    """
    import mmap, os, sys
    handle = open(sys.argv[1], "w+b")
    handle.write(b"d" * 2_000_000)
    handle.flush()
    os.unlink(sys.argv[1])
    print("held", flush=True)
    sys.stdin.readline()
    pages = mmap.mmap(handle.fileno(), 0)
    print("mapped", flush=True)
    sys.stdin.read()
    pages[-1] = 1  # a page past the end of a truncated file would kill it here (SIGBUS)
    """
)


@needs_proc
def test_a_deleted_file_mapped_after_the_plan_is_not_truncated(tmp_path: Path) -> None:
    """The plan saw only a descriptor; by the time of acting the holder maps the file: emptying it now
    would kill the holder at its next touch of the mapping."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/PID/fd (Linux)")
    name = tmp_path / "data.mdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", MAPS_WHEN_TOLD, str(name)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == b"held\n"
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(tmp_path),)
        )
        plan = build_plan(request)
        (item,) = plan.items
        holder.stdin.write(b"map\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == b"mapped\n"
        (applied,) = apply_items(
            ApplyRequest(plan, [item.id], lambda path: path.startswith(os.fsencode(tmp_path)))
        )
        assert [(o.done, o.reason) for o in applied.outcomes] == [(False, "mapped")]
        assert os.stat(item.entries[0].path).st_size == 2_000_000
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0


def test_the_rename_aside_never_replaces_a_name_that_is_taken(tmp_path: Path) -> None:
    from sysmcp import platform

    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if not platform.rename_noreplace(fd, b"a", fd, b"c"):
            pytest.skip("no RENAME_NOREPLACE here (docs/reclaim.md: the weaker guarantee)")
        with pytest.raises(FileExistsError):
            platform.rename_noreplace(fd, b"c", fd, b"b")
    finally:
        os.close(fd)
    assert (tmp_path / "b").read_bytes() == b"b" and (tmp_path / "c").read_bytes() == b"a"


def test_a_removal_cancelled_while_its_file_is_aside_and_its_name_taken_is_logged_with_where_the_file_is(
    tmp_path: Path,
) -> None:
    """Cancelled mid-comparison (the file under its private name) while someone took its name: the file
    cannot go back, so the log must say where it is, or nobody could ever find it again."""
    data = os.urandom(30_000)
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(data)
    groups = [[os.fsencode(tmp_path / n) for n in ("a", "b")]]
    plan = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups))
    (item,) = plan.items

    class Cancelled(Exception):
        pass

    def cancel() -> None:  # the comparison's first cancel(), with b aside: take b's name, cancel
        if any(n.startswith(".sysmcp-aside-") for n in os.listdir(tmp_path)):
            (tmp_path / "b").write_bytes(b"someone else's")
            raise Cancelled

    logged: list[tuple[bytes, bool, str | None]] = []
    with pytest.raises(Cancelled):
        apply_items(
            ApplyRequest(
                plan,
                [item.id],
                lambda path: True,
                log=lambda item, entry, action, outcome: logged.append(
                    (outcome.path, outcome.done, outcome.reason)
                ),
            ),
            cancel=cancel,
        )
    (aside,) = [n for n in os.listdir(tmp_path) if n.startswith(".sysmcp-aside-")]
    assert (tmp_path / aside).read_bytes() == data
    assert logged == [
        (os.fsencode(tmp_path / "b"), False, f"cancelled; left as {aside} (its name was taken meanwhile)")
    ]


@pytest.mark.parametrize("written", ["a", "b"])
def test_a_duplicate_whose_kept_copy_or_itself_is_written_while_they_are_compared_stays(
    tmp_path: Path, written: str
) -> None:
    """A write in a part already compared: the compared bytes are no longer both files' own."""
    data = os.urandom(3 * (1 << 20))
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(data)
        os.utime(tmp_path / name, (1_000_000_000, 1_000_000_000 + (name == "b")))
    groups = [[os.fsencode(tmp_path / n) for n in ("a", "b")]]
    plan = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups))
    calls: list[None] = []

    def write_behind() -> None:  # the third call: the first megabyte compared, the second not yet
        calls.append(None)
        if len(calls) == 3:
            target = tmp_path / written
            if written == "b":
                (target,) = [tmp_path / n for n in os.listdir(tmp_path) if n.startswith(".sysmcp-aside-")]
            with open(target, "r+b") as handle:
                handle.write(b"new work")

    (applied,) = apply_items(ApplyRequest(plan, [plan.items[0].id], lambda path: True), cancel=write_behind)
    assert [o.reason for o in applied.outcomes] == ["keep_changed" if written == "a" else "changed"]
    assert (tmp_path / "b").exists() and (tmp_path / written).read_bytes()[:8] == b"new work"


def test_an_error_while_its_file_is_aside_and_its_name_taken_says_where_the_file_is(tmp_path: Path) -> None:
    """An I/O error in the comparison (raised between two chunks, where a read of a failing disk would),
    while someone took the name: the answer must say where the file is, not only the error."""
    data = os.urandom(30_000)
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(data)
    groups = [[os.fsencode(tmp_path / n) for n in ("a", "b")]]
    plan = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups))

    def failing_read() -> None:
        if any(n.startswith(".sysmcp-aside-") for n in os.listdir(tmp_path)):
            (tmp_path / "b").write_bytes(b"someone else's")
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    (applied,) = apply_items(ApplyRequest(plan, [plan.items[0].id], lambda path: True), cancel=failing_read)
    (aside,) = [n for n in os.listdir(tmp_path) if n.startswith(".sysmcp-aside-")]
    assert (tmp_path / aside).read_bytes() == data
    assert [o.reason for o in applied.outcomes] == [
        f"{os.strerror(errno.EIO)}; left as {aside} (its name was taken meanwhile)"
    ]


def test_a_file_that_cannot_go_back_under_its_name_is_said_to_be_left_aside_with_the_name_escaped(
    tmp_path: Path,
) -> None:
    """An extra whose bytes differ at the moment of acting goes back under its name, unless someone took
    the name meanwhile: the reason then says where the file is, escaped as ``ls -b`` does, so a newline,
    a terminal escape or a byte that is not UTF-8 in the name forges no line of the answer or of
    ``history --reclaim``, and the structured answer carries no lone surrogate."""
    base, name = os.fsencode(tmp_path), b"b\n\x1b[2K\xff"
    for copy, last in ((b"a", b"1"), (name, b"2")):  # one size, other bytes: as if the finder had erred
        with open(base + b"/" + copy, "wb") as handle:
            handle.write(b"a" * 30_000 + last)
    os.utime(base + b"/a", ns=(10**18, 10**18))  # the oldest: the kept copy
    groups = [[base + b"/a", base + b"/" + name]]
    plan = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups))
    (item,) = plan.items

    def take_the_name() -> None:  # the comparison's cancel(), the extra under its private name
        if not os.path.lexists(base + b"/" + name):
            with open(base + b"/" + name, "wb") as handle:
                handle.write(b"someone else's")

    (applied,) = apply_items(ApplyRequest(plan, [item.id], lambda path: True), cancel=take_the_name)
    (outcome,) = applied.outcomes
    (aside,) = [n for n in os.listdir(base) if n.startswith(b".sysmcp-aside-")]
    assert outcome.reason == f"differs; left as {escaped(aside)} (its name was taken meanwhile)"
    assert outcome.reason.isascii() and outcome.reason.isprintable()


def test_the_script_removes_no_duplicate_whose_kept_copy_is_gone_or_whose_bytes_differ_now(
    tmp_path: Path,
) -> None:
    """The script acts like reclaim: an extra goes only if its kept copy is still the planned file and
    their bytes are the same when it runs (else a plan run after the kept copy went leaves no copy)."""
    sets = {"gone": os.urandom(9_000), "differs": os.urandom(9_000), "fine": os.urandom(9_000)}
    for name, data in sets.items():
        for copy in ("a-keep", "b-extra"):
            (tmp_path / name / copy).parent.mkdir(exist_ok=True)
            (tmp_path / name / copy).write_bytes(data)
            os.utime(tmp_path / name / copy, ns=(10**18, 10**18))
    groups = [[os.fsencode(tmp_path / name / copy) for copy in ("a-keep", "b-extra")] for name in sets]
    plan = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups))
    assert sorted(os.path.basename(i.keep.path) for i in plan.items if i.keep) == [b"a-keep"] * 3
    (tmp_path / "gone" / "a-keep").unlink()
    with open(tmp_path / "differs" / "b-extra", "r+b") as handle:  # one byte, same size and mtime
        handle.write(b"\0" if sets["differs"][0] else b"\1")
    os.utime(tmp_path / "differs" / "b-extra", ns=(10**18, 10**18))
    done = run_script(render_script(plan), "--apply", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "gone" / "b-extra").read_bytes() == sets["gone"]
    assert (tmp_path / "differs" / "b-extra").exists() and not (tmp_path / "fine" / "b-extra").exists()
    assert f"skipped: {tmp_path}/gone/b-extra: the kept copy".encode() in done.stdout
    assert b"done: 1 file acted on, 2 skipped" in done.stdout


KILLED_ASIDE = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from sysmcp.reclaim import PlanRequest, ApplyRequest, apply_items, build_plan
    from tests.reclaim.test_reclaim import layout
    from sysmcp.reclaim import PlanRequest, apply_items, build_plan
    base = Path(sys.argv[1])
    groups = [[os.fsencode(base / n) for n in ("a", "app.log.1")]]
    plan = build_plan(PlanRequest(layout=layout(base / "none"), duplicates=groups))
    def die() -> None:  # the process dies (SIGKILL, power cut) with the file under its private name
        if any(n.startswith(".sysmcp-aside-") for n in os.listdir(base)):
            os._exit(9)
    apply_items(ApplyRequest(plan, [plan.items[0].id], lambda path: True), cancel=die)
    """
)


def test_a_file_left_aside_by_a_process_that_died_still_shows_its_name(tmp_path: Path) -> None:
    data = os.urandom(30_000)
    for name in ("a", "app.log.1"):
        (tmp_path / name).write_bytes(data)
    repo = Path(__file__).resolve().parents[2]
    died = subprocess.run(
        [sys.executable, "-c", KILLED_ASIDE, str(tmp_path)], cwd=repo, check=False, timeout=120
    )
    assert died.returncode == 9
    (aside,) = [n for n in os.listdir(tmp_path) if n.startswith(".sysmcp-aside-")]
    assert aside.endswith("-app.log.1") and (tmp_path / aside).read_bytes() == data


def test_the_scripts_dry_run_skips_a_duplicate_a_fifo_was_swapped_in_for_after_its_last_look_instead_of_hanging(
    tmp_path: Path,
) -> None:
    """An attacker who can write the directory swaps a FIFO in for the extra copy right after the script's
    last look at it (``[ -f ]``), before ``cmp`` opens it: the open would wait for a writer forever. The
    ``cmp`` in PATH does exactly that swap, then runs the real one; the ``sleep`` in PATH ends the script's
    wait at once, so the test takes no time."""
    data = os.urandom(9_000)
    for copy in ("a-keep", "b-extra"):
        (tmp_path / copy).write_bytes(data)
    plan = build_plan(
        PlanRequest(
            layout=layout(tmp_path / "none"),
            duplicates=[[os.fsencode(tmp_path / "a-keep"), os.fsencode(tmp_path / "b-extra")]],
        )
    )
    tools = tmp_path / "bin"
    tools.mkdir()
    extra = tmp_path / "b-extra"
    swapped = tmp_path / "swapped"  # the fake sleep returns once the swap is done: no race in the test
    os.mkfifo(swapped)
    (tools / "cmp").write_text(
        f"#!/bin/sh\nmv -- '{extra}' '{extra}.real' && mkfifo -- '{extra}'\n(: > '{swapped}') &\n"
        f'exec {shutil.which("cmp")} "$@"\n'
    )
    (tools / "sleep").write_text(f"#!/bin/sh\nread -r line < '{swapped}'\nexit 0\n")
    for tool in ("cmp", "sleep"):
        (tools / tool).chmod(0o755)
    work = tmp_path / "cwd"
    work.mkdir()
    (work / "plan.sh").write_text(render_script(plan), encoding="ascii")
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    try:
        done = subprocess.run(
            ["sh", "plan.sh"], capture_output=True, cwd=work, env=env, timeout=60, check=False
        )
    finally:
        with contextlib.suppress(OSError):  # a cmp left waiting on the FIFO (a hung script): its writer
            os.close(os.open(extra, os.O_WRONLY | os.O_NONBLOCK))
        os.close(os.open(swapped, os.O_RDONLY | os.O_NONBLOCK))  # and the wrapper's wait for a fake sleep
    assert done.returncode == 0, done.stderr
    assert f"skipped: {extra}: not compared with the kept copy in time".encode() in done.stdout
    assert b"would remove" not in done.stdout
    assert (tmp_path / "b-extra.real").read_bytes() == data


def test_a_duplicate_put_back_by_a_cancellation_goes_in_the_next_call_of_the_plan(tmp_path: Path) -> None:
    """Cancelled mid-comparison, the file went back under its name, its ctime moved by that rename: the
    next call, told by the log of the first (``tools.reclaim._relinked``), takes it for the planned file."""
    from sysmcp.tools.reclaim import _relinked

    data = os.urandom(30_000)
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(data)
    groups = [[os.fsencode(tmp_path / n) for n in ("a", "b")]]
    plan = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups))
    (item,) = plan.items

    class Cancelled(Exception):
        pass

    def cancel() -> None:  # the comparison's first cancel(), with b aside
        if any(n.startswith(".sysmcp-aside-") for n in os.listdir(tmp_path)):
            raise Cancelled

    logged: list[LogRecord] = []

    def told(item: Item, entry: PlannedFile, action: str, outcome: FileResult) -> None:
        path = os.fsdecode(entry.path)
        done = "done" if outcome.done else "skipped"
        logged.append(LogRecord(0.0, plan.id, item.id, path, action, done, outcome.reason, 0, 0))

    with pytest.raises(Cancelled):
        apply_items(ApplyRequest(plan, [item.id], lambda path: True, log=told), cancel=cancel)
    assert [r.reason for r in logged] == ["cancelled"] and (tmp_path / "b").read_bytes() == data
    (again,) = apply_items(ApplyRequest(plan, [item.id], lambda path: True, relinked=_relinked(plan, logged)))
    assert [o.reason for o in again.outcomes] == [None]
    assert not (tmp_path / "b").exists() and (tmp_path / "a").read_bytes() == data


@needs_proc
@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_deleted_open_file_given_to_another_user_since_the_plan_is_not_emptied(tmp_path: Path) -> None:
    """The approval named the file with its owner: once it is another user's, it is not the file the
    person said yes to, so it is left whole, as a container's log is."""
    name = tmp_path / "app.log"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(name), "300000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        holder.stdout.readline()
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(tmp_path),)
        )
        plan = build_plan(request)
        (item,) = plan.items
        fd_path = item.entries[0].path
        os.chown(fd_path, 65534, 65534)  # through the holder's descriptor: the same nameless inode
        (applied,) = apply_items(ApplyRequest(plan, [item.id], lambda path: True))
        assert [(o.done, o.reason) for o in applied.outcomes] == [(False, "owner")]
        assert os.stat(fd_path).st_size == 300_000
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


#: Holds the deleted ``app.log`` (argv 1) open, then, told to on stdin, closes it and holds on the same
#: descriptor number a deleted scratch file of its own, as a program's next temporary file.
SWAPPING_HOLDER = textwrap.dedent(
    """
    import os, sys
    log = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(log, b"x" * 300_000)
    os.unlink(sys.argv[1])
    print(log, flush=True)
    sys.stdin.readline()
    scratch = os.open(sys.argv[1] + ".scratch", os.O_CREAT | os.O_RDWR, 0o644)
    os.write(scratch, b"y" * 200_000)
    os.unlink(sys.argv[1] + ".scratch")
    os.dup2(scratch, log)
    os.close(scratch)
    print("swapped", flush=True)
    sys.stdin.read()
    """
)


@needs_proc
def test_a_deleted_open_file_whose_inode_number_went_to_the_holders_next_file_is_not_emptied(
    tmp_path: Path,
) -> None:
    """ext4 hands a freed inode number straight back: the holder closes the planned log and its next
    temporary file, deleted too, has that number on the same descriptor. The approval named the deleted
    file app.log, not the scratch file the process still works in: its former name says which it is."""
    name = tmp_path / "app.log"
    holder = subprocess.Popen(
        [sys.executable, "-c", SWAPPING_HOLDER, str(name)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        holder.stdout.readline()
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(tmp_path),)
        )
        (item,) = build_plan(request).items
        (entry,) = item.entries
        holder.stdin.write(b"swap\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == b"swapped\n"
        now = os.stat(entry.path)  # the scratch file, behind the same /proc/PID/fd/N
        reused = replace(entry, identity=replace(entry.identity, dev=now.st_dev, ino=now.st_ino))
        plan = Plan("p", 0.0, (), (replace(item, entries=(reused,)),))
        (applied,) = apply_items(ApplyRequest(plan, [item.id], lambda path: True))
        assert [(o.done, o.reason) for o in applied.outcomes] == [(False, "changed")]
        assert os.stat(entry.path).st_size == 200_000
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


@needs_proc
def test_the_scripts_truncation_skips_the_holders_next_file_given_the_planned_inode_number(
    tmp_path: Path,
) -> None:
    """The generated script too: the scratch file the holder now keeps on the planned descriptor, with
    the planned inode number (ext4 hands it straight back), is not the deleted app.log its review named;
    before the swap, the planned file (its name not ASCII) is the one it would empty."""
    name = tmp_path / "app \u00e9.log"
    holder = subprocess.Popen(
        [sys.executable, "-c", SWAPPING_HOLDER, str(name)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        holder.stdout.readline()
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(tmp_path),)
        )
        (item,) = build_plan(request).items
        (entry,) = item.entries
        script = tmp_path / "plan.sh"
        script.write_text(render_script(Plan("p", 0.0, (), (item,))))
        dry = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=False).stdout
        assert "would truncate: " in dry, dry
        holder.stdin.write(b"swap\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == b"swapped\n"
        now = os.stat(entry.path)
        reused = replace(entry, identity=replace(entry.identity, dev=now.st_dev, ino=now.st_ino))
        script.write_text(render_script(Plan("p", 0.0, (), (replace(item, entries=(reused,)),))))
        done = subprocess.run(["sh", str(script), "--apply"], capture_output=True, text=True, check=False)
        assert "another file is open there now" in done.stdout, done.stdout + done.stderr
        assert os.stat(entry.path).st_size == 200_000
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


@needs_proc
@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_the_scripts_truncation_skips_a_deleted_open_file_given_to_another_user_since_the_plan(
    tmp_path: Path,
) -> None:
    """As ``reclaim`` does (``owner``): the review named the file with its owner."""
    name = tmp_path / "app.log"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(name), "300000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        holder.stdout.readline()
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(tmp_path),)
        )
        plan = build_plan(request)
        (item,) = plan.items
        fd_path = item.entries[0].path
        os.chown(fd_path, 65534, 65534)
        script = tmp_path / "plan.sh"
        script.write_text(render_script(plan))
        done = subprocess.run(["sh", str(script), "--apply"], capture_output=True, text=True, check=False)
        assert "its owner changed since the plan" in done.stdout, done.stdout + done.stderr
        assert os.stat(fd_path).st_size == 300_000
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
