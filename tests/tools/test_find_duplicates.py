"""find_duplicates against an independent truth (full SHA-256 of every file), and its sieves' thrift."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections import defaultdict
from pathlib import Path

import blake3
import pytest

from sysmcp.engine.duplicates import DuplicatesRequest, Search, find_duplicates
from sysmcp.engine.duplicates._sieves import SMALL
from sysmcp.engine.paths import in_json
from sysmcp.engine.walk import WalkOptions
from sysmcp.protocol.context import Meter
from sysmcp.tools.find_duplicates import answer_of, full_list, render
from sysmcp.tools.typed import to_json


def words(shown: str, found: Search, top_n: int) -> tuple[str, dict, str | None]:  # type: ignore[type-arg]
    """The answer's text, structured content, and full list when the text cut any group or path."""
    answer = answer_of(shown, found, top_n)
    cut = answer.groups_not_shown or any(g.paths_not_shown for g in answer.groups)
    structured = in_json(to_json(answer))  # as ToolOutput.typed gives it
    return render(answer, found.skipped.named), structured, full_list(answer, found) if cut else None  # type: ignore[return-value]


def search(
    root: Path, min_size: int = 1, timeout_s: float = 60, **kwargs: object
) -> tuple[str, dict, str | None]:  # type: ignore[type-arg]
    request = DuplicatesRequest(os.fsencode(root), WalkOptions(), min_size=min_size, timeout_s=timeout_s)
    return words(str(root), find_duplicates(request, **kwargs), 50)  # type: ignore[arg-type]


def truth(root: Path, min_size: int = 1) -> set[frozenset[tuple[int, int]]]:
    """Groups of two or more inodes with equal content, found by hashing every file in full."""
    by_digest: dict[str, dict[tuple[int, int], str]] = defaultdict(dict)
    for directory, _, names in os.walk(root):
        for name in sorted(names):
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if not os.path.isfile(path) or os.path.islink(path) or st.st_size < min_size:
                continue
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            by_digest[digest].setdefault((st.st_dev, st.st_ino), path)
    return {frozenset(group) for group in by_digest.values() if len(group) > 1}


def inode(path: str) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_dev, st.st_ino


def found(result: dict) -> set[frozenset[tuple[int, int]]]:  # type: ignore[type-arg]
    """The reported groups as inodes: which of several hard-linked names is shown is not specified."""
    return {frozenset(inode(p) for p in group["paths"]) for group in result["groups"]}


