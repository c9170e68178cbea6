"""Looking at many names of one directory with one listing instead of a ``stat`` each.

Why: a checksum manifest names a million files, most of them next to many others of the same
directory. A ``stat`` per name walks the whole path in the kernel and, with the ``open`` that follows,
walks it twice. One listing of the directory gives every entry's type and inode number (``d_type``,
``d_ino``), and an ``openat`` relative to the directory's descriptor walks one component.

The listing is the look: a name is taken this way only if its entry says regular file (an entry of
unknown type is ``lstat``-ed). The caller opens it relative to ``ListedDirectory.fd`` with
``_checksums.OPEN_AT`` (``O_NOFOLLOW``, ``O_NONBLOCK``, ``O_NOCTTY``) and checks on the descriptor
that it is a regular file with the inode the entry named, so a name swapped for a FIFO or a symlink
since the listing cannot block the open and is never judged by what was read.

Why bounded: listing a directory of a million entries to find three names would cost more than three
``stat`` calls; a name not reached within ``LISTING_COST`` entries per name wanted is looked at by itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: Entries read per name wanted, at most: past that, the names not yet found are looked at one by one.
LISTING_COST = 3
_SLACK = 64  # entries any listing may read besides ('.', '..', a few strangers)
#: The directory itself is opened by its path, symlinks followed on the way, as ``sha256sum`` opens a
#: manifest's names; O_DIRECTORY refuses anything else, O_NONBLOCK is for the odd filesystem.
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(slots=True)
class ListedDirectory:
    """An open directory and what its listing said of the names wanted."""

    fd: int
    dev: int  # the directory's device: a file in it opened through ``fd`` must be on the same one
    regular: dict[str, int]  # name → inode, for the wanted names whose entry said regular file

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


#: What a directory not listed (or not listable) gives: no name, so each is looked at by itself.
NOT_LISTED = ListedDirectory(-1, 0, {})


def list_for(path: bytes, names: int) -> ListedDirectory:
    """Open the directory ``path`` and list its regular files' names (``str``, as ``os.scandir`` gives
    them) and inode numbers, for a caller that wants ``names`` names of it; ``NOT_LISTED`` if it
    cannot be opened or listed."""
    try:
        fd = os.open(path, _DIRECTORY)
    except OSError:
        return NOT_LISTED
    regular: dict[str, int] = {}
    most = LISTING_COST * names + _SLACK
    try:
        dev = os.fstat(fd).st_dev
        with os.scandir(fd) as entries:
            for seen, entry in enumerate(entries, 1):
                try:
                    if entry.is_file(follow_symlinks=False):
                        regular[entry.name] = entry.inode()
                except OSError:
                    pass  # an entry of unknown type that vanished: looked at by itself, if wanted
                if seen >= most:
                    break
    except OSError:
        os.close(fd)
        return NOT_LISTED
    return ListedDirectory(fd, dev, regular)
