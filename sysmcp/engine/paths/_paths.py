"""Which paths a tool may look at, and how names are shown.

The operator's roots bound everything; client roots can only narrow them. Containment is decided
on resolved real paths, component by component — never by string prefix, so ``/srv-evil`` is not
inside ``/srv`` and a symlink inside a root that points out of it does not lead out. Resolution is
only half of the defence: the names it returns are opened with ``sysmcp.engine.opens``, which
refuses to follow any symlink, so a path swapped for a symlink after the check still cannot lead out.

Refusals are engine errors (``OutsideRoots``, ``InvalidPath``) stating the facts; the words a model
reads, with the rule and what to do, are the tool layer's (``sysmcp.tools.errors``). Keeping the
policy in step with the client's ``roots/list`` is the session's job (``sysmcp.server.roots``).
"""

from __future__ import annotations

import base64
import binascii
import errno
import json
import os
import shlex
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import unquote_to_bytes, urlsplit

from sysmcp.engine.faults import InvalidPath, NotFound, OutsideRoots, PermissionRefused, WrongKind

#: How much of a model-supplied path is echoed back in a refusal.
MAX_ECHO = 200
#: How many roots a refusal lists (a client may send thousands).
MAX_LISTED = 10
#: Linux's limits: longer names fail in every system call, so refuse them up front with a clear rule.
PATH_MAX = 4096
NAME_MAX = 255

OUTSIDE_OPERATOR = "the operator's roots (--root / SYSMCP_ROOTS)"
OUTSIDE_CLIENT = "the client's roots (roots/list)"


#: The key of structured content that gives the exact bytes of the names in it that are not UTF-8.
EXACT_BYTES = "exact_bytes"


def display(path: str | bytes | os.PathLike[str]) -> str:
    """A name as JSON text can carry it: as it is when it is UTF-8 (the common case, byte for byte);
    else each byte that is not UTF-8 as ``\\xNN`` and each backslash doubled, so the shown form undoes
    to the exact bytes. That form alone may be another name's (a file literally named ``a\\x80``):
    structured content says which strings are shown so, with their bytes (``in_json``)."""
    if isinstance(path, str):
        try:
            path.encode("utf-8")  # the common case, and a hot path: nothing to escape
        except UnicodeEncodeError:
            pass
        else:
            return path
    raw = _raw(path) if isinstance(path, str) else os.fsencode(path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.replace(b"\\", b"\\\\").decode("utf-8", "backslashreplace")


def in_json(data: object) -> object:
    """JSON data with every name in it as ``display`` shows it, and, when some name is not UTF-8, the
    top object's ``exact_bytes``: for each string shown so, its JSON Pointer (RFC 6901) → the exact
    bytes in base64, as borg's ``path_b64`` carries a name beside its text. So a client tells the byte
    0x80 (``"a\\x80"``, listed) from a name holding those four characters (``"a\\x80"``, not listed),
    and undoes each to the exact name (``exact_names``). Why here: a result holds names as
    ``os.fsdecode`` made them (its text shows them exactly, ``escaped``), and JSON text cannot carry
    the lone surrogates that stand for bytes that are not UTF-8."""
    found: dict[str, str] = {}
    shown = _in_json(data, "", found)
    if found and isinstance(shown, dict):
        shown[EXACT_BYTES] = found
    return shown


def _in_json(data: object, where: str, found: dict[str, str]) -> object:
    if isinstance(data, str):
        if data.isascii() or _encodes(data):
            return data
        found[where] = base64.b64encode(_raw(data)).decode("ascii")
        return display(data)
    if isinstance(data, dict):  # most values are plain: no pointer is made for them
        # A key is no name of ours, but a host's result may hold any: JSON text carries it as display shows it
        return {
            (shown := key if type(key) is not str or key.isascii() or _encodes(key) else display(key)): (
                item if _plain(item) else _in_json(item, f"{where}/{_token(shown)}", found)
            )
            for key, item in data.items()
        }
    if isinstance(data, list):
        return [
            item if _plain(item) else _in_json(item, f"{where}/{index}", found)
            for index, item in enumerate(data)
        ]
    return data


def _raw(text: str) -> bytes:
    """A string's bytes as ``os.fsencode`` gives them, each of U+DC80..U+DCFF the byte it stands for.
    A surrogate that stands for no byte (only JSON text that escapes one, ``"\\ud800"``, makes it: a
    host's answer) is its UTF-8 form's bytes, which ``os.fsencode`` refuses: never an error, always
    bytes that undo to what is shown."""
    try:
        return os.fsencode(text)
    except UnicodeEncodeError:
        return b"".join(
            bytes([ord(char) - 0xDC00])
            if "\udc80" <= char <= "\udcff"
            else char.encode("utf-8", "surrogatepass")
            for char in text
        )


def _plain(item: object) -> bool:
    """A value JSON carries as it is: a number, a boolean, null, or a string that is UTF-8."""
    if isinstance(item, str):
        return item.isascii() or _encodes(item)
    kind = type(item)
    return kind is int or kind is float or kind is bool or item is None


def _token(key: object) -> str:
    """A key as a JSON Pointer's reference token: ``~`` as ``~0``, ``/`` as ``~1``."""
    return str(key).replace("~", "~0").replace("/", "~1")


def exact_names(data: object) -> object:
    """Structured content as ``in_json`` made it (another host's answer) with each name listed in its
    ``exact_bytes`` given back as ``os.fsdecode`` makes it from the exact bytes, and ``exact_bytes``
    itself left out: the names as the result held them. An entry that is not base64, or whose pointer
    leads to no string, is passed over: that string stays as shown. ``data`` is left as it is: its
    containers are copied once, then each name is put in place: time linear in the answer and its names."""
    if not isinstance(data, dict) or EXACT_BYTES not in data:
        return data
    given = {key: _copied(item) for key, item in data.items() if key != EXACT_BYTES}
    marks = data[EXACT_BYTES]
    for pointer, encoded in marks.items() if isinstance(marks, dict) else ():
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, TypeError, ValueError):
            continue
        if isinstance(pointer, str) and pointer.startswith("/"):
            tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]
            _put(given, tokens, os.fsdecode(raw))
    return given


