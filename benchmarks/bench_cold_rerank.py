"""Cold and warm stage-2 rerank latency: frames decoded from the source vs. read from the frame store.

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/bench_cold_rerank.py [--videos 10] [--seconds 20]
        [--gops 2 10] [--queries 8] [--shortlist 10] [--frames 32] [--store jpeg]
        [--codecs jpeg png lz4] [--frame-size 128] [--redis-url redis://127.0.0.1:6379/0] [--workdir DIR]

The issue's full sizes: ``--videos 10 --seconds 180`` (3-minute 720p videos; generating and indexing
them takes a while on 2 cores).

What it does, all generated here (nothing downloaded; videos and indexes live under --workdir, a
temporary folder by default, and are never committed):

1. renders ``--videos`` videos of ``--seconds`` s at 1280x720, 24 fps (a textured grey haystack with
   moving coloured squares and discs), and encodes each as H.264 once per GOP in ``--gops`` (seconds
   between keyframes, ``scenecut=0``);
2. per GOP, indexes them twice with ``indexer build`` (one-shot, the shipped tiny-world backbone,
   K = 32): ``--frame-store none`` (stage 2 decodes from the source: the old path) and
   ``--frame-store STORE`` (default jpeg);
3. runs ``--queries`` different queries through the service's ``Searcher`` (the API's code path,
   without HTTP) at R = ``--shortlist``, K' = ``--frames``: each query once with an empty frame cache
   (cold) and once more at once (warm), and reports p50/p95 of the rerank time (selection + frames +
   encode + head), the share of it spent getting frames ("decode"), cold/warm, and storage;
4. compares codecs on the frames stage 2 selected: bytes per frame, encode and decode ms per frame,
   largest pixel error, and the largest |s_ij(codec) - s_ij(decoded from the source)| over every
   (query, candidate) — the score drift each codec would cause.

"Cold" means the frame cache is empty; the source files are in the OS page cache (they were just
written), which favours the decode-from-source rows. No GPU was used: decoding and the backbone run
on the CPU. Nothing here is asserted: numbers are results.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.coldness import clear  # noqa: E402
from benchmarks.provenance import environment  # noqa: E402

WIDTH, HEIGHT, FPS = 1280, 720, 24
# shapes-world colours (world/vocab.py), so that the tiny-world backbone's selection means something
QUERIES = [
    "a red square appears",
    "there is a blue circle",
    "a green square moves across",
    "a yellow circle on grey",
    "there is a cyan square",
    "a magenta circle appears",
    "a red circle and a blue square",
    "a small green circle",
    "a yellow square at the top",
    "a cyan circle moves down",
]


def render(seconds: int, seed: int):
    """Frames [H, W, 3] uint8 of one video: a static textured haystack, shapes passing through."""
    from world.vocab import COLOURS

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
    base = 110 + 25 * np.sin(xx / rng.uniform(20, 60)) * np.cos(yy / rng.uniform(20, 60))
    base = np.clip(base[..., None] + rng.normal(0, 6, (HEIGHT, WIDTH, 1)), 0, 255).astype(np.uint8)
    base = np.repeat(base, 3, axis=2)
    names = list(COLOURS)
    shapes = []  # (start frame, end frame, colour, disc?, x0, y0, vx, vy, size)
    for _ in range(max(2, seconds // 6)):
        start = int(rng.integers(0, max(1, seconds * FPS - 3 * FPS)))
        length = int(rng.integers(2 * FPS, 6 * FPS))
        shapes.append(
            (start, start + length, COLOURS[names[rng.integers(len(names))]], bool(rng.integers(2)),
             rng.uniform(100, WIDTH - 200), rng.uniform(100, HEIGHT - 200), rng.uniform(-6, 6),
             rng.uniform(-4, 4), int(rng.integers(60, 160)))
        )  # fmt: skip
    for t in range(seconds * FPS):
        frame = base.copy()
        for start, end, colour, disc, x0, y0, vx, vy, size in shapes:
            if start <= t < end:
                x = int(np.clip(x0 + vx * (t - start), 0, WIDTH - size))
                y = int(np.clip(y0 + vy * (t - start), 0, HEIGHT - size))
                patch = frame[y : y + size, x : x + size]
                if disc:
                    r = size / 2
                    py, px = np.ogrid[:size, :size]
                    patch[(py - r) ** 2 + (px - r) ** 2 <= r * r] = colour
                else:
                    patch[:] = colour
        yield frame


def make_videos(workdir: Path, args) -> dict[int, Path]:
    """{gop_s: JSONL manifest}; videos are cached in workdir by their settings."""
    from world.media import write_video

    out = {}
    for gop in args.gops:
        folder = workdir / f"videos-{args.seconds}s-gop{gop}"
        lines = []
        for i in range(args.videos):
            path = folder / f"v{i:02d}.mp4"
            if not path.exists():
                t = time.perf_counter()
                write_video(
                    path.with_suffix(".tmp.mp4"),
                    render(args.seconds, seed=i),
                    fps=FPS,
                    codec="h264",
                    gop_s=gop,
                )
                path.with_suffix(".tmp.mp4").rename(path)
                print(f"  rendered {path.name} (GOP {gop} s) in {time.perf_counter() - t:.1f} s", flush=True)
            lines.append(json.dumps({"id": f"v{i:02d}", "path": str(path)}))
        manifest = folder / "manifest.jsonl"
        manifest.write_text("\n".join(lines) + "\n")
        out[gop] = manifest
    return out


def build(manifest: Path, index: Path, model: Path, store: str) -> float:
    if (index / "manifest.json").exists():
        return 0.0
    from indexer import BuildOptions, build_index

    t = time.perf_counter()
    build_index(manifest, index, BuildOptions(model=str(model), frames=32, frame_store=store))
    return time.perf_counter() - t


def measure(index: Path, model: Path, args, tag: str) -> dict:
    """Cold and warm rerank times over the queries for one index."""
    from engine.config import EngineConfig
    from engine.loader import load_engine

    config = EngineConfig(
        index=index,
        model=str(model),
        default_frames=args.frames,
        default_shortlist=args.shortlist,
        redis_url=args.redis_url,
        cache_prefix=f"qaslr-bench:{tag}:{time.time_ns()}:",
        cache_max_items=100_000,
    )
    engine = load_engine(config)
    rerank = ("selection", "decode", "encode", "head")
    rows = {"cold": [], "warm": [], "cold_decode": [], "warm_decode": []}
    frames = {"store_frames": 0, "decoded_frames": 0, "cache_hits": 0}
    try:
        engine.search_sync({"query": "warm-up"})  # first-call costs (threads, allocators)
        for query in QUERIES[: args.queries]:
            clear(engine.cache)
            for kind in ("cold", "warm"):
                out = engine.search_sync({"query": query, "shortlist": args.shortlist, "frames": args.frames})
                t = out.timings_ms
                rows[kind].append(sum(t[s] for s in rerank) / 1e3)
                rows[f"{kind}_decode"].append(t["decode"] / 1e3)
                if kind == "cold":
                    frames["store_frames"] += out.store_frames
                    frames["decoded_frames"] += out.decoded_frames
                else:
                    frames["cache_hits"] += out.cache_hits
        clear(engine.cache)
    finally:
        engine.close()
    return {"rows": rows, "frames": frames}


def pct(values, q) -> float:
    return float(np.percentile(np.asarray(values), q))


def storage(index: Path, manifest: Path) -> dict:
    from indexer.maintenance import index_stats

    stats = index_stats(index)
    n = max(1, stats["indexed"])
    sources = [json.loads(line)["path"] for line in manifest.read_text().splitlines()]
    return {
        "store_per_video": stats["frame_store"]["bytes_per_video"],
        "per_frame": stats["frame_store"]["bytes_per_frame"],
        "index_per_video": stats["bytes"]["total"] / n,
        "source_per_video": sum(Path(p).stat().st_size for p in sources) / len(sources),
    }


def compare_codecs(index: Path, model: Path, args) -> list[dict]:
    """Per codec, on the frames stage 2 selects (decoded from the source): size, speed, pixel
    error, and the score drift against the frames decoded from the source."""
    import torch

    from core.config import QFRAME_TEMPERATURE
    from engine.results import Hit
    from engine.tiers.base import RerankStats, TierRequest
    from engine.tiers.oneshot import OneShotTier
    from indexer.assembly import encoder_for, load_model_for_index
    from indexer.store import IndexReader
    from indexer.store.frames import decode_frame, encode_frame
    from indexer.video import decode_frames
    from models.backbone import VideoClip

    codecs = list(args.codecs)
    stats = {c: {"bytes": [], "enc": [], "dec": [], "err": 0, "drift": []} for c in codecs}
    with IndexReader(index) as reader:
        loaded = load_model_for_index(reader.manifest, str(model), head_dir=None)
        encoder = encoder_for(reader.manifest, loaded.backbone, None, clip_batch_size=8)
        reranker = OneShotTier(encoder, reader, None, temperature=QFRAME_TEMPERATURE)
        for query in QUERIES[: args.codec_queries]:
            q = encoder.embed_queries([query])[0].float()
            request = TierRequest(
                query=query, q=q, frames=args.frames, seed=0, stats=RerankStats(), clock=None
            )
            for rank, (vid, _) in enumerate(reader.search(q.numpy()[None], args.shortlist)[0], 1):
                rec = reader.video(vid)
                idx = reranker.select(Hit(vid, 0.0, 0.0, rank, record=rec), request).read
                source = decode_frames(rec.path, idx, size=loaded.backbone.frame_shape(rec.width, rec.height))
                clips = [VideoClip(source, idx, rec.fps)]
                for c in codecs:
                    t = time.perf_counter()
                    blobs = [encode_frame(f, c) for f in source]
                    t2 = time.perf_counter()
                    back = np.stack(
                        [decode_frame(b, c, f.shape[:2]) for b, f in zip(blobs, source, strict=True)]
                    )
                    t3 = time.perf_counter()
                    s = stats[c]
                    s["bytes"] += [len(b) for b in blobs]
                    s["enc"].append((t2 - t) / len(blobs) * 1e3)
                    s["dec"].append((t3 - t2) / len(blobs) * 1e3)
                    s["err"] = max(s["err"], int(np.abs(back.astype(np.int16) - source).max()))
                    clips.append(VideoClip(back, idx, rec.fps))
                with torch.inference_mode():
                    embs = encoder.encode(clips, texts=[query] * len(clips))
                ref = float(embs[0].final.float() @ q)
                for c, e in zip(codecs, embs[1:], strict=True):
                    stats[c]["drift"].append(abs(float(e.final.float() @ q) - ref))
    return [
        {
            "codec": c,
            "kib_per_frame": statistics.mean(s["bytes"]) / 1024,
            "encode_ms": statistics.median(s["enc"]),
            "decode_ms": statistics.median(s["dec"]),
            "max_pixel_error": s["err"],
            "max_score_drift": max(s["drift"]),
            "mean_score_drift": statistics.mean(s["drift"]),
        }
        for c, s in stats.items()
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--videos", type=int, default=10)
    p.add_argument("--seconds", type=int, default=20)
    p.add_argument("--gops", type=int, nargs="+", default=[2, 10], help="keyframe intervals in seconds")
    p.add_argument(
        "--queries", type=int, default=8, help=f"distinct queries per index (at most {len(QUERIES)})"
    )
    p.add_argument(
        "--codec-queries", type=int, default=2, help="queries whose selections the codec table uses"
    )
    p.add_argument("--shortlist", type=int, default=10, help="R")
    p.add_argument("--frames", type=int, default=32, help="K'")
    p.add_argument("--store", default="jpeg", help="the frame store measured against decoding (default jpeg)")
    p.add_argument("--codecs", nargs="+", default=["jpeg", "png", "lz4"])
    p.add_argument(
        "--frame-size", type=int, default=None, help="working resolution (default: the backbone's 128)"
    )
    p.add_argument("--redis-url", default=None, help="Redis as the frame cache (default: in-process LRU)")
    p.add_argument(
        "--workdir", default=None, help="keep videos and indexes here (default: a temporary folder)"
    )
    p.add_argument("--json", default=None, help="also write the results as JSON to this file")
    p.add_argument(
        "--codecs-only",
        action="store_true",
        help="only the codec table (e.g. at --frame-size 448, where stage-2 latency on 2 cores is long)",
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(1)
    from training.backbone import tiny_world_checkpoint

    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench-cold-")
        workdir = Path(tmp.name)
    else:
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
    wall = time.perf_counter()
    model = tiny_world_checkpoint(workdir / "tiny-world")
    if args.frame_size:  # the same weights at another working resolution (e.g. 448, the 2B model's)
        hints = json.loads((model / "qaslr_backbone.json").read_text())
        if hints.get("frame_size") != args.frame_size:
            sized = workdir / f"tiny-world-{args.frame_size}"
            if not sized.exists():
                import shutil

                shutil.copytree(model, sized)
                hints["frame_size"] = args.frame_size
                (sized / "qaslr_backbone.json").write_text(json.dumps(hints))
            model = sized
    print(
        f"videos: {args.videos} x {args.seconds} s, {WIDTH}x{HEIGHT} H.264 {FPS} fps, GOPs {args.gops} s",
        flush=True,
    )
    manifests = make_videos(workdir, args)
    results = {"args": vars(args), "latency": [], "storage": {}, "codecs": None}
    for gop, manifest in manifests.items():
        if args.codecs_only:
            build(
                manifest,
                workdir / f"index-{args.seconds}s-gop{gop}-none-{args.frame_size or 'native'}",
                model,
                "none",
            )
            break
        for store in ("none", args.store):
            index = workdir / f"index-{args.seconds}s-gop{gop}-{store}-{args.frame_size or 'native'}"
            took = build(manifest, index, model, store)
            if took:
                print(f"  indexed GOP {gop} s, frame store {store}: {took:.1f} s", flush=True)
            m = measure(index, model, args, f"{gop}-{store}")
            r = m["rows"]
            row = {
                "gop_s": gop,
                "frames_from": "frame store (" + store + ")" if store != "none" else "decoded from source",
                "cold_p50": pct(r["cold"], 50),
                "cold_p95": pct(r["cold"], 95),
                "warm_p50": pct(r["warm"], 50),
                "warm_p95": pct(r["warm"], 95),
                "cold_decode_share": sum(r["cold_decode"]) / sum(r["cold"]),
                "warm_decode_share": sum(r["warm_decode"]) / sum(r["warm"]),
                **m["frames"],
            }
            row["cold_over_warm"] = row["cold_p50"] / row["warm_p50"]
            results["latency"].append(row)
            results["storage"][f"{gop}-{store}"] = storage(index, manifest)
    results["codecs"] = compare_codecs(
        workdir / f"index-{args.seconds}s-gop{args.gops[0]}-none-{args.frame_size or 'native'}", model, args
    )
    print_tables(results, args)
    print(f"\nwall time {time.perf_counter() - wall:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({**results, "environment": environment()}, indent=2))
    if tmp is not None:
        tmp.cleanup()


def print_tables(results: dict, args) -> None:
    print(f"\nworking size: at most {args.frame_size or 128}^2 pixels per frame")
    if not results["latency"]:
        return print_codecs(results)
    print(f"\nstage-2 rerank at R = {args.shortlist}, K' = {args.frames}, {args.queries} queries "
          "(seconds; decode = getting the frames)")  # fmt: skip
    print(
        "| GOP | frames from | cold p50 | cold p95 | warm p50 | warm p95 | cold / warm (p50) | decode share (cold) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results["latency"]:
        print(
            f"| {r['gop_s']} s | {r['frames_from']} | {r['cold_p50']:.3f} | {r['cold_p95']:.3f} | {r['warm_p50']:.3f} "
            f"| {r['warm_p95']:.3f} | {r['cold_over_warm']:.1f}x | {100 * r['cold_decode_share']:.0f} % |"
        )
    print("\nstorage per video")
    print("| index | frame store per video | per frame | whole index per video | source file per video |")
    print("|---|---:|---:|---:|---:|")
    for key, s in results["storage"].items():
        print(
            f"| GOP {key.replace('-', ' s, ')} | {s['store_per_video'] / 1e6:.3f} MB | {s['per_frame'] / 1024:.1f} KiB "
            f"| {s['index_per_video'] / 1e6:.3f} MB | {s['source_per_video'] / 1e6:.2f} MB |"
        )
    print_codecs(results)


def print_codecs(results: dict) -> None:
    print("\ncodecs on the selected frames (vs. the same frames decoded from the source)")
    print(
        "| codec | KiB / frame | encode ms / frame | decode ms / frame | max pixel error | max |score drift| | mean |score drift| |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for c in results["codecs"]:
        print(
            f"| {c['codec']} | {c['kib_per_frame']:.1f} | {c['encode_ms']:.2f} | {c['decode_ms']:.2f} | {c['max_pixel_error']} "
            f"| {c['max_score_drift']:.2e} | {c['mean_score_drift']:.2e} |"
        )


if __name__ == "__main__":
    main()
