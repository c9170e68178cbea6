"""Two different names never look the same in an answer.

A name may hold any byte but ``/`` and NUL, a backslash included. The text shows a name escaped
(ESC as ``\\033``, a newline as ``\\n``, a byte that is not UTF-8 as ``\\200``); were a backslash of
the name itself left as it is, the file whose name holds ESC and the file literally named ``a\\033b``
would read alike, and a model asking about the one it was shown would be answered about the other.
These tests make such pairs for real and read the answers over the real server's pipes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sysmcp.engine.paths import escaped, printable_text
from tests.profile import UNDER_POSIX_PROFILE
from tests.wire import result_text, spawn

#: Pairs of names that looked alike: the first holds the character or byte, the second the text
#: the answer used to show for it.
LOOKALIKES = [
    (b"esc\x1bb", b"esc\\033b"),
    (b"byte\x80", b"byte\\x80"),
    (b"octal\x80", b"octal\\200"),
    (b"new\nline", b"new\\nline"),
    (b"tab\tbed", b"tab\\tbed"),
    (b"cr\rret", b"cr\\rret"),
    (b"bell\x07x", b"bell\\ax"),
    (b"nb\xc2\xa0sp", b"nb\\302\\240sp"),
]


def names() -> list[bytes]:
    return [name for pair in LOOKALIKES for name in pair]


def test_each_pair_is_shown_apart_by_printable() -> None:
    for first, second in LOOKALIKES:
        assert escaped(first) != escaped(second), (first, second)
        assert escaped(os.fsdecode(first)) == escaped(first)  # bytes and fsdecode's str alike


def test_printable_shows_a_name_as_ls_b_does_and_words_keep_their_backslashes() -> None:
    from sysmcp.engine.paths import one_line

    assert escaped(b"a\\b\x1b\x80\n\xc2\xa0") == "a\\\\b\\033\\200\\n\\302\\240"
    assert escaped("a\\b") == escaped("a\\b") == "a\\\\b"
    # a host's line or a daemon's message: its own escapes (a name a host escaped) stay as they are
    assert one_line("  a\\\\b \x1b\n") == "  a\\\\b \\033\\n"
    # the last guard on an answer escapes what no tool should have left, never a backslash twice
    assert printable_text("x a\\\\b\n\x1b") == "x a\\\\b\n\\033"


def make(tmp_path: Path) -> Path:
    tree = tmp_path / "t"
    tree.mkdir()
    for index, pair in enumerate(LOOKALIKES):  # each pair a group of duplicates of its own
        for name in pair:
            Path(os.fsdecode(os.fsencode(tree) + b"/" + name)).write_bytes(b"pair %d" % index)
    return tree


def shown_apart(text: str) -> None:
    """Each name of ``LOOKALIKES`` is in ``text`` as ``ls -b`` writes it, each on a line of its own."""
    for name in names():
        shown = escaped(
            name
        )  # as ls -b; a whole name: after '/' or a space, before a space, ':', ')' or the end
        assert re.search(rf"[/ ]{re.escape(shown)}(\s|:|\)|$)", text, re.MULTILINE), (name, shown, text)


#: Names a suggested command must give its shell exactly: besides the lookalikes, a quote, printf's
#: ``%``, a command substitution, U+202E and names ending in newlines (which ``$(…)`` would drop).
SHELL_NAMES = [
    b"plain",
    b"it's",
    *names(),
    b"q'\x1b\\",
    b"pct%s%%d",
    b"$(touch pwned)`id`",
    "rtl\u202etxt.exe".encode(),
    b"ends\n",
    b"ends\n\n",
    b"bad\xff\\x\n",
]


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_a_suggested_command_names_the_very_directory_in_any_posix_sh(tmp_path: Path, shell: str) -> None:
    """disk_explain's and disk_pools' commands and hash_tree's ``cd``: one printable word which the
    shell a person pastes it into reads back as the exact directory. Bash's ``$'…'`` was not that word:
    dash (Debian's /bin/sh) reads ``$'a\\033b'`` as ``$a\\033b``, another name."""
    from sysmcp.engine.paths import shell_word

    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    for name in SHELL_NAMES:
        made = os.fsencode(tmp_path) + b"/" + name
        os.mkdir(made)
        word = shell_word(made)
        assert word.isprintable() and "\n" not in word, (name, word)
        said = subprocess.run(
            [shell, "-c", f"cd {word} && ls -di ."], cwd=tmp_path, capture_output=True, check=False
        )
        assert said.stdout.split() == [str(os.stat(made).st_ino).encode(), b"."], (name, word, said)
    assert not (tmp_path / "pwned").exists()
    for word_name in (b"-dash\x1b", b"-n\\x"):  # a name of its own (a container's), not a path
        word = shell_word(word_name)
        said = subprocess.run([shell, "-c", f"printf %s {word}"], capture_output=True, check=False)
        assert said.stdout == word_name, (word_name, word, said)


@pytest.mark.anyio
async def test_hash_tree_says_how_to_check_a_directory_whose_name_holds_a_backslash(tmp_path: Path) -> None:
    tree = tmp_path / "back\\slash"
    tree.mkdir()
    (tree / "f").write_bytes(b"f")
    async with spawn("--no-history") as wire:
        await wire.initialize("2025-11-25")
        text = result_text(await wire.call("hash_tree", {"path": str(tree)}))
    assert f"Put in {escaped(str(tree))} as SHA256SUMS" in text
    assert f"`cd \"$(printf '{escaped(str(tree))}')\" && sha256sum -c SHA256SUMS`" in text


WALKS = {
    "dir_usage": lambda tree: {"path": str(tree), "top_n": 50, "show": "files"},
    "find_duplicates": lambda tree: {"path": str(tree), "top_n": 50},
    "verify_checksums": lambda tree: {
        "manifest": "0" * 64 + "  gone\n",
        "base_dir": str(tree),
        "report_new": True,
    },
    "deleted_open_files": lambda tree: {"path": str(tree), "top_n": 50},
}


@pytest.mark.anyio
@pytest.mark.parametrize("tool", sorted(WALKS))
async def test_lookalike_names_are_told_apart_in_a_tools_text(tmp_path: Path, tool: str) -> None:
    tree = make(tmp_path)
    held = []
    if tool == "deleted_open_files":  # this process holds each file open, its name gone
        if UNDER_POSIX_PROFILE or not Path("/proc/self/fd").is_dir():
            pytest.skip(
                "deleted-open files are read from /proc, which the portable profile hides (macOS has none)"
            )
        for name in names():
            path = os.fsencode(tree) + b"/" + name
            held.append(os.open(path, os.O_RDONLY))
            os.unlink(path)
    try:
        async with spawn("--no-history") as wire:
            await wire.initialize("2025-11-25")
            reply = await wire.call(tool, WALKS[tool](tree))
            assert reply["result"]["isError"] is False, result_text(reply)
            shown_apart(result_text(reply))
            # the structured content names them as JSON text can: no lone surrogate for a byte
            structured = json.dumps(reply["result"]["structuredContent"], ensure_ascii=False)
            assert "byte\\\\x80" in structured and structured.encode("utf-8")
    finally:
        for fd in held:
            os.close(fd)


@pytest.mark.anyio
async def test_hash_tree_gives_each_lookalike_a_manifest_line_of_its_own(tmp_path: Path) -> None:
    """Its lines are sha256sum's own (a backslash doubled, the line then starting with one)."""
    tree = make(tmp_path)
    async with spawn("--no-history") as wire:
        await wire.initialize("2025-11-25")
        reply = await wire.call("hash_tree", {"path": str(tree)})
        lines = [line for line in result_text(reply).split("\n") if re.match(r"\\?[0-9a-f]{64}  ", line)]
        assert len(lines) == len(set(lines)) == len(names())


@pytest.mark.anyio
async def test_file_sha256_names_each_of_two_lookalikes_as_itself(tmp_path: Path) -> None:
    tree = make(tmp_path)
    async with spawn("--no-history") as wire:
        await wire.initialize("2025-11-25")
        for first, second in LOOKALIKES:
            texts = []
            for name in (first, second):
                if b"\x80" in name:  # no JSON string names it: the structured path is its display
                    continue
                reply = await wire.call("file_sha256", {"path": os.fsdecode(os.fsencode(tree) + b"/" + name)})
                assert reply["result"]["isError"] is False
                # the structured path is the very name asked about: passed back, it names the same file
                assert (
                    reply["result"]["structuredContent"]["path"].encode("utf-8")
                    == os.fsencode(tree) + b"/" + name
                )
                texts.append(result_text(reply))
            assert len(set(texts)) == len(texts)


def suggested_argument(text: str, key: str) -> str:
    """The value a call the text suggests gives ``key``: a JSON string when quoted, else the bare word."""
    found = re.search(rf'{key}=("(?:[^"\\]|\\.)*"|\S+?)(?=[.\s]|$)', text)
    assert found, text
    value = found.group(1)
    return str(json.loads(value)) if value.startswith('"') else value


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["back\\slash", "esc\x1bape", "plain"])
async def test_a_suggested_call_names_the_very_directory(tmp_path: Path, name: str) -> None:
    """verify_checksums' 'try base_dir=…': a path argument is the name itself, so the value suggested
    must be the exact name (its shown form, 'back\\\\slash', would name a directory with two
    backslashes, another one or none)."""
    made = tmp_path / name
    made.mkdir()
    (made / "f").write_bytes(b"f")
    manifest = made / "SHA256SUMS"
    manifest.write_text("0" * 64 + "  f\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with spawn("--no-history") as wire:
        await wire.initialize("2025-11-25")
        reply = await wire.call("verify_checksums", {"manifest": str(manifest), "base_dir": str(elsewhere)})
        text = result_text(reply)
        assert "Every entry is MISSING" in text, text
        assert f"The manifest's own directory is {escaped(str(made))}" in text
        suggested = suggested_argument(text, "base_dir")
        assert suggested == str(made), (suggested, text)
        # and that value, passed back, finds the file
        again = await wire.call("verify_checksums", {"manifest": str(manifest), "base_dir": suggested})
        assert "1 FAILED" in result_text(again), result_text(again)


def test_a_call_argument_is_the_name_itself_or_a_json_string_of_it() -> None:
    from sysmcp.engine.paths import call_argument

    for name in [
        "/srv/plain x",
        "/srv/a\\b",
        "/srv/\\",
        "/srv/end\\",
        "/srv/e\x1bs",
        "/srv/n\nl",
        "/srv/r\u202eb",
    ]:
        word = call_argument(name)
        assert word.isprintable()
        assert (json.loads(word) if word.startswith('"') else word) == name, (name, word)
    assert call_argument("/srv/a\\b") == '"/srv/a\\\\b"'


@pytest.mark.skipif(UNDER_POSIX_PROFILE, reason="mount namespaces are Linux's")
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root: a tmpfs mount")
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) from util-linux")
def test_disk_explain_suggests_calls_on_the_very_mount_point(tmp_path: Path) -> None:
    """disk_usage explain's 'Next: dir_usage path=…' and 'deleted_open_files path=…' on a tmpfs whose
    mount point holds a backslash, in a private mount namespace: the value is the mount point itself."""
    point = tmp_path / "mnt\\point"
    point.mkdir()
    done = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount -t tmpfs -o size=4m tmpfs "$1" && echo x > "$1/f" && shift && exec "$@"',
            "sh",
            str(point),
            sys.executable,
            "-m",
            "sysmcp",
            "call",
            "--no-history",
            "disk_usage",
            f"path={json.dumps(str(point))}",
            "explain=true",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"used on {escaped(str(point))} (tmpfs" in done.stdout, done.stdout
    for key in ("dir_usage path", "deleted_open_files path"):
        assert suggested_argument(done.stdout, key) == str(point), done.stdout
