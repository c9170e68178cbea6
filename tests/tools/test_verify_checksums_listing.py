"""verify_checksums' way for plain ranges: one regular-expression pass and one listing per directory.

It must give exactly the verdicts of one look per name (``check_file``), whatever the manifest mixes,
refuse names swapped after the listing without blocking, never open a special file the listing saw,
and keep its listing bounded.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import blake3
import pytest

from sysmcp.engine.calls import never_cancelled, no_progress
from sysmcp.engine.hashing import Source, Verification
from sysmcp.engine.hashing import _dirlook as dirlook
from sysmcp.engine.hashing import _verdicts as verdicts
from sysmcp.engine.hashing import _verify_ranges as verify_ranges
from sysmcp.engine.hashing import verify as check_manifest
from sysmcp.engine.hashing._manifests import LineParser
from sysmcp.engine.hashing._verify_request import Tuning
from sysmcp.engine.paths import PathPolicy
from sysmcp.tools import verify_checksums
from tests.descriptors import counted_alone, open_descriptors


def verified(*args: Any, tuning: Tuning, **kwargs: Any) -> Verification:
    """The engine's check of a tool's request built from these arguments, outside any call."""
    request = replace(verify_checksums.verify_request(*args, **kwargs), tuning=tuning)
    return check_manifest(request, no_progress, never_cancelled)


ARGS = {"algorithm": "auto", "report_new": False, "exclude": [], "one_file_system": True}
Verdict = tuple[str, str, str]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(root: Path, dirs: int = 4, per_dir: int = 30) -> list[bytes]:
    """Small files of random content in ``dirs`` directories, their names relative to ``root``."""
    names = []
    for d in range(dirs):
        (root / f"d{d}").mkdir()
        for f in range(per_dir):
            name = f"d{d}/f{f:03d}".encode()
            (root / os.fsdecode(name)).write_bytes(os.urandom(1 + (f * 37) % 300))
            names.append(name)
    return names


def plain_lines(root: Path, names: list[bytes]) -> bytes:
    return b"".join(sha((root / os.fsdecode(n)).read_bytes()).encode() + b"  " + n + b"\n" for n in names)


SETTLED = -(10**18)  # as settled_ns: files the test just wrote count as long unchanged (the listing's way)


class Run:
    """verify() on a manifest, checked in ranges (even a short one) by ``processes`` processes with
    ``tuning``'s knobs; ``fallbacks`` counts the entries that went through ``check_file`` (in this
    process: with one process, all of them)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, **tuning: Any) -> None:
        self.monkeypatch = monkeypatch
        self.tuning = tuning
        self.fallbacks = 0
        real = verdicts.check_file

        def counted(*args: Any) -> tuple[int, str, int]:
            self.fallbacks += 1
            return real(*args)

        monkeypatch.setattr(verify_ranges, "check_file", counted)

    def __call__(
        self, text: bytes, base: Path, *, plain: bool = True, processes: int = 1
    ) -> tuple[list[Verdict], list[int], int]:
        self.fallbacks = 0
        tuning = Tuning(parallel_from=0, processes=processes, **self.tuning)
        with self.monkeypatch.context() as patch:
            if not plain:  # every range line by line: the plain-block path turned off
                patch.setattr(LineParser, "plain_block", lambda self, block: None)
            result = verified(
                Source("(text)", data=text), os.fsencode(base), ARGS, PathPolicy(), 1, tuning=tuning
            )
        assert result.stopped is None
        return [(c.status, c.algorithm, c.detail) for c in result.checked], result.bad_lines, result.bad_count