def build(root: Path) -> None:
    """Copies of several sizes, near-misses that share size, head and tail, hard links and empties."""
    (root / "a" / "b").mkdir(parents=True)
    (root / "c").mkdir()
    small = b"small content\n" * 10
    for where in ("a/s1", "a/b/s2", "c/s3"):
        (root / where).write_bytes(small)
    os.link(root / "a" / "s1", root / "c" / "s1-link")  # another name, not another copy
    big = bytearray(os.urandom(SMALL * 4))
    (root / "a" / "big1").write_bytes(big)
    (root / "c" / "big2").write_bytes(big)
    big[len(big) // 2] ^= 0xFF  # same size, head and tail: only a full hash tells them apart
    (root / "a" / "b" / "near-miss").write_bytes(big)
    (root / "unique").write_bytes(b"u" * 1234)
    (root / "same-size-1").write_bytes(b"x" * 500)
    (root / "same-size-2").write_bytes(b"y" * 500)
    (root / "empty1").write_bytes(b"")
    (root / "empty2").write_bytes(b"")
    (root / "loop").symlink_to(".")
    (root / "linked-big").symlink_to(root / "a" / "big1")


def test_groups_equal_an_independent_full_hash_of_every_file(tmp_path: Path) -> None:
    build(tmp_path)
    _, result, _ = search(tmp_path)
    assert found(result) == truth(tmp_path)
    assert result["complete"] is True and result["groups_found"] == 2


def test_largest_reclaimable_first_with_the_bytes_it_would_free(tmp_path: Path) -> None:
    build(tmp_path)
    text, result, _ = search(tmp_path)
    first, second = result["groups"]
    assert first["size_bytes"] == SMALL * 4 and first["copies"] == 2
    assert first["reclaimable_bytes"] == os.lstat(tmp_path / "c" / "big2").st_blocks * 512
    assert second["copies"] == 3
    assert result["reclaimable_bytes"] == first["reclaimable_bytes"] + second["reclaimable_bytes"]
    assert first["blake3"] == blake3.blake3((tmp_path / "a" / "big1").read_bytes()).hexdigest()
    assert "Nothing was deleted" in text


def test_hard_links_are_not_duplicates(tmp_path: Path) -> None:
    (tmp_path / "one").write_bytes(b"same inode")
    os.link(tmp_path / "one", tmp_path / "two")
    os.link(tmp_path / "one", tmp_path / "three")
    _, result, _ = search(tmp_path)
    assert result["groups"] == [] and result["hard_links_ignored"] == 2


def test_files_with_unique_sizes_are_never_opened(tmp_path: Path) -> None:
    for i in range(1, 200):
        (tmp_path / f"f{i}").write_bytes(b"z" * i)
    _, result, _ = search(tmp_path)
    assert result["files_scanned"] == 199
    assert result["files_read"] == 0 and result["bytes_read"] == 0


def test_large_files_that_differ_in_their_head_are_never_read_in_full(tmp_path: Path) -> None:
    size = SMALL * 16
    for i in range(4):
        (tmp_path / f"f{i}").write_bytes(bytes([i]) * size)
    _, result, _ = search(tmp_path)
    assert result["groups"] == []
    assert result["files_read"] == 4
    assert result["bytes_read"] == 4 * 2 * 4096  # head and tail only


def test_min_size_and_empty_files(tmp_path: Path) -> None:
    build(tmp_path)
    _, everything, _ = search(tmp_path, min_size=1)
    assert not any(os.path.basename(p).startswith("empty") for g in everything["groups"] for p in g["paths"])
    _, big_only, _ = search(tmp_path, min_size=SMALL)
    assert found(big_only) == truth(tmp_path, min_size=SMALL)
    assert len(big_only["groups"]) == 1


def test_a_spent_budget_gives_a_partial_result_clearly_marked(tmp_path: Path) -> None:
    build(tmp_path)
    ticks = itertools.count()
    text, result, _ = search(tmp_path, timeout_s=10, clock=lambda: next(ticks) * 1.0)
    assert result["complete"] is False
    assert text.startswith("PARTIAL RESULT")
    assert "time budget" in result["stopped_reason"]


def test_many_groups_are_cut_and_the_full_list_is_kept_for_a_resource(tmp_path: Path) -> None:
    for i in range(60):
        for copy in range(2):
            (tmp_path / f"g{i}-{copy}").write_bytes(b"%d" % i * (i + 1))
    text, result, full = search(tmp_path)
    assert result["groups_found"] == 60 and len(result["groups"]) == 50
    assert result["groups_not_shown"] == 10 and "… and 10 more groups not shown" in text
    assert full is not None and full.count("copies x") == 60


def test_names_with_newlines_and_invalid_utf8_are_shown_escaped(tmp_path: Path) -> None:
    (tmp_path / "new\nline").write_bytes(b"dup")
    (tmp_path / os.fsdecode(b"bad-\xff")).write_bytes(b"dup")
    text, result, _ = search(tmp_path)
    paths = {p for group in result["groups"] for p in group["paths"]}
    assert paths == {f"{tmp_path}/new\nline", f"{tmp_path}/bad-\\xff"}
    assert "new\\nline" in text and "bad-\\377" in text  # ls -b


def test_cancellation_is_checked_between_files_of_one_size(tmp_path: Path) -> None:
    for i in range(30):  # one size, different heads: only the head-and-tail sampling reads them
        (tmp_path / f"f{i}").write_bytes(bytes([i]) * (SMALL + 1))

    class Cancelled(Exception):
        pass

    class CancelAfter(Meter):
        """A meter whose cancel raises once the comparison has opened a few files."""

        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def cancel(self) -> None:  # type: ignore[override]
            if self.total is not None:
                self.calls += 1
                if self.calls > 3:
                    raise Cancelled

    meter = CancelAfter()
    ticks = itertools.count()  # 10 ms per look at the clock: every checkpoint asks about cancellation
    with pytest.raises(Cancelled):
        find_duplicates(
            DuplicatesRequest(os.fsencode(tmp_path), WalkOptions(), min_size=1, timeout_s=60),
            meter.report,
            meter.cancel,
            clock=lambda: next(ticks) * 0.01,
        )
    assert meter.done < 30 + 30  # stopped before reading every file


def test_files_swapped_after_the_walk_are_never_followed_nor_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between listing and reading, a FIFO, a symlink and a directory-symlink take the copies' places."""
    from sysmcp.engine.duplicates import _duplicates as module
    from sysmcp.engine.duplicates._sieves import gather_candidates as gather

    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "sub").mkdir(parents=True)
    (outside / "sub").mkdir(parents=True)
    for where in ("fifo", "symlink", "sub/inside", "kept"):
        (tree / where).write_bytes(b"same content")
    (outside / "sub" / "inside").write_bytes(b"same content")
    (outside / "target").write_bytes(b"same content")

    def swap_then_gather(*args: object) -> int:
        links = gather(*args)  # type: ignore[arg-type]
        (tree / "fifo").unlink()
        os.mkfifo(tree / "fifo")  # opening it for reading would block without O_NONBLOCK
        (tree / "symlink").unlink()
        (tree / "symlink").symlink_to(outside / "target")
        os.rename(tree / "sub", tmp_path / "old-sub")
        (tree / "sub").symlink_to(outside / "sub")
        return links

    monkeypatch.setattr(module, "gather_candidates", swap_then_gather)
    result = find_duplicates(DuplicatesRequest(os.fsencode(tree), WalkOptions(), processes=1))
    skipped = result.skipped
    assert result.files_scanned == 4 and result.groups == []  # "kept" alone is left
    assert skipped.as_dict() == {"changed": 3}
    assert result.files_read == 1