def _copied(data: object) -> object:
    """``data`` with every dict and list in it new (strings and numbers shared)."""
    if isinstance(data, dict):
        return {key: _copied(item) for key, item in data.items()}
    if isinstance(data, list):
        return [_copied(item) for item in data]
    return data


def _put(data: Any, tokens: list[str], name: str) -> None:
    """The string at ``tokens`` in ``data`` replaced by ``name``; nothing when they lead to no string.
    A list's index is ASCII digits (RFC 6901): ``"²".isdigit()`` is true, and ``int`` refuses it."""
    *way, last = tokens
    for token in way:
        data = _child(data, token)
    if isinstance(data, dict) and isinstance(data.get(last), str):
        data[last] = name
    elif isinstance(data, list) and isinstance(_child(data, last), str):
        data[int(last)] = name


def _child(data: Any, token: str) -> Any:
    """What ``token`` names in ``data``, or None when it names nothing there."""
    if isinstance(data, dict):
        return data.get(token)
    if isinstance(data, list) and token.isascii() and token.isdigit() and int(token) < len(data):
        return data[int(token)]
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shell_word(name: str | bytes) -> str:
    """A name as one word of a command a person may paste, read back as the exact name by every POSIX
    ``sh`` (dash, Debian's /bin/sh, as well as bash, zsh and ksh): single-quoted (``shlex.quote``) when
    it shows as it is, else ``"$(printf '…')"`` around the ``escaped`` form, whose escapes (``\\\\``,
    ``\\n``, ``\\033``, ``\\200``) are printf's own and undo to the exact bytes (``%`` doubled, a quote
    as ``\\047``, a leading ``-`` as ``\\055``). So the command stays one printable line, names the very file, and no byte of the name
    is read as syntax. Not bash's ``$'…'``: dash reads it as a ``$`` and other text. A name ending in a
    newline gets a ``/`` after it, since ``$(…)`` drops trailing newlines: the same name for a directory
    (every command we suggest names one), and for any other file an error, never another file."""
    text = name if isinstance(name, str) else os.fsdecode(name)
    shown = escaped(text)
    if shown == text:
        return shlex.quote(text)
    if text.endswith("\n"):
        shown += "/"
    form = shown.replace("%", "%%").replace("'", "\\047")
    if form.startswith("-"):  # printf's format, never an option of printf's own
        form = "\\055" + form[1:]
    return "\"$(printf '" + form + "')\""


