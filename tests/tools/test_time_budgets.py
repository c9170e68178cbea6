"""hash_tree and verify_checksums at their time budget: partial, said so, and every line still true."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import blake3
import jsonschema
import pytest

from sysmcp.engine.calls import never_cancelled, no_progress
from sysmcp.engine.hashing import ALGORITHMS, Source, TreeHash, TreeRequest, Verification, hash_path
from sysmcp.engine.hashing import verify as check_manifest
from sysmcp.engine.hashing._verify_request import Tuning
from sysmcp.engine.paths import PathPolicy
from sysmcp.engine.walk import WalkOptions
from sysmcp.protocol.failures import ToolError
from sysmcp.tools import hash_tree, verify_checksums
from sysmcp.tools.arguments import validate_arguments


def verified(*args: Any, tuning: Tuning | None = None, **kwargs: Any) -> Verification:
    """The engine's check of a tool's request built from these arguments, outside any call."""
    request = verify_checksums.verify_request(*args, **kwargs)
    return check_manifest(replace(request, tuning=tuning or Tuning()), no_progress, never_cancelled)


def build(root: Path, dirs: int = 12, per_dir: int = 50) -> int:
    for d in range(dirs):
        folder = root / f"d{d:02d}"
        folder.mkdir()
        for f in range(per_dir):
            (folder / f"f{f:03d}").write_bytes(os.urandom(100 + f))
    return dirs * per_dir


def ticking(step: float) -> Any:
    """A clock that moves ``step`` seconds each time anything looks at it: deadlines land mid-work."""
    ticks = itertools.count()
    return lambda: next(ticks) * step


def tree_request(root: Path, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> TreeRequest:
    request = hash_tree.tree_request(root, str(root), ALGORITHMS["sha256"], "gnu", WalkOptions(), timeout_s)
    return replace(request, clock=clock)


def partial_tree(root: Path) -> TreeHash:
    return hash_path(tree_request(root, 0.5, ticking(0.001)), no_progress, never_cancelled)


def test_a_hash_tree_cut_by_its_budget_is_a_manifest_sha256sum_accepts(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    total = build(tree)
    result = partial_tree(tree)
    assert result.stopped is not None and "time budget" in result.stopped
    assert result.manifest is not None
    assert 0 < result.files < total
    saved = tmp_path / "SHA256SUMS"
    saved.write_bytes(result.manifest)
    done = subprocess.run(
        ["sha256sum", "-c", "--strict", str(saved)], cwd=tree, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stdout[-500:] + done.stderr[-500:]
    assert done.stdout.count(b": OK") == result.files


def test_a_partial_hash_tree_says_so_in_text_and_structure(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    total = build(tree)
    result = partial_tree(tree)

    class Keeper:
        def keep(self, name: str, text: str, **_: Any) -> str:
            return "not kept in this test"

    args = {"max_lines": 5}
    output = hash_tree.answer(args, Keeper(), result, str(tree), ALGORITHMS["sha256"], "gnu")  # type: ignore[arg-type]
    jsonschema.validate(output.structured, hash_tree.TOOL.output_schema)
    assert output.structured["complete"] is False
    assert output.text.startswith("PARTIAL RESULT: hashing stopped early")
    not_hashed = output.structured["files_not_hashed"]
    if output.structured["walk_complete"]:
        assert output.structured["files"] + not_hashed == total
    else:
        assert output.structured["files"] + not_hashed < total


def test_a_hash_tree_within_its_budget_is_complete(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    total = build(tree, dirs=2, per_dir=10)
    result = hash_path(tree_request(tree, 30), no_progress, never_cancelled)
    assert result.stopped is None and result.walk_complete and result.not_hashed == 0
    assert result.files == total and result.manifest is not None
    assert result.manifest.count(b"\n") == total


def test_verify_checksums_at_its_budget_reports_what_it_did_not_check(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    total = build(tree)
    names = sorted(str(p.relative_to(tree)) for p in tree.rglob("f*"))
    text = "".join(f"{hashlib.sha256((tree / n).read_bytes()).hexdigest()}  {n}\n" for n in names)
    args = {
        "algorithm": "auto",
        "report_new": False,
        "exclude": [],
        "one_file_system": True,
        "max_listed": 10,
    }
    result = verified(
        Source("(text)", data=text.encode()),
        os.fsencode(tree),
        args,
        PathPolicy(),
        1,
        timeout_s=0.5,
        clock=ticking(0.0005),  # the look at all 600 files takes 0.3 s of it, hashing the rest
    )
    statuses = [c.status for c in result.checked]
    assert result.stopped is not None
    assert set(statuses) == {"OK", "NOT_CHECKED"}, set(statuses)
    assert 0 < statuses.count("OK") < total

    class Keeper:
        def keep(self, name: str, text: str, **_: Any) -> str:
            return "not kept in this test"

    output = verify_checksums.answer(result, "(text)", str(tree), args, Keeper())  # type: ignore[arg-type]
    jsonschema.validate(output.structured, verify_checksums.TOOL.output_schema)
    assert output.structured["complete"] is False and output.structured["all_ok"] is False
    assert output.structured["not_checked"] == statuses.count("NOT_CHECKED")
    assert output.structured["ok"] + output.structured["not_checked"] == total
    assert output.text.startswith("PARTIAL RESULT: checking stopped early")
    assert "Result: NOT SETTLED" in output.text


def test_the_check_shared_between_processes_gives_every_entry_the_verdict_of_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    build(tree, dirs=6, per_dir=40)
    names = sorted(str(p.relative_to(tree)) for p in tree.rglob("f*"))
    lines = []
    for i, name in enumerate(names):
        data = (tree / name).read_bytes()
        digest = blake3.blake3(data).hexdigest() if i % 5 == 1 else hashlib.sha256(data).hexdigest()
        lines.append(f"{digest}  {name}\n")
    lines.append(f"{hashlib.sha256(b'x').hexdigest()}  missing\n")
    lines.append(f"{hashlib.sha256(b'x').hexdigest()}  fifo\n")
    lines.append(f"{hashlib.sha256(b'x').hexdigest()}  {names[0]}\n")  # FAILED
    lines.append(f"{hashlib.sha256(b'').hexdigest()}  d00\n")  # a directory
    os.mkfifo(tree / "fifo")
    text = "".join(lines).encode()
    args = {"algorithm": "auto", "report_new": False, "exclude": [], "one_file_system": True}

    def statuses(parallel_from: int) -> list[tuple[str, str, str]]:
        tuning = Tuning(parallel_from=parallel_from, processes=2)
        result = verified(
            Source("(text)", data=text), os.fsencode(tree), args, PathPolicy(), 1, tuning=tuning
        )
        assert result.stopped is None
        return [(c.status, c.algorithm, c.detail) for c in result.checked]

    shared, alone = statuses(0), statuses(1 << 30)
    assert shared == alone
    assert Counter(status for status, _, _ in shared) == {
        "OK": 240,
        "MISSING": 1,
        "UNREADABLE": 2,
        "FAILED": 1,
    }
    assert Counter(algorithm for status, algorithm, _ in shared if status == "OK") == {
        "sha256": 192,
        "blake3": 48,
    }


def test_the_shared_check_judges_links_empty_large_and_tagged_entries_as_the_check_alone_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The processes' fast path for small files of a known algorithm must agree with the general one on
    # everything around it: symlinks followed (to a file, to a FIFO, dangling), empty files, files
    # larger than the buffer, BSD-tagged lines, and mismatches under a settled length.
    tree = tmp_path / "tree"
    tree.mkdir()
    build(tree, dirs=4, per_dir=40)
    names = sorted(str(p.relative_to(tree)) for p in tree.rglob("f*"))
    (tree / "empty").write_bytes(b"")
    (tree / "large").write_bytes(os.urandom(10_000))  # over the 4 KiB buffer set below
    os.mkfifo(tree / "fifo")
    (tree / "to-file").symlink_to(names[0])
    (tree / "to-fifo").symlink_to("fifo")
    (tree / "dangling").symlink_to("nowhere")
    lines = [f"{hashlib.sha256((tree / n).read_bytes()).hexdigest()}  {n}\n" for n in names]
    first = (tree / names[0]).read_bytes()
    lines += [
        f"{hashlib.sha256(first).hexdigest()}  to-file\n",
        f"{hashlib.sha256(b'').hexdigest()}  to-fifo\n",
        f"{hashlib.sha256(b'').hexdigest()}  dangling\n",
        f"{hashlib.sha256(b'').hexdigest()}  empty\n",
        f"{blake3.blake3((tree / 'large').read_bytes()).hexdigest()}  large\n",  # settled as sha256 by then
        f"{hashlib.sha256(b'large').hexdigest()}  large\n",  # FAILED
        f"{blake3.blake3(first).hexdigest()}  {names[0]}\n",  # blake3 under a length settled as sha256
        f"{blake3.blake3(b'x').hexdigest()}  {names[1]}\n",  # FAILED, blamed on the first candidate
        f"SHA512 ({names[2]}) = {hashlib.sha512((tree / names[2]).read_bytes()).hexdigest()}\n",
        f"MD5 ({names[3]}) = {hashlib.md5(b'x').hexdigest()}\n",  # FAILED, one candidate
    ]
    text = "".join(lines).encode()
    args = {"algorithm": "auto", "report_new": False, "exclude": [], "one_file_system": True}

    def verdicts(parallel_from: int) -> list[tuple[str, str, str]]:
        tuning = Tuning(parallel_from=parallel_from, processes=2, chunk=4096)
        result = verified(
            Source("(text)", data=text), os.fsencode(tree), args, PathPolicy(), 1, tuning=tuning
        )
        assert result.stopped is None
        return [(c.status, c.algorithm, c.detail) for c in result.checked]

    shared, alone = verdicts(0), verdicts(1 << 30)
    assert shared == alone
    assert shared[len(names) :] == [
        ("OK", "sha256", ""),
        ("UNREADABLE", "", "not a regular file: a FIFO (named pipe)"),
        ("MISSING", "", ""),
        ("OK", "sha256", ""),
        ("OK", "blake3", ""),
        ("FAILED", "sha256", ""),
        ("OK", "blake3", ""),
        ("FAILED", "sha256", ""),
        ("OK", "sha512", ""),
        ("FAILED", "md5", ""),
    ]
    assert {status for status, _, _ in shared[: len(names)]} == {"OK"}


def test_the_shared_check_at_its_budget_leaves_the_rest_not_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    total = build(tree)
    names = sorted(str(p.relative_to(tree)) for p in tree.rglob("f*"))
    text = "".join(f"{hashlib.sha256((tree / n).read_bytes()).hexdigest()}  {n}\n" for n in names)
    args = {"algorithm": "auto", "report_new": False, "exclude": [], "one_file_system": True}
    result = verified(
        Source("(text)", data=text.encode()),
        os.fsencode(tree),
        args,
        PathPolicy(),
        1,
        timeout_s=0.2,
        clock=ticking(0.001),  # each process's clock ticks on its own: both stop after about 200 looks
        tuning=Tuning(parallel_from=0, processes=2),
    )
    statuses = Counter(c.status for c in result.checked)
    assert result.stopped is not None and "time budget" in result.stopped
    assert set(statuses) == {"OK", "NOT_CHECKED"} and 0 < statuses["OK"] < total


@pytest.mark.parametrize("tool", [hash_tree.TOOL, verify_checksums.TOOL], ids=lambda tool: tool.name)
@pytest.mark.parametrize("budget", [0, -1, 601, "30"])
def test_a_time_budget_out_of_range_or_not_a_number_is_refused_by_name(tool: Any, budget: object) -> None:
    required = {"path": "/srv"} if tool is hash_tree.TOOL else {"manifest": "/srv/SHA256SUMS"}
    with pytest.raises(ToolError, match="timeout_s"):
        validate_arguments(tool.input_schema, {**required, "timeout_s": budget})
    validate_arguments(tool.input_schema, {**required, "timeout_s": 600})  # the maximum itself is fine
