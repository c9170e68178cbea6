"""Duplicates replaced by hard links to the kept copy (``ITEM:link``), on real filesystems."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from sysmcp.engine.faults import Refused
from sysmcp.reclaim import LINK, ApplyRequest, Plan, PlanRequest, apply_items, build_plan, choose
from tests.loopfs import in_private_namespace, needs_loop_mounts
from tests.profile import needs_xattrs
from tests.reclaim.test_reclaim import layout

pytestmark = needs_xattrs


def copies(base: Path, names: tuple[str, ...] = ("keep", "b", "c", "d"), size: int = 40_000) -> list[Path]:
    data = os.urandom(size)
    paths = [base / name for name in names]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return paths


def plan_for(base: Path, paths: list[Path]) -> Plan:
    groups = [[os.fsencode(p) for p in paths]]
    return build_plan(
        PlanRequest(layout=layout(base / "none"), scope=(os.fsencode(base),), duplicates=groups)
    )


def outcomes(plan: Plan, allowed: object = None) -> dict[str, str | None]:
    (item,) = plan.items
    check = allowed if callable(allowed) else (lambda path: True)
    (applied,) = apply_items(ApplyRequest(plan, [item.id + LINK], check))
    assert applied.action == "link"
    return {os.path.basename(os.fsdecode(o.path)): o.reason for o in applied.outcomes}


def leftovers(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if name.startswith(".sysmcp-link-")]


def test_each_duplicate_becomes_a_name_of_the_kept_copy_and_keeps_its_content(tmp_path: Path) -> None:
    keep, *extras = copies(tmp_path)
    data = keep.read_bytes()
    plan = plan_for(tmp_path, [keep, *extras])
    (item,) = plan.items
    assert item.linkable and item.keep is not None and item.keep.path == os.fsencode(keep)
    assert outcomes(plan) == {"b": None, "c": None, "d": None}
    for extra in extras:
        assert os.lstat(extra).st_ino == os.lstat(keep).st_ino and extra.read_bytes() == data
    assert os.lstat(keep).st_nlink == 4 and leftovers(tmp_path) == []


def test_a_duplicate_changed_replaced_or_swapped_for_a_symlink_after_the_plan_is_left_alone(
    tmp_path: Path,
) -> None:
    keep, grown, replaced, swapped, same = copies(tmp_path, ("keep", "grown", "replaced", "swapped", "same"))
    plan = plan_for(tmp_path, [keep, grown, replaced, swapped, same])
    with open(grown, "ab") as handle:
        handle.write(b"new data the user wrote")
    (tmp_path / "new").write_bytes(replaced.read_bytes())
    os.replace(tmp_path / "new", replaced)  # same name and content, another inode
    os.unlink(swapped)
    os.symlink(keep, swapped)
    assert outcomes(plan) == {"grown": "changed", "replaced": "changed", "swapped": "symlink", "same": None}
    assert grown.read_bytes().endswith(b"new data the user wrote") and os.path.islink(swapped)
    assert os.lstat(replaced).st_ino != os.lstat(keep).st_ino
    assert os.lstat(same).st_ino == os.lstat(keep).st_ino and leftovers(tmp_path) == []


def test_a_kept_copy_that_changed_or_became_a_symlink_gets_no_links(tmp_path: Path) -> None:
    keep, b, c = copies(tmp_path, ("keep", "b", "c"))
    plan = plan_for(tmp_path, [keep, b, c])
    with open(keep, "ab") as handle:
        handle.write(b"x")
    assert outcomes(plan) == {"b": "keep_changed", "c": "keep_changed"}
    keep2, b2 = copies(tmp_path / "two", ("keep", "b"))
    plan = plan_for(tmp_path / "two", [keep2, b2])
    os.rename(keep2, tmp_path / "two/moved")
    os.symlink(tmp_path / "two/moved", keep2)  # the kept name leads elsewhere now: never followed
    assert outcomes(plan) == {"b": "keep_changed"}
    assert os.lstat(b2).st_nlink == 1 and leftovers(tmp_path / "two") == []


def test_a_kept_copy_moved_away_between_the_comparison_and_the_link_leaves_the_extra_saying_so(
    tmp_path: Path,
) -> None:
    keep, extra = copies(tmp_path, ("keep", "b"))
    plan = plan_for(tmp_path, [keep, extra])
    calls: list[None] = []

    def move_the_kept_copy() -> None:  # the first call is before the file, the second in the comparison
        calls.append(None)
        if len(calls) == 2:
            os.rename(keep, tmp_path / "moved")

    (applied,) = apply_items(
        ApplyRequest(plan, [plan.items[0].id + LINK], lambda p: True), cancel=move_the_kept_copy
    )
    assert [o.reason for o in applied.outcomes] == ["keep_gone"]
    assert extra.read_bytes() == (tmp_path / "moved").read_bytes() and extra.stat().st_nlink == 1


def test_a_directory_on_the_way_swapped_for_a_symlink_is_not_followed(tmp_path: Path) -> None:
    keep, inner = copies(tmp_path, ("keep", "sub/inner"))
    plan = plan_for(tmp_path, [keep, inner])
    os.rename(tmp_path / "sub", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", tmp_path / "sub")
    assert outcomes(plan) == {"inner": "symlink"}
    assert os.lstat(tmp_path / "elsewhere/inner").st_nlink == 1


def test_a_link_plan_whose_kept_copy_is_outside_the_roots_is_refused_whole(tmp_path: Path) -> None:
    keep, inside = copies(tmp_path, ("out/keep", "in/b"))
    plan = plan_for(tmp_path, [keep, inside])
    only_in = os.fsencode(tmp_path / "in")
    with pytest.raises(Refused, match="outside the roots"):
        outcomes(plan, lambda path: path.startswith(only_in))
    assert os.lstat(inside).st_nlink == 1


def test_a_plan_says_which_items_can_be_linked_and_refuses_others(tmp_path: Path) -> None:
    keep, b = copies(tmp_path, ("keep", "b"))
    plan = plan_for(tmp_path, [keep, b])
    (item,) = plan.items
    with pytest.raises(Refused, match="named twice"):
        choose(plan, [item.id, item.id + LINK])
    (tmp_path / "var/log").mkdir(parents=True)
    (tmp_path / "var/log/x.1").write_bytes(b"y" * 5000)
    logs = build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",)))
    with pytest.raises(Refused, match="hard links"):
        choose(logs, [logs.items[0].id + LINK])


def test_an_extra_that_is_already_a_link_of_the_kept_copy_is_said_so(tmp_path: Path) -> None:
    keep, b = copies(tmp_path, ("keep", "b"))
    plan = plan_for(tmp_path, [keep, b])
    os.unlink(b)
    os.link(keep, b)
    assert outcomes(plan) == {"b": "linked"}


NAMESPACE = textwrap.dedent(
    """
    import json, os, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    image, mnt = sys.argv[2], sys.argv[3]
    subprocess.run(["mount", "-o", "loop", image, mnt], check=True)
    from pathlib import Path
    from tests.reclaim.test_reclaim_link import copies, plan_for
    from sysmcp.reclaim._plan import LINK, ApplyRequest, apply_items
    from sysmcp.reclaim._plan import LINK, apply_items
    base = Path(mnt)
    paths = copies(base, ("keep", "b", "c", "sub/d", "sub/changed"), 3_000_000)
    plan = plan_for(base, paths)
    (item,) = plan.items
    with open(paths[-1], "ab") as handle:
        handle.write(b"changed after the plan")
    planned_changed = item.entries[-1].identity.disk
    (applied,) = apply_items(ApplyRequest(plan, [item.id + LINK], lambda path: True))
    inodes = {p.name: os.lstat(p).st_ino for p in paths}
    print(json.dumps({
        "planned": item.bytes - planned_changed, "freed": applied.freed,
        "reasons": {os.path.basename(o.path).decode(): o.reason for o in applied.outcomes},
        "inodes": inodes, "fs": subprocess.run(["stat", "-f", "-c", "%T", mnt], capture_output=True,
                                                text=True).stdout.strip(),
    }))
    """
)


def test_on_a_loop_ext4_the_bytes_freed_by_linking_match_the_plan(tmp_path: Path) -> None:
    unshare, mkfs = shutil.which("unshare"), shutil.which("mkfs.ext4")
    if unshare is None or mkfs is None or os.geteuid() != 0:
        pytest.skip("needs root, unshare and mkfs.ext4 to mount a loop ext4 privately")
    if subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("unshare -m is not permitted here")
    image, mnt = tmp_path / "dups.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(64 << 20)
    subprocess.run([mkfs, "-q", "-F", str(image)], check=True, capture_output=True)
    repo = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [
            unshare,
            "-m",
            "--propagation",
            "private",
            sys.executable,
            "-c",
            NAMESPACE,
            repo,
            str(image),
            str(mnt),
        ],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["fs"] == "ext2/ext3", report  # stat -f names ext4 so: the loop filesystem really was there
    assert report["reasons"] == {"b": None, "c": None, "d": None, "changed": "changed"}
    inodes = report["inodes"]
    assert inodes["b"] == inodes["c"] == inodes["d"] == inodes["keep"] != inodes["changed"]
    assert abs(report["freed"] - report["planned"]) <= 0.05 * report["planned"], report


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_the_kept_copy_is_never_one_in_a_directory_another_user_can_change(tmp_path: Path) -> None:
    """Root's older copy lies in the second user's directory: kept, the extras would go and that user
    could then delete the only copy left. A copy in root's own directory stays instead."""
    theirs, ours, two = (
        tmp_path / "theirs" / "run.sh",
        tmp_path / "srv" / "run.sh",
        tmp_path / "srv" / "two.sh",
    )
    copies(tmp_path, ("theirs/run.sh", "srv/run.sh", "srv/two.sh"))
    os.chown(theirs.parent, 65534, 65534)
    os.utime(theirs, ns=(1, 1))  # the oldest: what name order and age alone would keep
    plan = plan_for(tmp_path, [theirs, ours, two])
    (item,) = plan.items
    assert item.keep is not None and item.keep.path in (os.fsencode(ours), os.fsencode(two))
    extras = {e.path for e in item.entries}
    assert extras == {os.fsencode(p) for p in (theirs, ours, two)} - {item.keep.path}


