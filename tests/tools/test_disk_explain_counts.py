"""disk_usage explain's part 3 and part 2 in words an admin can act on: every hidden byte the summary
names is in the list, the counts agree, no advice to unmount what the system runs on, and the real
/proc/PID/fd/N to truncate a deleted file through."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.mounts import Figures, Mount
from sysmcp.engine.space import Accounting, Snapshots
from sysmcp.engine.space._hidden import Hidden
from sysmcp.engine.space._snapshots import Overhead
from sysmcp.engine.space._space import DeletedPart, HiddenPart, Walked
from sysmcp.tools import disk_explain
from sysmcp.tools.typed import to_json
from tests.profile import UNDER_POSIX_PROFILE

ROOT = Path(__file__).resolve().parents[2]
KiB, MiB = 1 << 10, 1 << 20

SCENARIO = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from pathlib import Path
    import anyio
    from tests.tools.explain_scenario import explain, run, write
    work = Path(sys.argv[1])
    image, mnt = work / "fs.img", work / "mnt"
    mnt.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(64 << 20)
    run("mkfs.ext4", "-q", "-F", str(image))
    run("mount", "-o", "loop", str(image), str(mnt))
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


@pytest.fixture(scope="module")
def answer() -> dict[str, Any]:
    if UNDER_POSIX_PROFILE or not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root on Linux: a loop device, mounts in a private namespace")
    if shutil.which("unshare") is None or shutil.which("mkfs.ext4") is None:
        pytest.skip("needs unshare(1) and mkfs.ext4")
    work = Path(tempfile.mkdtemp(prefix="sysmcp-explain-counts-"))
    try:
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", sys.executable, "-c", SCENARIO, str(work)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if done.returncode != 0 and "loop" in done.stderr and "mount" in done.stderr:
        pytest.skip(f"no loop device here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def render(acc: Accounting) -> tuple[str, dict[str, Any]]:
    """The explain's text and its part of the structured answer, as JSON."""
    text, part = disk_explain.answer(acc)
    return text, to_json(part)


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
        walked=Walked(disk=used - hidden.disk, files=10),
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
