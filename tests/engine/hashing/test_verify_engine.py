"""The verify engine on its own: a typed request in, a typed result and progress out, engine
errors (never the model's words) out of it, and the words the tool gives those errors."""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import blake3
import pytest

from sysmcp.engine.calls import Progress, never_cancelled, no_progress
from sysmcp.engine.faults import EngineError, NotFound
from sysmcp.engine.hashing import (
    ALGORITHMS,
    Confine,
    NoEntries,
    NotAManifest,
    Source,
    Verification,
    VerifyRequest,
)
from sysmcp.engine.hashing import _verify as verify_engine
from sysmcp.engine.hashing import verify as engine_verify
from sysmcp.engine.hashing._manifests import LineParser
from sysmcp.engine.hashing._verify_ranges import (
    Part,
    RangeProgress,
    RangeWork,
    check_lines,
    check_plain_block,
)
from sysmcp.engine.hashing._verify_request import Tuning
from sysmcp.engine.opens import KEPT_LEVELS
from sysmcp.engine.paths import PathPolicy
from sysmcp.engine.walk import ScanStopped
from sysmcp.protocol.failures import ToolError
from sysmcp.tools import verify_checksums
from sysmcp.tools.errors import words
from tests.deep_trees import nest, put, under_limit

ENGINE = ("_verify.py", "_verify_ranges.py", "_verify_request.py", "_verdicts.py", "_manifests.py")
EXPECTED = "Expected lines like '<hex digest>  <name>' or 'SHA256 (<name>) = <hex digest>'."


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree(root: Path) -> bytes:
    """Three files listed right, one listed with a wrong digest, one listed but missing: the manifest."""
    lines = []
    for index in range(3):
        data = f"file {index}\n".encode()
        (root / f"f{index}").write_bytes(data)
        lines.append(f"{sha(data)}  f{index}\n")
    (root / "changed").write_bytes(b"now\n")
    lines.append(f"{sha(b'then')}  changed\n")
    lines.append(f"{sha(b'gone')}  gone\n")
    return "".join(lines).encode()


def request(root: Path, text: bytes, confine: Confine | None = None, **tuning: Any) -> VerifyRequest:
    return VerifyRequest(
        Source("(text)", data=text), os.fsencode(root), threads=1, confine=confine, tuning=Tuning(**tuning)
    )


def verify(request: VerifyRequest, progress: Progress = no_progress) -> Verification:
    return engine_verify(request, progress, never_cancelled)


def statuses(result: Verification) -> list[str]:
    return [checked.status for checked in result.checked]


def test_the_engine_modules_import_nothing_from_the_layers_above() -> None:
    fs = Path(verify_engine.__file__).parent
    above = ("sysmcp.tools", "sysmcp.protocol", "sysmcp.fleet", "sysmcp.server")
    for name in ENGINE:
        tree_ = ast.parse((fs / name).read_text())
        imported = [node.module or "" for node in ast.walk(tree_) if isinstance(node, ast.ImportFrom)] + [
            alias.name for node in ast.walk(tree_) if isinstance(node, ast.Import) for alias in node.names
        ]
        assert not [module for module in imported if module.startswith(above)], name


def test_a_short_manifest_gives_typed_verdicts_and_progress_to_its_total_of_entries_and_bytes(
    tmp_path: Path,
) -> None:
    text = tree(tmp_path)
    seen: list[tuple[float, float | None]] = []
    result = verify(request(tmp_path, text), lambda done, total: seen.append((done, total)))
    assert statuses(result) == ["OK", "OK", "OK", "FAILED", "MISSING"]
    assert result.stopped is None and not result.cut
    sizes = sum(len(f"file {i}\n") for i in range(3)) + len(b"now\n")
    assert seen[0] == (0, 5 + sizes) and seen[-1] == (5 + sizes, 5 + sizes)
    assert [name for name, _ in (result.listed or {})["MISSING"]] == [b"gone"]


