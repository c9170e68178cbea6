"""The fan-out at scale, against a stub ``ssh`` that is a tiny MCP answerer (tests/fleet/stub_ssh.py):
the fleet deadline and its pending hosts, progress, grouping, the handshake bound through one jump
host, and the faults (hang, mute, garbage, refusing hosts). The same over real sshd: test_fleet_sshd."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from sysmcp.fleet.fanout import Fleet
from sysmcp.fleet.inventory import from_names
from sysmcp.fleet.pool import SessionPool, physical_memory
from sysmcp.fleet.setup import FleetOptions, running_fleet
from sysmcp.fleet.ssh import SshSettings
from sysmcp.protocol.failures import ToolError
from sysmcp.protocol.framing import encode
from sysmcp.protocol.linebudget import default_line_budget
from sysmcp.protocol.session import MAX_RESULT
from sysmcp.tools.merging import HostOutcome, default_merge
from tests.profile import needs_proc

pytestmark = pytest.mark.anyio

STUB = Path(__file__).with_name("stub_ssh.py")
#: Generous: every stub answers in milliseconds; only the hang and mute hosts ever reach it.
DEADLINE = 15.0


def stub_program(tmp_path: Path) -> str:
    program = tmp_path / "ssh"
    program.write_text(f'#!/bin/sh\nexec {sys.executable} -S -E {STUB} "$@"\n')
    program.chmod(0o755)
    return str(program)


def settings(tmp_path: Path, connect_timeout: float = 60.0) -> SshSettings:
    control = tmp_path / "control"
    control.mkdir(mode=0o700, exist_ok=True)
    return SshSettings(
        control_dir=str(control), program=stub_program(tmp_path), connect_timeout=connect_timeout
    )


async def fan_out_once(tmp_path: Path, names: list[str]) -> list[HostOutcome]:
    """One call of tool ``x`` to stub hosts ``names``, each by its own session: their outcomes."""
    inventory = from_names(names)
    async with SessionPool(inventory, settings(tmp_path)).open() as pool:
        return await Fleet(inventory, pool, deadline=DEADLINE).fan_out("x", {}, names, timeout=600)


def statuses(outcomes: Sequence[HostOutcome]) -> dict[str, str]:
    return {o.host: o.status for o in outcomes}


@pytest.mark.slow  # waits out a real 15 s deadline
async def test_at_the_deadline_the_answer_comes_with_the_pending_hosts_and_their_state(
    tmp_path: Path,
) -> None:
    names = [f"ok{i:02}" for i in range(6)] + ["hang1", "mute1"]
    inventory = from_names(names)
    pool = SessionPool(inventory, settings(tmp_path))
    heard: list[tuple[int, int]] = []

    async def report(finished: Sequence[HostOutcome], asked: int) -> None:
        heard.append((len(finished), asked))

    async with pool.open():
        fleet = Fleet(inventory, pool, deadline=DEADLINE)
        outcomes = await fleet.fan_out("disk_usage", {}, names, timeout=600, report=report)
        assert pool.processes == 8  # the mute host's connection goes on in the pool
    by_host = {o.host: o for o in outcomes}
    assert [o.host for o in outcomes] == names
    assert all(by_host[n].status == "ok" for n in names[:6])
    assert by_host["hang1"].status == "pending" and "still running" in by_host["hang1"].reason
    assert by_host["mute1"].status == "pending" and "still connecting" in by_host["mute1"].reason
    assert f"deadline of {DEADLINE:g} s" in by_host["mute1"].reason
    assert heard == [(n, 8) for n in range(1, 7)]  # one report per host answered, none for the pending
    out = default_merge(outcomes, {})
    lines = out.text.splitlines()
    assert lines[0] == "6 of 8 hosts answered, 2 pending."
    assert "== 6 hosts, same answer: ok00, ok01, ok02, ok03, ok04, ok05 (as ok00 says it)" in lines
    assert out.structured["pending"] == 2 and not out.is_error


async def test_a_session_slower_to_start_than_the_connect_timeout_goes_on_for_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, starts = tmp_path / "started", tmp_path / "starts"
    monkeypatch.setenv("STUB_GATE", str(gate))
    monkeypatch.setenv("STUB_STARTS", str(starts))
    inventory = from_names(["slow1"])
    async with SessionPool(inventory, settings(tmp_path, connect_timeout=0.2)).open() as pool:
        fleet = Fleet(inventory, pool, deadline=DEADLINE)
        first = await fleet.fan_out("x", {}, ["slow1"], timeout=600)
        assert first[0].status == "timeout" and "next call may find it open" in first[0].reason
        gate.touch()  # the remote start ends; its ssh was not killed at the connect timeout
        with anyio.fail_after(DEADLINE):
            while pool.live("slow1") is None:
                await anyio.sleep(0.01)
        second = await fleet.fan_out("x", {}, ["slow1"], timeout=600)
    assert second[0].status == "ok" and not second[0].reconnected
    assert starts.read_text() == "slow1\n"  # one remote start served both calls


@pytest.mark.slow  # a stub ssh process for each of 101 hosts
async def test_progress_for_a_big_fleet_is_bounded_to_a_hundred_steps(tmp_path: Path) -> None:
    names = [f"ok{i:03}" for i in range(101)]
    inventory = from_names(names)
    heard: list[int] = []

    async def report(finished: Sequence[HostOutcome], asked: int) -> None:
        heard.append(len(finished))

    async with SessionPool(inventory, settings(tmp_path)).open() as pool:
        outcomes = await Fleet(inventory, pool, deadline=120).fan_out(
            "x", {}, names, timeout=600, report=report
        )
    assert set(statuses(outcomes).values()) == {"ok"}
    assert heard == [*range(2, 101, 2), 101]  # every second host of 101, and the last


@pytest.mark.slow  # a stub ssh process for each host
async def test_handshakes_through_one_jump_host_are_bounded(tmp_path: Path) -> None:
    direct = from_names([f"mute{i}" for i in range(5)])
    behind = replace(direct, hosts={n: replace(h, jump="bastion") for n, h in direct.hosts.items()})
    names = list(behind.hosts)
    async with SessionPool(behind, settings(tmp_path), handshakes=2).open() as pool:
        outcomes = await Fleet(behind, pool, deadline=3.0).fan_out("x", {}, names, timeout=600)
        assert pool.processes == 2  # the other three wait for the bastion
    assert set(statuses(outcomes).values()) == {"pending"}
    async with SessionPool(direct, settings(tmp_path), handshakes=2).open() as pool:
        await Fleet(direct, pool, deadline=3.0).fan_out("x", {}, names, timeout=600)
        assert pool.processes == 5  # direct hosts are each their own sshd: no shared bound


@pytest.mark.slow  # a stub ssh process for each of 23 hosts
async def test_faults_each_host_its_own_status_and_the_others_answer(tmp_path: Path) -> None:
    names = [f"ok{i:02}" for i in range(18)] + ["refuse1", "refuse2", "garbage1", "notfound1", "uvxfail1"]
    inventory = from_names(names)
    async with SessionPool(inventory, settings(tmp_path, connect_timeout=DEADLINE)).open() as pool:
        outcomes = await Fleet(inventory, pool, deadline=60).fan_out("x", {}, names, timeout=600)
    found = statuses(outcomes)
    assert [found[f"ok{i:02}"] for i in range(18)] == ["ok"] * 18
    assert found["refuse1"] == found["refuse2"] == "unreachable"
    assert found["garbage1"] == "remote_error" and found["notfound1"] == "no_sysmcp"
    reasons = {o.host: o.reason for o in outcomes}
    assert "does not speak MCP" in reasons["garbage1"] and "Welcome to host garbage1" in reasons["garbage1"]
    assert found["uvxfail1"] == "remote_error" and "× No solution found" in reasons["uvxfail1"]
    assert "uvx: command not found" in reasons["notfound1"]
    out = default_merge(outcomes, {})
    assert out.text.splitlines()[0] == "18 of 23 hosts answered, 2 unreachable, 1 no_sysmcp, 2 remote_error."


async def test_an_answer_the_fan_out_cannot_read_is_that_hosts_failure_and_the_others_still_answer(
    tmp_path: Path,
) -> None:
    outcomes = await fan_out_once(tmp_path, ["ok1", "oddshape1", "ok2"])
    assert statuses(outcomes) == {"ok1": "ok", "oddshape1": "remote_error", "ok2": "ok"}
    odd = outcomes[1]
    assert odd.reason.startswith("sysmcp could not read its answer (TypeError: ") and "\n" not in odd.reason


async def test_a_progress_number_past_a_float_is_read_as_none_and_the_gateway_lives_on(
    tmp_path: Path,
) -> None:
    """A number valid in JSON but past any float (10**400), in the remote's progress for a one-host
    call: the reader that parses it serves every host's session."""
    heard: list[float | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append(total)

    inventory = from_names(["bignumber1"])
    async with SessionPool(inventory, settings(tmp_path)).open() as pool:
        fleet = Fleet(inventory, pool, deadline=DEADLINE)
        first = await fleet.fan_out("x", {}, ["bignumber1"], timeout=600, remote_progress=progress)
        again = await fleet.fan_out("x", {}, ["bignumber1"], timeout=600, remote_progress=progress)
    assert statuses(first) == statuses(again) == {"bignumber1": "ok"}
    assert heard == [None, None]  # no total is better than a wrong one


@pytest.mark.slow  # 97 MiB through a pipe
@needs_proc
async def test_a_reply_line_longer_than_any_answer_is_that_hosts_remote_error_at_once_not_pending(
    tmp_path: Path,
) -> None:
    """A host that sends 97 MiB of one line and never ends it: it answered, in a line no client reads
    (its bytes are dropped as they come, not kept). Said for that host before the deadline, and its
    session's pipes are closed with it (the one left full held its descriptors)."""
    names = ["ok1", "huge1", "ok2"]
    inventory = from_names(names)
    descriptors = len(os.listdir("/proc/self/fd"))
    async with SessionPool(inventory, settings(tmp_path)).open() as pool:
        outcomes = await Fleet(inventory, pool, deadline=DEADLINE).fan_out("x", {}, names, timeout=600)
    assert len(os.listdir("/proc/self/fd")) == descriptors
    assert statuses(outcomes) == {"ok1": "ok", "huge1": "remote_error", "ok2": "ok"}
    assert "a line of more than 80 MiB" in outcomes[1].reason


_PEAK_SCRIPT = """
import resource, sys, anyio
from sysmcp.fleet.fanout import Fleet
from sysmcp.fleet.inventory import from_names
from sysmcp.fleet.pool import SessionPool, physical_memory
from sysmcp.fleet.setup import FleetOptions, running_fleet
from sysmcp.fleet.ssh import SshSettings

async def main():
    names = ["ok1", "long1", "ok2"]
    inventory = from_names(names)
    settings = SshSettings(control_dir=sys.argv[1], program=sys.argv[2], connect_timeout=60.0)
    async with SessionPool(inventory, settings).open() as pool:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        outcomes = await Fleet(inventory, pool, deadline=60.0).fan_out("x", {}, names, timeout=600)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for o in outcomes:
        print(o.host, o.status, o.reason)
    print((after - before) * 1024)

anyio.run(main)
"""


@pytest.mark.slow  # 85 MiB through a pipe, in a Python of its own
def test_a_reply_line_past_what_any_sysmcp_sends_is_refused_while_read_holding_at_most_that_bound(
    tmp_path: Path,
) -> None:
    """A host's well-formed reply of 85 MiB in one line: more than any sysmcp sends (its session's cap is
    80 MiB). Read whole and parsed, it took the gateway to 285 MiB (2.25 GiB made of small objects) only
    for the merge to refuse it: it is dropped once past that cap, as it is read."""
    control = tmp_path / "control"
    control.mkdir(mode=0o700)
    ran = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(control), stub_program(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    *lines, grown = ran.stdout.splitlines()[-4:]  # after the unconfigured log's lines
    assert int(grown) <= MAX_RESULT + (24 << 20)
    assert lines == [
        "ok1 ok ",
        "long1 remote_error the session ended mid-call: it sent a line of more than 80 MiB, longer than any "
        "answer may be",
        "ok2 ok ",
    ]


async def test_a_hosts_tool_error_points_at_no_other_hosts_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error's words name links as a result does: another host's gateway link in them went out as
    is, for the model to read (or pass to verify_checksums) as this host's."""
    monkeypatch.setenv("STUB_TEXT", "see sysmcp://hosts/ok1/results/1/SHA256SUMS and sysmcp://results/2/x")
    outcomes = await fan_out_once(tmp_path, ["ok1", "fails1"])
    assert statuses(outcomes) == {"ok1": "ok", "fails1": "tool_error"}
    assert outcomes[1].reason == (
        "see sysmcp://hosts/fails1/hosts/ok1/results/1/SHA256SUMS and sysmcp://hosts/fails1/results/2/x"
    )


async def test_a_result_number_past_a_float_is_that_hosts_failure_and_the_merged_answer_can_be_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``1e400`` is valid JSON, and Infinity to Python's decoder: read as such, no answer holding it
    could be encoded (JSON has no Infinity), and one host would fail every host's answer. The host is
    told its session is over (its stdin closed), and is not left to be killed seconds later."""
    ends = tmp_path / "ends"
    monkeypatch.setenv("STUB_ENDS", str(ends))
    outcomes = await fan_out_once(tmp_path, ["ok1", "infinite1"])
    assert statuses(outcomes) == {"ok1": "ok", "infinite1": "remote_error"}
    assert "does not speak MCP" in outcomes[1].reason
    encode(default_merge(outcomes, {}).structured)  # the gateway's answer goes out
    assert "infinite1" in ends.read_text().split()  # it ended at its stdin's end


async def test_a_hosts_progress_message_is_passed_on_without_its_terminal_escapes(tmp_path: Path) -> None:
    heard: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append(message)

    inventory = from_names(["escapes1"])
    async with SessionPool(inventory, settings(tmp_path)).open() as pool:
        fleet = Fleet(inventory, pool, deadline=DEADLINE)
        outcomes = await fleet.fan_out("x", {}, ["escapes1"], timeout=600, remote_progress=progress)
    assert statuses(outcomes) == {"escapes1": "ok"}
    assert heard == ["]52;c;owned 1 file"]


async def test_a_host_that_dies_in_the_middle_of_its_answer_is_said_to_have_died_not_to_speak_another_protocol(
    tmp_path: Path,
) -> None:
    outcomes = await fan_out_once(tmp_path, ["ok1", "dies1"])
    assert statuses(outcomes) == {"ok1": "ok", "dies1": "remote_error"}
    assert outcomes[1].reason == (
        "the session ended mid-call: the remote command exited with status 1 in the middle of its answer"
    )


async def test_an_answer_of_millions_of_tiny_values_is_that_hosts_error_and_costs_about_its_length(
    tmp_path: Path,
) -> None:
    """A 6 MiB reply line of two million empty objects: parsed, some 22 times its length (a line just
    under the 80 MiB bound took 2 GiB, per host). Refused before it is parsed (more than one value in
    16 characters): what it cost the gateway is its bytes, held while read and decoded."""
    length = len("{},") * (2 << 20)
    tracemalloc.start()
    try:
        outcomes = await fan_out_once(tmp_path, ["ok1", "complex1", "ok2"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert statuses(outcomes) == {"ok1": "ok", "complex1": "remote_error", "ok2": "ok"}
    assert outcomes[1].reason.startswith(
        "the session ended mid-call: its answer is too large/complex: a line of "
    )
    assert "may hold more than 393,225 JSON values" in outcomes[1].reason
    assert peak < 4 * length, f"{peak:,} bytes at the peak for a {length:,}-byte line"


async def test_a_host_refusing_initialize_with_a_malformed_error_is_its_remote_error_not_unreachable(
    tmp_path: Path,
) -> None:
    outcomes = await fan_out_once(tmp_path, ["ok1", "badcode1"])
    assert statuses(outcomes) == {"ok1": "ok", "badcode1": "remote_error"}
    assert outcomes[1].reason == "the remote refused initialize: go away [2J [its error code: 'E42']"


async def test_a_hosts_refusal_to_hand_over_a_result_is_said_in_one_bounded_line(tmp_path: Path) -> None:
    """Its words become the gateway's own error (a resources/read, a link passed to other hosts):
    100,000 characters with a terminal escape went out as they came."""
    inventory = from_names(["forgets1"])
    async with SessionPool(inventory, settings(tmp_path)).open() as pool:
        fleet = Fleet(inventory, pool, deadline=DEADLINE)
        assert statuses(await fleet.fan_out("x", {}, ["forgets1"], timeout=600)) == {"forgets1": "ok"}
        with pytest.raises(LookupError) as caught:
            await fleet.read_resource("forgets1", "sysmcp://results/1/x")
    said = str(caught.value)
    assert said.startswith("forgets1 no longer has it (gone ]52;c;owned xxx") and len(said) < 400
    assert said.isprintable()


async def test_a_text_passed_to_other_hosts_is_measured_as_their_request_carries_it(tmp_path: Path) -> None:
    """A host's result of a million control characters is 1 MiB of UTF-8 and 6 MiB as JSON (each
    ``\\u0001``): passed on, it made a request line past the remote's 4 MiB, which each other host
    refused without an id, and their calls waited for the fleet deadline, "still running"."""
    inventory = from_names(["controls1"])
    async with SessionPool(inventory, settings(tmp_path)).open() as pool:
        fleet = Fleet(inventory, pool, deadline=DEADLINE)
        assert statuses(await fleet.fan_out("x", {}, ["controls1"], timeout=600)) == {"controls1": "ok"}
        with pytest.raises(ToolError) as refused:
            await fleet.localise({"manifest": "sysmcp://hosts/controls1/results/1/SHA256SUMS"})
    assert "the result behind it is 6,291,459 bytes as a request carries it" in refused.value.message


async def test_an_answer_nested_too_deep_to_walk_is_that_hosts_error_said_as_such(tmp_path: Path) -> None:
    """900 lists deep: Python's decoder takes it, walking it for the host's links does not. Said
    as the host's answer being too complex, not as a RecursionError (and no traceback logged)."""
    outcomes = await fan_out_once(tmp_path, ["ok1", "deep1"])
    assert statuses(outcomes) == {"ok1": "ok", "deep1": "remote_error"}
    assert outcomes[1].reason == (
        "sysmcp could not read its answer: it is too large/complex (nested too deeply)"
    )
    encode(default_merge(outcomes, {}).structured)


async def test_a_direct_hosts_words_dressed_as_a_bastion_failure_stay_its_own_bounded_line(
    tmp_path: Path,
) -> None:
    """A host reached directly whose ssh "fails" (exit 255) saying "bastion jump1 … refused" on stderr:
    its words led the merged answer as the bastion's failure, with the host "behind it". Only a host
    the inventory puts behind a jump host is ever worded so; this one's line is its own, printable
    and bounded."""
    outcomes = await fan_out_once(tmp_path, ["ok1", "liar1"])
    assert statuses(outcomes) == {"ok1": "ok", "liar1": "unreachable"}
    liar = outcomes[1]
    lines = default_merge(outcomes, {}).text.splitlines()
    assert not any("behind it" in line for line in lines), lines
    assert f"  liar1: unreachable — {liar.reason}" in lines
    assert liar.reason.startswith("bastion jump1 (10.0.0.5) refused: Connection")
    assert liar.reason.isprintable() and len(liar.reason) <= 200 and liar.bastion is None


async def test_the_same_words_from_a_host_behind_a_jump_host_are_its_bastions_failure(tmp_path: Path) -> None:
    inventory = from_names(["liar1", "liar2"])
    behind = replace(inventory, hosts={n: replace(h, jump="jump1") for n, h in inventory.hosts.items()})
    async with SessionPool(behind, settings(tmp_path)).open() as pool:
        outcomes = await Fleet(behind, pool, deadline=DEADLINE).fan_out(
            "x", {}, ["liar1", "liar2"], timeout=600
        )
    assert [(o.status, o.bastion) for o in outcomes] == [("unreachable", "jump1")] * 2
    *_, line = default_merge(outcomes, {}).text.splitlines()
    assert line.startswith("  bastion jump1 refused: ") and line.endswith(
        "; 2 hosts behind it unreachable: liar1, liar2"
    )


@pytest.mark.slow  # tens of MiB through a stub host's pipe
async def test_a_host_stalled_mid_line_has_its_session_ended_when_the_call_ends_and_its_buffer_freed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that sends 32 MiB of a reply line and stops: the call ends (here cancelled, as at the
    fleet deadline), and the pooled session kept those bytes for as long as it lived (up to 80 MiB a
    host). It is ended now, its buffer freed at once, and the next call opens a new one."""
    written = tmp_path / "written"
    monkeypatch.setenv("STUB_WRITTEN", str(written))
    inventory = from_names(["stall1"])
    tracemalloc.start()
    try:
        async with SessionPool(inventory, settings(tmp_path)).open() as pool:
            fleet = Fleet(inventory, pool, deadline=DEADLINE)
            before = tracemalloc.get_traced_memory()[0]
            with anyio.fail_after(DEADLINE):
                async with anyio.create_task_group() as group:
                    group.start_soon(lambda: fleet.fan_out("x", {}, ["stall1"], timeout=600))
                    while not written.exists():
                        await anyio.sleep(0.01)
                    session = pool.live("stall1")
                    group.cancel_scope.cancel()
            held = tracemalloc.get_traced_memory()[0] - before
            assert pool.live("stall1") is None  # not reused: the next call opens a new session
            assert session is not None and "stopped in the middle of a line" in session.client.closed_reason
            with anyio.fail_after(DEADLINE):
                while pool.processes:  # its ssh is ended in the background
                    await anyio.sleep(0.01)
    finally:
        tracemalloc.stop()
    assert held < 4 << 20, f"{held:,} bytes still held after the call"


@pytest.mark.slow  # thousands of messages from a stub host
async def test_a_flood_of_messages_answering_nothing_is_that_hosts_error_and_the_others_answer(
    tmp_path: Path,
) -> None:
    """200,000 notifications before its reply: each was parsed on the event loop every session
    shares. Past what any sysmcp sends, the host is broken, said as such; the others are not slowed."""
    outcomes = await fan_out_once(tmp_path, ["ok1", "flood1", "ok2"])
    assert statuses(outcomes) == {"ok1": "ok", "flood1": "remote_error", "ok2": "ok"}
    assert outcomes[1].reason.startswith(
        "the session ended mid-call: it flooded the session: more than 2,000 messages answering no request"
    ), outcomes[1].reason


async def test_an_error_with_a_null_id_answers_the_one_call_waiting_at_once(tmp_path: Path) -> None:
    """JSON-RPC's answer to a request line it could not read has ``"id": null``: it was ignored, and the
    call it refused waited for the fleet deadline ("still running")."""
    with anyio.fail_after(DEADLINE / 2):
        outcomes = await fan_out_once(tmp_path, ["ok1", "nullid1"])
    assert statuses(outcomes) == {"ok1": "ok", "nullid1": "tool_error"}
    assert outcomes[1].reason == "Parse error: message of 5000000 bytes exceeds the limit (-32700)"


@pytest.mark.slow  # tens of MiB through stub hosts' pipes
async def test_a_host_holding_the_most_of_the_gateways_memory_for_answers_is_refused_and_the_others_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One budget for every session's unfinished lines (16 MiB here). A host alone may pass it (its
    own 80 MiB line cap bounds it): ``stall1`` holds 32 MiB of a line. When ``large1`` then answers
    (once that is held), the holder of the most is refused with the budget's words and its bytes
    freed, and ``large1``'s answer arrives. Before, nothing bounded the sum: ``stall1`` held its 32 MiB
    until the fleet deadline, and 64 such hosts some 5 GiB."""
    written = tmp_path / "written"
    monkeypatch.setenv("STUB_WRITTEN", str(written))
    monkeypatch.setenv("STUB_GATE", str(written))
    names = ["stall1", "large1"]
    inventory = from_names(names)
    async with SessionPool(inventory, settings(tmp_path), line_budget=16 << 20).open() as pool:
        with anyio.fail_after(DEADLINE):
            outcomes = await Fleet(inventory, pool, deadline=DEADLINE).fan_out("x", {}, names, timeout=600)
        assert pool.line_budget.held == 0
    assert statuses(outcomes) == {"stall1": "remote_error", "large1": "ok"}
    assert outcomes[0].reason == (
        "the session ended mid-call: its answer did not fit the gateway's memory for answers in flight "
        "(16 MiB across 2 hosts): ask fewer hosts at once or a smaller answer"
    )
    assert outcomes[1].result == {"answer": "x" * (1 << 20)}


async def test_answers_held_for_the_merge_are_charged_to_the_gateways_memory_and_those_past_it_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 hosts, asked one at a time, each answer 2 MiB whole and ended, against a budget of 8 MiB: the
    answers kept until the merge are charged to it as lines are, so no more than 3 are held: the first
    3, each one after them refused while it arrives (no answer kept is dropped for it), its host's error
    in the budget's words, and the budget is free once the call is done.
    Before, only unfinished lines were charged: all 16 answers (32 MiB) were held whole for the merge."""
    monkeypatch.setenv("STUB_LARGE", str(2 << 20))
    names = [f"large{i:02}" for i in range(16)]
    inventory = from_names(names)
    async with SessionPool(inventory, settings(tmp_path), line_budget=8 << 20).open() as pool:
        fleet = Fleet(inventory, pool, concurrency=1, deadline=DEADLINE)
        with anyio.fail_after(DEADLINE):
            outcomes = await fleet.fan_out("x", {}, names, timeout=600)
        assert pool.line_budget.held == 0
    answered = [o for o in outcomes if o.ok]
    assert [o.host for o in answered] == names[:3]  # an answer once kept is merged
    assert all(o.result == {"answer": "x" * (2 << 20)} for o in answered)
    assert {o.reason for o in outcomes if not o.ok} == {
        "the session ended mid-call: its answer did not fit the gateway's memory for answers in flight "
        "(8 MiB across 4 hosts): ask fewer hosts at once or a smaller answer"
    }
    assert {o.status for o in outcomes if not o.ok} == {"remote_error"}


@pytest.mark.slow  # tens of MiB through stub hosts' pipes
async def test_a_host_stalled_mid_line_is_refused_before_a_larger_answer_already_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``large1`` answers 40 MiB, kept for the merge; then ``stall1`` sends 32 MiB of a line and stops,
    past the 64 MiB budget. The answer ended and parsed is worth more than a line that may never end:
    ``stall1`` is refused and ``large1`` answers. Before, the holder of the most was refused, the kept
    answer (turned into ``large1``'s error), and ``stall1`` held its 32 MiB until the fleet deadline."""
    monkeypatch.setenv("STUB_LARGE", str(40 << 20))
    names = ["large1", "stall1"]
    inventory = from_names(names)
    async with SessionPool(inventory, settings(tmp_path), line_budget=64 << 20).open() as pool:
        fleet = Fleet(inventory, pool, concurrency=1, deadline=DEADLINE)  # large1 ends before stall1 starts
        with anyio.fail_after(DEADLINE * 2):
            outcomes = await fleet.fan_out("x", {}, names, timeout=600)
        assert pool.line_budget.held == 0
    assert statuses(outcomes) == {"large1": "ok", "stall1": "remote_error"}
    assert outcomes[0].result == {"answer": "x" * (40 << 20)}
    assert outcomes[1].reason == (
        "the session ended mid-call: its answer did not fit the gateway's memory for answers in flight "
        "(64 MiB across 2 hosts): ask fewer hosts at once or a smaller answer"
    )


@pytest.mark.slow  # tens of MiB through stub hosts' pipes
async def test_the_budgets_words_count_a_host_holding_in_two_calls_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One call has ``large1``'s answer of 24 MiB kept while ``stall1`` holds 32 MiB of a line; a second
    call asks ``large1`` again, and its line passes the 64 MiB budget: ``stall1``'s line, the longest
    arriving, is refused. Two hosts hold the gateway's memory, ``large1`` in both calls. Before, the
    words counted holders: "across 3 hosts"."""
    written = tmp_path / "written"
    monkeypatch.setenv("STUB_WRITTEN", str(written))
    monkeypatch.setenv("STUB_LARGE", str(24 << 20))
    inventory = from_names(["large1", "stall1"])
    async with SessionPool(inventory, settings(tmp_path), line_budget=64 << 20).open() as pool:
        fleet = Fleet(inventory, pool, concurrency=1, deadline=DEADLINE)
        first: list[HostOutcome] = []
        with anyio.fail_after(DEADLINE * 2):
            async with anyio.create_task_group() as group:

                async def both() -> None:
                    first.extend(await fleet.fan_out("x", {}, ["large1", "stall1"], timeout=600))

                group.start_soon(both)
                while not written.exists():  # large1's answer kept, stall1's line held
                    await anyio.sleep(0.01)
                second = await fleet.fan_out("x", {}, ["large1"], timeout=600)
        assert pool.line_budget.held == 0
    assert statuses(second) == {"large1": "ok"}
    assert statuses(first) == {"large1": "ok", "stall1": "remote_error"}
    assert first[1].reason == (
        "the session ended mid-call: its answer did not fit the gateway's memory for answers in flight "
        "(64 MiB across 2 hosts): ask fewer hosts at once or a smaller answer"
    )


async def test_tool_errors_kept_for_the_merge_keep_their_one_line_reason_not_their_whole_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 hosts, asked one at a time, each answering a tool error of 100 KB of words, against a budget of
    1 MiB: what the fan-out keeps of them until the merge is each one's bounded reason, all the merge
    shows. Before, only answers that were ok were charged to the budget, and each error's whole text was
    kept beside its reason: a fleet of hosts erring at length held it all, uncharged, until the call
    returned (64 hosts at the 80 MiB a line may be: 5 GiB)."""
    monkeypatch.setenv("STUB_TEXT", "no such file " * 8_000)
    names = [f"fails{i:02}" for i in range(16)]
    inventory = from_names(names)
    async with SessionPool(inventory, settings(tmp_path), line_budget=1 << 20).open() as pool:
        fleet = Fleet(inventory, pool, concurrency=1, deadline=DEADLINE)
        with anyio.fail_after(DEADLINE):
            outcomes = await fleet.fan_out("x", {}, names, timeout=600)
        assert pool.line_budget.held == 0
    assert statuses(outcomes) == dict.fromkeys(names, "tool_error")
    assert {o.reason for o in outcomes} == {" ".join(("no such file " * 20).split())[:199] + "…"}
    assert sum(len(o.text) + len(o.reason) for o in outcomes) <= 1 << 20


async def test_fleet_memory_sets_the_budget_in_mib_and_without_it_the_default_holds() -> None:
    async with running_fleet(FleetOptions(from_names(["web1"]), fleet_memory=8)) as fleet:
        assert fleet.pool.line_budget.limit == 8 << 20
    async with running_fleet(FleetOptions(from_names(["web1"]))) as fleet:
        assert fleet.pool.line_budget.limit == default_line_budget(physical_memory())


@pytest.mark.slow  # tens of MiB through stub hosts' pipes
async def test_a_reused_session_refused_at_the_gateways_memory_is_not_asked_again_on_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``large1`` answered 40 MiB alone once (its session reused now); then, while ``stall1`` holds 32 MiB, its
    answer of 40 MiB passes the 66 MiB budget holding more than ``stall1``: it is refused. A reused
    session that died is asked once more on a new one, but this one did not die: asked again it would
    answer the same, a second 40 MiB, for the same refusal. It starts once."""
    written, starts = tmp_path / "written", tmp_path / "starts"
    monkeypatch.setenv("STUB_WRITTEN", str(written))
    monkeypatch.setenv("STUB_GATE", str(written))
    monkeypatch.setenv("STUB_STARTS", str(starts))
    monkeypatch.setenv("STUB_LARGE", str(40 << 20))
    names = ["stall1", "large1"]
    inventory = from_names(names)
    async with SessionPool(inventory, settings(tmp_path), line_budget=66 << 20).open() as pool:
        fleet = Fleet(inventory, pool, deadline=DEADLINE)
        written.touch()
        with anyio.fail_after(DEADLINE):
            warm = await fleet.fan_out("x", {}, ["large1"], timeout=600)
        assert statuses(warm) == {"large1": "ok"}
        written.unlink()
        refused: list[HostOutcome] = []

        async def report(finished: Sequence[HostOutcome], asked: int) -> None:
            refused.extend(o for o in finished if o.host == "large1")
            if refused:
                group.cancel_scope.cancel()  # stall1 would wait for the deadline

        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as group:
                group.start_soon(lambda: fleet.fan_out("x", {}, names, timeout=600, report=report))
    assert [o.status for o in refused] == ["remote_error"]
    assert (
        "did not fit the gateway's memory for answers in flight (66 MiB across 2 hosts)" in refused[0].reason
    )
    assert starts.read_text().split() == ["large1", "stall1"]
