"""disk_health: is a disk failing? The MCP face of ``sysmcp.engine.health``: the schema, the progress
while smartctl runs (cancellable), the words, and the fleet view (the hosts with a failing or watched
device first). Device-level facts are not paths; a btrfs mount point is named only inside the roots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sysmcp.engine.health import Health, HealthRequest, MdArray, run
from sysmcp.engine.paths import is_within, printable
from sysmcp.protocol.context import Meter
from sysmcp.render import plural
from sysmcp.tools import schemas as js
from sysmcp.tools.merging import HostOutcome, fleet_output, grouped, host_list
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput

MAX_DEVICES = 100  # devices in an answer; past it the ok ones are counted, not listed
OK_NAMED = 20  # healthy devices named one line each in the text; the rest counted

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {"timeout_s": js.number("Per device: smartctl is stopped after it.", minimum=1, maximum=120, default=15)},
    required=None,
)

_VERDICT = js.string("ok, watch or failing.", enum=["ok", "watch", "failing"])
OUTPUT_SCHEMA: dict[str, Any] = js.result(
    {
        "devices": js.objects(
            {
                "device": js.string(),
                "verdict": _VERDICT,
                "reasons": js.names("Why, worst first, with what to do."),
                "smart": js.string("read, no_smart, absent (no smartctl), timeout, gone or garbage."),
                "note": js.string("Why SMART was not read."),
                "model": js.string("The drive's model, as SMART reports it.", null=True),
                "protocol": js.string("ATA, NVMe or SCSI, as smartctl names it.", null=True),
                "passed": js.typed(
                    "boolean", "The drive's own overall self-assessment (null: not given).", null=True
                ),
                "power_on_hours": js.integer("Hours the drive has been powered on.", null=True),
                "temperature_c": js.integer("The drive's temperature now, in °C.", null=True),
                "attributes": js.counts("The failure-predicting counters read."),
                "io_errors": js.names("The kernel's most recent I/O error lines for it."),
            },
            description="Physical devices, the worst first.",
        ),
        "devices_not_shown": js.integer("Devices past the list's limit: counted, not listed."),
        "arrays": js.objects(
            {
                "name": js.string("The md array, e.g. md0."),
                "verdict": _VERDICT,
                "level": js.string("Its RAID level, e.g. raid1."),
                "slots": js.string("One letter per member slot: U up, _ missing."),
                "failed": js.names("Its members marked failed (F)."),
                "degraded": js.boolean("A member is missing or failed (rebuilding or not)."),
                "operation": js.string("recovery, resync, reshape, check (null: none).", null=True),
                "progress_percent": js.number("How far a resync or recovery is.", null=True),
                "finish": js.string("mdstat's estimate.", null=True),
                "speed": js.string("The resync or recovery speed, as mdstat says it.", null=True),
            },
            description="md RAID arrays from /proc/mdstat.",
        ),
        "btrfs": js.objects(
            {
                "device": js.string(),
                "mount_point": js.string("Null when outside the allowed roots.", null=True),
                "verdict": _VERDICT,
                "errors": js.counts("btrfs device stats, cumulative until reset with -z."),
            },
            description="Devices of mounted btrfs filesystems.",
        ),
        "notes": js.names("What could not be looked at, and why."),
    }
)


def _array(array: MdArray) -> dict[str, Any]:
    row = asdict(array)
    rebuilding = array.operation is not None and array.operation.startswith(("recovery", "resync", "reshape"))
    row["verdict"] = "failing" if array.degraded and not rebuilding else "watch" if array.operation else "ok"
    row["degraded"] = array.degraded
    return {key: row[key] for key in OUTPUT_SCHEMA["properties"]["arrays"]["items"]["properties"]}


def structure(health: Health, roots: Sequence[Path] | None) -> dict[str, Any]:
    devices = [
        {
            "device": d.device,
            "verdict": d.verdict,
            "reasons": d.reasons,
            "smart": d.smart.status,
            "note": d.smart.note,
            "model": d.smart.model,
            "protocol": d.smart.protocol,
            "passed": d.smart.passed,
            "power_on_hours": d.smart.power_on_hours,
            "temperature_c": d.smart.temperature_c,
            "attributes": d.smart.attributes,
            "io_errors": d.io_errors,
        }
        for d in health.devices
    ]
    notes = []
    if not health.smartctl:
        notes.append(
            "smartctl is not installed (Debian: apt install smartmontools): no SMART/NVMe health read"
        )
    if not health.kernel_log:
        notes.append("the kernel log (/dev/kmsg) is not readable here: no kernel I/O errors looked at")
    if not health.mdstat:
        notes.append("no /proc/mdstat: no md RAID here")

    def shown(mount: str) -> str | None:
        return mount if roots is None or any(is_within(Path(mount), root) for root in roots) else None

    notes += [
        f"btrfs on {shown(mount) or 'a mount outside the roots'}: {why}" for mount, why in health.btrfs_unread
    ]
    return {
        "devices": devices[:MAX_DEVICES],
        "devices_not_shown": max(len(devices) - MAX_DEVICES, 0),
        "arrays": [_array(a) for a in health.arrays],
        "btrfs": [
            {
                "device": b.device,
                "mount_point": shown(b.mount_point),
                "verdict": "watch" if b.total else "ok",
                "errors": b.errors,
            }
            for b in health.btrfs
        ],
        "notes": notes,
    }


def _facts(row: dict[str, Any]) -> str:
    facts = [f"{row['model']}" if row["model"] else "", row["protocol"] or ""]
    if row["passed"] is not None:
        facts.append("self-assessment " + ("PASSED" if row["passed"] else "FAILED"))
    if row["power_on_hours"] is not None:
        facts.append(f"{row['power_on_hours']:,} h on")
    if row["temperature_c"] is not None:
        facts.append(f"{row['temperature_c']} °C")
    facts += [f"{name} {count:,}" for name, count in row["attributes"].items()]
    return ", ".join(f for f in facts if f)


def render(structured: dict[str, Any]) -> str:
    rows = structured["devices"]
    worst = [r for r in rows if r["verdict"] != "ok"]
    lines = [
        f"Disk health: {plural(len(rows) + structured['devices_not_shown'], 'device')}, "
        f"{len([r for r in rows if r['verdict'] == 'failing'])} failing, {len([r for r in rows if r['verdict'] == 'watch'])} to watch."
    ]
    for index, row in enumerate(rows):
        if row["verdict"] == "ok" and index - len(worst) >= OK_NAMED:
            lines.append(f"  … and {plural(len(rows) - index, 'more device')} ok")
            break
        read = _facts(row) if row["smart"] == "read" else f"SMART not read: {row['note']}"
        lines.append(f"  {row['device']}: {row['verdict'].upper()} — {read}")
        lines += [f"      {reason}" for reason in row["reasons"] if reason != row["note"]]
        lines += [f"      kernel: {line}" for line in row["io_errors"]]
        if row["verdict"] == "ok" and row["smart"] != "read":
            lines.append("      (health unknown beyond the kernel log)")
    for array in structured["arrays"]:
        state = f"{array['level']} [{array['slots']}]"
        if array["failed"]:
            state += f", failed: {', '.join(array['failed'])}"
        if array["operation"]:
            progress = f" {array['progress_percent']:g}%" if array["progress_percent"] is not None else ""
            extra = ", ".join(
                x
                for x in (
                    array["speed"] and f"speed {array['speed']}",
                    array["finish"] and f"finish in {array['finish']}",
                )
                if x
            )
            state += f", {array['operation']}{progress}{f' ({extra})' if extra else ''}"
        advice = (
            " — degraded: replace the missing or failed member (mdadm --add)"
            if array["verdict"] == "failing"
            else " — rebuilding: no redundancy until it ends; leave the other members alone"
            if array["degraded"]
            else ""
        )

        lines.append(f"  md {array['name']}: {array['verdict'].upper()} — {state}{advice}")
    for dev in structured["btrfs"]:
        errors = ", ".join(f"{k} {v:,}" for k, v in dev["errors"].items() if v) or "no errors"
        where = f" on {printable(dev['mount_point'])}" if dev["mount_point"] else ""
        advice = (
            " — run btrfs scrub, check SMART and cabling; reset with btrfs device stats -z"
            if dev["verdict"] != "ok"
            else ""
        )
        lines.append(f"  btrfs {dev['device']}{where}: {dev['verdict'].upper()} — {errors}{advice}")
    lines += [f"Note: {note}" for note in structured["notes"]]
    return "\n".join(lines)


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    request = HealthRequest(timeout_s=float(args["timeout_s"]))

    def work(meter: Meter) -> Health:
        def progress(done: int, total: int) -> None:
            meter.done, meter.total = done, total

        return run(request, progress, meter.checkpoint)

    def describe(meter: Meter, elapsed: float) -> str:
        return f"smartctl: {int(meter.done)} of {plural(int(meter.total or 0), 'device')} read"

    health = await ctx.run_in_worker(work, describe=describe)
    structured = structure(health, ctx.paths.allowed)
    return ToolOutput(render(structured), structured)


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """Per host, its failing and watched devices named; hosts with all ok grouped into one line."""
    body: list[str] = []
    summary: list[tuple[str, str]] = []
    for outcome in outcomes:
        if not outcome.ok or outcome.result is None:
            continue
        bad = [
            f"{row.get('device', row.get('name'))} {row['verdict']}"
            + (f" ({row['reasons'][0]})" if row.get("reasons") else "")
            for key in ("devices", "arrays", "btrfs")
            for row in outcome.result.get(key, [])
            if row.get("verdict") in ("failing", "watch")
        ]
        summary.append(
            (
                "; ".join(bad[:5]) + (f"; … {len(bad) - 5} more" if len(bad) > 5 else "") if bad else "",
                outcome.host,
            )
        )
    for key, hosts in grouped(summary):
        if key:
            body.append(f"  {host_list(hosts)}: {key}")
    ok = [host for key, hosts in grouped(summary) if not key for host in hosts]
    if ok:
        body.append(f"  {plural(len(ok), 'host')} with every device ok: {host_list(ok)}")
    view = {"hosts_with_problems": [host for key, hosts in grouped(summary) if key for host in hosts]}
    return fleet_output(outcomes, body, view)


TOOL = Tool(
    name="disk_health",
    title="Disk health",
    description=(
        "Is a disk failing: per physical device SMART/NVMe health (smartctl), md RAID state, btrfs device "
        "errors and the kernel's recent I/O errors, with a verdict (ok, watch, failing) and what to do. "
        "For space, disk_usage; for load, disk_io."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
    merge=merge,
)
