"""Train the time head (models/time_head.py): the streaming memory that answers queries about order
("a red square appears, then a blue circle appears") and count ("... appears twice") by reading a
video's frame bank in time order against each event of the query.

By default it renders shapes-world videos (mirror pairs, once / twice pairs, single events; cached
under --workdir), indexes them with the backbone, trains on --train-seeds' renders and measures on
--val-seed's, a render the head never saw. With real weights, train it on your own videos instead:
index them (`indexer build`), write one JSON line per labelled query,

    {"query": "a man opens the door, then a dog runs in", "video": "cam-0412", "partner": "cam-0413"}

("partner", optional: a video with the same events in another order or number) and run
`qaslr train-time-head OUT --model YOUR_BACKBONE --index INDEX --pairs pairs.jsonl`; a share of the
queries (--val-share), or the queries of --held-out, is measured. It reports pair accuracy (right
video above its partner; chance 0.5), Hit@1 over the split, and the Table 5 controls (shuffled, reversed, reset memory, last frame
only). The head's confidence (that a video shows the order or number asked, which a result's relevance
carries) is then fitted on the held-out queries' pairs (training.time_head.calibrate); `--calibrate HEAD`
fits it for a head already trained, its weights untouched, and writes both to OUT.
OUT/time_head.json records the settings and those numbers. The weights shipped in
training/tiny_world/time_head/ are this command with its defaults (training/README.md, "The time
head", gives the time it takes). Serve a head with QASLR_TIME_HEAD=OUT, or put it in a checkpoint's
time_head/ folder, which is served by default."""

from __future__ import annotations

import argparse

from training.time_renders import HELD_OUT_RENDER, HELD_OUT_SEED, TRAIN_RENDER, TRAIN_SEEDS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help="output directory for the head")
    p.add_argument("--model", default=None, help="backbone checkpoint (default: the shipped tiny-world one)")
    p.add_argument("--workdir", default=None, help="renders and indexes, reused by later runs "
                   "(default: qaslr-time-head under the temp directory)")  # fmt: skip
    p.add_argument("--index", default=None, help="train on your own videos: an index built from them "
                   "(with --pairs; nothing is rendered)")  # fmt: skip
    p.add_argument("--pairs", default=None, help="JSON lines of labelled order / count queries over --index "
                   "(the format is above)")  # fmt: skip
    p.add_argument("--held-out", default=None,
                   help="held-out queries over --index in the same format (default: --val-share of --pairs)")  # fmt: skip
    p.add_argument("--val-share", type=float, default=0.25, help="share of --pairs held out when no "
                   "--held-out is given")  # fmt: skip
    p.add_argument("--candidates", type=int, default=64,
                   help="videos of --index each of your queries is ranked against (its own, its partner, others)")  # fmt: skip
    p.add_argument("--head", default=None, help="the streaming head --index was built with, if any")
    p.add_argument("--calibrate", default=None, metavar="HEAD",
                   help="train nothing: fit the confidence of HEAD (a trained time head's folder) on the held-out "
                   "queries and write it with HEAD's weights to OUT")  # fmt: skip
    train, held = TRAIN_RENDER, HELD_OUT_RENDER  # training/time_renders.py
    p.add_argument(
        "--train-seeds", type=int, nargs="+", default=list(TRAIN_SEEDS), help="renders to train on"
    )
    p.add_argument(
        "--val-seed", type=int, default=HELD_OUT_SEED, help="the held-out render measured at the end"
    )
    p.add_argument(
        "--order-pairs", type=int, default=train["order_pairs"], help="mirror pairs per training render"
    )
    p.add_argument(
        "--count-pairs",
        type=int,
        default=train["count_pairs"],
        help="once / twice pairs per training render (<= 32)",
    )
    p.add_argument("--count3-pairs", type=int, default=train["count3_pairs"],
                   help="twice / three-times pairs per training render")  # fmt: skip
    p.add_argument(
        "--singles", type=int, default=train["singles"], help="single-event videos per render (negatives)"
    )
    p.add_argument("--min-s", type=float, default=train["min_s"], help="shortest training video, seconds")
    p.add_argument("--max-s", type=float, default=train["max_s"], help="longest training video, seconds")
    p.add_argument("--val-pairs", type=int, default=held["order_pairs"],
                   help="order and count pairs of the held-out render")  # fmt: skip
    p.add_argument("--val-count3-pairs", type=int, default=held["count3_pairs"],
                   help="twice / three-times pairs of the held-out render")  # fmt: skip
    p.add_argument(
        "--val-singles", type=int, default=held["singles"], help="single-event videos of the held-out render"
    )
    p.add_argument("--val-min-s", type=float, default=held["min_s"], help="shortest held-out video, seconds")
    p.add_argument("--val-max-s", type=float, default=held["max_s"], help="longest held-out video, seconds")
    p.add_argument("--steps", type=int, default=1500, help="optimizer steps")
    p.add_argument("--step-weight", type=float, default=0.0,
                   help="weight of the readouts after 25/50/75 %% of the frames (Eq. 14's step term)")  # fmt: skip
    p.add_argument("--distill-weight", type=float, default=0.0,
                   help="weight of drawing those partial readouts toward the final one (§A.8's "
                   "self-distillation)")  # fmt: skip
    p.add_argument("--hidden", type=int, default=32, help="the memory's size")
    p.add_argument("--peak-inputs", action="store_true",
                   help="also read each event's relevance over its peak in the video (a showing's shape "
                        "whatever its height: white shapes peak lower than coloured ones)")  # fmt: skip
    p.add_argument("--evidence-inputs", action="store_true",
                   help="also read the hand rule's evidence as it streams: per event whether a frame is in a "
                        "showing and how many showings have begun, and an order's best earlier showing of its "
                        "first event with its second (models.time_head.evidence)")  # fmt: skip
    p.add_argument("--rewrite", type=float, default=0.0,
                   help="share of training queries given one more negative: the right video rewritten so that it "
                        "no longer holds what is asked (a showing more or fewer, its two events swapped), over "
                        "the same background (training.time_head.rewritten)")  # fmt: skip
    p.add_argument("--augment", type=float, default=0.5,
                   help="share of training rows given more haystack (up to 3x their frames)")  # fmt: skip
    p.add_argument("--dim", type=float, default=0.0,
                   help="share of training queries with one event shown fainter in every candidate (its "
                        "relevance scaled down by a random factor, training.time_head.dimmed: a white shape on "
                        "grey peaks near half a coloured one)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and of the sampled negatives")
    p.add_argument("--threads", type=int, default=1, help="torch threads")


