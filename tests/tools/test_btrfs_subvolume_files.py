"""Files on btrfs carry their subvolume's anonymous st_dev, never the number mountinfo gives the
filesystem: on a real loop btrfs with nested subvolumes, in a private mount namespace, every tool that
matches a file against the mount table still finds the filesystem it is on (deleted_open_files,
disk_io, reclaim's check before truncating, disk_usage explain, hash_tree's trusted inode numbers)."""

from __future__ import annotations

from typing import Any

from tests.loopfs import in_private_namespace, needs_loop_mounts

_CHILD = r"""
import json, os, subprocess, sys, textwrap
from pathlib import Path
import anyio
from sysmcp.engine.mounts import parse_mountinfo
from sysmcp.engine.procs import device_mount_points, link_confined
from sysmcp.engine.procs._diskio import files_written
from tests.harness import call_tool, tool_context
from tests.loopfs import loop_mount
work = Path(sys.argv[1])
top = work / "top"
loop_mount(work / "btrfs.img", top, 256 << 20, ["mkfs.btrfs", "-q", "-f"])
for sub in ("sub", "sub/inner"):
    subprocess.run(["btrfs", "subvolume", "create", str(top / sub)], check=True, capture_output=True)
HOLDER = textwrap.dedent('''
    import ctypes, os, sys
    held = []
    for name in sys.argv[1:3]:  # written, then deleted, still open for writing
        handle = open(name, "wb")
        handle.write(os.urandom(1 << 20)); handle.flush(); os.fsync(handle.fileno())
        os.unlink(name)
        held.append(handle)
    with open(sys.argv[3], "wb+") as handle:  # mapped only (libc's mmap keeps no descriptor), then deleted
        handle.write(os.urandom(1 << 20)); handle.flush()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        assert libc.mmap(None, 1 << 20, 1, 1, handle.fileno(), 0) not in (None, ctypes.c_void_p(-1).value)
    os.unlink(sys.argv[3])
    print("holding", flush=True)
    sys.stdin.read()
''')
names = [top / "top.log", top / "sub" / "inner" / "app.log", top / "sub" / "mapped.bin"]
holder = subprocess.Popen(
    [sys.executable, "-c", HOLDER, *map(str, names)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
)
assert holder.stdout.readline() == "holding\n"
async def deleted(roots, **args):
    output = await call_tool("deleted_open_files", tool_context(roots), top_n=20, **args)
    return {"text": output.text, **output.structured}
with open("/proc/self/mountinfo", "rb") as handle:
    table = parse_mountinfo(handle.read())
(mount,) = [m for m in table.mounts if m.mount_point == str(top)]
fd_dir = f"/proc/{holder.pid}/fd"
links = [f"{fd_dir}/{fd}".encode() for fd in sorted(map(int, os.listdir(fd_dir)))]
links = [link for link in links if os.readlink(link).endswith(b" (deleted)")]
answers = {
    "st_devs": sorted({os.stat(p).st_dev for p in (top, top / "sub", top / "sub" / "inner")}),
    "confined": anyio.run(deleted, [top]),
    "everywhere": anyio.run(deleted, None),
    "inner": anyio.run(lambda: deleted(None, path=str(top / "sub" / "inner"))),
    "written": [(f.path, f.device) for f in files_written([holder.pid])[holder.pid][0]],
    "device": os.path.basename(os.path.realpath(mount.device)),
    "points": device_mount_points(table),
    "link_confined": [link_confined(link, os.stat(link).st_dev) for link in links],
    "top": str(top),
    "names": list(map(str, names)),
}
holder.kill()
print(json.dumps(answers))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_deleted_and_written_files_in_btrfs_subvolumes_are_found_on_their_filesystem() -> None:
    found: dict[str, Any] = in_private_namespace(["-c", _CHILD], "sysmcp-btrfs-subvol-", 180)
    top, names = found["top"], found["names"]
    assert len(found["st_devs"]) == 3  # each subvolume its own st_dev: the case this is about
    confined = found["confined"]  # a root on the btrfs mount: its deleted files are inside it
    assert sorted(f["path"] for f in confined["files"]) == sorted(names), confined["text"]
    assert [(e["mount_point"], e["files"]) for e in confined["filesystems"]] == [(top, 3)]
    assert [f["mapped_only"] for f in confined["files"] if f["path"] == names[2]] == [True]
    everywhere = found["everywhere"]  # no roots: counted on their filesystem, not "on no filesystem"
    assert {f["path"]: f["mount_point"] for f in everywhere["files"] if f["path"] in names} == dict.fromkeys(
        names, top
    )
    inner = found["inner"]  # the filesystem holding a path in a nested subvolume is the whole btrfs
    assert sorted(f["path"] for f in inner["files"]) == sorted(names), inner["text"]
    assert sorted(found["written"]) == sorted([name, found["device"]] for name in names[:2])
    assert top in found["points"][found["device"]]
    assert found["link_confined"] == [True, True]  # what reclaim asks again before truncating


_EXPLAIN = r"""
import json, os, subprocess, sys
from pathlib import Path
import anyio
from tests.harness import call_tool, tool_context
from tests.loopfs import loop_mount
work = Path(sys.argv[1])
top = work / "top"
loop_mount(work / "btrfs.img", top, 512 << 20, ["mkfs.btrfs", "-q", "-f"])
subprocess.run(["btrfs", "subvolume", "create", str(top / "sub")], check=True, capture_output=True)
(top / "sub" / "kept.bin").write_bytes(os.urandom(20 << 20))
gone = top / "sub" / "gone.log"
gone.write_bytes(os.urandom(30 << 20))
holder = subprocess.Popen(
    [sys.executable, "-c", "import sys; f = open(sys.argv[1]); print('open', flush=True); sys.stdin.read()", str(gone)],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
)
assert holder.stdout.readline() == "open\n"
gone.unlink()
subprocess.run(["sync"], check=True)
async def explain():
    output = await call_tool("disk_usage", tool_context(), path=str(top), explain=True, timeout_s=60)
    part = output.structured["explain"]
    return {"deleted": part["deleted_open"]["bytes"], "remainder": part["remainder"]["bytes"], "text": output.text}
