"""Train a QASLR streaming head (or a control aggregator) on query-positive pairs (paper §3.4, §A.1-A.2).

The backbone stays frozen: its per-clip evidence banks and text embeddings are computed once into a
feature cache (--cache), then every epoch runs the head only. Losses: final InfoNCE with co-positive
masking (Eq. 11) + 0.1 x step-wise loss (Eq. 12) + 0.01 x self-distillation (Eq. 13); interleaved
sub-batching by task and input format; AdamW (lr 1e-4). These are the `paper` recipe's settings;
`--recipe two-stage` trains a rerank head (training/recipes.py, training/README.md). The options
marked "by recipe" default to the recipe's values; explicit options override them.

Writes to --out: head/ (head_config.json + head.safetensors, usable by `indexer build --head` and the
service; control aggregators write aggregator.json + aggregator.safetensors), checkpoint.pt (resume:
rerun the same command), metrics.jsonl (loss terms, temperature, validation metrics), train_args.json.

Example (CPU, tiny random backbone, synthetic data):
  qaslr make-checkpoint /tmp/ckpt --preset tiny
  qaslr make-synthetic /tmp/syn
  qaslr train --data /tmp/syn/train.jsonl --val /tmp/syn/val.jsonl --model /tmp/ckpt --out /tmp/run \\
      --max-frames 32 --clip-len 4 --evidence-tokens 64 --think-tokens 8 --epochs 40 --seed 0
"""

from __future__ import annotations

import argparse

from core.config import Embedder
from qaslr.commands.feature_options import add_feature_arguments, by_recipe

# the options --recipe gives defaults to (training/recipes.py), besides the feature options
RECIPE_FIELDS = (
    "think_tokens",
    "init_temperature",
    "query_conditioning",
    "evidence_sink",
    "identity_init",
    "query_whitening",
    "epochs",
    "batch_size",
    "lr",
    "weight_decay",
    "lambda_step",
    "lambda_distill",
    "lambda_clip",
)


