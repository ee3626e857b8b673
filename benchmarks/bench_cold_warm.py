"""The default search cold and warm, beside stage 1, with and without edge frames (indexer.edges).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_cold_warm.py [--seed 0] [--videos 8]
        [--min-s 120] [--max-s 300] [--edge-gaps 8] [--hd] [--server] [--workdir DIR]
        [--json docs/bench/cold_warm.json]

``--hd`` searches 1280x720 H.264 re-encodings of the videos, GOP 2 s (the sources a
user's first look decodes from); ``--server`` makes each cold query a fresh ``qaslr serve`` process
over HTTP (ready after its warm-up), the warm one the same query again on it.

It renders (once, cached under --workdir) ``--videos`` single-event shapes-world videos of
``--min-s``-``--max-s`` s (benchmarks/bench_quality.py's corpus: one 2-3 s event each, every event
distinct, one query per video) and indexes them twice with the shipped tiny-world backbone
(bench_quality's ``build``): with edge frames (``--edge-gaps``, the build's default) and without
(``edge_gaps=0``: an index as built before edge frames, whose moments are refined by decoding). Per
index, query by query (each query on both indexes before the next, so that a busy moment of a
shared machine hits both alike):

- **cold**: a fresh engine (``load_engine``, then ``Engine.warm_up`` as ``qaslr serve`` runs it
  before ready, then its frame cache emptied), the default search (``{"query": q}``: mode rerank,
  the server's defaults) timed once. Each query's right video is its own, so no earlier query
  refined a moment in it; the source files are in the OS page cache and the process has run earlier
  engines (torch's lazy initialisation is paid once per process: a server pays it in its warm-up);
- **warm**: the same query again on that engine at once;
- **stage 1**: the same query with ``mode=indexed`` on that engine (FAISS on v_j only), twice: it
  embeds its query in the search process (the light lane), so its first call there is cold too;
  the second is the stage-1 p50 the default is compared with (the first is recorded beside it).

It prints and writes, per index: p50 of cold, warm and stage 1 (wall ms around
``Engine.search_sync``), cold/warm and default/stage 1, the median ``refine`` stage, moment R1@0.7
(over all queries, a wrong top-1 a miss, and over correct top-1 hits), the median moment length over
the median event length, the share of refinements served wholly from edge frames, and the index's
build cost. Nothing is asserted: numbers are results.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_quality import build, iou  # noqa: E402
from benchmarks.coldness import clear  # noqa: E402
from benchmarks.provenance import environment, world_workdir_and_model  # noqa: E402


class Measured:
    """What one index's searches measured, query by query."""

    def __init__(self):
        self.rows: dict[str, list] = {
            k: [] for k in ("cold", "warm", "stage1_first", "stage1", "refine_cold", "refine_warm")
        }
        self.moments, self.served, self.stages = [], [], {"cold": {}, "warm": {}}

    def one_query(self, index: Path, model: Path, query: str, event: tuple) -> None:
        """A fresh engine: the default search cold, then warm, then stage 1 twice."""
        from engine.config import EngineConfig
        from engine.loader import load_engine

        rows = self.rows
        engine = load_engine(EngineConfig(index=index, model=str(model), redis_url=None))
        try:
            engine.warm_up()
            clear(engine.cache)
            refiner = engine.searcher.evidence.refiner
            before = refiner.embedded_frames
            for kind in ("cold", "warm"):
                t = time.perf_counter()
                out = engine.search_sync({"query": query})
                rows[kind].append((time.perf_counter() - t) * 1e3)
                rows[f"refine_{kind}"].append(out.timings_ms.get("refine", 0.0))
                for stage, ms in out.timings_ms.items():
                    self.stages[kind].setdefault(stage, []).append(ms)
                if kind == "cold":
                    self.served.append(refiner.embedded_frames == before)
                    self.moments.append((out.hits[0].video_id, out.hits[0].moment, *event))
            # stage 1 embeds its query in this process (the light lane): its first call here is cold
            for kind in ("stage1_first", "stage1"):
                t = time.perf_counter()
                engine.search_sync({"query": query, "mode": "indexed"})
                rows[kind].append((time.perf_counter() - t) * 1e3)
        finally:
            engine.close()

    def one_query_served(self, index: Path, model: Path, query: str, event: tuple) -> None:
        """``--server``: a fresh ``qaslr serve`` process (ready once ``/readyz`` answers, after its
        warm-up), the default search over HTTP cold, then warm, then stage 1 twice."""
        import httpx

        from benchmarks.serving import QaslrServe

        rows = self.rows
        with QaslrServe(["--index", str(index), "--model", str(model)]) as url:
            for kind in ("cold", "warm", "stage1_first", "stage1"):
                body = {"query": query} if kind in ("cold", "warm") else {"query": query, "mode": "indexed"}
                t = time.perf_counter()
                r = httpx.post(f"{url}/search", json=body, timeout=120)
                rows[kind].append((time.perf_counter() - t) * 1e3)
                r.raise_for_status()
                out = r.json()
                if kind in ("cold", "warm"):
                    rows[f"refine_{kind}"].append(out["timings_ms"].get("refine", 0.0))
                    for stage, ms in out["timings_ms"].items():
                        self.stages[kind].setdefault(stage, []).append(ms)
                if kind == "cold":
                    top = out["results"][0]
                    moment = (top.get("evidence") or {}).get("moment")
                    span = None if moment is None else (moment["start_s"], moment["end_s"])
                    self.served.append(float("nan"))  # the refiner's own count is not seen over HTTP
                    self.moments.append((top["video_id"], span, *event))

    def summary(self) -> dict:
        right = [(m, s, e) for top, m, video, s, e in self.moments if top == video]
        ious = [iou(m, s, e) for m, s, e in right]
        lens = [m[1] - m[0] for m, _, _ in right if m is not None]
        p50 = {k: float(np.median(v)) for k, v in self.rows.items()}
        n = len(self.moments)
        return {
            "queries": n,
            "cold_p50_ms": p50["cold"],
            "warm_p50_ms": p50["warm"],
            "stage1_p50_ms": p50["stage1"],
            "stage1_first_p50_ms": p50["stage1_first"],
            "cold_over_warm": p50["cold"] / p50["warm"],
            "default_over_stage1": p50["warm"] / p50["stage1"],
            "cold_over_stage1": p50["cold"] / p50["stage1"],
            "refine_cold_p50_ms": p50["refine_cold"],
            "refine_warm_p50_ms": p50["refine_warm"],
            "hit1": len(right) / n,
            "r1@0.7": sum(i >= 0.7 for i in ious) / n,
            "r1@0.7_of_correct": sum(i >= 0.7 for i in ious) / max(1, len(right)),
            "moment_len_s": float(np.median(lens)) if lens else float("nan"),
            "event_len_s": float(np.median([e - s for _, s, e in right])) if right else float("nan"),
            "from_edge_frames": float(np.mean(self.served)),
            "ms": {k: [round(x, 1) for x in v] for k, v in self.rows.items()},
            # the searcher's own timings_ms, median per stage (total: inside the searcher)
            "stages_p50_ms": {
                kind: {k: float(np.median(v)) for k, v in got.items()} for kind, got in self.stages.items()
            },
        }