answers = {"quotas off": anyio.run(explain)}
subprocess.run(["btrfs", "quota", "enable", str(top)], check=True, capture_output=True)
subprocess.run(["btrfs", "quota", "rescan", "-w", str(top)], check=True, capture_output=True)
answers["quotas on"] = anyio.run(explain)
holder.kill()
print(json.dumps(answers))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_explain_counts_a_deleted_file_held_open_in_another_subvolume_once() -> None:
    """Without quotas its bytes are in part 2 (btrfs filesystem du sizes the subvolume by its names);
    with quotas its subvolume's exclusive bytes (part 5) hold it already, and part 2 leaves it out."""
    found: dict[str, Any] = in_private_namespace(["-c", _EXPLAIN], "sysmcp-btrfs-explain-", 300)
    off, on = found["quotas off"], found["quotas on"]
    assert off["deleted"] == 30 << 20 and abs(off["remainder"]) < 8 << 20, off["text"]
    assert on["deleted"] == 0 and abs(on["remainder"]) < 8 << 20, on["text"]


_SWAP = r"""
import json, os, subprocess, sys
from pathlib import Path
from tests.engine.hashing.test_treehash import hash_with_a_swap
from tests.loopfs import loop_mount
work = Path(sys.argv[1])
top = work / "top"
loop_mount(work / "btrfs.img", top, 256 << 20, ["mkfs.btrfs", "-q", "-f"])
subprocess.run(["btrfs", "subvolume", "create", str(top / "sub")], check=True, capture_output=True)
answers = {}
for directory in (top, top / "sub"):
    (directory / "victim").write_bytes(b"original")
    (directory / "other").write_bytes(b"swapped in")
    moved = []
    def swap():
        if not moved:
            moved.append(True)
            os.rename(directory / "other", directory / "victim")  # a new inode under the listed name
    result = hash_with_a_swap(directory, swap)
    answers[directory.name] = [result.files, sorted([n.decode(), why] for n, why in result.unreadable)]
print(json.dumps(answers))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_hash_tree_refuses_a_file_renamed_over_after_the_listing_on_btrfs_as_on_ext4() -> None:
    """btrfs entries carry stat's inode numbers (a trusted type), though its st_dev is no mount's."""
    found: dict[str, Any] = in_private_namespace(["-c", _SWAP], "sysmcp-btrfs-swap-", 120)
    refused = [
        0,
        [
            ["other", "vanished before it could be hashed"],
            ["victim", "the file was replaced while it was being opened"],
        ],
    ]
    assert found == {"top": refused, "sub": refused}


_SUBVOLUME_MOUNTS = r"""
import json, subprocess, sys
from pathlib import Path
import anyio
from tests.harness import call_tool, tool_context
from tests.loopfs import loop_mount
work = Path(sys.argv[1])
image, top, root, home = work / "btrfs.img", work / "top", work / "r", work / "home"
loop_mount(image, top, 256 << 20, ["mkfs.btrfs", "-q", "-f"])
for name in ("root", "home"):
    subprocess.run(["btrfs", "subvolume", "create", str(top / name)], check=True, capture_output=True)
