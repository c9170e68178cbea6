"""One memory budget for the unfinished lines of every session of a gateway: the I/O-free budget,
and sessions sharing one over scripted peers in memory."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysmcp.protocol.client import ClientSession, PeerGone
from sysmcp.protocol.framing import LineDecoder
from sysmcp.protocol.linebudget import DEFAULT_LINE_BUDGET, LineBudget, default_line_budget

pytestmark = pytest.mark.anyio

KIB = 1 << 10
WORDS = (
    "its answer did not fit the gateway's memory for answers in flight (1 MiB across 2 hosts): "
    "ask fewer hosts at once or a smaller answer"
)


# -- I/O-free -----------------------------------------------------------------------------------


def test_past_the_budget_the_holder_of_the_most_is_refused_until_the_claim_fits() -> None:
    mib = 1 << 20
    budget = LineBudget(100 * mib)
    refused: dict[str, str] = {}

    def refuse(name: str) -> Any:
        return lambda reason: refused.setdefault(name, reason)

    assert budget.claim("a", 60 * mib, refuse("a")) and budget.claim("b", 30 * mib, refuse("b"))
    assert budget.claim("c", 20 * mib, refuse("c"))  # 110: a, holding the most, is refused; b and c fit
    assert list(refused) == ["a"] and (budget.held, budget.holders) == (50 * mib, 2)
    assert refused["a"] == (
        "its answer did not fit the gateway's memory for answers in flight (100 MiB across 3 hosts): "
        "ask fewer hosts at once or a smaller answer"
    )
    assert not budget.claim("c", 80 * mib, refuse("c"))  # 110 again: c itself would hold the most
    assert list(refused) == ["a", "c"] and (budget.held, budget.holders) == (30 * mib, 1)
    assert "(100 MiB across 2 hosts)" in refused["c"]


def test_a_holder_alone_is_never_refused_and_a_claim_replaces_what_it_held() -> None:
    budget = LineBudget(10)
    assert budget.claim("a", 1_000, lambda reason: pytest.fail(reason))
    assert budget.claim("a", 5, lambda reason: pytest.fail(reason)) and budget.held == 5
    assert budget.claim("a", 0, lambda reason: pytest.fail(reason)) and budget.holders == 0


def test_lines_arriving_are_refused_before_answers_kept_and_a_kept_answer_is_never_dropped() -> None:
    """An answer kept (50) and a line stalled (30) of a budget of 100: a line of 25 more is refused the
    longest line first, the stalled one, never the answer kept though it holds the most. A line that
    cannot fit beside the answers kept is refused itself, however short the other lines."""
    budget = LineBudget(100)
    refused: dict[str, str] = {}

    def refuse(name: str) -> Any:
        return lambda reason: refused.setdefault(name, reason)

    assert budget.keep("kept", 50, refuse("kept")) and budget.claim("stalled", 30, refuse("stalled"))
    assert budget.claim("line", 25, refuse("line"))
    assert list(refused) == ["stalled"] and budget.held == 75
    assert budget.claim("short", 5, refuse("short"))
    assert not budget.claim("line", 51, refuse("line"))  # 50 kept + 51: no line refused makes room
    assert list(refused) == ["stalled", "line"] and budget.held == 55  # "short" is not cut for nothing


def test_among_answers_kept_the_newest_is_refused_and_the_lines_arriving_go_first() -> None:
    budget = LineBudget(100)
    refused: dict[str, str] = {}

    def refuse(name: str) -> Any:
        return lambda reason: refused.setdefault(name, reason)

    assert budget.keep("first", 30, refuse("first")) and budget.claim("line", 50, refuse("line"))
    assert budget.keep("second", 60, refuse("second"))  # 140: the line goes, both answers are kept
    assert list(refused) == ["line"] and budget.held == 90
    assert not budget.keep("third", 20, refuse("third"))  # 110: the newest, not one kept before it
    assert list(refused) == ["line", "third"] and budget.held == 90
    budget.release("first")
    assert budget.keep("third", 10, refuse("third")) and budget.held == 70


def test_an_answer_or_a_line_alone_is_never_refused() -> None:
    budget = LineBudget(10)
    refused: list[str] = []
    assert budget.keep("kept", 1_000, pytest.fail) and budget.held == 1_000
    budget.release("kept")
    assert budget.claim("line", 1_000, refused.append)
    assert budget.keep("kept", 20, pytest.fail)  # the line goes, arriving; the answer alone is kept
    assert len(refused) == 1 and budget.held == 20 and budget.holders == 1


def test_the_budgets_words_count_each_host_once_however_many_bytes_it_holds() -> None:
    """Host a holds an answer kept in one call and a line in another; b holds a line: two hosts."""
    mib = 1 << 20
    budget = LineBudget(100 * mib)
    refused: dict[str, str] = {}

    def refuse(name: str) -> Any:
        return lambda reason: refused.setdefault(name, reason)

    assert budget.keep("a's answer", 30 * mib, pytest.fail, host="a")
    assert budget.claim("b's line", 40 * mib, refuse("b"), host="b")
    assert budget.claim("a's line", 35 * mib, pytest.fail, host="a")
    assert refused == {
        "b": "its answer did not fit the gateway's memory for answers in flight (100 MiB across 2 hosts): "
        "ask fewer hosts at once or a smaller answer"
    }
    budget.release("a's line")  # ended, and kept in its call:
    assert budget.keep("a's answer again", 40 * mib, pytest.fail, host="a")
    assert not budget.claim("a's third", 40 * mib, refuse("a"), host="a")
    assert "(100 MiB across 1 host)" in refused["a"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.booleans(), st.integers(0, 150)), max_size=40))
def test_the_budget_holds_within_its_limit_or_one_holder_and_drops_no_answer_kept(
    steps: list[tuple[int, bool, int]],
) -> None:
    """Any claims and keeps of eight holders against 100: what is held stays within the limit, or one
    holder holds it all; an answer once kept is never refused after."""
    budget = LineBudget(100)
    kept: set[int] = set()
    refused: list[int] = []

    def refuse(name: int) -> Any:
        return lambda reason: refused.append(name)

    for holder, keeping, size in steps:
        refused.clear()
        kept.discard(holder)
        act = budget.keep if keeping else budget.claim
        if act(holder, size, refuse(holder), host=holder % 3) and keeping and size > 0:
            kept.add(holder)
        assert not kept & set(refused), (refused, kept)
        assert budget.held <= budget.limit or budget.holders == 1


def test_the_default_budget_is_512_mib_or_an_eighth_of_physical_memory_if_less() -> None:
    assert default_line_budget(None) == DEFAULT_LINE_BUDGET == 512 << 20
    assert default_line_budget(64 << 30) == 512 << 20
    assert default_line_budget(2 << 30) == 256 << 20


def test_what_a_decoder_holds_after_a_chunk_is_known_before_it_is_fed() -> None:
    decoder = LineDecoder(100)
    for chunk in (b"abc", b"de\nfg", b"h\n", b"x" * 99, b"y" * 5, b"zz\nq"):
        expected = decoder.held_after(chunk)
        decoder.feed(chunk)
        assert decoder.buffered == expected, chunk


# -- sessions sharing one budget -----------------------------------------------------------------


class Peer:
    """A host's end of two in-memory byte streams, driven by the test."""

    def __init__(self) -> None:
        self.to_client, self.client_reads = anyio.create_memory_object_stream[bytes](1_000)
        self.client_writes, self.from_client = anyio.create_memory_object_stream[bytes](100)

    async def request_id(self) -> Any:
        return json.loads(await self.from_client.receive())["id"]

    async def send_in_chunks(self, data: bytes) -> None:
        for start in range(0, len(data), 64 * KIB):
            await self.to_client.send(data[start : start + 64 * KIB])


