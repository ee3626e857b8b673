"""A fresh server's first query against a warm one, with and without the warm-up before ready.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_first_query.py [--starts 3] [--warm 5]
        [--workdir DIR] [--json docs/bench/first_query.json]

It renders a small shapes-world collection (8 videos of 60-90 s, cached under --workdir), indexes it
with the shipped tiny-world backbone through the indexer facade, then starts ``qaslr serve`` on a
loopback port ``--starts`` times for each setting (``QASLR_WARM_UP`` true and false). Each time it
waits for ``/readyz``, times the first ``POST /search`` (the default cascade, ``mode=rerank``), then
``--warm`` more, each with a query not asked before (so the frame cache does not flatter them), and
stops the server. It prints, per setting, the median first-query latency, the median warm latency and
their ratio, and the time from start to ready (the warm-up moves work there). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.serving import QaslrServe  # noqa: E402
from world.vocab import EVENTS  # noqa: E402


def _index(work: Path, model: Path) -> Path:
    from indexer import BuildOptions, build_index
    from world.corpus import CorpusConfig, make_corpus

    corpus = make_corpus(
        work / "corpus", CorpusConfig(videos=8, seed=77, min_duration_s=60.0, max_duration_s=90.0)
    )
    index = work / "index"
    if not (index / "manifest.json").exists():
        build_index(corpus.manifest, index, BuildOptions(model=str(model), embedder="oneshot"))
    return index


def _one_start(index: Path, model: Path, warm_up: bool, queries: list[str]) -> dict:
    env = {
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "QASLR_WARM_UP": "true" if warm_up else "false",
        "REDIS_URL": "",  # the in-process frame cache, whatever this shell has
    }
    server = QaslrServe(["--index", str(index), "--model", str(model)], env=env, timeout_s=300)
    with server as url, httpx.Client(base_url=url, timeout=120) as client:
        times = []
        for query in queries:
            t = time.perf_counter()
            client.post("/search", json={"query": query, "top_k": 5}).raise_for_status()
            times.append((time.perf_counter() - t) * 1e3)
    return {"ready_s": server.ready_s, "first_ms": times[0], "warm_ms": statistics.median(times[1:])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--starts", type=int, default=3, help="fresh servers per setting")
    p.add_argument("--warm", type=int, default=5, help="queries after the first, per server")
    p.add_argument("--workdir", default=None, help="cache for the corpus, checkpoint and index")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    from training.backbone import current_tiny_world_checkpoint

    work = Path(args.workdir or Path(tempfile.gettempdir()) / "qaslr-bench-first-query")
    work.mkdir(parents=True, exist_ok=True)
    model = current_tiny_world_checkpoint(work / "tiny-world")
    index = _index(work, model)
    phrasings = [e.text() for e in EVENTS]
    rows = []
    for warm_up in (False, True):
        runs = []
        for start in range(args.starts):
            offset = (start * (args.warm + 1) + (0 if warm_up else 16)) % len(phrasings)
            queries = [phrasings[(offset + i) % len(phrasings)] for i in range(args.warm + 1)]
            runs.append(_one_start(index, model, warm_up, queries))
        first = statistics.median(r["first_ms"] for r in runs)
        warm = statistics.median(r["warm_ms"] for r in runs)
        rows.append(
            {
                "warm_up": warm_up,
                "starts": args.starts,
                "first_query_ms": round(first, 1),
                "warm_query_ms": round(warm, 1),
                "first_over_warm": round(first / warm, 2),
                "start_to_ready_s": round(statistics.median(r["ready_s"] for r in runs), 2),
            }
        )
    print("| warm-up before ready | first query ms | warm query ms | first / warm | start to ready s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {'on' if r['warm_up'] else 'off'} | {r['first_query_ms']:.0f} | {r['warm_query_ms']:.0f} | "
            f"{r['first_over_warm']:.2f} | {r['start_to_ready_s']:.1f} |"
        )
    if args.json:
        payload = {"args": vars(args), "rows": rows}
        try:
            from benchmarks.provenance import environment

            payload["environment"] = environment()
        except ImportError:
            pass
        Path(args.json).write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