subprocess.run(["umount", str(top)], check=True)
for point, subvolume in ((root, "root"), (home, "home")):  # as Fedora mounts / and /home: none shows the top
    point.mkdir()
    subprocess.run(["mount", "-o", f"loop,subvol={subvolume}", str(image), str(point)], check=True)
gone = home / "gone.log"
gone.write_bytes(b"x" * (1 << 20))
holder = subprocess.Popen(
    [sys.executable, "-c", "import sys; f = open(sys.argv[1]); print('open', flush=True); sys.stdin.read()", str(gone)],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
)
assert holder.stdout.readline() == "open\n"
gone.unlink()
async def deleted():
    output = await call_tool("deleted_open_files", tool_context(), top_n=50)
    return {"text": output.text, **output.structured}
answer = anyio.run(deleted)
holder.kill()
print(json.dumps({"answer": answer, "gone": str(gone), "home": str(home)}))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_a_deleted_file_in_a_btrfs_subvolume_mounted_on_its_own_is_shown_on_that_mount() -> None:
    found: dict[str, Any] = in_private_namespace(["-c", _SUBVOLUME_MOUNTS], "sysmcp-btrfs-mounts-", 120)
    answer = found["answer"]
    assert [f["mount_point"] for f in answer["files"] if f["path"] == found["gone"]] == [found["home"]], (
        answer["text"]
    )
    assert found["home"] in [e["mount_point"] for e in answer["filesystems"]]


_RECLAIM = r"""
import json, os, subprocess, sys
from pathlib import Path
from sysmcp.reclaim import ApplyRequest, PlanRequest, apply_items, build_plan
from sysmcp.reclaim._classes import RootsLayout
from tests.loopfs import loop_mount
from tests.reclaim.test_reclaim import HOLDER
work = Path(sys.argv[1])
top = work / "top"
loop_mount(work / "btrfs.img", top, 256 << 20, ["mkfs.btrfs", "-q", "-f"])
subprocess.run(["btrfs", "subvolume", "create", str(top / "sub")], check=True, capture_output=True)
holder = subprocess.Popen(
    [sys.executable, "-c", HOLDER, str(top / "sub" / "app.log"), "3000000"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
)
disk = int(holder.stdout.readline())
scope = os.fsencode(top)
plan = build_plan(PlanRequest(layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(scope,)))
planned = [item.bytes for item in plan.items]
done = [
    [outcome.done for outcome in applied.outcomes]
    for applied in apply_items(ApplyRequest(plan, [item.id for item in plan.items], lambda p: p.startswith(scope)))
]
sizes = [os.stat(item.entries[0].path).st_size for item in plan.items]
holder.kill()
from tests.reclaim.test_reclaim import maps_hidden_from_this_user
hidden = maps_hidden_from_this_user()
print(json.dumps({"disk": disk, "planned": planned, "done": done, "sizes": sizes, "hidden": hidden}))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_reclaim_plans_and_truncates_a_deleted_file_held_open_in_a_btrfs_subvolume() -> None:
    found: dict[str, Any] = in_private_namespace(["-c", _RECLAIM], "sysmcp-btrfs-reclaim-", 120)
    assert found["planned"] == [found["disk"]]
    if found["hidden"]:  # some process here may map it unseen: reclaim truncates nothing (maps_unreadable)
        assert found["done"] == [[False]] and found["sizes"] == [3_000_000]
    else:
        assert found["done"] == [[True]] and found["sizes"] == [0]


_OTHER_NAMESPACE = r"""
import json, os, subprocess, sys
from pathlib import Path
import anyio
from sysmcp.engine.procs._diskio import files_written
from sysmcp.engine.procs._openfiles import MountView
from tests.harness import call_tool, tool_context
from tests.loopfs import loop_mount
work = Path(sys.argv[1])
top = work / "top"
loop_mount(work / "btrfs.img", top, 256 << 20, ["mkfs.btrfs", "-q", "-f"])
subprocess.run(["btrfs", "subvolume", "create", str(top / "sub")], check=True, capture_output=True)
gone = top / "sub" / "gone.log"
HOLD = "import os, sys; f = open(sys.argv[1], 'wb'); f.write(os.urandom(1 << 20)); f.flush(); os.unlink(sys.argv[1]); print('open', flush=True); sys.stdin.read()"
holder = subprocess.Popen(  # a mount namespace of its own, as a systemd service's (PrivateTmp=) or a container's
    ["unshare", "-m", "--propagation", "private", sys.executable, "-c", HOLD, str(gone)],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
)
assert holder.stdout.readline() == "open\n"
async def deleted():
    output = await call_tool("deleted_open_files", tool_context(), top_n=50)
    return {"text": output.text, **output.structured}