def test_a_short_manifests_files_are_judged_as_they_are_read_not_as_they_were_looked_at(
    tmp_path: Path,
) -> None:
    """Every entry of a short manifest is looked at before any is hashed; a file edited or touched in
    between is judged by what is read (FAILED, or OK), not called UNREADABLE for having changed since
    that first look. The edit is made when the first progress report (0 of the total) comes."""
    text = tree(tmp_path)
    edited, touched = tmp_path / "f0", tmp_path / "f1"

    def edit_after_the_look(done: float, total: float | None) -> None:
        if done == 0:
            edited.write_bytes(b"FILE 0\n")  # the same size, other bytes
            os.utime(touched, ns=(0, 0))  # the same bytes, another modification time

    result = verify(request(tmp_path, text), edit_after_the_look)
    assert statuses(result) == ["FAILED", "OK", "OK", "FAILED", "MISSING"]


@pytest.mark.parametrize("plain", [True, False], ids=["plain-block", "line-by-line"])
def test_a_long_manifest_checked_in_ranges_reports_the_manifest_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plain: bool
) -> None:
    if not plain:
        monkeypatch.setattr(LineParser, "plain_block", lambda self, block: None)
    text = tree(tmp_path)
    seen: list[tuple[float, float | None]] = []
    ranges = request(tmp_path, text, parallel_from=0, processes=1)
    result = verify(ranges, lambda done, total: seen.append((done, total)))
    assert statuses(result) == ["OK", "OK", "OK", "FAILED", "MISSING"]
    assert seen[0] == (0, len(text))
    assert all(total == len(text) for _, total in seen)


@pytest.mark.parametrize("parallel_from", [0, 1 << 30], ids=["ranges", "short"])
def test_a_confined_check_marks_what_the_confinement_refuses_outside_the_roots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parallel_from: int
) -> None:
    text = tree(tmp_path)

    def confine(path: bytes) -> bytes | None:
        return None if path.endswith(b"f1") else path

    result = verify(request(tmp_path, text, confine=confine, parallel_from=parallel_from, processes=1))
    assert statuses(result) == ["OK", "UNREADABLE", "OK", "FAILED", "MISSING"]
    assert result.checked[1].detail == "outside the allowed roots"


def test_the_engine_raises_its_own_errors_and_the_tool_words_them(tmp_path: Path) -> None:
    junk = b"not a checksum line\n"
    with pytest.raises(NoEntries) as no_entries:
        verify(request(tmp_path, junk))
    assert not isinstance(no_entries.value, ToolError)
    assert words(no_entries.value) == (
        f"(text): no properly formatted checksum lines found (1 improperly formatted). {EXPECTED}"
    )
    with pytest.raises(NotAManifest) as not_a_manifest:
        verify(request(tmp_path, junk * 100_001))
    assert words(not_a_manifest.value) == (
        f"(text): more than 100,000 improperly formatted lines, so this does not look like a checksum "
        f"manifest. {EXPECTED}"
    )
    missing = tmp_path / "SHA256SUMS"
    source = Source(str(missing), path=os.fsencode(missing))
    with pytest.raises(NotFound) as not_found:
        verify(VerifyRequest(source, os.fsencode(tmp_path)))
    assert isinstance(not_found.value, EngineError)
    assert words(not_found.value) == f"No such manifest file: {missing}"


def work_stopping_after(entries: int, tmp_path: Path) -> RangeWork:
    calls = 0

    def own() -> None:
        nonlocal calls
        calls += 1
        if calls > entries:
            raise ScanStopped("stopped for the test")

    return RangeWork(LineParser(), os.fsencode(tmp_path) + b"/", own, RangeProgress(), None, Tuning())


def test_a_plain_block_returns_its_part_and_at_a_stop_the_entries_done(tmp_path: Path) -> None:
    text = tree(tmp_path)
    found = LineParser().plain_block(text)
    assert found is not None
    whole = check_plain_block(7, found, len(text), work_stopping_after(100, tmp_path))
    assert isinstance(whole, Part) and whole.complete and whole.stopped is None
    assert (whole.task, whole.lines, len(whole.codes)) == (7, 5, 5)
    assert whole.hashed == sum(len(f"file {i}\n") for i in range(3)) + len(b"now\n")
    cut = check_plain_block(7, found, len(text), work_stopping_after(2, tmp_path))
    assert not cut.complete and cut.stopped == "stopped for the test"
    assert cut.lines == len(cut.codes) == 2 and cut.codes == whole.codes[:2]
    assert Part(*cut.wire()) == cut


