"""docs/results.md's sections on the first look: the default search cold beside warm
(docs/bench/cold_warm*.json), in bench_quality and under load (quality_cold_warm.json,
load_cold_warm.json), and on a GPU (first_look_gpu.json)."""

from __future__ import annotations

import json
from pathlib import Path

from results_format import cell_text, environment_line, mean_std, mode_names

BENCH = Path(__file__).resolve().parents[1] / "docs" / "bench"


def first_look_gpu_section(data: dict | None) -> list[str]:
    if not data:
        return []
    out = [
        "## The first look on a GPU",
        "",
        data["what"],
        "",
        f"`{data['commands']['in_process']}` (fresh engine per query) and `{data['commands']['server']}` "
        "(fresh `qaslr serve` per query); p50 ms.",
        "",
        "| machine | how | cold | warm | stage 1 | stage 1, first call | cold / warm | Hit@1 | R1@0.7 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [("H200 (before)", k, v) for k, v in data["gpu_before"].items()]
    rows += [("2-core CPU", k, v) for k, v in data["cpu_same_corpus"].items()]
    for machine, how, r in rows:
        out.append(
            f"| {machine} | {how.replace('_', ' ')} | {r['cold_p50_ms']:.1f} | {r['warm_p50_ms']:.1f} | "
            f"{r['stage1_p50_ms']:.1f} | {r['stage1_first_p50_ms']:.1f} | {r['cold_over_warm']:.2f} | "
            f"{r['hit1']:.2f} | {r['r1@0.7']:.2f} |"
        )
    out += [
        "",
        f"Where a cold query's time went on the GPU ({data['commands']['diagnosis']}), ms:",
        "",
        "| prompt padding | words | first call | again | again, on a new thread |",
        "|---|---|---|---|---|",
    ]
    for pad, calls in data["gpu_first_call_diagnosis_ms"].items():
        for c in calls:
            out.append(
                f"| {'none' if pad.endswith('_0') else 'to a multiple of ' + pad.rsplit('_', 1)[1]} | {c['words']} | {c['first_call_ms']:.1f} | {c['again_ms']:.1f} | "
                f"{c['new_thread_ms']:.1f} |"
            )
    env = data.get("environment", {})
    out += [
        "",
        "The first row is the process's first text call; the padded rows ran after the others in the same process. "
        "Environment: "
        f"{env.get('gpu')}, torch {env.get('packages', {}).get('torch')}, transformers "
        f"{env.get('packages', {}).get('transformers')}, {env.get('cpu_count')} CPUs.",
        "",
    ]
    return out


def _share(value) -> str:
    """A share for a table cell; "–" where the run could not see it (NaN or missing)."""
    return "–" if value is None or value != value else f"{value:.2f}"


def cold_warm_section() -> list[str]:
    """benchmarks/bench_cold_warm.py, one JSON per seed (cold_warm.json is seed 0)."""
    runs = [json.loads(p.read_text()) for p in sorted(BENCH.glob("cold_warm*.json"))]
    if not runs:
        return []
    out = [
        "## The first look: the default search cold beside warm",
        "",
        "`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_cold_warm.py --seed S --videos 8` — one query a "
        "video of 2-5 min; *cold*: a fresh engine per query (warmed up as the server is, frame cache empty, a "
        "video no earlier query touched), *warm*: the same query again, *stage 1*: the same engine with "
        "`mode=indexed`; p50 ms. *edge frames* is today's index (the refiner reads source frames the build "
        "stored), *none* an index built without them (the decode-and-embed refinement before). `--hd` re-encodes "
        "the sources as 1280x720 H.264 with a 2 s GOP; `--server` makes each cold query a fresh `qaslr serve` "
        "over HTTP. *nothing decoded*: the share of cold answers whose moment came from stored frames.",
        "",
        "| seed | sources, cold | index | cold | warm | stage 1 | cold / warm | warm / stage 1 | R1@0.7 | moment s / event s | nothing decoded |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for data in sorted(
        runs, key=lambda d: (d.get("args", {}).get("hd", False), d.get("args", {}).get("seed", 0))
    ):
        a = data.get("args", {})
        seed = a.get("seed")
        how = (f"{a.get('videos')} × {a.get('min_s', 120):.0f}-{a.get('max_s', 300):.0f} s, "
               + ("1280x720 H.264 GOP 2 s" if a.get("hd") else "world sources")
               + (", fresh `qaslr serve`" if a.get("server") else ", fresh engine"))  # fmt: skip
        for name, r in data.get("results", {}).items():
            out.append(
                f"| {seed} | {how} | {name} | {r['cold_p50_ms']:.1f} | {r['warm_p50_ms']:.1f} | {r['stage1_p50_ms']:.1f} | "
                f"{r['cold_over_warm']:.2f} | {r['default_over_stage1']:.2f} | {r['r1@0.7']:.2f} | "
                f"{r['moment_len_s']:.2f} / {r['event_len_s']:.2f} | {_share(r.get('from_edge_frames'))} |"
            )
    env = environment_line(runs[0])
    return [*out, "", *([f"Environment: {env}.", ""] if env else [])]


def _flags(args: dict, flags) -> str:
    """The command-line flags of ``args`` a run was made with, as (flag, key) pairs say."""
    parts = []
    for flag, key in flags:
        value = args.get(key)
        if isinstance(value, list):
            parts.append(f"{flag} " + " ".join(str(v) for v in value))
        elif value is True:
            parts.append(flag)
        elif value is not None and value is not False:
            parts.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    return " ".join(parts)


def quality_cold_warm_section(data: dict | None) -> list[str]:
    """benchmarks/bench_quality.py --cold: stage 1 and the default cold beside warm."""
    if not data:
        return []
    per_seed = data["per_seed"]
    modes = [
        m for m in mode_names(per_seed) if any("cold_p50_ms" in per_seed[s].get(m, {}) for s in per_seed)
    ]
    if not modes:
        return []
    args = data.get("args", {})
    # a time head recorded as none was asked for as none (the shipped one is recorded by its folder's name)
    flags = _flags({**args, "time_head": args.get("time_head") or "none"}, (
        ("--seeds", "seeds"), ("--videos", "videos"), ("--min-s", "min_s"), ("--max-s", "max_s"), ("--heavy", "heavy"), ("--motion-pairs", "motion_pairs"),
        ("--order-pairs", "order_pairs"), ("--count-pairs", "count_pairs"), ("--count3-pairs", "count3_pairs"),
        ("--time-head", "time_head"), ("--no-checkpoint-head", "no_checkpoint_head"),
    ))  # fmt: skip
    out = [
        "## Cold beside warm: the quality run's stage 1 and default",
        "",
        f"`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_quality.py {flags}` (`--cold` is on by default) — "
        f"one query a video of {args.get('min_s', 120):g}-{args.get('max_s', 300):g} s, on the mode's engine warmed up as `qaslr serve` warms up before ready; "
        "*cold*: its frame cache emptied just before the query, its video first in this pass (the one pass below met "
        "it before, so the OS holds its files; a fresh process on untouched videos is the first look's table); *warm*: the "
        "same query again at once; *one pass*: the quality table's p50 (the engine not warmed up, each video "
        "first met in that pass). p50 ms, mean ± std over seeds.",
        "",
        "| mode | cold p50 ms | warm p50 ms | cold / warm | one pass p50 ms | Hit@1 % | R1@0.7 % | video first in the cold pass % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode in modes:
        rows = [per_seed[s][mode] for s in per_seed]
        cells = [mean_std([r.get(k, float("nan")) for r in rows], pct) for k, pct in (
            ("cold_p50_ms", False), ("warm_p50_ms", False), ("cold_over_warm", False), ("latency_ms", False),
            ("hit@1", True), ("r1@0.7", True), ("cold_untouched", True))]  # fmt: skip
        out.append(f"| {mode} | " + " | ".join(cells) + " |")
    env = environment_line(data)
    return [*out, "", *([f"Environment: {env}.", ""] if env else [])]


def load_cold_warm_section(data: dict | None) -> list[str]:
    """benchmarks/bench_load.py --caches both: each load level cold beside warm."""
    if not data:
        return []
    args = data.get("args", {})
    flags = _flags(args, (
        ("--videos", "videos"), ("--clients", "clients"), ("--cascade-requests", "cascade_requests"),
        *([("--requests", "requests")] if "every" in args.get("workloads", ["every"]) else []),
        ("--stage1-requests", "stage1_requests"), ("--servers", "servers"), ("--workloads", "workloads"),
        ("--caches", "caches"),
    ))  # fmt: skip
    out = [
        "## Cold beside warm under load",
        "",
        f"`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_load.py {flags}` — *cold*: a fresh `qaslr serve` "
        "per level (ready after its own warm-up, its frame cache empty), the requests in turns over the corpus's "
        "videos; *warm*: one server for every level, each query sent once before the levels. *cold share*: the "
        "share of the cold level's requests none of whose videos (the right one, those its answer refined or "
        "re-encoded) a request sent before it, or the server's warm-up, had touched.",
        "",
        "| server, workload | clients | req/s cold | req/s warm | p50 ms cold | p50 ms warm | p95 ms cold | p95 ms warm | cold share | 5xx |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, res in data.get("results", {}).items():
        warm = {lv["clients"]: lv for lv in res.get("levels", [])}
        cold = {lv["clients"]: lv for lv in res.get("cold_levels", [])}
        for clients in sorted({*warm, *cold}):
            c, w = cold.get(clients, {}), warm.get(clients, {})
            five = sum(v for lv in (c, w) for k, v in lv.get("statuses", {}).items() if k.startswith("5"))
            cells = [cell_text(lv.get(key)) for key in ("req_per_s", "p50_ms", "p95_ms") for lv in (c, w)]
            out.append(
                f"| {name} | {clients} | "
                + " | ".join(cells)
                + f" | {_share(c.get('cold_share'))} | {five} |"
            )
    notes = [f"- {note}" for note in data.get("notes") or []]
    env = environment_line(data)
    return [*out, "", *([*notes, ""] if notes else []), *([f"Environment: {env}.", ""] if env else [])]
