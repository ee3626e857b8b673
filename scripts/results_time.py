"""The time head's recipe section of the results page (benchmarks/bench_time_head.py's JSON), and the order
route's introduction (docs/bench/order_route.json)."""

from __future__ import annotations

import statistics

from results_format import environment_line, mean_std, mode_names


def time_recipe_section(data: dict) -> list[str]:
    """The time head's Table 6 (step-wise and self-distillation terms) and early exit
    (benchmarks/bench_time_head.py)."""
    args = data.get("args", {})
    seeds = args.get("seeds", [])
    q = data.get("queries", {})
    out = [
        "## The time head's recipe: Table 6 and early exit",
        "",
        f"`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_time_head.py --steps {args.get('steps')}` — "
        f"heads trained on the default training render ({q.get('train')} queries), measured on the held-out "
        f"render ({q.get('held_out')} queries, 60-240 s videos, every video of the render a candidate); "
        f"weight seeds {', '.join(str(x) for x in seeds)}, mean ± std; {data.get('minutes', 0):.0f} min on 2 cores.",
        "",
        "Table 6: order / count pair accuracy (the right video above its mirror or other count; chance 50 %) "
        "of the readout after that share of each candidate's frames.",
        "",
        "| training | 25 % | 50 % | 75 % | all | mean |",
        "|---|---|---|---|---|---|",
    ]
    checks = ("after 25 %", "after 50 %", "after 75 %", "full", "mean")
    for recipe, row in data.get("table6", {}).items():
        cells = [f"{mean_std(row['order'][c], True)} / {mean_std(row['count'][c], True)}" for c in checks]
        out.append(f"| {recipe} | " + " | ".join(cells) + " |")
    exits = data.get("exit", {})
    notes: list[str] = []
    if exits:
        out += [
            "",
            f"Early exit per query: every candidate read in 8 lockstep steps; a logistic gate fitted on renders "
            f"of their own ({q.get('gate')} queries) stops them all at the first step with p_t >= eta. *Saved* is "
            "1 - E[T^] / T (Eq. 19); *agreement* is the top-1 at the exit against the full stream's; *ECE* is the "
            "gate's calibration error (eps_g of Prop. 3's bound 1 - eta + eps_g). A step here is a memory update "
            "over stored frame embeddings: an exit saves milliseconds, not backbone calls.",
            "",
            *_exit_table(exits),
        ]
        for recipe, rows in exits.items():
            oracle = rows[0].get("oracle_saved")
            if oracle:
                notes.append(
                    f"Head *{recipe}*: an oracle that stops each query once its top-1 never changes again saves "
                    + ", ".join(f"{k} {mean_std([o[k] for o in oracle], True)} %" for k in oracle[0])
                    + " of the steps: no per-query gate over these steps can save more."
                )
    candidate = data.get("candidate_exit", {})
    if candidate:
        out += [
            "",
            "Early exit per candidate (training/time_exit.py): each candidate's stream stops on its own. A listwise "
            "gate fitted on the same renders estimates each candidate's chance q of being the full stream's "
            "top-1; a candidate stops at the first step with 1 - q >= eta unless its readout is among the two best "
            "then, and a stopped candidate ranks below every one read to the end. *Saved* is the share of "
            "candidate steps not read; *ECE* is q's calibration error.",
            "",
            *_exit_table(candidate),
        ]
        chosen = data.get("candidate_exit_chosen", {})
        for recipe, per_seed in chosen.get("per_seed", {}).items():
            if per_seed and all(per_seed):
                notes.append(
                    f"Head *{recipe}*, per candidate, eta chosen on the gate's render for >= "
                    f"{100 * chosen['at_agreement']:.0f} % agreement there ({', '.join(str(c['eta']) for c in per_seed)}): "
                    f"on the held-out render it saves {mean_std([c['saved'] for c in per_seed], True)} % of the "
                    f"steps at {mean_std([c['agreement'] for c in per_seed], True)} % agreement."
                )
    env = environment_line(data)
    notes = [line for note in notes for line in ("", note)]
    return [*out, *notes, "", *([f"Environment: {env}.", ""] if env else [])]