def test_plain_ranges_give_the_verdicts_of_one_look_per_name_on_a_manifest_mixing_every_kind_of_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = build(tmp_path)
    d0 = tmp_path / "d0"
    odd = b"d1/\xff\xfe not utf-8"  # kept as bytes through the str names of the plain way
    (tmp_path / os.fsdecode(odd)).write_bytes(b"odd")
    (d0 / "empty").write_bytes(b"")
    (d0 / "large").write_bytes(os.urandom(10_000))  # over the 4 KiB buffer set below
    (d0 / "sub").mkdir()
    os.mkfifo(d0 / "fifo")
    (d0 / "to-file").symlink_to("f000")
    (d0 / "to-fifo").symlink_to("fifo")
    (d0 / "dangling").symlink_to("nowhere")
    (d0 / "changed").write_bytes(b"now")
    first = (tmp_path / "d0/f000").read_bytes()
    special = [
        f"{sha(first)}  d0/to-file\n",
        f"{sha(b'')}  d0/to-fifo\n",
        f"{sha(b'')}  d0/dangling\n",
        f"{sha(b'')}  d0/empty\n",
        f"{sha(b'')}  d0/sub\n",
        f"{sha(b'')}  d0/fifo\n",
        f"{sha(b'')}  d0/not-there\n",
        f"{sha(b'before')}  d0/changed\n",  # FAILED
        f"{blake3.blake3((d0 / 'large').read_bytes()).hexdigest()}  d0/large\n",  # a length settled as sha256
        f"{blake3.blake3(first).hexdigest()}  d0/f000\n",  # blake3 under that settled length: OK
        f"{blake3.blake3(b'x').hexdigest()}  d0/f001\n",  # FAILED, blamed on the first candidate
        f"{hashlib.md5(first).hexdigest()} *d0/f000\n",  # binary mark, another length
        f"{sha(first)}  {tmp_path}/d0/f000\n",  # an absolute name
    ]
    plain = plain_lines(tmp_path, names) + sha(b"odd").encode() + b"  " + odd + b"\n"
    text = plain + "".join(special).encode() + plain  # the plain part twice: ranges before and after
    mixed_tail = (
        b"# a comment\n"
        + f"{sha(first)}  d0/f000\r\n".encode()
        + f"SHA256 (d0/f002) = {sha((d0 / 'f002').read_bytes())}\n".encode()
        + f"{sha(first).upper()}  d0/f000\n".encode()
        + b"\n"
        + b"not a checksum line\n"
        + f"\\{sha(b'x')}  d0/back\\\\slash\n".encode()
        + f"{sha(b'x')}  d0/\n".encode()  # a name ending in '/'
    )
    head = b"".join(plain.splitlines(keepends=True)[:30])
    text = head + mixed_tail + text  # one range of odd lines among plain ones
    run = Run(monkeypatch, settled_ns=SETTLED, chunk=4096)

    listed, listed_bad, listed_bad_count = run(text, tmp_path)
    assert len(listed) - run.fallbacks >= len(names)  # a plain copy's worth took the listing's way
    for processes in (1, 2):
        assert run(text, tmp_path, plain=False, processes=processes) == (listed, listed_bad, listed_bad_count)
    assert run(text, tmp_path, processes=2) == (listed, listed_bad, listed_bad_count)

    assert listed[30:35] == [("OK", "sha256", "")] * 3 + [  # the odd lines' entries
        ("MISSING", "", ""),
        ("UNREADABLE", "", "not a regular file: a directory"),
    ]
    start = 30 + 5 + len(names) + 1
    assert listed[start : start + len(special)] == [
        ("OK", "sha256", ""),
        ("UNREADABLE", "", "not a regular file: a FIFO (named pipe)"),
        ("MISSING", "", ""),
        ("OK", "sha256", ""),
        ("UNREADABLE", "", "not a regular file: a directory"),
        ("UNREADABLE", "", "not a regular file: a FIFO (named pipe)"),
        ("MISSING", "", ""),
        ("FAILED", "sha256", ""),
        ("OK", "blake3", ""),
        ("OK", "blake3", ""),
        ("FAILED", "sha256", ""),
        ("OK", "md5", ""),
        ("OK", "sha256", ""),
    ]
    assert Counter(status for status, _, _ in listed) == {
        "OK": 30 + 3 + 2 * (len(names) + 1) + 6,
        "FAILED": 2,
        "MISSING": 3,
        "UNREADABLE": 4,
    }
    assert (listed_bad, listed_bad_count) == ([36], 1)


