"""The reclaim scenarios, each run by ``reclaim_namespace.in_namespace`` on a fresh tmpfs of its own.

Each function takes the tmpfs and returns plain facts for the test to assert on. Run as
``python -m tests.security.reclaim_scenarios NAME ARGS`` (only inside a private mount namespace).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sysmcp.engine.faults import Refused
from sysmcp.history.store import Store
from sysmcp.reclaim import LINK, ActionLog, ApplyRequest, ItemResult, LogRecord, Plan, apply_items, read_log
from sysmcp.reclaim._keep import LOG_BATCH
from sysmcp.tools.reclaim import where_logged
from sysmcp.tools.reclaim_plan import item_view
from sysmcp.tools.typed import to_json
from tests.security.reclaim_namespace import (
    NOBODY,
    as_nobody,
    duplicates_plan,
    plan_of,
    run,
    write_as_nobody,
)

OLD, NEWER = 1_000_000_000, 1_500_000_000  # mtimes (s) that make "the oldest copy" unambiguous


def put(path: Path, data: bytes, mode: int = 0o644, mtime: int = OLD, owner: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chown(path, owner, owner)
    os.chmod(path, mode)
    os.utime(path, (mtime, mtime))


def everything(plan: Plan) -> list[str]:
    return [item.id for item in plan.items]


def reasons(applied: list[ItemResult]) -> dict[str, str | None]:
    return {
        os.fsdecode(o.path).rsplit("/", 2)[-2] + "/" + os.path.basename(os.fsdecode(o.path)): o.reason
        for a in applied
        for o in a.outcomes
    }


def looked(path: Path) -> dict[str, Any]:
    st = os.lstat(path)
    return {
        "uid": st.st_uid,
        "mode": oct(st.st_mode),
        "ino": st.st_ino,
        "nlink": st.st_nlink,
        "data": hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else None,
    }


def link_across_owners(top: Path) -> dict[str, Any]:
    """Root's run.sh twice (0755); nobody drops an identical 0666 one whose name sorts first."""
    r = top / "r"
    data = b"#!/bin/sh\necho run\n" * 300
    put(r / "bin/run.sh", data, 0o755, OLD)
    put(r / "sbin/run.sh", data, 0o755, NEWER)
    (r / "0").mkdir()
    os.chown(r / "0", NOBODY, NOBODY)
    write_as_nobody(r / "0/run.sh", data, 0o666)
    plan = duplicates_plan(r)
    views = [to_json(item_view(item)) for item in plan.items]
    chosen = [item.id + LINK if item.linkable else item.id for item in plan.items]
    applied = apply_items(ApplyRequest(plan, chosen, lambda path: True))
    return {
        "views": views,
        "reasons": reasons(applied),
        "bin": looked(r / "bin/run.sh"),
        "sbin": looked(r / "sbin/run.sh"),
        "nobody": looked(r / "0/run.sh"),
    }


def link_needs_matching_attributes(top: Path) -> dict[str, Any]:
    """Pairs of root's copies differing in mode, in group, in an extended attribute, or in nothing."""
    r = top / "r"
    for name, (mode, group) in {"mode": (0o600, 0), "group": (0o644, NOBODY), "same": (0o644, 0)}.items():
        data = name.encode() * 5000
        put(r / name / "a", data, 0o644, OLD)
        put(r / name / "b", data, mode, NEWER)
        os.chown(r / name / "b", 0, group)
    data = b"xattr" * 5000
    put(r / "xattr/a", data, 0o644, OLD)
    put(r / "xattr/b", data, 0o644, NEWER)
    os.setxattr(r / "xattr/b", "trusted.sysmcp", b"label", follow_symlinks=False)
    plan = duplicates_plan(r)
    views = {
        os.path.basename(os.path.dirname(v["kept_copy"])): v
        for v in (to_json(item_view(i)) for i in plan.items)
    }
    refused = []
    for item in plan.items:
        if not item.linkable:
            try:
                apply_items(ApplyRequest(plan, [item.id + LINK], lambda path: True))
            except Refused as exc:
                refused.append(exc.detail)
    return {"views": views, "refused": refused}


