"""The results of a search, from its ranked hits: each window's ranking with its relevance
(:func:`rank_window`: clips with group_by clip, else the hits), then the page's evidence, moments and
timelines (:func:`finish_page`, engine.search.evidence).

A time-tier hit keeps the moment the time tier gave it (it spans the events asked about); a hit
whose cue matched at least as well as its frames takes the cue's times as its moment.
"""

from __future__ import annotations

from engine.search import said
from engine.search.evidence import Evidence
from engine.search.state import SearchState
from engine.spoken import cue_moment_preferred
from engine.tiers.timehead import EVENTS_MOMENT

__all__ = ["finish_page", "rank_window"]


def rank_window(state: SearchState, evidence: Evidence, *, fusion: str) -> list:
    """This window's ranking (its clips with group_by clip, else its hits), each with its relevance."""
    p, clock, q_vec = state.params, state.clock, state.q_vec
    hits = state.hits
    with clock.stage("frame"):
        evidence.relevance(q_vec, hits)
    if p.group_by != "clip":
        return hits
    with clock.stage("moment"):
        clips = evidence.clips(p, q_vec, [h for h in hits if h.stage1_rank is not None])
        return said.fuse_page_clips(state, clips, evidence, fusion=fusion)


def finish_page(state: SearchState, evidence: Evidence) -> None:
    """The evidence, moment and timeline of each result of ``state.outcome`` (its hits and clips)."""
    p, outcome, clock, q_vec = state.params, state.outcome, state.clock, state.q_vec
    if not p.include_evidence:
        for hit in outcome.hits:
            hit.evidence, hit.moment, hit.moment_source = None, None, None
        return
    with clock.stage("moment"):
        for hit in outcome.hits:
            if hit.evidence is None:  # not re-encoded: the top-K' bank frames
                evidence.bank_evidence(p, q_vec, hit)
            if hit.moment_source != EVENTS_MOMENT:  # an order's or a count's moment spans its events
                evidence.moment(q_vec, hit)
            if cue_moment_preferred(hit):  # what was said matched it at least as well
                hit.moment, hit.moment_source = (hit.spoken.start_s, hit.spoken.end_s), "cue"
                hit.moment_run = None
            hit.timeline = evidence.timeline(q_vec, hit)
        for clip in outcome.clips or []:  # a clip's video may lie outside the top videos
            if clip.hit.timeline is None:
                clip.hit.timeline = evidence.timeline(q_vec, clip.hit)
    evidence.refine(p, q_vec, outcome, clock)
