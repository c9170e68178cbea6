"""file_sha256: the SHA-256 digest of one regular file, streamed (sha256sum for one file).

The MCP face of ``sysmcp.engine.hashing._filehash`` (which opens the file safely and hashes it), with
the fleet merge that shows config drift. Everything that touches the file happens in the worker
thread, the ``stat`` included: a path on a hung network mount then blocks one worker, never the loop.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sysmcp.engine.calls import Cancel, Progress
from sysmcp.engine.faults import PermissionRefused
from sysmcp.engine.hashing import ALGORITHMS, FileHash, FileRequest, format_line, hash_file
from sysmcp.engine.paths import escaped
from sysmcp.protocol.context import Meter
from sysmcp.protocol.failures import ToolError
from sysmcp.render import human_bytes, plural, rate, took
from sysmcp.tools import schemas as js
from sysmcp.tools.arguments import sha256_argument
from sysmcp.tools.errors import words
from sysmcp.tools.merging import HostOutcome, answered, fleet_output, host_list, typed_results
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput
from sysmcp.tools.typed import ABSENT, Opt, prop, result
from sysmcp.tools.walking import denied_by

SHA256 = ALGORITHMS["sha256"]

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "path": js.path_argument("A regular file."),
        "expected": sha256_argument("The digest it should have: the answer says match or mismatch."),
    }
)


@result
class FileSha256:
    path: str = prop()
    sha256: str = prop(pattern="^[0-9a-f]{64}$")
    size_bytes: int = prop("Bytes hashed.")
    seconds: float = prop("Time spent reading and hashing.")
    expected: Opt[str] = prop("The expected digest, lowercased (if one was given).", default=ABSENT)
    match: Opt[bool] = prop("Whether the digest equals 'expected' (if one was given).", default=ABSENT)
    changed_while_hashing: bool = prop(
        "True if the file changed while it was read: the digest is then of no single version of it.",
        default=False,
    )


@result
class HostDigest:
    """Another host's answer as far as the fleet merge reads it (a host may run an older sysmcp)."""

    sha256: str = prop()


def run(request: FileRequest, progress: Progress, cancel: Cancel) -> FileHash:
    """The engine's hash in the worker thread; a refused permission names the component that refused
    (a look at the path: here, not on the loop)."""
    try:
        return hash_file(request, progress, cancel)
    except PermissionRefused as refused:
        raise ToolError(words(refused) + denied_by(Path(os.fsdecode(request.path)))) from None


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = await ctx.resolve(args["path"])
    shown = str(path)  # the name itself: the text escapes it (escaped), the JSON displays it
    raw = os.fsencode(path)

    def describe(meter: Meter, elapsed: float) -> str:
        return f"{human_bytes(meter.done)} of {human_bytes(meter.total or 0)} at {rate(meter.done, elapsed)}"

    hashed = await ctx.run_engine(
        run, FileRequest(raw, escaped(shown), args["path"], SHA256), describe=describe
    )
    digest = hashed.digest
    hexdigest = digest.hexdigests[SHA256.name]
    expected = args["expected"].lower() if "expected" in args else ABSENT
    match = ABSENT if expected is ABSENT else expected == hexdigest
    answer = FileSha256(
        shown, hexdigest, digest.size, round(hashed.seconds, 6), expected, match, digest.changed is not None
    )
    # sha256sum's own line: a name with a backslash or newline is escaped and the line starts with '\'.
    # A byte that is not UTF-8 is \xNN, as hash_tree's lines show it: its backslashes are escaped already.
    line = format_line(raw, hexdigest, SHA256).rstrip(b"\n").decode("utf-8", "backslashreplace")
    return ToolOutput.typed(render(answer, line, hashed.seconds, digest.changed), answer)


def render(answer: FileSha256, line: str, seconds: float, changed: str | None) -> str:
    """The warning if the file changed while read, sha256sum's ``line``, the size, the expected digest."""
    lines = []
    if changed:
        lines.append(
            f"WARNING: {escaped(answer.path)} changed while it was being hashed: {changed}. The digest "
            "below is of no single version of the file; hash it again once nothing is writing to it."
        )
    lines.append(line)
    size = answer.size_bytes
    lines.append(f"size: {plural(size, 'byte')} ({human_bytes(size)}), hashed in {took(size, seconds)}")
    if answer.expected:
        lines.append(
            "expected digest: MATCH"
            if answer.match
            else f"expected digest: MISMATCH (expected {answer.expected}, got {answer.sha256})"
        )
    return "\n".join(lines)


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """Config drift: the digest per host, grouped (the majority first in the view, last in the text, where
    the outliers are read first), and which hosts lack the file."""
    groups: dict[str, list[str]] = {}
    # a host without a digest in its result is unreadable here, never left out
    for host, answer in typed_results(outcomes, HostDigest):
        groups.setdefault(answer.sha256, []).append(host)
    missing = [o.host for o in outcomes if o.status == "tool_error" and o.reason.startswith("No such file")]
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))  # stable: first seen wins a tie
    held = sum(len(hosts) for _, hosts in ordered)
    expected = arguments.get("expected")
    expected = expected.lower() if isinstance(expected, str) else None
    if not groups:
        verdict = "none"
        body = ["No host gave a digest."]
    elif len(groups) == 1 and not missing:
        verdict = "identical"
        digest, hosts = ordered[0]
        on = (
            f"all {plural(len(hosts), 'host')} that answered"
            if len(hosts) == answered(outcomes)
            else f"the {plural(len(hosts), 'host')} with a digest"
        )
        body = [f"Identical on {on}: {digest}"]
    else:
        verdict = "drift"
        body = [
            f"Drift: {len(ordered)} different digests on {plural(held, 'host')}"
            + (f"; {len(missing)} {'lack' if len(missing) != 1 else 'lacks'} the file" if missing else "")
            + ":"
        ]
        for digest, hosts in reversed(ordered):  # the outliers first, the majority last
            body.append(
                f"  {len(hosts):>3} host{'s' if len(hosts) != 1 else ' '}  {digest}  {host_list(hosts)}"
            )
    if missing:
        body.append(f"No such file on: {host_list(missing)}")
    digests: list[dict[str, Any]] = []
    for digest, hosts in ordered:
        group: dict[str, Any] = {"sha256": digest, "count": len(hosts), "hosts": hosts}
        if expected is not None:
            group["match"] = digest == expected
        digests.append(group)
    view: dict[str, Any] = {"verdict": verdict, "digests": digests, "missing": missing}
    if expected is not None:
        view["expected"] = expected
        body.append(
            f"Expected {expected}: MATCH on {len(groups.get(expected, []))} of {plural(held, 'host')}."
        )
    return fleet_output(outcomes, body, view)


TOOL = Tool(
    name="file_sha256",
    title="File SHA-256",
    description=(
        "Is this file the one I think it is: the SHA-256 of one regular file, as sha256sum prints it, with "
        "its size. For a tree, hash_tree."
    ),
    input_schema=INPUT_SCHEMA,
    output=FileSha256,
    handler=handle,
    merge=merge,
)
