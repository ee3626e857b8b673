"""The frame tier and stage-2 selection with hour-long frame banks: ms per query on a synthetic
shortlist (default 10 candidates x 3,600 bank frames, d = 128 and d = 2048).

    PYTHONPATH=. python benchmarks/bench_bank_scale.py [--candidates 10] [--frames 3600] [--dims 128 2048]

Times, per query, ``engine.tiers.frame.FrameTier.run`` (the shortlist's banks scored in one product)
and ``engine.tiers.encoded.EncodeTier.select`` for every candidate (relevance and query-aware
selection of K' frames). The banks are float16 arrays as the index's memory-mapped .npy files give
them once in the page cache. Prints one line per dimension and, with ``--json``, writes the numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class _Bank:
    frame_indices: np.ndarray
    timestamps: np.ndarray
    embeddings: np.ndarray


class _Index:
    def __init__(self, banks: dict[str, _Bank]):
        self.banks = banks

    def frame_bank(self, video_id: str) -> _Bank:
        return self.banks[video_id]


class _Clock:
    @contextlib.contextmanager
    def stage(self, name):
        yield

    def move(self, a, b, s):
        pass


def _banks(n: int, frames: int, d: int, rng) -> dict[str, _Bank]:
    out = {}
    for i in range(n):
        e = rng.standard_normal((frames, d)).astype(np.float32)
        e /= np.linalg.norm(e, axis=1, keepdims=True)
        idx = np.arange(frames, dtype=np.int64) * 25 + 12  # 1 fps of a 25 fps video
        out[f"v{i}"] = _Bank(idx, idx / 25.0, e.astype(np.float16))
    return out


def _time(fn, repeats: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def bench(candidates: int, frames: int, d: int, k: int, repeats: int) -> dict:
    from engine.results import Hit
    from engine.tiers.base import RerankStats, TierRequest
    from engine.tiers.encoded import EncodeTier
    from engine.tiers.frame import FrameTier

    rng = np.random.default_rng(0)
    index = _Index(_banks(candidates, frames, d, rng))
    q = rng.standard_normal(d).astype(np.float32)
    q /= np.linalg.norm(q)
    request = TierRequest(
        query="q", q=torch.from_numpy(q), frames=k, seed=0, stats=RerankStats(), clock=_Clock()
    )
    tier = FrameTier(index)
    encode = EncodeTier(None, index, None, temperature=0.25)

    def hits():
        return [Hit(f"v{i}", 0.0, 0.0, i + 1) for i in range(candidates)]

    def frame_tier():
        tier.run(request, hits())

    def select():
        for h in hits():
            encode.select(h, request)

    return {
        "candidates": candidates,
        "frames": frames,
        "d": d,
        "k_prime": k,
        "frame_tier_ms": round(_time(frame_tier, repeats), 3),
        "select_ms": round(_time(select, repeats), 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--candidates", type=int, default=10)
    p.add_argument("--frames", type=int, default=3600)
    p.add_argument("--dims", type=int, nargs="+", default=[128, 2048])
    p.add_argument("--k", type=int, default=32, help="K' frames selected per candidate")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = []
    for d in args.dims:
        r = bench(args.candidates, args.frames, d, args.k, args.repeats)
        rows.append(r)
        print(
            f"{r['candidates']} candidates x {r['frames']} frames, d={d}: frame tier {r['frame_tier_ms']:.2f} ms/query, "
            f"selection (K'={r['k_prime']}, all candidates) {r['select_ms']:.2f} ms/query"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