def test_lines_one_by_one_return_their_part_with_the_bad_lines(tmp_path: Path) -> None:
    text = b"# a comment\n" + tree(tmp_path) + b"junk\n"
    work = work_stopping_after(100, tmp_path)
    part = check_lines(0, text, work)
    assert part.complete and part.lines == 7 and len(part.codes) == 5
    assert (part.bad, part.bad_count) == ([7], 1)
    assert work.tally.files == 5 and work.tally.read == len(text)


def test_the_tool_builds_the_request_from_its_arguments(tmp_path: Path) -> None:
    args = {
        "algorithm": "sha256",
        "report_new": True,
        "exclude": ["*.tmp"],
        "one_file_system": False,
        "max_listed": 3,
    }
    built = verify_checksums.verify_request(
        Source("(text)", data=tree(tmp_path)), os.fsencode(tmp_path), args, PathPolicy(), 2
    )
    assert built.algorithm == ALGORITHMS["sha256"] and built.report_new and built.max_listed == 3
    assert built.walk.exclude == ("*.tmp",) and built.walk.one_file_system is False
    assert built.threads == 2 and built.confine is None and built.timeout_s == math.inf
    junk = verify_checksums.verify_request(
        Source("(text)", data=b"x\n" * 100_001), os.fsencode(tmp_path), args, PathPolicy(), 1
    )
    with pytest.raises(NotAManifest) as refused:
        verify(junk)
    assert "does not look like a checksum manifest" in words(refused.value)


def test_a_deadline_during_the_walk_for_new_files_is_said_in_the_tools_words(tmp_path: Path) -> None:
    text = tree(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "new").write_bytes(b"new\n")
    now = [0.0]

    def progress(done: float, total: float | None) -> None:
        if done == total:  # every entry checked: the deadline passes before the walk
            now[0] = 10.0

    checked = VerifyRequest(
        Source("(text)", data=text),
        os.fsencode(tmp_path),
        report_new=True,
        threads=1,
        timeout_s=5.0,
        clock=lambda: now[0],
    )
    result = verify(checked, progress)
    assert statuses(result) == ["OK", "OK", "OK", "FAILED", "MISSING"]
    assert (result.stopped, result.new_cut) == ("time budget of 5 s reached", True)

    class Keeper:
        def keep(self, name: str, text: str, **_: object) -> str:
            return "not kept in this test"

    args = {"max_listed": 50}
    output = verify_checksums.answer(result, "(text)", str(tmp_path), args, Keeper())  # type: ignore[arg-type]
    reason = "time budget of 5 s reached while looking for new files (the list of new files may be short)"
    assert output.structured["stopped_reason"] == reason and output.structured["complete"] is False
    assert output.text.startswith(f"PARTIAL RESULT: checking stopped early ({reason}); 0 of 5 entries")


@pytest.mark.parametrize("parallel_from", [0, 1 << 30], ids=["ranges", "short"])
def test_a_directory_swapped_for_a_symlink_after_the_roots_check_is_not_followed_out_of_the_roots(
    tmp_path: Path, parallel_from: int
) -> None:
    """The check passes ``r/d/f`` (inside), then ``d`` becomes a symlink to ``outside``: the file of
    that name outside is never looked at nor hashed, whatever its digest, and the answer says why."""
    root, outside = tmp_path / "r", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (root / "d" / "f").write_bytes(b"inside\n")
    (outside / "f").write_bytes(b"secret\n")
    roots_check = verify_checksums.confine_to(PathPolicy([root]))
    assert roots_check is not None

    def check_then_swap(path: bytes) -> bytes | None:
        """The roots check, then what an attacker does before the open (once: the first entry's)."""
        inside = roots_check(path)
        if not (root / "d").is_symlink():
            (root / "d").rename(root / "moved")
            (root / "d").symlink_to(outside)
        return inside

    secret = (outside / "f").read_bytes()
    text = f"{sha(secret)}  d/f\n".encode()
    result = verify(request(root, text, confine=check_then_swap, parallel_from=parallel_from, processes=1))
    assert statuses(result) == ["UNREADABLE"]
    assert result.checked[0].detail == "refusing to follow a symbolic link"
    assert result.bytes_hashed == 0


