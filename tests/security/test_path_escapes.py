"""Every known way out of a root, tried against the policy and the opener.

Each escape here would pass a check that compared strings (``startswith``) or that followed
symlinks at open time; the tests name which.
"""

from __future__ import annotations

import errno
import functools
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.faults import EngineError
from sysmcp.engine.opens import NotRegularFile, open_parent, open_path
from sysmcp.engine.paths import PathPolicy, mount_source, real_root, root_names, roots_from_uris
from sysmcp.engine.paths._paths import SOURCE_OUTSIDE, intersect
from sysmcp.engine.walk._types import DIR_FLAGS
from sysmcp.tools.errors import as_tool_error
from tests.profile import needs_proc

SECRET = "top-secret-contents"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``base/root`` (the allowed root), ``base/root-evil`` (a sibling prefix), ``base/outside``."""
    base = real_root(tmp_path)
    (base / "root" / "sub").mkdir(parents=True)
    (base / "root" / "sub" / "inside.txt").write_text("fine")
    (base / "root-evil").mkdir()
    (base / "root-evil" / "secret.txt").write_text(SECRET)
    (base / "outside").mkdir()
    (base / "outside" / "secret.txt").write_text(SECRET)
    return base


def policy(tree: Path) -> PathPolicy:
    return PathPolicy(operator_roots=[tree / "root"])


def refusal(call: Callable[[], object]) -> str:
    """The words the model reads for the engine's refusal (``as_tool_error`` at the server's boundary)."""
    with pytest.raises(EngineError) as caught:
        call()
    return as_tool_error(caught.value).message


def test_dot_dot_cannot_climb_out_of_a_root(tree: Path) -> None:
    raw = f"{tree}/root/../outside/secret.txt"  # starts with the root as a string
    message = refusal(lambda: policy(tree).resolve(raw))
    assert "outside the operator's roots" in message


def test_a_sibling_directory_sharing_the_prefix_is_not_inside(tree: Path) -> None:
    raw = f"{tree}/root-evil/secret.txt"  # "/…/root-evil".startswith("/…/root") is True
    message = refusal(lambda: policy(tree).resolve(raw))
    assert "outside the operator's roots" in message


def test_a_symlink_inside_the_root_pointing_out_is_refused_without_naming_its_target(tree: Path) -> None:
    (tree / "root" / "link").symlink_to(tree / "outside")
    raw = f"{tree}/root/link/secret.txt"  # lexically inside the root; only the resolved path is not
    message = refusal(lambda: policy(tree).resolve(raw))
    assert "outside the operator's roots" in message and "symlink" in message
    assert str(tree / "outside") not in message


def test_a_symlink_in_the_middle_of_the_path_is_resolved_before_the_check(tree: Path) -> None:
    (tree / "root" / "sub" / "up").symlink_to("../../outside")
    raw = f"{tree}/root/sub/up/secret.txt"
    assert "outside the operator's roots" in refusal(lambda: policy(tree).resolve(raw))


def test_a_symlink_to_a_file_outside_is_refused(tree: Path) -> None:
    (tree / "root" / "innocent.txt").symlink_to(tree / "outside" / "secret.txt")
    assert "outside" in refusal(lambda: policy(tree).resolve(f"{tree}/root/innocent.txt"))


def test_a_dangling_symlink_pointing_out_is_refused(tree: Path) -> None:
    (tree / "root" / "later").symlink_to(tree / "outside" / "not-yet")
    assert "outside" in refusal(lambda: policy(tree).resolve(f"{tree}/root/later"))


def test_a_symlink_that_stays_inside_is_followed_to_its_real_path(tree: Path) -> None:
    (tree / "root" / "alias").symlink_to("sub")
    assert policy(tree).resolve(f"{tree}/root/alias/inside.txt") == tree / "root" / "sub" / "inside.txt"


@needs_proc
def test_proc_self_root_does_not_lead_out_of_proc() -> None:
    proc_only = PathPolicy(operator_roots=[Path("/proc")])
    for raw in ("/proc/self/root/etc/passwd", "/proc/self/cwd", "/proc/thread-self/root/etc"):
        assert "outside" in refusal(lambda raw=raw: proc_only.resolve(raw))  # type: ignore[misc]


def test_a_symlink_to_proc_self_root_inside_a_root_is_refused(tree: Path) -> None:
    (tree / "root" / "everything").symlink_to("/proc/self/root")
    raw = f"{tree}/root/everything{tree}/outside/secret.txt"
    assert "outside" in refusal(lambda: policy(tree).resolve(raw))


def test_proc_magic_links_are_never_followed_by_the_opener(tree: Path) -> None:
    fd = os.open(tree / "outside", os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as caught:
            open_path(f"/proc/self/fd/{fd}", directory=True)  # what a broad root like / would resolve to
        assert caught.value.errno == 40  # ELOOP: a magic link is a link
    finally:
        os.close(fd)


def test_relative_empty_and_nul_paths_are_refused_with_the_rule() -> None:
    anywhere = PathPolicy()
    assert "relative" in refusal(lambda: anywhere.resolve("etc/passwd"))
    assert "empty" in refusal(lambda: anywhere.resolve(""))
    assert "NUL" in refusal(lambda: anywhere.resolve("/etc\x00/passwd"))
    assert "not a usable file name" in refusal(lambda: anywhere.resolve("/tmp/\ud800"))


def test_under_roots_a_users_home_is_not_looked_up_so_the_answer_tells_nobody_has_an_account(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'~nobody' expanded (outside: refused) and '~no-such-user' did not (relative: refused), so the
    refusal told who has an account; under roots no '~name' is looked up at all."""
    monkeypatch.setenv("HOME", str(tree / "root"))
    confined = policy(tree)
    said = {raw: refusal(functools.partial(confined.resolve, raw)) for raw in ("~root", "~no-such-user-x9")}
    assert said["~root"] == said["~no-such-user-x9"].replace("~no-such-user-x9", "~root")
    assert "names a user's home directory" in said["~root"] and "give the absolute path" in said["~root"]
    assert confined.resolve("~/sub") == tree / "root" / "sub"  # this process's $HOME: no lookup
    assert PathPolicy().resolve("~root") == Path(os.path.realpath(os.path.expanduser("~root")))