def hd_sources(corpus, work: Path) -> Path:
    """``--hd``: the corpus's videos re-encoded as the issue's sources are, 1280x720 H.264 in MP4 with
    a keyframe at least every 2 s (keyint 2 s, no scene cuts), with PyAV, cached; the manifest of them (the same ids
    and metadata)."""
    out = work / f"hd-{corpus.root.name}"
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for line in corpus.manifest.read_text().splitlines():
        record = json.loads(line)
        target = out / f"{record['id']}.mp4"
        if not target.exists():
            _encode_hd(corpus.manifest.parent / record["path"], target)
        lines.append(json.dumps({**record, "path": target.name}))  # read beside the manifest
    manifest = out / "videos.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def _encode_hd(source: Path, target: Path) -> None:
    from fractions import Fraction

    import av

    part = target.with_suffix(".part.mp4")
    with av.open(str(source)) as src, av.open(str(part), "w") as dst:
        video = src.streams.video[0]
        rate = Fraction(video.average_rate or 8)
        gop = max(1, round(2 * float(rate)))
        stream = dst.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = 1280, 720, "yuv420p"
        stream.codec_context.gop_size = gop
        stream.options = {"preset": "veryfast", "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0"}
        for i, frame in enumerate(src.decode(video)):
            frame = frame.reformat(width=1280, height=720, format="yuv420p")
            frame.pts, frame.time_base = i, 1 / rate
            for packet in stream.encode(frame):
                dst.mux(packet)
        for packet in stream.encode():
            dst.mux(packet)
    part.rename(target)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--videos", type=int, default=8)
    p.add_argument("--min-s", type=float, default=120.0)
    p.add_argument("--max-s", type=float, default=300.0)
    p.add_argument(
        "--edge-gaps", type=int, default=None, help="edge-frame gaps per video (default: the build's)"
    )
    p.add_argument("--no-before", action="store_true", help="skip the index without edge frames")
    p.add_argument("--hd", action="store_true",
                   help="search 1280x720 H.264 re-encodings of the videos, GOP 2 s")  # fmt: skip
    p.add_argument("--server", action="store_true",
                   help="cold: a fresh `qaslr serve` process per query over HTTP (else a fresh engine)")  # fmt: skip
    p.add_argument("--model", default=None, help="backbone directory (default: the shipped tiny-world)")
    p.add_argument("--workdir", default=None, help="cache for the corpus, checkpoint and indexes")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from core.config import EDGE_GAPS
    from world.corpus import CorpusConfig, make_corpus

    model = world_workdir_and_model(args, "qaslr-bench-cold-warm")
    gaps = EDGE_GAPS if args.edge_gaps is None else args.edge_gaps
    work = Path(args.workdir)
    config = CorpusConfig(
        videos=args.videos, seed=args.seed, min_duration_s=args.min_s, max_duration_s=args.max_s
    )
    corpus = make_corpus(work / f"corpus-{args.seed}-{args.videos}-{args.min_s:g}-{args.max_s:g}", config)
    queries, truth = corpus.queries("single"), corpus.by_id()
    manifest = hd_sources(corpus, work) if args.hd else corpus.manifest
    tag = "-hd" if args.hd else ""
    variants = [(f"edge frames ({gaps} gaps)", gaps)] + (
        [] if args.no_before else [("no edge frames (before)", 0)]
    )
    indexes, built, measured = {}, {}, {name: Measured() for name, _ in variants}
    for name, edge_gaps in variants:
        index = work / f"index-{args.seed}-{args.videos}-{args.min_s:g}-{args.max_s:g}{tag}-edges{edge_gaps}"
        built[name] = build(manifest, index, model, None, edge_gaps=edge_gaps)
        indexes[name] = index
    # query by query, each index in turn: a busy moment of a shared machine hits both alike
    for query, right in queries:
        (_, start, end), *_ = truth[right].events
        for name, _ in variants:
            one = measured[name].one_query_served if args.server else measured[name].one_query
            one(indexes[name], model, query, (right, start, end))
    results = {name: {**measured[name].summary(), "build": built[name]} for name, _ in variants}
    print(
        f"\nshapes world seed {args.seed}, {args.videos} videos of {args.min_s:.0f}-{args.max_s:.0f} s, "
        f"{' (1280x720 H.264, GOP 2 s)' if args.hd else ''}, default search "
        f"({'fresh qaslr serve' if args.server else 'fresh engine'} per query), p50 ms"
    )
    print(
        "| index | cold | warm | stage 1 | stage 1, first call | cold/warm | warm/stage 1 | cold/stage 1 | refine cold | "
        "Hit@1 | R1@0.7 | R1@0.7 of correct | moment / event s | from edge frames | build video min/s |"
    )
    print("|---|" + "---|" * 15)
    for name, r in results.items():
        print(
            f"| {name} | {r['cold_p50_ms']:.1f} | {r['warm_p50_ms']:.1f} | {r['stage1_p50_ms']:.1f} | {r['stage1_first_p50_ms']:.1f} | "
            f"{r['cold_over_warm']:.2f} | {r['default_over_stage1']:.2f} | {r['cold_over_stage1']:.2f} | "
            f"{r['refine_cold_p50_ms']:.1f} | {r['hit1']:.2f} | {r['r1@0.7']:.2f} | {r['r1@0.7_of_correct']:.2f} | "
            f"{r['moment_len_s']:.2f} / {r['event_len_s']:.2f} | {r['from_edge_frames']:.2f} | "
            f"{r['build'].get('video_min_per_s', float('nan')):.2f} |"
        )
    if args.json:
        # no machine paths in the record: the workdir, the output and a local model stay out
        kept = {k: v for k, v in vars(args).items() if k not in ("workdir", "json", "model")}
        out = {"args": kept, "results": results, "environment": environment()}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