def _exit_table(exits: dict) -> list[str]:
    out = [
        "| head | eta | steps saved % | top-1 agreement % | Hit@1 at exit % | Hit@1 full % | ECE |",
        "|---|---|---|---|---|---|---|",
    ]
    for recipe, rows in exits.items():
        for row in rows:
            out.append(
                f"| {recipe} | {row['eta'][0]} | {mean_std(row['saved'], True)} | "
                f"{mean_std(row['agreement'], True)} | {mean_std(row['hit@1'], True)} | "
                f"{mean_std(row['full_hit@1'], True)} | {statistics.fmean(row['ece']):.3f} |"
            )
    return out


BACKBONE_CHECKS = (
    ("text_to_frame_top1", "text -> frame top-1"),
    ("event_beats_all_empty", "an event's frame above every empty haystack"),
    ("text_to_video_top1", "text -> long video top-1 (one-shot)"),
    ("reversal", "motion text: its clip above the reversal (chance 0.5)"),
    ("text_to_clip_top1", "motion text -> its clip among 112"),
    ("above_still", "motion text: its clip above its shape shown still (chance 0.5 or less)"),
)


def backbone_section(runs: list[tuple[str, dict]]) -> list[str]:
    """Backbones beside the shipped one on their held-out checks (benchmarks/bench_backbone.py), one
    table per compared run."""
    if not runs:
        return []
    out = [
        "## The backbone and motion",
        "",
        "`.venv/bin/python benchmarks/bench_backbone.py OTHER --json docs/bench/NAME.json`: the shipped "
        "tiny-world backbone beside a motion recipe's weights (`python -m training.motion_recipe`) on "
        "`training.backbone_checks`, world seeds that chose nothing; mean ± std over the seeds.",
    ]
    for name, data in runs:
        backbones = data["backbones"]
        seeds = data.get("args", {}).get("seeds", [])
        out += [
            "",
            f"`{name}` (seeds {', '.join(str(s) for s in seeds)}; {data.get('note', '')}):",
            "",
            "| check | shipped | motion recipe |",
            "|---|---|---|",
        ]
        for key, label in BACKBONE_CHECKS:
            if key not in backbones["other"]["summary"]:  # a run measured before the check existed
                continue
            cells = [backbones[b]["summary"][key] for b in ("base", "other")]
            out.append(
                f"| {label} | " + " | ".join(f"{c['mean']:.3f} ± {c['std']:.3f}" for c in cells) + " |"
            )
        for what in ("reversal", "above_still"):
            if f"{what}_by_change" not in backbones["other"]["summary"]:
                continue
            changes = backbones["other"]["summary"][f"{what}_by_change"]
            out.append(
                f"| {what.replace('_', ' ')} by change | "
                + " | ".join(
                    ", ".join(f"{c} {backbones[b]['summary'][f'{what}_by_change'][c]:.2f}" for c in changes)
                    for b in ("base", "other")
                )
                + " |"
            )
        out += ["", environment_line(data)]
    return out + [""]


def _ms(cell: dict) -> str:
    """A {"mean", "std"} share as 'mean ± std' in %."""
    mean, std = cell.get("mean"), cell.get("std")
    if not isinstance(mean, int | float) or mean != mean:
        return "–"
    return f"{100 * mean:.1f} ± {100 * (std or 0.0):.1f}"