def replaced_after_hashing(top: Path) -> dict[str, Any]:
    """An editor saves over an extra (a new file renamed over it) after its bytes were hashed."""
    r = top / "r"
    data = os.urandom(50_000)
    put(r / "a", data, mtime=OLD)
    put(r / "b", data, mtime=NEWER)
    from sysmcp.tools.reclaim_plan import duplicate_groups

    groups = duplicate_groups([r])  # hashed here ...
    put(r / "b.new", b"the user's new work" * 1000, mtime=NEWER)
    os.rename(r / "b.new", r / "b")  # ... saved over here ...
    plan = plan_of(groups, [r], r)  # ... planned here (the plan looks at the files again now)
    applied = apply_items(ApplyRequest(plan, everything(plan), lambda path: True))
    return {"reasons": reasons(applied), "b": (r / "b").read_bytes()[:19].decode()}


def bytes_differ_at_acting(top: Path) -> dict[str, Any]:
    """A plan that holds two files of one size but other bytes (as if the finder had erred)."""
    r = top / "r"
    put(r / "a", b"a" * 40_000 + b"1", mtime=OLD)
    put(r / "b", b"a" * 40_000 + b"2", mtime=NEWER)
    plan = plan_of([[os.fsencode(r / "a"), os.fsencode(r / "b")]], [r], r)
    applied = apply_items(ApplyRequest(plan, everything(plan), lambda path: True))
    return {"reasons": reasons(applied), "b": (r / "b").exists()}


def kept_copy_gone_or_changed(top: Path) -> dict[str, Any]:
    """Three sets; after the plan one kept copy is deleted, one replaced, one appended to."""
    r = top / "r"
    for name in ("gone", "replaced", "grown"):
        data = name.encode() * 9000
        put(r / name / "a-keep", data, mtime=OLD)  # first by name too: a keep by name picks it
        put(r / name / "extra", data, mtime=NEWER)
    plan = duplicates_plan(r)
    os.unlink(r / "gone/a-keep")
    put(r / "replaced/new", b"other" * 9000)
    os.rename(r / "replaced/new", r / "replaced/a-keep")
    with open(r / "grown/a-keep", "ab") as handle:
        handle.write(b"more")
    applied = apply_items(ApplyRequest(plan, everything(plan), lambda path: True))
    return {"reasons": reasons(applied), "left": sorted(p.name for p in r.glob("*/extra"))}


def kept_copy_outside_the_roots(top: Path) -> dict[str, Any]:
    """An unconfined plan keeps out/k (the oldest); a server confined to r/ is asked to act on it."""
    data = os.urandom(30_000)
    put(top / "out/k", data, mtime=OLD)
    put(top / "r/x", data, mtime=NEWER)
    plan = duplicates_plan(top)
    inside = os.fsencode(top / "r") + b"/"
    try:
        applied = apply_items(ApplyRequest(plan, everything(plan), lambda path: path.startswith(inside)))
        refusal = None
    except Refused as exc:
        applied, refusal = [], exc.detail
    return {
        "refusal": refusal,
        "reasons": reasons(applied),
        "x": (top / "r/x").exists(),
        "kept": item_view(plan.items[0]).kept_copy,
    }


def renamed_over_after_the_look(top: Path) -> dict[str, Any]:
    """nobody's duplicates in nobody's directory; right after reclaim looked at each extra and found it
    as planned, nobody renames another file of theirs over its name."""
    found: dict[str, Any] = {}
    for way in ("delete", "link"):
        d = top / way
        d.mkdir()
        os.chown(d, NOBODY, NOBODY)
        data = os.urandom(20_000)
        for name, mtime in (("a", OLD), ("b", NEWER)):
            write_as_nobody(d / name, data, 0o644)
            os.utime(d / name, (mtime, mtime))
        write_as_nobody(d / "precious", b"nobody's only copy of this" * 100, 0o644)
        plan = duplicates_plan(d)
        (item,) = plan.items

        def swap(path: bytes, d: Path = d) -> None:
            as_nobody("mv", "-f", str(d / "precious"), os.fsdecode(path))

        chosen = [item.id + LINK if way == "link" else item.id]
        applied = apply_items(ApplyRequest(plan, chosen, lambda path: True, between=swap))
        found[way] = {
            "reasons": reasons(applied),
            "b": (d / "b").read_bytes()[:26].decode(errors="replace"),
            "names": sorted(os.listdir(d)),
        }
    return found


def mounted_over_after_the_look(top: Path) -> dict[str, Any]:
    """Right after reclaim looked at an extra, a file is bind-mounted on its name."""
    data = os.urandom(20_000)
    put(top / "r/a", data)
    put(top / "r/b", data, mtime=NEWER)
    put(top / "out/secret", b"mounted over b")
    plan = duplicates_plan(top / "r")

    def mount(path: bytes) -> None:
        subprocess.run(["mount", "--bind", str(top / "out/secret"), os.fsdecode(path)], check=True)

    applied = apply_items(ApplyRequest(plan, everything(plan), lambda path: True, between=mount))
    subprocess.run(["umount", str(top / "r/b")], check=True)
    return {"reasons": reasons(applied), "b": (top / "r/b").read_bytes() == data}


