#!/usr/bin/env python
"""Stage-1 latency and recall@R of each FAISS index type against exact search (Flat).

Synthetic, unit-norm vectors shaped like video embeddings (a mixture of clusters, so that
neighbourhoods exist), queries that are perturbed corpus vectors (a text query lands near, not on,
its video). Every index is built and searched by the project's own code (indexer.store.faiss_index:
the factories `indexer build` uses, IDMap2-wrapped, inner product, the IVF nprobe the reader sets),
one query at a time on one thread, as the API asks FAISS.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_faiss_types.py            # 10k and 100k
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_faiss_types.py --million   # also 1M (not measured here)

It prints a Markdown table and the threshold this suggests for exact search: the largest size at
which Flat's median latency stays within --budget-ms (default 30 ms, about 2 % of a stage-2
rerank on the CPU: exact answers are worth that much, as a stage-1 miss stays a miss). The
threshold in force is core.config.FAISS_EXACT_MAX_VECTORS (docs/architecture.md, "FAISS index
types").
"""

from __future__ import annotations

import argparse
import math
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


def factories(n: int) -> list[tuple[str, str]]:
    nlist = max(16, int(math.sqrt(n)))  # sqrt(n) lists: trainable with fx's 39 points per list
    return [
        ("Flat (exact)", fx.EXACT_FACTORY),
        ("HNSW32", "IDMap2,HNSW32,Flat"),
        (f"IVF{nlist},Flat", f"IDMap2,IVF{nlist},Flat"),
        (f"IVF{nlist},SQ8", f"IDMap2,IVF{nlist},SQ8"),
    ]


def measure(index, queries: np.ndarray, r: int) -> tuple[np.ndarray, list[float]]:
    params, _sel = fx.search_params(allowed_fids=None, nlist=fx.ivf_nlist(index), hnsw=fx.is_hnsw(index), k=r)
    labels, times = [], []
    for q in queries:
        t = time.perf_counter()
        _, lab = index.search(q[None], r, params=params)
        times.append(time.perf_counter() - t)
        labels.append(lab[0])
    return np.stack(labels), times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--sizes", type=int, nargs="+", default=[10_000, 100_000], help="corpus sizes (default 10k 100k)"
    )
    p.add_argument(
        "--million", action="store_true", help="also 1,000,000 vectors (slow: HNSW and IVF builds)"
    )
    p.add_argument(
        "--dim", type=int, default=256, help="embedding dimension (default 256: a Matryoshka size)"
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
    args = p.parse_args(argv)
    import faiss

    sizes = sorted(set(args.sizes + ([1_000_000] if args.million else [])))
    print(
        f"# FAISS index types, d={args.dim}, R={args.shortlist}, {args.queries} single queries on 1 thread "
        f"(faiss {faiss.__version__})\n"
    )
    print("| vectors | index | build s | p50 ms | p95 ms | recall@R vs Flat |")
    print("|---|---|---|---|---|---|")
    flat_p50: dict[int, float] = {}
    for n in sizes:
        x, q = corpus(n, args.dim, args.queries)
        ids = np.arange(n, dtype=np.int64)
        truth = None
        for name, factory in factories(n):
            faiss.omp_set_num_threads(args.build_threads)
            t = time.perf_counter()
            index, _ = fx.make_faiss_index(factory, args.dim, x, ids)
            build_s = time.perf_counter() - t
            faiss.omp_set_num_threads(1)
            labels, times = measure(index, q, args.shortlist)
            if truth is None:
                truth = labels
            recall = np.mean(
                [len(set(a) & set(b)) / args.shortlist for a, b in zip(labels, truth, strict=True)]
            )
            p50, p95 = (1e3 * float(np.percentile(times, v)) for v in (50, 95))
            if factory == fx.EXACT_FACTORY:
                flat_p50[n] = p50
            print(
                f"| {n:,} | {name} | {build_s:.1f} | {p50:.2f} | {p95:.2f} | {100 * recall:.1f} % |",
                flush=True,
            )
            del index
    within = [n for n, v in flat_p50.items() if v <= args.budget_ms]
    print()
    for n, v in sorted(flat_p50.items()):
        print(f"Flat at {n:,}: median {v:.2f} ms ({v / n * 1e6:.1f} ns per vector)")
    if flat_p50:
        per_vector = max(v / n for n, v in flat_p50.items())
        full = 2048  # Qwen3-VL-Embedding-2B's full embedding size; Flat's cost grows linearly with d
        print(
            f"exact search stays within {args.budget_ms:g} ms up to about {int(args.budget_ms / per_vector):,} "
            f"vectors at d={args.dim} (measured within: {', '.join(f'{n:,}' for n in within) or 'none'}); "
            f"at d={full}, extrapolated linearly: about {int(args.budget_ms / per_vector * args.dim / full):,}; "
            f"threshold in force: core.config.FAISS_EXACT_MAX_VECTORS = {FAISS_EXACT_MAX_VECTORS:,}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
