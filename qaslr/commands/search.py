"""Search an index from the command line, through the engine alone (no server): the same engine
object, stages, cascade and moments as ``POST /search``. One query pays for what it uses: no model
processes and no warm-up (``model_processes=0``), so it answers in seconds.

    qaslr search "a red square appears" --index data/index [--model DIR] [--top-k 5] [--mode rerank]
    qaslr search "a red square appears" --index data/index --json     # the whole answer as JSON

Without ``--model`` the backbone is the one the index records (its manifest's ``backbone_id``).
"""

from __future__ import annotations

import argparse

from core.config import DEFAULT_SOURCES, DEFAULT_TOP_K, MAX_TOP_K, SearchMode, Sources


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", help="what to look for, in words")
    p.add_argument("--index", required=True, help="index directory built by `indexer build`")
    p.add_argument(
        "--model", help="backbone hub id or checkpoint directory (default: the one the index records)"
    )
    p.add_argument("--head", help="streaming head directory, for indexes built with one")
    p.add_argument("--rerank-head", help="a streaming head for stage 2's heavy tier")
    p.add_argument("--top-k", type=int, default=DEFAULT_TOP_K, help=f"results (1..{MAX_TOP_K})")
    p.add_argument("--mode", choices=[str(m) for m in SearchMode], default=str(SearchMode.RERANK))
    p.add_argument("--heavy", type=int, help="rerank mode: the frame tier's top this many get the heavy tier")
    p.add_argument("--shortlist", type=int, help="R: stage-1 candidates stage 2 reranks")
    p.add_argument("--min-score", type=float, help="leave out results whose relevance is below this")
    p.add_argument(
        "--sources",
        choices=[str(x) for x in Sources],
        default=str(DEFAULT_SOURCES),
        help="rank by what is seen, what is said (subtitles), or both (default)",
    )
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from core.errors import ConfigurationError
    from engine import EngineConfig, load_engine
    from engine.errors import EngineError

    index = Path(args.index)
    if not (index / "manifest.json").exists():
        print(f"qaslr search: {index} is not an index (no manifest.json); build one with `indexer build`")
        return 2
    # the backbone: --model, else the one the index records (the engine's lowest layer)
    config = EngineConfig(
        index=index, model=args.model, head=args.head, rerank_head=args.rerank_head, model_processes=0
    )
    try:
        engine = load_engine(config)
    except (ConfigurationError, OSError, ValueError) as exc:
        print(f"qaslr search: {exc}")
        return 2
    backend = engine.cache.backend
    request = {"query": args.query, "top_k": args.top_k, "mode": args.mode, "sources": args.sources}
    for name in ("heavy", "shortlist", "min_score"):
        if getattr(args, name) is not None:
            request[name] = getattr(args, name)
    try:
        outcome = engine.search_sync(request)
    except EngineError as exc:
        print(f"qaslr search: {exc}")
        return 2
    finally:
        engine.close()
    if args.json:
        from service.responses import to_response

        print(to_response(outcome, "cli", cache_backend=backend).model_dump_json(indent=2))
        return 0
    print(
        f"{len(outcome.hits)} results for {outcome.query!r} ({outcome.mode}, {outcome.timings_ms['total']:.0f} ms)"
    )
    for rank, hit in enumerate(outcome.hits, 1):
        moment = f"{hit.moment[0]:7.1f}-{hit.moment[1]:.1f} s" if hit.moment else "        –"
        relevance = "–" if hit.relevance is None else f"{hit.relevance:.2f}"
        print(
            f"{rank:3d}. {hit.video_id:<40} relevance {relevance}  moment {moment}  tier {hit.tier or 'stage 1'}"
            + ("" if hit.source == Sources.SEEN else f"  ({hit.source})")
        )
        if hit.spoken is not None:
            print(
                f"       said at {hit.spoken.start_s:.1f}-{hit.spoken.end_s:.1f} s: {hit.spoken.snippet or hit.spoken.text}"
            )
    for warning in outcome.warnings:
        print(f"warning: {warning}")
    return 0