def test_a_root_that_cannot_be_searched_is_an_engine_error_not_an_os_error(tmp_path: Path) -> None:
    """The engine says what failed in the system's words; the tool layer alone words it for the model."""
    from sysmcp.engine.duplicates._duplicates import engine_error
    from sysmcp.engine.faults import NotFound, PermissionRefused, Unavailable

    with pytest.raises(NotFound) as missing:
        find_duplicates(DuplicatesRequest(os.fsencode(tmp_path / "gone"), processes=1))
    assert missing.value.detail == "No such file or directory"
    assert not isinstance(missing.value, OSError)
    denied = engine_error(PermissionError(13, "Permission denied"))
    assert isinstance(denied, PermissionRefused) and denied.detail == "Permission denied"
    assert isinstance(engine_error(OSError(5, "Input/output error")), Unavailable)


def test_one_hard_link_and_one_group_are_said_in_the_singular() -> None:
    """Once '1 hard-linked names … were not treated as copies' and '# find_duplicates /x: 1 groups'."""
    from sysmcp.engine.duplicates import Candidate
    from sysmcp.engine.duplicates._duplicates import Group

    copies = tuple(Candidate(f"f{i}", 1, i, 4096) for i in range(7))  # more than are shown inline
    found = Search(groups=[Group(4000, "0" * 64, copies)], files_scanned=8, hard_links=1)
    text, structured, full = words("/x", found, 10)
    assert structured["hard_links_ignored"] == 1 and structured["groups"][0]["paths_not_shown"] == 2
    assert "1 hard-linked name of files already counted was not treated as a copy" in text.splitlines()
    assert "     … and 2 more copies not shown" in text.splitlines()
    assert full is not None and full.startswith("# find_duplicates /x: 1 group, 24.0 KiB reclaimable\n")
    found.hard_links = 2
    assert (
        "2 hard-linked names of files already counted were not treated as copies" in words("/x", found, 10)[0]
    )


def test_a_name_with_terminal_escapes_reaches_the_text_with_them_escaped(tmp_path: Path) -> None:
    """Issue 32: names are escaped wherever a person reads them; ESC, BEL and a right-to-left override
    in a name can neither recolour, clear nor reorder the text the model shows its user."""
    (tmp_path / "evil\x1b[2J\x1b]0;pwned\x07\u202egnp.exe").write_bytes(b"dup")
    (tmp_path / "plain").write_bytes(b"dup")
    text, _, _ = search(tmp_path)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "evil\\033[2J\\033]0;pwned\\a\\342\\200\\256gnp.exe" in text


@pytest.mark.parametrize("processes", [1, 2])
def test_progress_counts_each_file_once_and_never_passes_its_total(tmp_path: Path, processes: int) -> None:
    """Comparing reads a file twice or more (its first and last blocks, then all of it), and forked
    comparers had the files they listed still in their counters: the progress said "6 of 4 steps", and
    a client, whose bar a total the work passed cannot show, got no total at all."""
    for group in range(20):
        for copy in range(3):
            (tmp_path / f"g{group}-{copy}").write_bytes(bytes([group]) * (SMALL * 4 + group))
    seen: list[tuple[float, float | None]] = []
    request = DuplicatesRequest(os.fsencode(tmp_path), WalkOptions(), processes=processes, split_after_s=0)
    find_duplicates(request, lambda done, total: seen.append((done, total)))
    comparing = [(done, total) for done, total in seen if total is not None]
    assert comparing, seen
    assert all(done <= total for done, total in comparing), comparing
    assert comparing[-1] == (120, 120), comparing  # 60 files listed, 60 compared, each once
