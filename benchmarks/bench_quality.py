"""Retrieval quality in the shapes world, through the searcher the API uses (Table 4 style).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_quality.py [--seeds 0 1 2]
        [--heavy 1 2 3] [--rerank-head [NAME=]RUNDIR ...] [--exit-threshold 0.9] [--index-head DIR]
        [--conditioning none] [--videos 32] [--motion-pairs 7] [--order-pairs 5] [--count-pairs 3]
        [--count3-pairs 3] [--time-singles 8] [--frames 32] [--shortlist 10] [--no-cold] [--workdir DIR]
        [--model DIR] [--oneshot-moments N] [--json F]

Per seed it renders (once per machine, cached under --workdir) a corpus of ``--videos`` long world
videos (2-5 min, random size, aspect ratio, fps 4-8, H.264 / MPEG-4 / VP9 in mp4 / avi / webm /
mkv), each a grey haystack with one 2-3 s event, every event distinct, queried with one of the
world's phrasings; and a *time collection* (benchmarks/quality_time.py: reversal pairs, mirror pairs
anywhere, once / twice and twice / three-times pairs, and single events among them) whose queries
about motion, order and count are searched within their pair and over the whole collection.
It indexes them (K = 128 uniform frames, the default frame bank) with the shipped
tiny-world backbone, loads the engine, and runs every query through ``Engine.search_sync`` in each
mode, in one run:

    stage 1                     ``mode=indexed``: the stage-1 ranking of v_j (uniform single-round)
    frame tier                  ``mode=frames``: the shortlist ranked by its frame banks, no backbone call
    one-shot on all R           ``mode=rerank, heavy=R``: every candidate re-encoded one-shot (two-stage
                                single-round; the query text placed as --conditioning says)
    ... on top H, always        ``mode=rerank, heavy=H``: the frame tier, then one-shot on its top H
    cascade, the default        ``mode=rerank`` with the server's defaults: one-shot on the frame tier's
                                top DEFAULT_HEAVY only when its first two lie within DEFAULT_HEAVY_MARGIN
                                (0 since the close calls stopped earning their cost: the frame tier),
                                order and count queries to the time head
    head on all R / top H / default   the same with the --rerank-head streaming head (two-stage QASLR)
    ..., exit eta               with early exit (a gate in RUNDIR/gate, --exit-threshold)
    uniform QASLR               streaming index built with --index-head, ``mode=indexed``

and reports, mean ± std over the seeds:
- stage-1 recall@R: the right video is in the shortlist (a stage-1 miss stays a miss);
- Hit@1 and Hit@5 of the final ranking;
- moments, as moment-retrieval benchmarks report them: R1@0.5 and R1@0.7 (the share of queries
  whose top-1 is right and whose moment has temporal IoU >= 0.5 / 0.7 with the event; a wrong top-1
  is a miss), mean IoU (likewise), the median moment length over correct top-1 hits beside the
  median event length, and the share whose moment covers the event within ±1 s;
- needle recall of the selection: over queries whose right video was re-encoded and whose event
  has frames in the frame bank, the share of those bank frames that stage 2 selected;
- motion, order, count (the time collection, benchmarks/quality_time.py): within the pair, the
  share of queries whose right video ranks above its partner (chance 0.5); over the collection, the
  share whose first result the query is true of (Hit@1); the median time of those searches; and a
  row of its own for the hand rule over per-frame scores (benchmarks/hand_rule.py);
- v_ij move: mean 1 - cos(v_ij, v_j) of the right video (how far stage 2 moved its embedding);
- clips: for streaming stage 2, the mean share of planned clips encoded (Eq. 19: saved = 1 - this)
  and, with early exit, the share of queries whose top-1 equals the full-stream top-1 (Prop. 3);
- the median latency per query, the median stage-2 ranking cost per query (the frame tier,
  selection, decode, encode) and the median cost of the moments (the rule and its refinement at the
  source's frame rate), and a second table of the median time per stage. That latency (``p50 ms``) is
  one pass over the queries on an engine of the mode's own, not warmed up, each query's video first
  met in that pass (neither cold nor warm: see ``--cold``);
- cold beside warm (``--cold``, on by default; ``--no-cold`` skips it), for stage 1 and the default
  cascade, after the one pass on the same engine, warmed up as ``qaslr serve`` is: each query **cold**
  (frame cache emptied; its video met in the one pass, so the OS holds its files: untouched videos in a
  fresh process are bench_cold_warm's) and **warm** (the same query again at once); ``cold_p50_ms``,
  ``warm_p50_ms`` and each query's ms (``cold_warm_ms``) in the JSON.
Chance Hit@1 is 1/videos. Nothing here is asserted: a bad number is a result.
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import quality_args  # noqa: E402
from benchmarks.coldness import cold_warm  # noqa: E402
from benchmarks.provenance import environment, recorded_args, world_workdir_and_model  # noqa: E402
from benchmarks.quality_time import RULE, TIME_METRICS, time_corpus, time_rows  # noqa: E402
from core.config import DEFAULT_HEAVY, DEFAULT_HEAVY_MARGIN  # noqa: E402

METRICS = (
    ("recall@R", "stage-1 R@R %", True),
    ("hit@1", "Hit@1 %", True),
    ("hit@5", "Hit@5 %", True),
    ("r1@0.5", "R1@0.5 %", True),
    ("r1@0.7", "R1@0.7 %", True),
    ("miou", "mIoU", False),
    ("moment_len_s", "moment len s", False),
    ("event_len_s", "event len s", False),
    ("moment", "moment ±1 s %", True),
    ("bank_holds", "bank holds event %", True),
    ("needle_recall", "needle recall %", True),
    *TIME_METRICS,
    ("move", "v_ij move", False),
    ("clips", "clips used %", True),
    ("agreement", "top-1 = full %", True),
    ("latency_ms", "p50 ms", False),
    ("stage2_ms", "stage-2 ranking p50 ms", False),
    ("moments_ms", "moments p50 ms", False),
    ("match_above", "matches >= min_score %", True),
    ("absent_below", "absent < min_score %", True),
    ("out_below", "out-of-world < min_score %", True),
)

# the searcher's timed stages, in the order a query passes them ("head" is the part of "encode"
# spent in the streaming head)
STAGES = (
    "queue", "query_embed", "filter", "faiss", "frame", "selection", "decode", "encode", "head", "moment", "refine",
)  # fmt: skip
# stage 2's cost per query: ranking (the tiers) and moments (the moment rule and its refinement)
STAGE2 = ("frame", "selection", "decode", "encode", "head")
MOMENTS = ("moment", "refine")


BUILDS = "_builds"  # per seed: what each index's build cost and takes (not a mode)


@dataclass(frozen=True)
class Mode:
    name: str
    index: str  # "oneshot" | "qaslr"
    search: str  # "indexed" | "rerank"
    settings: tuple = ()  # extra EngineConfig fields as (name, value) pairs
    request: tuple = ()  # extra request fields as (name, value) pairs (e.g. the cascade's heavy)
    exit_threshold: float | None = None
    full_twin: str | None = None  # mode whose top-1 this one is compared with (early exit)
    bank: int | None = None  # the index's frame-bank cap (None: BuildOptions' default)
    cold: bool = False  # --cold: also measure it cold beside warm (stage 1 and the default)


def covers(moment, start: float, end: float, slack: float = 1.0) -> bool:
    return moment is not None and moment[0] <= start + slack and moment[1] >= end - slack


def iou(moment, start: float, end: float) -> float:
    """Temporal IoU of a moment with the event's true span (0 for no moment)."""
    if moment is None:
        return 0.0
    inter = max(0.0, min(moment[1], end) - max(moment[0], start))
    union = max(moment[1], end) - min(moment[0], start)
    return inter / union if union > 0 else 0.0