answer = anyio.run(deleted)
written = [(f.path, f.device) for f in files_written([holder.pid])[holder.pid][0]]
device = os.path.basename(os.path.realpath(next(m.device for m in MountView().table.mounts if m.mount_point == str(top))))
holder.kill()
print(json.dumps({"answer": answer, "gone": str(gone), "top": str(top), "written": written, "device": device}))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_a_deleted_btrfs_file_held_from_another_mount_namespace_is_shown_on_its_filesystem() -> None:
    """The mount it was opened through is not in our table (its namespace's copy has an id of its own):
    its filesystem is read from the holder's mountinfo, not left 'on no filesystem'."""
    found: dict[str, Any] = in_private_namespace(["-c", _OTHER_NAMESPACE], "sysmcp-btrfs-ns-", 120)
    answer = found["answer"]
    assert [f["mount_point"] for f in answer["files"] if f["path"] == found["gone"]] == [found["top"]], (
        answer["text"]
    )
    assert found["top"] in [e["mount_point"] for e in answer["filesystems"]], answer["text"]
    assert found["written"] == [[found["gone"], found["device"]]]  # disk_io names its block device


_BIND_LOOP = r"""
import json, os, subprocess, sys
from pathlib import Path
from sysmcp.engine.walk._walk import Scanner, SkipCounter, SubtreeTotals, WalkOptions
from tests.loopfs import loop_mount
work = Path(sys.argv[1])
top = work / "top"
loop_mount(work / "btrfs.img", top, 256 << 20, ["mkfs.btrfs", "-q", "-f"])
subprocess.run(["btrfs", "subvolume", "create", str(top / "sub")], check=True, capture_output=True)
(top / "sub" / "file").write_bytes(b"x" * 100_000)
answers = {}
for root in (top, top / "sub"):  # the filesystem's top, and a subvolume: each bound inside itself
    (root / "d" / "loop").mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(root), str(root / "d" / "loop")], check=True)
    skipped = SkipCounter()
    events = list(Scanner(bytes(root), WalkOptions(one_file_system=False), skipped).events())
    (totals,) = [e for e in events if isinstance(e, SubtreeTotals) and e.relative == ""]
    du = subprocess.run(["du", "-s", "--block-size=1", str(root)], capture_output=True, text=True, check=True)
    answers[root.name] = [skipped.as_dict(), totals.files, totals.disk, int(du.stdout.split()[0])]
    subprocess.run(["umount", str(root / "d" / "loop")], check=True)
print(json.dumps(answers))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_a_bind_mount_of_a_btrfs_directory_above_it_is_a_directory_loop_as_on_other_filesystems() -> None:
    """mountinfo's device number of a btrfs mount is no st_dev of its directories (each subvolume has its
    own): the loop is still seen, and the tree counted once, as du -s counts it."""
    found: dict[str, Any] = in_private_namespace(["-c", _BIND_LOOP], "sysmcp-btrfs-loop-", 180)
    for skipped, files, disk, du in found.values():
        assert skipped == {"directory_loop": 1} and files == 1 and disk == du, found
