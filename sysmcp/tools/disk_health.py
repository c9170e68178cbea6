"""disk_health: is a disk failing? The MCP face of ``sysmcp.engine.health``: the schema, the progress
while smartctl runs (cancellable), the words, and the fleet view (the hosts with a failing or watched
device first). Device-level facts are not paths; a btrfs mount point is named only inside the roots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from sysmcp.engine.health import BTRFS_MISSING, BtrfsDevice, Device, Health, HealthRequest, MdArray, run
from sysmcp.engine.paths import escaped, within_roots
from sysmcp.protocol.context import Meter
from sysmcp.render import plural
from sysmcp.tools import schemas as js
from sysmcp.tools.merging import HostOutcome, fleet_output, grouped, host_list, typed_results
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput
from sysmcp.tools.typed import Open, from_json, prop, result
from sysmcp.views import HEALTH

MAX_DEVICES = 100  # devices in an answer; past it the ok ones are counted, not listed
OK_NAMED = 20  # healthy devices named one line each in the text; the rest counted

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {"timeout_s": js.number("Per device: smartctl is stopped after it.", minimum=1, maximum=120, default=15)},
    required=None,
)

Verdict = Literal["ok", "watch", "failing"]
_VERDICT = "ok, watch or failing."
DeviceVerdict = Literal["ok", "watch", "failing", "unknown"]
_DEVICE_VERDICT = (
    "ok (SMART read, nothing wrong), watch, failing, or unknown (SMART not read: reasons say why)."
)


@result
class DeviceRow(Open):
    device: str = prop()
    verdict: DeviceVerdict = prop(_DEVICE_VERDICT)
    reasons: list[str] = prop("Why, worst first, with what to do.")
    smart: str = prop(
        "read, no_smart, unopened (smartctl could not open it), absent (no smartctl), timeout, gone or garbage."
    )
    note: str = prop("Why SMART was not read.")
    model: str | None = prop("The drive's model, as SMART reports it.")
    protocol: str | None = prop("ATA, NVMe or SCSI, as smartctl names it.")
    passed: bool | None = prop("The drive's own overall self-assessment (null: not given).")
    power_on_hours: int | None = prop("Hours the drive has been powered on.")
    temperature_c: int | None = prop("The drive's temperature now, in °C.")
    attributes: dict[str, int] = prop("The failure-predicting counters read.")
    io_errors: list[str] = prop("The kernel's most recent I/O error lines for it.")
    self_test: str | None = prop(
        "The most recent self-test, and one running, in smartctl's words.", default=None
    )


@result
class ArrayRow(Open):
    name: str = prop("The md array, e.g. md0.")
    verdict: Verdict = prop(_VERDICT)
    state: str = prop("active, or inactive: not running, its data cannot be reached.")
    level: str = prop("Its RAID level, e.g. raid1 ('' while inactive: mdstat names none).")
    slots: str = prop("One letter per member slot: U up, _ missing.")
    failed: list[str] = prop("Its members marked failed (F).")
    degraded: bool = prop("A member is missing or failed (rebuilding or not).")
    operation: str | None = prop("recovery, resync, reshape, check (null: none).")
    progress_percent: float | None = prop("How far a resync or recovery is.")
    finish: str | None = prop("mdstat's estimate.")
    speed: str | None = prop("The resync or recovery speed, as mdstat says it.")


@result
class BtrfsRow(Open):
    device: str = prop(
        "The device: a kernel block device name; '<missing disk>' for one the filesystem is mounted "
        "without (degraded)."
    )
    mount_point: str | None = prop("Null when outside the allowed roots.")
    verdict: Verdict = prop(_VERDICT)
    errors: dict[str, int] = prop("btrfs device stats, cumulative until reset with -z.")


@result
class DiskHealth:
    devices: list[DeviceRow] = prop("Physical devices, the worst first.")
    devices_not_shown: int = prop("Devices past the list's limit: counted, not listed.")
    arrays: list[ArrayRow] = prop("md RAID arrays from /proc/mdstat.")
    btrfs: list[BtrfsRow] = prop("Devices of mounted btrfs filesystems.")
    notes: list[str] = prop("What could not be looked at, and why.")


def _array_verdict(array: MdArray) -> Verdict:
    """failing: not running (inactive), or degraded with no rebuild under way; watch: a rebuild,
    resync, reshape or repair under way, or a failed member still listed; ok otherwise — a scheduled
    ``check`` reads a whole array and changes nothing, and mdadm calls such an array clean."""
    rebuilding = array.operation is not None and array.operation.startswith(("recovery", "resync", "reshape"))
    if array.state == "inactive" or (array.degraded and not rebuilding):
        return "failing"
    if array.degraded or array.failed or (array.operation and not array.operation.startswith("check")):
        return "watch"
    return "ok"


def _array(array: MdArray) -> ArrayRow:
    row = {**asdict(array), "verdict": _array_verdict(array), "degraded": array.degraded}
    return from_json(ArrayRow, row)


def _redundancy_left(array: ArrayRow) -> str:
    """What a degraded array can still lose, from its level and its slots: a raid6 one member short
    still survives one more loss, a three-way raid1 one short too; raid10's depends on which member."""
    up, missing = array.slots.count("U"), array.slots.count("_")
    left = {"raid1": up - 1, "raid4": 1 - missing, "raid5": 1 - missing, "raid6": 2 - missing}.get(
        array.level
    )
    if left is None:
        return "less redundancy"
    if left <= 0:
        return "no redundancy"
    return f"it survives {plural(left, 'more failed member')}, no more,"


