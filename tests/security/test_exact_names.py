"""Structured content names every file exactly, and a name given back finds the same file.

JSON text carries UTF-8 only. A name that is not UTF-8 was shown with ``\\xNN`` for its odd bytes, the
same JSON string as a name that holds those four characters: a program reading the structured content
could not tell the two files apart, nor get either's bytes. These tests make such names for real, read
the answers over the real server's pipes and undo them as a client would, from the documented scheme
(``exact_bytes``: JSON Pointer → base64), written here again rather than imported.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.paths import exact_names, in_json
from tests.wire import result_text, spawn

#: Names that are not UTF-8 beside the UTF-8 names that used to read alike in JSON, and names that
#: must come back byte for byte: backslash, newline, ESC, U+202E.
NAMES = [
    b"byte\x80",
    b"byte\\x80",
    b"both\\\x80",
    b"both\\\\x80",
    b"both\\\\\\x80",
    b"back\\slash",
    b"new\nline",
    b"esc\x1bape",
    "rtl\u202etxt.exe".encode(),
    "caf\u00e9".encode(),
    b"plain",
]


def undone(structured: dict[str, Any]) -> dict[str, Any]:
    """What a client does with the structured content: each string ``exact_bytes`` lists replaced by
    its bytes (here as ``os.fsdecode`` shows bytes, to compare with Python's names)."""
    data: dict[str, Any] = json.loads(json.dumps(structured))
    for pointer, encoded in data.pop("exact_bytes", {}).items():
        *way, last = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
        here = data
        for token in way:
            here = here[int(token)] if isinstance(here, list) else here[token]
        key = int(last) if isinstance(here, list) else last
        assert isinstance(here[key], str)
        here[key] = os.fsdecode(base64.b64decode(encoded, validate=True))
    return data


def make(tmp_path: Path) -> Path:
    tree = tmp_path / "t"
    tree.mkdir()
    for index, name in enumerate(NAMES):
        with open(os.fsencode(tree) + b"/" + name, "wb") as made:
            made.write(b"file %d" % index)
    return tree


@pytest.mark.anyio
async def test_structured_content_tells_each_name_apart_and_undoes_to_its_exact_bytes(tmp_path: Path) -> None:
    tree = make(tmp_path)
    async with spawn("--no-history") as wire:
        await wire.initialize("2025-11-25")
        reply = await wire.call("dir_usage", {"path": str(tree), "top_n": 50, "show": "files"})
    assert reply["result"]["isError"] is False, result_text(reply)
    structured = reply["result"]["structuredContent"]
    shown = [row["path"] for row in structured["largest_files"]]
    names = [os.fsencode(row["path"]) for row in undone(structured)["largest_files"]]
    assert sorted(names) == sorted(os.fsencode(tree) + b"/" + name for name in NAMES), shown
    for name in NAMES:  # a UTF-8 name is in the JSON as it is, byte for byte
        if not name.startswith(b"byte\x80") and b"\x80" not in name:
            assert (os.fsencode(tree) + b"/" + name).decode() in shown


def test_in_json_and_exact_names_undo_each_other_wherever_a_name_is() -> None:
    odd = os.fsdecode(b"/srv/a\x80\\x80")
    data = {
        "path": odd,
        "rows": [{"path": odd, "n": 1}, {"path": "/srv/a\\x80"}],
        "paths": ["/srv/plain", odd, "/srv/a\\\\x80"],
        "keyed": {"a/b~c": odd},
        "nested": [[odd]],
    }
    sent = json.loads(json.dumps(in_json(data)))  # as it travels: JSON text only
    assert sent["rows"][1]["path"] == "/srv/a\\x80" and sent["paths"][2] == "/srv/a\\\\x80"
    assert sent["path"] == "/srv/a\\x80\\\\x80"  # its backslash doubled, its byte \xNN
    assert set(sent["exact_bytes"]) == {"/path", "/rows/0/path", "/paths/1", "/keyed/a~1b~0c", "/nested/0/0"}
    assert exact_names(sent) == data == undone(sent)


def test_a_hosts_exact_bytes_that_lead_nowhere_or_are_not_base64_are_passed_over() -> None:
    sent = {
        "path": "x",
        "n": 1,
        "exact_bytes": {"/n": "gA==", "/missing/0": "gA==", "/path": "not base64!", "": "gA==", "/": "gA=="},
    }
    assert exact_names(sent) == {"path": "x", "n": 1}
    assert exact_names({"path": "x", "exact_bytes": "junk"}) == {"path": "x"}


@pytest.mark.anyio
async def test_a_reclaim_plan_and_its_skips_name_a_byte_and_its_escape_apart(tmp_path: Path) -> None:
    """Three copies of one file: ``dup\\x80`` with the byte, ``dup\\\\x80`` with the four characters, and
    a plain one. The plan's ``path_bytes`` mapped each shown name to bytes, and both names show as
    ``dup\\\\x80``: a client reading it took the one for the other. Each is now its own file."""
    raws = [os.fsencode(tmp_path) + b"/" + name for name in (b"dup\x80", b"dup\\x80", b"dup-plain")]
    for raw in raws:
        with open(raw, "wb") as made:
            made.write(b"same bytes " * 1000)
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize()
        reply = await wire.call("reclaim_plan", {"path": str(tmp_path), "classes": ["duplicate"]})
        plan = undone(reply["result"]["structuredContent"])
        (item,) = plan["items"]
        assert sorted(os.fsencode(p) for p in [*item["paths"], item["kept_copy"]]) == sorted(raws), item
        extra = [os.fsencode(p) for p in item["paths"]]
        for raw in extra:  # changed since the plan: every extra copy is skipped, each named exactly
            with open(raw, "ab") as grown:
                grown.write(b"more")
        ask = await wire.call("reclaim", {"plan_id": plan["plan_id"], "items": [item["id"]]})
        code = ask["result"]["structuredContent"]["confirmation_code"]
        done = await wire.call(
            "reclaim", {"plan_id": plan["plan_id"], "items": [item["id"]], "confirm": code}
        )
    skipped = undone(done["result"]["structuredContent"])["items"][0]["skipped"]
    assert sorted(os.fsencode(s["path"]) for s in skipped) == sorted(extra), skipped


@pytest.mark.anyio
async def test_file_sha256s_line_is_the_one_hash_tree_writes_for_a_name_with_a_backslash_and_a_byte(
    tmp_path: Path,
) -> None:
    """sha256sum's line escapes the backslash itself (the line starts with '\\'); the byte that is not
    UTF-8 is \\xNN after that, never a second doubling of the backslash."""
    tree = make(tmp_path)
    async with spawn("--no-history") as wire:
        await wire.initialize("2025-11-25")
        listed = result_text(await wire.call("hash_tree", {"path": str(tree)}))
        line = next(line for line in listed.split("\n") if line.endswith("  both\\\\\\x80"))
        one = result_text(
            await wire.call("file_sha256", {"path": os.fsdecode(os.fsencode(tree) + b"/both\\\x80")})
        )
    assert line.startswith("\\")
    assert line.replace("  ", f"  {tree}/", 1) in one, (line, one)


@pytest.mark.parametrize(
    "name", [b"byte\x80", b"back\\slash", b"new\nline", b"esc\x1bape", "rtl\u202etxt".encode()]
)
def test_a_prompt_names_the_very_file_in_the_call_it_suggests_and_shows_it_escaped(
    tmp_path: Path, name: bytes
) -> None:
    """verify_download's 'Call file_sha256 with path=…' put the name as ``display`` showed it in Python's
    repr: ``'…/byte\\\\x80'`` names a file holding the four characters, ``'…/back\\\\\\\\slash'`` read as
    written one with two backslashes. The value is now the name itself, bare or as a JSON string, as
    every suggested call gives it, and the prose shows the name escaped (``ls -b``)."""
    from sysmcp.engine.paths import PathPolicy, escaped
    from sysmcp.server.prompts import PromptEnv, _render_verify
    from tests.security.test_names_unambiguous import suggested_argument

    made = os.fsencode(tmp_path) + b"/" + name
    with open(made, "wb") as file:
        file.write(b"x")
    env = PromptEnv({"file_sha256"}, {"file_sha256": {"path", "expected"}}, PathPolicy(), history=False)
    text = _render_verify({"path": os.fsdecode(made), "digest": "a" * 64}, env)
    assert os.fsencode(suggested_argument(text, "path")) == made, text
    assert f"I downloaded {escaped(made)} and" in text, text


def test_the_triage_prompt_starts_from_a_root_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """With no path given it starts from the first root: its ``display`` form was resolved as if it
    were a name, ``…/root\\\\x80``, another directory (refused, or another one's triage)."""
    from sysmcp.engine.paths import PathPolicy
    from sysmcp.server.prompts import PromptEnv, _render_triage
    from tests.security.test_names_unambiguous import suggested_argument

    root = os.fsencode(tmp_path) + b"/root\x80"
    os.mkdir(root)
    env = PromptEnv(
        {"disk_usage"}, {"disk_usage": set()}, PathPolicy.of_operator([os.fsdecode(root)]), history=False
    )
    text = _render_triage({}, env)
    assert os.fsencode(suggested_argument(text, "path")) == root, text


@pytest.mark.anyio
async def test_a_name_taken_from_the_structured_content_and_given_back_finds_the_same_file(
    tmp_path: Path,
) -> None:
    """The round trip a client makes: dir_usage lists the files, each path (undone from exact_bytes)
    goes back as file_sha256's path, and its digest is that file's own. A name that is not UTF-8 goes
    back as ``os.fsdecode`` makes it (the JSON text escapes its lone surrogates, ``\\udc80``)."""
    import hashlib

    tree = make(tmp_path)
    async with spawn("--no-history") as wire:
        await wire.initialize("2025-11-25")
        listed = await wire.call("dir_usage", {"path": str(tree), "top_n": 50, "show": "files"})
        paths = [row["path"] for row in undone(listed["result"]["structuredContent"])["largest_files"]]
        assert sorted(map(os.fsencode, paths)) == sorted(os.fsencode(tree) + b"/" + name for name in NAMES)
        for path in paths:
            reply = await wire.call("file_sha256", {"path": path})
            assert reply["result"]["isError"] is False, (path, result_text(reply))
            with open(os.fsencode(path), "rb") as named:
                assert (
                    reply["result"]["structuredContent"]["sha256"] == hashlib.sha256(named.read()).hexdigest()
                )
            assert os.fsencode(undone(reply["result"]["structuredContent"])["path"]) == os.fsencode(path)


@pytest.mark.anyio
@pytest.mark.parametrize("name", [b"d\x80", b"d\\x80"])
async def test_a_kept_listings_description_shows_its_directory_escaped(tmp_path: Path, name: bytes) -> None:
    """The full listing's description (resources/list) named the directory as ``display`` does, so
    ``d<0x80>`` and ``d\\\\x80`` read alike there; it now shows it as the text does (``ls -b``)."""
    from sysmcp.engine.paths import escaped
    from tests.harness import call_tool, tool_context

    directory = os.fsencode(tmp_path) + b"/" + name
    os.mkdir(directory)
    for index in range(3):
        with open(directory + b"/f%d" % index, "wb") as made:
            made.write(b"x" * 5000 * (index + 1))
    out = await call_tool("dir_usage", tool_context(None), path=os.fsdecode(directory), top_n=1, show="files")
    (link,) = out.links
    assert link.description == f"Full dir_usage listing of {escaped(directory)}", link.description


@pytest.mark.parametrize("name", [b"root\x80", b"root\x1bx", "root\u202ex".encode(), b"back\\slash"])
def test_a_refusal_lists_each_allowed_root_as_a_path_argument_that_names_it(
    tmp_path: Path, name: bytes
) -> None:
    """'Allowed roots: …' tells the model where it may look: a root whose name is not UTF-8 was listed
    as ``display`` shows it (``root\\\\x80``, another name), one with ESC or U+202E raw (escaped on the
    way out, ``root\\\\033x``: another name again). Each is now given as a call gives a path."""
    from sysmcp.engine.faults import OutsideRoots
    from sysmcp.engine.paths import PathPolicy, printable_text
    from sysmcp.tools.errors import words

    root = os.fsencode(tmp_path) + b"/" + name
    os.mkdir(root)
    with pytest.raises(OutsideRoots) as refused:
        PathPolicy.of_operator([os.fsdecode(root)]).resolve("/etc")
    told = printable_text(words(refused.value))  # as every answer's text leaves the server
    listed = told.split("Allowed roots: ", 1)[1]
    given = json.loads(listed) if listed.startswith('"') else listed
    assert os.fsencode(given) == root, listed


@pytest.mark.parametrize("text", ["a\ud800b", "\udfff", "a\udc80\ud83dz", "\ud83d\ude00"])
def test_a_string_holding_a_surrogate_that_stands_for_no_byte_is_shown_and_listed_never_a_crash(
    text: str,
) -> None:
    """Only U+DC80..U+DCFF stand for a byte (``os.fsdecode``); any other lone surrogate reaches a result
    from JSON text that escapes it (``"\\ud800"``: a host's answer). ``os.fsencode`` refused it, and
    ``in_json`` raised: one host's words took the whole fleet answer. It is shown by its UTF-8 form's
    bytes now (``\\xed\\xa0\\x80``), listed with those bytes, and the answer is UTF-8 JSON text."""
    sent = in_json({"rows": [{"text": text}]})
    wire = json.dumps(sent, ensure_ascii=False).encode("utf-8")  # no lone surrogate is left to write
    assert "/rows/0/text" in json.loads(wire)["exact_bytes"]


def test_a_hosts_answer_holding_a_lone_surrogate_is_merged_with_the_other_hosts() -> None:
    from sysmcp.tools.merging import HostOutcome, default_merge

    out = default_merge(
        [HostOutcome("w1", "ok", 0.1, None, "odd \ud800 text"), HostOutcome("w2", "ok", 0.1, None, "fine")],
        {},
    )
    json.dumps(out.structured, ensure_ascii=False).encode("utf-8")
    assert [entry["host"] for entry in out.structured["hosts"]] == ["w1", "w2"]
    assert "fine" in out.text


def test_a_hosts_names_are_read_back_in_time_linear_in_their_number() -> None:
    """The gateway undoes each host's ``exact_bytes`` on its one event loop. Each pointer copied every
    list on its way: 20,000 names in one list took 2.1 s of CPU there (in_json had made them in 0.12 s,
    undoing them now takes 0.04 s), and a host's answer of 100,000 stalled every host and call for a minute. The bound is CPU
    time relative to in_json's on the same rows, which a loaded machine does not stretch apart."""
    import time

    rows = [{"path": os.fsdecode(b"/srv/f%d\x80" % index), "bytes": index} for index in range(20_000)]
    started = time.process_time()
    sent = json.loads(json.dumps(in_json({"rows": rows})))
    shown = time.process_time() - started
    started = time.process_time()
    back = exact_names(sent)
    undoing = time.process_time() - started
    assert back == {"rows": rows}
    assert undoing < 3 * shown + 0.1, (undoing, shown)


@pytest.mark.parametrize("index", ["\u00b2", "\u0663\u0663", "-1", "1e3", " 0"])
def test_a_hosts_pointer_whose_index_is_no_ascii_number_is_passed_over(index: str) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` raises: a host's pointer ``/rows/²`` raised out of the
    fan-out instead of being passed over as every other pointer that leads nowhere is. An index is
    ASCII digits (RFC 6901)."""
    sent = {"rows": ["a", "b"], "exact_bytes": {f"/rows/{index}": "gA==", "/rows/1": "gA=="}}
    assert exact_names(sent) == {"rows": ["a", "\udc80"]}


def test_a_fleet_hosts_own_file_of_sysmcp_call_o_keeps_the_exact_bytes_of_its_names() -> None:
    """``sysmcp call -o DIR`` writes each host's structured result to its own file. The fleet's answer
    lists the names that are not UTF-8 once, at its top (``/hosts/N/result/...``), and the host's file
    had none of them: ``byte\\\\x80`` there was the byte or the four characters, no telling which. Each
    file now carries its own ``exact_bytes``, its pointers from the result it holds."""
    import anyio

    from sysmcp.cli.call import _per_host

    byte, four = os.fsdecode(b"/srv/byte\x80"), "/srv/byte\\x80"
    hosts = [
        {"host": "web1", "status": "ok", "result": {"rows": [{"path": "/srv/plain"}, {"path": four}]}},
        {"host": "web2", "status": "ok", "result": {"rows": [{"path": byte}, {"path": four}]}},
    ]
    answer = json.loads(json.dumps(in_json({"hosts": hosts})))
    no_links: Any = None  # hosts with no links: nothing is read through a session
    files = anyio.run(_per_host, no_links, {"structuredContent": answer})
    assert [undone(json.loads(files[f"{entry['host']}.json"])) for entry in hosts] == [
        e["result"] for e in hosts
    ]


def test_a_key_holding_a_lone_surrogate_is_shown_as_display_shows_a_name() -> None:
    """A key is no name of sysmcp's own, but a host's result may hold any (``{"\\udc80": 1}`` in its
    JSON text): in_json left keys as they were, and the gateway's answer carried the lone surrogate
    to the wire, escaped, which a strict JSON client refuses. Shown as display shows a name now, and
    a name under it is listed at the pointer the client reads."""
    odd = os.fsdecode(b"/srv/x\x80")
    sent = in_json({"hosts": [{"result": {"k\udc80": {"path": odd}, "\ud800": 1}}]})
    wire = json.loads(json.dumps(sent, ensure_ascii=False).encode("utf-8"))
    assert wire["hosts"][0]["result"]["k\\x80"] == {"path": "/srv/x\\x80"}
    assert exact_names(wire)["hosts"][0]["result"]["k\\x80"] == {"path": odd}  # type: ignore[index]
