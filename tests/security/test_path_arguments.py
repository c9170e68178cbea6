"""A path argument means what the kernel (and so ``stat``, ``ls``, ``sha256sum``) makes of it, with and
without roots: a '/', '/.' or '/..' after a name that is no directory is "Not a directory", a '/' after
a symlink to a directory is that directory, a '..' is taken after the symlink before it is resolved,
and a '..' after a missing name finds nothing. Each case is asked of the kernel itself on real files.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.faults import EngineError, NotFound, WrongKind
from sysmcp.engine.paths import PathPolicy, real_root
from sysmcp.protocol.failures import ToolError
from sysmcp.tools.errors import as_tool_error
from tests.harness import call_tool, tool_context
from tests.profile import needs_proc

#: Names under the tree, as ``tree`` makes them, each asked as written after the tree's path.
CASES = (
    "f",
    "f/",
    "f/.",
    "f/..",
    "f/x",
    "f/x/..",
    "f/./",
    "lf",
    "lf/",
    "lf/.",
    "lf/..",
    "d/",
    "d/.",
    "d/..",
    "d//g",
    "d/./g",
    "d/g/",
    "ld",
    "ld/",
    "ld/.",
    "ld/g",
    "ld/../f",
    "ld/g/..",
    "lslash/g",
    "lfslash",
    "lfslash/",
    "missing",
    "missing/",
    "missing/..",
    "missing/../f",
    "missing/x/../..",
    "dang",
    "dang/",
    "dang/..",
    "deep/..",
    "deep/../..",
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``f`` a file, ``d/g`` a file in a directory, ``lf`` -> f, ``ld`` -> d, ``lslash`` -> 'd/',
    ``lfslash`` -> 'f/' (a link whose target asks for a directory), ``dang`` -> a missing name,
    ``deep`` -> d/inner (its '..' is d, not the tree)."""
    base = real_root(tmp_path) / "tree"
    (base / "d" / "inner").mkdir(parents=True)
    (base / "f").write_text("file")
    (base / "d" / "g").write_text("g")
    (base / "lf").symlink_to("f")
    (base / "ld").symlink_to("d")
    (base / "lslash").symlink_to("d/")
    (base / "lfslash").symlink_to("f/")
    (base / "dang").symlink_to("nowhere")
    (base / "deep").symlink_to("d/inner")
    return base


def kernel(raw: str) -> os.stat_result | int | None:
    """What ``stat(2)`` says of ``raw``: the file's status, or the error number."""
    try:
        return os.stat(raw)
    except OSError as exc:
        return exc.errno


def answer(policy: PathPolicy, raw: str) -> Path | EngineError:
    try:
        return policy.resolve(raw)
    except EngineError as refused:
        return refused


def policies(tree: Path) -> dict[str, PathPolicy]:
    return {"no roots": PathPolicy(), "under --root": PathPolicy.of_operator([str(tree.parent)])}


@pytest.mark.parametrize("case", CASES)
def test_a_path_argument_resolves_as_the_kernel_looks_it_up(tree: Path, case: str) -> None:
    raw = f"{tree}/{case}"
    said = kernel(raw)
    for where, policy in policies(tree).items():
        got = answer(policy, raw)
        if isinstance(said, os.stat_result):
            assert isinstance(got, Path), (where, raw, got)
            assert (got.stat().st_dev, got.stat().st_ino) == (said.st_dev, said.st_ino), (where, raw, got)
            assert os.path.realpath(got) == str(got)
        elif said == errno.ENOTDIR:
            assert isinstance(got, WrongKind), (where, raw, got)
            assert as_tool_error(got).message.startswith(f"Not a directory: {raw!r}"), (where, raw)
        else:  # ENOENT: refused as missing, or a name that is not there, which the tool then says
            assert said == errno.ENOENT, (raw, said)
            assert isinstance(got, NotFound) or (isinstance(got, Path) and not got.exists()), (
                where,
                raw,
                got,
            )


def test_the_words_of_not_a_directory_say_what_asks_for_one(tree: Path) -> None:
    for policy in policies(tree).values():
        got = answer(policy, f"{tree}/f/")
        assert isinstance(got, EngineError)
        message = as_tool_error(got).message
        assert message.startswith(f"Not a directory: '{tree}/f/'"), message
        assert "'/'" in message and "'/..'" in message, message


