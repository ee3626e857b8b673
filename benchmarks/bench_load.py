"""Many users at once on one model: bounded loopback load on `qaslr serve`, old lane vs new.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_load.py [--videos 32] [--clients 1 4 8 16]
        [--requests 32] [--cascade-requests 160] [--cap-s 45] [--rounds 1] [--shortlist 10] [--frames 32] [--stage1-requests 60]
        [--servers single batched batched-one-process [batched-search-nice-0]] [--caches both|cold|warm]
        [--workdir DIR] [--json out.json]

What it does: renders (once, cached under --workdir) ``--videos`` shapes-world videos, indexes them
one-shot with the shipped tiny-world backbone (``indexer build``), then starts ``qaslr serve`` on
127.0.0.1 once per server of ``--servers``, in one run:

    single          ``QASLR_BATCHING=0``: the old behaviour, one model thread runs every search whole
    batched         ``QASLR_BATCHING=1``: request threads run the cheap stages, batcher threads run the
                    stage-2 backbone work of all requests (heavy-tier clips, queries, the frames that
                    refine the top moment) in shared backbone calls; the server's default, so on a
                    CPU of 2+ cores each batcher thread has a model process of its own for the
                    query and image calls (engine.runtime.model_process)
    batched-one-process  the same with ``QASLR_MODEL_PROCESSES=0``: every backbone call in the server
                    process (what the model processes buy)
    batched-search-nice-0  (only when asked) the same with ``QASLR_SEARCH_NICE=0``: its search threads
                    at the light lane's CPU priority, beside the default +5

and sends each of two workloads (``--workloads``):

    every       ``mode=rerank`` with ``heavy`` = the shortlist: every candidate re-encoded one-shot, so
                batching has the most work (the issue's setup when rerank meant that)
    cascade     ``mode=rerank`` with the server's defaults, what a user's request does today: the frame
                tier over the shortlist (the heavy tier only when asked), the time head on order and
                count; queries are the corpus's own events (and its order / count queries), so the
                cascade meets what it was built for

Each level runs with the caches as ``--caches`` says (``both``, the default: cold, then warm, level
by level):

    cold        a fresh ``qaslr serve`` for the level (ready after its own warm-up; its frame cache
                empty: in-process, Redis off), the level's requests in turns over the workload's right
                videos, so that each targets a video no earlier request of the level touched while the
                corpus has videos to spare; ``cold_share`` says how many did (a request is cold when
                none of its right video and the videos its answer read, re-encoded or refined, was
                named or read by a request sent before it, or by the server's warm-up)
    warm        one server for every level, each query of the workload sent once before the levels;
                ``cold_share`` counts the same way (the priming counted as touched)

The JSON keeps them apart: ``cold_levels`` and ``levels`` (warm) per server and workload, each level
and each row of ``rows`` with its ``caches``.

For each server and workload:
1. load at each ``--clients`` level: ``--requests`` requests per level (``--cascade-requests`` for the
   cascade, whose requests are ten times cheaper), each level capped at
   ``--cap-s`` seconds; req/s (answered 200s over the level's wall time), p50/p95 latency, and the
   status counts; with ``--rounds R`` the levels run in turn R times (a minute when the shared
   machine is busy moves one round), and each reports its median round's req/s beside every round's;
2. stage 1 alone (on the warm server): ``--stage1-requests`` ``mode=indexed`` requests one at a time, p50/p95;
3. stage 1 under load: the same while ``--load-clients`` rerank clients run; p95 and its ratio to (2).

Each level also records the CPU it cost (Linux ``/proc``): the server's CPU seconds (its model
processes' included) per answered request (the work a request costs, whatever else runs), the cores
the server used, the cores the load clients used (this process: they share the machine with the
server), and the cores that other processes on the machine used meanwhile (``other_cores``: a busy machine makes every
number here worse, so read the throughput beside it). Before each level, with the server idle, it
measures what the machine's cores give together against one alone (``capacity``,
benchmarks/provenance.py ``parallel_capacity``): two busy processes on two virtual CPUs that share a
physical core, or whose host is busy, do less than twice the work of one, and no server can scale
past that (it moves within minutes on a shared virtual machine: read each ratio beside it).

The goals (2 cores): at 8 clients >= 1.5x the throughput at 1; stage-1 p95 under load <= 3x alone;
no 5xx. Nothing is asserted: a bad number is a result. ``--json`` writes every number.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.coldness import cold_order, cold_share, query_pair, touched  # noqa: E402
from benchmarks.load_report import CACHES, pct, pool_rounds, table_rows  # noqa: E402
from benchmarks.provenance import parallel_capacity  # noqa: E402
from benchmarks.serving import QaslrServe  # noqa: E402

QUERIES = [
    "a red circle moves left",
    "a blue square appears",
    "a green triangle grows",
    "a yellow star spins",
    "something flashes in the corner",
    "two shapes collide",
    "a shape falls down",
    "a bright object crosses the frame",
]


def build_index(
    work: Path, videos: int, min_s: float, max_s: float
) -> tuple[Path, Path, list[tuple[str, str]]]:
    """The tiny-world backbone, and the one-shot index of the corpus with its (query, right video) pairs."""
    from indexer import BuildOptions
    from indexer import build_index as build
    from training.backbone import current_tiny_world_checkpoint
    from world.corpus import CorpusConfig, make_corpus

    model = current_tiny_world_checkpoint(work / "tiny-world")
    corpus = make_corpus(
        work / f"corpus-{videos}p2-{min_s:g}-{max_s:g}",
        CorpusConfig(
            videos=videos, order_pairs=2, count_pairs=2, seed=0, min_duration_s=min_s, max_duration_s=max_s
        ),
        progress=True,
    )
    index = work / f"index-oneshot-{videos}p2-{min_s:g}-{max_s:g}"
    if not (index / "manifest.json").exists():
        report = build(corpus.manifest, index, BuildOptions(model=str(model), embedder="oneshot"))
        if report.has_failures or report.stopped:
            raise SystemExit(f"indexer build failed: {report.summary()}")
    return model, index, corpus.queries()


def Server(model: Path, index: Path, env: dict[str, str]) -> QaslrServe:
    """The API over ``index`` (benchmarks/serving.py)."""
    return QaslrServe(["--index", str(index), "--model", str(model)], env=env)


def _post(client, body: dict) -> tuple[int, float, dict | None]:
    """(status, wall ms, the answer when 200)."""
    import httpx

    t = time.perf_counter()
    try:
        r = client.post("/search", json=body)
    except httpx.HTTPError:
        return -1, (time.perf_counter() - t) * 1e3, None
    ms = (time.perf_counter() - t) * 1e3
    return r.status_code, ms, (r.json() if r.status_code == 200 else None)


class CpuMeter:
    """CPU seconds used over an interval: by the server (all its threads, and its model processes), by this process
    (the clients), and by the whole machine (``/proc/stat``); zeros where ``/proc`` is missing."""

    def __init__(self, pid: int | None):
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def _family(self) -> float:
        """CPU seconds of the server and its child processes (its model processes, engine.runtime.model_process):
        the live children's own time, and the time of children it has waited for."""
        total = 0.0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended meanwhile
            pid = int(stat.parent.name)
            if pid == self.pid:
                total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
            elif int(fields[1]) == self.pid:  # its ppid
                total += int(fields[11]) + int(fields[12])
        return total / self.tick

    def read(self) -> tuple[float, float, float]:
        server = machine = 0.0
        try:
            if self.pid is not None:
                server = self._family()
            cpu = Path("/proc/stat").read_text().partition("\n")[0].split()[1:]
            busy = [int(cpu[i]) for i in (0, 1, 2, 5, 6)]  # user, nice, system, irq, softirq
            machine = sum(busy) / self.tick
        except (OSError, ValueError, IndexError):
            pass
        me = os.times()
        return server, me.user + me.system, machine

    def since(self, start: tuple[float, float, float], wall: float, answered: int) -> dict:
        server, me, machine = (b - a for a, b in zip(start, self.read(), strict=True))
        return {
            "server_cpu_s": server,
            "server_cpu_s_per_req": server / answered if answered else float("nan"),
            "server_cores": server / wall,
            "client_cores": me / wall,
            "other_cores": max(0.0, machine - server - me) / wall,
        }


