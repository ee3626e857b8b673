"""Train the tiny-world backbone on the shapes world (training/backbone.py): the command that
reproduces the weights shipped in training/tiny_world/. Three phases: the world's events, then motion
and change (reversal pairs; off by default), then the motion recipe (training/motion_recipe.py). It writes OUT/model.safetensors, OUT/tokenizer.json, OUT/recipe.json
(settings, time taken per phase, evaluation) and OUT/train_log.jsonl; an interrupted run resumes
where it stopped (OUT/state.pt, OUT/first_phase.safetensors, OUT/state-motion.pt, OUT/state-motion-recipe.pt) when the same
command is run again. Copy the three files into training/tiny_world/ to ship a new backbone
(training/tiny_world/README.md gives the time each phase takes on 2 cores)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help="output directory (rerun the same command to resume)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and of the world samples")
    p.add_argument(
        "--steps", type=int, default=None, help="first phase's optimizer steps (default: the recipe's)"
    )
    p.add_argument(
        "--motion-steps", type=int, default=None, help="second (motion) phase's steps (default: the recipe's)"
    )
    p.add_argument(
        "--motion-recipe-steps", type=int, default=None,
        help="third phase's steps, training.motion_recipe (default: the recipe's)",
    )  # fmt: skip
    p.add_argument(
        "--first-phase",
        metavar="DIR",
        help="run only the motion phase, from the first phase's model.safetensors, tokenizer.json and "
        "recipe.json in DIR (e.g. a backbone trained before the motion phase existed)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the recipe's, 2)")


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from training.backbone import BackboneTrainConfig, train_backbone

    config = BackboneTrainConfig(seed=args.seed)
    if args.steps is not None:
        config = dataclasses.replace(config, steps=args.steps)
    if args.motion_steps is not None:
        config = dataclasses.replace(
            config, motion=dataclasses.replace(config.motion, steps=args.motion_steps)
        )
    if args.motion_recipe_steps is not None:
        config = dataclasses.replace(
            config, motion_recipe=dataclasses.replace(config.motion_recipe, steps=args.motion_recipe_steps)
        )
    if args.threads is not None:
        config = dataclasses.replace(config, threads=args.threads)
    out = train_backbone(args.out, config, first_phase=args.first_phase)
    print(f"trained tiny-world backbone in {out} (see {out}/recipe.json)")
    return 0
