"""Kernel-generated files (sysfs) say a size that is not their content: 4,096 bytes for an attribute of a
few. Like ``sha256sum``, every hashing engine hashes what such a file gives, and never calls it changed
while read for the size it says (it was refused by hash_tree, verify_checksums and file_sha256)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from sysmcp.engine.calls import never_cancelled, no_progress
from sysmcp.engine.hashing import (
    ALGORITHMS,
    FileRequest,
    Source,
    VerifyRequest,
    format_line,
    hash_file,
    verify,
)
from sysmcp.engine.hashing import _treehash as treehash
from sysmcp.engine.hashing._verify_request import Tuning
from sysmcp.engine.parallel import Sharing
from sysmcp.engine.walk import WalkOptions
from tests.profile import UNDER_POSIX_PROFILE

pytestmark = pytest.mark.skipif(
    UNDER_POSIX_PROFILE, reason="sysfs is Linux's: the portable profile, like macOS, has none"
)

#: Attributes that read the same twice and exist on most Linux kernels.
CANDIDATES = (
    "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size",
    "/sys/kernel/profiling",
    "/sys/power/state",
)


def attribute() -> tuple[Path, bytes]:
    """A sysfs file whose size says more than it gives, and what it gives."""
    for name in CANDIDATES:
        try:
            st, content = os.stat(name), Path(name).read_bytes()
        except OSError:
            continue
        if st.st_blocks == 0 and 0 < len(content) < st.st_size and Path(name).read_bytes() == content:
            return Path(name), content
    pytest.skip("no sysfs attribute here whose size says more than it gives")


def test_file_sha256_hashes_a_sysfs_attribute_as_sha256sum_does() -> None:
    path, content = attribute()
    hashed = hash_file(FileRequest(os.fsencode(path), str(path), str(path)), no_progress, never_cancelled)
    assert hashed.digest.changed is None
    assert hashed.digest.hexdigests["sha256"] == hashlib.sha256(content).hexdigest()


def test_hash_tree_puts_a_sysfs_attribute_in_the_manifest() -> None:
    path, content = attribute()
    result = treehash.hash_path(
        treehash.TreeRequest(
            os.fsencode(path),
            ALGORITHMS["sha256"],
            "gnu",
            WalkOptions(),
            timeout_s=60,
            keep_limit=1 << 20,
            first_lines=10,
            sharing=Sharing(processes=1),
            shown=str(path),
        ),
        no_progress,
        never_cancelled,
    )
    assert result.unreadable == [] and result.files == 1
    assert result.manifest is not None
    assert bytes(result.manifest) == format_line(
        os.fsencode(path.name), hashlib.sha256(content).hexdigest(), ALGORITHMS["sha256"]
    )


def test_verify_checksums_finds_a_sysfs_attribute_ok() -> None:
    path, content = attribute()
    text = f"{hashlib.sha256(content).hexdigest()}  {path}\n".encode()
    request = VerifyRequest(Source("(text)", data=text), b"/", threads=1, tuning=Tuning())
    result = verify(request, no_progress, never_cancelled)
    assert [(checked.status, checked.detail) for checked in result.checked] == [("OK", "")]


def test_a_manifest_that_reports_no_size_and_never_ends_is_refused_before_a_gib_is_held() -> None:
    """/proc/self/pagemap says 0 bytes and gives hundreds of GiB: the engine stops reading it at
    MAX_UNSIZED_MANIFEST (it read, and held, a whole GiB first), and the tool says what it is."""
    from sysmcp.engine.hashing._manifests import MAX_UNSIZED_MANIFEST, ManifestUnsized, open_manifest
    from sysmcp.tools.errors import words

    read: list[int] = []
    real_read = os.read

    def counted(fd: int, size: int) -> bytes:
        data = real_read(fd, size)
        read.append(len(data))
        return data

    source = Source("/proc/self/pagemap", path=b"/proc/self/pagemap")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "read", counted)
        with pytest.raises(ManifestUnsized) as refused:
            open_manifest(source)
    assert MAX_UNSIZED_MANIFEST < sum(read) <= 2 * MAX_UNSIZED_MANIFEST
    assert words(refused.value) == (
        "The manifest /proc/self/pagemap says it is empty yet gave more than 64.0 MiB when read: "
        "a kernel-generated file (such as /proc/*/pagemap) is no checksum manifest"
    )