def test_entries_in_directories_side_by_side_are_each_reached_under_confinement(tmp_path: Path) -> None:
    """The kept parent directories follow the manifest down, across and back up the tree."""
    names = ["top", "a/b/f", "a/b/g", "a/c/f", "a/f", "e/f", "a/b/f", "top"]
    for name in set(names):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(name.encode())
    text = "".join(f"{sha(name.encode())}  {name}\n" for name in names).encode()
    confine = verify_checksums.confine_to(PathPolicy([tmp_path]))
    for parallel_from in (0, 1 << 30):
        result = verify(request(tmp_path, text, confine=confine, parallel_from=parallel_from, processes=1))
        assert statuses(result) == ["OK"] * len(names)


#: Names no file on Linux can have, as sha256sum -c reads them (each "File name too long", the others checked).
TOO_LONG_NAMES = [
    b"x" * 256,  # a component past NAME_MAX
    b"d/" * 2100 + b"f",  # the name past PATH_MAX
    b"/" + b"y" * 5000,  # an absolute one
    b"z/" * 2045 + b"w",  # short enough itself, past PATH_MAX under the base
]


@pytest.mark.parametrize("confined", [False, True], ids=["open", "confined"])
@pytest.mark.parametrize("parallel_from", [0, 1 << 30], ids=["ranges", "short"])
def test_names_too_long_for_the_system_are_each_said_so_and_the_other_entries_are_checked(
    tmp_path: Path, parallel_from: int, confined: bool
) -> None:
    """Not 'improperly formatted' (sha256sum -c reads the line), not MISSING, not outside the roots."""
    (tmp_path / "a").write_bytes(b"abc")
    names = [b"a", *TOO_LONG_NAMES, b"a"]
    text = b"".join(sha(b"abc").encode() + b"  " + name + b"\n" for name in names)
    confine = verify_checksums.confine_to(PathPolicy([tmp_path])) if confined else None
    result = verify(request(tmp_path, text, confine=confine, parallel_from=parallel_from, processes=1))
    assert (result.bad_count, statuses(result)) == (0, ["OK", *["UNREADABLE"] * 4, "OK"])
    assert {result.checked[index].detail for index in range(1, 5)} == {"name too long for this system"}
    assert list(result.names()) == names


@pytest.mark.parametrize("parallel_from", [0, 1 << 30], ids=["ranges", "short"])
def test_a_name_ending_in_cr_as_b3sum_writes_it_unescaped_is_found_when_no_name_without_it_is(
    tmp_path: Path, parallel_from: int
) -> None:
    """b3sum escapes no CR: 'z\\r' is written as is, and b3sum -c finds it. A CRLF line's CR is still the
    line's (sha256sum -c): the name with it is looked for only where none without it exists."""
    (tmp_path / "z\r").write_bytes(b"zz")
    (tmp_path / "a").write_bytes(b"aa")
    (tmp_path / "a\r").write_bytes(b"other")
    lines = [
        f"{blake3.blake3(b'zz').hexdigest()}  z\r\n",
        f"{sha(b'aa')}  a\r\n",
        f"{sha(b'gone')}  gone\r\n",
    ]
    text = "".join(lines).encode()
    for confine in (None, verify_checksums.confine_to(PathPolicy([tmp_path]))):
        result = verify(request(tmp_path, text, confine=confine, parallel_from=parallel_from, processes=1))
        assert statuses(result) == ["OK", "OK", "MISSING"]
        assert [checked.algorithm for checked in result.checked][:2] == ["blake3", "sha256"]


def test_a_line_of_megabytes_is_judged_by_its_start_and_never_held_whole(tmp_path: Path) -> None:
    """A disk image given as the manifest is one line of a GiB: it was read whole into memory (600 MB
    held for a 300 MB line, 48 s), in the range that owns it and again for the names. Its first
    MAX_LINE bytes say what it is, in either way of checking."""
    from sysmcp.engine.hashing._manifests import MAX_LINE, ManifestBytes

    (tmp_path / "a").write_bytes(b"abc")
    long_name = b"/x" * (4 << 20)  # 8 MiB
    text = f"{sha(b'abc')}  a\n".encode() + b"0" * 64 + b"  " + long_name + b"\n" + b"j" * (8 << 20)
    reader = ManifestBytes("(text)", data=text)
    assert MAX_LINE < len(reader.owned(0, 4096)) <= 4096 + MAX_LINE + 1
    for parallel_from in (0, 1 << 30):
        result = verify(request(tmp_path, text, parallel_from=parallel_from, processes=1))
        assert (statuses(result), result.bad_lines) == (["OK", "UNREADABLE"], [3])
        assert [len(name) for name in result.names()] == [1, MAX_LINE - 66]


