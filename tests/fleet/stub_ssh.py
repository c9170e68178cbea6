"""A stand-in for ``ssh`` that is itself a tiny MCP answerer: the fan-out's own cost and its faults,
without sshd. Called as ``ssh``'s argv (``… -- HOST COMMAND``); the host name's prefix picks the
behaviour (``ok``, ``hang``, ``mute``, ``garbage``, ``oddshape``, ``bignumber``, ``refuse``,
``notfound``, ``uvxfail``, ``huge``: a reply line longer than any client reads, never ended, ``long``: a
whole reply line of 85 MiB, longer than any sysmcp sends,
``infinite``: a number past any float in its result, ``escapes``: terminal escapes in its progress,
``dies``: half an answer then exit 1, ``fails``: a tool error, ``complex``: a 6 MiB result of
two million empty objects, ``badcode``: ``initialize`` refused with an error code that is a string, ``deep``: a result
nested ``$STUB_DEPTH`` (900) deep,
``forgets``: every ``resources/read`` refused in 100,000 characters with a terminal escape,
``controls``: every ``resources/read`` answered with a text of a million control characters, ``slow``: a remote start that answers ``initialize`` only once the file
``$STUB_GATE`` exists, ``liar``: a direct host whose ssh "fails" with a bastion's words on stderr,
``stall``: 32 MiB of a reply line (then the file ``$STUB_WRITTEN`` is made), then silence, ``flood``: 200,000 notifications before its reply,
``nullid``: every call refused by an error with ``"id": null``, ``large``: a whole reply of
``$STUB_LARGE`` bytes (1 MiB), sent once the file ``$STUB_GATE`` exists when that is set). Each start appends the host's name to ``$STUB_STARTS`` when that is set, and
each end at its stdin's end (not killed) to ``$STUB_ENDS``.
Standard library only, started with ``-S -E``: it must cost a few milliseconds."""

import json
import os
import sys
import time


