"""A real process that fills a file at a steady rate, with fsync, for the rate and I/O tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

RATE = 20_000_000  # bytes a second
CHUNK = 1 << 20

WRITER = textwrap.dedent(
    """
    import os, sys, time
    rate, chunk = int(sys.argv[2]), int(sys.argv[3])
    data = os.urandom(chunk)
    with open(sys.argv[1], "ab") as handle:
        start, written = time.monotonic(), 0
        print("writing", flush=True)
        while True:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            written += chunk
            ahead = written / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)  # pacing, not ordering: keeps the rate near RATE
    """
)


@contextmanager
def writing(path: Path, rate: int = RATE, wrapper: Sequence[str] = ()) -> Iterator[subprocess.Popen[str]]:
    """A child appending to ``path`` at ``rate`` bytes a second, with fsync after each chunk;
    ``wrapper``: the command it runs under (``unshare …``), which ends by running its arguments."""
    child = subprocess.Popen(
        [*wrapper, sys.executable, "-c", WRITER, str(path), str(rate), str(CHUNK)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "writing\n"
        yield child
    finally:
        child.kill()
        child.wait(timeout=30)
        path.unlink(missing_ok=True)


@contextmanager
def quiet_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A directory on a filesystem nothing else writes to: a small tmpfs of its own where we may mount
    (root), so a fill rate measured there is the writer's alone; elsewhere ``tmp_path`` as it is."""
    if os.geteuid() != 0:
        yield tmp_path
        return
    point = tmp_path / "quiet"
    point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", str(point)], check=False)
    try:
        yield point if mounted.returncode == 0 else tmp_path
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", str(point)], check=False)
