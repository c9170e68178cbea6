"""A bind mount of a directory above it, made after the walk read the mount table (so not skipped by
name): the walk meets a directory it is inside of already. Walked, its tree was counted twice (du counts
it once and warns of the cycle)."""

from __future__ import annotations

import pytest

from tests.loopfs import in_private_namespace, needs_loop_mounts

WALK_WHILE_A_LOOP_IS_MADE = """
import json, os, subprocess, sys
from sysmcp.engine.walk import Scanner, ScanConfig, SkipCounter, SubtreeTotals, WalkOptions

root = sys.argv[-1]
os.makedirs(os.path.join(root, "a", "loop"))
open(os.path.join(root, "a", "trigger"), "wb").write(b"x" * 1000)
made = []

def on_file(name, st):
    # Called while "a" is read, before its subdirectory "loop" is entered: the loop appears mid-walk.
    if name == "trigger" and not made:
        subprocess.run(["mount", "--bind", root, os.path.join(root, "a", "loop")], check=True)
        made.append(True)
    return True

steps = []
def cancel():
    steps.append(1)
    if len(steps) > 5000:  # the walk's budget: a loop walked is one that never ends
        from sysmcp.engine.walk import ScanStopped
        raise ScanStopped("budget")

skipped = SkipCounter()
scanner = Scanner(root.encode(), WalkOptions(one_file_system=False), skipped, cancel,
                  config=ScanConfig(on_file=on_file))
events = list(scanner.events())
top = [e for e in events if isinstance(e, SubtreeTotals) and e.relative == ""][0]
print(json.dumps([scanner.stopped, skipped.as_dict(), top.files, top.dirs]))
"""


@needs_loop_mounts("mount")
def test_a_directory_loop_made_mid_walk_is_skipped_not_counted_twice() -> None:
    stopped, skipped, files, dirs = in_private_namespace(["-c", WALK_WHILE_A_LOOP_IS_MADE], "sysmcp-loop-")
    assert (stopped, skipped) == (None, {"directory_loop": 1})
    assert (files, dirs) == (1, 2)  # a/trigger; the root and a


LOOP_AFTER_A_SAME_NUMBER_ON_ANOTHER_FILESYSTEM = """
import json, os, subprocess, sys
from sysmcp.engine.walk import Scanner, ScanConfig, SkipCounter, SubtreeTotals, WalkOptions

root = sys.argv[-1]
subprocess.run(["mount", "-t", "tmpfs", "one", root], check=True)
a = os.path.join(root, "a")
os.mkdir(a)
os.mkdir(os.path.join(a, "p"))
os.mkdir(os.path.join(a, "q"))
open(os.path.join(a, "big"), "wb").write(b"x" * 1000)
# The walk pops a directory's subdirectories from the end of its listing: the last one listed is walked
# first. It becomes the other filesystem, the first one listed holds the trigger and the loop.
first, last = (os.path.join(a, name) for name in os.listdir(a) if name != "big")
subprocess.run(["mount", "-t", "tmpfs", "two", last], check=True)
# A fresh tmpfs numbers its inodes from 1 as the first one did: a chain of directories there has every
# small number, those of root and of a among them, on another device.
deep = last
for _ in range(20):
    deep = os.path.join(deep, "d")
    os.mkdir(deep)
assert os.stat(a).st_ino in {os.stat(deep).st_ino - i for i in range(20)}
os.mkdir(os.path.join(first, "loop"))
open(os.path.join(first, "trigger"), "wb").write(b"t")
made = []

def on_file(name, st):
    # Read in ``first``, after the other filesystem's chain was walked and left: the loop appears now.
    if name == "trigger" and not made:
        subprocess.run(["mount", "--bind", a, os.path.join(first, "loop")], check=True)
        made.append(True)
    return True

skipped = SkipCounter()
scanner = Scanner(root.encode(), WalkOptions(one_file_system=False), skipped,
                  config=ScanConfig(on_file=on_file))
events = list(scanner.events())
top = [e for e in events if isinstance(e, SubtreeTotals) and e.relative == ""][0]
print(json.dumps([bool(made), scanner.stopped, skipped.as_dict(), top.files, top.dirs]))
"""