def needle_recall(hit, video, bank) -> float | None:
    """Share of the event's frame-bank frames that stage 2 selected (None: none in the bank)."""
    (_, start, end), *_ = video.events
    in_event = {int(i) for i, t in zip(bank.frame_indices, bank.timestamps, strict=True) if start <= t <= end}
    if not in_event or not hit.evidence:
        return None
    chosen = {e.frame_index for e in hit.evidence}
    return len(in_event & chosen) / len(in_event)


def bank_holds(video, bank) -> float:
    """1 when the frame bank holds at least one frame inside the event's span, else 0 (stage 2
    selects only from the bank, so an event the bank missed cannot be found by it)."""
    (_, start, end), *_ = video.events
    return float(bool(np.any((bank.timestamps >= start) & (bank.timestamps <= end))))


def build(
    manifest: Path, index: Path, model: Path, head: Path | None, bank: int | None = None, **options
) -> dict:
    """Build (or resume) ``index`` and return what the build cost and what the index takes: video
    minutes indexed per second of wall time (recorded beside the index when it was built, so a
    cached index still reports its own build), bank frames per video, and bytes per hour of video."""
    from indexer import BuildOptions, build_index, index_stats
    from indexer.store import IndexMismatchError

    embedder = None if head else "oneshot"
    extra = {"bank_frames": bank, **options} if bank else options  # options: more BuildOptions fields
    options = BuildOptions(model=str(model), head_dir=str(head) if head else None, embedder=embedder, **extra)
    try:
        report = build_index(manifest, index, options)
    except IndexMismatchError as exc:  # a cached index from other settings: never compare those
        print(f"rebuilding {index.name}: {exc}")
        shutil.rmtree(index)
        report = build_index(manifest, index, options)
    print(report.summary())
    record = index.parent / f"{index.name}.build.json"
    if report.stats.indexed:  # this run built it: its cost is this run's
        st = report.stats
        cost = {
            "video_min": st.video_s / 60, "wall_s": st.wall_s,
            "video_min_per_s": st.video_s / 60 / st.wall_s if st.wall_s else float("nan"),
        }  # fmt: skip
        record.write_text(json.dumps(cost) + "\n")
    cost = json.loads(record.read_text()) if record.exists() else {}
    stats = index_stats(index)
    videos = max(1, stats["indexed"])
    return {
        **cost,
        "bank_frames_per_video": stats["bank_frames"] / videos,
        "bank_bytes_per_hour": stats["frame_bank"]["bytes_per_hour"],
        "store_bytes_per_hour": stats["frame_store"]["bytes_per_hour"],
    }


