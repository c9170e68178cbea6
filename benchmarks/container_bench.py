"""Container benchmark: ``container_usage`` against ``docker system df -v`` on the same engine, same run.

Goal (issue 36): ``container_usage`` with 50 images, 200 containers and 20 volumes in at most 1.5 × the
time of ``docker system df -v``. The engine is a dockerd of the benchmark's own (``tests/tools/docker_lab.py``:
its own data root and socket, no network); images are busybox roots each with a file of its own (so each
has a unique layer on a shared one), containers are run to exit (each leaves a writable layer and a log),
a quarter of them with a rotation limit, volumes half in use. Each round times, in alternating order,
``docker system df -v`` (the CLI's wall time) and ``container_usage`` (the tool call over stdio: API
calls, each container's log file, and the walk of the data root), with and without ``walk``, on a warm
server (one that has answered before: how a desktop host uses it) and on a fresh one per call
(``initialize`` and ``tools/list`` untimed); ``--before PYTHON`` times another checkout's sysmcp in the
same rounds. The table gives the medians of the wall time and of the CPU time the call cost (the
server's, or the CLI's, plus dockerd's: a steadier figure than the wall time on a shared machine).

    flock /tmp/bench.lock uv run python benchmarks/container_bench.py --images 50 --containers 200 --volumes 20
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hash_bench import Server  # the one JSON-RPC client the benchmarks share

from tests.tools.docker_lab import Lab, running_docker

TARGET_RATIO = 1.5


def populate(lab: Lab, images: int, containers: int, volumes: int) -> None:
    lab.busybox_image("base:1")

    def image(n: int) -> None:
        lab.docker(
            "run",
            "--name",
            f"mk{n}",
            "base:1",
            "sh",
            "-c",
            f"dd if=/dev/urandom of=/f{n} bs=64k count={1 + n % 8} 2>/dev/null",
        )
        lab.docker("commit", f"mk{n}", f"img:{n}")
        lab.docker("rm", f"mk{n}")

    for n in range(volumes):
        lab.docker("volume", "create", f"vol{n}")
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(image, range(images - 1)))

        def container(n: int) -> None:
            limit = ["--log-opt", "max-size=10m"] if n % 4 == 0 else []
            mount = ["-v", f"vol{n % volumes}:/data"] if volumes and n % 2 == 0 and n // 2 < volumes else []
            lab.docker(
                "run", "--name", f"c{n}", *limit, *mount, f"img:{n % max(images - 1, 1)}",
                "sh", "-c", f"echo container {n}; dd if=/dev/zero of=/w bs=4k count={1 + n % 16} 2>/dev/null",
            )  # fmt: skip

        list(pool.map(container, range(containers)))


def engine_cpu(lab: Lab) -> float:
    """CPU seconds the lab's dockerd has used so far."""
    pid = (lab.base / "dockerd.pid").read_text().strip()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def call(server: Server, lab: Lab, walk: bool) -> tuple[float, float]:
    """Seconds of one ``container_usage`` call on ``server``, and the CPU seconds it cost the server
    and the engine together."""
    arguments = {"socket": str(lab.socket), "walk": walk, "timeout_s": 60}
    cpu = server.cpu_seconds() + engine_cpu(lab)
    begun = time.perf_counter()
    result = server.request("tools/call", {"name": "container_usage", "arguments": arguments})
    seconds = time.perf_counter() - begun
    assert not result.get("isError"), result
    return seconds, server.cpu_seconds() + engine_cpu(lab) - cpu


def docker_df(lab: Lab) -> tuple[float, float]:
    """Seconds of ``docker system df -v``, and the CPU seconds it cost the CLI and the engine together."""
    cpu = children_cpu() + engine_cpu(lab)
    begun = time.perf_counter()
    lab.docker("system", "df", "-v")
    return time.perf_counter() - begun, children_cpu() + engine_cpu(lab) - cpu


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument("--containers", type=int, default=200)
    parser.add_argument("--volumes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--server",
        choices=("warm", "fresh", "both"),
        default="both",
        help="warm: one server answers every call (a desktop host); fresh: a new server per call",
    )
    parser.add_argument(
        "--before", metavar="PYTHON", help="also time another checkout's sysmcp (its venv's python)"
    )
    args = parser.parse_args()
    pythons = {"": None, **({" (before)": args.before} if args.before else {})}
    modes = ("warm", "fresh") if args.server == "both" else (args.server,)
    with running_docker() as lab:
        started = time.perf_counter()
        populate(lab, args.images, args.containers, args.volumes)
        print(
            f"engine populated in {time.perf_counter() - started:.0f} s: {lab.docker('system', 'df')}",
            file=sys.stderr,
        )
        warm = {label: Server(python, options=["--no-history"]) for label, python in pythons.items()}
        for server in warm.values():
            call(server, lab, True)  # a warm server has answered before
        times: dict[str, list[tuple[float, float]]] = {"docker system df -v": []}
        for mode in modes:
            for label in pythons:
                for walk in (True, False):
                    times[f"{mode} container_usage{'' if walk else ' walk=false'}{label}"] = []
        for n in range(args.rounds):
            order = list(times) if n % 2 == 0 else list(reversed(times))
            for name in order:
                if name.startswith("docker"):
                    times[name].append(docker_df(lab))
                    continue
                label = " (before)" if name.endswith(" (before)") else ""
                walk = "walk=false" not in name
                if name.startswith("warm"):
                    times[name].append(call(warm[label], lab, walk))
                else:  # initialize and tools/list untimed, as a host does before its first call
                    fresh = Server(pythons[label], options=["--no-history"])
                    times[name].append(call(fresh, lab, walk))
                    fresh.close()
        for server in warm.values():
            server.close()
    wall = {name: statistics.median(t for t, _ in pairs) for name, pairs in times.items()}
    cpu = {name: statistics.median(c for _, c in pairs) for name, pairs in times.items()}
    reference, cpu_reference = wall["docker system df -v"], cpu["docker system df -v"]
    print(
        f"{args.images} images, {args.containers} containers, {args.volumes} volumes, {args.rounds} rounds "
        "(medians; cpu: the server's or the CLI's and dockerd's together)"
    )
    for name in times:
        print(
            f"  {name:<44} {wall[name]:7.3f} s  {wall[name] / reference:5.2f} x   "
            f"cpu {cpu[name]:6.3f} s  {cpu[name] / cpu_reference:5.2f} x"
        )
    for mode in modes:
        verdict = wall[f"{mode} container_usage"] <= TARGET_RATIO * reference
        print(
            f"target ({mode} server): container_usage at most {TARGET_RATIO} x docker system df -v: "
            f"{'met' if verdict else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
