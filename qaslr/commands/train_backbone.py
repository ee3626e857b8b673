"""Train the tiny-world backbone on the shapes world (training/backbone.py): the command that
reproduces the weights shipped in training/tiny_world/. It writes OUT/model.safetensors,
OUT/tokenizer.json, OUT/recipe.json (settings, time taken, evaluation) and OUT/train_log.jsonl; an
interrupted run resumes from OUT/state.pt when the same command is run again. Copy the three files
into training/tiny_world/ to ship a new backbone (the README gives the time it takes on 2 cores)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help="output directory (rerun the same command to resume)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and of the world samples")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the recipe's)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the recipe's, 2)")


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from training.backbone import BackboneTrainConfig, train_backbone

    config = BackboneTrainConfig(seed=args.seed)
    if args.steps is not None:
        config = dataclasses.replace(config, steps=args.steps)
    if args.threads is not None:
        config = dataclasses.replace(config, threads=args.threads)
    out = train_backbone(args.out, config)
    print(f"trained tiny-world backbone in {out} (see {out}/recipe.json)")
    return 0
