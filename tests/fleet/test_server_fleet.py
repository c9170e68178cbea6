"""The server's fan-out path, with a fleet whose hosts answer from memory: the one error boundary,
name resolution, the line budget and its resource link. (The real fleet over sshd: test_fleet_sshd.)"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sysmcp.fleet.gateway import within_answer
from sysmcp.fleet.inventory import parse_ini
from sysmcp.fleet.schema import hosts_property
from sysmcp.protocol.context import RequestContext
from sysmcp.protocol.failures import ProtocolError
from sysmcp.protocol.framing import encode
from sysmcp.protocol.jsonrpc import Request
from sysmcp.protocol.lifecycle import features_of
from sysmcp.protocol.session import MAX_RESULT
from sysmcp.server import build_server
from sysmcp.tools import ALL_TOOLS
from sysmcp.tools.dir_usage import TOOL as DIR_USAGE
from sysmcp.tools.merging import HostOutcome, merge_readable
from sysmcp.tools.registry import Tool
from tests.harness import RecordingPeer

pytestmark = pytest.mark.anyio

INVENTORY = parse_ini("[web]\nweb[01:40]\n[db]\ndb1\n")


class MemoryFleet:
    """Hosts that answer at once: ``answers`` maps a host to its outcome's status."""

    def __init__(self, status: str = "ok", results: dict[str, dict[str, Any]] | None = None) -> None:
        self.status = status
        self.results = results or {}
        self.calls: list[tuple[str, dict[str, Any], list[str]]] = []
        self.reads: list[tuple[str, str]] = []
        self.localised: list[dict[str, Any]] = []

    @property
    def host_names(self) -> list[str]:
        return list(INVENTORY.hosts)

    @property
    def groups(self) -> dict[str, int]:
        return {name: len(INVENTORY.groups[name]) for name in INVENTORY.group_names}

    def resolve(self, names: list[str]) -> list[str]:
        return INVENTORY.resolve(names)

    async def call(
        self, tool: Tool, arguments: dict[str, Any], hosts: list[str], ctx: RequestContext
    ) -> list[HostOutcome]:
        self.calls.append((tool.name, arguments, hosts))
        if self.status != "ok":
            return [HostOutcome(h, self.status, 1.0, reason="Connection refused") for h in hosts]
        # Each host's own text (identical answers are grouped into one: see test_fleet_merges).
        return [
            HostOutcome(h, "ok", 0.01, self.results.get(h, {"x": 1}), f"{h} line one\nline two\nline three")
            for h in hosts
        ]

    async def read_resource(self, host: str, uri: str) -> dict[str, Any]:
        self.reads.append((host, uri))
        if uri != "sysmcp://results/1/SHA256SUMS":
            raise LookupError(f"{host} no longer has it")
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "abc  ./f\n"}]}

    async def localise(self, arguments: dict[str, Any]) -> dict[str, Any]:
        self.localised.append(arguments)
        return {**arguments, "manifest": "abc  ./f\n"}


def server(fleet: MemoryFleet) -> Any:
    return build_server(ALL_TOOLS, fleet=fleet, hosts_property=hosts_property(41))


async def call(srv: Any, arguments: dict[str, Any], tool: str = "disk_usage") -> dict[str, Any]:
    ctx = RequestContext(1, "tools/call", RecordingPeer(), features=features_of("2025-11-25"))
    result: dict[str, Any] = await srv.handle_request(
        Request(1, "tools/call", {"name": tool, "arguments": arguments}), ctx
    )
    return result


async def test_hosts_fan_out_without_the_hosts_argument_and_merge() -> None:
    fleet = MemoryFleet()
    result = await call(server(fleet), {"unit": "human", "hosts": ["db*", "web01"]})
    assert fleet.calls == [("disk_usage", {"unit": "human"}, ["web01", "db1"])]
    assert [e["host"] for e in result["structuredContent"]["hosts"]] == ["web01", "db1"]
    assert result["isError"] is False


async def test_unknown_names_never_reach_the_fleet() -> None:
    fleet = MemoryFleet()
    result = await call(server(fleet), {"hosts": ["mail1"]})
    assert result["isError"] is True and "groups: web, db" in result["content"][0]["text"]
    assert fleet.calls == []