def test_an_enormous_path_is_refused_and_not_echoed_whole() -> None:
    message = refusal(lambda: PathPolicy(operator_roots=[Path("/nonexistent")]).resolve("/" + "a" * 100_000))
    assert len(message) < 1000


def test_without_roots_the_whole_filesystem_is_in_scope(tree: Path) -> None:
    assert PathPolicy().resolve(f"{tree}/outside/secret.txt") == tree / "outside" / "secret.txt"


# -- client roots ---------------------------------------------------------------------------------


def test_client_roots_narrow_the_operator_roots(tree: Path) -> None:
    narrowed = policy(tree)
    narrowed.narrow([tree / "root" / "sub"])
    assert narrowed.resolve(f"{tree}/root/sub/inside.txt")
    (tree / "root" / "other").mkdir()
    assert "client's roots" in refusal(lambda: narrowed.resolve(f"{tree}/root/other"))
    assert narrowed.allowed == [tree / "root" / "sub"]


def test_client_roots_can_never_widen_the_operator_roots(tree: Path) -> None:
    widened = policy(tree)
    widened.narrow([Path("/"), tree / "outside"])  # a client asking for everything
    assert "operator's roots" in refusal(lambda: widened.resolve(f"{tree}/outside/secret.txt"))
    assert "operator's roots" in refusal(lambda: widened.resolve("/etc/passwd"))
    assert widened.allowed == [tree / "root"]


def test_client_roots_disjoint_from_the_operator_roots_allow_nothing(tree: Path) -> None:
    disjoint = policy(tree)
    disjoint.narrow([tree / "outside"])
    assert disjoint.allowed == []
    assert "client's roots" in refusal(lambda: disjoint.resolve(f"{tree}/root/sub"))


def test_an_empty_client_root_list_does_not_narrow(tree: Path) -> None:
    unchanged = policy(tree)
    unchanged.narrow([])
    assert unchanged.client_roots is None and unchanged.allowed == [tree / "root"]


def test_client_roots_alone_confine_a_server_without_operator_roots(tree: Path) -> None:
    client_only = PathPolicy()
    client_only.narrow([tree / "root"])
    assert "client's roots" in refusal(lambda: client_only.resolve(f"{tree}/root-evil/secret.txt"))


def test_a_refusal_lists_a_bounded_number_of_roots(tree: Path) -> None:
    many = PathPolicy()
    many.narrow([tree / "root" / f"r{i}" for i in range(5000)])
    message = refusal(lambda: many.resolve(f"{tree}/outside"))
    assert "and 4990 more" in message and len(message) < 3000


