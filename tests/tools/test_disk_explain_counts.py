"""disk_usage explain's part 3 and part 2 in words an admin can act on: every hidden byte the summary
names is in the list, the counts agree, no advice to unmount what the system runs on, and the real
/proc/PID/fd/N to truncate a deleted file through."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from typing import Any

import pytest

from sysmcp.engine.mounts import Figures, Mount
from sysmcp.engine.space import Accounting, Snapshots
from sysmcp.engine.space._held import Overhead
from sysmcp.engine.space._hidden import Hidden
from sysmcp.engine.space._space import DeletedPart, HiddenPart, WalkPart
from sysmcp.tools import disk_explain
from sysmcp.tools.errors import unreadable_reason
from sysmcp.tools.typed import to_json
from tests.loopfs import in_private_namespace, needs_loop_mounts

KiB, MiB = 1 << 10, 1 << 20

SCENARIO = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from pathlib import Path
    import anyio
    from tests.loopfs import loop_mount
    from tests.tools.explain_scenario import explain, run, write
    work = Path(sys.argv[1])
    mnt = work / "mnt"
    loop_mount(work / "fs.img", mnt, 64 << 20, ["mkfs.ext4", "-q", "-F"])
    for name in ("full", "empty1", "empty2"):
        (mnt / name).mkdir()
    write(mnt / "full" / "written-before-the-mount", 2 << 20)
    for name in ("full", "empty1", "empty2"):
        run("mount", "-t", "tmpfs", "-o", "size=1m", "none", str(mnt / name))
    doomed = mnt / "app.log"
    write(doomed, 3 << 20)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import os, sys; f = open(sys.argv[1], 'rb'); print(f.fileno(), flush=True); "
         "sys.stdin.read()", str(doomed)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        fd = int(holder.stdout.readline())
        os.unlink(doomed)
        answer = {"mount": str(mnt), "holder": holder.pid, "fd": fd, "root": anyio.run(explain, str(mnt))}
    finally:
        holder.kill()
        holder.wait()
    print(json.dumps(answer))
    """
)


needs_ext4 = needs_loop_mounts("mkfs.ext4")


@pytest.fixture(scope="module")
def answer() -> dict[str, Any]:
    return in_private_namespace(["-c", SCENARIO], "sysmcp-explain-counts-", timeout=300)  # type: ignore[no-any-return]


def render(acc: Accounting) -> tuple[str, dict[str, Any]]:
    """The explain's text and its part of the structured answer, as JSON."""
    text, part = disk_explain.answer(acc)
    return text, to_json(part)


@needs_ext4
def test_the_summary_the_detail_and_the_structured_result_count_the_same_mount_points_and_list_every_byte(
    answer: dict[str, Any],
) -> None:
    text, hidden = answer["root"]["text"], answer["root"]["structured"]["explain"]["hidden_under_mounts"]
    assert hidden["checked"] and hidden["mount_points"] == 3
    assert "are hidden under 3 mount points" in text
    assert "3. Hidden under mount points: " in text and " under 3 mount points: " in text
    assert [place["mount_point"] for place in hidden["places"]] == [answer["mount"] + "/full"]
    assert hidden["unlisted_mount_points"] == 2
    assert sum(place["bytes"] for place in hidden["places"]) + hidden["unlisted_bytes"] == hidden["bytes"]
    assert "2 empty mount point directories" in text, text
    assert f"unmount {answer['mount']}/full" in hidden["next_step"]  # an ordinary mount may be unmounted


@needs_ext4
def test_the_advice_for_a_deleted_open_file_names_its_real_descriptor(answer: dict[str, Any]) -> None:
    text, deleted = answer["root"]["text"], answer["root"]["structured"]["explain"]["deleted_open"]
    link = f"/proc/{answer['holder']}/fd/{answer['fd']}"
    (held,) = deleted["files"]
    assert held["descriptor"] == link
    assert f": > {link}" in deleted["next_step"] and f": > {link}" in text, text
    assert "/proc/PID/fd/N" not in text


def accounting(point: str, places: list[Hidden]) -> Accounting:
    used = 10 * MiB
    hidden = HiddenPart(
        checked=True, disk=sum(p.disk for p in places), places=places, mount_points=len(places)
    )
    return Accounting(
        mount=Mount(point, "/dev/vda", "ext4"),
        figures=Figures(100 * MiB, used, 90 * MiB, 0, 10, 1000, 10, 990, 1),
        walked=WalkPart(disk=used - hidden.disk, files=10),
        deleted=DeletedPart(),
        hidden=hidden,
        snapshots=Snapshots(),
        overhead=Overhead(0, "test"),
    )


def test_files_under_dev_are_looked_at_through_a_bind_mount_of_the_root_never_by_unmounting_dev() -> None:
    text, data = render(accounting("/", [Hidden("dev", 12 * KiB, 1, 2), Hidden("run/user/0", 8 * KiB, 1, 2)]))
    step = data["hidden_under_mounts"]["next_step"]
    assert "never unmount /dev, /run/user/0" in step
    assert "mount --bind / /mnt/under" in step and "ls -la /mnt/under/dev" in step
    assert "unmount it" not in text and "Next: unmount" not in text
    assert text.count("never unmount") == 1


def test_files_under_an_ordinary_mount_point_may_be_freed_by_unmounting_it() -> None:
    text, data = render(accounting("/", [Hidden("srv/data", 1 * MiB, 3, 4)]))
    step = data["hidden_under_mounts"]["next_step"]
    assert step.startswith("unmount /srv/data and move the files out, or look beneath without unmounting")
    assert "never unmount" not in text


def test_what_root_could_not_read_or_look_under_is_not_blamed_on_not_being_root() -> None:
    # Root in a container without CAP_SYS_ADMIN cannot make the private view, and a sandbox can refuse
    # root other processes' descriptors: "run sysmcp as root" and "not root" were wrong there.
    acc = accounting("/", [])
    acc = replace(
        acc,
        deleted=DeletedPart(unreadable=3),
        hidden=HiddenPart(reason="unshare(CLONE_NEWNS): Operation not permitted", mount_points=2),
    )
    text, data = render(acc)
    assert f"(3 processes could not be read: {unreadable_reason()})" in text, text
    assert "not root" not in text and "as root" not in data["hidden_under_mounts"]["next_step"]
    assert "not checked (unshare(CLONE_NEWNS): Operation not permitted) at 2 mount points." in text


def test_a_user_without_root_is_told_that_root_looks_under_mount_points() -> None:
    acc = replace(accounting("/", []), hidden=HiddenPart(reason="needs root", mount_points=2))
    _text, data = render(acc)
    assert data["hidden_under_mounts"]["next_step"] == "run sysmcp as root to look under them"
