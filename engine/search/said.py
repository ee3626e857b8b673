"""What is said, as stages of a search (engine.spoken ranks and fuses; these put it in the search).

- ``sources=said`` (:func:`said_window`): the page's window of the spoken ranking, scored by BM25
  (-bm25); no stage 1 or 2.
- ``sources=both``: after stage 1, :func:`join` takes the page's spoken window (a video an earlier
  page showed through speech is not shown again) and makes hits of the spoken videos outside the
  visual window; after stage 2, :func:`fuse_hits` fuses the two rankings and :func:`fuse_page_clips`
  the clips (engine.spoken.fusion). Progress updates are fused on copies: the tiers keep their scores.
"""

from __future__ import annotations

import copy

import numpy as np

from core.config import Sources
from engine.results import Hit
from engine.search.evidence import Evidence
from engine.search.state import SearchState
from engine.spoken import fuse, fuse_clips, spoken_page

__all__ = ["fuse_hits", "fuse_page_clips", "join", "said_window"]


def said_window(state: SearchState, index, evidence: Evidence, *, fusion: str) -> list:
    """``sources=said``: this window of the spoken ranking (its clips with group_by clip, else its
    hits), each with its relevance; ``state.outcome.more`` says whether another window follows."""
    p, outcome, q_vec = state.params, state.outcome, state.q_vec
    with state.clock.stage("spoken"):
        page = spoken_page(index, p.query, offset=p.offset, size=p.shortlist, allowed=state.allowed)
    hits = [] if page is None else spoken_hits(index, page, set(), q_vec)
    for hit in hits:
        hit.spoken = page.ranking[hit.video_id]
        hit.score, hit.source = hit.spoken.score, Sources.SAID
    outcome.more = page is not None and page.more
    evidence.relevance(q_vec, hits)
    if p.group_by != "clip":
        return hits
    if page is None:
        return []
    clips = fuse_clips([], page, hits, rule=fusion,
                       make_clip=lambda h, cue: evidence.cue_clip(p, q_vec, h, cue))  # fmt: skip
    for clip in clips:
        clip.score = -clip.cue["bm25"]
    return clips


def join(state: SearchState, index, evidence: Evidence, *, fusion: str) -> None:
    """``sources=both``, after stage 1: the page's spoken side (``state.spoken``), when the query
    has words to look for."""
    p = state.params
    with state.clock.stage("spoken"):
        page = spoken_page(index, state.said_text, offset=p.offset, size=p.shortlist, allowed=state.allowed,
                           shown=state.shown, visual_ids=[h.video_id for h in state.hits])  # fmt: skip
    if page is None:
        return
    # videos an earlier page showed through speech are not shown again
    state.hits = [h for h in state.hits if h.video_id not in page.earlier]
    state.outcome.more = state.outcome.more or page.more
    state.spoken = page
    state.spoken_only = spoken_hits(index, page, {h.video_id for h in state.hits}, state.q_vec)
    state.on_update = _fused_updates(state, evidence, fusion)


def fuse_hits(state: SearchState, evidence: Evidence, *, fusion: str) -> None:
    """``sources=both``, after stage 2: the page's hits in their fused order."""
    if state.spoken is None:
        return
    q_vec = state.q_vec
    with state.clock.stage("spoken"):
        state.hits = fuse(state.hits, state.spoken_only, state.spoken, rule=fusion, offset=state.params.offset,
                          relevance_of=lambda h: evidence.visual_relevance(q_vec, h))  # fmt: skip


def fuse_page_clips(state: SearchState, clips: list, evidence: Evidence, *, fusion: str) -> list:
    """``sources=both``, group_by clip: the visual ``clips`` fused with the page's cues."""
    if state.spoken is None:
        return clips
    p, q_vec = state.params, state.q_vec
    return fuse_clips(clips, state.spoken, state.hits, rule=fusion,
                      make_clip=lambda h, cue: evidence.cue_clip(p, q_vec, h, cue))  # fmt: skip


def spoken_hits(index, page, visual_ids: set[str], q_vec: np.ndarray) -> list[Hit]:
    """Hits for the spoken window's videos outside the visual window (stage-1 score: q·v_j)."""
    out = []
    for m in page.window:
        if m.video_id in visual_ids:
            continue
        score = float(np.dot(index.embedding(m.video_id), q_vec))
        out.append(Hit(m.video_id, score, score, None, record=index.video(m.video_id)))
    return out


def _fused_updates(state: SearchState, evidence: Evidence, fusion: str):
    """Progress updates of the fused ranking (on copies: the tiers keep their own scores)."""
    on_update = state.on_update
    if on_update is None:
        return None
    page, spoken_only, offset, q_vec = state.spoken, state.spoken_only, state.params.offset, state.q_vec

    def update(hits):
        copies = [copy.copy(h) for h in hits]
        on_update(fuse(copies, [copy.copy(h) for h in spoken_only], page, rule=fusion, offset=offset,
                       relevance_of=lambda h: evidence.visual_relevance(q_vec, h)))  # fmt: skip

    return update