def test_why_a_link_is_refused_names_the_file_escaped(tmp_path: Path) -> None:
    keep, evil = copies(tmp_path, ("keep", "x\x1b[2J\x1b]0;pwned\x07"))
    evil.chmod(0o600)
    plan = plan_for(tmp_path, [keep, evil])
    (item,) = plan.items
    with pytest.raises(Refused) as refused:
        choose(plan, [item.id + LINK])
    assert "x\\033[2J\\033]0;pwned\\a has another mode" in str(refused.value.detail)
    assert item.no_link is not None and "\x1b" not in item.no_link


EMLINK_SCENARIO = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from sysmcp.reclaim import LINK, ApplyRequest, PlanRequest, apply_items, build_plan
    from tests.loopfs import loop_mount
    from tests.reclaim.test_reclaim import layout
    mnt = Path(sys.argv[1]) / "mnt"
    loop_mount(Path(sys.argv[1]) / "image", mnt, 128 << 20, ["mkfs.ext4", "-q", "-F", "-N", "1000"])
    data = os.urandom(9_000)
    for name, mtime in (("keep", 10**9), ("b", 2 * 10**9)):
        (mnt / name).write_bytes(data)
        os.utime(mnt / name, (mtime, mtime))
    for d in range(65):  # the kept copy with all the 65,000 names ext4 allows an inode
        (mnt / f"names-{d}").mkdir()
        for n in range(1_000 - (d == 0)):
            os.link(mnt / "keep", mnt / f"names-{d}/{n}")
    groups = [[os.fsencode(mnt / "keep"), os.fsencode(mnt / "b")]]
    plan = build_plan(PlanRequest(layout=layout(mnt / "none"), duplicates=groups))
    (applied,) = apply_items(ApplyRequest(plan, [plan.items[0].id + LINK], lambda path: True))
    print(json.dumps({
        "nlink": os.lstat(mnt / "keep").st_nlink, "reasons": [o.reason for o in applied.outcomes],
        "b": (mnt / "b").read_bytes() == data and os.lstat(mnt / "b").st_ino != os.lstat(mnt / "keep").st_ino,
        "left": sorted(n for n in os.listdir(mnt) if n.startswith(".sysmcp-")),
    }))
    """
)


@pytest.mark.slow
@needs_loop_mounts("mkfs.ext4")
def test_a_kept_copy_with_all_the_names_its_filesystem_allows_leaves_the_extra_in_place_saying_so() -> None:
    """linkat fails with EMLINK (ext4: 65,000 names): the extra goes back under its name, and the reason
    is the system's own, not "a symbolic link is there now" (EMLINK is what FreeBSD's O_NOFOLLOW says)."""
    found = in_private_namespace(["-c", EMLINK_SCENARIO], "sysmcp-reclaim-emlink-")
    assert found == {"nlink": 65_000, "reasons": [os.strerror(errno.EMLINK)], "b": True, "left": []}


@pytest.mark.parametrize(("mode", "gid"), [(0o666, 0), (0o664, 100)])
def test_copies_others_may_write_are_not_linked_since_one_name_would_write_every_one(
    tmp_path: Path, mode: int, gid: int
) -> None:
    """A copy in a directory only its owner may enter, writable by others (or by a group the owner
    shares: ``users``) like a copy in a public one: as a hard link to the public copy, anyone who reaches
    that name would write the private one too. Removing the extra is still offered."""
    private, public = copies(tmp_path, ("private/app.conf", "public/app.conf"))
    (tmp_path / "private").chmod(0o700)
    for path in (private, public):
        os.chown(path, os.geteuid(), gid)
        path.chmod(mode)
    os.utime(public, ns=(1, 1))  # the oldest: the kept copy
    plan = plan_for(tmp_path, [private, public])
    (item,) = plan.items
    assert item.keep is not None and item.keep.path == os.fsencode(public)
    assert item.no_link is not None and "may be written by" in item.no_link, item.no_link
    with pytest.raises(Refused, match="hard links"):
        choose(plan, [item.id + LINK])
    assert choose(plan, [item.id]) == [(item, "delete")]


def _shares_its_group() -> bool:
    """Whether the running user's group is another account's too (RHEL gives root's to operator, sync,
    halt and shutdown as their primary one), or lists members: then it is not the user's own."""
    import grp
    import pwd

    gid = os.getegid()
    others = [a for a in pwd.getpwall() if a.pw_gid == gid and a.pw_uid != os.geteuid()]
    return bool(others) or any(g.gr_mem for g in grp.getgrall() if g.gr_gid == gid)