def freed_by_another_during_the_comparison(top: Path) -> dict[str, Any]:
    """While reclaim compares an extra with its kept copy, another process removes 4 MiB of its own on
    the same filesystem: the bytes reclaim says it freed are the extra's alone."""
    data = os.urandom(300_000)
    put(top / "r/a", data)
    put(top / "r/b", data, mtime=NEWER)
    put(top / "theirs", os.urandom(4 << 20))
    plan = duplicates_plan(top / "r")

    calls = []

    def theirs_go() -> None:  # the first call is before the file, the second in the comparison
        calls.append(1)
        if len(calls) == 2:
            os.unlink(top / "theirs")

    (applied,) = apply_items(ApplyRequest(plan, everything(plan), lambda path: True), cancel=theirs_go)
    return {"freed": applied.freed, "planned": plan.items[0].bytes, "theirs": (top / "theirs").exists()}


def log_on_a_full_disk(top: Path) -> dict[str, Any]:
    """The disk of the history store fills once the log's first batch is in: the rest is on stderr only."""
    state = top / "state"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "state", str(state)], check=True)
    store = Store.open(state / "sysmcp", time.time)
    actions = ActionLog(store, time.time)
    for n in range(450):
        if n == LOG_BATCH:  # the first batch went in as it filled
            with contextlib.suppress(OSError), open(state / "filler", "wb") as filler:
                while True:
                    filler.write(bytes(65536))
        actions.record(LogRecord(time.time(), "p1", "log-1", f"/var/log/{n}.1", "delete", "done", None, 1, 1))
    actions.flush()
    return {
        "in_store": len(read_log(store, 1000)),
        "unsaved": actions.unsaved,
        "words": where_logged(actions),
    }


def snapshot(base: Path) -> dict[str, tuple[str, int, int, int, int, int]]:
    """Every regular file under ``base``: content digest, owner, group, mode, inode, mtime."""
    files = {}
    for directory, _dirs, names in os.walk(base):
        for name in names:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) or os.path.ismount(path):
                with open(path, "rb") as handle:
                    digest = hashlib.blake2b(handle.read(), digest_size=16).hexdigest()
                files[path] = (digest, st.st_uid, st.st_gid, st.st_mode, st.st_ino, st.st_mtime_ns)
    return files


MUTATIONS = (
    "other_bytes",
    "delete",
    "symlink_out",
    "hardlink_out",
    "chmod",
    "chown",
    "rename_over",
    "bind_over",
    "byte_in_place",
)


def mutate(rng: random.Random, kind: str, target: Path, case: Path, binds: list[str]) -> None:
    secret = case / "out/secret"
    try:
        if kind == "other_bytes":
            fresh = target.with_name(".fresh")
            fresh.write_bytes(os.urandom(rng.randint(1, 3000)))
            os.rename(fresh, target)
        elif kind == "delete":
            os.unlink(target)
        elif kind == "symlink_out":
            os.unlink(target)
            os.symlink(secret, target)
        elif kind == "hardlink_out":
            os.unlink(target)
            os.link(secret, target)
        elif kind == "chmod":
            os.chmod(target, 0o666)
        elif kind == "chown":
            st = os.lstat(target)
            other = 0 if st.st_uid == NOBODY else NOBODY
            os.chown(target, other, other)
        elif kind == "rename_over":
            others = [p for p in case.glob("r/*/*") if p != target and p.is_file() and not p.is_symlink()]
            if others:
                os.rename(rng.choice(others), target)
        elif kind == "bind_over":
            bound = subprocess.run(["mount", "--bind", str(secret), str(target)], capture_output=True)
            if bound.returncode == 0:  # a target gone or not a file: one mutation less
                binds.append(str(target))
        elif kind == "byte_in_place":
            st = os.lstat(target)
            if st.st_size:
                with open(target, "r+b") as handle:
                    handle.seek(rng.randrange(st.st_size))
                    byte = handle.read(1)
                    handle.seek(-1, os.SEEK_CUR)
                    handle.write(bytes([byte[0] ^ 0xFF]))
                os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    except OSError:
        pass  # the target was already moved or is a mount point now: one mutation less


