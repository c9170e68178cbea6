"""container_usage's walk of the data root enters the directories bound on themselves below it (Podman's
overlay/): every one of them, nested ones too, and never what another mount put over one."""

from __future__ import annotations

from typing import Any

from tests.loopfs import in_private_namespace, needs_loop_mounts

_CHILD = r"""
import json, subprocess, sys
from pathlib import Path
from sysmcp.engine.containers._survey import _walk

def bind_on_itself(path):
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)

root = Path(sys.argv[1]) / "root"
(root / "a" / "b").mkdir(parents=True)
(root / "a" / "in-a").write_bytes(b"a" * 200_000)
(root / "a" / "b" / "in-b").write_bytes(b"b" * 400_000)
bind_on_itself(root / "a")
bind_on_itself(root / "a" / "b")
(root / "covered").mkdir()
(root / "covered" / "under").write_bytes(b"u" * 1000)
bind_on_itself(root / "covered")
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "none", str(root / "covered")], check=True)
(root / "covered" / "on-tmpfs").write_bytes(b"t" * 5_000_000)
(root / "m").mkdir()
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "none", str(root / "m")], check=True)
(root / "m" / "d").mkdir()
(root / "m" / "d" / "in-tmpfs").write_bytes(b"m" * 3_000_000)
bind_on_itself(root / "m" / "d")
(root / "other").mkdir()
(root / "elsewhere" / "d").mkdir(parents=True)
(root / "elsewhere" / "d" / "twice").write_bytes(b"e" * 2_000_000)
subprocess.run(["mount", "--bind", str(root / "elsewhere"), str(root / "other")], check=True)
bind_on_itself(root / "other" / "d")
walked = _walk(str(root), 60, lambda done, total: None, lambda: None)
print(json.dumps({"parts": {name: apparent for name, apparent, _ in walked.parts}, "stopped": walked.stopped}))
"""


@needs_loop_mounts("mount")
def test_nested_self_binds_are_each_walked_and_one_covered_by_another_mount_is_not() -> None:
    """a/b bound on itself inside a/ bound on itself: the walk of a/ meets b/ as a mount, so b/ is walked
    too (its 400 kB were missing). A tmpfs mounted over covered/, itself bound on itself: the walk of
    covered/ walked the tmpfs, and its 5 MB in memory were counted as the data root's. A directory bound on
    itself inside a tmpfs mounted below, or inside a directory bound there from elsewhere: walked, it counted
    the tmpfs's bytes, or the other directory's a second time."""
    answer: Any = in_private_namespace(["-c", _CHILD], "sysmcp-selfbind-", timeout=120)
    assert answer["stopped"] is None
    parts = answer["parts"]
    assert 600_000 <= parts["a"] < 700_000, parts
    assert parts.get("covered", 0) < 100_000, parts
    assert "m" not in parts, parts  # a tmpfs mounted below, with a directory bound on itself in it
    assert "other" not in parts, parts  # elsewhere/ bound at other/: its d/ is counted once, under elsewhere
    assert 2_000_000 <= parts["elsewhere"] < 2_100_000, parts