def call_argument(name: str | bytes) -> str:
    """A name as the value of an argument in a call an answer suggests (``dir_usage path=…``): as it
    is when it shows as it is, else a JSON string (``"/srv/a\\\\b"``, ESC as ``\\u001b``), which a
    client undoes to the exact name. Never the ``escaped`` form: a path argument is the name itself,
    so ``path=/srv/a\\\\b`` would name the file with two backslashes, not the one shown."""
    text = name if isinstance(name, str) else os.fsdecode(name)
    if escaped(text) == text:
        return text
    return json.dumps(text)


def one_line(text: str) -> str:
    """Words that are not a name (a host's answer line, a daemon's message) on one line: newline,
    carriage return and tab as ``\\n``, ``\\r``, ``\\t`` and every other character that is not
    printable escaped as ``escaped`` escapes it, but a backslash left as it is, so a name the text
    already shows escaped (a host's answer) is not escaped twice. Names go through ``escaped``."""
    text = text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _octal(char) for char in text)


def printable_text(text: str) -> str:
    """Text of many lines, such as a tool's answer, with its newlines and tabs as they are and every
    other character that is not printable escaped as ``one_line`` escapes it (ESC as ``\\033``,
    U+202E as ``\\342\\200\\256``): whatever reached the text, no escape sequence drives the
    terminal or the page that shows it, no bidi override reorders it, and no separator Unicode calls a
    line break (U+2028, NEL) starts a line that is not the text's own. A backslash stays as it is: the
    names in an answer were escaped by ``escaped`` already, and this is the last guard, not a second
    escape."""
    if text.replace("\n", "").replace("\t", "").isprintable():
        return text  # the common case
    return "\n".join("\t".join(map(one_line, line.split("\t"))) for line in text.split("\n"))


def _octal(char: str) -> str:
    if char in _C_ESCAPES:  # as ``ls -b`` and ``escaped``: \\a, \\b, \\v, \\f
        return _C_ESCAPES[char]
    if "\udc80" <= char <= "\udcff":  # a byte that was not UTF-8 (``os.fsdecode``)
        return f"\\x{ord(char) - 0xDC00:02x}"
    return "".join(f"\\{b:03o}" for b in char.encode("utf-8", "surrogatepass"))


#: The C escapes ``ls -b`` writes for these control bytes; every other one is ``\\NNN`` (octal).
_C_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r"}


def escaped(name: str | bytes) -> str:
    """A name on one line, as text, tab-separated lists and a person's terminal show it, so that no two
    names look alike: in the style of GNU ``ls -b`` (``--escape``).

    Backslash is doubled; tab, newline, carriage return, bell, backspace, vertical tab and form feed are
    ``\\t``, ``\\n``, ``\\r``, ``\\a``, ``\\b``, ``\\v``, ``\\f``; every other control byte, every
    character Python does not call printable (such as U+202E, which reverses the text after it) and every
    byte that is not UTF-8 is ``\\NNN``, its bytes in octal. Printable UTF-8 (and the space) stays as it
    is, so a name can neither forge a line nor move the cursor, and the escape undoes to exact bytes.
    A ``str`` is taken as ``os.fsdecode`` made it (undecodable bytes as surrogate escapes). Give it
    the name itself, never ``display``'s form: escaping a shown form again would show two names alike.
    """
    text = name if isinstance(name, str) else name.decode("utf-8", "surrogateescape")
    if text.isprintable() and "\\" not in text:
        return text  # the common case
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif "\udc80" <= char <= "\udcff":  # a byte that was not UTF-8
            out.append(f"\\{ord(char) - 0xDC00:03o}")
        elif char.isprintable():
            out.append(char)
        else:
            out.append(_octal(char))  # a C escape, or the character's bytes in octal
    return "".join(out)


def exact_bytes(name: str | bytes) -> str | None:
    """A name's bytes in base64 when they are not UTF-8 (JSON text cannot carry them), else None:
    beside ``display(name)`` in structured content, it keeps the exact name recoverable."""
    raw = os.fsencode(name)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii")
    return None


def is_within(path: Path, root: Path) -> bool:
    """True if ``path`` is ``root`` or below it, comparing whole components (never string prefixes)."""
    return path.parts[: len(root.parts)] == root.parts