def load_level(
    url: str, body: dict, clients: int, requests: int, cap_s: float, pid: int | None = None, queries=QUERIES
) -> dict:
    """``requests`` rerank requests from ``clients`` concurrent clients (stopping at ``cap_s``), request i
    the query ``queries[i % len(queries)]`` (a text, or a (text, right video) pair); ``targets``: each
    request's target videos in the order sent (see :func:`cold_share`)."""
    import httpx

    meter = CpuMeter(pid)

    todo = iter(range(requests))
    lock = threading.Lock()
    stop = time.perf_counter() + cap_s
    latencies, statuses, timings = [], Counter(), []
    pairs = [query_pair(q) for q in queries]
    targets: dict[int, set[str]] = {}  # request i (the order sent) -> its right video and what it read

    def worker(k: int) -> None:
        with httpx.Client(base_url=url, timeout=cap_s + 60) as c:
            while time.perf_counter() < stop:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                query, right = pairs[i % len(pairs)]
                status, ms, answer = _post(c, {**body, "query": query + f" #{i}"})
                with lock:
                    statuses[status] += 1
                    targets[i] = touched(answer) | ({right} if right else set())
                    if status == 200:
                        latencies.append(ms)
                        timings.append(answer["timings_ms"])
                if status == 429:
                    time.sleep(0.05)

    t0, cpu0 = time.perf_counter(), meter.read()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, range(clients)))
    wall = time.perf_counter() - t0
    cpu = meter.since(cpu0, wall, len(latencies))
    mean = {k: float(np.mean([t[k] for t in timings])) for k in (timings[0] if timings else {})}
    return {
        "clients": clients,
        "req_per_s": len(latencies) / wall,
        "p50_ms": pct(latencies, 50),
        "p95_ms": pct(latencies, 95),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "wall_s": wall,
        "targets": [targets[i] for i in sorted(targets)],  # for cold_share, then dropped
        "mean_timings_ms": mean,
        "latencies_ms": latencies,
        **cpu,
    }