def test_intersection_keeps_the_deeper_of_each_overlapping_pair() -> None:
    assert intersect([Path("/srv")], [Path("/srv/www"), Path("/home")]) == [Path("/srv/www")]
    assert intersect([Path("/srv-evil")], [Path("/srv")]) == []


def test_only_local_file_uris_become_client_roots(tree: Path) -> None:
    roots, unusable = roots_from_uris(
        [
            f"file://{tree}/root%20space",
            f"file://localhost{tree}/root",
            "file://otherhost/etc",
            "https://example.com/",
            "file:relative",
            42,
            "file:///\ud800",  # a lone surrogate: no file name holds one
        ]
    )
    assert roots == [tree / "root space", tree / "root"]
    assert len(unusable) == 5


def test_a_file_uri_names_its_directory_byte_for_byte_and_its_host_in_any_case(tree: Path) -> None:
    odd = os.fsencode(tree / "root") + b"/caf\xe9"  # Latin-1: no UTF-8 decoding names it
    os.mkdir(odd)
    roots, unusable = roots_from_uris([f"file://{tree}/root/caf%E9/", f"file://LOCALHOST{tree}/root"])
    assert roots == [Path(os.fsdecode(odd)), tree / "root"] and unusable == []


def test_client_roots_of_which_none_can_be_used_allow_nothing(tree: Path) -> None:
    elsewhere = policy(tree)
    roots, unusable = roots_from_uris([f"file://otherhost{tree}/root"])
    elsewhere.narrow(roots, ignored=len(unusable))
    assert elsewhere.allowed == []
    assert "client's roots" in refusal(lambda: elsewhere.resolve(f"{tree}/root/sub"))


def test_client_roots_are_resolved_so_a_symlinked_root_cannot_widen(tree: Path) -> None:
    (tree / "root" / "door").symlink_to(tree / "outside")
    narrowed = policy(tree)
    roots, _ = roots_from_uris([f"file://{tree}/root/door"])
    narrowed.narrow(roots)
    assert narrowed.allowed == []  # the client root really is /…/outside: not within the operator's


# -- the opener: swaps after the check ------------------------------------------------------------


def test_a_directory_swapped_for_a_symlink_after_the_check_is_not_followed(tree: Path) -> None:
    checked = policy(tree).resolve(f"{tree}/root/sub/inside.txt")
    (tree / "root" / "sub").rename(tree / "root" / "moved")  # the race: swap between resolve and open
    (tree / "root" / "sub").symlink_to(tree / "outside")
    (tree / "outside" / "inside.txt").write_text(SECRET)
    with pytest.raises(OSError) as caught:
        open_path(checked, regular=True)
    assert caught.value.errno == 40  # a plain os.open would have opened the secret
    assert "symbolic link" in str(caught.value) and str(tree / "outside") not in str(caught.value)


def test_a_final_component_swapped_for_a_symlink_is_not_followed(tree: Path) -> None:
    checked = policy(tree).resolve(f"{tree}/root/sub/inside.txt")
    (tree / "root" / "sub" / "inside.txt").unlink()
    (tree / "root" / "sub" / "inside.txt").symlink_to(tree / "outside" / "secret.txt")
    with pytest.raises(NotRegularFile) as caught:  # looked at, never opened
        open_path(checked, regular=True)
    assert "symbolic link" in str(caught.value)


def test_a_directory_swapped_for_a_symlink_is_not_listed(tree: Path) -> None:
    checked = policy(tree).resolve(f"{tree}/root/sub")
    (tree / "root" / "sub").rename(tree / "root" / "moved")
    (tree / "root" / "sub").symlink_to(tree / "outside")
    with pytest.raises(OSError) as caught:
        open_path(checked, directory=True)
    assert caught.value.errno == 40 and "symbolic link" in str(caught.value)


def test_the_parent_of_a_path_is_reached_without_following_a_swapped_symlink(tree: Path) -> None:
    checked = policy(tree).resolve(f"{tree}/root/sub/inside.txt")
    parent, name = open_parent(checked)
    try:
        assert name == b"inside.txt" and os.stat(name, dir_fd=parent).st_size == 4
    finally:
        os.close(parent)
    (tree / "root" / "sub").rename(tree / "root" / "moved")
    (tree / "root" / "sub").symlink_to(tree / "outside")
    with pytest.raises(OSError) as caught:
        open_parent(checked)
    assert caught.value.errno == 40