def request_for(query: str, mode: Mode, args) -> dict:
    """The search request of ``mode`` for ``query`` (what every pass over the queries sends)."""
    return {
        "query": query, "mode": mode.search, "top_k": args.shortlist, "shortlist": args.shortlist,
        "frames": args.frames, "exit_threshold": mode.exit_threshold, **dict(mode.request),
    }  # fmt: skip


def run_queries(engine, queries, truth, mode: Mode, args) -> tuple[dict, dict]:
    """Metrics of one mode over single-event queries, and each query's (top-1 id, v_ij of the right video)."""
    rows: dict[str, list[float]] = {k: [] for k, _, _ in METRICS}
    lens, seen, stages = [], {}, {}
    for query, right in queries:
        t = time.perf_counter()
        result = engine.search_sync(request_for(query, mode, args))
        rows["latency_ms"].append((time.perf_counter() - t) * 1e3)
        rows["stage2_ms"].append(sum(result.timings_ms.get(k, 0.0) for k in STAGE2))
        rows["moments_ms"].append(sum(result.timings_ms.get(k, 0.0) for k in MOMENTS))
        for stage, ms in result.timings_ms.items():
            stages.setdefault(stage, []).append(ms)
        ids = [h.video_id for h in result.hits]
        rows["recall@R"].append(float(right in ids))
        rows["hit@1"].append(float(ids[:1] == [right]))
        rows["hit@5"].append(float(right in ids[:5]))
        video = truth[right]
        (_, start, end), *_ = video.events
        overlap = 0.0
        if ids[:1] == [right]:
            top = result.hits[0]
            rows["moment"].append(float(covers(top.moment, start, end)))
            overlap = iou(top.moment, start, end)
            rows["event_len_s"].append(end - start)
            if top.moment is not None:
                lens.append(top.moment[1] - top.moment[0])
        rows["miou"].append(overlap)  # a wrong top-1 counts as a miss (IoU 0)
        rows["r1@0.5"].append(float(overlap >= 0.5))
        rows["r1@0.7"].append(float(overlap >= 0.7))
        rows["bank_holds"].append(bank_holds(video, engine.index.frame_bank(right)))
        right_hit = next((h for h in result.hits if h.video_id == right), None)
        embedding = None
        if right_hit is not None and right_hit.embedding is not None:  # re-encoded by a heavy tier
            r = needle_recall(right_hit, video, engine.index.frame_bank(right))
            if r is not None:
                rows["needle_recall"].append(r)
            embedding = right_hit.embedding
            v_j = engine.index.embedding(right)
            rows["move"].append(1.0 - float(np.dot(embedding, v_j)))
        for h in result.hits:
            if h.reranked and h.clips_planned:
                rows["clips"].append(h.clips_used / h.clips_planned)
        seen[query] = (ids[:1], embedding)
    out = {k: (float(np.mean(v)) if v else float("nan")) for k, v in rows.items()}
    out["latency_ms"] = float(np.median(rows["latency_ms"]))
    out["stage2_ms"] = float(np.median(rows["stage2_ms"]))
    out["moments_ms"] = float(np.median(rows["moments_ms"]))
    out["event_len_s"] = float(np.median(rows["event_len_s"])) if rows["event_len_s"] else float("nan")
    out["moment_len_s"] = float(np.median(lens)) if lens else float("nan")
    out["queries"] = len(queries)
    out["stages_ms"] = {k: float(np.median(v)) for k, v in stages.items() if k != "total"}
    return out, seen