def moment_head_section(data: dict) -> list[str]:
    """The rerank head that reads moments: Table 6 (its recipe's terms) and Table 5 (its controls) on a
    held-out split (benchmarks/bench_moment_head.py)."""
    args = data.get("args", {})
    held = data.get("data", {}).get("held_out", [{}])[0]
    train = data.get("data", {}).get("train", [])
    kinds = (("change", "motion and change"), ("order", "order"), ("count", "count"))
    out = [
        "## The rerank head that reads moments: Table 6 and Table 5",
        "",
        f"`OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_moment_head.py --held-out {args.get('held_out')}` — "
        f"heads trained by `qaslr train-rerank-head`'s recipe on its splits ({sum(s.get('queries', 0) for s in train)} "
        f"queries), measured on split {held.get('seed')} that chose nothing ({held.get('queries')} queries, 6 candidates "
        f"each: the frame tier's first by the selection query, the query's own video and its pair partner among them); "
        f"weight seeds {', '.join(str(x) for x in args.get('seeds', []))}, mean ± std; {data.get('minutes', 0):.0f} min on "
        "2 cores. Each cell: the share of queries whose right video the readout ranks above its pair partner "
        "(chance 50 %; the partner shows the same frames reversed, the same events mirrored, or another count).",
        "",
        "Table 6: the readout after that share of each candidate's clips, per training recipe"
        + (
            ""
            if len(data.get("table6", {})) >= 4
            else f" (only these were run: `--recipes {' '.join(repr(r) for r in data.get('table6', {}))}`)"
        )
        + ".",
        "",
        "| training | kind | 25 % | 50 % | 75 % | all | mean |",
        "|---|---|---|---|---|---|---|",
    ]
    readouts = ("after 25 %", "after 50 %", "after 75 %", "head", "mean")
    for recipe, row in data.get("table6", {}).items():
        for kind, name in kinds:
            if kind in row:
                out.append(f"| {recipe} | {name} | " + " | ".join(_ms(row[kind][r]) for r in readouts) + " |")
    table5 = data.get("table5", {})
    if table5:
        frame = data.get("frame_tier") or {}
        out += [
            "",
            "Table 5: the shipped recipe's head read with its clips in order, shuffled, reversed, with its memory "
            "reset before every clip (the clips' readouts pooled), and from the last clip alone; the frame tier's "
            "best-frame score on the same candidates beside them.",
            "",
            "| reading | " + " | ".join(name for _, name in kinds) + " |",
            "|---|---|---|---|",
        ]
        for control, row in table5.items():
            label = "in order (the head)" if control == "head" else control
            out.append(f"| {label} | " + " | ".join(_ms(row.get(k, {})) for k, _ in kinds) + " |")
        if frame:
            cells = [f"{100 * frame[k]:.1f}" if isinstance(frame.get(k), float) else "–" for k, _ in kinds]
            out.append("| frame tier (last seed's split) | " + " | ".join(cells) + " |")
    return out + [""]


def served_intro(served: dict) -> list[str]:
    """docs/results.md's words before the table of the served rerank head's run (rerank_head.json)."""
    runs = ", ".join(served["args"].get("rerank_head", []))
    return [
        "The QASLR rerank head that reads moments (`training/tiny_world/rerank_head/`, the run named "
        f"`{runs}` here, the same bytes) with its router and selection "
        "query, on seeds that chose nothing (its recipe chose on split 201 and bench seed 0, how a moment is "
        "read on bench seeds 0, 4 and 5, the serving constants `tie_margin`, `keep_margin` and "
        "`head_frame_weight` on bench seeds 0 and 4, `head_selection_weight` on seeds 0, 4 and 5, "
        "`head_reversal_weight` on seeds 0, 4, 5 and 6 at 60-120 s). *cascade, the "
        "default, head* is what the server serves by default with the shapes-world checkpoint: the time head "
        "for the order and count queries its parser reads, the rerank head for the other queries its router "
        "calls about time (each moment read forwards and played backwards), the frame tier for the rest; "
        "*read once (before)* is that default before the head read each moment backwards (`head_reversal_weight` "
        "0: the near-ties, read once); *head's score alone* ranks what the head read by "
        "q · z_T alone (`head_selection_weight`, `head_frame_weight` and `head_reversal_weight` 0: without the frame "
        "bank's evidence that the query's events show); *head on all R* runs the head on every candidate of every "
        "query.",
        "",
        *router_note(served),
    ]


# the default before the router was fitted on the world's texts and the tie margin widened (--before-head)
BEFORE_ROW = "cascade, the default, head (shipped), router and tie margin before"


