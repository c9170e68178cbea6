"""Reclaim plans kept in the real history store: a restart, expiry, the memory fallback, the action log."""

from __future__ import annotations

import json
import os
import sqlite3
import struct
import zlib
from dataclasses import astuple
from pathlib import Path

import pytest

from sysmcp.engine.faults import NotFound, Refused
from sysmcp.history.statedir import PLAN_KEY_NAME, mac
from sysmcp.history.store import Store
from sysmcp.reclaim import (
    ActionLog,
    ApplyRequest,
    FileResult,
    Item,
    LogRecord,
    Plan,
    PlanKeeper,
    PlannedFile,
    PlanRequest,
    apply_items,
    build_plan,
    plan_log,
    read_log,
)
from sysmcp.reclaim._keep import LOG_NAMESPACE, PLAN_NAMESPACE, decode_plan, encode_plan
from tests.reclaim.test_reclaim import layout, write


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def a_plan(base: Path, names: tuple[bytes, ...] = (b"syslog.1", b"odd \n$(x)\xff.1")) -> Plan:
    log = os.fsencode(base / "var/log")
    os.makedirs(log, exist_ok=True)
    for name in names:
        with open(log + b"/" + name, "wb") as handle:
            handle.write(b"x" * 5000)
    write(base / "home/ann/.cache/pip/w", 9000)
    return build_plan(PlanRequest(layout=layout(base)))


def test_a_plan_survives_a_restart_with_every_identity_and_byte_of_its_names(tmp_path: Path) -> None:
    plan = a_plan(tmp_path)
    clock = Clock()
    first = PlanKeeper(lambda: Store.open(tmp_path / "state", clock), clock)
    assert first.put(plan).durable
    second = PlanKeeper(lambda: Store.open(tmp_path / "state", clock), clock)  # another process's keeper
    assert second.get(plan.id) == plan
    assert any(b"\xff" in e.path for item in plan.items for e in item.entries)


def test_a_plan_naming_a_file_dated_past_2262_is_kept_in_the_store_and_read_back_exactly(
    tmp_path: Path,
) -> None:
    """A time in nanoseconds past 2262 does not fit 64 bits, and anyone may date their own file so
    (``touch -d 2300-01-01``): the plan is still kept, every identity exact, and acted on."""
    future = 10**19  # 2286-11-20, in nanoseconds
    write(tmp_path / "var/log/syslog.1", 5_000)
    os.utime(tmp_path / "var/log/syslog.1", ns=(future, future))
    plan = build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",)))
    (item,) = plan.items
    assert item.entries[0].identity.mtime_ns == future  # the filesystem holds such a time
    clock = Clock()
    assert PlanKeeper(lambda: Store.open(tmp_path / "state", clock), clock).put(plan).durable
    again = PlanKeeper(lambda: Store.open(tmp_path / "state", clock), clock).get(plan.id)
    assert again == plan
    (applied,) = apply_items(ApplyRequest(again, [item.id], lambda path: True))
    assert [o.done for o in applied.outcomes] == [True]


def test_a_kept_plan_is_good_for_24_hours_and_refused_after(tmp_path: Path) -> None:
    plan = a_plan(tmp_path)
    clock = Clock()
    store = Store.open(tmp_path / "state", clock)
    PlanKeeper(lambda: store, clock).put(plan)
    later = PlanKeeper(lambda: store, clock)
    clock.now += 24 * 3600 - 1
    assert later.get(plan.id).id == plan.id
    clock.now += 2
    with pytest.raises(Refused) as refused:
        later.get(plan.id)
    assert refused.value.reason == "expired" and "24 h" in refused.value.detail
    PlanKeeper(lambda: store, clock).put(a_plan(tmp_path / "other"))
    assert plan.id not in dict(store.keys(PLAN_NAMESPACE))


def test_without_history_a_plan_lives_in_memory_only_and_a_restart_loses_it(tmp_path: Path) -> None:
    plan = a_plan(tmp_path)
    clock = Clock()
    keeper = PlanKeeper(lambda: None, clock)
    kept = keeper.put(plan)
    assert not kept.durable and kept.reason == "history is off"
    assert keeper.get(plan.id) is plan
    with pytest.raises(NotFound):
        PlanKeeper(lambda: None, clock).get(plan.id)
    clock.now += 25 * 3600
    with pytest.raises(Refused):  # memory plans expire too
        keeper.get(plan.id)