async def test_a_long_answer_is_cut_and_the_full_one_is_a_resource_link() -> None:
    srv = server(MemoryFleet())
    result = await call(srv, {"path": "/srv", "hosts": ["all"]}, "find_duplicates")
    text = result["content"][0]["text"]
    assert len(text.splitlines()) == 79 and "more lines not shown" in text  # the link: the 80th
    (link,) = [block for block in result["content"] if block["type"] == "resource_link"]
    stored = srv.results.get(link["uri"])
    assert stored is not None and '"host": "db1"' in stored.text and stored.mime_type == "application/json"
    assert len(result["structuredContent"]["hosts"]) == 41


async def test_no_host_answering_is_an_error_naming_every_status() -> None:
    result = await call(server(MemoryFleet("unreachable")), {"hosts": ["db"]})
    assert result["isError"] is True
    assert "0 of 1 host answered, 1 unreachable" in result["content"][0]["text"]
    assert "db1: unreachable — Connection refused" in result["content"][0]["text"]


def dir_usage_result(top: str) -> dict[str, Any]:
    totals = {"files": 3, "directories": 2, "apparent_bytes": 10, "disk_bytes": 10, "entries": 5}
    notes = {"hard_linked_files": 0, "sparse_bytes": 0, "hidden_files": 0, "hidden_bytes": 0}
    return {
        "path": "/var",
        "complete": True,
        "stopped_reason": None,
        "elapsed_s": 0.5,
        "sort_by": "disk",
        "totals": {**totals, **notes},
        "skipped": {},
        "largest_files": [],
        "files_not_shown": 0,
        "largest_directories": [
            {"path": top, "disk_bytes": 10, "apparent_bytes": 10, "files": 3, "depth": 1}
        ],
        "directories_not_shown": 0,
    }


async def test_a_host_answering_in_a_shape_this_version_cannot_read_is_shown_by_its_text_and_named() -> None:
    old = {key: value for key, value in dir_usage_result("/var/lib").items() if key != "totals"}
    fleet = MemoryFleet(results={"web01": dir_usage_result("/var/log"), "db1": old})
    result = await call(server(fleet), {"path": "/var", "hosts": ["web01", "db1"]}, "dir_usage")
    text = result["content"][0]["text"]
    assert result["isError"] is False and text.startswith("2 of 2 hosts answered.")
    assert "web01: largest directories" in text and "db1: largest" not in text
    assert (
        "1 host answered in a shape this sysmcp does not read (an older sysmcp?), not in the view above: db1. Its own text:"
        in text
    )
    assert "== db1 (0.01 s)\n    db1 line one" in text
    assert [t["host"] for t in result["structuredContent"]["view"]["totals"]] == ["web01"]
    assert result["structuredContent"]["hosts"][1] == {
        "host": "db1",
        "status": "ok",
        "seconds": 0.01,
        "result": old,
    }


async def test_instructions_name_the_groups_and_the_first_fifty_hosts() -> None:
    text = server(MemoryFleet()).instructions
    assert "41 hosts" in text and "web (40), db (1)" in text and "web40" in text
    assert text.count(", web") <= 50


async def test_without_a_fleet_hosts_is_an_unknown_argument_as_before() -> None:
    srv = build_server(ALL_TOOLS)
    result = await call(srv, {"hosts": ["all"]})
    assert result["isError"] is True and "hosts" in result["content"][0]["text"]


async def test_server_discover_carries_the_fleet_too() -> None:
    srv = server(MemoryFleet())
    ctx = RequestContext(2, "server/discover", RecordingPeer(), features=features_of("2025-11-25"))
    result = await srv.handle_request(Request(2, "server/discover", {}), ctx)
    assert "41 hosts" in result["instructions"] and "db (1)" in result["instructions"]


async def read(srv: Any, uri: str) -> dict[str, Any]:
    ctx = RequestContext(2, "resources/read", RecordingPeer(), features=features_of("2025-11-25"))
    result: dict[str, Any] = await srv.handle_request(Request(2, "resources/read", {"uri": uri}), ctx)
    return result


