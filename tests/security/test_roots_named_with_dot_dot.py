"""A root is the directory its name leads to as the kernel reads it: a ``..`` after a symbolic link
leaves where the link led, not the link's own directory (``/srv/data/..`` with /srv/data a link to
/mnt/big/data is /mnt/big). The root was made absolute and normalised by its text first, so such a
root confined every tool to /srv, a directory the operator (or client) never named, and refused the
one they did."""

from __future__ import annotations

from pathlib import Path

import pytest

from sysmcp.engine.faults import OutsideRoots
from sysmcp.engine.paths import PathPolicy, root_names, roots_from_uris


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``a/link`` leads to ``b/c``: ``a/link/..`` is ``b``; ``a/secret`` is outside it."""
    tmp_path = tmp_path.resolve()
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "link").symlink_to(tmp_path / "b" / "c")
    (tmp_path / "a" / "secret").write_text("not under the root\n")
    (tmp_path / "b" / "inside").write_text("under the root\n")
    return tmp_path


def test_an_operator_root_with_dot_dot_after_a_symlink_is_the_directory_the_kernel_reaches(
    tree: Path,
) -> None:
    policy = PathPolicy.of_operator([f"{tree}/a/link/.."])
    assert policy.operator_roots == [tree / "b"]
    assert policy.resolve(f"{tree}/b/inside") == tree / "b" / "inside"
    with pytest.raises(OutsideRoots):
        policy.resolve(f"{tree}/a/secret")
    assert policy.steps_down(str(tree)) == ["b"]  # the way down to the root is b, not a as written


def test_a_client_root_with_dot_dot_after_a_symlink_is_the_directory_the_kernel_reaches(tree: Path) -> None:
    roots, unusable = roots_from_uris([f"file://{tree}/a/link/.."])
    assert (roots, unusable) == ([tree / "b"], [])
    policy = PathPolicy()
    policy.narrow(roots, named=root_names([f"file://{tree}/a/link/.."]))
    assert policy.steps_down(str(tree)) == ["b"]
    with pytest.raises(OutsideRoots):
        policy.resolve(f"{tree}/a/secret")
