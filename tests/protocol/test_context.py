"""RequestContext: what a tool sees of progress, logging and worker threads."""

from __future__ import annotations

import anyio
import pytest

from sysmcp.protocol.context import Meter, RequestContext
from sysmcp.protocol.lifecycle import Features
from tests.harness import RecordingPeer

pytestmark = pytest.mark.anyio


class Refused(Exception):
    pass


@pytest.mark.parametrize("token", [None, "tok"])
async def test_a_worker_failure_arrives_as_itself_not_as_an_exception_group(token: str | None) -> None:
    def work(meter: Meter) -> None:
        raise Refused("no")

    ctx = RequestContext(request_id=1, method="tools/call", peer=RecordingPeer(), progress_token=token)
    with pytest.raises(Refused):
        await ctx.run_in_worker(work)


async def test_progress_is_strictly_increasing_and_throttled_but_final_always_goes() -> None:
    peer = RecordingPeer()
    ctx = RequestContext(request_id=1, method="tools/call", peer=peer, progress_token=7)
    await ctx.progress(1, 10)
    await ctx.progress(2, 10)  # within the throttle interval: dropped
    await ctx.progress(2, 10, final=True)  # not greater than the last sent? it is: 2 > 1
    await ctx.progress(2, 10, final=True)  # equal: never sent twice
    await ctx.progress(1, 10, final=True)  # smaller: never sent
    assert [params["progress"] for _, params in peer.sent] == [1, 2]
    assert all(params["progressToken"] == 7 for _, params in peer.sent)


async def test_a_total_the_work_has_passed_is_left_out_never_sent_below_the_progress() -> None:
    """A total is an estimate (dir_usage of a whole filesystem: its inodes in use, give or take hard
    links): a scan of / reported 3,456,879 entries of 3,392,603, and a client's bar stood past 100 %."""
    peer = RecordingPeer()
    ctx = RequestContext(request_id=1, method="tools/call", peer=peer, progress_token="t")
    await ctx.progress(90, 100, final=True)
    await ctx.progress(100, 100, final=True)
    await ctx.progress(101, 100, final=True)
    assert [params.get("total") for _, params in peer.sent] == [100, 100, None]
    assert [params["progress"] for _, params in peer.sent] == [90, 100, 101]


async def test_progress_messages_are_left_out_for_2024_11_05() -> None:
    peer = RecordingPeer()
    ctx = RequestContext(
        request_id=1, method="tools/call", peer=peer, progress_token=1, features=Features("2024-11-05")
    )
    await ctx.progress(1, 2, "half way")
    assert peer.sent == [("notifications/progress", {"progressToken": 1, "progress": 1, "total": 2})]


async def test_log_messages_respect_the_level_and_none_means_silence() -> None:
    peer = RecordingPeer()
    ctx = RequestContext(request_id=1, method="tools/call", peer=peer, log_level="warning")
    await ctx.log("info", "quiet")
    await ctx.log("error", "loud")
    ctx.log_level = None
    await ctx.log("emergency", "still quiet")
    assert peer.sent == [("notifications/message", {"level": "error", "logger": "sysmcp", "data": "loud"})]


async def test_a_cancelled_worker_stops_at_its_next_checkpoint() -> None:
    started, steps = anyio.Event(), []

    def work(meter: Meter) -> None:
        anyio.from_thread.run_sync(started.set)
        while True:
            meter.cancel()
            steps.append(1)
            if len(steps) > 10_000_000:
                raise AssertionError("never cancelled")

    ctx = RequestContext(request_id=1, method="tools/call", peer=RecordingPeer(), progress_token="t")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(ctx.run_in_worker, work)
            await started.wait()
            group.cancel_scope.cancel()
    assert len(steps) < 10_000_000