def reply(msg_id: Any, size: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": {"answer": "x" * size}}).encode() + b"\n"


async def two_hosts_one_budget(
    first: int, second: int
) -> tuple[dict[str, Any], ClientSession, ClientSession]:
    """Host a sends ``first`` bytes of its reply line and stops; then host b sends its whole reply of
    ``second`` bytes; then a ends its line. Their sessions share a budget of 1 MiB. What each call got."""
    budget = LineBudget(1 << 20)
    peers = {"a": Peer(), "b": Peer()}
    sessions = {
        name: ClientSession(peer.client_writes, peer.client_reads, name=name, line_budget=budget)
        for name, peer in peers.items()
    }
    got: dict[str, Any] = {}

    async def ask(name: str) -> None:
        try:
            got[name] = await sessions[name].request("tools/call", {})
        except PeerGone as gone:
            got[name] = str(gone)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            for name in peers:
                group.start_soon(sessions[name].run)
                group.start_soon(ask, name)
            ids = {name: await peer.request_id() for name, peer in peers.items()}
            line_a = reply(ids["a"], 0)[:-4] + b"x" * first + b'"}}\n'
            await peers["a"].send_in_chunks(line_a[:first])
            await anyio.wait_all_tasks_blocked()  # a's reader holds it all
            assert budget.held_by(sessions["a"]) == first
            await peers["b"].send_in_chunks(reply(ids["b"], second))
            await anyio.wait_all_tasks_blocked()
            await peers["a"].send_in_chunks(line_a[first:])
            while len(got) < 2:
                await anyio.wait_all_tasks_blocked()
            assert budget.held == 0
            alive = {name: session.alive for name, session in sessions.items()}
            group.cancel_scope.cancel()
    assert alive == {"a": "a" not in refused_of(got), "b": "b" not in refused_of(got)}
    return got, sessions["a"], sessions["b"]


def refused_of(got: dict[str, Any]) -> set[str]:
    return {name for name, value in got.items() if value == WORDS}


async def test_a_host_stalled_holding_the_most_is_refused_and_the_host_answering_after_it_is_read() -> None:
    """a holds 768 KiB of its line; b's answer of 512 KiB takes the sum past 1 MiB: a, holding the
    most, is refused (its bytes freed at once) and b's answer arrives. Before, both were held whole,
    without bound across sessions."""
    got, a, b = await two_hosts_one_budget(768 * KIB, 512 * KIB)
    assert got["a"] == WORDS and a.ended_here and a.unfinished == 0
    assert got["b"] == {"answer": "x" * (512 * KIB)} and not b.ended_here


async def test_a_host_whose_answer_would_hold_the_most_is_the_one_refused() -> None:
    """a holds 300 KiB; b's answer of 900 KiB passes the budget while b would hold more than a: b is
    refused, and a's answer, ended later, arrives whole."""
    got, a, b = await two_hosts_one_budget(300 * KIB, 900 * KIB)
    assert got["b"] == WORDS and b.ended_here and b.unfinished == 0
    assert got["a"] == {"answer": "x" * (300 * KIB)} and not a.ended_here


async def test_one_host_alone_reads_an_answer_longer_than_the_whole_budget() -> None:
    budget = LineBudget(64 * KIB)
    peer = Peer()
    session = ClientSession(peer.client_writes, peer.client_reads, line_budget=budget)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(session.run)

            async def answer() -> None:
                await peer.send_in_chunks(reply(await peer.request_id(), 4 << 20))

            group.start_soon(answer)
            result = await session.request("tools/call", {})
            group.cancel_scope.cancel()
    assert result == {"answer": "x" * (4 << 20)} and budget.held == 0


# -- every way a session ends gives its bytes back ---------------------------------------------------


async def _held_after(ending: str) -> tuple[int, int]:
    """One session of a shared budget is sent part of its answer, then ended as ``ending`` says;
    another session holds part of a line throughout. What the budget holds while the first holds its
    part, and what it holds of the first once it has ended."""
    budget = LineBudget(1 << 20)
    peer, other = Peer(), Peer()
    session = ClientSession(
        peer.client_writes, peer.client_reads, name="a", line_budget=budget, max_line=256 * KIB
    )
    bystander = ClientSession(other.client_writes, other.client_reads, name="b", line_budget=budget)
    got: list[Any] = []

    async def ask() -> None:
        try:
            got.append(await session.request("tools/call", {}))
        except PeerGone as gone:
            got.append(gone)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            reader = anyio.CancelScope()

            async def read() -> None:
                with reader:
                    await session.run()

            group.start_soon(read)
            group.start_soon(bystander.run)
            group.start_soon(ask)
            line = reply(await peer.request_id(), 100 * KIB)
            await other.to_client.send(b'{"jsonrpc": "2.0", "id": 99, "result": {"x": "' + b"y" * 1000)
            if ending == "at a chunk's end":  # the line ends exactly where the chunk does
                await peer.to_client.send(line[:5000])
                await anyio.wait_all_tasks_blocked()
                during = budget.held_by(session)
                await peer.to_client.send(line[5000:])
            else:
                await peer.to_client.send(line[:5000])
                await anyio.wait_all_tasks_blocked()
                during = budget.held_by(session)
                if ending == "killed":  # the host's output ends mid-line
                    await peer.to_client.aclose()
                elif ending == "abandoned":  # given up this side (a fleet deadline)
                    session.abandon("given up")
                elif ending == "reader cancelled":
                    reader.cancel()
                elif ending == "oversized":  # past the line cap: dropped as it comes
                    await peer.to_client.send(b"z" * (300 * KIB))
                elif ending == "not MCP":  # a line of something else, then more of one
                    await peer.to_client.send(b"\nnot json at all\n" + b"{" * 100)
            while not got:  # answered, or told the session ended
                await anyio.wait_all_tasks_blocked()
            answered = [{"answer": "x" * (100 * KIB)}] if ending == "at a chunk's end" else got
            assert got == answered and (ending == "at a chunk's end" or isinstance(got[0], PeerGone))
            after = budget.held_by(session)
            assert budget.held_by(bystander) == 1000 + len(b'{"jsonrpc": "2.0", "id": 99, "result": {"x": "')
            group.cancel_scope.cancel()
    return during, after


@pytest.mark.parametrize(
    "ending", ["at a chunk's end", "killed", "abandoned", "reader cancelled", "oversized", "not MCP"]
)
async def test_a_session_ended_any_way_holds_nothing_of_the_shared_budget(ending: str) -> None:
    during, after = await _held_after(ending)
    assert during == 5000
    assert after == 0


@settings(max_examples=2000, deadline=None)
@given(
    st.integers(1, 12), st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\x00", b"\n")), max_size=12)
)
def test_what_a_decoder_will_hold_is_what_it_holds_for_any_chunks(max_line: int, chunks: list[bytes]) -> None:
    """The claim made before a chunk is fed is what the session then holds, whatever the chunks (lines
    ending at a chunk's end, past the cap, several in one chunk): never a byte held unclaimed, nor
    one claimed and not held."""
    decoder = LineDecoder(max_line)
    for chunk in chunks:
        expected = decoder.held_after(chunk)
        decoder.feed(chunk)
        assert decoder.buffered == expected, (chunk, max_line)
