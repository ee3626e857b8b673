"""What a cold query is, for the benchmarks that measure one beside a warm one (bench_cold_warm,
bench_quality ``--cold``, bench_load ``--caches``): emptying an engine's frame cache, a cold pass over
requests, and which requests of a load level met only videos nothing had touched before."""

from __future__ import annotations

import time

import numpy as np


def clear(cache) -> None:
    """Empty an engine's frame cache: the in-process one, or this run's keys in Redis."""
    if hasattr(cache, "clear"):
        cache.clear()
        return
    keys = list(cache._client.scan_iter(match=cache.prefix + "*", count=1000))
    if keys:
        cache._client.delete(*keys)


def cold_warm(engine, requests: list[tuple[dict, str]]) -> dict:
    """Each ``(request, right video)`` cold, then warm, on ``engine`` once warmed up (``Engine.warm_up``,
    as ``qaslr serve`` runs it before ready). *cold*: its frame cache emptied just before (:func:`clear`);
    ``cold_untouched`` is the share whose right video no earlier request of this pass named (what ran on
    ``engine`` before the pass is the caller's to say); *warm*: the same request again at once. Wall ms around
    ``Engine.search_sync``."""
    engine.warm_up()
    ms: dict[str, list[float]] = {"cold": [], "warm": []}
    seen, untouched = set(), []
    for request, right in requests:
        untouched.append(right not in seen)
        seen.add(right)
        clear(engine.cache)
        for kind in ("cold", "warm"):
            t = time.perf_counter()
            engine.search_sync(dict(request))
            ms[kind].append((time.perf_counter() - t) * 1e3)
    cold, warm = (float(np.median(ms[k])) for k in ("cold", "warm"))
    return {
        "cold_p50_ms": cold,
        "warm_p50_ms": warm,
        "cold_over_warm": cold / warm if warm else float("nan"),
        "cold_untouched": float(np.mean(untouched)),
        "cold_warm_ms": {k: [round(x, 1) for x in v] for k, v in ms.items()},
    }


def touched(answer: dict | None) -> set[str]:
    """The videos whose source frames an answer read: those a heavy tier re-encoded, and those whose moment
    was refined at the source's frame rate (the frame tier and the time head read only stored banks)."""
    return {
        r["video_id"]
        for r in (answer or {}).get("results", [])
        if r.get("tier") in ("oneshot", "head")
        or (((r.get("evidence") or {}).get("moment") or {}).get("source") == "refined")
    }


def cold_share(targets: list[set[str]], before: set[str] = frozenset()) -> float:
    """The share of requests (in the order sent) none of whose target videos an earlier request, or what
    ran ``before`` the level, touched: a request's targets are its right video (when the workload has one)
    and the videos its answer read (:func:`touched`); every request sent earlier counts, answered or not."""
    seen, cold = set(before), 0
    for target in targets:
        cold += not (target & seen)
        seen |= target
    return cold / len(targets) if targets else float("nan")


def query_pair(query) -> tuple[str, str | None]:
    """A query as (text, right video or None): QUERIES are texts, the corpus's queries pairs."""
    return (query, None) if isinstance(query, str) else (query[0], query[1])


def cold_order(pairs: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """The queries in turns over their right videos (each video's first query, then each one's second, ...):
    the first requests of a level then target videos no earlier request named."""
    by_video: dict = {}
    for query, right in pairs:
        by_video.setdefault(right if right is not None else query, []).append((query, right))
    turns = max((len(v) for v in by_video.values()), default=0)
    return [v[t] for t in range(turns) for v in by_video.values() if t < len(v)]
