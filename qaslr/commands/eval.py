"""Evaluate trained heads on query-positive pairs (paper §4.1, §A.3, §A.6, §A.8).

Metrics: Hit@1 / Hit@5 within each pair's bounded candidate set (accuracy for QA), per task and per
task/kind; Recall@k of the positive video over every video of the file (--recall). Table 6 layout:
Hit@1 after 25 / 50 / 75 / 100 % of the clips (--checkpoints). Table 5 controls at test time for
QASLR heads: shuffled clips, reversed clips, reset memory, last clip only (--controls).

--head NAME=DIR[,DIR...] may be repeated; several directories under one name (e.g. three seeds) are
averaged and reported as mean ± std. Feature options (--model, --max-frames, --clip-len,
--evidence-tokens, --selection, --scoring, --text-conditioning, or the --recipe that sets them) must
match training so that the cached evidence matches.

Example:
  qaslr eval --data /tmp/syn/test.jsonl --model /tmp/ckpt --max-frames 32 --clip-len 4 \\
      --evidence-tokens 64 --head qaslr=/tmp/run/head --head mean=/tmp/run-mean/head \\
      --checkpoints --controls --recall --json /tmp/eval.json
"""

from __future__ import annotations

import argparse

from core.config import Embedder
from qaslr.commands.feature_options import add_feature_arguments

COLUMNS = (
    ("retrieval", "Ret. H@1"),
    ("retrieval/ordered", "Ordered ret. H@1"),
    ("retrieval/counted", "Counted ret. H@1"),
    ("moment", "Moment H@1"),
    ("classification", "CLS H@1"),
    ("qa", "QA acc."),
    ("mean_hit@1", "Mean H@1"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--data", required=True, help="evaluation pairs (JSONL with candidate sets)")
    p.add_argument(
        "--head",
        action="append",
        required=True,
        metavar="NAME=DIR[,DIR...]",
        help="a trained head (or aggregator) directory; repeat for several; comma-separate seeds",
    )
    add_feature_arguments(p)
    p.add_argument("--checkpoints", action="store_true", help="Hit@1 after 25/50/75/100%% of clips (Table 6)")
    p.add_argument(
        "--checkpoint-metric",
        default="retrieval",
        help="task (or task/kind) whose Hit@1 the checkpoint table shows (default retrieval)",
    )
    p.add_argument(
        "--controls", action="store_true", help="shuffled/reversed/reset/last-clip controls (Table 5)"
    )
    p.add_argument("--recall", action="store_true", help="Recall@1/5/10 over every video of --data")
    p.add_argument("--seed", type=int, default=0, help="seed of the shuffled-clips control")
    p.add_argument("--json", default=None, help="write all metrics to this JSON file")


def _parse_heads(specs: list[str]) -> dict[str, list[str]]:
    heads: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, dirs = spec.partition("=")
        if not sep:
            name, dirs = spec.rstrip("/").split("/")[-1] or spec, spec
        heads.setdefault(name, []).extend(d for d in dirs.split(",") if d)
    return heads


def _value(metrics: dict, key: str) -> float | None:
    v = metrics.get(key)
    if v is None:
        return None
    return float(v) if not isinstance(v, dict) else float(v["hit@1"])


def _fmt(values: list[float | None]) -> str:
    import numpy as np

    vals = [v for v in values if v is not None]
    if not vals:
        return "–"
    if len(vals) == 1:
        return f"{100 * vals[0]:.1f}"
    return f"{100 * np.mean(vals):.1f} ± {100 * np.std(vals):.1f}"


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    import numpy as np

    from qaslr.commands.feature_options import apply_recipe, default_cache, load_task_pairs, open_store
    from training.aggregators import load_model, model_kind
    from training.data import DataError
    from training.evaluate import evaluate_checkpoints, evaluate_pairs, recall_at_k

    apply_recipe(args)
    try:
        pairs = load_task_pairs(args.data, args.tasks)
    except DataError as exc:
        print(f"error: {exc}")
        return 2
    heads = _parse_heads(args.head)
    for dirs in heads.values():
        for d in dirs:
            if not Path(d).is_dir():
                print(f"error: head directory not found: {d}")
                return 2
    cache_root = Path(args.cache) if args.cache else default_cache(args.data)
    store = open_store(args, pairs, cache_root=cache_root)
    results: dict = {}
    rows: list[tuple[str, list[dict]]] = []
    ckpt_rows: list[tuple[str, list[dict]]] = []
    for name, dirs in heads.items():
        models = [load_model(d) for d in dirs]
        for m in models:
            if getattr(m, "config", None) is not None and m.config.hidden_size != store.hidden_size:
                print(
                    f"error: head {name} expects hidden size {m.config.hidden_size}, features have {store.hidden_size}"
                )
                return 2
        kind = model_kind(models[0])
        controls = ["none"]
        if args.controls and kind == Embedder.QASLR:
            controls += ["shuffle", "reverse", "reset", "last"]
        for control in controls:
            label = name if control == "none" else f"{name}, {control}"
            runs = [
                evaluate_pairs(m, store, pairs, scoring=args.scoring, control=control, seed=args.seed)
                for m in models
            ]
            results[label] = {"dirs": dirs, "metrics": runs}
            rows.append((label, runs))
        if args.checkpoints:
            cps = [evaluate_checkpoints(m, store, pairs, scoring=args.scoring) for m in models]
            results[name]["checkpoints"] = cps
            ckpt_rows.append((name, cps))
        if args.recall:
            results[name]["recall"] = [recall_at_k(m, store, pairs) for m in models]

    present = [(k, title) for k, title in COLUMNS if any(_value(r[0], k) is not None for _, r in rows)]
    print(
        f"\n{args.data}: {len(pairs)} pairs; scores in %, mean ± std over seeds where several heads are given"
    )
    print("| Model | " + " | ".join(t for _, t in present) + " |")
    print("|---|" + "---|" * len(present))
    for label, runs in rows:
        print(f"| {label} | " + " | ".join(_fmt([_value(r, k) for r in runs]) for k, _ in present) + " |")
    chance = rows[0][1][0]
    print(
        "| chance | "
        + " | ".join(
            f"{100 * (chance[k]['chance@1'] if isinstance(chance.get(k), dict) else chance.get('mean_chance@1', 0)):.1f}"
            for k, _ in present
        )
        + " |"
    )
    if ckpt_rows:
        metric = args.checkpoint_metric
        print(f"\nHit@1 of {metric} after a fraction of the clips (Table 6 layout)")
        print("| Model | 25% | 50% | 75% | Final | Mean H@1 |")
        print("|---|---|---|---|---|---|")
        for name, cps in ckpt_rows:
            per = [[_value(cp[f], metric) for cp in cps] for f in ("25%", "50%", "75%", "100%")]
            means = [float(np.mean([p[i] for p in per])) for i in range(len(cps))]
            print(f"| {name} | " + " | ".join(_fmt(v) for v in per) + f" | {_fmt(means)} |")
    if args.recall:
        print("\nRecall@k over all videos of the file")
        for name in heads:
            recs = results[name]["recall"]
            if recs and recs[0]:
                print(
                    f"  {name}: "
                    + ", ".join(
                        f"{k} {_fmt([r[k] for r in recs])}" for k in recs[0] if k.startswith("recall")
                    )
                )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
        print(f"\nmetrics written to {args.json}")
    return 0
