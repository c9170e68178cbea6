"""Fleet words (issue 27, defect 8): answered and failed hosts counted the same way in every line."""

from __future__ import annotations

from sysmcp.tools import file_sha256
from sysmcp.tools.merging import HostOutcome, tally

DIGEST = "ab" * 32


def with_digest(host: str) -> HostOutcome:
    return HostOutcome(host, "ok", 0.1, result={"sha256": DIGEST}, text=f"{DIGEST}  /etc/x")


def test_a_host_with_a_tool_error_is_answered_but_never_counted_among_the_identical() -> None:
    outcomes = [
        with_digest("w1"),
        with_digest("w2"),
        HostOutcome(
            "w3", "tool_error", 0.1, text="Permission denied: /etc/x", reason="Permission denied: /etc/x"
        ),
    ]
    text = file_sha256.merge(outcomes, {"path": "/etc/x"}).text
    assert text.startswith("3 of 3 hosts answered.")  # an isError answer is an answer
    assert f"Identical on the 2 hosts with a digest: {DIGEST}" in text  # was "on all 2 hosts that answered"
    assert "w3: tool_error — Permission denied" in text


def test_when_every_host_that_answered_gave_a_digest_it_says_all() -> None:
    text = file_sha256.merge([with_digest("w1"), with_digest("w2")], {"path": "/etc/x"}).text
    assert text.startswith("2 of 2 hosts answered.")
    assert f"Identical on all 2 hosts that answered: {DIGEST}" in text


def test_the_tally_names_unreachable_hosts_apart() -> None:
    outcomes = [with_digest("w1"), HostOutcome("w2", "unreachable", 2.0, reason="no route")]
    assert tally(outcomes) == "1 of 2 hosts answered, 1 unreachable"