@needs_loop_mounts("mount")
def test_a_loop_is_seen_after_a_directory_of_the_same_inode_number_on_another_filesystem_was_left() -> None:
    """The walk remembers the inode numbers it is inside of: leaving a directory of another filesystem
    that has the number of one above it must not forget that one."""
    made, stopped, skipped, files, dirs = in_private_namespace(
        ["-c", LOOP_AFTER_A_SAME_NUMBER_ON_ANOTHER_FILESYSTEM], "sysmcp-loop-"
    )
    assert made
    assert (stopped, skipped) == (None, {"directory_loop": 1})
    assert (files, dirs) == (2, 24)  # a/big and the trigger; the root, a, the two below it and 20 d


LOOP_IN_A_HANDED_OUT_SUBTREE = """
import json, os, subprocess, sys
from sysmcp.engine.walk import Listing, Scanner, SkipCounter, WalkOptions

where, root = sys.argv[1], sys.argv[2]
c = os.path.join(root, "a", "c")
os.makedirs(os.path.join(c, "d"))
open(os.path.join(root, "a", "h"), "wb").write(b"h")
open(os.path.join(c, "g"), "wb").write(b"g")
os.mkdir(os.path.join(root, "b"))
open(os.path.join(root, "b", "f"), "wb").write(b"f" * 1000)
files = []

def take(event):
    if isinstance(event, Listing):
        files.extend(f"{event.relative}/{name}" for name, _ in event.files)

skipped = SkipCounter()
scanner = Scanner(root.encode(), WalkOptions(), skipped)
walk = scanner.events()
for event in walk:
    take(event)
    if event.relative == "a" and where == "handed_out":  # c not read yet: d is listed as the loop
        subprocess.run(["mount", "--bind", root, os.path.join(c, "d")], check=True)
    if event.relative == "a/c":
        break  # c read, d waiting on the stack: handed out to another scanner, as a parallel walk does
if where == "below":
    os.mkdir(os.path.join(c, "d", "loop"))
    subprocess.run(["mount", "--bind", root, os.path.join(c, "d", "loop")], check=True)
subtrees, listings = scanner.detach(8, 1)
handed_out = [subtree.relative for subtree in subtrees]
for listing in listings:
    take(listing)
for subtree in subtrees:
    for event in scanner.spawn(subtree, skipped, lambda: None, None).events():
        take(event)
for event in walk:
    take(event)
scanner.close()
print(json.dumps([sorted(files), skipped.as_dict(), handed_out]))
"""


@needs_loop_mounts("mount")
@pytest.mark.parametrize("where", ["below", "handed_out"])
def test_a_loop_in_a_subtree_handed_out_to_another_scanner_is_seen(where: str) -> None:
    """A parallel walk hands waiting subdirectories to other scanners: each must know every directory
    above its subtree, not only the one that handed it out, or a loop to the root (below the subtree,
    or the subtree itself) is walked again."""
    files, skipped, handed_out = in_private_namespace(
        ["-c", LOOP_IN_A_HANDED_OUT_SUBTREE, where], "sysmcp-loop-"
    )
    assert ("a/c/d" in handed_out) == (where == "below")  # the loop itself is not handed out
    assert skipped == {"directory_loop": 1}
    assert files == ["a/c/g", "a/h", "b/f"]


TOTALS_WHILE_A_LOOP_IS_MADE = """
import json, os, subprocess, sys
from sysmcp.engine.walk import walk_totals

root = sys.argv[-1]
os.makedirs(os.path.join(root, "a", "b", "loop"))
open(os.path.join(root, "a", "b", "f"), "wb").write(b"x" * 1000)
made = []

def cancel():
    # First asked once ``a`` is read, before ``b`` is: ``b/loop`` is the root when ``b`` is listed.
    if not made:
        subprocess.run(["mount", "--bind", root, os.path.join(root, "a", "b", "loop")], check=True)
        made.append(True)

whole, parts, stopped, skipped = walk_totals(root, 30.0, lambda entries, apparent: None, cancel)
print(json.dumps([stopped, skipped.as_dict(), whole.entries, parts["a"].entries]))
"""


@needs_loop_mounts("mount")
def test_a_totals_walk_skips_a_loop_made_mid_walk_as_the_scanner_does() -> None:
    """``walk_totals`` (container_usage's reconciliation) walked into the bind mount of its root made
    below it: the root's tree counted twice (a bind mount does not carry the one made on itself)."""
    stopped, skipped, entries, in_a = in_private_namespace(
        ["-c", TOTALS_WHILE_A_LOOP_IS_MADE], "sysmcp-loop-"
    )
    assert (stopped, skipped) == (None, {"directory_loop": 1})
    assert (entries, in_a) == (5, 3)  # the root, a, a/b, a/b/f and the name a/b/loop: nothing below it
