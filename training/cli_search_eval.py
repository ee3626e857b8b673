"""End-to-end retrieval through the search service's code path (the paper's Table 4 modes).

For each --index NAME=DIR (built by `indexer build`; a one-shot index gives the single-round rows, a
QASLR index built with --head the QASLR rows), every text -> video retrieval query of --data runs
through the same Searcher as POST /search in mode "indexed" (uniform, query-independent) and mode
"rerank" (two-stage: FAISS top-R, then query-aware selection and query-conditioned encoding).
Reports stage-1 recall@R, final Hit@1 (first-stage misses stay misses) and warm-cache latency per query.

Example:
  indexer build /tmp/syn/test_videos.jsonl --index /tmp/idx-oneshot --model /tmp/ckpt --embedder oneshot \\
      --frames 32 --clip-len 4 --max-evidence 64
  indexer build /tmp/syn/test_videos.jsonl --index /tmp/idx-qaslr --model /tmp/ckpt --head /tmp/run/head \\
      --frames 32 --clip-len 4 --max-evidence 64
  qaslr eval-search --data /tmp/syn/test.jsonl --model /tmp/ckpt \\
      --index single-round=/tmp/idx-oneshot --index QASLR=/tmp/idx-qaslr:/tmp/run/head
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "--data", required=True, help="pairs (JSONL); its text -> video retrieval pairs are the queries"
    )
    p.add_argument("--model", required=True, help="backbone the indexes were built with")
    p.add_argument(
        "--index",
        action="append",
        required=True,
        metavar="NAME=DIR[:HEAD_DIR]",
        help="an index directory, with the head directory it was built with for QASLR indexes; repeatable",
    )
    p.add_argument("--shortlist", type=int, default=10, help="R, the stage-1 shortlist (paper 10)")
    p.add_argument("--frames", type=int, default=32, help="K' frames selected per candidate in stage 2")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0, help="selection seed")
    p.add_argument("--json", default=None, help="write the results to this JSON file")


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from training.data import DataError, load_pairs
    from training.end_to_end import evaluate_search

    try:
        pairs = load_pairs(args.data)
    except DataError as exc:
        print(f"error: {exc}")
        return 2
    results = {}
    for spec in args.index:
        name, sep, rest = spec.partition("=")
        if not sep:
            print(f"error: --index must be NAME=DIR[:HEAD_DIR], got {spec!r}")
            return 2
        index, _, head = rest.partition(":")
        if not Path(index).is_dir() or (head and not Path(head).is_dir()):
            print(f"error: not a directory: {index if not Path(index).is_dir() else head}")
            return 2
        results[name] = evaluate_search(
            index=index,
            model=args.model,
            head=head or None,
            pairs=pairs,
            shortlist=args.shortlist,
            frames=args.frames,
            device=args.device,
            seed=args.seed,
        )
    print(
        f"\n{args.data}: text -> video retrieval through the search service (R = {args.shortlist}, K' = {args.frames})"
    )
    print("| Mode | Query-aware | Pre-indexable | Stage-1 R@R | Hit@1 | Latency (s/query) |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| Uniform, {name} | No | Yes | – | {100 * r['indexed']['hit@1']:.1f} | {r['indexed']['latency_s']:.3f} |"
        )
    for name, r in results.items():
        rr = r["rerank"]
        print(
            f"| Two-stage, {name} | Yes | First stage | {100 * rr['stage1_recall@R']:.1f} | "
            f"{100 * rr['hit@1']:.1f} | {rr['latency_s']:.3f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0
