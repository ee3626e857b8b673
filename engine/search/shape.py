"""The results of a search, from its ranked hits: clips (group_by clip), relevance, ``min_score``,
the page's ``top_k``, and each returned result's evidence, moment and timeline (engine.search.evidence).

A time-tier hit keeps the moment the time tier gave it (it spans the events asked about); a hit
whose cue matched at least as well as its frames takes the cue's times as its moment.
"""

from __future__ import annotations

from engine.search import said
from engine.search.evidence import Evidence
from engine.search.state import SearchState
from engine.spoken import cue_moment_preferred
from engine.tiers.timehead import TimeTier

__all__ = ["shape_results"]


def shape_results(state: SearchState, evidence: Evidence, *, fusion: str) -> None:
    """Fill ``state.outcome``'s clips and hits from ``state.hits``."""
    p, outcome, clock, q_vec = state.params, state.outcome, state.clock, state.q_vec
    hits = state.hits
    if p.group_by == "clip":
        with clock.stage("moment"):
            clips = evidence.clips(p, q_vec, [h for h in hits if h.stage1_rank is not None])
            clips = said.fuse_page_clips(state, clips, evidence, fusion=fusion)
            outcome.clips = [c for c in clips if p.min_score is None or c.relevance >= p.min_score][: p.top_k]
    with clock.stage("frame"):
        evidence.relevance(q_vec, hits)
    if p.min_score is not None:  # on the relevance a user can read (engine.relevance), in every mode
        hits = [h for h in hits if h.relevance is not None and h.relevance >= p.min_score]
    outcome.hits = hits[: p.top_k]
    if not p.include_evidence:
        for hit in outcome.hits:
            hit.evidence, hit.moment, hit.moment_source = None, None, None
        return
    with clock.stage("moment"):
        for hit in outcome.hits:
            if hit.evidence is None:  # not re-encoded: the top-K' bank frames
                evidence.bank_evidence(p, q_vec, hit)
            if hit.moment_source != TimeTier.name:  # the time tier's moment spans its events
                evidence.moment(q_vec, hit)
            if cue_moment_preferred(hit):  # what was said matched it at least as well
                hit.moment, hit.moment_source = (hit.spoken.start_s, hit.spoken.end_s), "cue"
                hit.moment_run = None
            hit.timeline = evidence.timeline(q_vec, hit)
        for clip in outcome.clips or []:  # a clip's video may lie outside the top videos
            if clip.hit.timeline is None:
                clip.hit.timeline = evidence.timeline(q_vec, clip.hit)
    evidence.refine(p, q_vec, outcome, clock)