def test_walkers_cannot_step_into_a_symlinked_child(tree: Path) -> None:
    (tree / "root" / "jump").symlink_to(tree / "outside")
    parent = open_path(tree / "root", directory=True)
    try:
        with pytest.raises(OSError) as caught:
            os.open("jump", DIR_FLAGS, dir_fd=parent)  # how the walk opens a child
        assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR)  # refused, whichever word the kernel uses
        child = os.open("sub", DIR_FLAGS, dir_fd=parent)
        assert "inside.txt" in os.listdir(child)
        os.close(child)
    finally:
        os.close(parent)


def test_open_path_of_a_regular_file_returns_a_readable_descriptor(tree: Path) -> None:
    fd = open_path(tree / "root" / "sub" / "inside.txt", regular=True)
    try:
        assert os.read(fd, 100) == b"fine"
    finally:
        os.close(fd)


def bounded(call: Callable[[], object], seconds: float = 5) -> str:
    """Run ``call`` in a thread and fail (instead of hanging the suite) if it blocks."""
    outcome: list[str] = []

    def target() -> None:
        try:
            call()
            outcome.append("returned")
        except OSError as exc:
            outcome.append(f"OSError {exc.errno}: {exc}")

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, "the open blocked"
    return outcome[0]


def test_a_fifo_is_refused_without_blocking(tree: Path) -> None:
    os.mkfifo(tree / "root" / "pipe")
    assert "FIFO" in bounded(lambda: open_path(tree / "root" / "pipe", regular=True))
    # and the raw opener never blocks on one either, thanks to O_NONBLOCK
    assert bounded(lambda: os.close(open_path(tree / "root" / "pipe"))) == "returned"


def test_devices_and_sockets_are_refused_without_being_opened() -> None:
    assert "character device" in bounded(lambda: open_path("/dev/null", regular=True))
    assert "directory" in bounded(lambda: open_path("/", regular=True))