#: Names the kernel does not follow to a regular file where a path's lexical resolution would: a '/'
#: or '.' after a file's name, '..' after a name that is no directory (sha256sum -c: "Not a directory",
#: "No such file or directory"); and the same ways through directories, which do reach the file.
THROUGH_NAMES = {
    "f/": "MISSING",
    "f/.": "MISSING",
    "f/..": "MISSING",
    "f/../f": "MISSING",
    "link/": "MISSING",
    "gone/../f": "MISSING",
    "d/gone/../../f": "MISSING",
    "d/../f": "OK",
    "./d/./../f": "OK",
    "d/": "UNREADABLE",
    "d/..": "UNREADABLE",
}


@pytest.mark.parametrize("confined", [False, True], ids=["open", "confined"])
@pytest.mark.parametrize("parallel_from", [0, 1 << 30], ids=["ranges", "short"])
def test_a_name_the_kernel_cannot_follow_is_not_found_under_the_roots_either(
    tmp_path: Path, parallel_from: int, confined: bool
) -> None:
    """Confinement resolves a name to check it is inside the roots; it must not find a file the kernel
    (and sha256sum -c) would not, so an --root answer is the answer without it."""
    (tmp_path / "f").write_bytes(b"abc")
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to("f")
    text = "".join(f"{sha(b'abc')}  {name}\n" for name in THROUGH_NAMES).encode()
    confine = verify_checksums.confine_to(PathPolicy([tmp_path])) if confined else None
    result = verify(request(tmp_path, text, confine=confine, parallel_from=parallel_from, processes=1))
    assert dict(zip(THROUGH_NAMES, statuses(result), strict=True)) == THROUGH_NAMES


@pytest.mark.parametrize("parallel_from", [0, 1 << 30], ids=["ranges", "short"])
def test_a_name_that_keeps_climbing_above_the_roots_is_said_so_not_followed_at_length(
    tmp_path: Path, parallel_from: int
) -> None:
    """Each '..' above the roots before any name inside them costs a resolution of the whole name: a
    name of hundreds is refused at the seventeenth, the others checked."""
    (tmp_path / "f").write_bytes(b"abc")
    top = tmp_path.parent  # an ancestor of the root, gone into and back out of
    names = [
        f"{top.parent}/" + f"{top.name}/../" * climbs + f"{top.name}/{tmp_path.name}/f" for climbs in (17, 16)
    ]
    text = "".join(f"{sha(b'abc')}  {name}\n" for name in names).encode()
    confine = verify_checksums.confine_to(PathPolicy([tmp_path]))
    result = verify(request(tmp_path, text, confine=confine, parallel_from=parallel_from, processes=1))
    assert statuses(result) == ["UNREADABLE", "OK"]
    assert result.checked[0].detail == "too many '..' above the allowed roots to follow"


@pytest.mark.parametrize("parallel_from", [1 << 30, 0], ids=["short", "ranges"])
def test_no_descriptor_left_stops_the_check_with_the_rest_not_checked_never_an_unreadable_verdict(
    deep_path: Path, parallel_from: int
) -> None:
    """The process's limit of open files met on the way to an entry (its directories kept open under
    confinement, a low ``ulimit -n``) says nothing of the file: the check stops there, as at its deadline."""
    levels = nest(deep_path, 120)
    names = [f"{levels[level]}/f" for level in (0, 119)]  # the first reachable, the second too deep
    for name in names:
        put(deep_path, name, name.encode())
    text = "".join(f"{sha(name.encode())}  {name}\n" for name in names).encode()
    confine = verify_checksums.confine_to(PathPolicy([deep_path]))
    spare = os.dup(0)
    os.close(spare)
    limit = spare + KEPT_LEVELS  # room for the shallow entry's directories, not for all the levels kept

    def check() -> str:
        result = verify(request(deep_path, text, confine=confine, parallel_from=parallel_from, processes=1))
        return json.dumps([statuses(result), result.stopped])

    found, stopped = json.loads(under_limit(check, limit))
    assert stopped is not None and "out of file descriptors" in stopped
    assert "UNREADABLE" not in found and found[-1] == "NOT_CHECKED"
