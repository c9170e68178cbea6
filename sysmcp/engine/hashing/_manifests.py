"""Reading checksum manifests: lines as ``sha256sum -c`` reads them, and the manifest file in ranges.

As ``sha256sum -c``: lines starting with ``#`` and empty lines are skipped, one trailing CR is dropped,
anything else that does not parse is improperly formatted. The formats themselves (GNU and BSD ``--tag`` lines, their escaping) are described in
``sysmcp.engine.hashing._checksums``, which writes them.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from sysmcp.engine.faults import EngineError, NotFound, Refused
from sysmcp.engine.hashing._checksums import (
    _BY_LENGTH,
    ALGORITHMS,
    FS_ENCODING,
    FS_ERRORS,
    Algorithm,
    algorithm_for_tag,
    blake2b_of_length,
    explain,
)
from sysmcp.engine.opens import closing_fd, open_regular_at
from sysmcp.engine.paths import PATH_MAX


@dataclass(frozen=True, slots=True)
class Entry:
    """One parsed manifest line: the name as bytes, the expected digest and what it may be."""

    name: bytes
    digest: str  # lowercase hex
    candidates: tuple[Algorithm, ...]  # one when tagged or forced; several when the length is ambiguous
    cr: bool = False  # the line ended in a CR, dropped: the name's own where no name without it exists


#: A line is judged by its first MAX_LINE bytes: a checksum line is at most a tag, a digest and a name
#: under PATH_MAX escaped (about 8 KiB); anything past this is a name too long or no line at all, and a
#: line of a GiB (a disk image given as the manifest) is never held whole.
MAX_LINE = 64 << 10
MAX_BAD_LINES_KEPT = 10_000  # line numbers of improperly formatted lines kept (all are counted)
MAX_BAD_LINES = 100_000  # beyond this many improperly formatted lines the input is no manifest: stop


@dataclass
class Manifest:
    """A manifest parsed whole: only short ones are (below ``Tuning.parallel_from``), so an object per
    entry is cheap here."""

    entries: list[Entry] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)  # line numbers, 1-based: the first MAX_BAD_LINES_KEPT
    bad_count: int = 0  # improperly formatted lines in all
    gave_up: bool = False  # more than MAX_BAD_LINES were improperly formatted: parsing stopped there


Parsed = tuple[bytes, str, tuple[Algorithm, ...]]

_HEX = frozenset(b"0123456789abcdefABCDEF")
_PLAIN_GNU = re.compile(rb"([0-9a-fA-F]+) [ *](.+)", re.DOTALL)
#: Plain GNU lines, all of a range at once (``LineParser.plain_block``): lowercase hex, one space, a space
#: or '*', and a name with no CR or NUL, short enough that its UTF-8 bytes stay under PATH_MAX, not
#: ending in '/': its directory part (up to the last '/') and its last component apart.
_PLAIN_LINES = re.compile(
    rf"^([0-9a-f]+) [ *](?=[^\n\r\0]{{1,{(PATH_MAX - 1) // 4}}}\n)([^\n]*/)?([^\n/]+)\n", re.MULTILINE
)
_BROKEN: Parsed = (b"", "", ())  # a known tag on a line that does not parse: improperly formatted


#: What a manifest's file name may hold → the algorithm it hints at.
_HINTS = {
    "b3": "blake3",
    "blake3": "blake3",
    "b2": "blake2b",
    "blake2": "blake2b",
    "sha512": "sha512",
    "sha256": "sha256",
}


def hint_order(manifest_name: str | None) -> tuple[str, ...]:
    """Preferred algorithms for ambiguous digest lengths, from a manifest's file name (B3SUMS, *.sha512)."""
    name = (manifest_name or "").lower()
    return tuple(dict.fromkeys(algorithm for needle, algorithm in _HINTS.items() if needle in name))


