"""Many files: hash_tree, verify_checksums, find_duplicates and dir_usage against the tools admins run instead.

One run, side by side, medians of ``--rounds`` interleaved rounds (warm cache: one untimed pass of every
contender first), each row with its ratio (sysmcp / reference) and peak memory:

- sysmcp: a fresh ``python -m sysmcp`` per measurement, driven over raw JSON-RPC (``hash_bench.Server``),
  timed from sending ``tools/call`` to its result. With ``--server warm`` (or ``both``, the default) each
  row is also timed in one warm server kept for the whole run, asked with a progress token as a real
  client asks: the warm-up is that server's first call, every timed one its second, third … (a first call
  can leave state behind, a thread pool or a cache, that a fresh server never shows). A warm server's
  peak RSS is its peak so far, earlier calls included. Peak RSS is the server's ``VmHWM`` plus the ``VmHWM`` of
  every child process it forks (sampled every 10 ms; shared copy-on-write pages are counted once per
  process, so this overstates).
  In brackets: the peak of the summed ``Pss`` (shared pages split between the processes sharing them),
  sampled every 50 ms: reading ``smaps_rollup`` walks a process's page tables (0.36 ms of CPU for an idle
  server), and every 10 ms it took about 8 % of a CPU from a contender running two processes on two CPUs
  (``dir_usage`` of the 200k tree: 0.444 s median without the sampler, 0.479 s with it; ``du`` unchanged).
- references: a shell pipeline timed as a whole; peak RSS is the largest ``VmHWM`` of its processes,
  sampled the same way (``ru_maxrss`` would include this Python process's peak, inherited at exec).

Corpora (``corpus.py``, seeded, generated on first use under ``--corpus``): ``mixed`` (200,000 files),
``small`` (1,000,000 files of 0-200 B), ``duplicates`` (``--dup-files``, default 5,000 of the issue's 20,000
to spare disk: about 4.5 GB). Answers are checked once: manifests against the reference's (sorted), duplicate
sets against ``jdupes -r``'s.

    uv run python benchmarks/many_files_bench.py --corpus /work/bench-corpus --rounds 3
    uv run python benchmarks/many_files_bench.py --only hash-mixed,dups --rounds 5
    uv run python benchmarks/many_files_bench.py --only verify,verify-small --rounds 3
    uv run python benchmarks/many_files_bench.py --only dups --server warm --dup-files 200 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus
from hash_bench import Server

PAGE = 1024  # VmHWM is in kB
PSS_EVERY = 5  # VmHWM samples (10 ms apart) per Pss sample: VmHWM is a kernel-kept peak, cheap to read


def _hwm(pid: int) -> int:
    """Peak resident set of a process in bytes (0 once it has gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * PAGE
    except (OSError, ValueError):
        pass
    return 0


def _pss(pid: int) -> int:
    """Proportional set size in bytes: shared pages split between the processes sharing them."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * PAGE
    except (OSError, ValueError):
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in children:
                found.append(int(child))
                pending.append(int(child))
    return found


class PeakSampler:
    """Samples the peak RSS of a process and of every descendant it had, until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.children: dict[int, int] = {}
        self.server = 0
        self.pss = 0  # the largest sum of Pss over the process and its descendants at one moment
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        count = 0
        while not self._stop.wait(0.01):
            count += 1
            self.sample(pss=count % PSS_EVERY == 1)  # the first at 10 ms, then every 50 ms

    def sample(self, *, pss: bool = True) -> None:
        self.server = max(self.server, _hwm(self.pid))
        together = _pss(self.pid) if pss else 0
        for child in _descendants(self.pid):
            self.children[child] = max(self.children.get(child, 0), _hwm(child))
            if pss:
                together += _pss(child)
        self.pss = max(self.pss, together)

    def stop(self, *, largest: bool = False) -> int:
        """The process's peak plus its children's (or, with ``largest``, the largest of them all)."""
        self._stop.set()
        self._thread.join()
        self.sample()
        if largest:
            return max([self.server, *self.children.values()])
        return self.server + sum(self.children.values())


@dataclass
class Measure:
    seconds: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    pss: list[int] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # sysmcp's: the call's CPU, server and reaped workers


SYSMCP_OPTIONS: list[str] = []  # --sysmcp-options: this checkout's server options (not --before's)
CALL_CPU: list[float] = []  # the last sysmcp call's CPU seconds, handed from sysmcp_call to run_rows


PEAK_PSS: list[int] = []  # the last sysmcp run's peak Pss sum, handed from sysmcp_call to run_rows


WARM_SERVERS: list[Server] = []  # one per warm row, kept across rounds, closed at the end
CALLS: dict[
    Callable[[], tuple[float, int]], tuple[str, dict[str, Any], dict[str, Any] | None]
] = {}  # a row's call and where it keeps its answer for the check, for its warm twin


def sysmcp_call(
    tool: str,
    arguments: dict[str, Any],
    keep: dict[str, Any] | None = None,
    *,
    warm: bool = False,
    python: str | None = None,
) -> Callable[[], tuple[float, int]]:
    """One measurement: in a fresh server, or (``warm``) in the same server every time, with a
    progress token; ``python`` runs another checkout's sysmcp (``--before``)."""
    kept: list[Server] = []

    options = () if python is not None else SYSMCP_OPTIONS

    def run() -> tuple[float, int]:
        if warm and not kept:
            kept.append(Server(python, options))
            WARM_SERVERS.append(kept[0])
        server = kept[0] if warm else Server(python, options)
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if warm:
            params["_meta"] = {"progressToken": f"bench-{tool}"}
        try:
            sampler = PeakSampler(server.proc.pid)
            cpu = server.cpu_seconds(children=True)
            started = time.perf_counter()
            result = server.request("tools/call", params)
            seconds = time.perf_counter() - started
            CALL_CPU.append(server.cpu_seconds(children=True) - cpu)  # workers are reaped before the reply
            rss = sampler.stop()  # before any resources/read: its JSON reply is the client's choice
            PEAK_PSS.append(sampler.pss)
            if result.get("isError"):
                raise SystemExit(f"{tool} failed: {result['content'][0]['text']}")
            structured: dict[str, Any] = result["structuredContent"]
            if keep is not None and "result" not in keep and structured.get("manifest_uri"):
                read = server.request("resources/read", {"uri": structured["manifest_uri"]})
                structured["manifest"] = read["contents"][0]["text"]
            if keep is not None and "result" not in keep:
                keep["result"] = structured
                if tool == "find_duplicates":
                    keep["full"] = _full_list(server, structured)
            if structured.get("complete") is False:  # a stuck worker, a budget: never time a partial answer
                raise SystemExit(f"{tool} answered PARTIAL: {structured.get('stopped_reason')}")
            return seconds, rss
        finally:
            if not warm:
                server.close()

    if python is None:
        CALLS[run] = (tool, arguments, keep)
    return run


def _full_list(server: Server, structured: dict[str, Any]) -> str | None:
    """The find_duplicates group list resource (it is kept when anything was cut inline)."""
    listed = server.request("resources/list", {})
    for item in listed.get("resources", []):
        if item["name"].startswith("duplicates-"):
            read = server.request("resources/read", {"uri": item["uri"]})
            text: str = read["contents"][0]["text"]
            return text
    return None


def shell(
    command: str, cwd: Path | None = None, keep: dict[str, Any] | None = None
) -> Callable[[], tuple[float, int]]:
    """A shell pipeline timed as a whole, its output kept once in ``keep`` for the answer check."""
    full = f"cd {cwd} && {command}" if cwd is not None else command

    def run() -> tuple[float, int]:
        with tempfile.TemporaryFile() as out:
            actions = [
                (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ]
            started = time.perf_counter()
            pid = os.posix_spawnp("sh", ["sh", "-c", full], os.environ, file_actions=actions)
            sampler = PeakSampler(pid)
            _, status = os.waitpid(pid, 0)
            seconds = time.perf_counter() - started
            rss = sampler.stop(largest=True)
            code = os.waitstatus_to_exitcode(status)
            if code not in (0, 1):  # jdupes and sha256sum -c say 1 for "found something"
                raise SystemExit(f"{command!r} failed with {code}")
            if keep is not None and "stdout" not in keep:
                out.seek(0)
                keep["stdout"] = out.read()
        return seconds, rss

    return run


@dataclass
class Row:
    work: str
    ours: Callable[[], tuple[float, int]]
    reference_name: str
    reference: Callable[[], tuple[float, int]]
    goal: float
    check: Callable[[], str] | None = None
    measured: dict[str, Measure] = field(default_factory=dict)
    before: Callable[[], tuple[float, int]] | None = None  # the same call in another checkout's sysmcp


def with_servers(rows: list[Row], mode: str, before: str | None = None) -> list[Row]:
    """The rows for ``--server``: fresh servers, warm ones, or both (each warm row after its fresh one);
    with ``before`` (an interpreter), every row also times that checkout's sysmcp in the same rounds."""
    out: list[Row] = []
    for row in rows:
        call = CALLS.get(row.ours)
        if mode in ("fresh", "both"):
            if before is not None and call is not None:
                row.before = sysmcp_call(*call[:2], python=before)
            out.append(row)
        if mode in ("warm", "both") and call is not None:
            tool, arguments, keep = call
            out.append(
                Row(
                    f"{row.work}, warm server",
                    # alone, the warm row keeps the answer its check reads (the fresh row is never run)
                    sysmcp_call(tool, arguments, keep if mode == "warm" else None, warm=True),
                    row.reference_name,
                    row.reference,
                    row.goal,
                    row.check if mode == "warm" else None,  # the fresh row checks the answer
                    before=None if before is None else sysmcp_call(tool, arguments, warm=True, python=before),
                )
            )
    return out


def run_rows(rows: list[Row], rounds: int) -> None:
    for row in rows:  # warm-up: page cache, dentries, __pycache__; also fills the answers checked below
        print(f"warm-up: {row.work}", file=sys.stderr, flush=True)
        row.ours()
        if row.before is not None:
            row.before()
        PEAK_PSS.clear()
        CALL_CPU.clear()
        row.reference()
    for number in range(rounds):
        for row in rows:
            contenders = [("ours", row.ours), ("ref", row.reference)]
            if row.before is not None:
                contenders.insert(1, ("before", row.before))
            shift = number % len(contenders)  # each contender goes first in turn
            contenders = contenders[shift:] + contenders[:shift]
            for name, run in contenders:
                seconds, rss = run()
                measure = row.measured.setdefault(name, Measure())
                measure.seconds.append(seconds)
                measure.rss.append(rss)
                if name != "ref" and PEAK_PSS:
                    measure.pss.append(PEAK_PSS.pop())
                if name != "ref" and CALL_CPU:
                    measure.cpu.append(CALL_CPU.pop())
            print(
                f"round {number + 1}: {row.work}: {row.measured['ours'].seconds[-1]:.2f} s vs "
                f"{row.measured['ref'].seconds[-1]:.2f} s",
                file=sys.stderr,
                flush=True,
            )


def table(rows: list[Row]) -> str:
    out = [
        "| work | sysmcp | peak RSS (PSS) | reference | reference time | its RSS | ratio | goal | met | answer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ours, ref = row.measured["ours"], row.measured["ref"]
        mine, theirs = statistics.median(ours.seconds), statistics.median(ref.seconds)
        ratio = mine / theirs
        answer = row.check() if row.check is not None else ""
        out.append(
            f"| {row.work} | {mine:.2f} s | {max(ours.rss) / 1e6:.0f} MB ({max(ours.pss, default=0) / 1e6:.0f}) "
            f"| {row.reference_name} | {theirs:.2f} s | "
            f"{max(ref.rss) / 1e6:.1f} MB | {ratio:.2f} × | ≤ {row.goal:.1f} × | {'yes' if ratio <= row.goal else 'no'} "
            f"| {answer} |"
        )
    return "\n".join(out)


def before_table(rows: list[Row]) -> str:
    """``--before``: this checkout against the other one, row by row, from the same interleaved rounds."""
    out = [
        "| work | before | after | after / before | paired after / before | best before | best after | best after / before "
        "| CPU before | CPU after | CPU after / before |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "before" not in row.measured:
            continue
        old, new = row.measured["before"].seconds, row.measured["ours"].seconds
        median_old, median_new = statistics.median(old), statistics.median(new)
        cpu_old, cpu_new = (statistics.median(row.measured[k].cpu) for k in ("before", "ours"))
        # each round times both side by side, so the median of their per-round ratios cancels the
        # machine's slow drift that the ratio of the two medians keeps
        paired = statistics.median(b / a for a, b in zip(old, new, strict=True))
        out.append(
            f"| {row.work} | {median_old:.3f} s | {median_new:.3f} s | {median_new / median_old:.3f} | {paired:.3f} "
            f"| {min(old):.3f} s | {min(new):.3f} s | {min(new) / min(old):.3f} "
            f"| {cpu_old:.2f} s | {cpu_new:.2f} s | {cpu_new / cpu_old:.3f} |"
        )
    return "\n".join(out)


def manifest_check(ours: dict[str, Any], theirs: dict[str, Any]) -> Callable[[], str]:
    """Compare a hash_tree manifest with the reference's output, sorted (names are './x' there)."""

    def check() -> str:
        result = ours.get("result", {})
        text = result.get("manifest")
        if text is None:
            return f"{result.get('files', 0):,} files (manifest too big to keep: not compared)"
        mine = sorted(text.encode("utf-8", "surrogateescape").splitlines())
        reference = sorted(line.replace(b"  ./", b"  ", 1) for line in theirs.get("stdout", b"").splitlines())
        return (
            "same manifest"
            if mine == reference
            else f"DIFFERENT manifest ({len(mine)} vs {len(reference)} lines)"
        )

    return check


def duplicate_sets_from_ours(full: str | None, root: Path) -> set[frozenset[str]]:
    groups: set[frozenset[str]] = set()
    current: list[str] = []
    for line in (full or "").splitlines():
        if line.startswith("# ") and " copies x " in line:
            if current:
                groups.add(frozenset(current))
            current = []
        elif line and not line.startswith("#"):
            current.append(os.path.relpath(line, root))
    if current:
        groups.add(frozenset(current))
    return groups


def duplicate_sets_from_jdupes(output: bytes, root: Path) -> set[frozenset[str]]:
    groups: set[frozenset[str]] = set()
    for block in output.decode("utf-8", "surrogateescape").split("\n\n"):
        names = [os.path.relpath(line, root) for line in block.splitlines() if line]
        if len(names) > 1:
            groups.add(frozenset(names))
    return groups


def hard_link_free(groups: set[frozenset[str]], root: Path) -> set[frozenset[int]]:
    """Each group reduced to one name per inode (jdupes and sysmcp may pick different names of one inode)."""
    out = set()
    for group in groups:
        inodes = frozenset(os.stat(root / name).st_ino for name in group)
        if len(inodes) > 1:
            out.add(inodes)
    return out


def duplicates_check(ours: dict[str, Any], root: Path) -> Callable[[], str]:
    def check() -> str:
        result = ours.get("result", {})
        if result.get("groups_not_shown", 0) == 0 and not ours.get("full"):
            mine = {frozenset(os.path.relpath(p, root) for p in g["paths"]) for g in result.get("groups", [])}
        else:
            mine = duplicate_sets_from_ours(ours.get("full"), root)
        done = subprocess.run(["jdupes", "-r", "-q", str(root)], capture_output=True, check=False)
        theirs = duplicate_sets_from_jdupes(done.stdout, root)
        mine_i, theirs_i = hard_link_free(mine, root), hard_link_free(theirs, root)
        if mine_i == theirs_i:
            return f"same {len(mine_i):,} sets as jdupes -r"
        return f"DIFFERENT: {len(mine_i - theirs_i)} sets only ours, {len(theirs_i - mine_i)} only jdupes'"

    return check


def build_rows(args: argparse.Namespace, only: set[str]) -> list[Row]:
    base = args.corpus
    mixed, small = base / "mixed", base / "small"
    dups = args.dups_dir if args.dups_dir is not None else base / "dups"

    def want(name: str) -> bool:
        return not only or name in only

    if want("hash-mixed") or want("verify") or want("du-mixed"):
        corpus.ensure_kind(mixed, "mixed", args.mixed_files)
    if want("hash-small") or want("verify-small") or want("dups-small") or want("du-small"):
        corpus.ensure_kind(small, "small", args.small_files)
    if want("dups"):
        corpus.ensure_kind(dups, "duplicates", args.dup_files)
    b3sum = shutil.which("b3sum") is not None
    rows: list[Row] = []
    long = {"timeout_s": 600}

    def xargs(tool: str, root: Path) -> str:
        return f"cd {root} && find . -type f -print0 | xargs -0 -P2 -n256 {tool}"

    for name, root, count in (
        ("hash-mixed", mixed, args.mixed_files),
        ("hash-small", small, args.small_files),
    ):
        if not want(name):
            continue
        for algorithm, tool in (("sha256", "sha256sum"), *([("blake3", "b3sum")] if b3sum else [])):
            ours: dict[str, Any] = {}
            theirs: dict[str, Any] = {}
            rows.append(
                Row(
                    f"hash_tree {algorithm}, {count:,} files ({root.name})",
                    sysmcp_call(
                        "hash_tree", {"path": str(root), "algorithm": algorithm, "max_lines": 0, **long}, ours
                    ),
                    f"find -print0 \\| xargs -0 -P2 -n256 {tool}",
                    shell(xargs(tool, root), keep=theirs),
                    1.0 if algorithm == "sha256" else 1.2,
                    manifest_check(ours, theirs),
                )
            )
    for row_name, root, count in (
        ("verify", mixed, args.mixed_files),
        ("verify-small", small, args.small_files),
    ):
        if not want(row_name):
            continue
        for algorithm, tool, name, options in (
            ("sha256", "sha256sum", "SHA256SUMS", "--quiet --strict"),
            *([("blake3", "b3sum", "B3SUMS", "--quiet")] if b3sum else []),
        ):
            manifest = args.workdir / f"{root.name}.{name}"
            if not manifest.exists():
                print(f"writing {manifest}", file=sys.stderr, flush=True)
                subprocess.run(
                    f"cd {root} && find . -type f -print0 | xargs -0 -P2 -n256 {tool} > {manifest}",
                    shell=True,
                    check=True,
                )
            verified: dict[str, Any] = {}

            def verify_check(verified: dict[str, Any] = verified) -> str:
                result = verified.get("result", {})
                return (
                    "all OK"
                    if result.get("all_ok")
                    else f"NOT OK: {result.get('ok')} ok of {result.get('entries')}"
                )

            rows.append(
                Row(
                    f"verify_checksums {algorithm}, {count:,} files ({root.name})",
                    sysmcp_call(
                        "verify_checksums",
                        {"manifest": str(manifest), "base_dir": str(root), **long},
                        verified,
                    ),
                    f"{tool} -c {options}",
                    shell(f"cd {root} && {tool} -c {options} {manifest}"),
                    1.0,
                    verify_check,
                )
            )
    for name, root, label in (
        ("dups", dups, f"{args.dup_files:,} files (duplicates)"),
        ("dups-small", small, f"{args.small_files:,} small files"),
    ):
        if not want(name):
            continue
        found: dict[str, Any] = {}
        rows.append(
            Row(
                f"find_duplicates, {label}",
                sysmcp_call("find_duplicates", {"path": str(root), "top_n": 50, **long}, found),
                "jdupes -r -m",
                shell(f"jdupes -r -m {root}"),
                1.0,
                duplicates_check(found, root),
            )
        )
    for name, root in (("du-mixed", mixed), ("du-small", small), ("du-root", Path("/"))):
        if not want(name) or (name == "du-root" and not only):
            continue  # the machine's own / only when asked: on a shared machine it holds everyone's trees
        rows.append(
            Row(
                f"dir_usage {root}",
                sysmcp_call("dir_usage", {"path": str(root), "timeout_s": 300}),
                "du -sx",
                shell(f"du -sx {root}"),
                1.0,
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--corpus", type=Path, default=Path("/work/bench-corpus"), help="where the trees live"
    )
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()), help="for manifests")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mixed-files", type=int, default=200_000)
    parser.add_argument("--small-files", type=int, default=1_000_000)
    parser.add_argument("--dup-files", type=int, default=5_000)
    parser.add_argument(
        "--dups-dir",
        type=Path,
        help="the duplicates tree (default: <corpus>/dups), e.g. a 20,000-file one with --dup-files 20000",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated rows: hash-mixed, hash-small, verify, verify-small, dups, dups-small, du-mixed, du-small, du-root",
    )
    parser.add_argument(
        "--server",
        choices=("fresh", "warm", "both"),
        default="both",
        help="time sysmcp in a fresh server per call, in one warm server per row (asked with a progress "
        "token), or both (default)",
    )
    parser.add_argument(
        "--before",
        metavar="PYTHON",
        help="also time another checkout's sysmcp, run by this interpreter (its venv's python), in the same "
        "rounds, and print a before/after table",
    )
    parser.add_argument(
        "--sysmcp-options",
        default="",
        help="options for this checkout's servers, e.g. '--no-history' to leave out what recording "
        "costs when comparing with a --before that had no history",
    )
    args = parser.parse_args(argv)
    SYSMCP_OPTIONS.extend(args.sysmcp_options.split())
    for tool in ("jdupes", "sha256sum", "du"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is needed (apt-get install {tool})")
    only = {item for item in args.only.split(",") if item}
    rows = with_servers(build_rows(args, only), args.server, args.before)
    try:
        run_rows(rows, args.rounds)
    finally:
        for server in WARM_SERVERS:
            server.close()
    print(
        f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"median of {args.rounds} rounds, warm cache, servers: {args.server}"
        f"{', options: ' + ' '.join(SYSMCP_OPTIONS) if SYSMCP_OPTIONS else ''}\n"
    )
    print(table(rows))
    if args.before is not None:
        print(f"\nbefore: {args.before}\n")
        print(before_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
