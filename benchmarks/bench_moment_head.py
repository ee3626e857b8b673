"""The rerank head's recipe (Table 6) and its controls (Table 5), on a held-out split.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_moment_head.py [--seeds 0 1 2]
        [--held-out 301] [--recipes ...] [--workdir DIR] [--json docs/bench/moment_head.json]

Data: the splits of ``qaslr train-rerank-head`` with its defaults (training/moment_head.py
``MomentRecipe``; renders, indexes and encoded moments cached under --workdir, shared with that
command's default workdir): the training splits, and one more split (``--held-out``, a seed no
constant was chosen on) that everything here is measured on. The development split is not used.

**Table 6** (§A.8): per weight seed one head per recipe on the same data and epochs: the final
readout only (Eq. 11), + the step-wise term (Eq. 12), + self-distillation (Eq. 13), + both (Eq. 14,
the paper's lambda_step 0.1 and lambda_distill 0.01: the shipped recipe). For each, the share of
motion, order and count queries whose right video the head's readout ranks above its pair partner
(chance 0.5), after 25, 50, 75 % and all of each candidate's clips, and their mean (the paper's
"Mean"). **Table 5** (§4.4): the + both head read with its clips shuffled, reversed, with its
memory reset before every clip, and from the last clip alone. Beside them, the frame tier's
best-frame score on the same candidates (what the default answers without the head).

3 weight seeds, mean ± std. Nothing is asserted: a bad number is a result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RECIPES = {  # name -> (lambda_step, lambda_distill); "recipe": the recipe's own (Eq. 14's)
    "final readout only": (0.0, 0.0),
    "+ step-wise term": ("recipe", 0.0),
    "+ self-distillation": (0.0, "recipe"),
    "+ both (shipped recipe)": ("recipe", "recipe"),
}
FULL = "+ both (shipped recipe)"
KINDS = ("change", "order", "count")  # world.meaning kinds: "change" is motion and change
READOUTS = ("after 25 %", "after 50 %", "after 75 %", "head")
CONTROLS = ("head", "shuffled", "reversed", "reset memory", "last clip only")


def _recipe(base, name: str, seed: int):
    step, distill = RECIPES[name]
    return dataclasses.replace(
        base,
        seed=seed,
        lambda_step=base.lambda_step if step == "recipe" else step,
        lambda_distill=base.lambda_distill if distill == "recipe" else distill,
    )


def _pairs(measured: dict, key: str) -> dict:
    return {k: measured[key]["within_pair"].get(k, float("nan")) for k in KINDS}


def _mean_std(values: list[float]) -> dict:
    vals = [v for v in values if v == v]
    if not vals:
        return {"mean": float("nan"), "std": float("nan")}
    return {"mean": statistics.fmean(vals), "std": statistics.pstdev(vals) if len(vals) > 1 else 0.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the heads' weight seeds")
    ap.add_argument("--held-out", type=int, default=301, help="the split measured on (chose nothing)")
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    ap.add_argument("--epochs", type=int, default=None, help="default: the recipe's")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default=None, help="default: qaslr-rerank-head under the temp directory")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)

    import torch

    from benchmarks.provenance import environment, recorded_args
    from core.config import DEFAULT_MAX_EVIDENCE
    from training.backbone import current_tiny_world_checkpoint
    from training.moment_data import describe
    from training.moment_head import MomentRecipe, evaluate, moment_splits, train_head

    torch.set_num_threads(args.threads)
    work = Path(args.workdir or Path(tempfile.gettempdir()) / "qaslr-rerank-head")
    work.mkdir(parents=True, exist_ok=True)
    model = current_tiny_world_checkpoint(work / "tiny-world-checkpoint")
    base = MomentRecipe()
    if args.epochs:
        base = dataclasses.replace(base, epochs=args.epochs)

    started = time.perf_counter()
    # the candidates and moments the head reads are chosen by its selection query, as the command's
    _, _, (train, held) = moment_splits(work, model, base, base.train_seeds, (args.held_out,))
    sample = train[0].items[0]
    hidden, embed = sample.states.shape[-1], sample.q.shape[-1]
    seen = max(e[0].shape[0] for s in train for e in s.evidence.values())
    runs: dict[str, list[dict]] = {name: [] for name in args.recipes}
    frame_tier = None
    for seed in args.seeds:
        for name in args.recipes:
            t = time.perf_counter()
            recipe = _recipe(base, name, seed)
            head, _ = train_head(train, [], recipe, hidden=hidden, embed=embed,
                                 max_evidence=max(DEFAULT_MAX_EVIDENCE, seen))  # fmt: skip
            measured = evaluate(head, held, controls=True, recipe=recipe)
            frame_tier = _pairs(measured, "frame tier")
            run = {"seed": seed, "train_s": round(time.perf_counter() - t, 1),
                   "readouts": {r: _pairs(measured, r) for r in READOUTS},
                   "hit@1": measured["head"]["hit@1"]}  # fmt: skip
            if name == FULL:
                run["controls"] = {c: _pairs(measured, c) for c in CONTROLS}
            runs[name].append(run)
            print(f"seed {seed} {name}: {run['readouts']['head']} ({run['train_s']:.0f} s)", flush=True)
    table6 = {
        name: {
            kind: {r: _mean_std([x["readouts"][r][kind] for x in rs]) for r in READOUTS}
            | {"mean": _mean_std([statistics.fmean(x["readouts"][r][kind] for r in READOUTS) for x in rs])}
            for kind in KINDS
        }
        for name, rs in runs.items()
    }
    table5 = {
        c: {kind: _mean_std([x["controls"][c][kind] for x in runs.get(FULL, [])]) for kind in KINDS}
        for c in CONTROLS
    } if FULL in runs else {}  # fmt: skip
    result = {
        "args": recorded_args(args),
        "recipe": base.to_dict(),
        "data": {"train": [describe(s) for s in train], "held_out": [describe(s) for s in held]},
        "frame_tier": frame_tier,
        "table6": table6,
        "table5": table5,
        "runs": runs,
        "minutes": round((time.perf_counter() - started) / 60, 1),
        "environment": environment(),
    }
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(json.dumps({"table6": table6, "table5": table5, "frame_tier": frame_tier}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
