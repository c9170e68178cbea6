"""A deterministic directory tree for scan benchmarks: the same seed always gives the same tree.

The shape imitates a real data disk rather than a flat directory: nested directories of varied
width, mostly small files, a few large sparse ones, hard links, symlinks (one a loop) and names
with spaces. File contents are a repeated byte, written for real so disk usage is not zero.

Three more trees for the many-files benchmark (``many_files_bench.py``), with seeded random contents so
that files of one size differ unless they are meant to be copies:

- ``mixed``: 200,000 files, about 1.2 GB, in 10,000 directories (hash_tree, verify_checksums).
- ``small``: 1,000,000 files of 0 to 200 bytes in 1,000 directories (per-file cost, memory bounds).
- ``duplicates``: 20,000 files of 1 KiB to 8 MiB (log-uniform, about 17 GB): a quarter exact copies,
  about 15 % of the same size and the same first and last 4 KiB as another file but a different
  middle (the case a head/tail sieve cannot settle), and a few hard links. ``--files`` scales it.

    uv run python benchmarks/corpus.py /tmp/corpus --files 200000
    uv run python benchmarks/corpus.py /work/bench-corpus/small --kind small
    uv run python benchmarks/corpus.py /work/bench-corpus/dups --kind duplicates --files 5000
"""

from __future__ import annotations

import argparse
import math
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


POOL_BYTES = 24 << 20  # seeded random bytes that contents are cut from: distinct offsets, distinct files


def _pool(rng: random.Random) -> bytes:
    return rng.randbytes(POOL_BYTES)


def _start(root: Path, description: str) -> None:
    if root.exists() and not (root / MARKER).exists() and any(root.iterdir()):
        raise SystemExit(f"{root} exists and is not a corpus made by this script; refusing to write into it")
    root.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text(description + "\n")


def _spread(root: Path, directories: int, rng: random.Random) -> list[Path]:
    """``directories`` directories below ``root``, nested up to four levels, in a seeded shape."""
    made = [root]
    while len(made) <= directories:
        parent = made[rng.randrange(len(made))] if len(made) > 16 else root
        if len(parent.relative_to(root).parts) >= 4:
            continue
        child = parent / (f"dir {len(made)}" if rng.random() < 0.05 else f"d{len(made):05d}")
        child.mkdir()
        made.append(child)
    return made[1:]


def mixed_tree(root: Path, files: int = 200_000, *, directories: int = 10_000, seed: int = 1) -> CorpusStats:
    """Many files of mixed sizes (mean about 6 KB: 1.2 GB for 200,000), random contents."""
    started = time.perf_counter()
    _start(root, f"kind=mixed files={files} directories={directories} seed={seed}")
    rng = random.Random(seed)
    pool = _pool(rng)
    dirs = _spread(root, directories, rng)
    for i in range(files):
        roll = rng.random()
        if roll < 0.05:
            size = 0
        elif roll < 0.85:
            size = rng.randint(1, 4096)
        elif roll < 0.998:
            size = rng.randint(4097, 32 << 10)
        else:
            size = rng.randint(32 << 10, 1 << 20)
        offset = rng.randrange(POOL_BYTES - size) if size < POOL_BYTES else 0
        (dirs[i % len(dirs)] / f"f{i:07d}.dat").write_bytes(pool[offset : offset + size])
    return CorpusStats(files, len(dirs), 0, 0, time.perf_counter() - started)


def small_files(
    root: Path, files: int = 1_000_000, *, directories: int = 1_000, seed: int = 1
) -> CorpusStats:
    """A million tiny files (0 to 200 bytes): what per-file costs and memory bounds are measured on."""
    started = time.perf_counter()
    _start(root, f"kind=small files={files} directories={directories} seed={seed}")
    rng = random.Random(seed)
    pool = _pool(rng)
    dirs = [root / f"d{i:04d}" for i in range(directories)]
    for directory in dirs:
        directory.mkdir()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for i in range(files):
        size = rng.randint(0, 200)
        offset = rng.randrange(POOL_BYTES - size)
        fd = os.open(dirs[i % directories] / f"f{i:07d}", flags, 0o644)
        try:
            os.write(fd, pool[offset : offset + size])
        finally:
            os.close(fd)
    return CorpusStats(files, directories, 0, 0, time.perf_counter() - started)


def duplicates_tree(
    root: Path, files: int = 20_000, *, directories: int = 200, seed: int = 1, hard_links: int = 20
) -> CorpusStats:
    """Files of 1 KiB to 8 MiB (log-uniform): 1/4 exact copies, ~15 % same size, head and tail as another
    file but a different middle, and ``hard_links`` further names of existing files."""
    started = time.perf_counter()
    _start(root, f"kind=duplicates files={files} directories={directories} seed={seed}")
    rng = random.Random(seed)
    pool = _pool(rng)
    dirs = _spread(root, directories, rng)
    originals: list[tuple[Path, int, int]] = []  # (path, size, pool offset)
    low, high = math.log(1 << 10), math.log(8 << 20)
    links = 0
    for i in range(files):
        path = dirs[i % len(dirs)] / f"f{i:06d}.bin"
        roll = rng.random()
        if originals and roll < 0.25:  # an exact copy of an earlier file
            _, size, offset = originals[rng.randrange(len(originals))]
            path.write_bytes(pool[offset : offset + size])
            continue
        if originals and roll < 0.40:  # same size, head and tail as an earlier file; another middle
            _, size, offset = originals[rng.randrange(len(originals))]
            if size > 3 * 4096:
                data = bytearray(pool[offset : offset + size])
                middle = size // 2
                data[middle] ^= 0xFF
                path.write_bytes(data)
                continue
        if originals and links < hard_links and roll < 0.41:
            os.link(originals[rng.randrange(len(originals))][0], path)
            links += 1
            continue
        size = int(math.exp(rng.uniform(low, high)))
        offset = rng.randrange(POOL_BYTES - size)
        path.write_bytes(pool[offset : offset + size])
        originals.append((path, size, offset))
    return CorpusStats(files, len(dirs), links, 0, time.perf_counter() - started)


KINDS = {"mixed": mixed_tree, "small": small_files, "duplicates": duplicates_tree}


def ensure_kind(root: Path, kind: str, files: int, *, seed: int = 1) -> CorpusStats | None:
    """Generate a ``mixed``/``small``/``duplicates`` tree unless the same one is already there."""
    marker = root / MARKER
    if marker.exists():
        said = marker.read_text()
        if said.startswith(f"kind={kind} files={files} ") and said.rstrip().endswith(f"seed={seed}"):
            return None
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"{root} holds something else; remove it or choose another path")
    return KINDS[kind](root, files, seed=seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("root", type=Path, help="where to create the tree (must be new or empty)")
    parser.add_argument(
        "--kind",
        choices=["scan", *KINDS],
        default="scan",
        help="scan (the scan benchmark's tree, default), mixed, small or duplicates",
    )
    parser.add_argument(
        "--files", type=int, help="regular files to create (200000; small: 1000000; duplicates: 20000)"
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed; the same seed gives the same tree")
    args = parser.parse_args(argv)
    if args.kind == "scan":
        stats = ensure(args.root, args.files or 200_000, seed=args.seed)
    else:
        default = {"mixed": 200_000, "small": 1_000_000, "duplicates": 20_000}[args.kind]
        stats = ensure_kind(args.root, args.kind, args.files or default, seed=args.seed)
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