def test_a_store_that_cannot_be_written_keeps_the_plan_in_memory_and_says_why(tmp_path: Path) -> None:
    plan = a_plan(tmp_path)
    clock = Clock()
    store = Store.open(tmp_path / "state", clock, busy_ms=10)
    holder = sqlite3.connect(store.path, isolation_level=None)  # another process holding the write lock
    try:
        holder.execute("BEGIN IMMEDIATE")
        keeper = PlanKeeper(lambda: store, clock)
        kept = keeper.put(plan)
        assert not kept.durable and "busy" in (kept.reason or "")
        assert keeper.get(plan.id) is plan
    finally:
        holder.close()
    with pytest.raises(NotFound):
        PlanKeeper(lambda: store, clock).get(plan.id)  # it never reached the store


def test_a_row_of_another_format_or_damaged_is_no_plan(tmp_path: Path) -> None:
    plan = a_plan(tmp_path)
    raw = encode_plan(plan, 5.0)
    assert decode_plan(raw) == (plan, 5.0)
    assert decode_plan(raw[:-3]) is None and decode_plan(b"not zlib") is None


def as_format_3(plan: Plan, kept_at: float) -> bytes:
    """The plan's row as the previous version wrote it: its times in nanoseconds, in one 64-bit field."""
    header = {
        "format": 3,
        "id": plan.id,
        "created": plan.created,
        "kept_at": kept_at,
        "scope": [s.hex() for s in plan.scope],
        "secret": plan.secret.hex(),
        "items": [{**item.facts(), "files": len(item.entries), "keep": None} for item in plan.items],
    }
    entry = struct.Struct("<QQQqqQQIIII")
    packed = b"".join(
        entry.pack(*astuple(e.identity), len(e.path)) + e.path for item in plan.items for e in item.entries
    )
    return zlib.compress(json.dumps(header).encode() + b"\0" + packed)


def test_a_plan_kept_by_the_previous_version_is_still_read_and_applied_after_an_upgrade(
    tmp_path: Path,
) -> None:
    plan = a_plan(tmp_path)
    clock = Clock()
    store = Store.open(tmp_path / "state", clock)
    raw = as_format_3(plan, clock())
    key = store.state_dir.secret(PLAN_KEY_NAME)
    assert store.put(PLAN_NAMESPACE, plan.id, mac(key, plan.id.encode() + b"\0" + raw) + raw).ok
    again = PlanKeeper(lambda: store, clock).get(plan.id)
    assert again == plan
    applied = apply_items(ApplyRequest(again, [item.id for item in plan.items], lambda path: True))
    assert [o.done for result in applied for o in result.outcomes] == [True] * 3  # two logs and a wheel


def test_every_action_is_logged_in_the_store_in_order_across_batches(tmp_path: Path) -> None:
    clock = Clock()
    store = Store.open(tmp_path / "state", clock)
    actions = ActionLog(store, clock)
    for n in range(450):  # more than two batches
        actions.record(
            LogRecord(
                clock.now + n, "p1", "rotated_log-1", f"/var/log/{n}.1", "delete", "done", None, 8192, 8192
            )
        )
    assert len(store.keys(LOG_NAMESPACE)) == 400  # two full batches went in as they filled
    assert actions.flush() is None
    records = read_log(store, limit=1000)
    assert [r.path for r in records] == [f"/var/log/{n}.1" for n in range(450)]
    assert [r.path for r in read_log(store, limit=3)] == [
        "/var/log/447.1",
        "/var/log/448.1",
        "/var/log/449.1",
    ]


def test_a_plans_log_is_read_apart_and_a_row_logged_before_kept_copies_reads_with_none(
    tmp_path: Path,
) -> None:
    clock = Clock()
    store = Store.open(tmp_path / "state", clock)
    actions = ActionLog(store, clock)
    kept = LogRecord(clock.now, "p1", "duplicate-1", "/srv/b", "delete", "done", None, 8192, 8192, "/srv/a")
    actions.record(kept)
    actions.record(LogRecord(clock.now, "p2", "rotated_log-1", "/var/log/x.1", "delete", "done", None, 1, 1))
    assert actions.flush() is None
    old = {"time": clock.now, "plan": "p1", "item": "duplicate-1", "path": "/srv/c", "action": "delete"}
    old |= {"outcome": "done", "reason": None, "planned_bytes": 8192, "freed_bytes": 8192}  # no kept_copy
    assert store.put(
        LOG_NAMESPACE, f"{int(clock.now * 1e6) + 1:016d}-p1-old-000001", json.dumps(old).encode()
    ).ok
    before = LogRecord(clock.now, "p1", "duplicate-1", "/srv/c", "delete", "done", None, 8192, 8192)
    assert plan_log(store, "p1") == [kept, before]
    assert [r.plan for r in read_log(store)] == ["p1", "p2", "p1"]