# queries whose words lie outside the shapes world (nothing in any corpus matches them)
OUT_OF_WORLD = (
    "a dog catches a frisbee on the beach", "a man reads a newspaper", "the eiffel tower at night",
    "a cat sleeps on a sofa", "people dancing at a wedding", "a car drives through the rain",
    "a chef chops onions", "fireworks over the city", "a child rides a bicycle", "snow falls on a forest",
)  # fmt: skip


def no_match(engine, corpus, args) -> dict:
    """Does ``min_score`` = MIN_RELEVANCE separate a match from nothing like it? The share of correct
    top-1 hits at or above it, and of no-match queries whose top-1 falls below it: each single-event
    query searched with its own video filtered out (the event is absent from what is searched), and
    the out-of-world queries."""
    from core.config import MIN_RELEVANCE

    titles = {v.id: v.events[0][0] for v in corpus.videos}
    base = {"mode": "frames", "top_k": 1, "shortlist": args.shortlist, "include_evidence": False}
    hits, absent, out = [], [], []
    for query, right in corpus.queries("single"):
        top = engine.search_sync({**base, "query": query}).hits[0]
        if top.video_id == right:
            hits.append(top.relevance)
        others = [t for vid, t in titles.items() if vid != right]
        absent.append(
            engine.search_sync({**base, "query": query, "filter": {"title": {"in": others}}})
            .hits[0]
            .relevance
        )
    for query in OUT_OF_WORLD:
        out.append(engine.search_sync({**base, "query": query}).hits[0].relevance)
    return {
        "match_above": float(np.mean(np.array(hits) >= MIN_RELEVANCE)) if hits else float("nan"),
        "absent_below": float(np.mean(np.array(absent) < MIN_RELEVANCE)),
        "out_below": float(np.mean(np.array(out) < MIN_RELEVANCE)),
        "relevance": {"match": hits, "absent": absent, "out_of_world": out},
    }


