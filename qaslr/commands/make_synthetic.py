"""Write a shapes-world data set for CPU training and evaluation (docs/shapes-world.md).

--kind tasks (default): grey haystack videos, each with two brief coloured-shape events ("a red
square appears") at known times, in mirror pairs (same two events, opposite order). Writes
OUT/videos/*.mp4, OUT/{train,val,test}.jsonl (retrieval, ordered retrieval, moment, classification
and QA pairs in the `qaslr train` format) and OUT/synthetic.json (ground truth).

--kind retrieval: long videos (--min-duration/--max-duration, default 90-240 s) with one brief event
each (the benchmark's conditions) in corpora of 32 distinct events, plus mirror pairs for ordered
queries (--order-pairs) and once / twice pairs for count queries (--count-pairs: "a red square
appears once" / "... twice", the showings 20 s apart, so videos of at least 36 s); each such query
has its pair partner among its candidates. OUT/{train,val,test}.jsonl hold text -> video pairs with
bounded candidate sets of hard and random negatives (what a first stage hands to stage 2): the data
of `qaslr train --recipe two-stage`.

--kind time: what stage 2 hands a rerank head for order and count queries, rendered directly (the
data the shipped tiny-world rerank head is trained on, training/time_set.py): videos of 32 frames
spread over 1-5 min, in families that share a haystack and differ only in time structure (A then B
/ B then A / A alone / B alone; A once / A twice; one event), --families of each kind in train and
--val-families in val. Writes OUT/{train,val}.jsonl and OUT/videos/.

The splits share no video.

Example:  qaslr make-synthetic /tmp/syn --train-videos 96 --val-videos 16 --test-videos 32 --seed 0
          qaslr make-synthetic /tmp/ret --kind retrieval --seed 0
          qaslr make-synthetic /tmp/time --kind time --seed 0
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    from training.synthetic import RetrievalSetConfig, SyntheticConfig

    d = SyntheticConfig()
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("out", help="output directory")
    p.add_argument(
        "--kind", choices=("tasks", "retrieval", "time"), default="tasks", help="which data set (above)"
    )
    p.add_argument("--train-videos", type=int, default=d.train_videos, help="even (mirror pairs)")
    p.add_argument("--val-videos", type=int, default=d.val_videos)
    p.add_argument("--test-videos", type=int, default=d.test_videos)
    p.add_argument("--size", type=int, default=d.size, help="frame side in pixels (tiny backbone: 64)")
    p.add_argument("--fps", type=float, default=d.fps)
    p.add_argument("--min-duration", type=float, default=None, help="seconds (default: by --kind)")
    p.add_argument("--max-duration", type=float, default=None, help="seconds (default: by --kind)")
    p.add_argument("--windows", type=int, default=d.windows, help="moment-retrieval windows per video")
    p.add_argument(
        "--candidates", type=int, default=d.candidates, help="video candidates per retrieval query"
    )
    p.add_argument(
        "--corpora",
        type=int,
        nargs=3,
        default=None,
        metavar=("TRAIN", "VAL", "TEST"),
        help="--kind retrieval: corpora of 32 long videos per split (default 5 1 1); a split given 0 "
        "is not rendered or written",
    )
    r = RetrievalSetConfig()
    p.add_argument(
        "--order-pairs", type=int, default=r.order_pairs, help="--kind retrieval: mirror pairs per split"
    )
    p.add_argument(
        "--count-pairs",
        type=int,
        default=r.count_pairs,
        help="--kind retrieval: once / twice pairs per split (0-32; 0: no count queries)",
    )
    from training.time_set import TimeSetConfig

    p.add_argument(
        "--families",
        type=int,
        default=TimeSetConfig().order_families[0],
        help="--kind time: training families of each kind (order, count, single)",
    )
    p.add_argument(
        "--val-families",
        type=int,
        default=TimeSetConfig().order_families[1],
        help="--kind time: validation families of each kind",
    )
    p.add_argument("--seed", type=int, default=d.seed)


def _write(out: str, config, make) -> int:
    """Build the set's config (``config()``), refusing a bad one with its message (exit 2), then write
    the set with ``make(out, config)`` and print each split's file."""
    try:
        built = config()
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    for split, path in make(out, built).items():
        print(f"{split}: {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    from training.synthetic import RetrievalSetConfig, SyntheticConfig, make_retrieval_set, make_synthetic

    if args.kind == "time":
        from training.time_set import TimeSetConfig, make_time_set

        n = (args.families, args.val_families)
        return _write(
            args.out,
            lambda: TimeSetConfig(order_families=n, count_families=n, singles=n, seed=args.seed),
            make_time_set,
        )
    if args.kind == "retrieval":
        d = RetrievalSetConfig()
        splits = ("train_corpora", "val_corpora", "test_corpora")
        corpora = dict(zip(splits, args.corpora, strict=True)) if args.corpora else {}
        return _write(
            args.out,
            lambda: RetrievalSetConfig(
                min_duration_s=args.min_duration or d.min_duration_s,
                max_duration_s=args.max_duration or d.max_duration_s,
                candidates=args.candidates
                if args.candidates != SyntheticConfig().candidates
                else d.candidates,
                order_pairs=args.order_pairs,
                count_pairs=args.count_pairs,
                seed=args.seed,
                **corpora,
            ),
            make_retrieval_set,
        )
    d = SyntheticConfig()
    return _write(
        args.out,
        lambda: SyntheticConfig(
            train_videos=args.train_videos,
            val_videos=args.val_videos,
            test_videos=args.test_videos,
            size=args.size,
            fps=args.fps,
            min_duration_s=args.min_duration or d.min_duration_s,
            max_duration_s=args.max_duration or d.max_duration_s,
            windows=args.windows,
            candidates=args.candidates,
            seed=args.seed,
        ),
        make_synthetic,
    )
