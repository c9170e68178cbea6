"""Hashing: the algorithms, checksum manifests, one file, a tree, and verifying a manifest.

This is the room's front door: other rooms import these names from here, never a private module.
"""

from sysmcp.engine.hashing._checksums import (
    ALGORITHM_NAMES,
    ALGORITHMS,
    BLAKE3,
    BLAKE3_THREADED,
    CHUNK,
    HASH_THREADS,
    MANIFEST_NAMES,
    OPEN_AT,
    Algorithm,
    KeptGrowing,
    Style,
    format_line,
    hash_fd,
)
from sysmcp.engine.hashing._filehash import FileHash, FileRequest, hash_file
from sysmcp.engine.hashing._manifests import (
    ManifestTooLarge,
    ManifestUnsized,
    NoEntries,
    NotAManifest,
    Source,
)
from sysmcp.engine.hashing._treehash import TreeHash, TreeRequest, hash_path
from sysmcp.engine.hashing._verdicts import Status, Verification
from sysmcp.engine.hashing._verify import is_cut, listed, verify
from sysmcp.engine.hashing._verify_request import Confine, VerifyRequest

__all__ = [
    "ALGORITHMS",
    "ALGORITHM_NAMES",
    "BLAKE3",
    "BLAKE3_THREADED",
    "CHUNK",
    "HASH_THREADS",
    "MANIFEST_NAMES",
    "OPEN_AT",
    "Algorithm",
    "Confine",
    "FileHash",
    "FileRequest",
    "KeptGrowing",
    "ManifestTooLarge",
    "ManifestUnsized",
    "NoEntries",
    "NotAManifest",
    "Source",
    "Status",
    "Style",
    "TreeHash",
    "TreeRequest",
    "Verification",
    "VerifyRequest",
    "format_line",
    "hash_fd",
    "hash_file",
    "hash_path",
    "is_cut",
    "listed",
    "verify",
]
