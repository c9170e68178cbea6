"""Keeping reclaim plans between ``reclaim_plan`` and ``reclaim``, and the log of every reclaim action.

Why in the history store: a plan reviewed today may be applied by tomorrow's server process (the
desktop host restarts its servers freely), so a plan kept only in memory would be lost with it. Each
plan is one row of the store's key/value room (namespace ``reclaim-plans``), every file's identity
with it, so the process that applies it re-checks every item exactly as the one that made it would.
A plan is good for ``PLAN_TTL_S`` (24 h) after it was kept: an older one is refused, since the review
it had says little about the disk a day later. When history is off or the store cannot be written, the
plan is kept in this process's memory only, and ``Durability`` says so for the answer to repeat.

Every file acted on or left alone is one row of ``reclaim-log`` (plain JSON, so a ``sqlite3`` query
reads it; a duplicate's row names its kept copy), written in batches so a thousand files are not a
thousand transactions. Each row carries an HMAC of its key and record (``mac``) under the plans' key: the
next call of a plan takes the log's word that sysmcp itself moved a file's ctime (``LogRecord.vouched``),
and a row written into the store by hand must not excuse a change, as an edited plan must not widen one.

A stored plan carries an HMAC-SHA-256 of its plan id and bytes, keyed by a secret in its own 0600
file in the state directory (``history.statedir``: made ``O_EXCL``, read without following a link, checked
like every state file). It is checked before a plan is decoded: a row edited in place, or copied
under another id, is refused (``Refused``, reason ``tampered``) and never read.

Nothing here checks roots: a plan read back is data, and ``reclaim`` confines it (and the engine
re-checks each path at the moment of acting) as it would a plan made a moment ago.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import operator
import secrets
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import astuple, dataclass, field, fields, replace
from typing import Any

from sysmcp.engine.faults import NotFound, Refused
from sysmcp.history.statedir import PLAN_KEY_NAME, mac
from sysmcp.history.store import Store
from sysmcp.reclaim._plan import Identity, Item, Plan, PlannedFile

PLAN_NAMESPACE = "reclaim-plans"
LOG_NAMESPACE = "reclaim-log"
PLAN_TTL_S = 24 * 3600.0
FORMAT = 4  # the stored plan's layout; a row of another layout (but 3, read too) is treated as no plan
LOG_BATCH = 200  # log rows per write
MEMORY_PLANS = 32  # the newest plans kept in memory too: all there is when the store cannot be written
_MAC_BYTES = 32  # the HMAC-SHA-256 before a stored plan's bytes


# -- the plan as bytes -------------------------------------------------------------------------------


#: One file's identity and the length of its path, then the path's bytes (any bytes survive). Its two
#: times go as seconds and nanoseconds: in nanoseconds alone, a time past 2262 (``touch -d 2300-01-01``,
#: which anyone may do to their own file) does not fit 64 bits.
_ENTRY = struct.Struct("<QQQqIqIQQIIII")
_NS = 10**9
_CHUNK = 1 << 20  # bytes packed before each compress call: the row is built without a copy of it whole


def _entry(entry: PlannedFile) -> list[Any]:
    return [entry.path.hex(), *_fields(entry.identity)]


#: An identity's numbers, in the order ``Identity(*numbers)`` takes them.
_fields: Callable[[Identity], tuple[int, ...]] = operator.attrgetter(*(f.name for f in fields(Identity)))


def _packed(identity: Identity) -> tuple[int, ...]:
    dev, ino, size, mtime, ctime, *rest = _fields(identity)
    return (dev, ino, size, *divmod(mtime, _NS), *divmod(ctime, _NS), *rest)


def _identity(numbers: list[int]) -> tuple[int, ...]:
    dev, ino, size, m_s, m_ns, c_s, c_ns, *rest = numbers
    return (dev, ino, size, m_s * _NS + m_ns, c_s * _NS + c_ns, *rest)


#: How each format's entries are read: the previous version's (3) kept its times in nanoseconds, so a
#: plan it kept stays good after an upgrade.
_READ: dict[int, tuple[struct.Struct, Callable[[list[int]], tuple[int, ...]]]] = {
    FORMAT: (_ENTRY, _identity),
    3: (struct.Struct("<QQQqqQQIIII"), tuple),
}


def _unentry(row: list[Any]) -> PlannedFile:
    return PlannedFile(bytes.fromhex(row[0]), Identity(*(int(v) for v in row[1:11])))


def encode_plan(plan: Plan, kept_at: float) -> bytes:
    """The plan and when it was kept: a compressed JSON header (the items' facts, NUL-terminated), then
    every file's identity and path packed in binary, so a plan of 100,000 files costs little memory."""
    header = {
        "format": FORMAT,
        "id": plan.id,
        "created": plan.created,
        "kept_at": kept_at,
        "scope": [s.hex() for s in plan.scope],
        "secret": plan.secret.hex(),
        "items": [
            {**item.facts(), "files": len(item.entries), "keep": _entry(item.keep) if item.keep else None}
            for item in plan.items
        ],
    }
    packer = zlib.compressobj()
    out = [packer.compress(json.dumps(header, separators=(",", ":")).encode() + b"\0")]
    pending = bytearray()
    for item in plan.items:
        for entry in item.entries:
            pending += _ENTRY.pack(*_packed(entry.identity), len(entry.path)) + entry.path
            if len(pending) >= _CHUNK:
                out.append(packer.compress(bytes(pending)))
                pending.clear()
    out.append(packer.compress(bytes(pending)) + packer.flush())
    return b"".join(out)


def decode_plan(raw: bytes) -> tuple[Plan, float] | None:
    """The plan and when it was kept; None for a row this version cannot read."""
    try:
        data = zlib.decompress(raw)
        end = data.index(b"\0")
        body = json.loads(data[:end])
        if body.get("format") not in _READ:
            return None
        layout, identity = _READ[body["format"]]
        offset = end + 1
        items: list[Item] = []
        for facts in body["items"]:
            entries: list[PlannedFile] = []
            for _n in range(int(facts["files"])):
                *numbers, length = layout.unpack_from(data, offset)
                offset += layout.size
                path = data[offset : offset + length]
                if len(path) != length:
                    return None
                offset += length
                entries.append(PlannedFile(path, Identity(*identity(numbers))))
            items.append(
                Item.from_facts(facts, tuple(entries), _unentry(facts["keep"]) if facts["keep"] else None)
            )
        if offset != len(data):
            return None
        scope = tuple(bytes.fromhex(s) for s in body["scope"])
        plan = Plan(
            str(body["id"]), float(body["created"]), scope, tuple(items), bytes.fromhex(body["secret"])
        )
        return plan, float(body["kept_at"])
    except (ValueError, KeyError, TypeError, IndexError, struct.error, zlib.error):
        return None


# -- where plans live ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Durability:
    """Where a plan went: the history store (``durable``), or this process's memory and why."""

    durable: bool
    reason: str | None = None


class PlanKeeper:
    """Plans in the history store when there is one, else (or when it cannot be written) in memory.

    ``store()`` is asked each time (history may be configured after import, or turned off); ``clock``
    decides expiry (the history clock: tests give a fake one).
    """

    def __init__(self, store: Callable[[], Store | None], clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self._memory: dict[str, tuple[Plan, float]] = {}
        self._lock = threading.Lock()

    def put(self, plan: Plan) -> Durability:
        now = self.clock()
        with self._lock:
            self._memory[plan.id] = (plan, now)
            while len(self._memory) > MEMORY_PLANS:
                del self._memory[next(iter(self._memory))]
        store = self.store()
        if store is None:
            return Durability(False, "history is off")
        try:
            key = store.state_dir.secret(PLAN_KEY_NAME)
        except OSError as exc:
            return Durability(False, f"the reclaim plans' key cannot be used ({exc})")
        for old, updated in store.keys(PLAN_NAMESPACE):
            if now - updated > PLAN_TTL_S:
                store.delete(PLAN_NAMESPACE, old)
        raw = encode_plan(plan, now)
        saved = store.put(PLAN_NAMESPACE, plan.id, _signed(key, plan.id, raw) + raw)
        return Durability(
            saved.ok, None if saved.ok else saved.reason or "the history store could not be written"
        )

    def get(self, plan_id: str) -> Plan:
        """The plan, if kept and not expired; else ``NotFound`` or ``Refused`` (reason ``expired``)."""
        with self._lock:
            found = self._memory.get(plan_id)
        store = self.store() if found is None else None
        raw = store.get(PLAN_NAMESPACE, plan_id) if store is not None else None
        if store is not None and raw is not None:
            found = decode_plan(_verified(store, plan_id, raw))
        if found is None:
            raise NotFound(f"no reclaim plan {plan_id} is kept")
        plan, kept_at = found
        age = self.clock() - kept_at
        if age > PLAN_TTL_S:
            raise Refused(
                f"reclaim plan {plan_id} was made {_hours(age)} ago, and a plan is good for "
                f"{_hours(PLAN_TTL_S)} only",
                reason="expired",
            )
        return plan


def _signed(key: bytes, plan_id: str, raw: bytes) -> bytes:
    """The MAC of a stored plan: its id and its bytes, so a row copied under another id fails too."""
    return mac(key, plan_id.encode() + b"\0" + raw)


def _verified(store: Store, plan_id: str, row: bytes) -> bytes:
    """The plan's bytes once its MAC matched; ``Refused`` (``tampered``) before anything is decoded."""
    try:
        key = store.state_dir.secret(PLAN_KEY_NAME)
    except OSError as exc:
        raise Refused(
            f"reclaim plan {plan_id} cannot be checked: the reclaim plans' key cannot be used ({exc})",
            reason="tampered",
        ) from None
    tag, raw = row[:_MAC_BYTES], row[_MAC_BYTES:]
    if not hmac.compare_digest(tag, _signed(key, plan_id, raw)):
        raise Refused(
            f"reclaim plan {plan_id} was changed after it was kept (its MAC does not match "
            f"{PLAN_KEY_NAME}), so it is not read",
            reason="tampered",
        )
    return raw


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.0f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


# -- the log of every action ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogRecord:
    time: float
    plan: str
    item: str
    path: str
    action: str
    outcome: str  # done | skipped | stopped (the call, not a file: cancelled or failed part way; reason says)
    reason: str | None
    planned: int
    freed: int
    kept: str | None = None  # a duplicate's kept copy: where the bytes of the file removed or linked are
    #: Written by sysmcp: made in this process, or read from the store with its MAC. Only such a record
    #: says sysmcp moved a file's ctime (a row without one: from before there was one, or by hand).
    vouched: bool = field(default=True, compare=False)

    def as_json(self) -> bytes:
        values = astuple(self)[: len(_LOGGED)]
        return json.dumps(
            {name: value for (name, _read), value in zip(_LOGGED, values, strict=True)}
        ).encode()


#: A log row's JSON names, in ``LogRecord``'s order, and how each is read back.
_LOGGED: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("time", float),
    ("plan", str),
    ("item", str),
    ("path", str),
    ("action", str),
    ("outcome", str),
    ("reason", lambda reason: reason),
    ("planned_bytes", int),
    ("freed_bytes", int),
    ("kept_copy", lambda kept: kept),
)


class ActionLog:
    """Collects each action's record and writes them to ``reclaim-log`` in batches (``flush`` at the end).

    Keys are ``<time in µs, 16 digits>-<plan>-<run>-<n>``: sorted by key is in time order. ``run`` is
    random to each log, so two reclaims of one plan at once (two servers, or two calls) never write one row.
    Returns from ``flush`` the store's reason when a write failed; ``unsaved`` counts the records that
    did not go in, of ``recorded`` (the answer says which are on stderr only).
    """

    def __init__(self, store: Store | None, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self._pending: list[tuple[str, bytes]] = []
        self.recorded = self.unsaved = 0
        self._run = secrets.token_hex(4)
        self.failure: str | None = None if store is not None else "history is off"
        self._key = _log_key(store)

    def record(self, record: LogRecord) -> None:
        if self.store is None:
            return
        self.recorded += 1
        key = f"{int(record.time * 1_000_000):016d}-{record.plan}-{self._run}-{self.recorded:06d}"
        row = record.as_json()
        if self._key is not None:  # the record's own JSON, then its MAC
            row = row[:-1] + b', "mac": "' + _row_mac(self._key, key, row).hex().encode() + b'"}'
        self._pending.append((key, row))
        if len(self._pending) >= LOG_BATCH:
            self.flush()

    def flush(self) -> str | None:
        pending, self._pending = self._pending, []
        if self.store is not None and pending:
            saved = self.store.put_many(LOG_NAMESPACE, pending, "the reclaim log")
            if not saved.ok:
                self.unsaved += len(pending)
                self.failure = self.failure or saved.reason or "the history store could not be written"
        return self.failure


def _log_key(store: Store | None) -> bytes | None:
    """The plans' key, which signs log rows too; None (rows unsigned, never vouched) when it cannot be used."""
    try:
        return store.state_dir.secret(PLAN_KEY_NAME) if store is not None else None
    except OSError:
        return None


def _row_mac(key: bytes, row_key: str, record: bytes) -> bytes:
    """The MAC of a log row: its key (which names the plan) and its record's JSON."""
    return mac(key, row_key.encode() + b"\0" + record)


def _signed_row(secret: bytes | None, key: str, record: LogRecord, tag: object) -> bool:
    """Whether ``tag`` is the MAC of the row ``key`` holding ``record``."""
    if secret is None or not isinstance(tag, str):
        return False
    try:
        given = bytes.fromhex(tag)
    except ValueError:
        return False
    return hmac.compare_digest(given, _row_mac(secret, key, record.as_json()))


def read_log(store: Store, limit: int = 50, shown: Callable[[str], bool] | None = None) -> list[LogRecord]:
    """The newest ``limit`` records whose path ``shown`` lets a caller show (None: all), oldest first."""
    keys = sorted(key for key, _updated in store.keys(LOG_NAMESPACE))
    if shown is None:
        return _records(store, keys[-limit:] if limit > 0 else [])
    newest: list[LogRecord] = []
    for key in reversed(keys):  # read until ``limit`` are shown: the roots' test needs each record's path
        if len(newest) >= limit:
            break
        newest += [record for record in _records(store, [key]) if shown(record.path)]
    return newest[::-1]


def plan_log(store: Store, plan_id: str) -> list[LogRecord]:
    """Every record of one plan's reclaims, oldest first: what an earlier call did (or was doing when it
    was cancelled) to that plan's files."""
    keys = sorted(key for key, _updated in store.keys(LOG_NAMESPACE) if key.split("-")[1:2] == [plan_id])
    return _records(store, keys)


def _records(store: Store, keys: list[str]) -> list[LogRecord]:
    records: list[LogRecord] = []
    secret = _log_key(store) if keys else None
    for key in keys:
        # A row gone since (null), or no record's JSON, is left out; a row logged before there was
        # kept_copy has none: any other name missing fails the read.
        with contextlib.suppress(ValueError, KeyError, TypeError):
            row = json.loads(store.get(LOG_NAMESPACE, key) or b"null")
            record = LogRecord(*(read(row.get(n) if n == "kept_copy" else row[n]) for n, read in _LOGGED))
            records.append(replace(record, vouched=_signed_row(secret, key, record, row.get("mac"))))
    return records
