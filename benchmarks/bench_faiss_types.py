#!/usr/bin/env python
"""Stage-1 latency and recall@R of each FAISS index type against exact search (Flat).

Synthetic, unit-norm vectors shaped like video embeddings (a mixture of Gaussian clusters on the
sphere, so that neighbourhoods exist), queries that are perturbed corpus vectors (a text query lands
near, not on, its video). Every index is built and searched by the project's own code
(indexer.store.faiss_index: the factories `indexer build` uses, IDMap2-wrapped, inner product, the
training sample it takes), one query at a time, as the API asks FAISS. Each index is built once and
searched with several search breadths (HNSW efSearch, IVF nprobe); the row marked "automatic" is what
`indexer build`/`add` choose for that size, searched with the parameters the reader sets.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_faiss_types.py            # 10k and 100k
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_faiss_types.py --sizes 1000000 --dims 128 256 \
        --json docs/bench/faiss_types_1m.json                                      # 1M (minutes)

It prints a Markdown table and the threshold this suggests for exact search: the largest size at
which Flat's median latency stays within --budget-ms (default 30 ms, about 2 % of a stage-2
rerank on the CPU: exact answers are worth that much, as a stage-1 miss stays a miss). The
threshold in force is core.config.FAISS_EXACT_MAX_VECTORS (docs/architecture.md, "FAISS index
types").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.config import FAISS_EXACT_MAX_VECTORS  # noqa: E402
from indexer.store import faiss_index as fx  # noqa: E402


def corpus(n: int, d: int, queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((max(16, n // 100), d)).astype(np.float32)
    x = centers[rng.integers(0, len(centers), n)] + 0.6 * rng.standard_normal((n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.choice(n, queries, replace=False)] + 0.05 * rng.standard_normal((queries, d)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return x, q


HNSW_EF = (128, 256, 512)
IVF_NPROBE = (16, 32, 64, 128)


def candidates(n: int, sq8: bool) -> list[tuple[str, str, str, tuple]]:
    """(name, factory, swept search parameter, its values): exact, HNSW32, the automatic IVF (the nlist
    `indexer build` gives n vectors) and, with ``sq8``, the same lists with 8-bit codes."""
    nlist = fx.ivf_lists(n)
    out = [
        ("Flat (exact)", fx.EXACT_FACTORY, "", (None,)),
        ("HNSW32", "IDMap2,HNSW32,Flat", "efSearch", HNSW_EF),
        (f"IVF{nlist},Flat", fx.ann_factory(n), "nprobe", IVF_NPROBE),
    ]
    if sq8:
        out.append((f"IVF{nlist},SQ8", f"IDMap2,IVF{nlist},SQ8", "nprobe", IVF_NPROBE))
    return out


def params_for(index, kind: str, value, r: int):
    """Search parameters: the reader's own (fx.search_params) when ``value`` is None, else the sweep's."""
    import faiss

    if value is None:
        params, _ = fx.search_params(
            allowed_fids=None, nlist=fx.ivf_nlist(index), hnsw=fx.is_hnsw(index), k=r
        )
        return params
    if kind == "efSearch":
        return faiss.SearchParametersHNSW(efSearch=int(value))
    return faiss.SearchParametersIVF(nprobe=int(value))


def reader_value(index, kind: str, r: int):
    if kind == "efSearch":
        return max(fx.FAISS_HNSW_EF_SEARCH, r)
    if kind == "nprobe":
        return fx.ivf_nprobe(fx.ivf_nlist(index))
    return None


def measure(index, queries: np.ndarray, r: int, params) -> tuple[np.ndarray, list[float], list[float]]:
    """Labels, wall-clock and CPU seconds (this thread's: FAISS on one thread searches in it) per query.
    CPU time is the steadier figure on a machine shared with other jobs."""
    labels, times, cpu = [], [], []
    index.search(queries[:5], r, params=params)  # warm up
    for q in queries:
        t, c = time.perf_counter(), time.thread_time()
        _, lab = index.search(q[None], r, params=params)
        times.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
        labels.append(lab[0])
    return np.stack(labels), times, cpu


def load() -> list[float]:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def write_json(path: Path, meta: dict, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--sizes", type=int, nargs="+", default=[10_000, 100_000], help="corpus sizes (default 10k 100k)"
    )
    p.add_argument(
        "--million", action="store_true", help="also 1,000,000 vectors (slow: HNSW and IVF builds)"
    )
    p.add_argument(
        "--dims",
        "--dim",
        type=int,
        nargs="+",
        default=[256],
        help="embedding dimensions (default 256: a Matryoshka size of the 2B model; the tiny-world "
        "checkpoint embeds in 128)",
    )
    p.add_argument("--queries", type=int, default=200, help="single-query searches per index (default 200)")
    p.add_argument("-R", "--shortlist", type=int, default=10, help="R: the stage-1 shortlist (default 10)")
    p.add_argument(
        "--budget-ms",
        type=float,
        default=30.0,
        help="median Flat latency allowed (default 30 ms: about 2 %% of a stage-2 rerank on the CPU)",
    )
    p.add_argument("--build-threads", type=int, default=2, help="FAISS threads for building (default 2)")
    p.add_argument("--search-threads", type=int, default=1, help="FAISS threads per query (default 1)")
    p.add_argument(
        "--flat-queries",
        type=int,
        default=30,
        help="single queries timed on Flat (default 30; the exact answers for recall come from one batched search)",
    )
    p.add_argument("--sq8", action="store_true", help="also IVF with 8-bit scalar-quantised codes")
    p.add_argument("--no-hnsw", action="store_true", help="leave HNSW32 out (its build is the slowest)")
    p.add_argument("--json", type=Path, help="also write the rows and the run's settings to this file")
    args = p.parse_args(argv)
    import faiss

    sizes = sorted(set(args.sizes + ([1_000_000] if args.million else [])))
    meta = {
        "faiss": faiss.__version__,
        "nproc": os.cpu_count(),
        "load_before": load(),
        "build_threads": args.build_threads,
        "search_threads": args.search_threads,
        "queries": args.queries,
        "R": args.shortlist,
        "data": "mixture of Gaussians on the sphere: n/100 centres (at least 16), noise 0.6 per coordinate; "
        "queries: corpus vectors plus noise 0.05, renormalised",
        "exact_max": FAISS_EXACT_MAX_VECTORS,
    }
    print(
        f"# FAISS index types, d={'/'.join(map(str, args.dims))}, R={args.shortlist}, {args.queries} single "
        f"queries on {args.search_threads} thread(s) (faiss {faiss.__version__}, {os.cpu_count()} CPUs, "
        f"load {meta['load_before']})\n"
    )
    print(
        "| vectors | d | index | search | build s | memory MB | p50 ms | p95 ms | CPU p50 ms | recall@R vs Flat |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows: list[dict] = []
    flat_p50: dict[tuple[int, int], float] = {}
    for d in args.dims:
        for n in sizes:
            x, q = corpus(n, d, args.queries)
            ids = np.arange(n, dtype=np.int64)
            truth = None
            automatic = fx.default_factory(n)
            for name, factory, kind, values in candidates(n, args.sq8):
                if args.no_hnsw and kind == "efSearch":
                    continue
                faiss.omp_set_num_threads(args.build_threads)
                t = time.perf_counter()
                index, built = fx.make_faiss_index(factory, d, x, ids)
                build_s = time.perf_counter() - t
                memory_mb = faiss.serialize_index(index).nbytes / 1e6
                if truth is None:  # Flat comes first: the exact top R of every query, one batched search
                    _, truth = index.search(q, args.shortlist)
                faiss.omp_set_num_threads(args.search_threads)
                mine = reader_value(index, kind, args.shortlist)
                sweep = list(values) if mine is None or mine in values else sorted([*values, mine])
                for value in sweep:
                    singles = q[: args.flat_queries] if built == fx.EXACT_FACTORY else q
                    params = params_for(index, kind, value, args.shortlist)
                    labels, times, cpu = measure(index, singles, args.shortlist, params)
                    recall = float(
                        np.mean(
                            [
                                len(set(a) & set(b)) / args.shortlist
                                for a, b in zip(labels, truth, strict=False)
                            ]
                        )
                    )
                    p50, p95 = (1e3 * float(np.percentile(times, v)) for v in (50, 95))
                    cpu50 = 1e3 * float(np.percentile(cpu, 50))
                    if built == fx.EXACT_FACTORY:
                        flat_p50[(n, d)] = p50
                    auto = built == automatic and value == mine
                    search = "" if value is None else f"{kind} {value}"
                    rows.append(
                        {
                            "vectors": n,
                            "dim": d,
                            "index": name,
                            "factory": built,
                            "search": search,
                            "automatic": auto,
                            "build_s": round(build_s, 2),
                            "memory_mb": round(memory_mb, 1),
                            "p50_ms": round(p50, 3),
                            "p95_ms": round(p95, 3),
                            "cpu_p50_ms": round(cpu50, 3),
                            "single_queries": len(singles),
                            "recall": round(recall, 4),
                        }
                    )
                    label = f"**{name} (automatic)**" if auto else name
                    print(
                        f"| {n:,} | {d} | {label} | {search} | {build_s:.1f} | {memory_mb:,.0f} | {p50:.2f} | "
                        f"{p95:.2f} | {cpu50:.2f} | {100 * recall:.1f} % |",
                        flush=True,
                    )
                    if args.json:  # written as it goes: an interrupted run keeps its rows
                        write_json(args.json, meta, rows)
                del index
            del x, q
    meta["load_after"] = load()
    print()
    for (n, d), v in sorted(flat_p50.items()):
        print(f"Flat at {n:,}, d={d}: median {v:.2f} ms ({v / n * 1e6:.1f} ns per vector)")
    if flat_p50:
        d0 = min(args.dims)
        per_dim = [v / n for (n, d), v in flat_p50.items() if d == d0]
        per_vector = max(per_dim)
        within = [n for (n, d), v in flat_p50.items() if d == d0 and v <= args.budget_ms]
        full = 2048  # Qwen3-VL-Embedding-2B's full embedding size; Flat's cost grows linearly with d
        print(
            f"exact search stays within {args.budget_ms:g} ms up to about {int(args.budget_ms / per_vector):,} "
            f"vectors at d={d0} (measured within: {', '.join(f'{n:,}' for n in within) or 'none'}); "
            f"at d={full}, extrapolated linearly: about {int(args.budget_ms / per_vector * d0 / full):,}; "
            f"threshold in force: core.config.FAISS_EXACT_MAX_VECTORS = {FAISS_EXACT_MAX_VECTORS:,}"
        )
    print(f"load average before {meta['load_before']}, after {meta['load_after']}")
    if args.json:
        write_json(args.json, meta, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