@pytest.mark.skipif(_shares_its_group(), reason="the running user's group is not its own on this host")
def test_copies_only_their_owner_and_their_own_group_may_write_can_be_linked(tmp_path: Path) -> None:
    """0664 with the owner's own group (a user private group, as most distributions give): linking opens
    the file to no one new."""
    keep, extra = copies(tmp_path, ("keep", "b"))
    for path in (keep, extra):
        path.chmod(0o664)
    plan = plan_for(tmp_path, [keep, extra])
    (item,) = plan.items
    assert item.no_link is None and item.linkable


def test_copies_an_acl_lets_another_user_write_are_not_linked(tmp_path: Path) -> None:
    """0664 with the owner's own group, but an ACL entry gives another user (nobody) write: the group bits
    are then the ACL's mask, and that user could write the private copy through the kept copy's name."""
    private, public = copies(tmp_path, ("private/app.conf", "public/app.conf"))
    (tmp_path / "private").chmod(0o700)
    # system.posix_acl_access: version 2, then (tag, permissions, id): user::rw-, user:nobody:rw-,
    # group::r--, mask::rw-, other::r--
    entries = [(0x01, 6, 0xFFFFFFFF), (0x02, 6, 65534), (0x04, 4, 0xFFFFFFFF), (0x10, 6, 0xFFFFFFFF)]
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in [*entries, (0x20, 4, 0xFFFFFFFF)])
    for path in (private, public):
        os.setxattr(path, "system.posix_acl_access", acl)
    os.utime(public, ns=(1, 1))
    assert stat.S_IMODE(os.stat(public).st_mode) == 0o664
    plan = plan_for(tmp_path, [private, public])
    (item,) = plan.items
    assert item.no_link is not None and "its ACL names" in item.no_link, item.no_link


