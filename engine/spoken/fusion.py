"""What is said, fused with what is seen.

**Fusion** (``sources=both``; :data:`core.config.Fusion`). In a ``both`` query, ``"quoted phrases"``
are what is said and the rest is what is seen: the frames are searched with the words outside the
quotes and the cues with the phrases (``a red square appears "missing goat"``); a query without
quotes (or with nothing outside them), or one over an index without cues, is searched whole by
both. A page holds the visual window
of the shortlist (ranks ``offset+1 .. offset+R`` after stage 2) and the spoken window of the same
ranks, each without the videos an earlier page showed through the other. When no video of the
page has a spoken match, the page is the visual answer, unchanged. Otherwise, by the ``relevance``
rule (the default), a video scores ``max(seen, said) + 1/3 min(seen, said)``: ``said`` is its
cue's coverage (0 without one), ``seen`` its visual relevance made to follow the visual ranking
(each the least of its own and those ranked above it; a video outside the visual window at most
the window's last), so the visual order stands where nothing was said; ``rrf`` scores
``1/(k + seen_rank) + 1/(k + said_rank)`` (k = 60; a term is 0 without that rank; equal spoken
scores share a rank). Ties go to the visual order. ``group_by=clip`` fuses the same way over
moments: the visual clips and every matching cue of the page's spoken videos (a cue that overlaps
a visual clip of its video joins that clip).
"""

from __future__ import annotations

from core.config import FUSION_AGREEMENT, FUSION_RRF_K, Fusion, Sources
from engine.spoken.ranking import SpokenMatch, SpokenPage


def fuse(visual: list, spoken_only: list, page: SpokenPage, *, rule: str, offset: int, relevance_of) -> list:
    """The fused order of a page's hits (module docstring). ``visual``: the visual window in its
    order; ``spoken_only``: hits for the spoken window's videos outside it; ``relevance_of(hit)``:
    the hit's visual relevance (None: unknown). Sets each hit's ``source``, ``spoken``,
    ``seen_rank`` and, when anything was said, ``score`` (the fused score; the visual one stays in
    ``seen_score``)."""
    for i, hit in enumerate(visual):
        hit.seen_rank = offset + i + 1
    hits = list(visual) + list(spoken_only)
    for hit in hits:
        hit.spoken = page.ranking.get(hit.video_id)
        hit.source = (
            Sources.BOTH if hit.seen_rank and hit.spoken else Sources.SAID if hit.spoken else Sources.SEEN
        )
    if not any(h.spoken is not None for h in hits):
        return list(visual)  # nothing on this page was said: the visual answer, unchanged
    for hit in hits:
        if hit.seen_score is None and hit.seen_rank:
            hit.seen_score = hit.score
    seen = _monotone([relevance_of(h) for h in visual], [relevance_of(h) for h in spoken_only])
    for hit, visual_value in zip(hits, seen, strict=True):
        said = hit.spoken.coverage if hit.spoken else 0.0
        if rule == Fusion.RRF:
            hit.score = (1.0 / (FUSION_RRF_K + hit.seen_rank) if hit.seen_rank else 0.0) + (
                1.0 / (FUSION_RRF_K + hit.spoken.rank) if hit.spoken else 0.0
            )
        else:
            hit.score = agreement(visual_value, said)
    inf = float("inf")
    return sorted(hits, key=lambda h: (-h.score, h.seen_rank or inf, h.spoken.rank if h.spoken else inf))


def agreement(seen: float, said: float) -> float:
    """Fusion.RELEVANCE: the better of two relevances plus FUSION_AGREEMENT of the other."""
    seen, said = max(0.0, seen), max(0.0, said)
    return max(seen, said) + FUSION_AGREEMENT * min(seen, said)


def _monotone(ranked: list, outside: list) -> list[float]:
    """Visual relevances that follow the visual ranking: each the least of its own and those ranked
    above it; those outside the ranking at most its last (None counts as 0)."""
    out, low = [], float("inf")
    for value in ranked:
        low = min(low, value or 0.0)
        out.append(low)
    last = low if ranked else float("inf")
    return out + [min(value or 0.0, last) for value in outside]


def combined_relevance(visual: float | None, spoken: SpokenMatch | None) -> float | None:
    """A result's relevance with what was said: max(visual relevance, its cue's coverage)."""
    values = [v for v in (visual, None if spoken is None else spoken.coverage) if v is not None]
    return max(values) if values else None


def cue_moment_preferred(hit) -> bool:
    """Whether a hit's moment is its cue's: found only through speech, or its cue's coverage is at
    least its visual relevance (what was said matched it at least as well as what is seen)."""
    spoken = getattr(hit, "spoken", None)
    if spoken is None:
        return False
    visual = hit.visual_relevance
    return hit.seen_rank is None or visual is None or spoken.coverage >= visual


def fuse_clips(visual_clips: list, page: SpokenPage, hits: list, *, rule: str, make_clip) -> list:
    """group_by clip (module docstring): the visual clips (in their order) and the matching cues of
    the page's videos with a spoken match, fused. ``make_clip(hit, cue)`` makes the clip of a cue
    that overlaps no visual clip of its video. Sets each clip's ``source``, ``cue`` and ``score``."""
    cues = sorted(
        ((c, h) for h in hits if getattr(h, "spoken", None) is not None for c in h.spoken.cues),
        key=lambda x: (x[0]["bm25"], x[0]["start_s"]),
    )
    if not cues:
        return visual_clips
    clips = list(visual_clips)
    seen_rank = {id(c): i + 1 for i, c in enumerate(clips)}
    for c in clips:
        c.visual_relevance = c.relevance
    said_rank: dict[int, int] = {}
    for rank, (cue, hit) in enumerate(cues, start=1):
        overlapping = [
            c for c in clips
            if c.hit.video_id == hit.video_id and id(c) in seen_rank and id(c) not in said_rank
            and min(c.moment[1], cue["end_s"]) > max(c.moment[0], cue["start_s"])
        ]  # fmt: skip
        if overlapping:
            clip = max(
                overlapping, key=lambda c: min(c.moment[1], cue["end_s"]) - max(c.moment[0], cue["start_s"])
            )
        else:
            clip = make_clip(hit, cue)
            clips.append(clip)
        clip.cue = cue
        clip.source = Sources.BOTH if id(clip) in seen_rank else Sources.SAID
        said_rank[id(clip)] = rank
        clip.relevance = max(v for v in (clip.visual_relevance, cue.get("coverage", 0.0)) if v is not None)
    visual = [c for c in clips if id(c) in seen_rank]
    seen = dict(zip(map(id, visual), _monotone([c.visual_relevance for c in visual], []), strict=True))
    for clip in clips:
        if rule == Fusion.RRF:
            clip.score = (1.0 / (FUSION_RRF_K + seen_rank[id(clip)]) if id(clip) in seen_rank else 0.0) + (
                1.0 / (FUSION_RRF_K + said_rank[id(clip)]) if id(clip) in said_rank else 0.0
            )
        else:
            said = clip.cue.get("coverage", 0.0) if clip.cue else 0.0
            clip.score = agreement(seen.get(id(clip), 0.0), said)
    inf = float("inf")
    return sorted(clips, key=lambda c: (-c.score, seen_rank.get(id(c), inf), said_rank.get(id(c), inf)))
