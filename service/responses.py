"""Search answers: an engine :class:`engine.results.SearchOutcome` shaped into the API's schema."""

from __future__ import annotations

from service.paging import MAX_OFFSET, encode_page_token
from service.schemas import (
    CacheStats,
    Evidence,
    EvidenceFrame,
    Moment,
    SearchResponse,
    SearchResult,
    Spoken,
    Timeline,
    TimelinePoint,
    Timings,
)


def _spoken(match, cue=None) -> Spoken | None:
    """The cue that matched: a video's best (``match``), or with ``cue`` one of its cues (a clip)."""
    if match is None:
        return None
    if cue is None:
        text, snippet, highlights, start, end = (
            match.text,
            match.snippet,
            match.highlights,
            match.start_s,
            match.end_s,
        )
        score, coverage = match.score, match.coverage
    else:
        text, snippet, highlights = cue["text"], cue.get("snippet", cue["text"]), cue.get("highlights", [])
        start, end, score, coverage = cue["start_s"], cue["end_s"], -cue["bm25"], cue.get("coverage", 0.0)
    return Spoken(
        text=text, snippet=snippet or text, highlights=list(highlights), start_s=start, end_s=end,
        rank=match.rank, score=score, coverage=coverage,
    )  # fmt: skip


def to_result(hit, clip=None) -> SearchResult:
    """One result: a video (``hit``), or with ``clip`` (group_by clip) one moment of it."""
    evidence = None
    if clip is not None:
        evidence = Evidence(
            frames=[
                EvidenceFrame(frame_index=e.frame_index, timestamp_s=e.timestamp_s, relevance=e.relevance)
                for e in clip.evidence
            ],
            moment=Moment(
                start_s=clip.moment[0],
                end_s=clip.moment[1],
                source="cue" if getattr(clip, "source", "seen") == "said" else "relevance",
            ),
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
        events_relevance=None if clip is not None else getattr(hit, "events_relevance", None),
        source=getattr(clip if clip is not None else hit, "source", "seen"),
        spoken=_spoken(hit.spoken, clip.cue) if clip is not None and clip.cue else
        None if clip is not None else _spoken(getattr(hit, "spoken", None)),
        seen_score=None if clip is not None else getattr(hit, "seen_score", None),
    )  # fmt: skip


def to_response(
    result, request_id: str, *, cache_backend: str, digest: str | None = None, start: int = 1
) -> SearchResponse:
    if result.clips is not None:
        results = [to_result(c.hit, c) for c in result.clips]
    else:
        results = [to_result(hit) for hit in result.hits]
    next_token = None  # the next page starts where this one ended (engine.search.searcher)
    following = getattr(result, "next_offset", None)
    if (
        following is not None
        and digest is not None
        and following <= MAX_OFFSET
        and result.next_skip <= MAX_OFFSET
    ):
        next_token = encode_page_token(following, result.next_skip, start + len(results), digest)
    return SearchResponse(
        request_id=request_id,
        query=result.query,
        mode=result.mode,
        embedder=result.embedder,
        rerank_embedder=result.rerank_embedder,
        route=result.route,
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
        sources=getattr(result, "sources", "seen"),
        page_start=start,
        next_page_token=next_token,
    )
