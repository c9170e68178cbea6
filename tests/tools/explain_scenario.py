"""One real filesystem planted with every kind of used byte, then accounted for by disk_usage explain.

Run by tests/tools/test_disk_explain_real.py as root inside a private mount namespace of its own
(``unshare -m --propagation private python -m tests.tools.explain_scenario FS WORKDIR``), so the loop
mount, the mount over a directory and everything else are seen by no other process and end with it.
Prints one JSON object: what was planted, the explain answer as root, and a non-root scan's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

from sysmcp.engine.mounts._mounts import MountInfoReader
from sysmcp.tools.disk_usage import DiskUsage
from tests.harness import tool_context

MiB = 1 << 20
SIZES = {
    "visible": 96 * MiB,
    "secret": 20 * MiB,
    "deleted": 50 * MiB,
    "hidden": 30 * MiB,
    "snapshot": 40 * MiB,
}
NOBODY = 65534


def write(path: Path, size: int, fill: int = 0x5A) -> None:
    """A file of ``size`` real bytes, flushed and closed (no preallocation past EOF left behind)."""
    chunk = bytes([fill]) * MiB
    with open(path, "wb") as handle:
        for _ in range(size // MiB):
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


async def explain(mount: str, roots: list[Path] | None = None, timeout_s: float = 120) -> dict[str, Any]:
    handler = DiskUsage(MountInfoReader())
    ctx = tool_context(roots)
    args = {"path": mount, "explain": True, "unit": "percent", "all": False, "timeout_s": timeout_s}
    output = await handler(args, ctx)
    return {"text": output.text, "structured": output.structured}


def as_nobody(mount: str) -> dict[str, Any]:
    """The same explain from a forked child that has become an unprivileged user (uid 65534)."""
    read, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            answer = anyio.run(explain, mount)
            os.write(write_end, json.dumps(answer).encode())
        except BaseException as exc:
            os.write(write_end, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)  # type: ignore[no-any-return]


def main(kind: str, work: Path) -> None:
    image, mnt = work / f"{kind}.img", work / "mnt"
    mnt.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(768 * MiB)
    mkfs = {
        "ext4": ["mkfs.ext4", "-q", "-F"],
        "xfs": ["mkfs.xfs", "-q", "-f"],
        "btrfs": ["mkfs.btrfs", "-q", "-f"],
    }
    run(*mkfs[kind], str(image))
    run("mount", "-o", "loop", str(image), str(mnt))
    os.chmod(mnt, 0o755)
    planted = dict(SIZES)
    if kind == "btrfs":  # a snapshot that alone holds a file deleted from the live subvolume
        write(mnt / "doomed", SIZES["snapshot"], 0x33)
        run("btrfs", "quota", "enable", str(mnt))
        run("btrfs", "subvolume", "snapshot", "-r", str(mnt), str(mnt / "snap"))
        os.unlink(mnt / "doomed")
        run("sync")
    else:
        del planted["snapshot"]
    (mnt / "data").mkdir()
    for index in range(4):
        write(mnt / "data" / f"part{index}", SIZES["visible"] // 4, 0x41 + index)
    secret = mnt / "secret"
    secret.mkdir(mode=0o700)
    write(secret / "inside", SIZES["secret"])
    under = mnt / "under"
    under.mkdir()
    write(under / "written-before-the-mount", SIZES["hidden"])
    run("mount", "-t", "tmpfs", "-o", "size=4m", "none", str(under))
    doomed = mnt / "app.log"
    write(doomed, SIZES["deleted"])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; f = open(sys.argv[1], 'rb'); print('open', flush=True); sys.stdin.read()",
            str(doomed),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        os.unlink(doomed)
        run("sync")
        if kind == "btrfs":
            run("btrfs", "quota", "rescan", "-w", str(mnt))
            run("sync")
        answer = {
            "planted": planted,
            "holder": holder.pid,
            "root": anyio.run(explain, str(mnt)),
            "confined": anyio.run(explain, str(mnt / "data"), [mnt / "data"]),
            "nobody": as_nobody(str(mnt)),
        }
    finally:
        holder.kill()
        holder.wait()
    print(json.dumps(answer))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