def test_names_swapped_after_the_listing_are_judged_as_one_look_would_and_nothing_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = build(tmp_path, dirs=1, per_dir=40)
    d0 = tmp_path / "d0"
    (tmp_path / "copy").write_bytes((d0 / "f001").read_bytes())
    text = plain_lines(tmp_path, names)
    real_list_for = dirlook.list_for
    swapped: list[bytes] = []

    def list_then_swap(path: bytes, wanted: int) -> dirlook.ListedDirectory:
        listed = real_list_for(path, wanted)
        assert "f000" in listed.regular  # typed as regular files by the listing, then:
        (d0 / "f000").unlink()
        os.mkfifo(d0 / "f000")  # a FIFO: opened without blocking, refused
        (d0 / "f001").unlink()
        (d0 / "f001").symlink_to(tmp_path / "copy")  # a symlink: followed, as one look follows it
        (d0 / "f002").unlink()  # gone: MISSING
        (d0 / "f003").write_bytes(b"other content")  # rewritten in place: FAILED
        (d0 / "f004").unlink()
        (d0 / "f004").write_bytes(b"another file")  # another inode: FAILED
        swapped.append(path)
        return listed

    monkeypatch.setattr(verify_ranges, "list_for", list_then_swap)
    run = Run(monkeypatch, settled_ns=SETTLED)
    outcome: list[tuple[list[Verdict], list[int], int]] = []
    worker = threading.Thread(target=lambda: outcome.append(run(text, tmp_path)), daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():  # let the blocked open go before failing
        with open(d0 / "f000", "wb"):
            pass
        pytest.fail("the check blocked on a FIFO swapped in after the listing")
    verdicts = outcome[0][0]
    assert len(swapped) == 1
    assert verdicts[:5] == [
        ("UNREADABLE", "", "not a regular file: a FIFO (named pipe)"),
        ("OK", "sha256", ""),
        ("MISSING", "", ""),
        ("FAILED", "sha256", ""),
        ("FAILED", "sha256", ""),
    ]
    assert set(verdicts[5:]) == {("OK", "sha256", "")}


def test_a_fifo_or_device_the_manifest_names_is_never_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = build(tmp_path, dirs=1, per_dir=20)
    d0 = tmp_path / "d0"
    os.mkfifo(d0 / "fifo")
    kinds = ["fifo"]
    if os.geteuid() == 0:  # a copy of /dev/null's node: only root may make one (CI runs as root)
        os.mknod(d0 / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        kinds.append("null")
    opened: list[int] = []

    def writer() -> None:  # blocks until a reader opens the FIFO: if verify opened it, this returns
        with open(d0 / "fifo", "wb"):
            opened.append(1)

    waiting = threading.Thread(target=writer, daemon=True)
    waiting.start()
    text = plain_lines(tmp_path, names) + "".join(f"{sha(b'')}  d0/{kind}\n" for kind in kinds).encode()
    verdicts, _, _ = Run(monkeypatch, settled_ns=SETTLED)(text, tmp_path)
    assert verdicts[len(names) :] == [
        ("UNREADABLE", "", "not a regular file: a FIFO (named pipe)"),
        *([("UNREADABLE", "", "not a regular file: a character device")] if "null" in kinds else []),
    ]
    assert not opened
    fd = os.open(d0 / "fifo", os.O_RDONLY | os.O_NONBLOCK)  # let the writer go
    waiting.join(10)
    os.close(fd)
    assert opened == [1]


def test_files_changed_moments_ago_are_checked_with_a_look_before_and_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Just written, they may be written still: the one fstat after the read cannot tell, check_file can.
    # "Just" is stretched to any age here, so a slow machine cannot let the files settle mid-test.
    names = build(tmp_path, dirs=2, per_dir=20)
    run = Run(monkeypatch, settled_ns=10**18)
    verdicts, _, _ = run(plain_lines(tmp_path, names), tmp_path)
    assert set(verdicts) == {("OK", "sha256", "")}
    assert run.fallbacks == len(names)
    run.tuning["settled_ns"] = SETTLED
    assert run(plain_lines(tmp_path, names), tmp_path)[0] == verdicts
    assert run.fallbacks == 0


def test_a_listing_is_bounded_by_the_names_wanted_and_types_only_regular_files(tmp_path: Path) -> None:
    for i in range(400):
        (tmp_path / f"f{i:03d}").write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to("f000")
    whole = dirlook.list_for(os.fsencode(tmp_path), 400)
    few = dirlook.list_for(os.fsencode(tmp_path), 10)
    try:
        assert set(whole.regular) == {f"f{i:03d}" for i in range(400)}
        assert whole.regular["f007"] == os.stat(tmp_path / "f007").st_ino
        assert whole.dev == os.stat(tmp_path).st_dev
        assert len(few.regular) <= dirlook.LISTING_COST * 10 + 64
    finally:
        whole.close()
        few.close()
    assert dirlook.list_for(os.fsencode(tmp_path / "f000"), 10) is dirlook.NOT_LISTED
    assert dirlook.list_for(os.fsencode(tmp_path / "absent"), 10) is dirlook.NOT_LISTED


def test_only_whole_plain_blocks_take_the_one_pass_parse() -> None:
    digest = sha(b"x")
    parser = LineParser()
    found = parser.plain_block(f"{digest}  a/b\n{digest} *c\n{digest}  /abs/d e\n".encode())
    assert found == [(digest, "a/", "b"), (digest, "", "c"), (digest, "/abs/", "d e")]
    assert parser.reversed_style is False
    refused: list[bytes] = [
        f"{digest}  a\n# comment\n".encode(),
        f"{digest}  a\r\n".encode(),
        f"{digest}  a\n\n".encode(),
        f"{digest.upper()}  a\n".encode(),
        f"{digest}  a".encode(),  # no final newline
        f"{digest}  dir/\n".encode(),
        f"{digest[:-1]}  odd length\n".encode(),
        f"SHA256 (a) = {digest}\n".encode(),
        f"\\{digest}  a\\\\b\n".encode(),
        f"{digest}  {'n' * 1024}\n".encode(),
        f"{digest}  a\0b\n".encode(),
    ]
    for block in refused:
        assert LineParser().plain_block(block) is None, block
    assert LineParser(reversed_style=True).plain_block(f"{digest}  a\n".encode()) is None


def test_more_directories_than_listings_kept_open_are_each_listed_once_and_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = build(tmp_path, dirs=5, per_dir=10)
    by_turns = [names[d * 10 + f] for f in range(10) for d in range(5)]  # d0, d1, … d4, d0, …
    text = plain_lines(tmp_path, by_turns)
    real_list_for = dirlook.list_for
    listed: list[bytes] = []

    def counted(path: bytes, wanted: int) -> dirlook.ListedDirectory:
        listed.append(path)
        return real_list_for(path, wanted)

    monkeypatch.setattr(verify_ranges, "list_for", counted)
    run = Run(monkeypatch, settled_ns=SETTLED, max_listings=2)

    def check() -> list[object]:
        descriptors = open_descriptors()
        verdicts, _, _ = run(text, tmp_path)
        return [
            verdicts,
            [os.fsdecode(path) for path in listed],
            run.fallbacks,
            open_descriptors() - descriptors,
        ]

    verdicts, listed_here, fallbacks, left_open = counted_alone(check)
    assert verdicts == [["OK", "sha256", ""]] * len(names)
    ranges = verify_ranges.ranges_for(len(text), 1)[1]
    assert len(listed_here) <= 5 * ranges and Counter(listed_here).most_common(1)[0][1] <= ranges
    assert 0 < fallbacks < len(names)  # evicted directories' names went one by one
    assert left_open == 0  # every listing closed, the evicted ones too