def modes_for(args) -> list[Mode]:
    r = args.shortlist
    modes = [
        Mode("stage 1 (uniform single-round)", "oneshot", "indexed", cold=True),
        Mode("frame tier", "oneshot", "frames"),
    ]
    for c in args.conditioning:
        text = "" if len(args.conditioning) == 1 else f", text {c}"
        cond = (("rerank_text_conditioning", c),)
        modes.append(
            Mode(
                f"one-shot on all R (two-stage single-round{text})",
                "oneshot",
                "rerank",
                cond,
                (("heavy", r),),
            )
        )
        for h in args.heavy:
            if 0 < h < r:
                modes.append(
                    Mode(
                        f"frame tier + one-shot on top {h}, always{text}",
                        "oneshot",
                        "rerank",
                        cond,
                        (("heavy", h),),
                    )
                )
        modes.append(Mode(f"cascade, the default{text}", "oneshot", "rerank", cond, cold=True))
    if args.legacy_bank:  # the bank policy before: at most --legacy-bank frames per video
        cap = args.legacy_bank
        modes.append(Mode(f"frame tier, bank <= {cap} (before)", "oneshot", "frames", bank=cap))
        modes.append(Mode(f"cascade, the default, bank <= {cap} (before)", "oneshot", "rerank", bank=cap))
    if args.time_head:  # the default cascade with the time head: order and count queries go to it
        modes.append(
            Mode(
                "cascade, the default, time head", "oneshot", "rerank", (("time_head", Path(args.time_head)),)
            )
        )
    if args.index_head:
        modes.append(Mode("uniform QASLR", "qaslr", "indexed"))
    for spec in args.rerank_head:
        label, _, run = spec.rpartition("=")
        run = Path(run)
        head = run / "head" if (run / "head").is_dir() else run
        name = "head on all R (two-stage QASLR" + (f", {label}" if label else "") + ")"
        rerank = (("rerank_head", head),)
        modes.append(Mode(name, "oneshot", "rerank", rerank, (("heavy", r),)))
        for h in args.heavy:
            if 0 < h < r:
                label_h = f"frame tier + head on top {h}, always" + (f" ({label})" if label else "")
                modes.append(Mode(label_h, "oneshot", "rerank", rerank, (("heavy", h),)))
        # the default serves the time head beside a head that reads moments (engine.loader)
        served = rerank + ((("time_head", Path(args.time_head)),) if args.time_head else ())
        default = "cascade, the default, head" + (f" ({label})" if label else "")
        modes.append(Mode(default, "oneshot", "rerank", served))
        # an order read by a head that reads words: its events weighed, its moments cut otherwise
        for w in args.order_event_weight:
            weighed = served + (("order_event_weight", w),)
            modes.append(Mode(f"{default}, order event weight {w:g}", "oneshot", "rerank", weighed))
        for value in args.order_windows:
            cut = served + (("order_windows", value),)
            modes.append(Mode(f"{default}, order windows {value}", "oneshot", "rerank", cut))
        # the default before the head read each moment backwards too (only the near-ties, once each)
        modes.append(
            Mode(
                f"{default}, read once (before)",
                "oneshot",
                "rerank",
                served + (("head_reversal_weight", 0.0),),
            )
        )
        # the default before: the router fitted on the splits' queries (--before-head's), the near-ties within 0.05
        if args.before_head:
            before = (("rerank_head", Path(args.before_head)), *served[1:], ("tie_margin", 0.05))
            modes.append(Mode(f"{default}, router and tie margin before", "oneshot", "rerank", before))
        # the head's own score, without the frame bank's (nor, for an order, its events'; nor its backwards reading)
        alone = served + (
            ("head_selection_weight", 0.0),
            ("head_frame_weight", 0.0),
            ("order_event_weight", 0.0),
            ("head_reversal_weight", 0.0),
        )
        modes.append(
            Mode("cascade, the default, head's score alone" + (f" ({label})" if label else ""), "oneshot",
                 "rerank", alone)
        )  # fmt: skip
        gate = run / "gate"
        if (gate / "gate.json").exists():
            for eta in args.exit_threshold:
                gated = (*rerank, ("rerank_gate", gate))
                modes.append(
                    Mode(f"{name}, exit {eta:g}", "oneshot", "rerank", gated, (("heavy", r),), eta, name)
                )
    return modes


def corpora(seed: int, args) -> tuple:
    """(single-event corpus, time collection) of ``seed`` (the collection None when not asked for),
    rendered once and cached under the workdir."""
    from world.corpus import CorpusConfig, make_corpus

    work = Path(args.workdir)
    lengths = {"min_duration_s": args.min_s, "max_duration_s": args.max_s}
    single = make_corpus(
        work / f"corpus-{seed}", CorpusConfig(videos=args.videos, seed=seed, **lengths), progress=True
    )
    return single, time_corpus(seed, args)