def test_a_dot_dot_after_a_missing_name_is_no_such_file(tree: Path) -> None:
    for policy in policies(tree).values():
        got = answer(policy, f"{tree}/missing/../f")
        assert isinstance(got, NotFound), got
        assert as_tool_error(got).message.startswith(f"No such file or directory: '{tree}/missing/../f'")


#: Every tool that takes a path, and the argument it takes it in.
PATH_ARGUMENTS = (
    ("file_sha256", "path"),
    ("hash_tree", "path"),
    ("dir_usage", "path"),
    ("find_duplicates", "path"),
    ("disk_usage", "path"),
    ("deleted_open_files", "path"),
    ("verify_checksums", "manifest"),
    ("verify_checksums", "base_dir"),
    ("reclaim_plan", "path"),
    ("what_changed", "path"),
)


async def words_of(name: str, roots: list[Path] | None, **args: Any) -> str:
    """The text of ``name``'s answer to ``args``, refused or not, as the model reads it."""
    try:
        output = await call_tool(name, tool_context(roots), **args)
    except ToolError as refused:
        return refused.message
    except EngineError as failed:
        return as_tool_error(failed).message
    return output.text


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "argument"), PATH_ARGUMENTS)
async def test_every_path_argument_says_not_a_directory_as_the_kernel_does(
    tree: Path, name: str, argument: str
) -> None:
    """``file_sha256 path=/etc/hosts/`` hashed /etc/hosts, where sha256sum, ls and stat say "Not a
    directory": every tool, with and without roots, in the same words."""
    (tree / "SHA256SUMS").write_text(f"{'0' * 64}  f\n")
    extra = {"base_dir": str(tree)} if argument == "manifest" else {"manifest": f"{'0' * 64}  f"}
    if name != "verify_checksums":
        extra = {}
    for roots in (None, [tree.parent]):
        for case in ("f/", "f/.", "f/..", "lf/", "f/x/.."):
            raw = f"{tree}/{case}"
            said = await words_of(name, roots, **{argument: raw}, **extra)
            assert said.startswith(f"Not a directory: {raw!r}: a name with '/'"), (name, roots, case, said)


@pytest.mark.anyio
async def test_a_slash_after_a_symlink_to_a_directory_is_the_directory(tree: Path) -> None:
    for roots in (None, [tree.parent]):
        said = await words_of("dir_usage", roots, path=f"{tree}/ld/")
        assert said.startswith(f"{tree}/d: "), said
        said = await words_of("hash_tree", roots, path=f"{tree}/lslash/")
        assert said.startswith(f"sha256 manifest of {tree}/d: 1 file"), said


def test_dot_dot_is_checked_against_the_roots_where_the_kernel_takes_it(tree: Path) -> None:
    """The roots are checked on the path the kernel reaches, with each symlink resolved before the
    ``..`` after it: ``deep/../..`` (deep -> d/inner) is the tree itself, though as written it climbs
    above it; ``out/..`` (out -> a directory outside) is outside, though as written it is the tree."""
    outside = tree.parent / "outside"
    (outside / "deeper").mkdir(parents=True)
    (tree / "out").symlink_to(outside / "deeper")
    confined = PathPolicy.of_operator([str(tree)])
    assert confined.resolve(f"{tree}/deep/../..") == tree
    assert confined.resolve(f"/{tree}//d//g") == tree / "d" / "g"  # '//' leading or inside: one '/'
    for raw in (f"{tree}/out/..", f"{tree}/..", f"{tree}/d/../../outside", f"{tree}/deep/../../.."):
        refused = answer(confined, raw)
        assert isinstance(refused, EngineError), raw
        assert "outside the operator's roots" in as_tool_error(refused).message, raw


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "argument"), PATH_ARGUMENTS)
async def test_a_dangling_symlink_is_named_with_where_it_leads_by_every_tool(
    tree: Path, name: str, argument: str
) -> None:
    """file_sha256 named the link and its missing target; hash_tree, dir_usage, find_duplicates (and
    the rest) named only the target, a name the caller never gave. Now every tool says both, alike."""
    (tree / "gone").symlink_to("d/missing-dir")
    extra = {"base_dir": str(tree)} if argument == "manifest" else {"manifest": f"{'0' * 64}  f"}
    if name != "verify_checksums":
        extra = {}
    for roots in (None, [tree.parent]):
        said = await words_of(name, roots, **{argument: f"{tree}/dang"}, **extra)
        assert (
            said == f"No such file: {tree}/dang is a symbolic link to {tree}/nowhere, which does not exist"
        ), (name, said)
        said = await words_of(name, roots, **{argument: f"{tree}/gone"}, **extra)
        assert said.endswith(f"/gone is a symbolic link to {tree}/d/missing-dir, which does not exist"), said
        said = await words_of(name, roots, **{argument: f"{tree}/gone/x"}, **extra)
        assert said == (
            f"No such file: {tree}/gone/x leads through a symbolic link to {tree}/d/missing-dir/x, "
            "which does not exist"
        ), (name, said)


