"""A real Docker engine of the test's own: Debian's dockerd with its own data root, exec root, pid
file and socket under a temporary directory, no network (``--iptables=false --bridge=none``), images
made offline with ``docker import`` from a static busybox root. ``why_not()`` says why it cannot run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

START_BOUND_S = 60.0
BUSYBOX_LINKS = ("sh", "echo", "sleep", "dd", "cat", "true")


def why_not() -> str | None:
    if os.geteuid() != 0:
        return "dockerd needs root"
    for tool in ("dockerd", "docker", "busybox"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH (Debian's docker.io and busybox-static)"
    return None


@dataclass
class Lab:
    base: Path
    socket: Path
    data_root: Path

    def docker(self, *argv: str, stdin: bytes | None = None) -> str:
        done = subprocess.run(
            ["docker", "-H", f"unix://{self.socket}", *argv],
            input=stdin,
            capture_output=True,
            timeout=120,
            check=True,
        )
        return done.stdout.decode().strip()

    def busybox_image(self, tag: str | None) -> str:
        """An image imported from a static busybox root (``tag`` None: an untagged, dangling one)."""
        root = self.base / f"root-{tag or 'none'}".replace(":", "-")
        (root / "bin").mkdir(parents=True)
        shutil.copy(shutil.which("busybox") or "", root / "bin" / "busybox")
        for name in BUSYBOX_LINKS:
            (root / "bin" / name).symlink_to("busybox")
        tar = subprocess.run(["tar", "-C", str(root), "-c", "."], capture_output=True, check=True).stdout
        return self.docker("import", "-", *([tag] if tag else []), stdin=tar)


def _start(base: Path, driver: str) -> tuple[subprocess.Popen[bytes], Lab]:
    lab = Lab(base, base / "docker.sock", base / "data")
    log = open(base / f"dockerd-{driver}.log", "wb")  # noqa: SIM115 - closed with the daemon
    daemon = subprocess.Popen(
        [
            "dockerd",
            "--data-root", str(lab.data_root),
            "--exec-root", str(base / "exec"),
            "--pidfile", str(base / "dockerd.pid"),
            "-H", f"unix://{lab.socket}",
            "--iptables=false",
            "--bridge=none",
            "--storage-driver", driver,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + START_BOUND_S
    while daemon.poll() is None and time.monotonic() < deadline:
        if lab.socket.exists():
            try:
                lab.docker("version")
                return daemon, lab
            except subprocess.CalledProcessError:
                pass
        time.sleep(0.2)  # polling the daemon's start, not ordering two things of ours
    _stop(daemon)
    tail = (base / f"dockerd-{driver}.log").read_text(errors="replace")[-600:]
    raise RuntimeError(f"dockerd --storage-driver {driver} did not start: {tail}")


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


@contextmanager
def running_docker() -> Iterator[Lab]:
    """A started engine (overlay2, or vfs where overlay2 fails), stopped and removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="sysmcp-dk-", dir="/tmp"))
    try:
        try:
            daemon, lab = _start(base, "overlay2")
        except RuntimeError:
            shutil.rmtree(base / "data", ignore_errors=True)
            daemon, lab = _start(base, "vfs")
        try:
            yield lab
        finally:
            try:
                ids = lab.docker("ps", "-aq").split()
                if ids:
                    lab.docker("rm", "-f", *ids)
            finally:
                _stop(daemon)
    finally:
        subprocess.run(["umount", "-R", "-l", str(base)], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)