def test_two_reclaims_of_one_plan_at_the_same_moment_each_keep_their_log_rows(tmp_path: Path) -> None:
    """Two servers (or two calls) acting on one plan in the same microsecond: every action is logged."""
    clock = Clock()
    store = Store.open(tmp_path / "state", clock)
    first, second = ActionLog(store, clock), ActionLog(store, clock)
    for log, path in ((first, "/var/log/a.1"), (second, "/var/log/b.1")):
        log.record(LogRecord(clock.now, "p1", "rotated_log-1", path, "delete", "done", None, 8192, 8192))
        assert log.flush() is None
    assert sorted(r.path for r in read_log(store)) == ["/var/log/a.1", "/var/log/b.1"]


def test_apply_items_reports_each_file_to_the_log_with_its_planned_and_freed_bytes(tmp_path: Path) -> None:
    plan = a_plan(tmp_path, (b"a.1", b"b.1"))
    os.unlink(tmp_path / "var/log/b.1")
    item = next(i for i in plan.items if i.klass == "rotated_log")
    clock = Clock()
    store = Store.open(tmp_path / "state", clock)
    actions = ActionLog(store, clock)

    def told(it: Item, entry: PlannedFile, action: str, outcome: FileResult) -> None:
        actions.record(
            LogRecord(
                clock.now,
                plan.id,
                it.id,
                os.fsdecode(entry.path),
                action,
                "done" if outcome.done else "skipped",
                outcome.reason,
                entry.identity.disk,
                outcome.freed,
            )
        )

    apply_items(ApplyRequest(plan, [item.id], lambda path: True, log=told))
    actions.flush()
    rows = {os.path.basename(r.path): (r.outcome, r.reason, r.planned) for r in read_log(store)}
    assert rows == {
        "a.1": ("done", None, item.entries[0].identity.disk),
        "b.1": ("skipped", "gone", item.entries[1].identity.disk),
    }


def test_a_log_row_put_in_the_store_by_hand_does_not_excuse_a_files_moved_ctime(tmp_path: Path) -> None:
    """``reclaim`` overlooks the ctime of a file an earlier call of the plan set aside and put back, as
    the plan's log tells (``relinked``). The plan is refused when edited in the store (its MAC); so is
    that word of the log: a row written by hand ("cancelled", for a file rewritten since with its size and
    mtime put back, which only its ctime tells) is not sysmcp's, and the file is left as changed. A row
    sysmcp logged itself is taken."""
    from sysmcp.history import state
    from sysmcp.tools.reclaim import _earlier, _relinked

    plan = a_plan(tmp_path, (b"a.1", b"b.1"))
    item = next(i for i in plan.items if i.klass == "rotated_log")
    forged, logged = item.entries
    clock = Clock()
    state.configure(tmp_path / "state", clock)
    try:
        store = state.active()
        assert store is not None and PlanKeeper(lambda: store, clock).put(plan).durable
        planned = os.stat(forged.path)
        with open(forged.path, "r+b") as handle:
            handle.write(b"rewritten")
        os.utime(forged.path, ns=(planned.st_atime_ns, planned.st_mtime_ns))
        row = {"time": clock.now, "plan": plan.id, "item": item.id, "path": os.fsdecode(forged.path)}
        row |= {"action": "delete", "outcome": "skipped", "reason": "cancelled", "planned_bytes": 0}
        row |= {"freed_bytes": 0, "kept_copy": None}
        key = f"{int(clock.now * 1e6):016d}-{plan.id}-forged-000001"
        assert store.put(LOG_NAMESPACE, key, json.dumps(row).encode()).ok
        actions = ActionLog(store, clock)
        path = os.fsdecode(logged.path)
        actions.record(LogRecord(clock.now, plan.id, item.id, path, "delete", "skipped", "cancelled", 0, 0))
        assert actions.flush() is None
        relinked = _relinked(plan, _earlier(plan.id))
    finally:
        state.configure(None)
    assert (logged.identity.dev, logged.identity.ino) in relinked
    assert (forged.identity.dev, forged.identity.ino) not in relinked
    (applied,) = apply_items(ApplyRequest(plan, [item.id], lambda path: True, relinked=relinked))
    assert [o.reason for o in applied.outcomes] == ["changed", None]
    assert os.path.exists(forged.path)
