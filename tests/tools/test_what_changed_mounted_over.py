"""what_changed against a baseline of a tree on which, since, another filesystem was mounted over a
directory (a real tmpfs, in a private mount namespace): with one_file_system the walk does not cross it,
so the directory and what the baseline recorded below it were not looked at, neither removed nor
unreadable, and the answer says another filesystem is mounted there now."""

from __future__ import annotations

from tests.loopfs import in_private_namespace, needs_loop_mounts

_CHILD = """
import json, os, subprocess, sys, time
from pathlib import Path
import anyio
from sysmcp.history import state
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.hash_tree import INPUT_SCHEMA, handle
from tests.harness import call_tool, tool_context
work = Path(sys.argv[1])
tree = work / "tree"
(tree / "etc" / "cron.d").mkdir(parents=True)
(tree / "etc" / "passwd").write_bytes(b"root:x:0:0\\n")
(tree / "etc" / "cron.d" / "job").write_bytes(b"* * * * * root true\\n")
(tree / "etc" / "cron.d" / "link").symlink_to("../passwd")
state.configure(work / "state", time.time)
async def main():
    await handle(validate_arguments(INPUT_SCHEMA, {"path": str(tree), "baseline": True}), tool_context())
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(tree / "etc" / "cron.d")], check=True)
    output = await call_tool("what_changed", tool_context(progress_token="w"), path=str(tree), since="1h")
    subprocess.run(["umount", str(tree / "etc" / "cron.d")], check=True)
    return output.text, output.structured["integrity"]
text, integrity = anyio.run(main)
print(json.dumps({"text": text, "integrity": integrity}))
"""


@needs_loop_mounts("mount")
def test_a_directory_mounted_over_since_the_baseline_is_said_so_not_unreadable_and_its_files_not_removed() -> (
    None
):
    seen = in_private_namespace(["-c", _CHILD], "sysmcp-mounted-over-", 120)
    text, integrity = seen["text"], seen["integrity"]
    assert "cannot be listed now" not in text and "removed:" not in text, text
    assert integrity["removed"] == 0 and integrity["unreadable"] == 0, integrity
    assert integrity["mounted_over"] == 3, integrity
    assert "another filesystem is mounted on it now, not crossed" in text, text
    assert (
        "not looked at: " in text
        and "etc/cron.d/job (another filesystem is mounted over its directory now)" in text
    ), text


_FILE_AND_NESTED = """
import json, subprocess, sys, time
from pathlib import Path
import anyio
from sysmcp.history import state
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.hash_tree import INPUT_SCHEMA, handle
from tests.harness import call_tool, tool_context
work = Path(sys.argv[1])
def mount(*args):
    subprocess.run(["mount", *map(str, args)], check=True)
async def compared(name, mount_since):
    tree = work / name
    (tree / "etc" / "cron.d").mkdir(parents=True)
    (tree / "etc" / "passwd").write_bytes(b"root:x:0:0\\n")
    (tree / "etc" / "cron.d" / "job").write_bytes(b"* * * * * root true\\n")
    state.configure(work / (name + "-state"), time.time)
    await handle(validate_arguments(INPUT_SCHEMA, {"path": str(tree), "baseline": True}), tool_context())
    mount_since(tree)
    output = await call_tool("what_changed", tool_context(progress_token="w"), path=str(tree), since="1h")
    return output.structured["integrity"]
def file_bound(tree):
    source = work / "source"
    source.mkdir()
    mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", source)
    (source / "passwd").write_bytes(b"evil::0:0\\n")
    mount("--bind", source / "passwd", tree / "etc" / "passwd")
def nested(tree):
    mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", tree / "etc")
    (tree / "etc" / "cron.d").mkdir()
    mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", tree / "etc" / "cron.d")
async def main():
    return {"file": await compared("file", file_bound), "nested": await compared("nested", nested)}
print(json.dumps(anyio.run(main)))
"""


@needs_loop_mounts("mount")
def test_a_file_bind_mounted_over_and_nested_mounts_are_not_looked_at_not_removed() -> None:
    """A file another filesystem's file is bind-mounted on is a mount point the walk does not cross (it
    is not hashed: what it shows is another file); mounts stacked below a mount are all not looked at."""
    seen = in_private_namespace(["-c", _FILE_AND_NESTED], "sysmcp-mounted-over-", 120)
    file, nested = seen["file"], seen["nested"]
    assert (file["removed"], file["content_changed"], file.get("mounted_over")) == (0, 0, 1), file
    assert file["examples"]["mounted_over"][0].endswith("/etc/passwd"), file
    assert (nested["removed"], nested["unreadable"], nested.get("mounted_over")) == (0, 0, 4), nested