def _btrfs_verdict(device: BtrfsDevice) -> Verdict:
    """failing: the filesystem runs without this device (degraded: one more loss and its data is gone,
    as an md array with an empty slot); watch: error counters above 0."""
    return "failing" if device.missing else "watch" if device.total else "ok"


def _device(device: Device) -> DeviceRow:
    return from_json(DeviceRow, {**asdict(device.smart), **asdict(device), "smart": device.smart.status})


def result_of(health: Health, roots: Sequence[Path] | None) -> DiskHealth:
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
        return mount if within_roots(mount, roots) else None

    notes += [
        f"btrfs on {shown(mount) or 'a mount outside the roots'}: {why}" for mount, why in health.btrfs_unread
    ]
    return DiskHealth(
        devices=[_device(d) for d in health.devices[:MAX_DEVICES]],
        devices_not_shown=max(len(health.devices) - MAX_DEVICES, 0),
        arrays=[_array(a) for a in health.arrays],
        btrfs=[BtrfsRow(b.device, shown(b.mount_point), _btrfs_verdict(b), b.errors) for b in health.btrfs],
        notes=notes,
    )


def _facts(row: DeviceRow) -> str:
    facts = [row.model or "", row.protocol or ""]
    if row.passed is not None:
        facts.append("self-assessment " + ("PASSED" if row.passed else "FAILED"))
    if row.power_on_hours is not None:
        facts.append(f"{row.power_on_hours:,} h on")
    if row.temperature_c is not None:
        facts.append(f"{row.temperature_c} °C")
    facts += [f"{name} {count:,}" for name, count in row.attributes.items()]
    if row.self_test:
        facts.append(f"self-test {row.self_test}")
    return ", ".join(f for f in facts if f)