def main() -> int:
    argv = sys.argv[1:]
    if "-O" in argv or "-G" in argv:  # ssh -O exit: no master here; ssh -G: no configuration to print
        return 0
    rest = argv[argv.index("--") + 1 :]
    host = rest[0]
    if "STUB_STARTS" in os.environ:
        with open(os.environ["STUB_STARTS"], "a") as starts:
            starts.write(host + "\n")
    if host.startswith("refuse"):
        sys.stderr.write(f"ssh: connect to host {host} port 22: Connection refused\r\n")
        return 255
    if host.startswith("liar"):  # a direct host's own words, dressed as a bastion's failure
        sys.stderr.write("bastion jump1 (10.0.0.5) refused: Connection refused\x1b[2J" + "!" * 5000 + "\n")
        return 255
    if host.startswith("notfound"):
        sys.stderr.write("bash: line 1: uvx: command not found\n")
        return 127
    if host.startswith("uvxfail"):
        sys.stderr.write(
            "  × No solution found when resolving tool dependencies:\n"
            "  ╰─▶ Because sysmcp was not found in the package registry and you require sysmcp, we can\n"
            "      conclude that your requirements are unsatisfiable.\n"
            "hint: Packages were unavailable because the network was disabled.\n"
        )
        return 1
    out = sys.stdout  # noqa: TID251 - this stub is the remote end of a wire: stdout is its reply
    if host.startswith("garbage"):
        out.write("Welcome to host " + host + "! Have a nice day.\n")
        out.flush()
        time.sleep(30)
        return 0
    for line in sys.stdin:
        message = json.loads(line)
        method, msg_id = message.get("method"), message.get("id")
        if msg_id is None:
            continue
        if method == "initialize" and host.startswith("badcode"):  # an error whose code is no integer
            error = {"code": "E42", "message": "go away\x1b[2J"}
            out.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": error}) + "\n")
            out.flush()
            continue
        if method == "tools/call" and host.startswith("nullid"):  # as to a line it could not read
            refused = {"code": -32700, "message": "Parse error: message of 5000000 bytes exceeds the limit"}
            out.write(json.dumps({"jsonrpc": "2.0", "id": None, "error": refused}) + "\n")
            out.flush()
            continue
        if method == "tools/call" and host.startswith("stall"):  # stops mid-line, for good
            out.write(json.dumps({"jsonrpc": "2.0", "id": msg_id})[:-1] + ', "result": "')
            out.write("x" * (32 << 20))
            out.flush()
            if "STUB_WRITTEN" in os.environ:  # all but a pipe's worth is read by now
                open(os.environ["STUB_WRITTEN"], "w").close()
            time.sleep(60)
            return 0
        if method == "tools/call" and host.startswith("flood"):  # notifications no sysmcp would send
            note = json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}) + "\n"
            for _ in range(20):
                out.write(note * 10_000)
            out.flush()
        if method == "resources/read" and host.startswith("forgets"):  # a long error, with escapes
            gone = {"code": -32002, "message": "gone\x1b]52;c;owned\x07 " + "x" * 100_000}
            out.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": gone}) + "\n")
            out.flush()
            continue
        if method == "initialize":
            if host.startswith("mute"):
                continue  # accepts, never speaks
            while host.startswith("slow") and not os.path.exists(os.environ["STUB_GATE"]):
                time.sleep(0.01)  # a remote start on a saturated host: done when the test says so
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "stub", "version": "0"},
            }
        elif method == "tools/call":
            if host.startswith("hang"):
                continue  # hangs mid-answer
            text = os.environ.get("STUB_TEXT", "the same answer")
            result = {
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"answer": text},
                "isError": False,
            }
            if host.startswith("dies"):  # half an answer, then the process is gone
                out.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": {"content": []}})[:30])
                out.flush()
                os._exit(1)
            if host.startswith("huge"):  # 97 MiB of one line that never ends, then silence
                out.write(json.dumps({"jsonrpc": "2.0", "id": msg_id})[:-1] + ', "result": "')
                out.write("x" * (97 << 20))
                out.flush()
                time.sleep(60)
                return 0
            if host.startswith("large"):  # a large answer, well-formed, sent when the test says so
                while "STUB_GATE" in os.environ and not os.path.exists(os.environ["STUB_GATE"]):
                    time.sleep(0.01)
                result["structuredContent"] = {"answer": "x" * int(os.environ.get("STUB_LARGE", 1 << 20))}
            if host.startswith("fails"):
                result = {"content": [{"type": "text", "text": text}], "isError": True}
            if host.startswith("long"):  # well-formed, ended, and past the 80 MiB no sysmcp exceeds
                result["structuredContent"] = {"answer": "x" * (85 << 20)}
            if host.startswith("complex"):  # small as a line, some 25 times that once parsed
                result["structuredContent"] = {"answer": "__many__"}
            if host.startswith("deep"):  # a result nested $STUB_DEPTH deep
                result["structuredContent"] = {"answer": "__deep__"}
            if host.startswith("infinite"):  # valid JSON; as a Python float, Infinity
                result["structuredContent"] = {"answer": text, "bytes": "__1e400__"}
            if host.startswith("oddshape"):  # an answer in no shape MCP defines: content null
                result["content"] = None
            token = message["params"].get("_meta", {}).get("progressToken")
            params = None
            if host.startswith("bignumber") and token is not None:  # valid JSON, past any float
                params = {"progressToken": token, "progress": 10**400, "total": 10**400}
            if host.startswith("escapes") and token is not None:  # words for the operator's terminal
                params = {"progressToken": token, "progress": 1, "message": "\x1b]52;c;owned\x07 1 file"}
            if params is not None:
                out.write(
                    json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
                )
                out.write("\n")
        elif method == "resources/read" and host.startswith("controls"):  # 1 MiB, 6 MiB as JSON
            result = {"contents": [{"uri": message["params"]["uri"], "text": "\x01" * (1 << 20)}]}
        else:
            result = {}
        reply = json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result})
        reply = reply.replace('"__1e400__"', "1e400")
        if host.startswith("deep"):
            depth = int(os.environ.get("STUB_DEPTH", "900"))
            reply = reply.replace('"__deep__"', "[" * depth + "]" * depth)
        if host.startswith("complex"):
            reply = reply.replace('"__many__"', "[" + "{}," * (2 << 20) + "{}]")
        out.write(reply + "\n")
        out.flush()
    if "STUB_ENDS" in os.environ:
        with open(os.environ["STUB_ENDS"], "a") as ends:
            ends.write(host + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
