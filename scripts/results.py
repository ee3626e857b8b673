"""Write docs/results.md, and the README's short results table, from the benchmarks' JSON files.

    .venv/bin/python scripts/results.py            # regenerate both
    .venv/bin/python scripts/results.py --check    # exit 1 if either is out of date

Nothing here is typed by hand: every number comes from a JSON file under docs/bench/, written by the
benchmark command that the page names beside each table:

    docs/bench/quality.json         benchmarks/bench_quality.py --json ...   (shapes world, 3 seeds)
    docs/bench/quality_long.json    benchmarks/bench_quality.py --min-s 720 --max-s 1200 ... (long videos)
    docs/bench/time_tier.json       benchmarks/bench_quality.py --motion-pairs 6 --order-pairs 5 ... (queries about time)
    docs/bench/time_head_recipe.json benchmarks/bench_time_head.py --json ... (its Table 6, its early exit)
    docs/bench/moment_head.json     benchmarks/bench_moment_head.py --json ... (the rerank head's Tables 5, 6)
    docs/bench/rerank_head.json     benchmarks/bench_quality.py --rerank-head ... (the rerank head served)
    docs/bench/rerank_head_LO_HI.json the same with --min-s LO --max-s HI (shorter videos, held out)
    docs/bench/order_route.json     benchmarks/bench_quality.py --rerank-head NAME=DIR ... (the order route, dev seeds)
    docs/bench/backbone_motion*.json benchmarks/bench_backbone.py OTHER --json ... (a motion recipe's weights)
    docs/bench/faiss_types_1m.json  benchmarks/bench_faiss_types.py --json ... (stage 1 at 1M vectors)
    docs/bench/bank_storage.json    benchmarks/bench_bank_storage.py --json ... (storage per hour, int8 error)
    docs/bench/load.json            benchmarks/bench_load.py --json ...      (concurrent users)
    docs/bench/backbone_threads.json benchmarks/bench_backbone_threads.py --json ... (batch size, threads)
    docs/bench/first_query.json     benchmarks/bench_first_query.py --json ... (a fresh server's first query)
    docs/bench/hybrid.json          benchmarks/bench_hybrid.py --json ...    (what is seen, said or both)
    docs/bench/cold_warm*.json      benchmarks/bench_cold_warm.py --seed S --json ... (the first look, per seed)
    docs/bench/first_look_gpu.json  benchmarks/bench_cold_warm.py on a lent GPU, and where its first calls went
    docs/bench/quality_cold_warm.json benchmarks/bench_quality.py --seeds 0 --videos 12 ... (cold beside warm)
    docs/bench/load_cold_warm.json  benchmarks/bench_load.py --caches both ... (cold beside warm, under load)

A missing file leaves its section out. Re-run a benchmark with ``--json docs/bench/NAME.json``, then
this script, and commit both.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from results_cold import (
    cold_warm_section,
    first_look_gpu_section,
    load_cold_warm_section,
    quality_cold_warm_section,
)
from results_format import cell_text, environment_line, mean_std, mode_names
from results_time import (
    SERVED_TITLE,
    SHORTER_ROWS,
    backbone_section,
    moment_head_section,
    order_route_intro,
    served_intro,
    served_rows,
    shorter_intro,
    shorter_readme_lead,
    shorter_title,
    time_intro,
    time_recipe_section,
    time_table_lead,
)

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "docs" / "bench"
RESULTS = ROOT / "docs" / "results.md"
README = ROOT / "README.md"


@functools.cache
def quality_defaults() -> dict:
    """bench_quality's defaults (benchmarks/quality_args.py), so a run's command names what differed."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.quality_args import defaults

    return defaults()


START, END = "<!-- results:start (scripts/results.py) -->", "<!-- results:end -->"