def one_seed(seed: int, args, model: Path) -> dict:
    from engine.config import EngineConfig
    from engine.loader import load_engine

    work = Path(args.workdir)
    single, timed = corpora(seed, args)
    results: dict[str, dict] = {}
    tops: dict[str, dict] = {}
    builds: dict[str, dict] = {}
    for mode in modes_for(args):
        head = Path(args.index_head) if mode.index == "qaslr" else None
        for name, corpus in (("single", single), ("time", timed)):
            if corpus is None:
                continue
            bank = f"-bank{mode.bank}" if mode.bank else ""
            index = work / f"index-{mode.index}-{name}-{seed}-{model.name}{bank}"
            built = build(corpus.manifest, index, model, head, mode.bank)
            if name == "single":
                builds[f"{mode.index}{bank}"] = built
            # every row names its stage-2 head: a checkpoint's own head is served only as a --rerank-head
            # the serving deadline is not what a benchmark measures: a slow search is timed, not cut off
            settings = {"checkpoint_head": False, "checkpoint_time_head": False, "request_timeout_s": 3600.0,
                        "oneshot_moments": args.oneshot_moments, "model_processes": args.model_processes,
                        **dict(mode.settings)}  # fmt: skip
            engine = load_engine(EngineConfig(index=index, model=str(model), head=head,
                                              default_frames=args.frames, **settings))  # fmt: skip
            try:
                row = results.setdefault(mode.name, {})
                if name == "single":
                    metrics, seen = run_queries(engine, single.queries("single"), single.by_id(), mode, args)
                    if args.cold and mode.cold:
                        requests = [(request_for(q, mode, args), r) for q, r in single.queries("single")]
                        metrics.update(cold_warm(engine, requests))
                    if mode.search == "frames":  # relevance does not depend on the mode: measured once
                        metrics.update(no_match(engine, single, args))
                    row.update(metrics)
                    tops[mode.name] = seen
                else:
                    request = {"mode": mode.search, "frames": args.frames, "exit_threshold": mode.exit_threshold,
                               **dict(mode.request)}  # fmt: skip
                    row.update(time_rows(engine, corpus, request, args))
                    if mode.search == "frames":  # the hand rule reorders the frame tier's ranking
                        results[RULE] = time_rows(engine, corpus, request, args, rule=True)
            finally:
                engine.close()
    for mode in modes_for(args):  # early exit: agreement of the top-1 with the full stream's (Prop. 3)
        if mode.full_twin and mode.full_twin in tops:
            full, early = tops[mode.full_twin], tops[mode.name]
            results[mode.name]["agreement"] = float(np.mean([early[q][0] == full[q][0] for q in full]))
    results[BUILDS] = builds
    return results


def fmt(values: list[float], pct: bool) -> str:
    vals = [v for v in values if not np.isnan(v)]
    if not vals:
        return "–"
    scale = 100 if pct else 1
    mean = statistics.fmean(vals) * scale
    std = statistics.pstdev(vals) * scale if len(vals) > 1 else 0.0
    if pct or mean < 10:
        return f"{mean:.1f} ± {std:.1f}" if mean >= 1 or pct else f"{mean:.3f} ± {std:.3f}"
    return f"{mean:.0f} ± {std:.0f}"