def test_a_plan_kept_before_links_were_refused_for_copies_others_may_write_links_none_of_them(
    tmp_path: Path,
) -> None:
    """A plan kept by the previous version offers ``:link`` for 0666 copies: acting looks again on the
    open files, and leaves each such copy as it was."""
    private, public = copies(tmp_path, ("private/app.conf", "public/app.conf"))
    (tmp_path / "private").chmod(0o700)
    for path in (private, public):
        path.chmod(0o666)
    os.utime(public, ns=(1, 1))
    plan = plan_for(tmp_path, [private, public])
    older = replace(plan, items=tuple(replace(item, no_link=None) for item in plan.items))
    assert outcomes(older) == {"app.conf": "writable_by_others"}
    assert os.lstat(private).st_ino != os.lstat(public).st_ino and os.lstat(public).st_nlink == 1


#: Copies of uid/gid 4242 (mode 0664) planned with /etc/passwd and /etc/group replaced, in a private
#: mount namespace, by the accounts each case gives: whether ``:link`` is offered (``no_link``).
PRIVATE_GROUP_SCENARIO = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from pathlib import Path
    from sysmcp.reclaim import PlanRequest, build_plan
    from tests.reclaim.test_reclaim import layout
    work = Path(sys.argv[1])
    root = "root:x:0:0::/root:/bin/sh\\n"
    cases = {
        "alone": (root + "alice:x:4242:4242::/home/alice:/bin/sh\\n", "root:x:0:\\nalice:x:4242:\\n"),
        "bob_primary": (
            root + "alice:x:4242:4242::/home/alice:/bin/sh\\nbob:x:4243:4242::/home/bob:/bin/sh\\n",
            "root:x:0:\\nalice:x:4242:\\n",
        ),
        "gid_shared": (
            root + "alice:x:4242:4242::/home/alice:/bin/sh\\nbob:x:4243:4243::/home/bob:/bin/sh\\n",
            "root:x:0:\\nalice:x:4242:\\nbob:x:4243:\\nteam:x:4242:bob\\n",
        ),
    }
    found = {}
    for case, (passwd, group) in cases.items():
        for name, text in (("passwd", passwd), ("group", group)):
            (work / f"{case}.{name}").write_text(text)
            subprocess.run(["mount", "--bind", str(work / f"{case}.{name}"), f"/etc/{name}"], check=True)
        data = os.urandom(5_000)
        paths = [work / case / "private" / "app.conf", work / case / "public" / "app.conf"]
        for path in paths:
            path.parent.mkdir(parents=True)
            path.write_bytes(data)
            os.chown(path, 4242, 4242)
            path.chmod(0o664)
        os.utime(paths[1], ns=(1, 1))
        groups = [[os.fsencode(p) for p in paths]]
        plan = build_plan(PlanRequest(layout=layout(work / "none"), duplicates=groups))
        found[case] = [item.no_link for item in plan.items]
    print(json.dumps(found))
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to other users and mounting over /etc needs root")
def test_a_group_another_user_has_by_its_primary_gid_or_another_entry_is_not_the_owners_own() -> None:
    """0664 copies of alice's group are linked only while that group is hers alone. /etc/group's member
    list names supplementary members only: bob, whose primary group it is, writes them too; and so does
    bob as a member of another group entry with the same gid (``groupadd -o``), which ``getgrgid`` does
    not return. Either way the private copy would be written through the public one's name."""
    found = in_private_namespace(["-c", PRIVATE_GROUP_SCENARIO], "sysmcp-reclaim-groups-")
    assert found["alone"] == [None]
    for case in ("bob_primary", "gid_shared"):
        (why,) = found[case]
        assert why is not None and "its group" in why, (case, why)


