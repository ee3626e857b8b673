#!/usr/bin/env python
"""On a GPU machine: checks the GPU stage-1 path and prints its latency beside the CPU's.

Needs faiss-gpu (`pip install .[gpu]`) and a visible GPU. For each index type that can go to a GPU
(Flat, IVF), it builds the index with the project's code, searches the same single queries on the
CPU index and through indexer.store.faiss_index.GpuSearch (what IndexReader uses when
QASLR_FAISS_DEVICE is auto or gpu), and checks that the GPU returns the CPU's ids.

    .venv/bin/python benchmarks/bench_faiss_gpu.py --vectors 100000 --dim 2048
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_faiss_types import corpus  # noqa: E402
from indexer.store import faiss_index as fx  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vectors", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("-R", "--shortlist", type=int, default=10)
    args = p.parse_args(argv)
    n_gpu = fx.gpu_count()
    if n_gpu == 0:
        print("no GPU visible to FAISS (faiss-gpu not installed, or no CUDA device): nothing to check")
        return 1
    x, q = corpus(args.vectors, args.dim, args.queries)
    ids = np.arange(args.vectors, dtype=np.int64)
    nlist = int(np.sqrt(args.vectors))
    print(f"{args.vectors:,} vectors, d={args.dim}, R={args.shortlist}, {n_gpu} GPU(s)")
    print("| index | build s | CPU p50 ms | GPU p50 ms | GPU ids = CPU ids |")
    print("|---|---|---|---|---|")
    failed = False
    for factory in (fx.EXACT_FACTORY, f"IDMap2,IVF{nlist},Flat"):
        t = time.perf_counter()
        index, actual = fx.make_faiss_index(factory, args.dim, x, ids)  # IVF trains on the GPU
        build_s = time.perf_counter() - t
        gpu, device = fx.gpu_search_for(index, "gpu")
        if gpu is None:
            print(f"| {actual} | {build_s:.1f} | - | {device} | - |")
            failed = True
            continue
        params, _ = fx.search_params(allowed_fids=None, nlist=fx.ivf_nlist(index))
        cpu_t, gpu_t, same = [], [], 0
        for v in q:
            t = time.perf_counter()
            _, a = index.search(v[None], args.shortlist, params=params)
            cpu_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            _, b = gpu.search(v[None], args.shortlist)
            gpu_t.append(time.perf_counter() - t)
            same += len(set(a[0]) & set(b[0])) / args.shortlist
        agree = same / len(q)
        failed |= agree < 0.99
        print(
            f"| {actual} | {build_s:.1f} | {1e3 * np.median(cpu_t):.2f} | {1e3 * np.median(gpu_t):.2f} "
            f"| {100 * agree:.1f} % |"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