def on_the_way(path: str, roots: Sequence[Path] | None) -> bool:
    """Whether a mount point ``path`` may be named under ``roots`` (None: no roots): inside one, or a
    directory leading down to one (a filesystem holding a root); any other lies outside them."""
    where = Path(path)
    return roots is None or any(is_within(where, root) or is_within(root, where) for root in roots)


def within_roots(path: str, roots: Sequence[Path] | None) -> bool:
    """Whether ``path`` may be named in an answer: inside one of the roots (None: no roots in force),
    as written and with its '..' taken out (a path another program gives, ``/srv/../etc``, is not
    inside /srv; nor is ``/x/../srv``, as /x may be a symlink)."""
    return roots is None or all(
        any(is_within(Path(shown), root) for root in roots) for shown in (path, os.path.normpath(path))
    )


#: What an answer shows for a mount source that is a path outside the roots.
SOURCE_OUTSIDE = "(a path outside the allowed roots)"
#: Where device nodes live: a source there is a device's name, shown whatever the roots.
DEVICES = Path("/dev")


def mount_source(device: str, roots: Sequence[Path] | None) -> str:
    """A mount's source as an answer may show it. A device name ('tmpfs', 'server:/export',
    '//server/share') or a device node under /dev is shown as it is; so is a path inside the roots. Any
    other path is a directory or file that a FUSE program (bindfs, squashfuse) or an admin's ``mount -t
    tmpfs SOURCE`` put there, and one outside the roots is shown as ``SOURCE_OUTSIDE``: a mount inside
    a root must not name it."""
    local = device.startswith("/") and not device.startswith("//")  # //server/share: a CIFS share's name
    if roots is None or not local or within_roots(device, (DEVICES,)):
        return device
    return device if within_roots(device, roots) else SOURCE_OUTSIDE


def real_root(raw: str | os.PathLike[str]) -> Path:
    """A root as the policy stores it: absolute, with every symlink resolved, and each '..' taken where
    the kernel takes it (after the link before it: ``/srv/data/..`` is the parent of where /srv/data
    leads), never by the text."""
    return Path(os.path.realpath(os.fspath(raw)))


def written_root(raw: str | os.PathLike[str]) -> Path:
    """A root as it was written, absolute: the way a root given through a symlink is reached by its
    name. A name with '..' in it is no such way (what lies before the '..' need not be on the way to
    the root): that root is its real directory alone."""
    path = os.fspath(raw)
    if ".." in path.split("/"):
        return real_root(path)
    return Path(os.path.abspath(path))


def intersect(first: Sequence[Path], second: Sequence[Path]) -> list[Path]:
    """The roots both lists allow: for each overlapping pair, the deeper of the two."""
    both: list[Path] = []
    for a in first:
        for b in second:
            deeper = a if is_within(a, b) else b if is_within(b, a) else None
            if deeper is not None and deeper not in both:
                both.append(deeper)
    return both


def roots_from_uris(uris: Iterable[object]) -> tuple[list[Path], list[str]]:
    """Client roots (``file://`` URIs) as real paths, and the entries that could not be used."""
    roots: list[Path] = []
    unusable: list[str] = []
    for uri in uris:
        path = _file_uri_path(uri)
        if path is None:
            unusable.append(str(uri)[:MAX_ECHO])
        else:
            roots.append(real_root(path))
    return roots, unusable


def root_names(uris: Iterable[object]) -> list[Path]:
    """The local ``file://`` roots as the client wrote them (``written_root``: absolute, unresolved)."""
    return [written_root(path) for uri in uris if (path := _file_uri_path(uri)) is not None]


def _file_uri_path(uri: object) -> str | None:
    if not isinstance(uri, str) or "\x00" in uri:
        return None
    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme.lower() != "file" or parts.netloc.lower() not in ("", "localhost"):
        return None
    try:
        path = os.fsdecode(unquote_to_bytes(parts.path))  # %FF is the byte 0xFF of a name, not U+FFFD
    except UnicodeEncodeError:  # a lone surrogate ("\ud800") cannot name a file
        return None
    if not path.startswith("/") or "\x00" in path:
        return None
    return path


