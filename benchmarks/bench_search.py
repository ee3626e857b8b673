"""Search API latency and throughput with the tiny backbone over a generated index, on loopback.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_search.py [--videos 24] [--seconds 8]
        [--redis-url redis://127.0.0.1:6379/0] [--frames 16] [--shortlist 10]

What it does: generates ``--videos`` synthetic videos (8-20 s, 160x120, 12 fps), a tiny random
checkpoint and streaming head, builds a streaming index with ``indexer build`` (K=32, L=8, two bank
frames per second), starts the API under uvicorn in this process, and prints:

1. p50/p95 latency of ``indexed`` and ``rerank`` (cold frame cache: cleared before each request;
   warm: the same request repeated) and the cold/warm ratio, plus the mean per-stage timings;
2. throughput (requests/s) and p50 latency at 1, 4 and 16 concurrent clients per mode, each level
   bounded by ``--seconds``.

The tiny backbone makes model time small, so these numbers weigh the serving path (HTTP, queue,
FAISS, selection, decode, cache) more heavily than a real 2B model would. Ratios, not absolute
speeds, are the point; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.serving import QaslrServe  # noqa: E402

QUERIES = [
    "a red block moves to the left",
    "a bright band sweeps down the frame",
    "two coloured squares cross each other",
    "a dark scene with a green object",
    "the camera shows a blue square near the top",
    "an object bounces off the edge",
    "a yellow shape in the corner",
    "slow movement on a grey background",
]


def _frames(n: int, seed: int, w: int = 160, h: int = 120) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bg = rng.integers(0, 256, 3)
    cols = rng.integers(0, 256, (3, 3))
    speed = rng.uniform(0.5, 4.0, (3, 2))
    yy, xx = np.mgrid[0:h, 0:w]
    texture = ((xx * rng.uniform(0.2, 1.5) + yy * rng.uniform(0.2, 1.5)) % 64).astype(np.int16)
    out = np.empty((n, h, w, 3), np.uint8)
    for t in range(n):
        f = np.clip(bg[None, None] + texture[..., None] - 32, 0, 255).astype(np.uint8)
        for b in range(3):
            x = int(abs((speed[b, 0] * t + 40 * b) % (2 * (w - 30)) - (w - 30)))
            y = int(abs((speed[b, 1] * t + 30 * b) % (2 * (h - 24)) - (h - 24)))
            f[y : y + 24, x : x + 30] = cols[b]
        out[t] = f
    return out


def build_corpus(root: Path, num_videos: int) -> tuple[Path, Path, Path]:
    from indexer import BuildOptions, build_index
    from models.checkpoint import make_checkpoint
    from models.head import StreamingHeadConfig, create_head, save_head
    from world.media import write_video

    ckpt = make_checkpoint(root / "ckpt", seed=0)
    head = root / "head"
    save_head(
        create_head(
            StreamingHeadConfig(
                hidden_size=64, embed_dim=64, num_heads=4, num_think_tokens=8, max_evidence_tokens=32
            ),
            seed=0,
        ),
        head,
    )
    rng = np.random.default_rng(0)
    lines = []
    for i in range(num_videos):
        seconds = int(rng.integers(8, 21))
        path = write_video(root / "videos" / f"v{i:03d}.mp4", _frames(seconds * 12, seed=i), fps=12)
        lines.append(json.dumps({"id": f"v{i:03d}", "path": str(path), "metadata": {"group": i % 4}}))
    manifest = root / "videos" / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    index = root / "index"
    options = BuildOptions(model=str(ckpt), head_dir=str(head), frames=32, clip_len=8, bank_per_second=2)
    build_index(manifest, index, options)
    return ckpt, head, index


def ServeProcess(ckpt: Path, head: Path, index: Path, *, env: dict[str, str]) -> QaslrServe:
    """The API over the streaming ``index`` (benchmarks/serving.py)."""
    return QaslrServe(
        ["--index", str(index), "--model", str(ckpt), "--head", str(head)], env=env, timeout_s=120
    )


def pct(values, q):
    return float(np.percentile(values, q)) if values else float("nan")


def clear_redis(redis_client, prefix: str) -> None:
    keys = list(redis_client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        redis_client.delete(*keys)


def latency(url: str, body: dict, *, modes, repeats: int, before=None) -> dict[str, tuple[list, list]]:
    """{name: (latencies ms, per-request timings)} for each (name, mode, repeat_same_query)."""
    import httpx

    out: dict[str, tuple[list, list]] = {name: ([], []) for name, _, _ in modes}
    with httpx.Client(base_url=url, timeout=120) as client:
        for q in QUERIES[:2]:  # warm-up (first-call allocations); distinct from the measured queries
            client.post("/search", json={"query": q + " warm-up", **body})
        for i in range(repeats):
            q = QUERIES[i % len(QUERIES)] + f" #{i}"
            for name, mode, _ in modes:
                if before is not None:
                    before(name)
                t = time.perf_counter()
                r = client.post("/search", json={"query": q, "mode": mode, **body})
                r.raise_for_status()
                out[name][0].append((time.perf_counter() - t) * 1e3)
                out[name][1].append(r.json()["timings_ms"] | {"decoded": r.json()["cache"]["decoded_frames"]})
    return out


def throughput(url: str, body: dict, clients: int, mode: str, seconds: float) -> tuple[float, float, int]:
    import httpx

    stop = time.perf_counter() + seconds
    latencies: list[float] = []
    lock = threading.Lock()

    def worker(k: int) -> int:
        n429, i = 0, 0
        with httpx.Client(base_url=url, timeout=120) as c:
            while time.perf_counter() < stop:
                t = time.perf_counter()
                r = c.post("/search", json={"query": QUERIES[(k + i) % len(QUERIES)], "mode": mode, **body})
                if r.status_code == 429:
                    n429 += 1
                    time.sleep(0.01)
                    continue
                r.raise_for_status()
                with lock:
                    latencies.append((time.perf_counter() - t) * 1e3)
                i += 1
        return n429

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        rejected = sum(pool.map(worker, range(clients)))
    return len(latencies) / (time.perf_counter() - t0), pct(latencies, 50), rejected


def main() -> None:
    import logging

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--videos", type=int, default=24)
    p.add_argument("--seconds", type=float, default=8.0, help="time bound per concurrency level and mode")
    p.add_argument("--repeats", type=int, default=12, help="latency samples per mode")
    p.add_argument("--frames", type=int, default=16, help="K' per candidate")
    p.add_argument("--shortlist", type=int, default=10)
    p.add_argument(
        "--redis-url", default=None, help="use Redis for the frame cache (default: in-process LRU)"
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        ckpt, head, index = build_corpus(Path(tmp), args.videos)
        print(f"corpus + index: {args.videos} videos in {time.perf_counter() - t0:.1f} s")
        prefix = f"qaslr-bench:{uuid.uuid4().hex[:8]}:"
        env = {
            "QASLR_QUEUE_SIZE": "64",
            "QASLR_REQUEST_TIMEOUT_S": "120",
            "QASLR_MAX_FRAMES": str(max(args.frames, 16)),
            "QASLR_DEFAULT_FRAMES": str(args.frames),
            "QASLR_CACHE_PREFIX": prefix,
            "REDIS_URL": args.redis_url or "",
        }
        body = {"top_k": 10, "shortlist": args.shortlist, "frames": args.frames}
        warm_modes = [
            ("indexed", "indexed", False),
            ("rerank cold", "rerank", False),
            ("rerank warm", "rerank", True),
        ]
        redis_client = None
        if args.redis_url:  # one server; "cold" = this run's keys deleted before the request
            import redis

            redis_client = redis.Redis.from_url(args.redis_url)

            def before(name):
                if name == "rerank cold":
                    clear_redis(redis_client, prefix)

            with ServeProcess(ckpt, head, index, env=env) as url:
                lat = latency(url, body, modes=warm_modes, repeats=args.repeats, before=before)
                tput = {
                    (c, m): throughput(url, body, c, m, args.seconds)
                    for c in (1, 4, 16)
                    for m in ("indexed", "rerank")
                }
            clear_redis(redis_client, prefix)
        else:  # in-process LRU: "cold" is a server whose cache holds nothing (QASLR_CACHE_MAX_ITEMS=0)
            with ServeProcess(ckpt, head, index, env=env | {"QASLR_CACHE_MAX_ITEMS": "0"}) as url:
                lat = latency(url, body, modes=[("rerank cold", "rerank", False)], repeats=args.repeats)
            with ServeProcess(ckpt, head, index, env=env) as url:
                lat |= latency(
                    url, body, modes=[warm_modes[0], ("rerank warm", "rerank", True)], repeats=args.repeats
                )
                # the warm entry above ran once per query: its first request of each query filled the cache
                lat["rerank warm"] = latency(
                    url, body, modes=[("rerank warm", "rerank", True)], repeats=args.repeats
                )["rerank warm"]
                tput = {
                    (c, m): throughput(url, body, c, m, args.seconds)
                    for c in (1, 4, 16)
                    for m in ("indexed", "rerank")
                }

    cache_name = "redis" if args.redis_url else "in-process LRU"
    print(
        f"\nlatency over HTTP (ms), {args.repeats} requests each; R={args.shortlist}, K'={args.frames}, "
        f"frame cache: {cache_name}; stage columns are server-side means"
    )
    print("| mode | p50 | p95 | query_embed | faiss | selection | decode | encode | head | frames decoded |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in ("indexed", "rerank cold", "rerank warm"):
        values, stages = lat[name]
        mean = {k: statistics.fmean(s[k] for s in stages) for k in stages[0]}
        print(
            f"| {name} | {pct(values, 50):.1f} | {pct(values, 95):.1f} | {mean['query_embed']:.1f} | "
            f"{mean['faiss']:.2f} | {mean['selection']:.1f} | {mean['decode']:.1f} | "
            f"{mean['encode']:.1f} | {mean['head']:.1f} | {mean['decoded']:.0f} |"
        )
    cold, warm, indexed = (pct(lat[n][0], 50) for n in ("rerank cold", "rerank warm", "indexed"))
    print(f"rerank cold/warm p50: {cold / warm:.2f}x; rerank (warm) / indexed p50: {warm / indexed:.1f}x")
    print(
        f"\nthroughput on loopback, each cell bounded by {args.seconds:g} s (server: `qaslr serve` subprocess)"
    )
    print("| clients | indexed req/s | indexed p50 ms | rerank req/s | rerank p50 ms | 429s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in (1, 4, 16):
        (ri, li, xi), (rr, lr, xr) = tput[(c, "indexed")], tput[(c, "rerank")]
        print(f"| {c} | {ri:.1f} | {li:.0f} | {rr:.1f} | {lr:.0f} | {xi + xr} |")


if __name__ == "__main__":
    main()
