"""End-to-end retrieval through the search service's own code path (paper Table 4, §A.4).

For an index built by `indexer build` and the text -> video retrieval pairs of a JSONL file, run every
query through ``service.engine.load_engine(settings).searcher.search`` — exactly what ``POST /search``
runs — in two modes:

    mode "indexed": uniform, query-independent embeddings only (stage 1 = the final ranking)
    mode "rerank":  stage 1 FAISS top-R, then query-aware selection + query-conditioned encoding
                    of each shortlisted video and reranking (two-stage)

With a one-shot index these are the paper's single-round rows, with a QASLR index (built with a
trained head) its QASLR rows. Reported per mode: stage-1 recall@R (the positive is in the shortlist),
final Hit@1 (a stage-1 miss counts as a miss), and warm-cache latency per query (a first pass over
all queries fills the frame cache; the second pass is timed).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from training.data import Pair

logger = logging.getLogger(__name__)


def retrieval_queries(pairs: Sequence[Pair]) -> list[tuple[str, str]]:
    """(query text, positive video path) of the text -> whole-video retrieval pairs."""
    out = []
    for p in pairs:
        v = p.positive.video
        if (
            p.task == "retrieval"
            and p.query.video is None
            and v is not None
            and v.start_s is None
            and v.end_s is None
        ):
            out.append((p.query.text, os.path.realpath(v.path)))
    return out


def evaluate_search(
    *,
    index: str | os.PathLike,
    model: str,
    head: str | os.PathLike | None,
    pairs: Sequence[Pair],
    modes: Sequence[str] = ("indexed", "rerank"),
    shortlist: int = 10,
    frames: int = 32,
    device: str = "auto",
    seed: int = 0,
) -> dict:
    from service.engine import load_engine
    from service.settings import Settings

    settings = Settings(
        index=Path(index),
        model=model,
        head=Path(head) if head else None,
        device=device,
        redis_url=None,
        default_shortlist=shortlist,
        default_frames=frames,
        max_frames=max(frames, 128),
        selection_seed=seed,
    )
    engine = load_engine(settings)
    try:
        searcher = engine.searcher
        by_path = {os.path.realpath(r.path): r.id for r in engine.index.videos()}
        queries = retrieval_queries(pairs)
        missing = sorted({path for _, path in queries if path not in by_path})
        if missing:
            raise ValueError(f"{len(missing)} positive videos are not in the index, e.g. {missing[0]}")
        results = {"embedder": searcher.embedder, "videos": len(by_path), "queries": len(queries)}
        for mode in modes:
            request = {
                "mode": mode,
                "shortlist": shortlist,
                "top_k": shortlist,
                "frames": frames,
                "include_evidence": False,
            }
            for text, _ in queries:  # warm-up pass: fills the frame cache (the paper's warm cache)
                searcher.search({**request, "query": text})
            recall, hit1, latency = [], [], []
            for text, path in queries:
                res = searcher.search({**request, "query": text})
                ids = [h.video_id for h in res.hits]
                positive = by_path[path]
                recall.append(positive in ids)
                hit1.append(bool(ids) and ids[0] == positive)
                latency.append(res.timings_ms["total"] / 1e3)
            results[mode] = {
                "stage1_recall@R": float(np.mean(recall)),
                "hit@1": float(np.mean(hit1)),
                "latency_s": float(np.mean(latency)),
                "latency_p95_s": float(np.percentile(latency, 95)),
                "R": shortlist,
                "frames": frames,
            }
            logger.info("%s / %s: %s", searcher.embedder, mode, results[mode])
        return results
    finally:
        engine.close()
