"""Write a randomly initialised streaming head (config JSON + safetensors) sized for a backbone.
No trained QASLR head weights are published: train one with `qaslr train`, or use this to exercise
the streaming pathway end to end (its rankings are meaningless)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", help="output directory")
    p.add_argument("--model", required=True, help="backbone hub id or checkpoint directory (sets D and d)")
    p.add_argument("--think-tokens", type=int, default=32, help="N think tokens (paper default 32)")
    p.add_argument(
        "--evidence-tokens", type=int, default=256, help="M evidence tokens per clip (default 256)"
    )
    p.add_argument(
        "--heads", type=int, default=None, help="attention heads (default: 16, or fewer for tiny dims)"
    )
    p.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from transformers import AutoConfig

    from models.head import StreamingHeadConfig, create_head, num_trainable_parameters, save_head

    hidden = AutoConfig.from_pretrained(args.model).text_config.hidden_size
    heads = args.heads or next(h for h in (16, 8, 4, 2, 1) if hidden % h == 0)
    config = StreamingHeadConfig(
        hidden_size=hidden,
        embed_dim=hidden,
        num_think_tokens=args.think_tokens,
        max_evidence_tokens=args.evidence_tokens,
        num_heads=heads,
    )
    head = create_head(config, seed=args.seed)
    save_head(head, args.directory)
    print(f"wrote streaming head ({num_trainable_parameters(head):,} parameters) to {args.directory}")
    return 0