def head_device(setting: str | None):
    """Where the head trains: ``--device`` when given, else (None or ``auto``) CUDA when available,
    as the backbone that fills the feature cache chooses."""
    from models.backbone import pick_device

    return pick_device(setting)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "--data",
        required=True,
        nargs="+",
        help="training pairs (JSONL, see training/README.md); several files train on their union "
        "(ids and groups are then prefixed with the file's position, so sets written by separate "
        "make-synthetic runs can be combined)",
    )
    p.add_argument(
        "--val", default=None, help="validation pairs (JSONL); evaluated at the end and every --eval-every"
    )
    p.add_argument(
        "--out", help="output directory (rerun with the same --out to resume; not needed with --prepare-only)"
    )
    add_feature_arguments(p)
    m = p.add_argument_group("model")
    m.add_argument(
        "--aggregator",
        choices=(Embedder.QASLR, "mean", "gru", "transformer"),
        default=Embedder.QASLR,
        help="qaslr = the streaming head; mean / gru / transformer = the Table 5 controls",
    )
    m.add_argument(
        "--think-tokens",
        type=int,
        default=None,
        help=f"N think tokens (paper 32; {by_recipe('think_tokens')})",
    )
    m.add_argument("--depth", type=int, default=1, help="update blocks per clip step (Eq. 7-8 is 1)")
    m.add_argument("--heads", type=int, default=None, help="attention heads (default: <=16, >=16 dims each)")
    m.add_argument(
        "--init-temperature",
        type=float,
        default=None,
        help=f"initial tau (learnable; {by_recipe('init_temperature')})",
    )
    m.add_argument("--init-head", default=None, help="start from this head directory instead of a fresh one")
    m.add_argument(
        "--query-conditioning",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the head takes the query embedding as its conditioning input (Eq. 4, c = q); for rerank "
        "heads trained with --scoring conditioned (by recipe: on with two-stage when the scoring is "
        "conditioned, else off)",
    )
    m.add_argument(
        "--evidence-sink",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="append a learnable 'nothing here' token to every clip's evidence, so a clip that does "
        "not match can leave the memory untouched (our addition to Eq. 7; "
        f"{by_recipe('evidence_sink')})",
    )
    m.add_argument(
        "--identity-init",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="initialise the head's evidence-to-readout path as the identity (needs D >= d) instead of "
        f"small random weights ({by_recipe('identity_init')})",
    )
    m.add_argument(
        "--query-whitening",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whiten the query (the conditioning input) by the training queries' statistics before it "
        "shifts H_0, so queries that differ only in the order or count they ask for start the memory "
        f"apart (ours; with --query-conditioning; {by_recipe('query_whitening')})",
    )
    o = p.add_argument_group("optimisation")
    o.add_argument("--epochs", type=int, default=None, help=f"epochs (paper: 3-5; {by_recipe('epochs')})")
    o.add_argument("--max-steps", type=int, default=None, help="stop after this many optimizer steps")
    o.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"pairs per optimizer step (split into sub-batches; {by_recipe('batch_size')})",
    )
    o.add_argument(
        "--lr", type=float, default=None, help=f"AdamW learning rate (paper 1e-4; {by_recipe('lr')})"
    )
    o.add_argument("--weight-decay", type=float, default=None, help=f"AdamW ({by_recipe('weight_decay')})")
    o.add_argument("--seed", type=int, default=0)
    o.add_argument("--no-step-loss", action="store_true", help="disable L_step (Eq. 12), Table 6 ablation")
    o.add_argument(
        "--no-distill-loss", action="store_true", help="disable L_distill (Eq. 13), Table 6 ablation"
    )
    o.add_argument(
        "--lambda-step",
        type=float,
        default=None,
        help=f"Eq. 14's weight of L_step ({by_recipe('lambda_step')})",
    )
    o.add_argument(
        "--lambda-distill",
        type=float,
        default=None,
        help=f"Eq. 14's weight of L_distill ({by_recipe('lambda_distill')})",
    )
    o.add_argument(
        "--lambda-clip",
        type=float,
        default=None,
        help="weight of L_clip, the two-stage recipe's distillation of the query-weighted pooling of "
        "the backbone's own clip embeddings into every readout (our addition; training/README.md; "
        f"{by_recipe('lambda_clip')}; 0 = off); needs --scoring conditioned",
    )
    o.add_argument(
        "--no-sub-batching",
        action="store_true",
        help="one homogeneous batch per step instead of interleaved sub-batches with shared negatives",
    )
    o.add_argument(
        "--candidate-negatives",
        choices=("none", "text", "all"),
        default="text",
        help="use each pair's listed candidates as extra negatives: none, text candidates only "
        "(labels/answers, free), or all (video candidates need their own head pass)",
    )
    o.add_argument("--eval-every", type=int, default=0, help="validate every N steps (0: at the end)")
    o.add_argument("--checkpoint-every", type=int, default=50, help="save checkpoint.pt every N steps")
    o.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint.pt in --out")
    o.add_argument(
        "--prepare-only",
        action="store_true",
        help="only encode the feature cache for --data/--val (e.g. before several runs in parallel)",
    )
    g = p.add_argument_group("optional early-exit gate (§A.10), trained after the embedding")
    g.add_argument("--gate-epochs", type=int, default=0, help="train the gate for N epochs (0: no gate)")
    g.add_argument("--gate-lr", type=float, default=1e-3)
    g.add_argument(
        "--gate-data",
        nargs="+",
        default=None,
        metavar="JSONL",
        help="pairs the gate is fitted on, held out from the head's training (e.g. another `make-synthetic "
        "--kind time` seed): on its own training pairs the head agrees with itself early too often, and the "
        "gate learns to exit where held-out queries would not; default: the training pairs",
    )


def resolve_recipe(args: argparse.Namespace):
    """Fill every option left unset from --recipe (training/recipes.py); returns the recipe. The
    recipe's query conditioning applies only to conditioned scoring (a rerank head sees the query)."""
    from qaslr.commands.feature_options import apply_recipe

    recipe = apply_recipe(args)
    if args.query_conditioning is None:
        args.query_conditioning = recipe.query_conditioning and args.scoring == "conditioned"
    apply_recipe(args, RECIPE_FIELDS)
    return recipe


