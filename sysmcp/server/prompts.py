"""Prompts a user picks in a host ("disk full triage", "verify a download") and their completions.

A prompt is a recipe that tells the model which sysmcp tools to call, in what order, and what to
report. It only mentions tools this server actually has, so the recipe keeps working as tools come
and go. Path arguments are checked against the path policy when the prompt is fetched — the model
should not be sent off to scan a directory the tools will refuse — and path completion offers only
names the policy allows (plus the directories leading down to an allowed root).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sysmcp.engine.faults import EngineError
from sysmcp.engine.opens import closing_fd, open_parent, open_path
from sysmcp.engine.paths import PathPolicy, call_argument, display, escaped
from sysmcp.protocol.failures import invalid_params
from sysmcp.protocol.lifecycle import Features
from sysmcp.tools.arguments import find_sha256
from sysmcp.tools.errors import words

MAX_COMPLETIONS = 100  # the spec's limit per response
SCAN_LIMIT = 10_000  # directory entries looked at per completion: a huge directory must not stall a keystroke

PathKind = Literal["directory", "file"]


@dataclass(frozen=True, slots=True)
class PromptArgument:
    name: str
    title: str
    description: str
    required: bool = False
    completes: PathKind | None = None  # which kind of path completion/complete offers, if any


@dataclass(frozen=True, slots=True)
class PromptEnv:
    """What rendering may look at: which tools exist and which paths are allowed."""

    tools: Collection[str]
    tool_arguments: dict[str, Collection[str]]
    paths: PathPolicy
    history: bool = False  # this host keeps history (what_changed has snapshots to compare)


Render = Callable[[dict[str, str], PromptEnv], str]


@dataclass(frozen=True, slots=True)
class Prompt:
    name: str
    title: str
    description: str
    arguments: tuple[PromptArgument, ...]
    render: Render

    def describe(self, features: Features) -> dict[str, Any]:
        """The ``prompts/list`` entry, with titles only where the version knows them."""
        arguments = [
            {"name": item.name, "description": item.description, "required": item.required}
            | ({"title": item.title} if features.titles else {})
            for item in self.arguments
        ]
        entry = {"name": self.name, "description": self.description, "arguments": arguments}
        return entry | ({"title": self.title} if features.titles else {})

    def argument(self, name: str) -> PromptArgument | None:
        return next((a for a in self.arguments if a.name == name), None)


# -- disk full triage ----------------------------------------------------------------------------


def _checked_path(raw: str, env: PromptEnv, name: str) -> tuple[str, str]:
    """The path resolved, as the prompt's calls give it (``call_argument``: the name itself) and as its
    prose shows it (``escaped``); or the argument refused with the rule."""
    try:
        real = str(env.paths.resolve(raw))
        return call_argument(real), escaped(real)
    except EngineError as exc:
        raise invalid_params(f"Invalid params: argument {name!r}: {words(exc)}") from None


def _render_triage(arguments: dict[str, str], env: PromptEnv) -> str:
    roots = env.paths.allowed
    default = str(roots[0]) if roots else "/"  # the name itself; with roots, "/" is out of scope
    path, shown = _checked_path(arguments.get("path") or default, env, "path")
    tools, known = env.tools, env.tool_arguments
    steps = [
        f"Call disk_usage with path={path} — how full is the filesystem holding it (percent as df "
        "computes it; used, free and reserved bytes; inodes)? If it is not above about 90%, say so and ask "
        "whether another disk is meant before digging further (disk_usage without a path lists every "
        "filesystem, /dev/shm and /run included, fullest first).",
        f"Call dir_usage with path={path} (top_n=20 if you want more than the default) to see what fills "
        "it. Drill into the directories the largest files sit in with further dir_usage calls.",
    ]
    if env.history and "what_changed" in tools:  # with history, start from what changed
        steps.insert(
            1,
            f"This host keeps history: call what_changed with path={path} and since='24h' (or '7d', or "
            "'last'): which directories grew since then and by how much, the largest new files, and when the "
            "filesystem fills at its recent rate. Start the digging from the directories it names.",
        )
    if "explain" in known.get("disk_usage", ()):
        steps.append(
            "Compare: if disk_usage's used bytes are clearly more than dir_usage finds on the whole "
            f"filesystem (dir_usage of its mount point), call disk_usage with path={path} and explain=true: "
            "it accounts for every used byte (files a walk reaches, deleted files still held open and who "
            "holds them, files hidden under mount points, unreadable directories, snapshots, the "
            "filesystem's overhead, and what is left unexplained) and gives the next step for each part."
            + (
                f" For the deleted files it names, deleted_open_files with path={path} says how to free "
                "the space without killing the process."
                if "deleted_open_files" in tools
                else ""
            )
        )
    elif "deleted_open_files" in tools:
        steps.append(
            "Compare: if disk_usage's used bytes are clearly more than dir_usage finds on the whole "
            "filesystem (dir_usage of its mount point), the gap is usually deleted files still held open. "
            f"Call deleted_open_files with path={path} — which processes hold them and how much; its "
            "answer says how to free the space without killing the process."
        )
    if "sample_s" in known.get("disk_usage", ()):
        writer = (
            "; then call disk_io (sample_s=5) to see which process is writing" if "disk_io" in tools else ""
        )
        steps.append(
            f"If it may be filling right now, call disk_usage with path={path} and sample_s=10 for the "
            f"fill rate and the time until it is full{writer}. A disk full within hours comes first in "
            "your report."
        )
    if "modified_within" in known.get("dir_usage", ()):
        steps.append(
            f"Call dir_usage with path={path} and modified_within='1d' (or '1h') to see what is new: what "
            "grew lately. Then call it with modified_before='30d' and show='all' for clean-up candidates: "
            "big files nobody touched for a month, and which file types (extensions) take the space."
        )
    if "find_duplicates" in tools:
        steps.append(
            f"Call find_duplicates with path={path} to find identical files that waste space; note "
            "how much space each duplicate group could free."
        )
    found = [
        "which filesystem, how full"
        + (" and how fast it is filling" if "sample_s" in known.get("disk_usage", ()) else ""),
        "the top space consumers with their sizes and ages",
    ]
    if "deleted_open_files" in tools:
        found.append("space held by deleted files and who holds it")
    if "find_duplicates" in tools:
        found.append("duplicate groups")
    steps.append(
        "Report: "
        + ", ".join(found)
        + "; and concrete suggestions to free space (old logs to rotate or compress, caches, build "
        "artifacts, forgotten downloads, a process to reload so it lets go of a deleted log)."
    )
    numbered = "\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1))
    return (
        f"The disk holding {shown} is full or filling up. Triage it with the sysmcp tools:\n\n{numbered}\n\n"
        "sysmcp is read-only: never claim to have deleted or moved anything. Put any clean-up as commands "
        "for me to review, largest win first, and warn about anything that is risky to remove."
    )


# -- verify a download ---------------------------------------------------------------------------


def parse_sha256(text: str) -> str:
    """The SHA-256 digest in what a download page shows: bare hex, ``sha256:HEX``, a sha256sum line, BSD style."""
    found = find_sha256(text)
    if found is None:
        raise invalid_params(
            "Invalid params: argument 'digest' must contain exactly one SHA-256 digest (64 hex digits), "
            "e.g. 'sha256:9f86d0…' or a line copied from SHA256SUMS"
        )
    return found


def _render_verify(arguments: dict[str, str], env: PromptEnv) -> str:
    path, shown = _checked_path(arguments.get("path", ""), env, "path")
    digest = parse_sha256(arguments.get("digest", ""))
    call = f"Call file_sha256 with path={path}"
    if "expected" in env.tool_arguments.get("file_sha256", ()):
        call += f" and expected={digest!r}; it compares the digests for you"
    return (
        f"I downloaded {shown} and the publisher gives its SHA-256 digest as {digest}. Is it the right file?\n\n"
        f"1. {call}.\n"
        f"2. Compare the digest it returns with {digest}: all 64 hex digits, ignoring case.\n"
        "3. Answer MATCH or MISMATCH first, then the file's size and both digests. On a mismatch, tell me "
        "not to open or run the file and to download it again from the official source (a truncated "
        "download also mismatches: compare the size with the published one if there is one). If the tool "
        "reports an error (no such file, not a regular file), say so instead of guessing."
    )


PROMPTS: tuple[Prompt, ...] = (
    Prompt(
        name="disk_full_triage",
        title="Disk full triage",
        description="Which disk is full, what fills it, and what could go: a read-only investigation "
        "with disk_usage and dir_usage, ending in a list of clean-up suggestions to review.",
        arguments=(
            PromptArgument(
                "path",
                "Path on the full disk",
                "Any absolute path on the filesystem that is full, e.g. /var (default: / or the first allowed root)",
                completes="directory",
            ),
        ),
        render=_render_triage,
    ),
    Prompt(
        name="verify_download",
        title="Verify a download",
        description="Check a downloaded file against the SHA-256 digest its publisher gives, and say "
        "MATCH or MISMATCH.",
        arguments=(
            PromptArgument(
                "path", "Downloaded file", "Absolute path of the downloaded file", True, completes="file"
            ),
            PromptArgument(
                "digest",
                "Published SHA-256",
                "The published SHA-256 digest: bare hex, 'sha256:…', or the line from SHA256SUMS",
                True,
            ),
        ),
        render=_render_verify,
    ),
)


class Prompts:
    """The prompt table: listing, rendering, completing."""

    def __init__(self) -> None:
        self._prompts = {prompt.name: prompt for prompt in PROMPTS}

    def list(self, features: Features) -> list[dict[str, Any]]:
        return [prompt.describe(features) for prompt in self._prompts.values()]

    def find(self, name: object) -> Prompt:
        if not isinstance(name, str):
            raise invalid_params("Invalid params: 'name' must be a string")
        prompt = self._prompts.get(name)
        if prompt is None:
            raise invalid_params(
                f"Invalid params: unknown prompt {name!r}; known prompts: {', '.join(self._prompts)}"
            )
        return prompt

    def get(self, name: object, arguments: object, env: PromptEnv) -> dict[str, Any]:
        """A ``GetPromptResult``; a missing, unknown or unusable argument is -32602."""
        prompt = self.find(name)
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict) or not all(isinstance(v, str) for v in arguments.values()):
            raise invalid_params("Invalid params: 'arguments' must be an object of strings")
        unknown = sorted(set(arguments) - {a.name for a in prompt.arguments})
        if unknown:
            raise invalid_params(f"Invalid params: {prompt.name} has no argument(s) {', '.join(unknown)}")
        missing = [a.name for a in prompt.arguments if a.required and not arguments.get(a.name)]
        if missing:
            raise invalid_params(f"Invalid params: {prompt.name} needs argument(s) {', '.join(missing)}")
        text = prompt.render(arguments, env)
        return {
            "description": prompt.description,
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        }


def complete_path(value: str, kind: PathKind, policy: PathPolicy) -> tuple[list[str], int]:
    """Paths that extend ``value`` and that the policy allows; blocking (it lists a directory).

    Directories end in ``/`` so the next completion descends into them; ``file`` completion offers
    files and the directories that may contain them. An empty value offers the allowed roots. Only a
    directory inside the roots is listed: above one, the way down is known from the roots themselves,
    so no name an outside directory holds (a symlink into a root included) is ever offered.
    """
    roots = policy.allowed
    if not value:
        starts = [display(root) + ("" if str(root) == "/" else "/") for root in roots] if roots else ["/"]
        return starts[:MAX_COMPLETIONS], len(starts)
    if not value.startswith("/"):
        return [], 0
    parent, _, prefix = value.rpartition("/")
    directory = Path(parent or "/")

    def offered(name: str) -> bool:
        # A name that is not printable (ESC, a newline, U+202E, bytes that are not UTF-8) is not offered:
        # a completion is inserted as it is, so it would drive the terminal of a client's prompt, and
        # escaped it would name another file.
        return (
            name.startswith(prefix)
            and (not name.startswith(".") or prefix.startswith("."))
            and name.isprintable()
        )

    try:
        real = policy.resolve(str(directory))
    except EngineError:
        matches = [
            display(directory / name) + "/" for name in policy.steps_down(str(directory)) if offered(name)
        ]
        return matches[:MAX_COMPLETIONS], len(matches)
    matches = []
    try:
        # The directory checked, opened as it was checked (no symlink followed on the way or at the end),
        # and listed through that descriptor: one swapped for a symlink out of the roots since is refused.
        with closing_fd(open_path(real, directory=True)) as fd, os.scandir(fd) as entries:
            for seen, entry in enumerate(entries):
                if seen >= SCAN_LIMIT:
                    break
                if offered(entry.name) and (is_dir := _allowed_kind(entry, real, kind, policy)) is not None:
                    matches.append(display(directory / entry.name) + ("/" if is_dir else ""))
    except (OSError, ValueError):  # ValueError: a NUL or a lone surrogate, which no file name holds
        return [], 0
    matches.sort()
    return matches[:MAX_COMPLETIONS], len(matches)


def _allowed_kind(
    entry: os.DirEntry[str], directory: Path, kind: PathKind, policy: PathPolicy
) -> bool | None:
    """Whether ``entry`` of the listed ``directory`` is a directory, None when it is not of ``kind`` or
    the policy refuses it. An entry is inside the roots as its directory is; a symlink among them is
    browsed like what it leads to once the policy has let that in, and that is looked at unfollowed."""
    try:
        if not entry.is_symlink():
            is_dir = entry.is_dir(follow_symlinks=False)  # looked at through the listed descriptor
        else:
            is_dir = _is_directory(policy.resolve(str(directory / entry.name)))
    except (EngineError, OSError, ValueError):
        return None
    return None if not is_dir and kind == "directory" else is_dir


def _is_directory(real: Path) -> bool:
    """Whether the resolved ``real`` is a directory, looked at without following a symlink anywhere."""
    if real == Path("/"):
        return True
    parent, name = open_parent(real)
    with closing_fd(parent):
        return stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)


__all__ = ["PROMPTS", "Prompt", "PromptArgument", "PromptEnv", "Prompts", "complete_path", "parse_sha256"]