def checksum_lines(raw_lines: Iterable[bytes]) -> Iterator[tuple[int, bytes, bool]]:
    """The lines ``sha256sum -c`` reads, with their numbers (1-based) and whether a CR was dropped:
    comments and empty lines skipped, the newline and one trailing CR dropped. ``raw_lines`` with or
    without their newlines.

    Why say so: b3sum escapes no CR, so a name ending in one ends its line with it; ``b3sum -c`` finds
    that file, where ``sha256sum -c`` takes the CR for a CRLF line's. The name with it is looked for
    where no name without it exists (``_verdicts.check_cr``)."""
    for number, raw in enumerate(raw_lines, 1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.startswith(b"#"):
            continue
        if len(line) > MAX_LINE:  # judged by its start, wherever it lies (``ManifestBytes.owned``)
            yield number, line[:MAX_LINE], False
            continue
        cr = line.endswith(b"\r")
        if cr:
            line = line[:-1]
        if line:
            yield number, line, cr


def lines_of(block: bytes) -> list[bytes]:
    """A range's whole lines, without their newlines."""
    lines = block.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


@dataclass(slots=True)
class BadLines:
    """Improperly formatted lines: all counted, the first ``MAX_BAD_LINES_KEPT`` line numbers kept."""

    numbers: list[int] = field(default_factory=list)
    count: int = 0

    def add(self, number: int) -> None:
        self.count += 1
        if len(self.numbers) < MAX_BAD_LINES_KEPT:
            self.numbers.append(number)


def parse_manifest(
    data: bytes,
    *,
    forced: Algorithm | None = None,
    prefer: Sequence[str] = (),
    cancel: Callable[[], None] | None = None,
) -> Manifest:
    """Parse GNU and BSD lines of any supported algorithm, line by line, as ``sha256sum -c`` does.

    ``forced``: only that algorithm (other tags and lengths are improperly formatted, like running
    ``sha256sum -c`` on an MD5 list; a forced blake2b takes its length from the line, like b2sum).
    ``prefer``: order of the candidates for lengths that several algorithms share (64, 128).
    """
    manifest = Manifest()
    bad = BadLines(manifest.bad_lines)
    parse = LineParser(forced, prefer).parse
    # Line by line from a stream, not ``split``: 64 MiB of short junk lines would be millions of objects.
    for number, line, cr in checksum_lines(io.BytesIO(data)):
        if cancel is not None and not number % 4096:
            cancel()
        parsed = parse(line)
        if parsed is None:
            bad.add(number)
            if bad.count > MAX_BAD_LINES:
                manifest.gave_up = True
                break
            continue
        name, digest, candidates = parsed
        manifest.entries.append(Entry(name, digest.lower(), candidates, cr))
    manifest.bad_count = bad.count
    return manifest


class LineParser:
    """One manifest line at a time (comments, empty lines and the trailing CR already dropped).

    Why a class: the one piece of state a line leaves for the next is ``reversed_style`` (BSD
    ``md5 -r`` lines, "<hex> <name>", or GNU ones), fixed by the first line that tells. A parser
    started on a later part of the manifest is given it (``decide_style``), so parts parsed apart
    read every line exactly as one pass from the start would.
    """

    __slots__ = ("_by_length", "_plain", "forced", "prefer", "reversed_style")

    def __init__(
        self, forced: Algorithm | None = None, prefer: Sequence[str] = (), reversed_style: bool | None = None
    ) -> None:
        self.forced = forced
        self.prefer = prefer
        self.reversed_style = reversed_style
        # Candidates per digest length, worked out once.
        self._by_length: dict[int, tuple[Algorithm, ...]] = {}
        self._plain = _PLAIN_GNU.fullmatch

    def candidates(self, length: int) -> tuple[Algorithm, ...]:
        """The algorithms a plain line's digest of ``length`` hex digits may be (worked out once)."""
        candidates = self._by_length.get(length)
        if candidates is None:
            candidates = self._by_length[length] = _candidates(length, self.forced, self.prefer)
        return candidates

    def plain_block(self, block: bytes) -> list[tuple[str, str, str]] | None:
        """Every line of ``block`` (whole lines, each ending in a newline) as ``(hex digest, directory
        part, last component)`` in one regular-expression pass, when each is a plain '<hex>  <name>'
        line that ``parse`` would read the same way; else None, and the block is parsed line by line.

        Why: for the common manifest the per-line Python work (split, comment and CR checks, the
        parse call) is a large part of the cost per entry. Only a block whose every line matches is
        taken, so comments, empty lines, CRs, tagged, escaped and improperly formatted lines all keep
        their one way through ``parse``. The name parts are ``str`` as ``os.fsdecode`` gives them.
        """
        if self.reversed_style is True or not block.endswith(b"\n"):
            return None
        if FS_ENCODING != "utf-8" or FS_ERRORS != "surrogateescape":
            return None  # the name bound in _PLAIN_LINES counts on at most 4 bytes a character
        text = block.decode(FS_ENCODING, FS_ERRORS)
        found: list[tuple[str, str, str]] = _PLAIN_LINES.findall(text)
        if len(found) != text.count("\n"):
            return None
        if any(not self.candidates(length) for length in {len(line[0]) for line in found}):
            return None
        if found:
            self.reversed_style = False  # as parse leaves it after a plain line
        return found

    def parse(self, line: bytes) -> Parsed | None:
        """The line's name, hex digest and candidate algorithms, or None if improperly formatted."""
        # The common line, '<hex>  <name>' with nothing to unescape, in one match (a tag is never all hex).
        simple = self._plain(line) if self.reversed_style is not True else None
        parsed: Parsed | None
        if simple is not None:
            digest_bytes = simple.group(1)
            candidates = self.candidates(len(digest_bytes))
            if candidates:
                parsed = (simple.group(2), digest_bytes.decode("ascii"), candidates)
                self.reversed_style = False
            else:
                parsed = None
        else:
            parsed = _parse_tagged(line, self.forced)
            if parsed is None:
                parsed, self.reversed_style = _parse_gnu(line, self.forced, self.prefer, self.reversed_style)
        # A name of PATH_MAX bytes or more is an entry, as sha256sum -c reads it: its verdict says the name
        # is too long (``paths.too_long``), and the answer shows the start of it.
        if parsed is None or not parsed[0] or b"\0" in parsed[0]:
            return None
        return parsed


#: A line that may fix ``reversed_style``: a hex word first (tagged lines start with a word that is not).
_MAY_DECIDE = re.compile(rb"^[ \t]*\\?[0-9a-fA-F]+[ \t]", re.MULTILINE)


def decide_style(
    blocks: Iterable[bytes], forced: Algorithm | None = None, prefer: Sequence[str] = ()
) -> bool | None:
    """The ``reversed_style`` one pass from the start settles, from the manifest's whole lines in order.

    Only a line starting with a hex word can settle it, so a long BSD-tagged manifest (which never
    settles it) costs one regular-expression scan.
    """
    for block in blocks:
        for found in _MAY_DECIDE.finditer(block):
            end = block.find(b"\n", found.start())
            line = block[found.start() : end if end >= 0 else len(block)]
            if line.endswith(b"\r"):
                line = line[:-1]
            parser = LineParser(forced, prefer)
            parser.parse(line)
            if parser.reversed_style is not None:
                return parser.reversed_style
    return None


#: How a tagged line starts: blanks, the escape mark, the tag word.
_TAG_WORD = re.compile(rb"[ \t]*(\\?)([A-Za-z0-9-]*)")
#: How a GNU (or BSD reversed) line starts: blanks, the escape mark, the digest, the one blank after it.
_DIGEST_WORD = re.compile(rb"[ \t]*(\\?)([^ \t]*)[ \t]")


def _parse_tagged(line: bytes, forced: Algorithm | None) -> Parsed | None:
    """``TAG (name) = hex`` (also OpenSSL's ``TAG(name)= hex``); None if the line is not tagged."""
    found = _TAG_WORD.match(line)
    assert found is not None  # every part may be empty
    escaped, word = found[1], found[2]
    if not word[:1].isalpha() or _HEX.issuperset(word):
        return None
    algorithm = algorithm_for_tag(word.decode("ascii"))
    if algorithm is None:
        return None
    rest = line[found.end() :]
    if rest.startswith(b" "):
        rest = rest[1:]
    close = rest.rfind(b")")
    if not rest.startswith(b"(") or close < 1:
        return _BROKEN
    name = rest[1:close]
    after = rest[close + 1 :].lstrip(b" \t")
    if not after.startswith(b"="):
        return _BROKEN
    digest = after[1:].lstrip(b" \t")
    unescaped = _unescape(name) if escaped else name
    if unescaped is None:
        return _BROKEN
    if forced is not None and forced.name.split("-")[0] != algorithm.name.split("-")[0]:
        return _BROKEN
    if len(digest) != algorithm.hex_length or not _HEX.issuperset(digest):
        return _BROKEN
    return unescaped, digest.decode("ascii"), (algorithm,)


def _parse_gnu(
    line: bytes, forced: Algorithm | None, prefer: Sequence[str], reversed_style: bool | None
) -> tuple[Parsed | None, bool | None]:
    found = _DIGEST_WORD.match(line)
    if found is None or not found[2] or not _HEX.issuperset(found[2]):
        return None, reversed_style
    escaped, digest = found[1], found[2]
    candidates = _candidates(len(digest), forced, prefer)
    if not candidates:
        return None, reversed_style
    i = found.end()
    if len(line) - i == 1 or line[i : i + 1] not in (b" ", b"*"):
        if reversed_style is False:
            return None, reversed_style  # GNU refuses to mix the two styles in one file
        reversed_style = True
    elif reversed_style is not True:
        reversed_style = False
        i += 1
    name = _unescape(line[i:]) if escaped else line[i:]
    if name is None:
        return None, reversed_style
    return (name, digest.decode("ascii"), candidates), reversed_style


def _candidates(length: int, forced: Algorithm | None, prefer: Sequence[str]) -> tuple[Algorithm, ...]:
    if forced is not None:
        if forced.name.startswith("blake2b"):
            blake = blake2b_of_length(length)
            return (blake,) if blake is not None else ()
        return (forced,) if forced.hex_length == length else ()
    names = _BY_LENGTH.get(length, ())
    ordered = [n for n in prefer if n in names] + [n for n in names if n not in prefer]
    return tuple(ALGORITHMS[n] for n in ordered)


_ESCAPED = re.compile(rb"(?:[^\\]|\\[\\nr])*", re.DOTALL)  # every backslash starts \\, \n or \r
_ESCAPE = re.compile(rb"\\([\\nr])")
_UNESCAPED = {b"\\": b"\\", b"n": b"\n", b"r": b"\r"}


def _unescape(name: bytes) -> bytes | None:
    """Undo GNU's escaping (``\\\\``, ``\\n``, ``\\r``); None for any other escape, as GNU refuses it."""
    if _ESCAPED.fullmatch(name) is None:
        return None
    return _ESCAPE.sub(lambda found: _UNESCAPED[found.group(1)], name)


# -- the manifest file -------------------------------------------------------------------------

MAX_MANIFEST = 1 << 30  # bytes: about 12 million lines (read in ranges, never whole)
#: Bytes read at most from a manifest that says it is empty (procfs gives its files' bytes only when read,
#: and /proc/*/pagemap hundreds of GiB): such a file is read whole into memory, so far and no further.
MAX_UNSIZED_MANIFEST = 64 << 20


class ManifestUnreadable(EngineError):
    """The manifest file exists but could not be opened or read."""


class ManifestTooLarge(Refused):
    """The manifest is larger than ``limit`` bytes (``MAX_MANIFEST``)."""

    def __init__(self, shown: str, limit: int = MAX_MANIFEST) -> None:
        super().__init__(f"The manifest {shown} is larger than {limit} bytes", reason="manifest_too_large")
        self.shown, self.limit = shown, limit


class ManifestUnsized(Refused):
    """The manifest said it is empty (``st_size`` 0) and gave more than ``limit`` bytes when read."""

    def __init__(self, shown: str, limit: int = MAX_UNSIZED_MANIFEST) -> None:
        super().__init__(
            f"The manifest {shown} says it is empty yet gave more than {limit} bytes when read",
            reason="manifest_unsized",
        )
        self.shown, self.limit = shown, limit


class NotAManifest(Refused):
    """More than ``MAX_BAD_LINES`` improperly formatted lines: no manifest, whatever the rest holds."""

    def __init__(self, shown: str) -> None:
        super().__init__(
            f"{shown}: more than {MAX_BAD_LINES:,} improperly formatted lines", reason="not_a_manifest"
        )


class NoEntries(Refused):
    """Not one properly formatted checksum line (``bad`` improperly formatted ones)."""

    def __init__(self, shown: str, bad: int) -> None:
        super().__init__(
            f"{shown}: no properly formatted checksum lines found"
            + (f" ({bad:,} improperly formatted)" if bad else ""),
            reason="no_entries",
        )


class ManifestChanged(Refused):
    """The manifest file's size or modification time moved while it was checked."""

    def __init__(self, shown: str) -> None:
        super().__init__(
            f"The manifest {shown} changed while it was being checked", reason="manifest_changed"
        )


@dataclass(frozen=True)
class Source:
    """Where the manifest comes from: read in the worker (a file) or already in hand (text, URI)."""

    shown: str
    path: bytes | None = None
    data: bytes = b""
    name_hint: str | None = None


_EXTEND = 64 << 10  # read-ahead while looking for the end of a line that runs past its range


class ManifestBytes:
    """The manifest's bytes, a range at a time: from the open file (``pread``: the forked processes
    share the descriptor but no file offset) or from memory (text, a stored result). Why ranges: each
    checking process parses its own, so no process holds the whole manifest or an object per line.
    """

    def __init__(self, shown: str, data: bytes = b"", fd: int | None = None) -> None:
        self.shown = shown
        self.data = data
        self.fd = fd
        self.looked = os.fstat(fd) if fd is not None else None
        self.size = self.looked.st_size if self.looked is not None else len(data)

    def read(self, start: int, end: int) -> bytes:
        if self.fd is None:
            if self.looked is not None:
                raise ValueError(f"the manifest {self.shown} was closed: its names were read in the worker")
            return self.data[start:end]
        pieces = []
        while start < end:
            piece = os.pread(self.fd, end - start, start)
            if not piece:
                break
            pieces.append(piece)
            start += len(piece)
        return b"".join(pieces)

    def owned(self, start: int, end: int) -> bytes:
        """The whole lines that start in ``[start, end)``: every line belongs to exactly one range."""
        data = self.read(max(0, start - 1), end)
        if start > 0:
            cut = data.find(b"\n")
            if cut < 0:
                return b""  # one line runs through the whole range: the range where it starts has it
            data = data[cut + 1 :]
        if not data or data.endswith(b"\n") or end >= self.size:
            return data
        # The last line runs past the range: read on to its end, or until more than MAX_LINE bytes of it
        # are held (``checksum_lines`` judges a longer line by its start, so the rest is never needed).
        room = MAX_LINE + 1 - (len(data) - data.rfind(b"\n") - 1)
        pieces, at = [data], end
        while at < self.size and room > 0:
            more = self.read(at, min(self.size, at + min(_EXTEND, room)))
            if not more:
                break
            cut = more.find(b"\n")
            if cut >= 0:
                pieces.append(more[: cut + 1])
                break
            pieces.append(more)
            at += len(more)
            room -= len(more)
        return b"".join(pieces)

    def blocks(self, per_task: int, cancel: Callable[[], None]) -> Iterator[bytes]:
        """Every range's lines in order; ``cancel`` runs before each."""
        for start in range(0, self.size, per_task):
            cancel()
            yield self.owned(start, min(self.size, start + per_task))

    def changed(self) -> bool:
        """Whether the file's size or modification time moved since it was opened."""
        if self.fd is None or self.looked is None:
            return False
        now = os.fstat(self.fd)
        return (now.st_size, now.st_mtime_ns) != (self.looked.st_size, self.looked.st_mtime_ns)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def open_manifest(source: Source) -> ManifestBytes:
    """The manifest's bytes: a checksum file opened safely (FIFOs and devices refused without
    blocking), or the text in hand. Huge ones are refused (``ManifestTooLarge``)."""
    if source.path is None:
        data = source.data
    else:
        shown = source.shown
        try:
            fd, opened = open_regular_at(source.path)
            if opened.st_size == 0:  # a kernel-generated file (procfs) has its bytes only when read
                with closing_fd(fd):
                    data = _read_unsized(fd, shown)
        except FileNotFoundError:
            raise NotFound(f"No such manifest file: {shown}") from None
        except OSError as exc:
            raise ManifestUnreadable(f"Cannot read the manifest {shown}: {explain(exc)}") from None
        if opened.st_size > 0:
            reader = ManifestBytes(shown, fd=fd)
            if reader.size > MAX_MANIFEST:
                reader.close()
                raise ManifestTooLarge(shown)
            return reader
    if len(data) > MAX_MANIFEST:
        raise ManifestTooLarge(source.shown)
    return ManifestBytes(source.shown, data=data)


def _read_unsized(fd: int, shown: str) -> bytes:
    """What a manifest that says it is empty gives, up to ``MAX_UNSIZED_MANIFEST`` bytes (else
    ``ManifestUnsized``, once a little more than that is read)."""
    pieces: list[bytes] = []
    held = 0
    while piece := os.read(fd, 1 << 20):
        pieces.append(piece)
        held += len(piece)
        if held > MAX_UNSIZED_MANIFEST:
            raise ManifestUnsized(shown)
    return b"".join(pieces)
