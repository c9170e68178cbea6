"""A FUSE filesystem whose directory ``busy`` refuses to be opened with EMFILE, as a FUSE daemon out of its
own descriptors (or any filesystem with a reason of its own) answers: a test of how the walk reads that
error. Run by a Python that has ``fusepy`` (Debian's python3-fusepy): ``python3 fuse_refusing.py MOUNTPOINT``;
it prints ``ready`` once the kernel has initialised the mount, and serves until unmounted.

Tree: ``f`` (4 bytes), ``ok/a`` (5 bytes), ``ok/refused`` (6 bytes, whose open EMFILE refuses too),
``busy/b`` (never reached); ``unlisted`` is in no listing, and looking it up answers EMFILE. With
``--eio``: also ``eio/c``, where ``eio`` opens but listing it answers EIO (a disk that fails under it).
"""

from __future__ import annotations

import errno
import stat
import sys
from typing import Any

from fusepy import FUSE, FuseOSError, Operations  # type: ignore[import-not-found]

DIRS = {"/": ["ok", "busy", "f"], "/ok": ["a", "refused"], "/busy": ["b"]}
FILES = {"/f": b"top\n", "/ok/a": b"okay\n", "/ok/refused": b"never\n", "/busy/b": b"hidden\n"}
REFUSED = frozenset({"/busy", "/ok/refused"})
UNLISTED = "/unlisted"


class Refusing(Operations):  # type: ignore[misc]
    def init(self, path: str) -> None:
        print("ready", flush=True)

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        if path == UNLISTED:
            raise FuseOSError(errno.EMFILE)
        times = {"st_ctime": 0, "st_mtime": 0, "st_atime": 0}
        if path in DIRS:
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, "st_size": 4096, **times}
        if path in FILES:
            return {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1, "st_size": len(FILES[path]), **times}
        raise FuseOSError(errno.ENOENT)

    def opendir(self, path: str) -> int:
        if path in REFUSED:
            raise FuseOSError(errno.EMFILE)
        return 0

    def open(self, path: str, flags: int) -> int:
        if path in REFUSED:
            raise FuseOSError(errno.EMFILE)
        return 0

    def readdir(self, path: str, fh: Any) -> list[str]:
        if path == "/eio":
            raise FuseOSError(errno.EIO)
        return [".", "..", *DIRS[path]]

    def read(self, path: str, size: int, offset: int, fh: Any) -> bytes:
        return FILES[path][offset : offset + size]


if __name__ == "__main__":
    if "--eio" in sys.argv[2:]:
        DIRS["/"].append("eio")
        DIRS["/eio"] = ["c"]
        FILES["/eio/c"] = b"unseen\n"
    FUSE(Refusing(), sys.argv[1], foreground=True, nothreads=True)
