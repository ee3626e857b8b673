"""The ``qaslr`` command: everything except the index (which is ``indexer``).

Each subcommand is a module of :mod:`qaslr.commands` exposing
``add_arguments(parser)`` and ``run(args) -> int``; heavy imports happen inside ``run`` so that
``qaslr --help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from core.logs import configure_logging

# name -> (module, one-line help). Modules are imported when the parser is built; they must keep
# their top level light (argparse only).
COMMANDS: dict[str, tuple[str, str]] = {
    "make-checkpoint": (
        "qaslr.commands.make_checkpoint",
        "write a Qwen3-VL-Embedding-shaped checkpoint (tiny-world: trained; tiny, 2b, 8b: random)",
    ),
    "train-backbone": (
        "qaslr.commands.train_backbone",
        "train the tiny-world backbone on the shapes world (reproduces the shipped weights)",
    ),
    "make-head": ("qaslr.commands.make_head", "write a randomly initialised streaming head for a backbone"),
    "serve": (
        "qaslr.commands.serve",
        "run the search API (POST /search, /videos, /healthz, /readyz, /metrics)",
    ),
    "search": ("qaslr.commands.search", "search an index from the command line (no server needed)"),
    "demo": ("qaslr.commands.demo", "the main job: sample videos, index them and serve search"),
    "make-synthetic": (
        "qaslr.commands.make_synthetic",
        "write shapes-world training data (task pairs, or long-video retrieval pairs)",
    ),
    "train-time-head": (
        "qaslr.commands.train_time_head",
        "train the time head that answers order and count queries (reproduces the shipped one)",
    ),
    "train-rerank-head": (
        "qaslr.commands.train_rerank_head",
        "train the rerank head for motion, order and count queries (reproduces the shipped one)",
    ),
    "train": ("qaslr.commands.train", "train a streaming head on query-positive pairs (QASLR recipe)"),
    "eval": ("qaslr.commands.eval", "evaluate heads: Hit@k, QA accuracy, Recall@k, checkpoints, controls"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qaslr",
        description="QASLR long-video retrieval: checkpoints, the search API, training and evaluation. "
        "Index commands are under `indexer`.",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (DEBUG, INFO, WARNING, ...)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip())
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