@dataclass
class PathPolicy:
    """The operator's roots (None: the whole filesystem) narrowed by the client's roots, if any."""

    operator_roots: Sequence[Path] | None = None
    client_roots: Sequence[Path] | None = field(default=None)
    #: The roots as the operator and the client wrote them (absolute, unresolved): resolving a path
    #: may look at these names too, so a root named through a symlink is reached through its name.
    named: Sequence[Path] = ()
    client_named: Sequence[Path] = ()
    #: The client's roots as written, each with the real root it led to when the roots were listed.
    client_written: Sequence[tuple[Path, Path]] = ()

    @classmethod
    def of_operator(cls, roots: Sequence[str] | None) -> PathPolicy:
        """The policy of the operator's ``--root`` (None or empty: no roots): each root resolved, and
        kept as written too, so a root given through a symlink is reached through its name."""
        return cls(
            operator_roots=[real_root(r) for r in roots] if roots else None,
            named=[written_root(r) for r in roots or ()],
        )

    def resolve(self, raw: str, *, strict: bool = True) -> Path:
        """An absolute, symlink-free path inside the allowed roots; else ``OutsideRoots`` naming the rule,
        or ``InvalidPath``; ``WrongKind`` or ``NotFound`` where the kernel would stop on the way (``f/``,
        ``missing/../f``), unless not ``strict`` (then it goes on as ``realpath`` does: for a caller that
        tells where the kernel stops itself, such as a checksum manifest's names).

        The error never shows what the path resolved to: a symlink's hidden target stays hidden.
        """
        return Path(self._resolved(raw, strict))

    def resolve_str(self, raw: str) -> str:
        """``resolve`` as a ``str``, without building a ``Path`` when no roots need comparing."""
        return self._resolved(raw, True)

    def _resolved(self, raw: str, strict: bool) -> str:
        """``raw`` resolved (``_realpath``; ``strict``: stopping where the kernel stops).

        Under roots, the path is resolved one name at a time and refused at the first name that is
        neither inside a root nor a directory leading down to one: a symlink's target outside them
        (an automount, a hung NFS share, another user's directory) is never stat'ed nor read, and a
        way that leaves the roots and comes back in (through ``..`` or a link outside) is refused.
        """
        allowed = self.allowed
        if allowed is None:
            return _realpath(raw, None, strict)
        shown = echo(raw)
        looked = [*allowed, *self.named, *self.client_named]
        confine = _Confine(
            looked, lambda left: self._refuse(left, shown), lambda real: self.check(Path(real), shown)
        )
        real = _realpath(raw, confine, strict)
        self.check(Path(real), shown)
        return real

    def way_out(self, raw: str) -> str | None:
        """Where resolving ``raw`` leaves the roots: the first name outside them and the rest of the way
        after it, as ``raw`` and the symlinks inside the roots spell it; None when it stays inside, when
        no roots are in force, or when ``raw`` cannot name a file. Nothing outside the roots is looked at
        to find it, so what a caller does with the way tells nothing of what lies there."""
        allowed = self.allowed
        if allowed is None:
            return None
        looked = [*allowed, *self.named, *self.client_named]
        try:
            _realpath(raw, _Confine(looked, _leave), strict=False)
        except _Left as left:
            return left.way
        except InvalidPath:
            return None
        return None

    def _refuse(self, left: str, shown: str) -> NoReturn:
        """Refuse ``shown``, whose resolution reached ``left`` (a name outside the roots, and the way on
        from it): the operator's
        rule when the name lies outside theirs (and off the way down to them), else the client's."""
        operator = self.operator_roots
        outside_operator = operator is not None and not _Confine([*operator, *self.named], _never).may_look(
            left
        )
        self._outside(shown, OUTSIDE_OPERATOR if outside_operator else OUTSIDE_CLIENT)

    def _outside(self, shown: str, who: str) -> NoReturn:
        in_force = self.allowed or []
        raise OutsideRoots(
            f"path {shown} is outside {who}",
            allowed=[call_argument(str(r)) for r in in_force[:MAX_LISTED]],  # each as a call names it
            more=max(0, len(in_force) - MAX_LISTED),
        )

    def check(self, real: Path, shown: str) -> None:
        """Refuse a resolved path outside the roots, naming the rule that refused it."""
        for roots, who in ((self.operator_roots, OUTSIDE_OPERATOR), (self.client_roots, OUTSIDE_CLIENT)):
            if roots is not None and not any(is_within(real, root) for root in roots):
                self._outside(shown, who)

    def covers(self, scope: Sequence[Path] | None) -> bool:
        """Whether everything ``scope`` allowed (roots; None: the whole filesystem) is allowed now: what
        a call named under it (a result kept for later) may be shown only while this holds."""
        allowed = self.allowed
        if allowed is None:
            return True
        return scope is not None and all(any(is_within(root, now) for now in allowed) for root in scope)

    def steps_down(self, directory: str) -> list[str]:
        """The names in ``directory`` (absolute; its '..' taken out as written) that lead down to a root
        lying below it, as resolved or as written (a root given through a symlink is offered through
        it), known from the roots alone: nothing outside them is looked at to find them."""
        where = Path(os.path.normpath(directory))
        depth = len(where.parts)
        ends = [*(self.allowed or ()), *self._written_ways()]
        below = (root for root in ends if len(root.parts) > depth and is_within(root, where))
        return sorted({root.parts[depth] for root in below})

    def _written_ways(self) -> list[Path]:
        """The roots in force as the operator and the client wrote them (``/var/folders/x`` where the
        real root is ``/private/var/folders/x``): each written root leading to a real one, and where a
        root in force lies deeper, the way to it through the written name."""
        allowed = self.allowed or ()
        operator = self.operator_roots or ()
        pairs = [*(zip(self.named, operator, strict=True) if len(self.named) == len(operator) else ())]
        pairs += self.client_written
        ways = []
        for name, real in pairs:
            for root in allowed:
                if is_within(real, root):
                    ways.append(name)
                elif is_within(root, real):
                    ways.append(name.joinpath(*root.parts[len(real.parts) :]))
        return ways

    def narrow(
        self, client_roots: Sequence[Path] | None, ignored: int = 0, named: Sequence[Path] = ()
    ) -> None:
        """Apply the client's roots (``named``: as the client wrote them); None (or an empty list) means
        the client does not narrow, unless it listed roots of which none could be used (``ignored`` of
        them): then nothing is allowed."""
        self.client_roots = list(client_roots or ()) if client_roots or ignored else None
        # ``named`` and ``client_roots`` come from the same URIs in the same order (``root_names``,
        # ``roots_from_uris``): each name with the real root it led to when the roots were listed.
        paired = len(named) == len(client_roots or ())
        reals: Sequence[Path | None] = list(client_roots or ()) if paired else [None] * len(named)
        self.client_named = (
            [name for name, real in zip(named, reals, strict=True) if self._operator_holds(name, real)]
            if self.client_roots
            else []
        )
        self.client_written = [
            (name, real)
            for name, real in zip(named, reals, strict=True)
            if real is not None and name in self.client_named
        ]

    def _operator_holds(self, name: Path, real: Path | None) -> bool:
        """Whether a client's root ``name`` (which led to ``real``) may widen what resolving looks at:
        when it lies inside an operator's root (as resolved or as written), or led into one (the client
        wrote ``/home/alice/proj``, the operator ``/var/home/alice``). A client root ``/`` (or any name
        on the way down to an operator's root, or beside it) must not have names outside the operator's
        roots stat'ed and their symlinks followed."""
        operator = self.operator_roots
        if operator is None or (real is not None and any(is_within(real, root) for root in operator)):
            return True
        inside = _Confine([*operator, *self.named], _never).inside
        here = str(name).rstrip("/") + "/"
        return any(here.startswith(root) for root in inside)

    @property
    def allowed(self) -> list[Path] | None:
        """The roots in force, or None for the whole filesystem."""
        if self.client_roots is None:
            return list(self.operator_roots) if self.operator_roots is not None else None
        if self.operator_roots is None:
            return list(self.client_roots)
        return intersect(self.client_roots, self.operator_roots)