def run(args: argparse.Namespace) -> int:
    import json
    import logging
    from pathlib import Path

    import torch

    from qaslr.commands.feature_options import default_cache, load_task_pairs, open_store
    from training.aggregators import build_model, load_model, save_model
    from training.data import DataError, combine_pair_sets
    from training.trainer import TrainConfig, Trainer

    log = logging.getLogger("qaslr.train")
    resolve_recipe(args)
    if args.lambda_clip > 0 and args.scoring != "conditioned":
        print("error: --lambda-clip needs --scoring conditioned (its teacher weights clips by the query)")
        return 2
    if args.query_conditioning and args.scoring != "conditioned":
        print("error: --query-conditioning needs --scoring conditioned (a rerank head sees the query)")
        return 2
    if not args.prepare_only and not args.out:
        print("error: --out is required (the run's output directory) unless --prepare-only")
        return 2
    out = Path(args.out) if args.out else None
    try:
        train_pairs = combine_pair_sets([load_task_pairs(path, args.tasks) for path in args.data])
        val_pairs = load_task_pairs(args.val, args.tasks) if args.val else []
        gate_pairs = (
            combine_pair_sets([load_task_pairs(path, args.tasks) for path in args.gate_data])
            if args.gate_data
            else []
        )
    except DataError as exc:
        print(f"error: {exc}")
        return 2
    if out is not None and args.fresh and (out / "checkpoint.pt").exists():
        (out / "checkpoint.pt").unlink()
    cache_root = Path(args.cache) if args.cache else default_cache(args.data[0])
    store = open_store(args, train_pairs + val_pairs + gate_pairs, cache_root=cache_root)
    if args.prepare_only:
        print(
            f"feature cache ready: {store.directory} ({len(store.evidence)} items, {len(store.texts)} texts)"
        )
        return 0
    if args.init_head:
        model = load_model(args.init_head)
    else:
        model = build_model(
            args.aggregator,
            hidden_size=store.hidden_size,
            embed_dim=store.embed_dim,
            num_think_tokens=args.think_tokens,
            max_evidence=args.evidence_tokens,
            num_heads=args.heads,
            depth=args.depth,
            init_temperature=args.init_temperature,
            seed=args.seed,
            query_conditioning=args.query_conditioning,
            text_conditioning=args.text_conditioning,
            evidence_sink=args.evidence_sink,
            identity_init=args.identity_init,
            query_whitening=args.query_whitening,
        )
    args.device = str(head_device(args.device))  # recorded in train_args.json as resolved
    model.to(args.device)
    config = TrainConfig(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        seed=args.seed,
        scoring=args.scoring,
        step_loss=not args.no_step_loss,
        distill_loss=not args.no_distill_loss,
        lambda_step=args.lambda_step,
        lambda_distill=args.lambda_distill,
        lambda_clip=args.lambda_clip,
        sub_batching=not args.no_sub_batching,
        candidate_negatives=args.candidate_negatives,
        max_steps=args.max_steps,
        eval_every=args.eval_every,
        checkpoint_every=args.checkpoint_every,
    )
    out.mkdir(parents=True, exist_ok=True)
    recorded = {k: v for k, v in vars(args).items() if not callable(v) and not k.startswith("_")}
    (out / "train_args.json").write_text(
        json.dumps({**recorded, "feature_cache": str(store.directory)}, indent=2) + "\n"
    )
    trainer = Trainer(
        model,
        store,
        train_pairs,
        config=config,
        out_dir=out,
        val_pairs=val_pairs,
        progress=not args.no_progress,
    )
    try:
        metrics = trainer.fit(resume=True)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    save_model(model.cpu(), out / "head")
    print(f"trained {trainer.step} steps; model written to {out / 'head'}")
    if metrics:
        print(
            "validation: "
            + ", ".join(
                f"{k} Hit@1 {v['hit@1']:.3f}"
                for k, v in metrics.items()
                if isinstance(v, dict) and "/" not in k
            )
        )
    if args.gate_epochs > 0:
        from training.gate_training import save_gate, train_gate

        if not gate_pairs:
            log.warning("the gate is fitted on the head's own training pairs (--gate-data: held-out pairs)")
        gate, stats = train_gate(
            model, store, gate_pairs or train_pairs, epochs=args.gate_epochs, lr=args.gate_lr, seed=args.seed,
            scoring=args.scoring, val_pairs=val_pairs,
        )  # fmt: skip
        save_gate(gate, out / "gate")
        print(f"early-exit gate written to {out / 'gate'} ({stats})")
    log.info("done")
    del torch
    return 0
