"""The merged fleet answer keeps to its line budget (``merging.LINE_BUDGET``) whatever the hosts say: every
line the model reads is charged, the one that says where the rest went included."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sysmcp.protocol.context import RequestContext
from sysmcp.protocol.jsonrpc import Request
from sysmcp.protocol.lifecycle import features_of
from sysmcp.results import ResultStore
from sysmcp.server.methods import ANSWER_BUDGET
from sysmcp.tools.merging import LINE_BUDGET, TEXT_BUDGET, HostOutcome
from sysmcp.tools.registry import Tool
from tests.fleet.test_server_fleet import INVENTORY, MemoryFleet, call, server
from tests.harness import RecordingPeer

HOSTS = list(INVENTORY.hosts)
#: The lines a host's text may hold: short and long, blank, and Unicode's other line ends.
LINE = st.one_of(
    st.text(alphabet="abc /.:0123456789", max_size=30),
    st.integers(0, 3_000).map(lambda n: "x" * n),
    st.sampled_from(["\x01", "y"]).map(lambda c: c * 60_000),  # one line wider than a cut text's share
    st.sampled_from(["", "a\rb", "a\u2028b", "a\x0bb", "1.5 s", "sysmcp://results/1/x"]),
)
OUTCOME = st.tuples(
    st.sampled_from(["ok", "ok", "ok", "unreachable", "timeout", "tool_error"]),
    st.lists(LINE, max_size=20).map("\n".join),
    st.booleans(),  # the host's name in its text: an answer no other host shares
)


class ShapedFleet(MemoryFleet):
    """Hosts whose outcomes the test chooses, host by host."""

    def __init__(self, shapes: list[tuple[str, str, bool]]) -> None:
        super().__init__()
        self.shapes = shapes

    async def call(
        self, tool: Tool, arguments: dict[str, Any], hosts: list[str], ctx: RequestContext
    ) -> list[HostOutcome]:
        outcomes = []
        for n, host in enumerate(hosts):
            status, text, own = self.shapes[n % len(self.shapes)]
            text = f"{host}: {text}" if own else text
            if status == "ok":
                outcomes.append(HostOutcome(host, "ok", 0.01, None, text))
            else:
                outcomes.append(HostOutcome(host, status, 1.0, reason=text.split("\n")[0][:200]))
        return outcomes


async def call_as(version: str, srv: Any, arguments: dict[str, Any], tool: str) -> dict[str, Any]:
    ctx = RequestContext(1, "tools/call", RecordingPeer(), features=features_of(version))
    result: dict[str, Any] = await srv.handle_request(
        Request(1, "tools/call", {"name": tool, "arguments": arguments}), ctx
    )
    return result


def lines_read(result: dict[str, Any]) -> int:
    """The lines of text the model reads: every text block's, as the client splits them."""
    return sum(len(block["text"].split("\n")) for block in result["content"] if block["type"] == "text")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.integers(1, len(HOSTS)),
    shapes=st.lists(OUTCOME, min_size=1, max_size=6),
    keepable=st.booleans(),
    tool=st.sampled_from(["find_duplicates", "deleted_open_files", "hash_tree"]),
    version=st.sampled_from(["2025-11-25", "2025-03-26"]),  # a link as a block, or as a line of text
)
def test_the_merged_text_never_passes_its_line_budget(
    count: int, shapes: list[tuple[str, str, bool]], keepable: bool, tool: str, version: str
) -> None:
    srv = server(ShapedFleet(shapes))
    if not keepable:  # the full text too big to keep: its reason takes the link's place
        srv.results = ResultStore(max_item=10)
    result = anyio.run(call_as, version, srv, {"path": "/srv", "hosts": HOSTS[:count]}, tool)
    assert result["isError"] is False or "Invalid arguments" not in result["content"][0]["text"], result
    assert lines_read(result) <= LINE_BUDGET, result["content"]
    assert len(result["content"][0]["text"]) <= TEXT_BUDGET + 1_000, result["content"][0]["text"][-300:]
    if any(shapes[n % len(shapes)][0] != "ok" for n in range(count)):  # named before any healthy detail
        assert "Hosts without a result:" in result["content"][0]["text"].split("\n"), result["content"]


@pytest.mark.anyio
async def test_a_cut_text_whose_full_text_is_not_kept_says_so_within_the_budget() -> None:
    srv = server(ShapedFleet([("ok", "line\n" * 7, True)]))
    srv.results = ResultStore(max_item=10)
    result = await call(srv, {"path": "/srv", "hosts": ["all"]}, "find_duplicates")
    text = result["content"][0]["text"]
    assert len(text.split("\n")) == LINE_BUDGET, text
    assert text.split("\n")[-2] == "… 252 more lines not shown.", text
    assert text.split("\n")[-1].startswith("The full text: not kept, the full result ("), text


def test_a_fleet_text_within_its_own_budget_is_never_cut_again_by_the_servers() -> None:
    """The server's cut of a long answer adds two lines of its own: the fleet's text stays below it."""
    assert TEXT_BUDGET + 1_000 < ANSWER_BUDGET


@pytest.mark.anyio
async def test_one_hosts_line_of_a_megabyte_leaves_the_hosts_without_a_result_named() -> None:
    """A cut text stopped at its first line that did not fit: one host's line of a megabyte took the lines
    after it out, the failed hosts' names and reasons included, with 76 lines of the budget left."""
    srv = server(
        ShapedFleet(
            [
                ("ok", "x" * 1_000_000, False),
                ("unreachable", "Connection refused", False),
                ("timeout", "the fleet deadline passed", False),
            ]
        )
    )
    result = await call(srv, {"path": "/srv", "hosts": ["web01", "web02", "web03"]}, "find_duplicates")
    text = result["content"][0]["text"]
    assert text.split("\n")[-4:-1] == [
        "Hosts without a result:",
        "  web02: unreachable — Connection refused",
        "  web03: timeout — the fleet deadline passed",
    ], text[-500:]
    assert f"xxxx … ({1_000_000 - 4_000 + 4:,} more characters not shown)" in text, text[-500:]
    assert text.split("\n")[-1] == "… every line is shown, 1 line shortened.", text[-500:]
    assert len(text) < TEXT_BUDGET and len(text.split("\n")) <= LINE_BUDGET


@pytest.mark.anyio
async def test_hosts_without_a_result_are_named_before_healthy_hosts_detail_in_a_cut_text() -> None:
    """The failed hosts' lines came last and were the first cut: with 35 healthy hosts giving different
    answers, the 6 unreachable ones were only counted in the tally, while healthy hosts' lines were shown."""
    healthy = ("ok", "scanned /srv\n3 groups\n12 MiB wasted", True)  # each host's name in its text
    down = ("unreachable", "Connection refused", True)  # each its own reason: one line per host
    srv = server(ShapedFleet([healthy, healthy, healthy, healthy, healthy, down]))
    result = await call(srv, {"path": "/srv", "hosts": ["all"]}, "find_duplicates")
    text = result["content"][0]["text"]
    lines = text.split("\n")
    unreachable = [host for n, host in enumerate(HOSTS) if n % 6 == 5]
    assert lines[0].startswith("35 of 41 hosts answered, 6 unreachable"), text
    for host in unreachable:
        assert f"  {host}: unreachable — {host}: Connection refused" in lines, text
    assert "Hosts without a result:" in lines and "== web01 (0.01 s)" in lines, text
    assert lines[-1] == "… 71 more lines not shown.", text  # the link to the full text is a block of its own
    assert len(lines) == LINE_BUDGET - 1 and len(text) <= TEXT_BUDGET, text