def expands_locally(raw: str) -> bool:
    """True if ``os.path.expanduser(raw)`` needs no user database lookup (which may go to the network:
    LDAP, NIS, sssd): no leading ``~``, or ``~`` / ``~/…`` with ``$HOME`` set."""
    if not raw.startswith("~"):
        return True
    return (raw == "~" or raw.startswith("~/")) and "HOME" in os.environ


class _Confine:
    """Resolution inside roots: which names may be looked at, and what to do with one that may not."""

    def __init__(
        self, roots: Sequence[Path], refuse: Callable[[str], None], check: Callable[[str], None] | None = None
    ) -> None:
        self.inside = tuple(str(root).rstrip("/") + "/" for root in roots)
        self.refuse = refuse
        #: Refuses a path resolved outside the roots in force: a name may be looked at (a written
        #: root, the operator's root around a client's) yet lie outside them.
        self.check = check

    def may_look(self, path: str) -> bool:
        """Inside a root, or a directory on the way down to one (its name is part of a root's)."""
        here = path.rstrip("/") + "/"
        return any(here.startswith(root) or root.startswith(here) for root in self.inside)


def _never(_: str) -> None:
    """A ``_Confine`` asked only which names it may look at."""


class _Left(Exception):
    """Resolution reached a name outside the roots (``way``: it and the rest of the path after it)."""

    def __init__(self, way: str) -> None:
        super().__init__(way)
        self.way = way