def run(args: argparse.Namespace) -> int:
    from training.threads import torch_threads

    with torch_threads(args.threads):  # given back after the run (a caller in the same process keeps its own)
        return _train(args)


def _train(args: argparse.Namespace) -> int:
    import tempfile
    import time
    from pathlib import Path

    from core.errors import ConfigurationError
    from indexer.store.format import IndexMismatchError
    from models.backbone import checkpoint_fingerprint
    from models.time_head import load_time_head
    from training.time_head import (
        CONTROLS,
        RULE,
        calibrate,
        evaluate,
        hold_out,
        load_pairs,
        load_split,
        merge,
        save,
        train_time_head,
    )

    if (args.index is None) != (args.pairs is None):
        print("error: --index and --pairs go together: your index and your labelled queries over it")
        return 2
    trained_head = None
    if args.calibrate is not None:
        try:
            trained_head = load_time_head(args.calibrate)
        except ValueError as exc:
            print(f"error: --calibrate: {exc}")
            return 2
    work = Path(args.workdir or Path(tempfile.gettempdir()) / "qaslr-time-head")
    work.mkdir(parents=True, exist_ok=True)
    if args.model:
        model = Path(args.model).resolve()
    else:
        from training.backbone import current_tiny_world_checkpoint

        model = current_tiny_world_checkpoint(work / "tiny-world")
    if trained_head is not None and trained_head.config.backbone not in (None, checkpoint_fingerprint(model)):
        print("error: --calibrate: the head was trained on another backbone than --model's "
              f"({trained_head.config.backbone}, not {checkpoint_fingerprint(model)})")  # fmt: skip
        return 2
    t0 = time.perf_counter()
    if args.pairs is not None:
        index, head_dir = Path(args.index), Path(args.head) if args.head else None
        try:
            train = load_pairs(index, Path(args.pairs), model, candidates=args.candidates, seed=args.seed,
                               head_dir=head_dir)  # fmt: skip
            if args.held_out:
                val = load_pairs(index, Path(args.held_out), model, candidates=args.candidates,
                                 seed=args.seed + 1, head_dir=head_dir)  # fmt: skip
            else:
                train, val = hold_out(train, args.val_share, seed=args.seed)
        except (ValueError, ConfigurationError, IndexMismatchError, OSError) as exc:
            print(f"error: {exc}")  # a query that does not parse, a video or model the index lacks
            return 2
    else:
        lengths = {"min_s": args.min_s, "max_s": args.max_s}
        train = merge([
            load_split(work, seed, model, order_pairs=args.order_pairs, count_pairs=args.count_pairs,
                       count3_pairs=args.count3_pairs, singles=args.singles, **lengths)
            for seed in ([] if trained_head is not None else args.train_seeds)
        ])  # fmt: skip
        val = load_split(work, args.val_seed, model, order_pairs=args.val_pairs, count_pairs=args.val_pairs,
                         count3_pairs=args.val_count3_pairs, singles=args.val_singles, min_s=args.val_min_s,
                         max_s=args.val_max_s)  # fmt: skip
    data_s = time.perf_counter() - t0
    print(f"data: {len(train.queries)} training queries, {len(val.queries)} held-out ({data_s:.0f} s)")
    if trained_head is not None:
        on = (f"the held-out queries of {Path(args.held_out or args.pairs).name}" if args.pairs is not None
              else f"the held-out render, seed {args.val_seed}")  # fmt: skip
        return _calibrate_only(trained_head, val, Path(args.out), data_s, on)
    t1 = time.perf_counter()
    head = train_time_head(train, steps=args.steps, step_weight=args.step_weight,
                           distill_weight=args.distill_weight, hidden=args.hidden,
                           peak_inputs=args.peak_inputs, seed=args.seed, augment=args.augment, dim=args.dim,
                           evidence_inputs=args.evidence_inputs, rewrite=args.rewrite, val=val)  # fmt: skip
    train_s = time.perf_counter() - t1
    measured = evaluate(head, val, (*CONTROLS, RULE))
    try:
        calibration = {"on": "the held-out queries", "fitted": calibrate(head, val)}
        print(_calibrated(calibration["fitted"]))
    except ValueError as exc:  # held-out queries without partners: served without a confidence
        calibration = {"skipped": str(exc)}
        print(f"not calibrated: {exc}")
    print(f"{'held-out':<18} {'pair':>6} {'order':>6} {'count':>6} {'Hit@1':>6}")
    for control, m in measured.items():
        print(f"{control:<18} {m['pair']:6.3f} {m['order']:6.3f} {m['count']:6.3f} {m['hit@1']:6.3f}")
    settings = {
        k: v for k, v in vars(args).items()
        if k not in ("out", "model", "workdir", "index", "pairs", "held_out", "head", "_run", "log_level")
    }  # fmt: skip
    if args.pairs is not None:  # the data is the user's: record its name, not its machine path
        settings["pairs"] = Path(args.pairs).name
    trained = {
        "command": "qaslr train-time-head",
        "settings": settings,
        "train_queries": len(train.queries),
        "data_s": round(data_s, 1),
        "train_s": round(train_s, 1),
        "held_out": measured,
        "calibration": calibration,
    }
    out = save(head, Path(args.out), backbone=checkpoint_fingerprint(model), trained=trained)
    print(f"time head written to {out} (data {data_s:.0f} s, training {train_s:.0f} s)")
    return 0


def _calibrated(record: dict) -> str:
    lines = [
        f"  {c:<8} not calibrated on {r['pairs']} pairs: {r['skipped']}" if "skipped" in r
        else f"  {c:<8} a {r['a']:.3f} b {r['b']:+.3f} on {r['pairs']} pairs: separates {r['separated']:.3f}, "
        f"log loss {r['log_loss']:.3f}"
        for c, r in record.items()
    ]  # fmt: skip
    return "confidence on the held-out pairs, sigmoid(a y_T + b) per condition:\n" + "\n".join(lines)


def _calibrate_only(head, val, out, data_s: float, on: str) -> int:
    """--calibrate: the trained head's confidence fitted on ``val``, written with its weights to ``out``
    beside what its training recorded."""
    from training.time_head import calibrate, save

    try:
        record = calibrate(head, val)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    print(_calibrated(record))
    calibration = {"command": "qaslr train-time-head OUT --calibrate HEAD", "on": on, "fitted": record,
                   "data_s": round(data_s, 1)}  # fmt: skip
    save(
        head, out, backbone=head.config.backbone, trained={**head.config.trained, "calibration": calibration}
    )
    print(f"time head with its confidence written to {out}")
    return 0