def test_a_kept_copy_rewritten_between_two_calls_of_a_link_item_is_compared_again(tmp_path: Path) -> None:
    """The second call of an item cut in two overlooks the ctime its own links moved on the kept copy
    (``relinked``), nothing else: its owner rewriting it between the calls, same size and mtime put back
    (what only its ctime would tell), leaves the next extra unlinked, since the bytes are compared when
    acting. An extra's own ctime is still compared: one rewritten the same way is ``changed``."""
    from sysmcp.reclaim import FileResult, Item, LogRecord, PlannedFile
    from sysmcp.tools.reclaim import _relinked

    keep, b, c, d = copies(tmp_path)
    os.utime(keep, ns=(1, 1))
    plan = plan_for(tmp_path, [keep, b, c, d])
    (item,) = plan.items
    assert item.keep is not None and item.keep.path == os.fsencode(keep)
    logged: list[LogRecord] = []

    def told(item: Item, entry: PlannedFile, action: str, outcome: FileResult) -> None:
        done = "done" if outcome.done else "skipped"
        logged.append(
            LogRecord(0.0, plan.id, item.id, os.fsdecode(entry.path), action, done, outcome.reason, 0, 0)
        )

    first = replace(plan, items=(replace(item, entries=item.entries[:1]),))
    (applied,) = apply_items(ApplyRequest(first, [item.id + LINK], lambda path: True, log=told))
    assert [o.reason for o in applied.outcomes] == [None]
    relinked = _relinked(plan, logged)
    assert (item.keep.identity.dev, item.keep.identity.ino) in relinked
    for path in (keep, d):  # the kept copy (and b, its name now) and the last extra, as their owner may
        planned = os.stat(path)
        with open(path, "r+b") as handle:
            handle.write(b"rewritten")
        os.utime(path, ns=(planned.st_atime_ns, planned.st_mtime_ns))
    rest = replace(plan, items=(replace(item, entries=item.entries[1:]),))
    (again,) = apply_items(ApplyRequest(rest, [item.id + LINK], lambda path: True, relinked=relinked))
    names = {os.path.basename(os.fsdecode(o.path)): o.reason for o in again.outcomes}
    assert names == {"c": "differs", "d": "changed"}
    assert os.lstat(c).st_ino != os.lstat(keep).st_ino and os.lstat(d).st_ino != os.lstat(keep).st_ino


@pytest.mark.parametrize("acl", ["system.nfs4_acl", "system.richacl"])
def test_copies_an_nfs4_acl_governs_are_taken_for_copies_others_may_write(tmp_path: Path, acl: str) -> None:
    """An NFSv4 ACL (what an NFS mount lists as ``system.nfs4_acl``) may let another user write a 0644
    file, and no mask in the mode shows it: such copies are not made one file. (The attribute is given
    here as an NFS mount lists it: no NFS server is started for the test.)"""
    from sysmcp.reclaim._classes import written_by_others

    (path,) = copies(tmp_path, ("app.conf",))
    path.chmod(0o644)
    st = os.stat(path)
    assert written_by_others(st, {}) is None
    assert written_by_others(st, {acl: b"\0\0\0\1"}) == "the users and groups its ACL names"