# bench_quality columns shown in docs/results.md: (key, label, percent)
QUALITY_COLUMNS = (
    ("hit@1", "Hit@1 %", True),
    ("hit@5", "Hit@5 %", True),
    ("r1@0.5", "R1@0.5 %", True),
    ("r1@0.7", "R1@0.7 %", True),
    ("miou", "mIoU", False),
    ("moment_len_s", "moment s", False),
    ("order", "order %", True),
    ("count", "count %", True),
    ("bank_holds", "bank holds event %", True),
    ("needle_recall", "needle recall %", True),
    ("stage2_ms", "stage-2 ms", False),
    ("moments_ms", "moments ms", False),
    ("latency_ms", "p50 ms", False),
)
# the long-video rows the README shows (docs/results.md has them all)
LONG_README_MODES = (
    "stage 1 (uniform single-round)", "frame tier", "cascade, the default", "cascade, the default, bank <= 256 (before)",
)  # fmt: skip
# the time collection's columns (benchmarks/quality_time.py): within the pair, over the collection (the
# README shows them all)
TIME_COLUMNS = (
    ("motion_pair", "motion pair %", True),
    ("order_pair", "order pair %", True),
    ("count_pair", "count pair %", True),
    ("motion_all", "motion Hit@1 %", True),
    ("order_all", "order Hit@1 %", True),
    ("count_all", "count Hit@1 %", True),
    ("time_ms", "time p50 ms", False),
    ("hit@1", "single Hit@1 %", True),
    ("r1@0.7", "single R1@0.7 %", True),
    ("latency_ms", "single p50 ms", False),
)
README_COLUMNS = (
    ("hit@1", "Hit@1 %", True),
    ("r1@0.7", "moment R1@0.7 %", True),
    ("latency_ms", "p50 ms", False),
)


def _load(name: str) -> dict | None:
    path = BENCH / name
    return json.loads(path.read_text()) if path.exists() else None


def _shorter() -> list[dict]:
    """The served rerank head's runs on shorter videos (rerank_head_LO_HI.json), the longest first."""
    runs = [_load(path.name) for path in BENCH.glob("rerank_head_*.json")]
    return sorted(runs, key=lambda d: -float(d.get("args", {}).get("min_s", 0)))


