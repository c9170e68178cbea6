"""what_changed's fresh scan against its time budget and against cancellation, apart: a fake clock
for the budget and a checkpoint that raises for the cancellation (no sleeps, no wall clock)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sysmcp.history import state
from sysmcp.history.compare import Findings, compare
from sysmcp.protocol.context import Meter
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.typed import to_json
from sysmcp.tools.what_changed import INPUT_SCHEMA, TOOL, comparison, render
from tests.tools import test_what_changed as base
from tests.tools.test_what_changed import Clock

MiB = 1 << 20
clock = base.clock  # the fixture: history in tmp_path on an injected clock
DAY = 86400.0


class Ticking:
    """A monotonic clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class Cancelled(Exception):
    pass


class CancelledMeter(Meter):
    """A request cancelled once the scan has begun: its first checkpoint raises, as anyio's would."""

    asked = 0

    def cancel(self) -> None:  # type: ignore[override]
        CancelledMeter.asked += 1
        raise Cancelled


def tree(root: Path, size: int = 64 * 1024) -> Path:
    for d in range(30):
        (root / f"d{d}").mkdir(parents=True)
        (root / f"d{d}" / "f").write_bytes(os.urandom(size))
    return root


def args(**more: Any) -> dict[str, Any]:
    return validate_arguments(INPUT_SCHEMA, {"path": "/", "since": "2d", **more})


def changes(
    root: Path, arguments: dict[str, Any], clock: Clock, meter: Meter | None = None, **more: Any
) -> Findings:
    """The engine on these arguments, the snapshots on ``clock``, progress and cancel the meter's."""
    request = replace(comparison(root, arguments, clock.now, everything, clock), **more)
    return compare(request, meter.report, meter.cancel) if meter is not None else compare(request)


def everything(name: bytes | str) -> bool:
    return True


def test_a_fresh_scan_stopped_by_its_budget_says_partial_result_plainly(tmp_path: Path, clock: Clock) -> None:
    root = tree(tmp_path / "t", 2 * MiB)  # each directory above the resolution: each one kept
    first = changes(root, args(), clock)  # a complete baseline
    assert first.new is not None and not first.new.partial
    clock.now += DAY
    budget = args(timeout_s=0.005)  # 5 reads of a clock moving 1 ms a read: before the split (10 ms)
    outcome = changes(root, budget, clock, monotonic=Ticking(0.001))
    assert outcome.new is not None and outcome.new.partial and outcome.fresh
    text, answer, _ = render(str(root), outcome, budget)
    structured = to_json(answer)
    # Nothing is compared: the headline says so, not that unreached directories "look gone".
    assert text.startswith("PARTIAL RESULT: the scan made now stopped early (its time budget)"), text
    assert "look unchanged or gone" not in text
    assert structured["complete"] is False and structured["current"]["partial"] is True
    assert structured["stopped_reason"] == "scan_stopped"
    # Not one directory it did not reach is called gone, nor its bytes counted as shrinkage.
    assert structured["comparable"] is False and structured["changes"] == [], text
    assert "the newer scan stopped early: directories it did not reach would look gone" in text
    assert "disappeared" not in text and "elsewhere" not in text
    assert "compared with the oldest" not in text and "compared with the oldest" not in str(
        structured["notes"]
    )
    import jsonschema

    jsonschema.validate(structured, TOOL.output_schema)
    store = state.active()
    assert store is not None
    kept = store.snapshots("scan")
    assert [info.partial for info in kept] == [True, False]  # kept, marked partial
    clock.now += DAY
    again = changes(root, args(), clock)
    assert again.old is not None and again.old.id == first.new.id  # a partial one is no baseline


def test_a_cancelled_fresh_scan_raises_and_records_nothing(tmp_path: Path, clock: Clock) -> None:
    root = tree(tmp_path / "t")
    changes(root, args(), clock)
    store = state.active()
    assert store is not None
    before = [info.id for info in store.snapshots("scan")]
    clock.now += DAY
    CancelledMeter.asked = 0
    with pytest.raises(Cancelled):
        changes(root, args(), clock, CancelledMeter())
    assert CancelledMeter.asked == 1  # at the first checkpoint: nothing walked after it
    assert [info.id for info in store.snapshots("scan")] == before
