"""The hashing engine and manifest formats, against hashlib, blake3 and the real coreutils/b3sum tools."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
import blake3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sysmcp.engine.hashing import ALGORITHM_NAMES, ALGORITHMS, CHUNK, Algorithm, format_line, hash_fd
from sysmcp.engine.hashing import _checksums as checksums
from sysmcp.engine.hashing._checksums import PoolCounters, hash_many
from sysmcp.engine.hashing._manifests import hint_order, parse_manifest
from sysmcp.engine.hashing._verdicts import MISSING_CODE, check_file
from sysmcp.engine.opens import FileSwap, NotRegularFile, open_regular_at

#: Names that break naive manifest code: spaces (inside, leading, trailing, doubled), a newline, a
#: backslash, a CR, a tab (never escaped), a leading star or dash, a BSD line's ") = " inside, UTF-8.
AWKWARD = [
    b"plain",
    b"with space",
    b"new\nline",
    b"back\\slash",
    b"carriage\rreturn",
    b"tab\there",
    b"*star",
    b"-dash",
    b" lead space",
    b"trail space ",
    b"two  spaces",
    b"a) = b",
    "日本.txt".encode(),
]

#: The coreutils (and b3sum) command that checks each algorithm's GNU manifest.
TOOLS = {"md5": "md5sum", "sha1": "sha1sum", "sha256": "sha256sum", "sha512": "sha512sum", "blake2b": "b2sum"}
TAGGING = dict(TOOLS)  # b3sum has no --tag
if shutil.which("b3sum"):
    TOOLS["blake3"] = "b3sum"


def reference(algorithm: str, data: bytes) -> str:
    if algorithm == "blake3":
        return blake3.blake3(data).hexdigest()
    return hashlib.new(algorithm, data).hexdigest()


def digest_of(path: Path, algorithms: list[Algorithm], buffer_size: int = CHUNK) -> dict[str, str]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return hash_fd(fd, algorithms, bytearray(buffer_size)).hexdigests
    finally:
        os.close(fd)


def make_tree(root: Path, names: list[bytes]) -> dict[bytes, bytes]:
    contents = {}
    for i, name in enumerate(names):
        data = f"content {i}\n".encode() * (i + 1)
        with open(os.path.join(os.fsencode(root), name), "wb") as out:
            out.write(data)
        contents[name] = data
    return contents


# -- digests -----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300), buffer_size=st.integers(1, 64))
def test_digests_equal_hashlib_and_blake3_whatever_the_chunk_boundaries(
    tmp_path: Path, data: bytes, buffer_size: int
) -> None:
    target = tmp_path / "f"
    target.write_bytes(data)
    algorithms = [ALGORITHMS[name] for name in ALGORITHM_NAMES]
    got = digest_of(target, algorithms, buffer_size)
    assert got == {name: reference(name, data) for name in ALGORITHM_NAMES}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chunks=st.integers(0, 2),
    delta=st.integers(-2, 2),
    seed=st.integers(0, 2**32),
    name=st.sampled_from(ALGORITHM_NAMES),
)
def test_digests_are_right_around_real_chunk_boundaries(
    tmp_path: Path, chunks: int, delta: int, seed: int, name: str
) -> None:
    size = max(0, chunks * CHUNK + delta)
    data = random.Random(seed).randbytes(size)
    target = tmp_path / "f"
    target.write_bytes(data)
    assert digest_of(target, [ALGORITHMS[name]]) == {name: reference(name, data)}


def test_a_file_that_changes_while_hashed_is_flagged(tmp_path: Path) -> None:
    target = tmp_path / "log"
    target.write_bytes(b"x" * (3 * CHUNK))
    fd = os.open(target, os.O_RDONLY)

    def grow(done: int) -> None:
        if done == CHUNK:
            with target.open("ab") as out:
                out.write(b"appended")

    try:
        digest = hash_fd(fd, [ALGORITHMS["sha256"]], bytearray(CHUNK), grow)
    finally:
        os.close(fd)
    assert digest.changed is not None and "size changed" in digest.changed


# -- opening -----------------------------------------------------------------------------------


def test_special_files_are_refused_before_being_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        for path in (fifo, tmp_path / "sock", Path("/dev/zero"), tmp_path):
            with pytest.raises(NotRegularFile):
                open_regular_at(os.fsencode(path), follow_symlinks=True)


def test_a_name_that_now_points_elsewhere_is_refused(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_bytes(b"1")
    second.write_bytes(b"2")
    looked = os.lstat(first)
    with pytest.raises(FileSwap):  # as if 'first' had been renamed over between the walk and the open
        open_regular_at(os.fsencode(second), follow_symlinks=False, expect=looked)
    link = tmp_path / "link"
    link.symlink_to(first)
    with pytest.raises(FileSwap):  # the walk saw a regular file; a symlink stands there now
        open_regular_at(os.fsencode(link), follow_symlinks=False, expect=looked)


# -- manifests: our lines ----------------------------------------------------------------------


names = st.binary(min_size=1, max_size=40).filter(lambda b: b"\0" not in b and not b.endswith(b"\r"))


@given(name=names, algorithm=st.sampled_from(ALGORITHM_NAMES), style=st.sampled_from(["gnu", "bsd"]))
def test_every_line_we_write_parses_back_to_the_same_name_and_digest(
    name: bytes, algorithm: str, style: str
) -> None:
    chosen = ALGORITHMS[algorithm]
    digest = reference(algorithm, name)
    line = format_line(name, digest, chosen, "bsd" if style == "bsd" else "gnu")
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    parsed = parse_manifest(line, prefer=(algorithm,))
    assert parsed.bad_lines == []
    [entry] = parsed.entries
    assert entry.name == name and entry.digest == digest and entry.candidates[0].name == algorithm


@pytest.mark.parametrize(
    ("algorithm", "style"), [(a, "gnu") for a in sorted(TOOLS)] + [(a, "bsd") for a in sorted(TAGGING)]
)
def test_our_manifest_is_accepted_by_the_real_tool(tmp_path: Path, algorithm: str, style: str) -> None:
    contents = make_tree(tmp_path, AWKWARD)
    chosen = ALGORITHMS[algorithm]
    manifest = b"".join(
        format_line(name, reference(algorithm, data), chosen, "bsd" if style == "bsd" else "gnu")
        for name, data in sorted(contents.items())
    )
    (tmp_path / "SUMS").write_bytes(manifest)
    strict = [] if algorithm == "blake3" else ["--strict"]
    done = subprocess.run(
        [TOOLS[algorithm], "-c", *strict, "SUMS"], cwd=tmp_path, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(b": OK") == len(AWKWARD)


@pytest.mark.parametrize(
    ("algorithm", "tag"), [(a, False) for a in sorted(TOOLS)] + [(a, True) for a in sorted(TAGGING)]
)
def test_the_real_tools_manifests_are_read_by_us(tmp_path: Path, algorithm: str, tag: bool) -> None:
    contents = make_tree(tmp_path, AWKWARD)
    command: list[str | bytes] = [TOOLS[algorithm], *(["--tag"] if tag else []), "--", *sorted(contents)]
    output = subprocess.run(command, cwd=tmp_path, capture_output=True, check=True).stdout
    parsed = parse_manifest(output)
    assert parsed.bad_lines == []
    assert {e.name for e in parsed.entries} == set(contents)
    for entry in parsed.entries:
        data = contents[entry.name]
        assert any(reference(c.name.split("-")[0], data) == entry.digest for c in entry.candidates), entry
        assert algorithm in {c.name for c in entry.candidates}


def test_b2sum_with_a_length_is_read_by_its_tag_and_when_forced(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"data")
    tagged = subprocess.run(
        ["b2sum", "-l", "256", "--tag", "f"], cwd=tmp_path, capture_output=True, check=True
    )
    [entry] = parse_manifest(tagged.stdout).entries
    assert entry.candidates[0].name == "blake2b-256"
    assert entry.digest == hashlib.blake2b(b"data", digest_size=32).hexdigest()
    plain = subprocess.run(["b2sum", "-l", "256", "f"], cwd=tmp_path, capture_output=True, check=True)
    [forced] = parse_manifest(plain.stdout, forced=ALGORITHMS["blake2b"]).entries
    assert forced.candidates[0].name == "blake2b-256"


# -- manifests: sha256sum -c's reading rules ---------------------------------------------------

DIGEST = hashlib.sha256(b"").hexdigest()


def test_comments_blank_lines_and_crlf_are_accepted_and_garbage_is_counted() -> None:
    text = (
        f"# made by hand\n\n{DIGEST}  a\r\n"
        "not a checksum line\n"
        f"{DIGEST[:-1]}  short digest\n"
        f"\\{DIGEST}  bad\\qescape\n"
        f"SHA256 (tagged) = {DIGEST}\n"
        f"SHA256 (wrong length) = {DIGEST}00\n"
        f"{DIGEST} *binary mode\n"
    ).encode()
    parsed = parse_manifest(text)
    assert [e.name for e in parsed.entries] == [b"a", b"tagged", b"binary mode"]
    assert parsed.bad_lines == [4, 5, 6, 8]


def test_openssl_and_bsd_style_lines_are_understood() -> None:
    text = f"SHA2-256(x)= {DIGEST}\nSHA256(y) = {DIGEST}\nMD5 (z) = {hashlib.md5().hexdigest()}\n".encode()
    parsed = parse_manifest(text)
    assert [(e.name, e.candidates[0].name) for e in parsed.entries] == [
        (b"x", "sha256"),
        (b"y", "sha256"),
        (b"z", "md5"),
    ]


def test_a_name_with_parentheses_and_equals_signs_keeps_them() -> None:
    [entry] = parse_manifest(f"SHA256 (a (1) = b) = {DIGEST}\n".encode()).entries
    assert entry.name == b"a (1) = b"


def test_bsd_reversed_lines_are_read_but_not_mixed_with_gnu_lines() -> None:
    reversed_only = parse_manifest(f"{DIGEST} one\n{DIGEST} two\n".encode())
    assert [e.name for e in reversed_only.entries] == [b"one", b"two"]
    mixed = parse_manifest(f"{DIGEST}  one\n{DIGEST} two\n".encode())
    assert [e.name for e in mixed.entries] == [b"one"] and mixed.bad_lines == [2]


def test_a_forced_algorithm_makes_other_lines_improperly_formatted() -> None:
    md5 = hashlib.md5().hexdigest()
    text = f"{DIGEST}  a\n{md5}  b\nMD5 (c) = {md5}\n".encode()
    parsed = parse_manifest(text, forced=ALGORITHMS["sha256"])
    assert [e.name for e in parsed.entries] == [b"a"] and parsed.bad_lines == [2, 3]


def test_ambiguous_lengths_list_every_candidate_in_the_hinted_order() -> None:
    [entry] = parse_manifest(f"{DIGEST}  a\n".encode()).entries
    assert [c.name for c in entry.candidates] == ["sha256", "blake3"]
    [hinted] = parse_manifest(f"{DIGEST}  a\n".encode(), prefer=hint_order("B3SUMS")).entries
    assert [c.name for c in hinted.candidates] == ["blake3", "sha256"]
    assert hint_order("archlinux.SHA512SUMS") == ("sha512",)


# -- many files on the pool --------------------------------------------------------------------


def sha256_of(path: Path, buffer: bytearray, on_chunk: Callable[[int], None]) -> tuple[tuple[Path, str], int]:
    """The pool's work as verify_checksums gives it: one file hashed with the thread's buffer."""
    fd = os.open(path, os.O_RDONLY)
    try:
        digest = hash_fd(fd, (ALGORITHMS["sha256"],), buffer, on_chunk)
    finally:
        os.close(fd)
    return (path, digest.hexdigests["sha256"]), digest.size


def size_of(path: Path) -> int:
    return path.stat().st_size


def test_the_pool_hashes_every_file_exactly_once(tmp_path: Path) -> None:
    paths = []
    for i in range(300):
        path = tmp_path / f"f{i}"
        path.write_bytes(os.urandom(i * 97))
        paths.append(path)
    counters = PoolCounters()
    outcomes = list(hash_many(paths, sha256_of, size_of, cancel=lambda: None, counters=counters, threads=2))
    assert sorted(path for path, _ in outcomes) == sorted(paths)
    for path, hexdigest in outcomes:
        assert hexdigest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert counters.files == 300 and counters.bytes == sum(p.stat().st_size for p in paths)


def test_a_file_that_vanished_after_the_look_is_missing(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.write_bytes(b"x")
    looked = os.stat(gone)
    gone.unlink()
    sha256 = (ALGORITHMS["sha256"],)
    checked = check_file(
        os.fsencode(gone), "00" * 32, sha256, None, {}, bytearray(CHUNK), lambda _: None, looked
    )
    assert checked == (MISSING_CODE, "", 0)


class Cancelled(Exception):
    """Stands in for anyio's cancellation, raised by the caller's cancel."""


@pytest.mark.anyio
async def test_cancelling_stops_the_hashing_threads_within_a_chunk(tmp_path: Path) -> None:
    huge = tmp_path / "huge"
    with huge.open("wb") as out:
        out.truncate(64 << 30)  # a minute of hashing if the threads did not stop
    started = threading.Event()

    counters = PoolCounters()

    def cancel() -> None:
        if counters.bytes > 0:  # the hashing thread is under way: cancel now
            started.set()
            raise Cancelled()

    def run() -> None:
        for _ in hash_many([huge], sha256_of, size_of, cancel=cancel, counters=counters):
            pass

    with anyio.fail_after(10), pytest.raises(Cancelled):
        await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
    assert started.is_set()
    assert counters.bytes < 8 << 30  # stopped early, not after the whole file


def test_kernel_files_that_report_size_zero_are_not_reported_as_changed() -> None:
    fd = os.open("/proc/version", os.O_RDONLY)
    try:
        digest = hash_fd(fd, [ALGORITHMS["sha256"]], bytearray(CHUNK))
    finally:
        os.close(fd)
    assert digest.size > 0 and digest.changed is None
    assert digest.hexdigests["sha256"] == hashlib.sha256(Path("/proc/version").read_bytes()).hexdigest()


def test_a_file_that_yields_far_more_than_its_size_stops_with_kept_growing(tmp_path: Path) -> None:
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)  # size 0, and gigabytes to read
    try:
        with pytest.raises(checksums.KeptGrowing, match="kept growing"):
            checksums.hash_fd(fd, (checksums.ALGORITHMS["sha256"],), bytearray(1 << 16), allowance=1 << 20)
    finally:
        os.close(fd)
    steady = tmp_path / "steady"
    steady.write_bytes(b"x" * (3 << 20))  # bigger than the allowance, but not growing: hashed whole
    fd = os.open(steady, os.O_RDONLY)
    try:
        digest = checksums.hash_fd(
            fd, (checksums.ALGORITHMS["sha256"],), bytearray(1 << 16), allowance=1 << 20
        )
    finally:
        os.close(fd)
    assert digest.size == 3 << 20 and digest.changed is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform: nothing forked to deadlock")
def test_a_child_forked_after_blake3s_pool_started_still_hashes_a_big_file() -> None:
    data = bytes(16 << 20)  # well past blake3's multithreaded size
    parent = checksums.threaded_blake3()
    parent.update(data)  # rayon's global pool now runs in this process
    expected = parent.hexdigest()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.alarm(30)  # a hung update ends the child by SIGALRM: the test then fails, never hangs
        child = checksums.threaded_blake3()
        child.update(data)
        os._exit(0 if child.hexdigest() == expected else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_file_below_a_directory_swapped_since_its_level_was_closed_is_unreadable_not_the_other_ones(
    tmp_path: Path,
) -> None:
    """Confined verification keeps the deepest levels open (``Parents``) and reaches a closed one again by
    name: a directory renamed in there since is another tree, whose file would be judged under the
    manifest's path. It is unreadable, with why, and the check of it can be asked again."""
    from sysmcp.engine.hashing._verdicts import UNREADABLE_CODE, look
    from sysmcp.engine.opens import Parents

    a = tmp_path / "r" / "a"
    deep = a / "b" / "c" / "d" / "deep"
    deep.parent.mkdir(parents=True)
    deep.write_bytes(b"first")
    (a / "shallow").write_bytes(b"first")
    with Parents(kept=2) as parents:
        assert isinstance(look(os.fsencode(deep), parents), os.stat_result)
        a.rename(a.with_name("a-before"))
        a.mkdir()
        (a / "shallow").write_bytes(b"another")
        found = look(os.fsencode(a / "shallow"), parents)
        assert not isinstance(found, os.stat_result), "the other directory's file was looked at"
        code, detail, _ = found
        assert code == UNREADABLE_CODE and "replaced" in detail
