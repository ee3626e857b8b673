"""The time head's training recipe (Table 6) and its early exit (§A.10), on held-out renders.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_time_head.py [--seeds 0 1 2] [--steps 600]
        [--workers 2] [--workdir DIR] [--json docs/bench/time_head_recipe.json]

Data: the renders of ``qaslr train-time-head`` with its defaults (training/time_head.py; cached under
--workdir): the training render (seed 1), the held-out render everything is measured on (seed 2),
and two more renders (seeds 3 and 4, the held-out render's shape) that only fit the early-exit gates.

**Table 6** (§A.8): four heads per weight seed, final readout only, + the step-wise term, + the
self-distillation term, + both (weight 0.5 each), the same data and steps. For each, order and count
pair accuracy of the readout after 25, 50, 75 % and all of each candidate's frames (chance 0.5), and
their mean over the checkpoints, as the paper's "Mean H@1". A single-event row is not made: the
time head answers order and count only.

**Early exit** (§A.10, Eq. 19, Prop. 3; training/time_exit.py): each query's candidates (every video
of its render) are read in 8 lockstep steps, and two gates are fitted on seeds 3 and 4's renders:
- per query: a logistic gate over the step's share, the lead of the first readout over the second,
  whether the top-1 just changed and the condition stops every candidate at the first step with
  p_t >= eta; beside it what an oracle saves at full agreement (each query stopped at the first step
  after which its top-1 never changes), the most any per-query gate over these steps can save;
- per candidate: a listwise gate estimates each candidate's chance q_t^j of being the full stream's
  top-1, and a candidate stops at the first step with 1 - q_t^j >= eta unless it is among the two
  best readouts then; a stopped candidate ranks below every candidate read to the end.
Per eta: the share of steps saved (candidate steps, per candidate), top-1 agreement with the full
stream, Hit@1 at the exit beside the full stream's, and the gate's calibration error. The heads are
the step + distillation one (its partial readouts are trained) and the final-only one. What a step
saves: the time head reads stored frame embeddings, so an exit saves memory updates (GRU steps,
milliseconds), not backbone calls.

3 weight seeds, mean ± std. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RECIPES = {  # name -> (step_weight, distill_weight)
    "final readout only": (0.0, 0.0),
    "+ step-wise term": (0.5, 0.0),
    "+ self-distillation": (0.0, 0.5),
    "+ both": (0.5, 0.5),
}
CHECKS = ("after 25 %", "after 50 %", "after 75 %", "full")
EXIT_RECIPES = ("+ both", "final readout only")
CHOSEN_AT = 0.98  # per-candidate exit: eta is chosen on the gate's render for this top-1 agreement


def _splits(work: Path, model: Path):
    """The renders of training/time_renders.py: training, held-out, and the gate's."""
    from training.time_head import load_split, merge
    from training.time_renders import GATE_SEEDS, HELD_OUT_RENDER, HELD_OUT_SEED, TRAIN_RENDER, TRAIN_SEEDS

    train = merge([load_split(work, seed, model, **TRAIN_RENDER) for seed in TRAIN_SEEDS])
    held_out = load_split(work, HELD_OUT_SEED, model, **HELD_OUT_RENDER)
    # the gate's renders are kept apart (not merged): each query's candidates are its own render's, as
    # on the held-out render
    return train, held_out, [load_split(work, seed, model, **HELD_OUT_RENDER) for seed in GATE_SEEDS]


def _one(job):
    """Train one head and measure it (a worker process: one torch thread)."""
    import torch

    from training.time_exit import (
        choose_eta,
        exit_trajectories,
        fit_candidate_gate,
        fit_exit_gate,
        measure_candidate_exit,
        measure_exit,
    )
    from training.time_head import CHECKPOINTS, evaluate, train_time_head

    torch.set_num_threads(1)
    recipe, seed, steps, train, val, gate_splits = job
    step_w, distill_w = RECIPES[recipe]
    t0 = time.perf_counter()
    head = train_time_head(train, steps=steps, step_weight=step_w, distill_weight=distill_w, seed=seed,
                           log_every=0)  # fmt: skip
    train_s = time.perf_counter() - t0
    measured = evaluate(head, val, (*CHECKPOINTS, "full"))
    out = {"recipe": recipe, "seed": seed, "train_s": train_s, "checks": measured}
    if recipe in EXIT_RECIPES:
        conditions = head.config.conditions
        fit_on = [tr for split in gate_splits for tr in exit_trajectories(head, split)]
        measured_on = exit_trajectories(head, val)
        out["exit"] = measure_exit(fit_exit_gate(fit_on, conditions), measured_on, conditions)
        gate = fit_candidate_gate(fit_on, conditions)
        out["candidate_exit"] = measure_candidate_exit(gate, measured_on)
        eta = choose_eta(measure_candidate_exit(gate, fit_on), CHOSEN_AT)  # on the gate's own render
        out["chosen"] = next(({"eta": r["eta"], "saved": r["saved"], "agreement": r["agreement"]}
                              for r in out["candidate_exit"] if r["eta"] == eta), None)  # fmt: skip
    return out


