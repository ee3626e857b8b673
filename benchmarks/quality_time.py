"""Queries about time in benchmarks/bench_quality.py: motion and change, order anywhere, count to
three, each within its pair and over the whole collection, for every mode and for the hand rule.

Per seed a *time collection* is rendered (world.corpus): ``--time-singles`` single-event videos,
``--motion-pairs`` reversal pairs (one changing event forwards and backwards: the same frames),
``--order-pairs`` mirror pairs (A then B / B then A anywhere, 3-60 s apart), ``--count-pairs`` once /
twice and ``--count3-pairs`` twice / three-times pairs, all 2-5 min over grey haystacks, and indexed
once. Every pair video's query is searched

    within its pair   a filter on the pair's ``group``: the share whose right video ranks above its
                      partner (chance 0.5; the partner holds the same frames, or the same events)
    over the collection  no filter: the share whose first result is a video the query is true of
                      (world.meaning: the right video, or another that shows what it asks)
    min_score tells   within the pair again: the share whose right video's shown ``relevance`` reaches
                      MIN_RELEVANCE and whose partner's falls below it (whether ``min_score`` at the
                      documented threshold keeps the right one and cuts the other; the partner shows
                      the same frames or events, so a relevance from frames alone keeps both)

in every mode of the benchmark, and once more as the **hand rule**: the frame tier's ranking
reordered by benchmarks.hand_rule (the strongest free rule over per-frame scores). Each search's
wall time is kept (``time_ms``, the median over the collection searches: the heavy tier's cost).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

TIME_KINDS = ("motion", "order", "count")
RULE = "hand rule over per-frame scores"
TIME_METRICS = tuple(
    [(f"{k}_pair", f"{k} pair %", True) for k in TIME_KINDS]
    + [(f"{k}_all", f"{k} Hit@1 %", True) for k in TIME_KINDS]
    + [(f"{k}_tells", f"{k} min_score tells %", True) for k in TIME_KINDS]
    + [("time_ms", "time p50 ms", False)]
)


def add_arguments(p) -> None:
    p.add_argument("--time-singles", type=int, default=8, help="single-event videos of each time collection")
    p.add_argument(
        "--motion-pairs", type=int, default=7, help="reversal pairs per seed (0: no motion columns)"
    )
    p.add_argument("--order-pairs", type=int, default=5, help="mirror pairs per seed (0: no order columns)")
    p.add_argument("--count-pairs", type=int, default=3, help="once / twice pairs per seed")
    p.add_argument("--count3-pairs", type=int, default=3, help="twice / three-times pairs per seed")
    p.add_argument("--oneshot-moments", type=int, default=0, help="one-shot rows read each candidate's top N "
                   "moments as temporal pairs (engine setting oneshot_moments; 0: Q-Frame's K' frames)")  # fmt: skip


def time_corpus(seed: int, args):
    """The seed's time collection (module docstring), rendered once under the workdir; None when it
    would be empty."""
    from world.corpus import CorpusConfig, make_corpus

    pairs = args.motion_pairs + args.order_pairs + args.count_pairs + args.count3_pairs
    if not pairs:
        return None
    config = CorpusConfig(
        videos=args.time_singles, motion_pairs=args.motion_pairs, order_pairs=args.order_pairs,
        count_pairs=args.count_pairs, count3_pairs=args.count3_pairs, seed=3000 + seed, prefix="t",
        min_duration_s=args.min_s, max_duration_s=args.max_s,
    )  # fmt: skip
    return make_corpus(Path(args.workdir) / f"time-{seed}", config, progress=True)


def _search(engine, query: str, request: dict, n: int, group: str | None):
    req = {**request, "query": query, "top_k": n, "shortlist": n, "include_evidence": False}
    if group is not None:
        req["filter"] = {"group": group}
    if "heavy" in req:  # the shortlist is the pair, or R
        req["heavy"] = min(req["heavy"], n)
    t = time.perf_counter()
    out = engine.search_sync(req)
    return out.hits, (time.perf_counter() - t) * 1e3, out.route


def time_rows(engine, corpus, request: dict, args, *, rule: bool = False) -> dict:
    """The time columns of one mode (its search ``request``), or of the hand rule over the frame
    tier's ranking (``rule``)."""
    from benchmarks.hand_rule import rule_rerank
    from core.config import MIN_RELEVANCE
    from world.meaning import meaning_of

    truth = corpus.by_id()
    rows: dict[str, list[float]] = {k: [] for k, _, _ in TIME_METRICS}
    routes: dict[str, int] = {}
    for kind in TIME_KINDS:
        for query, right in corpus.queries(kind):
            meaning = meaning_of(truth[right])
            group = truth[right].group
            partner = next(v.id for v in corpus.videos if v.group == group and v.id != right)
            for where, n in (("pair", 2), ("all", args.shortlist)):
                hits, ms, route = _search(engine, query, request, n, group if where == "pair" else None)
                if rule:
                    hits, _ = rule_rerank(engine.index, engine.encoder, query, hits)
                ids = [h.video_id for h in hits]
                if where == "pair":
                    if set(ids) != {right, partner}:
                        raise SystemExit(f"a search restricted to the pair {group} found {sorted(ids)}")
                    rows[f"{kind}_pair"].append(float(ids.index(right) < ids.index(partner)))
                    if not rule:  # the hand rule reorders hits and has no relevance of its own
                        shown = {h.video_id: h.relevance for h in hits}
                        rows[f"{kind}_tells"].append(float(
                            shown[right] is not None and shown[right] >= MIN_RELEVANCE
                            and (shown[partner] is None or shown[partner] < MIN_RELEVANCE)))  # fmt: skip
                else:
                    rows[f"{kind}_all"].append(float(bool(ids) and meaning.true_of(truth[ids[0]])))
                    rows["time_ms"].append(ms)
                    key = (route or "frame tier").split(":")[0].split(" (")[0]
                    routes[key] = routes.get(key, 0) + 1
    out = {k: float(np.mean(v)) if v else float("nan") for k, v in rows.items()}
    out["time_ms"] = float(np.median(rows["time_ms"])) if rows["time_ms"] else float("nan")
    out["routes"] = routes
    return out