def _builds_table(data: dict) -> list[str]:
    """bench_quality's per-seed "_builds": what each index's build cost and what it takes."""
    per_seed = data["per_seed"]
    seeds = list(per_seed)
    names = sorted({n for s in seeds for n in per_seed[s].get("_builds", {})})
    if not names:
        return []
    out = [
        "Indexing the single-event corpus (*oneshot* is the index every mode above searches; *-bankC* the same "
        "corpus with at most C bank frames per video, the policy before):",
        "",
        "| index | video min / s of build | bank frames / video | bank MB / h of video | frame store MB / h of video |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        got = [per_seed[s]["_builds"][name] for s in seeds if name in per_seed[s].get("_builds", {})]

        def col(key: str, scale: float = 1.0) -> str:
            return mean_std([g.get(key, float("nan")) * scale for g in got], False)  # noqa: B023

        out.append(
            f"| {name} | {col('video_min_per_s')} | {col('bank_frames_per_video')} | "
            f"{col('bank_bytes_per_hour', 1e-6)} | {col('store_bytes_per_hour', 1e-6)} |"
        )
    return [*out, ""]


def _quality_table(data: dict, columns, only: tuple[str, ...] | None = None) -> list[str]:
    """One row per mode (``only``: just these modes)."""
    per_seed = data["per_seed"]
    seeds = list(per_seed)
    lines = [
        "| mode | " + " | ".join(label for _, label, _ in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for mode in mode_names(per_seed):
        if only is not None and mode not in only:
            continue
        cells = [
            mean_std([per_seed[s][mode].get(key, float("nan")) for s in seeds], pct)
            for key, _, pct in columns
        ]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return lines


def _command(data: dict, script: str) -> str:
    args = data.get("args", {})
    parts = [f"OMP_NUM_THREADS=1 .venv/bin/python {script}"]
    if "seeds" in args:
        parts.append("--seeds " + " ".join(str(s) for s in args["seeds"]))
    defaults = quality_defaults()
    for key in ("videos", "time_singles", "motion_pairs", "order_pairs", "count_pairs", "count3_pairs", "min_s",
                "max_s", "legacy_bank", "oneshot_moments", "model_processes", "model"):  # fmt: skip
        if key in args and args[key] != defaults[key]:
            flag = "--" + key.replace("_", "-")
            parts.append(f"{flag} {args[key]:g}" if isinstance(args[key], float) else f"{flag} {args[key]}")
    if args.get("heavy") not in (None, defaults["heavy"]):
        parts.append("--heavy " + " ".join(str(h) for h in args["heavy"]))
    if args.get("cold") is False:
        parts.append("--no-cold")
    if args.get("no_checkpoint_head"):
        parts.append("--no-checkpoint-head")
    if args.get("before_head"):
        parts.append("--before-head BEFORE")
    return " ".join(parts)


def _defaults_note(data: dict) -> list[str]:
    """What "the default" cascade was when the run was made (bench_quality records it since the
    default heavy_margin became 0; runs before it used 0.05)."""
    defaults = data.get("defaults")
    if defaults is None:
        return [
            "*cascade, the default* here is the default of this run's commit: one-shot on the frame tier's top 3 "
            "when its first two scores lay within 0.05 (`heavy_margin`). The default is now 0 (single-event queries "
            "stop at the frame tier; `core/config.py` says why), measured in the order-and-count section below.",
            "",
        ]
    return [
        f"*cascade, the default*: `heavy` {defaults.get('heavy')}, `heavy_margin` {defaults.get('heavy_margin')} "
        "(0: single-event queries stop at the frame tier), order and count queries to the time head where a row says so.",
        "",
    ]


def quality_section(
    data: dict, title: str = "Retrieval quality in the shapes world", columns=QUALITY_COLUMNS, intro=()
) -> list[str]:
    args = data.get("args", {})
    seeds = list(data["per_seed"])
    out = [
        f"## {title}",
        "",
        f"`{_command(data, 'benchmarks/bench_quality.py')}` — {args.get('videos', 32)} videos of "
        f"{float(args.get('min_s', 120)):.0f}-{float(args.get('max_s', 300)):.0f} s per seed, one 2-3 s event each "
        f"(every event distinct; chance Hit@1 {100 / int(args.get('videos', 32)):.1f} %), R = {args.get('shortlist', 10)}, "
        f"K' = {args.get('frames', 32)}, seeds {', '.join(seeds)}; mean ± std over the seeds; "
        f"{float(data.get('minutes', 0)):.0f} min on 2 cores.",
        "",
        "Moments: R1@0.5 / R1@0.7 are the share of queries whose top-1 is right and whose moment has temporal "
        "IoU >= 0.5 / 0.7 with the event (a wrong top-1 is a miss); mIoU likewise; *moment s* is the median "
        "length over correct top-1 hits (the events last 2-3 s). *stage-2 ms* is the median cost per query of "
        "ranking after stage 1 (the tiers), *moments ms* that of the moments and their refinement at the "
        "source's frame rate; *p50 ms* is the whole query.",
        "",
        *_defaults_note(data),
        *intro,
        *_quality_table(data, columns),
        "",
        *_builds_table(data),
    ]
    per_seed = data["per_seed"]
    frame_rows = [  # the mode that measured it (the others carry NaN)
        m for s in seeds for m, row in per_seed[s].items() if isinstance(row.get("absent_below"), float)
        and row["absent_below"] == row["absent_below"]
    ]  # fmt: skip
    if frame_rows:
        mode = frame_rows[0]
        rows = [per_seed[s][mode] for s in seeds]
        out += [
            "### Does `min_score` separate a match from nothing like it?",
            "",
            "With `min_score` at the documented MIN_RELEVANCE: the share of correct top-1 hits kept, of queries "
            "whose event is absent from what is searched (each single-event query with its own video filtered "
            'out) and of out-of-world queries ("a dog catches a frisbee on the beach", ...) whose top-1 falls '
            "below it.",
            "",
            "| correct top-1 kept | absent event cut | out-of-world cut |",
            "|---|---|---|",
            "| "
            + " | ".join(
                mean_std([r.get(k, float("nan")) for r in rows], True)
                for k in ("match_above", "absent_below", "out_below")
            )
            + " |",
            "",
        ]
    env = environment_line(data)
    if env:
        out += [f"Environment: {env}.", ""]
    return out


HYBRID_KINDS = {
    "said": "said only (the answer is in the subtitles)",
    "seen": "seen only (the answer is in the pixels)",
    "both": "two clues, one said and one seen",
    "quoted": "two clues, the said one quoted",
}


def hybrid_section(data: dict) -> list[str]:
    """benchmarks/bench_hybrid.py: search by what is seen, said or both."""
    args = data.get("args", {})
    per_seed = data["per_seed"]
    seeds = list(per_seed)
    first = per_seed[seeds[0]]
    out = [
        "## What is seen, what is said, or both",
        "",
        f"`{_command(data, 'benchmarks/bench_hybrid.py')}` — per seed {first.get('videos', '?')} world videos of "
        f"{float(args.get('min_s', 30)):.0f}-{float(args.get('max_s', 45)):.0f} s ({args.get('videos', '?')} single-event, "
        f"{args.get('order_pairs', '?')} mirror pairs) with generated subtitle tracks (even videos: sidecar .srt "
        "with a BOM and CRLF or .vtt with cue settings; odd videos: a SubRip stream embedded in Matroska), "
        f"K = K' = {args.get('frames', 32)}, R = {args.get('shortlist', 10)}, seeds {', '.join(seeds)}; mean ± std "
        f"over the seeds; {float(data.get('minutes', 0)):.0f} min on 2 cores. The fusion rule and its weight were "
        "chosen on seeds 10 and 11. *Moment IoU* is the temporal IoU of the top-1's moment with the cue that "
        "holds the answer (a wrong top-1 counts 0); *p50 ms* is the whole query, *spoken ms* the FTS5 ranking "
        "and its fusion.",
        "",
        "| queries | sources | Hit@1 % | Hit@5 % | moment IoU with the cue | p50 ms | spoken ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, label in HYBRID_KINDS.items():
        if kind not in first:
            continue
        for mode in first[kind]:
            rows = [per_seed[s][kind][mode] for s in seeds]
            iou = mean_std([r.get("iou", float("nan")) for r in rows], False) if kind == "said" else "–"
            out.append(
                f"| {label} ({rows[0].get('queries', '?')}) | {mode} | {mean_std([r['hit@1'] for r in rows], True)} | "
                f"{mean_std([r['hit@5'] for r in rows], True)} | {iou} | "
                f"{mean_std([r['ms'] for r in rows], False)} | {mean_std([r['spoken_ms'] for r in rows], False)} |"
            )
    out.append("")
    for mode, checks in (data.get("criteria") or {}).items():
        out.append(
            f"Issue 25's criteria, {mode}: "
            + "; ".join(f"{k}: {'yes' if v else '**no**'}" for k, v in checks.items())
            + "."
        )
        out.append("")
    env = environment_line(data)
    if env:
        out += [f"Environment: {env}.", ""]
    return out


def faiss_section(data: dict) -> list[str]:
    meta = data.get("meta", {})
    out = [
        "## Stage 1 at a million videos",
        "",
        f"`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_faiss_types.py` — {meta.get('queries', '?')} single "
        f"queries, recall@{meta.get('R', 10)} against exact search, {meta.get('data', '')}; "
        f"{meta.get('nproc', '?')} cores (load average {meta.get('load_before', ['?'])[0]} before the run).",
        "",
        "| d | index | search | p50 ms | p95 ms | CPU p50 ms | recall@10 | automatic |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in data.get("rows", []):
        out.append(
            f"| {row['dim']} | {row['index']} | {row.get('search') or '–'} | {row['p50_ms']:.2f} | "
            f"{row['p95_ms']:.2f} | {row.get('cpu_p50_ms', float('nan')):.2f} | {100 * row['recall']:.1f} % | "
            f"{'yes' if row.get('automatic') else ''} |"
        )
    return [*out, ""]


def generic_section(title: str, script: str, data: dict) -> list[str]:
    rows = data.get("rows") or []
    out = [f"## {title}", "", f"`.venv/bin/python {script}`", ""]
    if rows:
        keys = [k for k in rows[0] if not isinstance(rows[0][k], dict | list)]
        out += ["| " + " | ".join(keys) + " |", "|---|" + "---|" * (len(keys) - 1)]
        for row in rows:
            out.append("| " + " | ".join(cell_text(row.get(k)) for k in keys) + " |")
    notes = [f"- {note}" for note in data.get("notes") or []]
    env = environment_line(data)
    return [*out, "", *([*notes, ""] if notes else []), *([f"Environment: {env}.", ""] if env else [])]


def storage_section(data: dict) -> list[str]:
    """What the frame bank and the frame store take per hour of video, and what compact banks would
    cost in score error (benchmarks/bench_bank_storage.py)."""
    hour = data.get("per_hour_bytes", {})

    def mb(key: str) -> str:
        return f"{hour[key] / 1e6:.1f}" if key in hour else "–"

    out = [
        "## Storage per hour of video",
        "",
        "`.venv/bin/python benchmarks/bench_bank_storage.py` — at the default bank policy, one frame a second "
        "(3,600 bank frames an hour). The tiny-world backbone has d = 128 and a 128 px working size; a 2B-sized "
        "Qwen3-VL-Embedding has d = 2048 and a 448 px working size.",
        "",
        "| | d = 128 (tiny world) | d = 2048 (2B-sized) |",
        "|---|---|---|",
        f"| frame bank, float16 (as stored), MB / h | {mb('bank_f16_d128')} | {mb('bank_f16_d2048')} |",
        f"| frame bank, int8 + a scale per frame (not built), MB / h | {mb('bank_int8_d128')} | {mb('bank_int8_d2048')} |",
        f"| frame store, JPEG (128 px / 448 px), MB / h | {mb('frame_store_128px')} | {mb('frame_store_448px')} |",
        "",
    ]
    rows = [(k, v) for k, v in data.items() if isinstance(v, dict) and "max_abs_delta" in v]
    if rows:
        out += [
            f"Compact banks against the float16 bank, {data.get('queries', '?')} queries x {data.get('bank_frames', '?')} "
            f"bank frames of {data.get('videos', '?')} videos (d = {data.get('d', '?')}): the largest change of a "
            "relevance q·f_c, and how often each (query, video)'s best frame and each query's best video stay the same.",
            "",
            "| bank | max abs change of q·f | best frame same | best frame within one | best video same |",
            "|---|---|---|---|---|",
        ]
        for name, v in rows:
            out.append(
                f"| {name} | {v['max_abs_delta']:.4f} | {100 * v['best_frame_agreement']:.1f} % | "
                f"{100 * v['best_frame_within_one']:.1f} % | {100 * v['best_video_agreement']:.1f} % |"
            )
        out.append("")
    return out


def results_page() -> str:
    out = [
        "# Measured results",
        "",
        "Generated by `scripts/results.py` from the benchmarks' JSON under `docs/bench/`; do not edit by hand.",
        "Each table names the command that produced it. Quality is measured in the shapes world",
        "(`docs/shapes-world.md`), where the shipped tiny-world backbone sees: on real video these numbers",
        "need the real weights. Measurements from before this page existed are in the git history of",
        "README.md.",
        "",
    ]
    quality = _load("quality.json")
    if quality:
        out += quality_section(quality)
    long = _load("quality_long.json")
    if long:
        out += quality_section(long, "Long videos: the same measurement at 12-20 min")
    timed = _load("time_tier.json")
    if timed:
        out += quality_section(timed, "Queries about time: motion, order and count beside every tier",
                               TIME_COLUMNS, time_intro(timed))  # fmt: skip
    served = _load("rerank_head.json")
    if served:
        intro = served_intro(served)
        out += quality_section(served, f"{SERVED_TITLE} (held out)", _time_columns(served),
                               intro + time_intro(served))  # fmt: skip
    for short in _shorter():
        out += quality_section(short, shorter_title(short), _time_columns(short),
                               shorter_intro(short) + time_intro(short))  # fmt: skip
    order = _load("order_route.json")
    if order:
        out += quality_section(order, "Order read by the rerank head that reads the query's words (development seeds)",
                               _time_columns(order), order_route_intro(order) + time_intro(order))  # fmt: skip
    recipe = _load("time_head_recipe.json")
    if recipe:
        out += time_recipe_section(recipe)
    moments = _load("moment_head.json")
    if moments:
        out += moment_head_section(moments)
    out += backbone_section([(p.name, _load(p.name)) for p in sorted(BENCH.glob("backbone_motion*.json"))])
    one = "seed 0 chose one moment over two"
    for name, backbone, chose in (
        (
            "motion_moments.json",
            "the distilled motion recipe's weights (`docs/bench/motion_recipe_distill.json`)",
            one,
        ),
        ("motion_moments_shipped.json", "the first phase's weights (shipped before the motion recipe)", one),
        (
            "motion_moments_1800.json",
            "the 1,800-step recipe's weights (`docs/bench/motion_recipe_videos_from_1800.json`, not shipped) and "
            "a time head retrained on them, order and count pairs too",
            one,
        ),
        (
            "motion_moments_sentences.json",
            "the shipped weights (the motion recipe, `docs/bench/motion_recipe_sentences.json`); its order and "
            "count columns were measured with a time head retrained on them before it learned three times "
            "(`docs/bench/time_tier.json` has the shipped head's)",
            f"{one}; then, with these weights, four bank frames a moment over eight: 79.2 % vs 70.8 % of its "
            "24 motion queries within the pair",
        ),
    ):
        data = _load(name)
        if data:
            intro = [f"One-shot reads each candidate's top moment as temporal pairs (`--oneshot-moments "
                     f"{data['args'].get('oneshot_moments')}`), with {backbone}; seeds that chose nothing ({chose}).",
                     ""]  # fmt: skip
            out += quality_section(data, f"One-shot reading moments: {name}", TIME_COLUMNS, intro)
    for name, title, script in (
        ("first_query.json", "A fresh server's first query", "benchmarks/bench_first_query.py"),
        ("load.json", "Many users at once", "benchmarks/bench_load.py"),
        (
            "backbone_threads.json",
            "A backbone call by its batch, and threads side by side",
            "benchmarks/bench_backbone_threads.py",
        ),
    ):
        data = _load(name)
        if data:
            out += generic_section(title, script, data)
    out += cold_warm_section()
    out += first_look_gpu_section(_load("first_look_gpu.json"))
    out += quality_cold_warm_section(_load("quality_cold_warm.json"))
    out += load_cold_warm_section(_load("load_cold_warm.json"))
    hybrid = _load("hybrid.json")
    if hybrid:
        out += hybrid_section(hybrid)
    faiss = _load("faiss_types_1m.json")
    if faiss:
        out += faiss_section(faiss)
    storage = _load("bank_storage.json")
    if storage:
        out += storage_section(storage)
    return "\n".join(out).rstrip() + "\n"


def _time_columns(data: dict) -> tuple:
    """TIME_COLUMNS, and where ``data`` measured them bench_quality's min_score columns (whether
    min_score at the documented threshold keeps each pair's right video and cuts its partner:
    benchmarks/quality_time.py, whose labels they keep)."""
    quality_defaults()  # the repository's benchmarks importable
    from benchmarks.quality_time import TIME_METRICS

    tells = tuple(m for m in TIME_METRICS if m[0].endswith("_tells"))
    measured = any(key in row for seed in data["per_seed"].values() for row in seed.values()
                   if isinstance(row, dict) for key, _, _ in tells)  # fmt: skip
    return TIME_COLUMNS + tells if measured else TIME_COLUMNS


def readme_block() -> str:
    quality = _load("quality.json")
    if not quality:
        return (
            f"{START}\n(no measurement yet: run benchmarks/bench_quality.py, then scripts/results.py)\n{END}"
        )
    # the README's short table: today's modes (docs/results.md also has the old bank's rows)
    lines = _quality_table(
        quality, README_COLUMNS, tuple(m for m in mode_names(quality["per_seed"]) if "(before)" not in m)
    )
    seeds = ", ".join(quality["per_seed"])
    long = _load("quality_long.json")
    more = []
    if long:
        args = long.get("args", {})
        more = [
            "",
            f"The same at {float(args.get('min_s', 720)) / 60:.0f}-{float(args.get('max_s', 1200)) / 60:.0f} min, "
            f"{args.get('videos', 12)} videos a seed (the bank keeps one frame a second at any length):",
            "",
            *_quality_table(long, README_COLUMNS, LONG_README_MODES),
        ]
    if "defaults" not in quality:
        more += [
            "",
            "(*cascade, the default* in the tables above is the default of their runs: one-shot on the frame tier's "
            "top 3 when its first two scores lay within 0.05. Single-event queries now stop at the frame tier; the "
            "table below measures today's default.)",
        ]
    # queries about time: the measurement of what the server serves today (the rerank head beside the
    # time head) where there is one, else the time tier's
    served = _load("rerank_head.json")
    timed = served or _load("time_tier.json")
    if timed:
        more += ["", time_table_lead(timed.get("args", {}), bool(served)), "",
                 *_quality_table(timed, _time_columns(timed), served_rows(timed) if served else None)]  # fmt: skip
    for short in _shorter():
        more += ["", shorter_readme_lead(short), "", *_quality_table(short, _time_columns(short), SHORTER_ROWS)]  # fmt: skip
    return "\n".join(
        [
            START,
            f"Shapes world, 32 videos of 2-5 min with one 2-3 s event each, seeds {seeds} (from "
            "[docs/results.md](docs/results.md), which has every column and the command):",
            "",
            *lines,
            *more,
            END,
        ]
    )


def updated_readme(text: str) -> str:
    if START not in text or END not in text:
        return text
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + readme_block() + tail


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--check", action="store_true", help="exit 1 if docs/results.md or the README is out of date"
    )
    args = p.parse_args(argv)
    page = results_page()
    readme = README.read_text()
    new_readme = updated_readme(readme)
    if args.check:
        stale = [str(p.relative_to(ROOT)) for p, new in ((RESULTS, page), (README, new_readme))
                 if not p.exists() or p.read_text() != new]  # fmt: skip
        if stale:
            print("out of date: " + ", ".join(stale) + " (run scripts/results.py)", file=sys.stderr)
            return 1
        return 0
    RESULTS.write_text(page)
    README.write_text(new_readme)
    print(f"wrote {RESULTS.relative_to(ROOT)} and the README's results block")
    return 0


if __name__ == "__main__":
    sys.exit(main())
