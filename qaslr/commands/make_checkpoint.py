"""Write a Qwen3-VL-Embedding-shaped checkpoint directory (config, safetensors weights with the public
naming, tokenizer, chat template, processor configs) that loads through the same loader as the public
weights.

Presets:
  tiny-world  the shapes-world backbone: trained weights that see the shapes world (8 colours x 4
              shapes on grey haystacks, docs/shapes-world.md). Seed 0 is the checkpoint that ships
              with the project; another seed trains the same recipe once (slow: see the README) and
              caches it by content hash under $QASLR_CACHE (default ~/.cache/qaslr).
  tiny        random weights, seconds to build (unit tests).
  2b, 8b      the public architectures with random weights (GPU latency and memory at real scale).
Rankings from random weights are meaningless."""

from __future__ import annotations

import argparse

PRESETS = ["tiny-world", "tiny", "2b", "8b"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("directory", help="output directory (created if missing)")
    p.add_argument(
        "--preset", default="tiny", choices=PRESETS, help="architecture and weights (default: tiny)"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random seed; the same seed writes the same weights (tiny-world: 0 = the shipped weights)",
    )


def run(args: argparse.Namespace) -> int:
    if args.preset == "tiny-world":
        from training.backbone import tiny_world_checkpoint

        path = tiny_world_checkpoint(args.directory, seed=args.seed)
        print(f"wrote the tiny-world checkpoint (trained on the shapes world, seed {args.seed}) to {path}")
        return 0
    from models.checkpoint import make_checkpoint

    path = make_checkpoint(args.directory, preset=args.preset, seed=args.seed)
    print(f"wrote {args.preset} checkpoint to {path} (random weights: rankings are meaningless)")
    return 0