def stage1(url: str, body: dict, n: int, cap_s: float) -> dict:
    import httpx

    latencies, statuses = [], Counter()
    stop = time.perf_counter() + cap_s
    with httpx.Client(base_url=url, timeout=cap_s + 60) as c:
        for i in range(n):
            if time.perf_counter() > stop:
                break
            status, ms, _ = _post(
                c, {**body, "mode": "indexed", "query": QUERIES[i % len(QUERIES)] + f" s{i}"}
            )
            statuses[status] += 1
            if status == 200:
                latencies.append(ms)
    return {
        "n": len(latencies),
        "p50_ms": pct(latencies, 50),
        "p95_ms": pct(latencies, 95),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
    }


def stage1_under_load(url: str, body: dict, load_clients: int, n: int, cap_s: float, queries=QUERIES) -> dict:
    import httpx

    done = threading.Event()
    statuses = Counter()
    lock = threading.Lock()

    def loader(k: int) -> None:
        with httpx.Client(base_url=url, timeout=cap_s + 60) as c:
            i = 0
            while not done.is_set():
                status, _, _ = _post(
                    c, {**body, "query": query_pair(queries[(k + i) % len(queries)])[0] + f" L{k}.{i}"}
                )
                with lock:
                    statuses[status] += 1
                i += 1

    pool = ThreadPoolExecutor(load_clients)
    futures = [pool.submit(loader, k) for k in range(load_clients)]
    time.sleep(1.5)  # the rerank load is running
    try:
        out = stage1(url, body, n, cap_s)
    finally:
        done.set()
        for f in futures:
            f.result()
        pool.shutdown()
    out["load_statuses"] = {str(k): v for k, v in sorted(statuses.items())}
    return out