def one_case(seed: int, top: Path, tally: dict[str, int]) -> list[str]:
    """One seeded run: build, plan, mutate (before acting and at the moment of acting), act; the
    invariants it broke (none, if all is well)."""
    rng = random.Random(seed)
    case = top / f"case-{seed}"
    out = case / "out"
    for directory, owner in (("r/root", 0), ("r/nobody", NOBODY), ("r/shared", 0), ("out", 0)):
        (case / directory).mkdir(parents=True)
        os.chown(case / directory, owner, owner)
    os.chmod(case / "r/shared", 0o1777)
    (out / "secret").write_bytes(b"outside, must never change " * 50)
    for n in range(rng.randint(1, 4)):
        size = rng.choice([1, 100, 4097, 20_000, 70_000])
        data = rng.randbytes(size)
        if rng.random() < 0.3:
            put(out / f"copy-{n}", data, mtime=OLD + rng.randrange(100))
        for k in range(rng.randint(2, 4)):
            place = rng.choice(["root", "nobody", "shared"])
            owner = NOBODY if place == "nobody" else rng.choice([0, NOBODY])
            mode = rng.choice([0o644, 0o644, 0o600, 0o664, 0o666, 0o755])
            put(case / "r" / place / f"s{n}-{k}", data, mode, OLD + rng.randrange(100), owner)
    whole = rng.random() < 0.2  # an unconfined plan over the case, acted on by a server confined to r/
    plan = duplicates_plan(case if whole else case / "r")
    planned = [e.path for item in plan.items for e in [*item.entries, *([item.keep] if item.keep else [])]]
    binds: list[str] = []
    before_mutations = snapshot(case)
    for _ in range(rng.randint(0, 3)):
        if planned:
            mutate(rng, rng.choice(MUTATIONS), Path(os.fsdecode(rng.choice(planned))), case, binds)
    racing = rng.random() < 0.5
    excused: set[str] = set()  # contents a mutation at the moment of acting destroyed itself
    touched: set[str] = set()  # files such a mutation changed itself

    def between(path: bytes) -> None:
        if racing and rng.random() < 0.3:
            pre = snapshot(case)
            mutate(rng, rng.choice(MUTATIONS), Path(os.fsdecode(rng.choice([path, *planned]))), case, binds)
            post = snapshot(case)
            excused.update({v[0] for v in pre.values()} - {v[0] for v in post.values()})
            touched.update(p for p in pre.keys() | post.keys() if pre.get(p) != post.get(p))

    before = snapshot(case)
    chosen = [item.id + LINK if item.linkable and rng.random() < 0.5 else item.id for item in plan.items]
    broken: list[str] = []
    inside = os.fsencode(case / "r") + b"/"
    try:
        applied = apply_items(
            ApplyRequest(plan, chosen, lambda path: path.startswith(inside), between=between)
        )
    except Refused:
        applied = []
        tally["refused whole"] = tally.get("refused whole", 0) + 1
        if not whole:
            broken.append("refused a plan that lies inside the roots")
    after = snapshot(case)
    contents_before = {v[0] for v in before.values()}
    contents_after = {v[0] for v in after.values()}
    if contents_before - contents_after - excused:
        broken.append(f"{len(contents_before - contents_after - excused)} content(s) lost")
    for path, facts in before_mutations.items():
        unmutated = facts == before.get(path) and path not in touched
        if path.startswith(str(out) + "/") and unmutated and after.get(path) != facts:
            broken.append(f"outside changed: {path}")
    for path, facts in before.items():
        now = after.get(path)
        if now is not None and path not in touched and now[1:4] != facts[1:4]:
            broken.append(f"owner or mode changed: {path} {facts[1:4]} -> {now[1:4]}")
    for result in applied:
        for outcome in result.outcomes:
            key = f"{result.action}: {outcome.reason or 'done'}"
            tally[key] = tally.get(key, 0) + 1
            if outcome.done == bool(outcome.reason):
                broken.append(f"outcome without its reason: {outcome}")
    for target in reversed(binds):
        subprocess.run(["umount", target], check=False, capture_output=True)
    subprocess.run(["rm", "-rf", str(case)], check=True)
    return [f"seed {seed}: {b}" for b in broken]


def property_cases(top: Path, first: str, count: str) -> dict[str, Any]:
    started = time.monotonic()
    broken: list[str] = []
    tally: dict[str, int] = {}
    for seed in range(int(first), int(first) + int(count)):
        broken += one_case(seed, top, tally)
    return {"broken": broken, "cases": int(count), "seconds": time.monotonic() - started, "tally": tally}


if __name__ == "__main__":
    run(globals(), sys.argv[1:])