def _leave(way: str) -> NoReturn:
    raise _Left(way)


#: Symlinks followed in one resolution before it is refused, as the kernel's ELOOP.
MAX_LINKS = 40


def _steps(path: str) -> list[str]:
    """The names of ``path`` in the order they are looked up, a ``/`` that ends it as ``.`` (the
    kernel takes ``d/`` as ``d/.``: the name before it must be a directory), empty ones left out."""
    steps = list(filter(None, path.split("/")))
    if steps and path.endswith("/"):
        steps.append(".")
    return steps


def _resolve(path: str, confine: _Confine | None, strict: bool = True) -> str:
    """``path`` (absolute) with every symlink resolved, looked up one name at a time as the kernel
    looks it up: a symlink before a ``..`` is resolved first, so the ``..`` leaves where it led.

    ``strict``: where the kernel stops, so does this: at a name that is not a directory yet has a
    ``/`` or another name after it (ENOTDIR), and at a ``..`` after a name that could not be looked
    at (its error: ENOENT, EACCES), which ``realpath`` would take as written and leave. Not strict,
    it goes on as ``realpath`` does (a caller asking where the kernel stops itself). A missing name
    (or one that cannot be looked at) with no ``..`` after it is taken as written either way: the
    open that follows says what the kernel says of it.

    With ``confine``, a name is looked at only where ``confine`` lets it: at the first other one it
    calls ``confine.refuse`` with that name and the rest of the way after it (as the path and the
    links followed spell it), and ``refuse`` raises."""
    pending = _steps(path)
    pending.reverse()
    resolved, links = "/", 0
    is_directory: bool | None = True  # what ``resolved`` names; None: it could not be looked at
    lost: OSError | None = None  # why the first name that could not be looked at could not be
    own = len(pending)  # the names of ``path`` itself lie below this in ``pending``, links' above
    dangling = last_is_link = False  # a link's target is missing; the path's last name is a link
    while pending:
        part = pending.pop()
        left = len(pending)
        is_own = left < own
        if is_own:
            own = left
        if strict and is_directory is False:
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), resolved)
        if part == ".":
            continue
        if part == "..":
            if strict and lost is not None:
                raise _BeforeDotDot(lost)
            resolved, is_directory = os.path.dirname(resolved), True
            continue
        candidate = f"{resolved}/{part}" if resolved != "/" else f"/{part}"
        if confine is not None and not confine.may_look(candidate):
            confine.refuse("/".join([candidate, *reversed(pending)]))
        try:
            st = os.lstat(candidate)
        except OSError as exc:  # missing, or not to be looked into: taken as written, as realpath takes it
            dangling = dangling or (lost is None and not is_own and exc.errno == errno.ENOENT)
            resolved, is_directory, lost = candidate, None, lost or exc
            continue
        if is_own and own == 0:
            last_is_link = stat.S_ISLNK(st.st_mode)
        if not stat.S_ISLNK(st.st_mode):
            resolved, is_directory = candidate, stat.S_ISDIR(st.st_mode)
            continue
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), candidate)
        target = os.readlink(candidate)
        if target.startswith("/"):
            resolved = "/"
        pending.extend(reversed(_steps(target)))
    if strict and dangling:
        raise _Dangling(resolved, last_is_link)
    return resolved


class _BeforeDotDot(Exception):
    """Resolution stopped at a ``..`` after a name that could not be looked at (``why``: its error),
    where the kernel stops: told apart from an error of a name itself (a link the kernel will not
    read, another user's ``/proc/PID/root``), which has no ``..`` to explain."""

    def __init__(self, why: OSError) -> None:
        super().__init__(why)
        self.why = why


