"""benchmarks/bench_quality.py's command line, in one place: the benchmark parses it, and
scripts/results.py reads its defaults to print each recorded run's command (only the flags that
differ from them)."""

from __future__ import annotations

import argparse

from benchmarks.quality_time import add_arguments as add_time_arguments
from core.config import DEFAULT_HEAVY, DEFAULT_TEXT_CONDITIONING


def parser(description: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--videos", type=int, default=32, help="single-event videos per corpus (1-32)")
    add_time_arguments(p)
    p.add_argument("--min-s", type=float, default=120.0)
    p.add_argument("--max-s", type=float, default=300.0)
    p.add_argument("--frames", type=int, default=32, help="K': stage-2 frames per candidate")
    p.add_argument(
        "--legacy-bank", type=int, default=0, metavar="C",
        help="also index with at most C bank frames per video (the policy before: 256) and add its frame-tier "
        "and cascade rows (0: off)",
    )  # fmt: skip
    p.add_argument("--shortlist", type=int, default=10, help="R")
    p.add_argument(
        "--heavy", type=int, nargs="+", default=[1, 2, DEFAULT_HEAVY],
        help="cascade rows: the heavy tier on the frame tier's top H (one row each; R is always a row)",
    )  # fmt: skip
    p.add_argument(
        "--conditioning",
        nargs="+",
        default=[str(DEFAULT_TEXT_CONDITIONING)],
        choices=["none", "after", "before"],
        help="one-shot stage 2: where the query text goes (one row each)",
    )
    p.add_argument(
        "--no-checkpoint-head",
        action="store_true",
        help="leave out the rows of the head the checkpoint ships (the tiny-world checkpoint's, served by "
        "default; otherwise measured as --rerank-head shipped=MODEL/rerank_head)",
    )
    p.add_argument(
        "--rerank-head",
        action="append",
        default=[],
        metavar="[NAME=]DIR",
        help="a two-stage head, or a `qaslr train` output directory holding head/ (and gate/: adds early-exit "
        "rows); repeatable, one two-stage QASLR row each",
    )
    p.add_argument(
        "--before-head", default=None, metavar="DIR",
        help="one more default row: the rerank head in DIR (its router) served with the tie margin before "
        "(0.05), the default before the router was fitted on the world's texts (training.router_texts)",
    )  # fmt: skip
    p.add_argument(
        "--time-head", default=None, metavar="DIR",
        help="a time head (`qaslr train-time-head`) for the order and count queries: one row (default: the "
        "shipped training/tiny_world/time_head with the tiny-world backbone; 'none': no row)",
    )  # fmt: skip
    p.add_argument(
        "--order-event-weight", type=float, nargs="+", default=[], metavar="W",
        help="one more default row per --rerank-head and weight: an order read by a head that reads the query's "
        "words scores q · z_T + W · its weaker event's best frame (engine.config order_event_weight)",
    )  # fmt: skip
    p.add_argument(
        "--order-windows",
        nargs="+",
        default=[],
        choices=["events", "query"],
        help="one more default row per --rerank-head and value: where such a head cuts an order's moments (its "
        "events' best frames, or the selection query's; engine.config order_windows)",
    )
    p.add_argument(
        "--cold", action=argparse.BooleanOptionalAction, default=True,
        help="stage 1 and the default: each query also cold (frame cache emptied, its video first in this pass; "
        "the one pass before met it) and warm (the same query again), p50 of each; --no-cold skips it (2 searches a query)",
    )  # fmt: skip
    p.add_argument("--exit-threshold", type=float, nargs="+", default=[0.9], help="gate thresholds eta")
    p.add_argument("--index-head", default=None, help="an indexable head (adds the uniform QASLR row)")
    p.add_argument(
        "--model-processes", type=int, default=-1,
        help="every engine's model processes (engine.config model_processes; -1, the served default: auto); 0 "
        "runs the backbone in this process, which changes the timings, not the rankings",
    )  # fmt: skip
    p.add_argument("--model", default=None, help="backbone directory (default: the shipped tiny-world)")
    p.add_argument("--workdir", default=None, help="cache for corpora, checkpoint and indexes")
    p.add_argument("--json", default=None, help="write the results here")
    return p


def defaults() -> dict:
    """Every option's default, by its ``dest``."""
    return vars(parser().parse_args([]))