async def test_a_hosts_own_link_is_read_through_that_hosts_session() -> None:
    fleet = MemoryFleet()
    srv = server(fleet)
    reply = await read(srv, "sysmcp://hosts/web07/results/1/SHA256SUMS")
    assert fleet.reads == [("web07", "sysmcp://results/1/SHA256SUMS")]
    assert reply["contents"] == [
        {"uri": "sysmcp://hosts/web07/results/1/SHA256SUMS", "mimeType": "text/plain", "text": "abc  ./f\n"}
    ]
    with pytest.raises(ProtocolError) as gone:
        await read(srv, "sysmcp://hosts/web07/results/9/old")
    assert gone.value.code == -32002 and "web07 no longer has it" in gone.value.message
    with pytest.raises(ProtocolError):
        await read(srv, "sysmcp://hosts/web07/elsewhere")  # not a result link: not the fleet's
    assert len(fleet.reads) == 2


class OddReads(MemoryFleet):
    """A host whose ``resources/read`` answer is in no shape MCP defines."""

    def __init__(self, contents: Any) -> None:
        super().__init__()
        self.contents = contents

    async def read_resource(self, host: str, uri: str) -> dict[str, Any]:
        return {"contents": self.contents}


@pytest.mark.parametrize("contents", [5, "abc", ["abc"], None, [{"text": "x"}, 7]])
async def test_a_hosts_read_answered_in_no_shape_is_not_found_with_a_reason_not_an_internal_error(
    contents: Any,
) -> None:
    """A result relayed as it came (characters of a string as its contents, a number as one), or
    a TypeError the client saw as \"Internal error\"."""
    with pytest.raises(ProtocolError) as odd:
        await read(server(OddReads(contents)), "sysmcp://hosts/web07/results/1/SHA256SUMS")
    assert odd.value.code == -32002
    assert "web07 answered the read in no shape MCP defines" in odd.value.message


async def test_a_link_argument_for_a_tool_run_here_becomes_the_text_behind_it() -> None:
    fleet = MemoryFleet()
    reply = await call(
        server(fleet),
        {"manifest": "sysmcp://hosts/web07/results/1/SHA256SUMS", "base_dir": "/nonexistent-dir"},
        tool="verify_checksums",
    )
    assert len(fleet.localised) == 1 and not fleet.calls
    assert fleet.localised[0]["manifest"] == "sysmcp://hosts/web07/results/1/SHA256SUMS"
    assert "nonexistent-dir" in reply["content"][0]["text"]  # it went on to run, with the text


def test_hosts_answering_in_an_unread_shape_are_counted_as_answered_and_listed_before_those_without_a_result() -> (
    None
):
    assert DIR_USAGE.merge is not None
    old = {key: value for key, value in dir_usage_result("/var/lib").items() if key != "totals"}
    outcomes = [
        HostOutcome("web01", "ok", 0.01, dir_usage_result("/var/log"), "web01 text"),
        HostOutcome("db1", "ok", 0.01, old, "db1 text"),
        HostOutcome("web02", "unreachable", 2.0, reason="Connection refused"),
    ]
    out = merge_readable(DIR_USAGE.merge, outcomes, {"path": "/var"})
    lines = out.text.splitlines()
    assert lines[0] == "2 of 3 hosts answered, 1 unreachable."
    assert lines[-3:] == [
        "    db1 text",
        "Hosts without a result:",
        "  web02: unreachable — Connection refused",
    ]
    assert (out.structured["asked"], out.structured["answered"], out.is_error) == (3, 2, False)


async def test_a_hosts_name_with_a_newline_or_an_escape_stays_one_escaped_line_of_the_merged_text() -> None:
    """A host (compromised, or holding such a file) must not forge another host's line in the merged
    text, nor drive the terminal that shows it: its names are escaped as a tool escapes its own."""
    forged = "/var/x\n== web01: 0 B, all is well\x1b[2J"
    fleet = MemoryFleet(results={"web01": dir_usage_result("/var/log"), "web02": dir_usage_result(forged)})
    result = await call(server(fleet), {"path": "/var", "hosts": ["web01", "web02"]}, "dir_usage")
    text = result["content"][0]["text"]
    assert all(line.isprintable() for line in text.splitlines())
    assert "/var/x\\n== web01: 0 B, all is well\\033[2J" in text
    assert not any(line.startswith("== web01") for line in text.splitlines())
    assert result["structuredContent"]["hosts"][1]["result"]["largest_directories"][0]["path"] == forged