def router_note(data: dict) -> list[str]:
    """Which router and tie margin a served-head run's default had: the run measured today's beside the
    one before (its BEFORE_ROW), or it predates them."""
    if BEFORE_ROW in mode_names(data["per_seed"]):
        return [
            "*router and tie margin before* is the default before the router was fitted on the world's texts "
            "(`training/router_texts.py`) and `tie_margin` widened from 0.05 to 0.1: the same head with the router "
            "it was trained beside (`--before-head BEFORE`, BEFORE `training/tiny_world/rerank_head/` as of commit "
            "8d8cc98), in the same run.",
            "",
        ]
    return [
        "This run predates the router fitted on the world's texts and `tie_margin` 0.1: its *cascade, the default, "
        "head* is the default then (the router fitted on the splits' queries, `tie_margin` 0.05). The 60-120 s and "
        "20-50 s runs measure today's default beside it.",
        "",
    ]


# the section of the served rerank head's run (rerank_head.json); the shorter-video runs name theirs after it
SERVED_TITLE = "Queries about time with the QASLR rerank head"


def _lengths(data: dict) -> str:
    """A run's video lengths, "LO-HI" seconds (bench_quality's --min-s, --max-s)."""
    args = data.get("args", {})
    return f"{float(args.get('min_s', 120)):.0f}-{float(args.get('max_s', 300)):.0f}"


def shorter_title(data: dict) -> str:
    """The title of a served-head run on other lengths than rerank_head.json's (rerank_head_LO_HI.json)."""
    return f"{SERVED_TITLE} on {_lengths(data)} s videos (held out)"


def shorter_intro(data: dict) -> list[str]:
    """docs/results.md's words before a served-head run on shorter videos: the world's videos last 5 s to 20
    min and the demo's 1-2 min, but the serving constants were chosen on 2-5 min collections."""
    return [
        f'The measurement of "{SERVED_TITLE} (held out)" (the same checkpoint, its '
        f"heads and serving constants, seeds that chose nothing; {data.get('args', {}).get('videos')} single-event "
        "videos a seed) on shorter videos: the shapes world's videos last 5 s to 20 min, the demo renders 1-2 min, and every constant but "
        "`head_reversal_weight` was chosen on 2-5 min collections; that one on development seeds at 60-120 s. Nothing "
        "was chosen on these seeds (training/tiny_world/README.md, "
        '"Shorter videos" and "Reading each moment backwards", says what the development seeds showed).',
        "",
        *router_note(data),
    ]


# the rows of a shorter-video run the README shows: the served default beside the baselines it must beat
SHORTER_ROWS = (
    "frame tier",
    "hand rule over per-frame scores",
    "head on all R (two-stage QASLR, shipped)",
    "cascade, the default, time head",
    "cascade, the default, head (shipped)",
    "cascade, the default, head (shipped), read once (before)",
    BEFORE_ROW,
)


def shorter_readme_lead(data: dict) -> str:
    """The README's sentence before a shorter-video run's rows."""
    seeds = ", ".join(str(s) for s in data.get("args", {}).get("seeds", []))
    return (
        f"The same queries about time on {_lengths(data)} s videos (held out, seeds {seeds}; every constant but "
        "`head_reversal_weight` was chosen at 2-5 min, that one at 60-120 s on development seeds; docs/results.md):"
    )


def served_rows(data: dict) -> tuple[str, ...] | None:
    """The rows of a served-head run the README shows: the checkpoint's own head once (a ``--rerank-head``
    run of the same bytes repeats it under its label); None: every row."""
    labels = [name.rpartition("=")[0] for name in data.get("args", {}).get("rerank_head", [])]
    named = tuple(f"{sep}{label})" for label in labels if label and label != "shipped" for sep in ("(", ", "))
    rows = mode_names(data["per_seed"])
    if not named or not any(m.endswith("(shipped)") for m in rows):
        return None
    return tuple(m for m in rows if not m.endswith(named))


