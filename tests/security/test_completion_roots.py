"""Path completion under ``--root``: what it offers is what a tool could be given, reached through the
roots as written, and listed from the directory that was checked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sysmcp.engine.paths import PathPolicy
from sysmcp.server.prompts import complete_path


def offered(value: str, policy: PathPolicy) -> list[str]:
    return complete_path(value, "file", policy)[0]


def test_a_root_given_through_a_symlink_is_completed_through_it_and_still_confined(tmp_path: Path) -> None:
    """As macOS's /var leads to /private/var: the operator writes ``--root /var/folders/x``, whose real
    path is elsewhere. The way down through the written name was offered nothing."""
    base = tmp_path.resolve()
    (base / "private" / "var" / "folders" / "x" / "logs").mkdir(parents=True)
    (base / "private" / "var" / "folders" / "y").mkdir()  # beside the root: never offered
    (base / "private" / "var" / "secret").mkdir()
    (base / "var").symlink_to(base / "private" / "var")
    policy = PathPolicy.of_operator([str(base / "var" / "folders" / "x")])
    assert offered(f"{base}/v", policy) == [f"{base}/var/"]
    assert offered(f"{base}/var/", policy) == [f"{base}/var/folders/"]
    assert offered(f"{base}/var/fo", policy) == [f"{base}/var/folders/"]
    assert offered(f"{base}/var/folders/", policy) == [f"{base}/var/folders/x/"]
    assert offered(f"{base}/var/folders/x/", policy) == [f"{base}/var/folders/x/logs/"]
    assert offered(f"{base}/var/s", policy) == []
    assert offered(f"{base}/var/folders/y/", policy) == []


def test_a_root_that_is_itself_a_symlink_is_offered_by_its_name(tmp_path: Path) -> None:
    base = tmp_path.resolve()
    (base / "real" / "data").mkdir(parents=True)
    (base / "link").symlink_to(base / "real")
    policy = PathPolicy.of_operator([str(base / "link")])
    assert offered(f"{base}/l", policy) == [f"{base}/link/"]
    assert offered(f"{base}/link/", policy) == [f"{base}/link/data/"]


def test_a_client_root_given_through_a_symlink_is_offered_by_its_name_only_inside_the_operators(
    tmp_path: Path,
) -> None:
    base = tmp_path.resolve()
    (base / "srv" / "proj" / "src").mkdir(parents=True)
    (base / "other").mkdir()
    (base / "proj").symlink_to(base / "srv" / "proj")
    (base / "other-link").symlink_to(base / "other")
    policy = PathPolicy.of_operator([str(base / "srv")])
    names = [base / "proj", base / "other-link"]
    policy.narrow([base / "srv" / "proj", base / "other"], named=names)
    assert offered(f"{base}/", policy) == [f"{base}/proj/", f"{base}/srv/"]
    assert offered(f"{base}/proj/", policy) == [f"{base}/proj/src/"]
    assert offered(f"{base}/other-link/", policy) == []


def test_a_directory_swapped_for_a_symlink_out_of_the_roots_once_checked_is_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory was listed by the path string after the check, so one swapped for a symlink in
    between was followed, and the names outside were offered once it was swapped back before each was
    checked; it is now listed through a descriptor opened without following a symlink: refused."""
    base = tmp_path.resolve()
    inside, outside = base / "inside", base / "outside"
    (inside / "logs").mkdir(parents=True)
    (inside / "logs" / "app.log").write_bytes(b"")
    (outside / "secret-name").mkdir(parents=True)
    policy = PathPolicy.of_operator([str(inside)])
    resolve = PathPolicy.resolve

    def swapped(self: PathPolicy, raw: str) -> Path:
        """Another user's swaps: out once the directory is checked, and back before any name in it is."""
        if raw != str(inside / "logs") and (inside / "logs").is_symlink():
            (inside / "logs").unlink()
            (inside / "kept").rename(inside / "logs")
        real = resolve(self, raw)
        if raw == str(inside / "logs"):
            (inside / "logs").rename(inside / "kept")
            (inside / "logs").symlink_to(outside)
        return real

    assert offered(f"{inside}/logs/", policy) == [f"{inside}/logs/app.log"]
    monkeypatch.setattr(PathPolicy, "resolve", swapped)
    assert offered(f"{inside}/logs/", policy) == []


def test_a_symlink_listed_is_offered_as_what_it_leads_to_only_inside_the_roots(tmp_path: Path) -> None:
    base = tmp_path.resolve()
    inside, outside = base / "inside", base / "outside"
    (inside / "data").mkdir(parents=True)
    (inside / "file").write_bytes(b"")
    outside.mkdir()
    (inside / "to-data").symlink_to(inside / "data")
    (inside / "to-file").symlink_to(inside / "file")
    (inside / "to-outside").symlink_to(outside)
    policy = PathPolicy.of_operator([str(inside)])
    assert offered(f"{inside}/", policy) == [
        f"{inside}/data/",
        f"{inside}/file",
        f"{inside}/to-data/",
        f"{inside}/to-file",
    ]
    assert complete_path(f"{inside}/", "directory", policy)[0] == [f"{inside}/data/", f"{inside}/to-data/"]


def test_a_name_that_is_not_printable_is_never_offered(tmp_path: Path) -> None:
    """A completion is inserted into the client's prompt as it is: ESC, a newline or U+202E there would
    drive its terminal or reorder what the user reads; a name that is not UTF-8 would come back as
    ``\\xNN`` text, which names another file."""
    base = tmp_path.resolve()
    for name in ("plain", "esc\x1b]0;x\x07", "line\nbreak", "rtl\u202etxt"):
        (base / name).mkdir()
    os.mkdir(os.fsencode(base) + b"/bad\xff")
    policy = PathPolicy.of_operator([str(base)])
    assert offered(f"{base}/", policy) == [f"{base}/plain/"]