def main(argv=None) -> int:
    args = quality_args.parser(__doc__).parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    model = world_workdir_and_model(args, "qaslr-bench-quality")
    from engine.loader import checkpoint_head_dir

    if args.time_head is None and not args.model:  # the time head the tiny-world checkpoint ships
        from core.config import CHECKPOINT_TIME_HEAD_DIR
        from training.backbone import ASSET_DIR

        shipped_time = ASSET_DIR / CHECKPOINT_TIME_HEAD_DIR
        args.time_head = str(shipped_time) if shipped_time.is_dir() else None
    elif args.time_head == "none":
        args.time_head = None
    shipped = checkpoint_head_dir(str(model))
    # the head the demo serves, as its own rows (once, where --rerank-head names it shipped= too)
    named = any(spec.startswith("shipped=") for spec in args.rerank_head)
    if shipped is not None and not args.no_checkpoint_head and not named:
        args.rerank_head.insert(0, f"shipped={shipped}")

    started = time.perf_counter()
    # every corpus is rendered before any engine loads: libvpx once failed to open its encoder
    # (EINVAL) in a process that had already built and searched indexes
    for seed in args.seeds:
        corpora(seed, args)
    per_seed = {seed: one_seed(seed, args, model) for seed in args.seeds}
    minutes = (time.perf_counter() - started) / 60
    modes = [m.name for m in modes_for(args)] + (
        [RULE] if any(RULE in per_seed[s] for s in args.seeds) else []
    )
    print(
        f"\nshapes world, {args.videos} videos of {args.min_s:.0f}-{args.max_s:.0f} s, one 2-3 s event each "
        f"(chance Hit@1 {100 / args.videos:.1f} %), R={args.shortlist}, K'={args.frames}, seeds {args.seeds}; "
        f"{minutes:.1f} min"
    )
    shown = [(k, label, pct) for k, label, pct in METRICS if any(
        not np.isnan(per_seed[s][m].get(k, float("nan"))) for s in args.seeds for m in modes)]  # fmt: skip
    print("| mode | " + " | ".join(label for _, label, _ in shown) + " |")
    print("|---|" + "---|" * len(shown))
    for mode in modes:
        rows = [per_seed[s][mode] for s in args.seeds]
        cells = [fmt([r.get(k, float("nan")) for r in rows], pct) for k, _, pct in shown]
        print(f"| {mode} | " + " | ".join(cells) + " |")
    timed_modes = [m for m in modes if any("cold_p50_ms" in per_seed[s].get(m, {}) for s in args.seeds)]
    if timed_modes:
        print(
            "\ncold beside warm (--cold), p50 ms, mean ± std over seeds: cold = the engine warmed up, its frame "
            "cache emptied, its video first in this pass (the one pass met it before); warm = the same query again; "
            "one pass = the table above (each video first met in that pass, the engine not warmed up)"
        )
        print(
            "| mode | cold p50 ms | warm p50 ms | cold / warm | one pass p50 ms | video first in the cold pass % |"
        )
        print("|---|---|---|---|---|---|")
        for mode in timed_modes:
            rows = [per_seed[s][mode] for s in args.seeds]
            cells = [fmt([r.get(k, float("nan")) for r in rows], pct) for k, pct in (
                ("cold_p50_ms", False), ("warm_p50_ms", False), ("cold_over_warm", False),
                ("latency_ms", False), ("cold_untouched", True))]  # fmt: skip
            print(f"| {mode} | " + " | ".join(cells) + " |")
    print(
        "\nwhere the time goes: median ms per query and stage (the searcher's own timings), mean over seeds"
    )
    stage_names = [
        k for k in STAGES if any(k in per_seed[s][m].get("stages_ms", {}) for s in args.seeds for m in modes)
    ]
    print("| mode | " + " | ".join(stage_names) + " |")
    print("|---|" + "---|" * len(stage_names))
    for mode in modes:
        cells = [statistics.fmean(per_seed[s][mode].get("stages_ms", {}).get(k, 0.0) for s in args.seeds)
                 for k in stage_names]  # fmt: skip
        print(f"| {mode} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")
    print("\nindexing (single-event corpus): video minutes per second of build, and what the index takes")
    print("| index | video min / s | bank frames / video | bank MB / h of video | store MB / h of video |")
    print("|---|---|---|---|---|")
    for name in sorted({k for s in args.seeds for k in per_seed[s][BUILDS]}):
        got = [per_seed[s][BUILDS][name] for s in args.seeds if name in per_seed[s][BUILDS]]

        def col(key: str, scale: float = 1.0) -> str:
            return fmt([g.get(key, float("nan")) * scale for g in got], False)  # noqa: B023

        print(
            f"| {name} | {col('video_min_per_s')} | {col('bank_frames_per_video')} | "
            f"{col('bank_bytes_per_hour', 1e-6)} | {col('store_bytes_per_hour', 1e-6)} |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": recorded_args(args),
                    "defaults": {"heavy": DEFAULT_HEAVY, "heavy_margin": DEFAULT_HEAVY_MARGIN},
                    "minutes": minutes,
                    "per_seed": per_seed,
                    "environment": environment(),
                },
                indent=2,
                default=str,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