def test_bind_mount_aliases_of_a_root_do_not_widen_it(tree: Path) -> None:
    alias = tree / "alias"
    alias.mkdir()
    done = subprocess.run(["mount", "--bind", str(tree / "outside"), str(alias)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot create bind mounts here")
    try:
        (tree / "root" / "via-alias").symlink_to(alias)
        # the same directory reached under another name is still judged by the name it resolves to
        assert "outside" in refusal(lambda: policy(tree).resolve(f"{tree}/root/via-alias/secret.txt"))
        assert "outside" in refusal(lambda: policy(tree).resolve(f"{alias}/secret.txt"))
    finally:
        subprocess.run(["umount", str(alias)], check=False)


def test_a_mount_source_is_named_as_a_device_or_inside_the_roots_only(tree: Path) -> None:
    roots = [tree / "root"]
    for named in (
        "/dev/vda1",
        "/dev/mapper/vg-home",
        "tmpfs",
        "server:/export/home",
        "//nas/share",
        f"{tree}/root/img",
    ):
        assert mount_source(named, roots) == named
    for hidden in (f"{tree}/outside/project", f"{tree}/root-evil", "/dev/../srv/secret", f"{tree}/root/../x"):
        assert mount_source(hidden, roots) == SOURCE_OUTSIDE
    assert mount_source(f"{tree}/outside/project", None) == f"{tree}/outside/project"  # no roots


def test_resolving_under_roots_never_looks_at_a_name_outside_them(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A symlink inside the root that points out is refused as soon as its target leaves the roots: the
    target (an automount, a hung NFS share, a name another user hides) is never stat'ed nor read."""
    (tree / "outside" / "deeper").mkdir()
    (tree / "outside" / "deeper" / "hop").symlink_to(tree / "root" / "sub")
    (tree / "root" / "out").symlink_to(tree / "outside" / "deeper")
    looked: list[str] = []
    real_lstat, real_readlink = os.lstat, os.readlink

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        looked.append(os.fsdecode(path))
        return real_lstat(path, *args, **kwargs)

    def readlink(path: Any, *args: Any, **kwargs: Any) -> Any:
        looked.append(os.fsdecode(path))
        return real_readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "readlink", readlink)
    for raw in (
        f"{tree}/root/out/hop/inside.txt",  # out and back in: refused at the first step out
        f"{tree}/outside/deeper/hop/inside.txt",  # an alias of the root from outside it
        f"{tree}/root/../outside/secret.txt",
        f"{tree}/root-evil/secret.txt",
        "/proc/self/cwd/x",
    ):
        assert "outside the operator's roots" in refusal(functools.partial(policy(tree).resolve, raw))
    root = str(tree / "root")
    beside = [p for p in looked if not (p == root or p.startswith(root + "/") or root.startswith(p + "/"))]
    assert beside == [], beside
    assert policy(tree).resolve(f"{tree}/root/sub/../sub/inside.txt") == tree / "root" / "sub" / "inside.txt"


def test_a_missing_name_then_dot_dot_does_not_skip_the_symlink_after_it(tree: Path) -> None:
    """``root/missing/../link``: a path argument stops at ``missing`` as the kernel does (no such
    file); resolved the ``realpath`` way (a manifest's names, whose check finds that stop itself) it
    names ``root/link``, and the link is followed and its target checked as anywhere else, not taken as
    written because a name before it was missing (disk_usage then statvfs'ed it and told an outside
    mount's numbers)."""
    (tree / "root" / "file-out").symlink_to(tree / "outside" / "secret.txt")
    (tree / "root" / "dir-out").symlink_to(tree / "outside")
    for raw in (
        f"{tree}/root/missing/../file-out",
        f"{tree}/root/missing/../dir-out",
        f"{tree}/root/missing/deeper/../../dir-out/secret.txt",
    ):
        assert "No such file or directory" in refusal(functools.partial(policy(tree).resolve, raw))
        lenient = functools.partial(policy(tree).resolve, raw, strict=False)
        assert "outside the operator's roots" in refusal(lenient)
    found = f"{tree}/root/missing/../sub/inside.txt"
    assert policy(tree).resolve(found, strict=False) == tree / "root" / "sub" / "inside.txt"
    assert "No such file or directory" in refusal(functools.partial(policy(tree).resolve, found))


def test_a_refused_alias_from_outside_says_to_name_the_path_through_a_root(tree: Path) -> None:
    """``/home -> /var/home`` with the root given as ``/var/home/alice``: ``/home/alice/f`` is refused
    without looking at ``/home`` (SECURITY.md), and the refusal must not claim the symlink was resolved
    and the path found outside: it says the link was not followed and what to name instead."""
    (tree / "alias").symlink_to(tree / "root")
    message = refusal(lambda: policy(tree).resolve(f"{tree}/alias/sub/inside.txt"))
    assert "outside the operator's roots" in message
    assert "not followed: name the path through an allowed root" in message
    assert f"Allowed roots: {tree}/root" in message


def test_a_client_root_wider_than_the_operators_does_not_widen_what_is_looked_at(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client listing ``/`` (or the roots' parent) as its root narrows nothing, and its name must not
    let resolving stat names outside the operator's roots (nor follow a symlink loop there, whose
    'Too many levels of symbolic links' would tell it exists)."""
    (tree / "outside" / "loop").symlink_to("loop")
    looked: list[str] = []
    real_lstat = os.lstat

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        looked.append(os.fsdecode(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    for wide in (Path("/"), tree):
        confined = policy(tree)
        confined.narrow([wide], named=[wide])
        for raw in (f"{tree}/outside/secret.txt", f"{tree}/outside/loop/x"):
            assert "outside the operator's roots" in refusal(functools.partial(confined.resolve, raw))
        assert confined.resolve(f"{tree}/root/sub/inside.txt") == tree / "root" / "sub" / "inside.txt"
    root = str(tree / "root")
    beside = [p for p in looked if not (p == root or p.startswith(root + "/") or root.startswith(p + "/"))]
    assert beside == [], beside


def test_a_client_root_written_through_a_symlink_into_the_operators_root_is_reached_by_that_name(
    tree: Path,
) -> None:
    """The operator gave the real path (``/var/home/alice``), the client its usual name
    (``file:///home/alice/proj``, ``/home -> /var/home``): the client's paths under its own root name
    are resolved through it, as they were before resolution went name by name."""
    (tree / "root" / "proj").mkdir()
    (tree / "root" / "proj" / "f").write_text("x")
    (tree / "alias").symlink_to(tree / "root")
    uris = [f"file://{tree}/alias/proj"]
    confined = policy(tree)
    roots, unusable = roots_from_uris(uris)
    confined.narrow(roots, ignored=len(unusable), named=root_names(uris))
    assert confined.resolve(f"{tree}/alias/proj/f") == tree / "root" / "proj" / "f"
    assert "outside the client's roots" in refusal(lambda: confined.resolve(f"{tree}/alias/sub/inside.txt"))