SERVERS = {  # name -> the server's environment beside the common one
    "single": {"QASLR_BATCHING": "0"},
    "batched": {"QASLR_BATCHING": "1"},
    "batched-one-process": {"QASLR_BATCHING": "1", "QASLR_MODEL_PROCESSES": "0"},
    "batched-search-nice-0": {"QASLR_BATCHING": "1", "QASLR_SEARCH_NICE": "0"},
}


def _level_line(name: str, caches: str, c: int, r: int, args, level: dict) -> str:
    return (
        f"[{name}] {caches} {c:>2} clients{f' (round {r + 1})' if args.rounds > 1 else ''}: "
        f"{level['req_per_s']:.2f} req/s  p50 {level['p50_ms']:.0f} ms  p95 {level['p95_ms']:.0f} ms  "
        f"{level['statuses']}  cold share {level['cold_share']:.2f}  server {level['server_cpu_s_per_req']:.2f} "
        f"CPU s/req on {level['server_cores']:.2f} cores (the clients: {level['client_cores']:.2f}, other "
        f"processes: {level['other_cores']:.2f} cores; the cores give {level['capacity']:.2f}x one)"
    )


def measured_level(url: str, pid: int, body: dict, clients: int, requests: int, args, queries) -> dict:
    """One load level, with what the machine's cores gave just before it (the server idle)."""
    capacity = parallel_capacity()
    level = load_level(url, body, clients, requests, args.cap_s, pid=pid, queries=queries)
    level["capacity"] = capacity["ratio"]
    return level


def cold_level(
    model: Path, index: Path, env: dict, args, body: dict, clients: int, requests: int, queries
) -> dict:
    """One load level cold: a fresh ``qaslr serve`` (its caches empty: the in-process frame cache, Redis off;
    ready after its own warm-up), the requests in turns over their right videos (:func:`cold_order`), so
    each targets a video no earlier request touched while the level has videos to spare (``cold_share``
    says how many did; the videos the server's warm-up read count as touched before the level)."""
    import httpx

    from engine.api import WARM_UP_REQUEST

    server = Server(model, index, env)
    with server as url:
        level = measured_level(url, server.proc.pid, body, clients, requests, args, cold_order(queries))
        with httpx.Client(base_url=url, timeout=120) as c:  # after the level: what the warm-up had read
            _, _, answer = _post(c, dict(WARM_UP_REQUEST))
    level["cold_share"] = cold_share(level.pop("targets"), touched(answer))
    return {**level, "caches": "cold"}


