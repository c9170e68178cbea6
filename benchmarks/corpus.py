"""A deterministic directory tree for scan benchmarks: the same seed always gives the same tree.

The shape imitates a real data disk rather than a flat directory: nested directories of varied
width, mostly small files, a few large sparse ones, hard links, symlinks (one a loop) and names
with spaces. File contents are a repeated byte, written for real so disk usage is not zero.

    uv run python benchmarks/corpus.py /tmp/corpus --files 200000
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MARKER = ".sysmcp-corpus"


@dataclass(frozen=True)
class CorpusStats:
    files: int
    directories: int
    hard_links: int
    symlinks: int
    seconds: float


def _size(rng: random.Random) -> int:
    """Mostly small files, a long tail of larger ones: roughly what home and data trees look like."""
    roll = rng.random()
    if roll < 0.05:
        return 0
    if roll < 0.80:
        return rng.randint(1, 4096)
    if roll < 0.99:
        return rng.randint(4097, 64 << 10)
    return rng.randint(64 << 10, 1 << 20)


def generate(root: Path, files: int, *, seed: int = 1, per_dir: int = 40, fanout: int = 6) -> CorpusStats:
    """Create ``files`` regular files under ``root`` (which must not exist or be an earlier corpus)."""
    started = time.perf_counter()
    if root.exists() and not (root / MARKER).exists() and any(root.iterdir()):
        raise SystemExit(f"{root} exists and is not a corpus made by this script; refusing to write into it")
    root.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text(f"files={files} seed={seed} per_dir={per_dir} fanout={fanout}\n")
    rng = random.Random(seed)
    payload = b"s" * (1 << 20)
    directories = [root]
    pending = [root]
    made = hard_links = symlinks = 0
    previous: Path | None = None
    while made < files:
        parent = pending.pop(0) if pending else directories[rng.randrange(len(directories))]
        for d in range(rng.randint(1, fanout)):
            name = f"dir {d}" if rng.random() < 0.1 else f"d{d:02d}"
            child = parent / name
            if child.exists():
                continue
            child.mkdir()
            directories.append(child)
            pending.append(child)
        count = min(files - made, rng.randint(per_dir // 2, per_dir * 3 // 2))
        for i in range(count):
            path = parent / (f"file {i}.dat" if rng.random() < 0.05 else f"f{i:04d}.dat")
            if path.exists():
                continue
            if previous is not None and rng.random() < 0.005:
                os.link(previous, path)
                hard_links += 1
            else:
                size = _size(rng)
                with path.open("wb") as out:
                    if rng.random() < 0.002:
                        out.truncate(size * 64)  # sparse: large apparent size, no blocks
                    else:
                        out.write(payload[:size])
                previous = path
            made += 1
        if rng.random() < 0.05:
            link = parent / "link"
            if not link.exists() and not link.is_symlink():
                os.symlink("." if rng.random() < 0.5 else "../missing-target", link)
                symlinks += 1
    return CorpusStats(made, len(directories), hard_links, symlinks, time.perf_counter() - started)


def ensure(root: Path, files: int, *, seed: int = 1) -> CorpusStats | None:
    """Generate the corpus unless the same one is already there (None when reused)."""
    marker = root / MARKER
    if marker.exists() and marker.read_text().startswith(f"files={files} seed={seed} "):
        return None
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"{root} holds something else; remove it or choose another path")
    return generate(root, files, seed=seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("root", type=Path, help="where to create the tree (must be new or empty)")
    parser.add_argument("--files", type=int, default=200_000, help="regular files to create (200000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed; the same seed gives the same tree")
    args = parser.parse_args(argv)
    stats = ensure(args.root, args.files, seed=args.seed)
    if stats is None:
        print(f"{args.root}: corpus already present", file=sys.stderr)
    else:
        print(
            f"{args.root}: {stats.files:,} files, {stats.directories:,} directories, {stats.hard_links:,} hard "
            f"links, {stats.symlinks:,} symlinks in {stats.seconds:.1f} s",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