def time_table_lead(args: dict, served: bool) -> str:
    """The README's sentence before its table of queries about time."""
    lead = (
        f"Queries about time, 2-5 min videos, a seed: {args.get('motion_pairs')} reversal pairs (motion and "
        f"change), {args.get('order_pairs')} mirror pairs (order), {args.get('count_pairs')} once / twice and "
        f"{args.get('count3_pairs')} twice / three-times pairs (count); *pair*: within its pair (chance 50 %), "
        "*Hit@1*: over the whole collection; *single*: one-event queries (docs/results.md says more)"
    )
    if not served:
        return lead + ":"
    return lead + (
        "; *cascade, the default, head (shipped)* is what the server serves by default with the "
        "shapes-world checkpoint (the time head for the order and count queries its parser reads, the "
        "rerank head for the other queries its router calls about time, the frame tier for the rest):"
    )


def order_route_intro(data: dict) -> list[str]:
    """What the order route's development run compared (docs/bench/order_route.json)."""
    return [
        'Two rerank heads that read the query\'s words (not shipped; training/tiny_world/README.md, "Order"), '
        "served through the order route (engine.search.cascade: an order of two events goes to such a head before "
        "the time head; its candidates the 6 that show their weaker event best, each scored q · z_T + "
        "`order_event_weight` · its weaker event's best frame, its confidence its softmax share among them), "
        "beside the time head and the hand rule in the same run: *words* `qaslr train-rerank-head RUNDIR "
        "--composed-orders 3000 --query-words --lr 1e-3 --epochs 12`, *same-colour* the same with "
        "`--composed-orders 4000 --composed-same-colour 0.25` (a quarter of the composed orders told apart by shape "
        "alone); `--time-head training/tiny_world/time_head --rerank-head words=RUNDIR --rerank-head "
        "same-colour=RUNDIR`. *cascade, the default, head (NAME)* serves a head with the default weight, *head's "
        "score alone* with q · z_T alone. These are development seeds (they chose `order_event_weight`): no "
        "held-out claim; the route is off by default because no shipped head reads the words, and both heads stay "
        "below the time head and the hand rule on order here.",
        *([f"Measured {data['note']}."] if data.get("note") else []),
        "",
    ]


def time_intro(data: dict) -> list[str]:
    args = data.get("args", {})
    if "motion_pairs" not in args:
        return []
    return [
        f"Each seed also renders a time collection ({args.get('time_singles')} single-event videos, "
        f"{args.get('motion_pairs')} reversal pairs (one changing event forwards and backwards: the same "
        f"frames), {args.get('order_pairs')} mirror pairs (A then B / B then A anywhere), "
        f"{args.get('count_pairs')} once / twice and {args.get('count3_pairs')} twice / three-times pairs; "
        f"`--time-singles {args.get('time_singles')} --motion-pairs {args.get('motion_pairs')} --order-pairs "
        f"{args.get('order_pairs')} --count-pairs {args.get('count_pairs')} --count3-pairs "
        f"{args.get('count3_pairs')} --heavy 0`). *pair %*: each pair video's query searched within its pair, "
        "the share whose right video ranks above its partner (chance 50 %); *Hit@1 %*: the same query over "
        "the whole collection, the share whose first result it is true of; *time p50 ms* the median of those "
        "searches; *min_score tells %* (where measured): within the pair again, the share whose right video's "
        "`relevance` reaches the \"no good match\" threshold (`core.config.MIN_RELEVANCE`) and whose partner's falls below it. The *hand rule* reorders the frame tier's ranking by a rule over per-frame scores "
        "(benchmarks/hand_rule.py), reading the query with the time head's parser; it is a baseline, not served. "
        "The *single* columns are the single-event corpus of this table's command. *cascade, the default* "
        "here is the frame tier alone (no time head); *cascade, the default, time head* is what the server "
        "serves by default with the shapes-world checkpoint (the time head on every query its parser reads "
        "as an order or a count it was trained on (once, twice or three times with the shipped head), its first kept only where its evidence is stronger than the frame tier's first's, by the rule of the commit the run records: engine.search.cascade).",
        "",
    ]
