"""A description for every output schema property a tool left undescribed, in one table.

Why one table: the same fields (``path``, ``disk_bytes``, ``pid`` …) recur in every tool and mean the
same thing each time, so they are worded once here and added where a schema has none; a tool's own
description always wins. ``tests/e2e/test_server_identity.py`` requires every property of every
``outputSchema`` in ``tools/list`` to end up with one.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COMMON", "described"]

#: By property name, or by ``name:type`` where one name means two things (a list or its count).
COMMON: dict[str, str] = {
    "alert_threshold_percent": "Percent used from which a filesystem is called out as nearly full.",
    "algorithm": "The digest algorithm used (sha256, sha512, md5, sha1, blake2b, blake3).",
    "apparent_bytes": "Bytes as ls counts them (file sizes), sparse regions included.",
    "base_dir": "The directory the manifest's names are relative to.",
    "bytes_hashed": "Bytes read and hashed.",
    "bytes_per_s": "Bytes per second over the measuring window.",
    "bytes_read": "Bytes read from files to compare them.",
    "command": "The process's command name.",
    "copies": "How many files (distinct inodes) share this content.",
    "device": "The device: a kernel block device name, or the mounted source.",
    "disk_bytes": "Bytes allocated on disk, as du counts them.",
    "elapsed_s": "Seconds the work took.",
    "error": "Why it could not be read or hashed.",
    "exact_bytes": (
        "Only when a name is not UTF-8 (shown with \\xNN bytes and backslashes doubled): the JSON Pointer "
        "of each such string → its exact bytes, base64."
    ),
    "extensions_not_shown": "File extensions beyond those listed.",
    "failed_files": "Files whose digest differs from the manifest's (the first ones).",
    "files:array": "The files, largest first (at most top_n).",
    "files:integer": "Number of files.",
    "files_not_shown": "Files beyond those listed.",
    "filesystems": "One entry per filesystem, fullest first.",
    "format": "The manifest line format: gnu (sha256sum) or bsd (--tag).",
    "free": "Free inodes.",
    "fs_type": "The filesystem type (ext4, xfs, tmpfs, nfs …).",
    "groups": "Groups of identical files, most reclaimable space first (at most top_n).",
    "groups_found": "Groups of identical files found in all.",
    "groups_not_shown": "Groups beyond those listed.",
    "holders": "The processes holding it: by a descriptor or a memory mapping (the first ones).",
    "holders_not_shown": "Holders beyond those listed.",
    "improperly_formatted_lines": "Line numbers of manifest lines that are not checksum lines (the first ones).",
    "largest_directories": "The largest immediate subdirectories, by the sort order (at most top_n).",
    "largest_files": "The largest files anywhere below, by the sort order (at most top_n).",
    "lines_not_shown": "Manifest lines beyond those inlined (all are in the full manifest).",
    "missing_files": "Listed files that do not exist (the first ones).",
    "mount_point": "Where the filesystem is mounted.",
    "new_files": "Regular files under base_dir the manifest does not mention (the first ones).",
    "ok": "Files whose digest matches.",
    "path": "An absolute path.",
    "paths": "The files' paths (the first ones of the group).",
    "paths_not_shown": "Paths of the group beyond those listed.",
    "pid": "Process ID.",
    "processes_read": "Processes whose information could be read.",
    "read_bytes": "Bytes read from the device in the window.",
    "read_bytes_per_s": "Bytes read per second.",
    "read_iops": "Read operations per second.",
    "read_only": "True when the filesystem is mounted read-only.",
    "readers_not_shown": "Reading processes beyond those listed.",
    "reclaimable_bytes": "Disk bytes freed by keeping one copy (hard links to it excluded).",
    "samples": "How many readings the rate is computed from.",
    "seconds": "Seconds the work took.",
    "sha256": "The SHA-256 digest, lowercase hex.",
    "size_bytes": "Size in bytes (apparent, as ls shows it).",
    "skipped": "Entries left out of the walk, counted by reason.",
    "sort_by": "What the lists are sorted by (disk or apparent bytes, or age).",
    "stopped_reason": "Why the work stopped early (null when complete).",
    "top_readers": "The processes that read the most bytes from storage in the window.",
    "top_writers": "The processes that wrote the most bytes to storage in the window.",
    "total": "Inodes in all.",
    "total_bytes": "Size of the filesystem or of what was hashed, in bytes.",
    "total_disk_bytes": "Disk bytes held by all the files listed and counted.",
    "totals": "Totals of the whole tree.",
    "unreadable_files": "Listed files that exist but could not be hashed, with the reason (the first ones).",
    "used": "Inodes in use.",
    "used_bytes": "Bytes in use, as df counts them.",
    "user": "The process's user (null when it cannot be looked up).",
    "write_bytes": "Bytes written to the device in the window.",
    "write_bytes_per_s": "Bytes written per second.",
    "write_iops": "Write operations per second.",
    "writers_not_shown": "Writing processes beyond those listed.",
}


def _word(name: str, spec: dict[str, Any]) -> str | None:
    kind = spec.get("type")
    for one in kind if isinstance(kind, list) else [kind]:
        if f"{name}:{one}" in COMMON:
            return COMMON[f"{name}:{one}"]
    return COMMON.get(name)


def described(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` in which every property that has no description is given the common one
    (the tool's own dict is never changed)."""
    copied: dict[str, Any] = _described(schema)
    return copied


def _described(node: Any) -> Any:
    """A fresh copy, in which no dict or list is reached twice. ``copy.deepcopy`` keeps a fragment that
    two properties share shared, and filling it in for the first would describe the second with the
    first one's words (``missing_files`` said to be the files whose digest differs)."""
    if isinstance(node, list):
        return [_described(item) for item in node]
    if not isinstance(node, dict):
        return node
    copied = {key: _described(value) for key, value in node.items()}
    properties = copied.get("properties")
    for name, spec in properties.items() if isinstance(properties, dict) else ():
        if isinstance(spec, dict) and "description" not in spec and (word := _word(name, spec)) is not None:
            spec["description"] = word
    return copied