def _per_eta(runs: list[dict], key: str) -> list[dict]:
    """Each eta's row with every field a list over the weight seeds."""
    return [{k: [r[key][i][k] for r in runs] for k in runs[0][key][i]} for i in range(len(runs[0][key]))]


def _print_exit(rows: list[dict]) -> None:
    print(
        f"{'eta':>7} {'steps saved':>16} {'top-1 agreement':>16} {'Hit@1 at exit':>16} {'Hit@1 full':>16} {'ECE':>8}"
    )
    for row in rows:
        print(f"{row['eta'][0]:>7} {_ms(row['saved']):>16} {_ms(row['agreement']):>16} "
              f"{_ms(row['hit@1']):>16} {_ms(row['full_hit@1']):>16} {np.mean(row['ece']):8.3f}")  # fmt: skip


def _ms(values) -> str:
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.3f} ± {v.std():.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="weight seeds")
    ap.add_argument("--steps", type=int, default=600, help="optimizer steps per head")
    ap.add_argument("--workers", type=int, default=2, help="heads trained at once (one thread each)")
    ap.add_argument("--model", default=None, help="backbone (default: the shipped tiny-world one)")
    ap.add_argument("--workdir", default=None, help="renders and indexes, reused (default: the temp dir)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()

    from benchmarks.provenance import environment, recorded_args, world_workdir_and_model
    from training.time_exit import EXIT_READ_ON
    from training.time_renders import GATE_SEEDS, HELD_OUT_SEED

    t_start = time.perf_counter()
    model = world_workdir_and_model(args, "qaslr-time-head")  # the renders train-time-head caches too
    train, val, gate_splits = _splits(Path(args.workdir), model)
    gate_queries = sum(len(split.queries) for split in gate_splits)
    print(f"data: {len(train.queries)} training, {len(val.queries)} held-out, {gate_queries} gate queries")
    jobs = [(r, s, args.steps, train, val, gate_splits) for r in RECIPES for s in args.seeds]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(pool.map(_one, jobs))

    table6 = {}
    print(f"\nTable 6 (held-out order / count pair accuracy; {args.steps} steps, seeds {args.seeds})")
    print(f"{'training':<22}" + "".join(f"{c:>26}" for c in (*CHECKS, "mean")))
    for recipe in RECIPES:
        mine = [r for r in runs if r["recipe"] == recipe]
        row = {}
        for kind in ("order", "count"):
            per = {c: [r["checks"][c][kind] for r in mine] for c in CHECKS}
            per["mean"] = [float(np.mean([r["checks"][c][kind] for c in CHECKS])) for r in mine]
            row[kind] = per
        table6[recipe] = row
        cells = [f"{_ms(row['order'][c])} / {np.mean(row['count'][c]):.2f}" for c in (*CHECKS, "mean")]
        print(f"{recipe:<22}" + "".join(f"{c:>26}" for c in cells))

    exits, candidate_exits, chosen_exits = {}, {}, {}
    for recipe in EXIT_RECIPES:
        mine = [r for r in runs if r["recipe"] == recipe]
        exits[recipe], candidate_exits[recipe] = _per_eta(mine, "exit"), _per_eta(mine, "candidate_exit")
        print(f"\nEarly exit per query, head '{recipe}' (gates fitted on the renders of seeds {list(GATE_SEEDS)}, "
              f"measured on seed {HELD_OUT_SEED}'s)")  # fmt: skip
        oracle = exits[recipe][0]["oracle_saved"]
        print("an oracle (each query stopped once its top-1 never changes) saves " + ", ".join(
            f"{k} {_ms([o[k] for o in oracle])}" for k in oracle[0]
        ))  # fmt: skip
        _print_exit(exits[recipe])
        print(f"\nEarly exit per candidate, head '{recipe}' (the best {EXIT_READ_ON} readouts read on)")
        _print_exit(candidate_exits[recipe])
        chosen = [r["chosen"] for r in mine]
        chosen_exits[recipe] = chosen
        if not all(chosen):
            print(f"no eta reached {CHOSEN_AT:.0%} agreement on the gate's renders for some seed: {chosen}")
        else:
            print(f"eta chosen on the gate's render for >= {CHOSEN_AT:.0%} agreement there: "
                  f"{[c['eta'] for c in chosen]}; on the held-out render it saves "
                  f"{_ms([c['saved'] for c in chosen])} at {_ms([c['agreement'] for c in chosen])} agreement")  # fmt: skip

    minutes = (time.perf_counter() - t_start) / 60
    print(f"\n{minutes:.1f} min; training {np.median([r['train_s'] for r in runs]):.0f} s per head (median)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "args": recorded_args(args),
            "minutes": minutes,
            "table6": table6,
            "exit": exits,
            "candidate_exit": candidate_exits,
            "candidate_exit_chosen": {"at_agreement": CHOSEN_AT, "per_seed": chosen_exits},
            "train_s": [r["train_s"] for r in runs],
            "queries": {"train": len(train.queries), "held_out": len(val.queries), "gate": gate_queries},
            "environment": environment(),
        }, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
