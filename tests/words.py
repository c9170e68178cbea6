"""Counts that disagree with their nouns, in every text answer the test suite sees ("1 files", "3 special file").

``slips(text)`` finds them; ``install()`` (tests/conftest.py) collects every text the suite produces —
each ``ToolOutput`` a handler returns in-process, each tool result and progress message on a wire
(tests/wire.py), each ``sysmcp`` command line's stdout and stderr — and ``pytest_sessionfinish`` fails
the run on any slip, naming it and the text it is in. A new slip anywhere fails without anyone
listing it.

No false positives by construction: a noun is checked only when it is in ``NOUNS`` (its singular and
plural, not a guessed rule), right after a whole number that stands on its own (``1,000`` is a
thousand; ``1.0 KiB``, ``web1``, ``2026-12-03`` and ``v1`` are no counts), with at most one word
between them from ``BETWEEN`` ("28 special files", "1 more group"); a noun that is the first half
of a compound ("3 file descriptors", "2 host results") is not the counted noun.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from typing import Any

#: singular → plural, the nouns the tools count.
NOUNS = {
    "file": "files",
    "directory": "directories",
    "entry": "entries",
    "host": "hosts",
    "item": "items",
    "character": "characters",
    "filesystem": "filesystems",
    "mount point": "mount points",
    "byte": "bytes",
    "group": "groups",
    "copy": "copies",
    "process": "processes",
    "snapshot": "snapshots",
    "reading": "readings",
    "line": "lines",
    "path": "paths",
    "symlink": "symlinks",
    "link": "links",
    "error": "errors",
    "device": "devices",
    "partition": "partitions",
    "tool": "tools",
    "argument": "arguments",
    "action": "actions",
    "change": "changes",
    "baseline": "baselines",
    "manifest": "manifests",
    "digest": "digests",
    "holder": "holders",
    "place": "places",
    "subvolume": "subvolumes",
    "user": "users",
    "owner": "owners",
    "result": "results",
    "inode": "inodes",
    "name": "names",
    "match": "matches",
    "plan": "plans",
    "member": "members",
    "root": "roots",
}
#: Words that may stand between a count and its noun without changing which noun is counted.
BETWEEN = {
    "more",
    "other",
    "special",
    "deleted",
    "regular",
    "open",
    "unreadable",
    "new",
    "changed",
    "removed",
    "added",
    "duplicate",
    "empty",
    "hidden",
    "sparse",
    "pseudo",
    "mounted",
    "matching",
    "skipped",
    "distinct",
    "identical",
    "held",
    "rotated",
    "extra",
    "unreachable",
    "failed",
    "missing",
    "listed",
    "planned",
    "kept",
    "hashed",
    "checked",
    "reclaimable",
    "remote",
}
#: Second halves of compounds: "3 file descriptors" counts descriptors, not files (so does any noun of
#: ``NOUNS`` after another: "2 host results").
COMPOUND = {
    "descriptor",
    "descriptors",
    "system",
    "systems",
    "type",
    "types",
    "size",
    "sizes",
    "handle",
    "handles",
}

_FORMS = {form: (singular, plural) for singular, plural in NOUNS.items() for form in (singular, plural)}
_NOUN = "|".join(sorted(map(re.escape, _FORMS), key=len, reverse=True))
_BETWEEN = "|".join(sorted(BETWEEN))
_SLIP = re.compile(
    r"(?<![^\s(\[+~≈−])"  # the count stands on its own: not web1, not 2026-12-03, not v1
    r"(?P<count>\d{1,3}(?:,\d{3})+|\d+)(?![\d.,]\d)"  # 1,234 is one count; 1.5 and 1,5 are not counts
    rf" (?:(?P<between>{_BETWEEN}) )?(?P<noun>{_NOUN})(?![\w-])(?! (?:{'|'.join(COMPOUND)}|{_NOUN})\b)",
    re.MULTILINE,
)


def slips(text: str) -> list[str]:
    """Each "count noun" in ``text`` whose noun is in the wrong number ("1 files", "3 special file")."""
    found = []
    for match in _SLIP.finditer(text):
        count = int(match["count"].replace(",", ""))
        singular, plural = _FORMS[match["noun"]]
        if match["noun"] != (singular if count == 1 else plural):
            found.append(match[0])
    return found


#: Every text the suite produced: (where it came from, the text).
CORPUS: list[tuple[str, str]] = []


def collect(source: str, text: object) -> None:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if isinstance(text, str) and text:
        CORPUS.append((source, text))


def collect_message(message: Any) -> None:
    """A server's message as a wire sees it: the text of a tool result, a progress message."""
    for item in message if isinstance(message, list) else [message]:
        if not isinstance(item, dict):
            continue
        result = item.get("result")
        if isinstance(result, dict):
            for block in result.get("content") or []:
                if isinstance(block, dict) and block.get("type") == "text":
                    collect("wire", block.get("text"))
        params = item.get("params")
        if item.get("method") == "notifications/progress" and isinstance(params, dict):
            collect("progress", params.get("message"))


def report() -> list[str]:
    """Every slip in the corpus, once each, with the start of a text it is in."""
    seen: dict[str, str] = {}
    for source, text in CORPUS:
        for slip in slips(text):
            line = next((line for line in text.splitlines() if slip in line), text)
            seen.setdefault(slip, f"{slip!r} ({source}): {line.strip()[:160]}")
    return list(seen.values())


def install() -> None:
    """Collect the texts of every in-process ``ToolOutput`` and of every ``sysmcp`` command line run."""
    from sysmcp.tools.registry import ToolOutput

    made = ToolOutput.__init__

    def init(self: ToolOutput, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        collect("tool", self.text)

    ToolOutput.__init__ = init  # type: ignore[method-assign]
    ran = subprocess.run

    def run(*args: Any, **kwargs: Any) -> Any:
        done = ran(*args, **kwargs)
        command = args[0] if args else kwargs.get("args")
        if _is_sysmcp(command):
            collect("command line", done.stdout)
            collect("command line", done.stderr)
        return done

    subprocess.run = run


def _is_sysmcp(command: object) -> bool:
    words: Iterable[object] = command if isinstance(command, (list, tuple)) else [command]
    return any(isinstance(word, str) and (word == "sysmcp" or word.endswith("/sysmcp")) for word in words)
