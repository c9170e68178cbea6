"""md RAID state from ``/proc/mdstat``: a pure parser of its text (tests feed it recorded texts)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ARRAY = re.compile(r"^(md\S*) : (\S+)(?: \((?:auto-)?read-only\))? ?(\S*)\s*(.*)$")
_MEMBER = re.compile(r"(\S+)\[\d+\](\([A-Z]\))?")
_SLOTS = re.compile(r"\[(\d+)/(\d+)\] \[([U_]+)\]")
_PROGRESS = re.compile(
    r"(recovery|resync|reshape|check|repair)\s*=\s*([\d.]+)%.*?(?:finish=(\S+))?\s*(?:speed=(\S+))?\s*$"
)
_WAITING = re.compile(r"(recovery|resync|reshape|check)\s*=\s*(DELAYED|PENDING)")


@dataclass(slots=True)
class MdArray:
    name: str
    state: str  # active, inactive
    level: str  # raid1, raid5 ...
    members: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # members marked (F)
    spares: list[str] = field(default_factory=list)  # members marked (S)
    slots: str = ""  # "UU", "U_": one letter per slot, _ for a missing member
    operation: str | None = None  # recovery, resync, reshape, check, repair
    progress_percent: float | None = None
    finish: str | None = None  # mdstat's estimate, e.g. "12.3min"
    speed: str | None = None  # e.g. "51200K/sec"

    @property
    def degraded(self) -> bool:
        """A member slot is empty (``_``): mdstat's own count. A failed member still listed beside a
        full set (``[UU]``, a spare rebuilt in its place) leaves the array whole; levels without slots
        (raid0, linear) are degraded by any failed member."""
        return "_" in self.slots or (bool(self.failed) and not self.slots)


def parse(text: str) -> list[MdArray]:
    """Every array in a ``/proc/mdstat`` text, in its order."""
    arrays: list[MdArray] = []
    for line in text.splitlines():
        found = _ARRAY.match(line)
        if found:
            name, state, level, rest = found.groups()
            if not level.startswith(("raid", "linear", "multipath")):  # inactive arrays list members at once
                rest, level = f"{level} {rest}".strip(), ""
            array = MdArray(name, state, level)
            for member, flag in _MEMBER.findall(rest):
                array.members.append(member)
                if flag == "(F)":
                    array.failed.append(member)
                elif flag == "(S)":
                    array.spares.append(member)
            arrays.append(array)
            continue
        if not arrays or not line.startswith((" ", "\t")):
            continue
        array = arrays[-1]
        if slots := _SLOTS.search(line):
            array.slots = slots[3]
        if progress := _PROGRESS.search(line):
            array.operation, percent, array.finish, array.speed = progress.groups()
            array.progress_percent = float(percent)
        elif waiting := _WAITING.search(line):
            array.operation = f"{waiting[1]} ({waiting[2].lower()})"
    return arrays