def run_server(name: str, model: Path, index: Path, env: dict, args, workload: str, queries) -> dict:
    """One server and workload: each level warm (one server for every level, each query of the workload sent
    once before them, then stage 1 alone and under load) and / or cold (a fresh server per level:
    :func:`cold_level`), as ``--caches`` says; with both, a level cold then the same level warm, in turn."""
    import httpx

    body = {"mode": "rerank", "top_k": 10, "shortlist": args.shortlist, "frames": args.frames}
    if workload == "every":
        body["heavy"] = args.shortlist
    caches = ["cold", "warm"] if args.caches == "both" else [args.caches]
    requests = args.cascade_requests if workload == "cascade" else args.requests
    rounds: dict[str, dict[int, list[dict]]] = {k: {c: [] for c in args.clients} for k in caches}
    out: dict = {}
    with contextlib.ExitStack() as stack:
        if "warm" in caches:
            print(f"\n[{name}] starting qaslr serve (warm: every query of the workload once before the levels)",
                  flush=True)  # fmt: skip
            server = Server(model, index, env)
            url = stack.enter_context(server)
            primed: set[str] = set()
            with httpx.Client(base_url=url, timeout=120) as c:
                # each request's target touched before the levels
                for query, right in map(query_pair, queries):
                    answer = _post(c, {**body, "query": query + " warm-up"})[2]
                    primed |= touched(answer) | ({right} if right else set())
        for r in range(args.rounds):  # the levels in turn, round after round (see pool_rounds)
            for c in args.clients:
                for kind in caches:
                    if kind == "cold":
                        level = cold_level(model, index, env, args, body, c, requests, queries)
                    else:
                        level = measured_level(url, server.proc.pid, body, c, requests, args, queries)
                        level["cold_share"] = cold_share(level.pop("targets"), primed)
                        level["caches"] = "warm"
                    print(_level_line(name, kind, c, r, args, level), flush=True)
                    rounds[kind][c].append(level)
        for kind in caches:
            out["levels" if kind == "warm" else "cold_levels"] = [
                pool_rounds(rounds[kind][c]) for c in args.clients
            ]
        if "warm" in caches:
            out["stage1_alone"] = stage1(url, body, args.stage1_requests, args.cap_s)
            out["stage1_loaded"] = stage1_under_load(
                url, body, args.load_clients, args.stage1_requests, args.cap_s, queries=queries
            )
            metrics = httpx.get(url + "/metrics").text
            out["metrics_lines"] = [
                line
                for line in metrics.splitlines()
                if line.startswith(("qaslr_batch_", "qaslr_queue_seconds"))
                and ("_sum" in line or "_count" in line)
            ]
    if "warm" in caches:
        a, b = out["stage1_alone"], out["stage1_loaded"]
        print(
            f"[{name}] stage 1 alone p95 {a['p95_ms']:.0f} ms; under {args.load_clients} rerank clients p95 {b['p95_ms']:.0f} ms"
        )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--videos", type=int, default=32)
    p.add_argument("--min-s", type=float, default=30.0, help="shortest video, s")
    p.add_argument("--max-s", type=float, default=60.0, help="longest video, s")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8, 16])
    p.add_argument("--requests", type=int, default=32, help="rerank requests per load level (workload every)")
    p.add_argument(
        "--cascade-requests", type=int, default=160,
        help="requests per load level of the cascade workload (ten times cheaper: 32 would be a 3 s window)",
    )  # fmt: skip
    p.add_argument("--cap-s", type=float, default=45.0, help="time cap per load level, s")
    p.add_argument(
        "--rounds", type=int, default=1,
        help="measure the levels this many times, in turn (1, 4, 8, 16, 1, 4, ...); each level reports its median "
        "round's throughput, and every round's",
    )  # fmt: skip
    p.add_argument("--load-clients", type=int, default=4, help="rerank clients behind the stage-1 probe")
    p.add_argument(
        "--stage1-requests", type=int, default=60, help="stage-1 probes per phase (a p95 needs more than 20)"
    )
    p.add_argument("--shortlist", type=int, default=10, help="R (and heavy)")
    p.add_argument("--frames", type=int, default=32, help="K'")
    p.add_argument("--queue-size", type=int, default=32, help="QASLR_QUEUE_SIZE (above the clients: no 429)")
    p.add_argument(
        "--servers", nargs="+", choices=list(SERVERS), default=["single", "batched", "batched-one-process"],
        help="servers to run, in one run: the old single worker, the batched one (the default server), the "
        "batched one without model processes, and the batched one with its search threads at the light lane's "
        "priority (QASLR_SEARCH_NICE=0: what the search-thread nice buys)",
    )  # fmt: skip
    p.add_argument("--workloads", nargs="+", choices=["every", "cascade"], default=["every", "cascade"],
                   help="every candidate re-encoded, and/or the default cascade (see above)")  # fmt: skip
    p.add_argument(
        "--caches", choices=["cold", "warm", "both"], default="both",
        help="cold: a fresh server per level, each request on a video no earlier one touched while there are "
        "videos to spare; warm: one server, every query sent once before the levels; both: each level cold, "
        "then warm",
    )  # fmt: skip
    p.add_argument("--workdir", default=None, help="cache for the corpus, checkpoint and index")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.WARNING)
    work = Path(args.workdir or Path(tempfile.gettempdir()) / "qaslr-bench-load")
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model, index, corpus_queries = build_index(work, args.videos, args.min_s, args.max_s)
    print(f"corpus + index ready in {time.perf_counter() - t0:.0f} s", flush=True)
    base = {
        "QASLR_QUEUE_SIZE": str(args.queue_size),
        "QASLR_REQUEST_TIMEOUT_S": "120",
        "QASLR_MAX_FRAMES": str(max(args.frames, 32)),
        "QASLR_DEFAULT_FRAMES": str(args.frames),
        # the in-process frame cache, never a Redis a restart would not empty (cold: a fresh server per level)
        "REDIS_URL": "",
        "QASLR_REDIS_URL": "",
    }
    labels = {"every": "every candidate re-encoded", "cascade": "the default cascade"}
    results = {
        f"{name}, {labels[w]}": run_server(
            name, model, index, base | env, args, w, QUERIES if w == "every" else corpus_queries
        )
        for w in args.workloads
        for name, env in SERVERS.items()
        if name in args.servers
    }
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    print(
        f"\n{args.videos} videos (+ 2 order and 2 count pairs), R = {args.shortlist}, K' = {args.frames}, {os.cpu_count()} CPUs, load average {load}"
    )
    print(
        f"{'caches: cold / warm':<48}"
        + "".join(f"{c:>8} cl req/s p50/p95 ms, cold share".rjust(42) for c in args.clients)
    )
    for name, res in results.items():
        for key, caches in CACHES:
            cells = [
                f"{lv['req_per_s']:.2f} {lv['p50_ms']:.0f}/{lv['p95_ms']:.0f}, {lv['cold_share']:.2f}".rjust(
                    42
                )
                for lv in res.get(key, [])
            ]
            if cells:
                print(f"{name + ', ' + caches:<48}" + "".join(cells))
    notes = []
    for name, res in results.items():
        summary, said = {}, []
        for key, caches in CACHES:
            if key not in res:
                continue
            levels = {lv["clients"]: lv for lv in res[key]}
            one, eight = levels.get(1), levels.get(8)
            speedup = (
                eight["req_per_s"] / one["req_per_s"] if one and eight and one["req_per_s"] else float("nan")
            )
            per_round = (
                [e / o for o, e in zip(one["rounds_req_per_s"], eight["rounds_req_per_s"], strict=True) if o]
                if one and eight
                else []
            )
            capacity = [lv.get("capacity") for lv in (one, eight) if lv and lv.get("capacity")]
            prefix = "" if caches == "warm" else "cold_"
            summary |= {f"{prefix}speedup_8_vs_1": speedup, f"{prefix}speedup_8_vs_1_rounds": per_round}
            spread = f", rounds {min(per_round):.2f}-{max(per_round):.2f}x" if len(per_round) > 1 else ""
            said.append(
                f"{caches}: 8 vs 1 clients {speedup:.2f}x{spread} (the cores gave "
                + " and ".join(f"{c:.2f}x" for c in capacity)
                + " one, before those levels)"
            )
        counted = [lv["statuses"] for key, _ in CACHES for lv in res.get(key, [])]  # every level, stage 1
        if "stage1_alone" in res:
            a, b = res["stage1_alone"]["p95_ms"], res["stage1_loaded"]["p95_ms"]
            counted += [res["stage1_alone"]["statuses"], res["stage1_loaded"]["statuses"]]
            counted.append(res["stage1_loaded"].get("load_statuses", {}))
            summary["stage1_p95_ratio"] = b / a if a else float("nan")
            said.append(
                f"stage-1 p95 alone {a:.0f} ms, under {args.load_clients} rerank clients {b:.0f} ms ({b / a:.1f}x)"
            )
        five = sum(v for st in counted for k, v in st.items() if k.startswith("5"))
        res["summary"] = {**summary, "5xx": five}
        notes.append(f"{name}: " + "; ".join(said) + f"; 5xx: {five}")
        print(f"{notes[-1]}; statuses (each level, then stage 1): {counted}")
    if args.json:
        from benchmarks.provenance import environment, recorded_args

        out = {
            "args": recorded_args(args),
            "environment": environment(),
            "loadavg": load,
            "rows": table_rows(results, args.load_clients),
            "notes": notes,
            "results": results,
        }
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
