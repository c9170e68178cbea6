"""Worker threads and cancellation: wait for a worker that stops, let go of one that cannot."""

from __future__ import annotations

import threading

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from sysmcp.protocol import threads
from sysmcp.protocol.failures import ToolError
from sysmcp.protocol.threads import LEFT_BEHIND, run_in_thread

pytestmark = pytest.mark.anyio


async def wait_for_thread(event: threading.Event) -> None:
    with anyio.fail_after(5):
        assert await anyio.to_thread.run_sync(event.wait, 5)


async def until_nothing_left_behind() -> None:
    """The count drops when a left-behind thread finishes, on that thread: wait for it, bounded."""
    with anyio.fail_after(5):
        while LEFT_BEHIND.count:
            await anyio.sleep(0.01)


async def test_a_cancelled_worker_that_reaches_a_checkpoint_is_waited_for() -> None:
    entered, exited = threading.Event(), threading.Event()

    def work(_: None) -> None:
        entered.set()
        try:
            while True:
                anyio.from_thread.check_cancelled()
        finally:
            exited.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run_in_thread, work, None, anyio.CapacityLimiter(1))
            await wait_for_thread(entered)
            group.cancel_scope.cancel()
    assert exited.is_set()  # the call returned only once its thread had stopped
    assert LEFT_BEHIND.count == 0


async def test_a_cancelled_worker_stuck_in_a_call_is_left_behind_and_its_slot_freed() -> None:
    entered, release = threading.Event(), threading.Event()
    limiter = anyio.CapacityLimiter(1)

    def stuck(_: None) -> None:
        entered.set()
        release.wait()  # no checkpoint: like a read blocked in a dead mount

    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(run_in_thread, stuck, None, limiter)
                await wait_for_thread(entered)
                group.cancel_scope.cancel()
        assert LEFT_BEHIND.count == 1 and not release.is_set()
        assert limiter.borrowed_tokens == 0
        with anyio.fail_after(5):
            assert await run_in_thread(lambda n: n + 1, 41, limiter) == 42  # the only slot is free again
    finally:
        release.set()
    await until_nothing_left_behind()


async def test_new_work_is_refused_while_too_many_threads_are_left_behind() -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(_: None) -> None:
        entered.set()
        release.wait()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run_in_thread, stuck, None, None)
            await wait_for_thread(entered)
            group.cancel_scope.cancel()
        with pytest.raises(ToolError, match="still blocked in the kernel"):
            await run_in_thread(lambda n: n, 1, None, max_left_behind=1)
    finally:
        release.set()
    await until_nothing_left_behind()
    assert (
        await run_in_thread(lambda n: n, 1, None, max_left_behind=1) == 1
    )  # once they return, work is taken again


async def test_a_call_cancelled_before_its_thread_starts_leaves_nothing_behind() -> None:
    ran = threading.Event()
    for _ in range(threads.MAX_LEFT_BEHIND + 5):
        with anyio.CancelScope() as scope:
            scope.cancel()  # cancelled before the work is handed to a thread
            await run_in_thread(lambda _: ran.set(), None, None)
    assert LEFT_BEHIND.count == 0 and not ran.is_set()
    assert await run_in_thread(lambda n: n, 7, None) == 7  # and new work is still taken
