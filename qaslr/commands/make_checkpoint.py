"""Write a randomly initialised, Qwen3-VL-Embedding-shaped checkpoint directory (config, safetensors
weights with the public naming, tokenizer, chat template, processor configs) that loads through the
same loader as the public weights. Presets: tiny (tests, CI, the offline demo), 2b and 8b (the public
architectures, for measuring GPU latency and memory at real scale). Rankings from random weights are
meaningless."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", help="output directory (created if missing)")
    p.add_argument(
        "--preset", default="tiny", choices=["tiny", "2b", "8b"], help="architecture (default: tiny)"
    )
    p.add_argument("--seed", type=int, default=0, help="random seed; the same seed writes the same weights")


def run(args: argparse.Namespace) -> int:
    from models.checkpoint import make_checkpoint

    path = make_checkpoint(args.directory, preset=args.preset, seed=args.seed)
    print(f"wrote {args.preset} checkpoint to {path} (random weights: rankings are meaningless)")
    return 0