async def test_a_host_whose_number_no_float_holds_is_shown_by_its_text_and_the_others_are_merged() -> None:
    """10**4000 is a valid JSON integer: one host sending it must not fail every host's answer."""
    huge = dir_usage_result("/var/lib")
    huge["totals"]["disk_bytes"] = 10**4000
    fleet = MemoryFleet(results={"web01": dir_usage_result("/var/log"), "web02": huge})
    result = await call(server(fleet), {"path": "/var", "hosts": ["web01", "web02"]}, "dir_usage")
    text = result["content"][0]["text"]
    assert result["isError"] is False and text.startswith("2 of 2 hosts answered.")
    assert "/var/log" in text and "in a shape this sysmcp does not read" in text and "web02" in text


@pytest.mark.slow  # a 44 MiB answer of 300,000 rows, merged and encoded at the real cap
async def test_one_hosts_answer_too_large_to_merge_is_its_reason_and_the_others_answer_is_sent() -> None:
    """44 MiB from one host is in the merged answer twice (its entry, the view): over the session's
    80 MiB cap, the whole answer was an internal error and every host's answer lost."""
    big = dir_usage_result("/var/lib")
    row = {"disk_bytes": 10, "apparent_bytes": 10, "files": 3, "depth": 1}
    big["largest_directories"] = [{"path": f"/var/lib/{i:08}{'x' * 60}", **row} for i in range(300_000)]
    fleet = MemoryFleet(results={"web01": dir_usage_result("/var/log"), "web02": big})
    result = await call(server(fleet), {"path": "/var", "hosts": ["web01", "web02"]}, "dir_usage")
    assert len(encode(result)) <= MAX_RESULT
    web01, web02 = result["structuredContent"]["hosts"]
    assert web01["status"] == "ok" and web01["result"]["largest_directories"][0]["path"] == "/var/log"
    assert web02["status"] == "remote_error" and "too large to merge" in web02["reason"]


def test_a_cut_answer_says_the_limit_it_passed_and_a_lone_host_is_not_told_to_ask_it_alone() -> None:
    pair = [HostOutcome(f"h{n}", "ok", 0.1, {"x": "x" * 90}) for n in (1, 2)]
    assert [o.reason for o in within_answer(pair, share=150)] == [
        "its answer (102 B) is too large to merge with the others (the hosts' answers may take 150 B in all):"
        " ask it alone or narrow the call",
        "",
    ]
    (lone,) = within_answer(pair[:1], share=100)
    assert lone.reason == (
        "its answer (102 B) is too large to merge (the hosts' answers may take 100 B in all): narrow the call"
    )


def test_only_the_largest_answers_are_cut_until_the_rest_fit() -> None:
    sized = [HostOutcome(f"h{n}", "ok", 0.1, {"x": "x" * n}) for n in (30, 90, 10, 60)]
    kept = within_answer([*sized, HostOutcome("h0", "unreachable", 1.0, reason="refused")], share=150)
    assert [o.status for o in kept] == ["ok", "remote_error", "ok", "ok", "unreachable"]
    assert within_answer(sized, share=1_000) == sized


async def test_a_hosts_text_is_measured_as_the_answer_carries_it_escaped() -> None:
    """15 MiB of control characters, a host's text without a result: 90 MiB once JSON escapes each
    (as a host's own reply line may carry it), over the session's cap."""

    class Noisy(MemoryFleet):
        async def call(
            self, tool: Tool, arguments: dict[str, Any], hosts: list[str], ctx: RequestContext
        ) -> list[HostOutcome]:
            outcomes = await super().call(tool, arguments, hosts, ctx)
            return [
                replace(o, result=None, text="\x01" * (15 << 20)) if o.host == "web02" else o
                for o in outcomes
            ]

    fleet = Noisy(results={"web01": dir_usage_result("/var/log")})
    result = await call(server(fleet), {"path": "/var", "hosts": ["web01", "web02"]}, "dir_usage")
    assert len(encode(result)) <= MAX_RESULT
    web01, web02 = result["structuredContent"]["hosts"]
    assert (
        web01["status"] == "ok"
        and web02["status"] == "remote_error"
        and "too large to merge" in web02["reason"]
    )