class _Dangling(Exception):
    """Resolution followed a symlink to a name that does not exist (``real``: where it led;
    ``named``: whether the path's own last name is that link, else a link on the way)."""

    def __init__(self, real: str, named: bool) -> None:
        super().__init__(real)
        self.real = real
        self.named = named


def _realpath(raw: str, confine: _Confine | None = None, strict: bool = True) -> str:
    """``raw`` expanded and resolved (absolute, normalised, no symlinks: ``_resolve``), or ``InvalidPath``
    saying why; ``WrongKind`` (``reason="not_directory"``) where a name that is no directory has a ``/``
    or a name after it, ``NotFound`` or ``PermissionRefused`` (``reason="before_dot_dot"``) where a
    ``..`` follows a name that cannot be looked at. With ``confine``, resolved without looking at a
    name outside the roots, nor a user's home in the user database ('~name'; '~' is this process's
    $HOME)."""
    if not raw:
        raise InvalidPath("path is empty", reason="empty")
    if "\x00" in raw:
        raise InvalidPath(f"path {echo(raw)} contains a NUL byte")
    if confine is not None and raw.startswith("~") and not (raw == "~" or raw.startswith("~/")):
        # The user database lies outside the roots too: whether '~name' expanded told who has an account.
        raise InvalidPath(f"path {echo(raw)} names a user's home directory", reason="user_home")
    try:
        expanded = os.path.expanduser(raw)
        if not os.path.isabs(expanded):
            raise InvalidPath(f"path {echo(raw)} is relative", reason="relative")
        encoded = os.fsencode(expanded)  # lone surrogates from JSON cannot name a file
        if too_long(encoded):
            raise InvalidPath(
                f"path {echo(raw)} is too long: at most {PATH_MAX - 1} bytes, {NAME_MAX} per component"
            )
        return _resolve(expanded, confine, strict)
    except _Dangling as led:
        if confine is not None and confine.check is not None:
            confine.check(led.real)  # a missing name outside the roots is outside them, never missing
        how = "is a symbolic link to" if led.named else "leads through a symbolic link to"
        raise NotFound(
            f"No such file: {escaped(expanded)} {how} {escaped(led.real)}, which does not exist",
            reason="dangling",
        ) from None
    except _BeforeDotDot as stopped:
        _stopped_at(confine, stopped.why)
        if stopped.why.errno == errno.ENOENT:
            raise NotFound(f"No such file or directory: {echo(raw)}", reason="before_dot_dot") from None
        if stopped.why.errno in (errno.EACCES, errno.EPERM):
            raise PermissionRefused(f"Permission denied: {echo(raw)}", reason="before_dot_dot") from None
        raise InvalidPath(f"path {echo(raw)} cannot be resolved: {stopped.why.strerror or 'error'}") from None
    except OSError as exc:
        _stopped_at(confine, exc)
        if exc.errno == errno.ENOTDIR:
            raise WrongKind(f"Not a directory: {echo(raw)}", reason="not_directory") from None
        raise InvalidPath(f"path {echo(raw)} cannot be resolved: {exc.strerror or 'error'}") from None
    except ValueError:
        raise InvalidPath(f"path {echo(raw)} is not a usable file name") from None


def _stopped_at(confine: _Confine | None, why: OSError) -> None:
    """Refuse a resolution that stopped (``why``) at a name outside the roots in force: one the
    roots around them let be looked at. Its kind ('Not a directory') or absence would tell what lies
    outside them."""
    if confine is not None and confine.check is not None and isinstance(why.filename, str):
        confine.check(why.filename)


def too_long(encoded: bytes) -> bool:
    """Whether no file can have this name: ``PATH_MAX`` bytes or more, or a component past ``NAME_MAX``
    (the kernel's ENAMETOOLONG, told without asking it)."""
    return len(encoded) >= PATH_MAX or (
        len(encoded) > NAME_MAX and any(len(part) > NAME_MAX for part in encoded.split(b"/"))
    )


def echo(raw: str) -> str:
    """A client's path as quoted back in an error: repr, cut to MAX_ECHO characters."""
    shown = raw if len(raw) <= MAX_ECHO else raw[:MAX_ECHO] + "…"
    return repr(shown)
