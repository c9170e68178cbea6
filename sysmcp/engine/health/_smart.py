"""SMART and NVMe health from ``smartctl --json``: the parser (a JSON document in, facts and a verdict
out, no I/O) and the call that gets the document, one device at a time, within a timeout."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from sysmcp.engine import commands
from sysmcp.engine.calls import Cancel
from sysmcp.engine.faults import Unavailable

_WEARING = "the drive is wearing out; back up and watch whether the count grows"
_UNREADABLE = "data there cannot be read; back up now and replace the drive"
_UNCORRECTED = "the drive could not recover that data; back up and watch whether the count grows"
_CABLE = "a cable or connector fault more than the disk; reseat or replace the cable"
#: ATA attributes that predict failure (Backblaze's and smartmontools' short list): id → (short name,
#: whether a count above 0 means failing rather than worth watching, the advice).
ATA_WATCHED = {
    5: ("reallocated sectors", False, _WEARING),
    187: ("reported uncorrectable errors", False, _WEARING),
    197: ("pending sectors", True, _UNREADABLE),
    198: ("offline-uncorrectable sectors", True, _UNREADABLE),
    199: ("UDMA CRC errors", False, _CABLE),
}
#: NVMe critical_warning bits (NVMe base specification, SMART / Health Information log).
NVME_WARNINGS = {
    0: "available spare below its threshold",
    1: "temperature outside its limits",
    2: "reliability degraded by media or internal errors",
    3: "media placed in read-only mode",
    4: "volatile memory backup failed",
    5: "persistent memory region read-only or unreliable",
}
#: NVMe self-test results (the Device Self-test log's status, low nibble) that mean the drive failed
#: it: a fatal error, or segments that completed with a failure. Others were aborted (1-4, 8, 9: no
#: verdict on the drive) or passed (0).
NVME_TEST_FAILED = {5, 6, 7}
SELF_TEST_WORDS = 120  # at most this many characters of smartctl's words about a self-test
#: smartctl's exit status bits (smartctl(8), RETURN VALUES). Bit 0: it refused its command line or met an
#: internal error, which it also says of a device whose type it cannot detect (a USB bridge it must be
#: told the type of, a virtual disk). Bit 1: the device could not be opened or did not identify itself
#: (not root, a device gone). Bit 2: a SMART command failed or its data failed its checksum. With any of
#: these the drive's health is unknown, not good. Bits 3-7 are the drive's own findings, each also in
#: the JSON this parser reads (bit 6, error log records, is counted for NVMe and not judged: see
#: ``_nvme_logs``); ``EXIT_FINDINGS`` stands where the JSON names no reason for one.
COMMAND_LINE = 0x1
OPEN_FAILED = 0x2
SMART_FAILED = 0x4
EXIT_FINDINGS = {
    3: (True, "the drive's SMART status says it is failing"),
    4: (True, "a pre-failure attribute is at or below its threshold"),
    5: (False, "an attribute was at or below its threshold in the past"),
    7: (True, "the drive's self-test log records a failed test"),
}
#: Bit 7 stands only where no self-test was read: an older failure under a newer passed test is no alarm.
SELF_TEST_LOG_BIT = 7
HOT_C = 60  # a drive this warm or warmer is worth watching


@dataclass(slots=True)
class Smart:
    """What one device's SMART said. ``status``: read, no_smart, unopened (smartctl could not open
    it), absent (no smartctl), timeout, gone, garbage (output that is not smartctl's JSON); ``note``: why, in a few words, when not read."""

    status: str
    note: str = ""
    exit_status: int = 0  # smartctl's, a bit mask (0 where it gave none)
    model: str | None = None
    protocol: str | None = None  # ATA, NVMe, SCSI
    passed: bool | None = None  # the drive's overall self-assessment
    power_on_hours: int | None = None
    temperature_c: int | None = None
    attributes: dict[str, int] = field(default_factory=dict)  # the watched counters, by name
    self_test: str | None = None  # the most recent self-test (or the one running), in smartctl's words
    failing: list[str] = field(default_factory=list)  # reasons the drive is failing now
    watch: list[str] = field(default_factory=list)  # reasons to watch it
    unknown: list[str] = field(default_factory=list)  # why what was read does not settle its health


def _messages(doc: dict[str, Any]) -> str:
    found = [m.get("string", "") for m in doc.get("smartctl", {}).get("messages", []) if isinstance(m, dict)]
    return "; ".join(s for s in found if s)[:200]


def _object(doc: dict[str, Any], key: str) -> dict[str, Any] | None:
    """``doc[key]`` where it is a JSON object (None where it is missing or of another shape)."""
    found = doc.get(key)
    return found if isinstance(found, dict) else None


def _count(value: Any) -> int:
    """A JSON integer as it is (a bool too); 0 for anything else."""
    return int(value) if isinstance(value, int) else 0


def parse(doc: dict[str, Any]) -> Smart:
    """The facts and the verdict's reasons in one ``smartctl --json -a`` document."""
    device = _object(doc, "device") or {}
    nvme = doc.get("nvme_smart_health_information_log")
    ata = (_object(doc, "ata_smart_attributes") or {}).get("table")
    status = _object(doc, "smart_status")
    exit_status = _count((_object(doc, "smartctl") or {}).get("exit_status"))
    if nvme is None and ata is None and status is None:
        if exit_status & OPEN_FAILED:
            return Smart("unopened", _messages(doc) or "smartctl could not open the device", exit_status)
        return Smart("no_smart", _messages(doc) or "the device reports no SMART data", exit_status)
    smart = Smart(
        "read",
        exit_status=exit_status,
        model=doc.get("model_name"),
        protocol=device.get("protocol"),
        passed=status.get("passed") if status else None,
        power_on_hours=(doc.get("power_on_time") or {}).get("hours"),
        temperature_c=(doc.get("temperature") or {}).get("current"),
    )
    if smart.passed is False:
        smart.failing.append("the drive's own SMART self-assessment is FAILED: replace it")
    if isinstance(ata, list):
        _ata(ata, smart)
    last_test = _object(_object(_object(doc, "ata_smart_data") or {}, "self_test") or {}, "status") or {}
    if isinstance(last_test.get("string"), str):
        smart.self_test = last_test["string"][:SELF_TEST_WORDS]
    if last_test.get("passed") is False:  # smartctl's exit status bit 7; an aborted test has no "passed"
        smart.failing.append(
            f"its most recent self-test {last_test.get('string', 'failed')}: back up now and replace the drive"
        )
    if isinstance(nvme, dict):
        _nvme(nvme, smart)
        _nvme_logs(doc, smart)
    _scsi(doc, smart)
    temperature = _object(doc, "temperature") or {}
    limit = next(
        (
            v
            for v in (temperature.get("op_limit_max"), temperature.get("drive_trip"))
            if isinstance(v, int) and v > 0
        ),
        None,
    )
    hot = limit if limit is not None else HOT_C
    if smart.temperature_c is not None and smart.temperature_c >= hot:
        at = f"its own limit {limit} °C" if limit is not None else f"{HOT_C} °C"
        smart.watch.append(f"running hot at {smart.temperature_c} °C (at or above {at}): check its cooling")
    _exit_findings(exit_status, _messages(doc), smart)
    return smart


def _exit_findings(exit_status: int, said: str, smart: Smart) -> None:
    """What smartctl's exit status says that the JSON read gave no reason for."""
    for bit, (failing, words) in EXIT_FINDINGS.items():
        if bit == SELF_TEST_LOG_BIT and smart.self_test is not None:
            continue
        if exit_status & (1 << bit) and not (smart.failing if failing else smart.failing or smart.watch):
            (smart.failing if failing else smart.watch).append(
                f"smartctl's exit status bit {bit}: {words}; "
                + ("back up now and read smartctl -a on it" if failing else "watch it")
            )
    if exit_status & SMART_FAILED:
        smart.unknown.append(
            "a SMART command failed or its data failed its checksum (smartctl exit status bit 2"
            + (f": {said}" if said else "")
            + "), so what was read may be incomplete; behind a USB bridge try smartctl -d sat -a"
        )


def unread_step(smart: Smart, virtual: str | None, root: bool) -> str:
    """Why a device's SMART was not read, as far as smartctl said, and what an admin does about it."""
    said = smart.note.lower()
    if virtual is not None:
        return (
            f"a virtual disk ({virtual}): no SMART of its own (the disks under it are the host's to check); "
            "nothing to do here"
        )
    if smart.status == "absent":
        return "health unknown: install smartmontools (smartctl 7 or newer) and ask again"
    if smart.status == "garbage":
        return "health unknown: install smartmontools 7 or newer, whose smartctl writes JSON"
    if (
        "permission denied" in said
        or "operation not permitted" in said
        or (smart.exit_status & OPEN_FAILED and not root)
    ):
        return "health unknown: smartctl needs privilege to open it; run as root"
    if "usb bridge" in said or "-d option" in said or smart.exit_status & SMART_FAILED:
        return (
            "health unknown: the drive or a USB bridge in front of it refused SMART commands; behind a "
            "USB bridge try smartctl -d sat -a on it, else the drive has no SMART to read"
        )
    if smart.exit_status & OPEN_FAILED:
        return "health unknown: it could not be opened; check that it is still attached (dmesg)"
    if smart.exit_status & COMMAND_LINE:
        return (
            "health unknown: smartctl could not tell how to talk to it; behind a RAID controller or "
            "bridge, give its type (smartctl --scan; smartctl -d TYPE -a)"
        )
    return "health unknown: the device reports no SMART; only the kernel log speaks for it"


def _ata(table: list[dict[str, Any]], smart: Smart) -> None:
    for row in table:
        ident = row.get("id")
        when = row.get("when_failed")
        prefailure = (_object(row, "flags") or {}).get("prefailure") is True
        if when == "now" and prefailure:
            smart.failing.append(
                f"attribute {ident} ({row.get('name', '?')}) is below its failure threshold now"
            )
        elif when in ("now", "past"):  # smartctl's "marginal": an old-age attribute, or one that recovered
            how = (
                "an old-age attribute below its threshold now"
                if when == "now"
                else "below its threshold in the past"
            )
            smart.watch.append(
                f"attribute {ident} ({row.get('name', '?')}) is {how}: smartctl calls it marginal; watch it"
            )
        if ident not in ATA_WATCHED:
            continue
        name, failing, advice = ATA_WATCHED[ident]
        count = smart.attributes[name] = _count((_object(row, "raw") or {}).get("value"))
        if count:
            (smart.failing if failing else smart.watch).append(f"{count:,} {name}: {advice}")


def _nvme(log: dict[str, Any], smart: Smart) -> None:
    def number(key: str) -> int:
        return _count(log.get(key))

    warning = number("critical_warning")
    for key in (
        "media_errors",
        "percentage_used",
        "available_spare",
        "available_spare_threshold",
        "unsafe_shutdowns",
    ):
        if key in log:
            smart.attributes[key] = number(key)
    if smart.power_on_hours is None and "power_on_hours" in log:
        smart.power_on_hours = number("power_on_hours")
    if smart.temperature_c is None and "temperature" in log:
        smart.temperature_c = number("temperature")
    bits = [words for bit, words in NVME_WARNINGS.items() if warning & (1 << bit)]
    if bits:
        smart.failing.append(f"NVMe critical warning 0x{warning:02x}: {', '.join(bits)}; back up now")
    spare, threshold = log.get("available_spare"), log.get("available_spare_threshold")
    if isinstance(spare, int) and isinstance(threshold, int) and spare < threshold and not warning & 1:
        smart.failing.append(f"available spare {spare}% is below its threshold {threshold}%; back up now")
    if number("media_errors"):
        smart.watch.append(
            f"{number('media_errors'):,} media errors (unrecovered data); back up and watch the count"
        )
    used = number("percentage_used")
    if used >= 100:  # the drive counts on past 100 (to 255): its maker no longer vouches for it
        smart.watch.append(f"{used}% of its rated endurance used: past its rated endurance; replace it soon")
    elif used >= 90:
        smart.watch.append(f"{used}% of its rated endurance used; plan its replacement")
    if "num_err_log_entries" in log:
        smart.attributes["error_log_entries"] = number("num_err_log_entries")


def _words(value: Any) -> str:
    """smartctl's ``{"value": n, "string": "…"}`` in words ('' where it gives none)."""
    found = value.get("string") if isinstance(value, dict) else None
    return found[:SELF_TEST_WORDS] if isinstance(found, str) else ""


def _nvme_logs(doc: dict[str, Any], smart: Smart) -> None:
    """The Device Self-test log (smartctl 7.4 and later write it in JSON): the test running, the most
    recent one finished, and a failure of that one (which stands while a new test runs: the log's
    newest entry is written only when a test ends). The Error Information log is counted
    (``error_log_entries``) and not judged: drives log there the host's unsupported commands too,
    and the errors that lose data are ``media_errors``."""
    log = _object(doc, "nvme_self_test_log")
    if log is None:
        return
    running = _object(log, "current_self_test_operation") or {}
    said = []
    if _count(running.get("value")) & 0xF:
        done = log.get("current_self_test_completion_percent")
        said.append(_words(running) + (f", {done}% done" if isinstance(done, int) else ""))
    table = log.get("table")
    newest = table[0] if isinstance(table, list) and table and isinstance(table[0], dict) else None
    if newest is None:
        smart.self_test = said[0] if said else smart.self_test
        return
    kind, outcome = _words(newest.get("self_test_code")), _words(newest.get("self_test_result"))
    hours = newest.get("power_on_hours")
    at = f", at {hours:,} h" if isinstance(hours, int) else ""
    said.append(f"{kind or 'self-test'}: {outcome or 'result not given'}{at}")
    smart.self_test = "; last: ".join(said)
    result = (_object(newest, "self_test_result") or {}).get("value")
    if isinstance(result, int) and result & 0xF in NVME_TEST_FAILED:
        lba = newest.get("lba")
        lba = lba.get("value") if isinstance(lba, dict) else lba
        where = f", first failing LBA {lba}" if isinstance(lba, int) else ""
        smart.failing.append(
            f"its most recent self-test ({kind or 'self-test'}{at}) {outcome or 'failed'}{where}: back up now "
            "and replace the drive"
        )


def _scsi(doc: dict[str, Any], smart: Smart) -> None:
    """A SCSI/SAS drive's counters: its grown defect list (sectors remapped since it left the factory,
    SCSI's reallocated sectors) and the errors its error counter log could not correct."""
    grown = doc.get("scsi_grown_defect_list")
    if isinstance(grown, int) and not isinstance(grown, bool):
        smart.attributes["grown defects"] = grown
        if grown:
            smart.watch.append(f"{grown:,} grown defects (remapped sectors): {_WEARING}")
    log = _object(doc, "scsi_error_counter_log") or {}
    for kind in ("read", "write", "verify"):
        counters = _object(log, kind)
        if counters is None or "total_uncorrected_errors" not in counters:
            continue
        count = smart.attributes[f"uncorrected {kind} errors"] = _count(counters["total_uncorrected_errors"])
        if count:
            smart.watch.append(f"{count:,} uncorrected {kind} errors: {_UNCORRECTED}")


def read(smartctl: str, device: str, kind: str | None, timeout_s: float, cancel: Cancel) -> Smart:
    """One device's SMART through ``smartctl --json -a``, killed after ``timeout_s`` or when ``cancel`` raises."""
    try:
        done = commands.run(
            [smartctl, "--json", "-a", *(["-d", kind] if kind else []), device], timeout_s, cancel
        )
    except commands.CommandTimedOut:
        return Smart("timeout", f"smartctl did not answer within {timeout_s:g} s (a hung device or bus?)")
    except commands.CommandMissing:
        return Smart("absent", "smartctl is not installed (Debian: apt install smartmontools)")
    except commands.CommandFailed as fault:  # it could not be started
        return Smart("absent", fault.detail)
    return from_output(done.stdout, device)


def from_output(out: bytes, device: str) -> Smart:
    """The ``Smart`` for smartctl's output about ``device`` (it may have vanished while it was asked)."""
    try:
        doc = json.loads(out)
    except ValueError:
        doc = None
    if not os.path.exists(device):
        return Smart("gone", f"{device} is no longer present (removed while it was read?)")
    if not isinstance(doc, dict) or "smartctl" not in doc:
        return Smart("garbage", "smartctl's output was not its JSON; is it smartmontools 7 or newer?")
    try:
        return parse(doc)
    except (AttributeError, TypeError, ValueError):  # JSON, but not in smartctl's shapes
        return Smart("garbage", "smartctl's JSON is not in the documented format")


def scan(smartctl: str, timeout_s: float, cancel: Cancel) -> list[tuple[str, str | None]]:
    """``smartctl --scan-open --json``: the devices smartctl finds, with the type it would use."""
    try:
        doc = json.loads(commands.run([smartctl, "--scan-open", "--json"], timeout_s, cancel).stdout)
    except (Unavailable, ValueError):
        return []
    found = doc.get("devices", []) if isinstance(doc, dict) else []
    return [
        (d["name"], d.get("type")) for d in found if isinstance(d, dict) and isinstance(d.get("name"), str)
    ]
