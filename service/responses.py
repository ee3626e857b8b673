"""Search answers: an engine :class:`engine.searcher.SearchOutcome` shaped into the API's schema."""

from __future__ import annotations

from service.paging import MAX_OFFSET, encode_page_token
from service.schemas import (
    CacheStats,
    Evidence,
    EvidenceFrame,
    Moment,
    SearchResponse,
    SearchResult,
    Timeline,
    TimelinePoint,
    Timings,
)


def to_result(hit, clip=None) -> SearchResult:
    """One result: a video (``hit``), or with ``clip`` (group_by clip) one moment of it."""
    evidence = None
    if clip is not None:
        evidence = Evidence(
            frames=[
                EvidenceFrame(frame_index=e.frame_index, timestamp_s=e.timestamp_s, relevance=e.relevance)
                for e in clip.evidence
            ],
            moment=Moment(start_s=clip.moment[0], end_s=clip.moment[1], source="relevance"),
        )
    elif hit.evidence is not None:
        evidence = Evidence(
            frames=[
                EvidenceFrame(frame_index=e.frame_index, timestamp_s=e.timestamp_s, relevance=e.relevance)
                for e in hit.evidence
            ],
            moment=Moment(start_s=hit.moment[0], end_s=hit.moment[1], source=hit.moment_source)
            if hit.moment is not None
            else None,
        )
    timeline = None
    if hit.timeline is not None:
        timeline = Timeline(
            source=hit.timeline.source,
            points=[TimelinePoint(start_s=a, end_s=b, value=v) for a, b, v in hit.timeline.points],
        )
    record = hit.record
    return SearchResult(
        video_id=hit.video_id,
        score=clip.score if clip is not None else hit.score,
        stage1_score=hit.stage1_score,
        stage1_rank=hit.stage1_rank,
        reranked=hit.reranked,
        clips_used=hit.clips_used,
        clips_planned=hit.clips_planned,
        duration_s=getattr(record, "duration_s", None),
        metadata=getattr(record, "metadata", None) or {},
        evidence=evidence,
        video_score=hit.score if clip is not None else None,
        timeline=timeline,
        tier=hit.tier,
        relevance=clip.relevance if clip is not None else hit.relevance,
    )


def to_response(result, request_id: str, *, cache_backend: str, digest: str | None = None) -> SearchResponse:
    if result.clips is not None:
        results = [to_result(c.hit, c) for c in result.clips]
    else:
        results = [to_result(hit) for hit in result.hits]
    next_token = None
    if result.more and digest is not None and result.offset + result.shortlist <= MAX_OFFSET:
        next_token = encode_page_token(result.offset + result.shortlist, digest)
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
            store_frames=result.store_frames,
            decoded_frames=result.decoded_frames,
            errors=result.cache_errors,
            store_errors=result.store_errors,
        ),
        warnings=result.warnings,
        group_by="clip" if result.clips is not None else "video",
        page_start=result.offset + 1,
        next_page_token=next_token,
    )
