"""``POST /search``: validate, hand the search to the model worker, shape the answer."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request

from service.auth import require_api_key
from service.errors import ApiError
from service.schemas import (
    CacheStats,
    ErrorResponse,
    Evidence,
    EvidenceFrame,
    Moment,
    SearchRequest,
    SearchResponse,
    SearchResult,
    Timings,
)
from service.searcher import DeadlineExceeded, InvalidRequest
from service.state import AppState, get_state
from service.worker import QueueFull, WorkerTimeout

router = APIRouter(tags=["search"], dependencies=[Depends(require_api_key)])


@router.post(
    "/search",
    response_model=SearchResponse,
    summary="Two-stage text-to-video search",
    description="Stage 1 ranks the index by q·v_j (FAISS); in `rerank` mode stage 2 re-scores the top "
    "`shortlist` candidates with query-aware frame selection and query-conditioned encoding (QASLR §A.4).",
    responses={
        401: {"model": ErrorResponse},
        413: {"model": ErrorResponse, "description": "the request body is larger than 64 KiB"},
        422: {"model": ErrorResponse, "description": "invalid request, or a body that is not UTF-8 JSON"},
        429: {"model": ErrorResponse, "description": "the search queue is full"},
        503: {"model": ErrorResponse, "description": "not ready yet, or the request deadline passed"},
    },
)
async def search(
    body: SearchRequest, request: Request, state: AppState = Depends(get_state)
) -> SearchResponse:
    request.state.search_mode = body.mode
    engine = state.require_engine()
    searcher = engine.searcher
    try:
        params = searcher.resolve(body)
    except InvalidRequest as exc:
        raise ApiError(422, "validation_error", str(exc), field=exc.field) from None
    timeout = state.settings.request_timeout_s
    admitted = time.perf_counter()
    deadline = time.monotonic() + timeout

    def job():
        queued_ms = (time.perf_counter() - admitted) * 1e3
        result = searcher.search(params, deadline=deadline)
        result.timings_ms["queue"] = queued_ms
        return result

    try:
        result = await state.worker.run(job, timeout=timeout)
    except QueueFull:
        state.metrics.rejected.labels("queue_full").inc()
        raise ApiError(
            429,
            "queue_full",
            f"the search queue is full ({state.worker.capacity} searches in progress); retry shortly",
            headers={"Retry-After": "1"},
        ) from None
    except (WorkerTimeout, DeadlineExceeded):
        state.metrics.rejected.labels("deadline").inc()
        raise ApiError(
            503,
            "deadline_exceeded",
            f"the search did not finish within the {timeout:g} s deadline (the server is busy or the request "
            "is large: try again, or lower shortlist/frames)",
            headers={"Retry-After": "5"},
        ) from None
    except InvalidRequest as exc:
        raise ApiError(422, "validation_error", str(exc), field=exc.field) from None
    state.metrics.observe_search(result)
    return to_response(result, request.state.request_id, cache_backend=engine.cache.backend)


def to_response(result, request_id: str, *, cache_backend: str) -> SearchResponse:
    results = []
    for hit in result.hits:
        evidence = None
        if hit.evidence is not None:
            evidence = Evidence(
                frames=[
                    EvidenceFrame(frame_index=e.frame_index, timestamp_s=e.timestamp_s, relevance=e.relevance)
                    for e in hit.evidence
                ],
                moment=Moment(start_s=hit.moment[0], end_s=hit.moment[1], source=hit.moment_source)
                if hit.moment is not None
                else None,
            )
        record = hit.record
        results.append(
            SearchResult(
                video_id=hit.video_id,
                score=hit.score,
                stage1_score=hit.stage1_score,
                stage1_rank=hit.stage1_rank,
                reranked=hit.reranked,
                clips_used=hit.clips_used,
                clips_planned=hit.clips_planned,
                duration_s=getattr(record, "duration_s", None),
                metadata=getattr(record, "metadata", None) or {},
                evidence=evidence,
            )
        )
    return SearchResponse(
        request_id=request_id,
        query=result.query,
        mode=result.mode,
        embedder=result.embedder,
        rerank_embedder=result.rerank_embedder,
        shortlist=result.shortlist,
        frames=result.frames,
        results=results,
        timings_ms=Timings(**{k: round(v, 3) for k, v in result.timings_ms.items()}),
        cache=CacheStats(
            backend=cache_backend,
            hits=result.cache_hits,
            misses=result.cache_misses,
            decoded_frames=result.decoded_frames,
            errors=result.cache_errors,
        ),
        warnings=result.warnings,
    )