def render(answer: DiskHealth) -> str:
    rows = answer.devices
    worst = [r for r in rows if r.verdict != "ok"]
    unknown = len([r for r in rows if r.verdict == "unknown"])
    lines = [
        f"Disk health: {plural(len(rows) + answer.devices_not_shown, 'device')}, "
        f"{len([r for r in rows if r.verdict == 'failing'])} failing, {len([r for r in rows if r.verdict == 'watch'])} to watch"
        + (f", {unknown} unknown." if unknown else ".")
    ]
    for index, row in enumerate(rows):
        if row.verdict == "ok" and index - len(worst) >= OK_NAMED:
            lines.append(f"  … and {plural(len(rows) - index, 'more device')} ok")
            break
        read = _facts(row) if row.smart == "read" else f"SMART not read: {row.note}"
        lines.append(f"  {row.device}: {row.verdict.upper()} — {read}")
        lines += [f"      {reason}" for reason in row.reasons if reason != row.note]
        lines += [f"      kernel: {line}" for line in row.io_errors]
    for array in answer.arrays:
        state = f"{array.level} [{array.slots}]" if array.state != "inactive" else "inactive"
        if array.failed:
            state += f", failed: {', '.join(array.failed)}"
        if array.operation:
            progress = f" {array.progress_percent:g}%" if array.progress_percent is not None else ""
            extra = [f"speed {array.speed}"] if array.speed else []
            extra += [f"finish in {array.finish}"] if array.finish else []
            state += f", {array.operation}{progress}" + (f" ({', '.join(extra)})" if extra else "")
        advice = (
            " — not running: its data cannot be reached; assemble it (mdadm --assemble --scan, "
            "--run when members are missing)"
            if array.state == "inactive"
            else " — degraded: replace the missing or failed member (mdadm --add)"
            if array.verdict == "failing"
            else f" — rebuilding: {_redundancy_left(array)} until it ends; leave the other members alone"
            if array.degraded
            else " — a failed member is still listed: remove it (mdadm --remove) and replace its disk"
            if array.failed
            else ""
        )
        lines.append(f"  md {array.name}: {array.verdict.upper()} — {state}{advice}")
    for dev in answer.btrfs:
        errors = ", ".join(f"{k} {v:,}" for k, v in dev.errors.items() if v) or "no errors"
        where = f" on {escaped(dev.mount_point)}" if dev.mount_point else ""
        advice = (
            " — missing: the filesystem runs degraded without it; replace it (btrfs replace start, or "
            "btrfs device add, then btrfs device remove missing)"
            if dev.device == BTRFS_MISSING
            else " — run btrfs scrub, check SMART and cabling; reset with btrfs device stats -z"
            if dev.verdict != "ok"
            else ""
        )
        lines.append(f"  btrfs {dev.device}{where}: {dev.verdict.upper()} — {errors}{advice}")
    lines += [f"Note: {note}" for note in answer.notes]
    return "\n".join(lines)


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    def describe(meter: Meter, elapsed: float) -> str:
        return f"smartctl: {int(meter.done)} of {plural(int(meter.total or 0), 'device')} read"

    health = await ctx.run_engine(run, HealthRequest(timeout_s=float(args["timeout_s"])), describe=describe)
    return ToolOutput.of(result_of(health, ctx.paths.allowed), render)


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """Per host, its failing, watched and unknown devices named; hosts with all ok grouped into one
    line. A host whose only devices not ok are unknown is named, and not counted as one with problems."""
    summary: list[tuple[str, str]] = []
    troubled: set[str] = set()
    for host, answer in typed_results(outcomes, DiskHealth):
        named = [
            *((d.device, d.verdict, d.reasons) for d in answer.devices),
            *((a.name, a.verdict, []) for a in answer.arrays),
            *((b.device, b.verdict, []) for b in answer.btrfs),
        ]
        bad = [
            f"{name} {verdict}" + (f" ({why[0]})" if why else "")
            for name, verdict, why in named
            if verdict != "ok"
        ]
        if any(verdict in ("failing", "watch") for _, verdict, _ in named):
            troubled.add(host)
        summary.append(("; ".join(bad[:5]) + (f"; … {len(bad) - 5} more" if len(bad) > 5 else ""), host))
    groups = grouped(summary)
    body = [f"  {host_list(hosts)}: {key}" for key, hosts in groups if key]
    ok = [host for key, hosts in groups if not key for host in hosts]
    if ok:
        body.append(f"  {plural(len(ok), 'host')} with every device ok: {host_list(ok)}")
    return fleet_output(
        outcomes,
        body,
        {"hosts_with_problems": [host for key, hosts in groups if key for host in hosts if host in troubled]},
    )


TOOL = Tool(
    name="disk_health",
    title="Disk health",
    description=(
        "Is a disk failing: per physical device SMART/NVMe health (smartctl), md RAID state, btrfs device "
        "errors and the kernel's recent I/O errors, with a verdict (ok, watch, failing; unknown where SMART "
        "could not be read) and what to do. "
        "For space, disk_usage; for load, disk_io."
    ),
    input_schema=INPUT_SCHEMA,
    output=DiskHealth,
    handler=handle,
    merge=merge,
    view=HEALTH.uri,
)