@needs_proc
def test_a_link_that_cannot_be_read_is_no_name_before_a_dot_dot() -> None:
    """Another user's ``/proc/1/root`` is a link the kernel will not read (EACCES): ``stat`` says
    "Permission denied". No '..' is in the path, so the refusal must not explain one."""
    import shutil

    from tests.harness import python_as_nobody

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("a second user needs root and setpriv")
    probe = (
        "from sysmcp.engine.faults import EngineError\n"
        "from sysmcp.engine.paths import PathPolicy\n"
        "from sysmcp.tools.errors import as_tool_error\n"
        "for policy in (PathPolicy(), PathPolicy.of_operator(['/'])):\n"
        "    try:\n"
        "        print(policy.resolve('/proc/1/root/etc'))\n"
        "    except EngineError as refused:\n"
        "        print(as_tool_error(refused).message)\n"
    )
    done = python_as_nobody(probe)
    assert done.returncode == 0, done.stderr
    for said in done.stdout.splitlines():
        assert "Permission denied" in said, said
        assert "'..'" not in said, said


def test_a_dangling_link_out_of_the_clients_roots_is_outside_them(tree: Path) -> None:
    """A link inside the client's root to a missing name outside it (still inside the operator's):
    outside the client's roots, as a link there to a name that exists is; never its target and
    whether that exists, which would tell what lies outside the roots."""
    inner = tree / "d"
    (inner / "to-missing").symlink_to(tree / "plan.txt")
    (inner / "to-present").symlink_to(tree / "f")
    (inner / "through").symlink_to("../gone/x")
    policy = PathPolicy.of_operator([str(tree)])
    policy.narrow([real_root(inner)], named=[inner])
    for name in ("to-missing", "to-present", "through", "to-missing/x"):
        refused = answer(policy, f"{inner}/{name}")
        assert isinstance(refused, EngineError), (name, refused)
        message = as_tool_error(refused).message
        assert "outside the client's roots" in message, (name, message)
        assert "plan.txt" not in message and "gone" not in message, (name, message)


def test_where_a_path_stops_outside_the_clients_roots_it_is_outside_them(tree: Path) -> None:
    """A link in the client's root to a file, a directory or a missing name outside it (inside the
    operator's root), with '/', '/..' or a name after it: all alike 'outside the client's roots'.
    'Not a directory' for one and 'No such file' for another told what kind of file lay outside."""
    inner = tree / "d"
    (inner / "lfile").symlink_to(tree / "f")
    (tree / "e").mkdir()
    (inner / "ldir").symlink_to(tree / "e")
    (inner / "lmissing").symlink_to(tree / "plan")
    policy = PathPolicy.of_operator([str(tree)])
    policy.narrow([real_root(inner)], named=[inner])
    for link in ("lfile", "ldir", "lmissing"):
        for after in ("/", "/..", "/x", "/x/.."):
            refused = answer(policy, f"{inner}/{link}{after}")
            assert isinstance(refused, EngineError), (link, after, refused)
            message = as_tool_error(refused).message
            assert "outside the client's roots" in message, (link, after, message)
