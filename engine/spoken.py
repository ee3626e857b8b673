"""What is said: the spoken ranking of a query over an index's cues, and its fusion with what is seen.

**The query.** The user's text becomes an FTS5 expression that cannot be a syntax error: every word
(a run of Unicode letters and digits) and every ``"quoted phrase"`` is written as an FTS5 string,
so operators (``AND``, ``NEAR``, ``*``, ``:``, parentheses) in the text are just words. Unquoted words
are alternatives (``OR``: a cue that says some of them matches, BM25 ranks those that say more, and
rarer, words higher); common English words (:data:`STOP_WORDS`) are left out when others remain.
Quoted phrases must all be said, in order (``"harbour lights" ferry``: cues with the phrase, ranked
higher when they also say "ferry"). Adjacent pairs of the query's words are added as phrases that
only rank: a cue that says "old lighthouse" ranks above one that says "old" and "lighthouse" apart
(the sequential-dependence idea of term proximity). At most :data:`MAX_TERMS` words and phrases
are used.

**The ranking.** FTS5 ranks matching cues by BM25 (its ``bm25()``, over stemmed, diacritic-folded
tokens); a video's spoken score is its best cue's (``said_score`` = -bm25, higher is better), and
videos are ranked by it (equal scores share a rank: several videos that say the same line are
equally said). Each match carries its cue (text, start and end), FTS5's snippet of it
with the matched words marked (``highlights``: character ranges in ``snippet``), and its
``coverage``: the share of the query's words and phrases the cue says, each weighted by its BM25
IDF over the index's cues, in 0..1 like the visual ``relevance`` (1: it says every word of the
query). A result found through speech has ``relevance`` = max(visual relevance, coverage), which
``min_score`` filters on, and its moment is the cue's times when coverage is at least its visual
relevance (what was said matched it better than what is seen).

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

import copy
import math
import re
import time
from dataclasses import dataclass, field

import numpy as np

from core.config import FUSION_AGREEMENT, FUSION_RRF_K, Fusion, Sources
from engine.hits import EvidenceItem, Hit, bank_relevance

MAX_TERMS = 32  # words and phrases of a query used for the spoken ranking
MAX_CUES_PER_VIDEO = 8  # cues kept per video as moments (group_by clip)
SNIPPET_TOKENS = 16  # FTS5 snippet length
MARKS = ("\ue000", "\ue001")  # private-use characters around matched words in FTS5 snippets
STOP_WORDS = frozenset(
    "a an the and or but of to in on at by for with from into onto is are was were be been being am it "
    "its this that these those there here then than as so not no do does did has have had i you he she "
    "we they me him her us them my your his our their what which who whom when where while how some any "
    "all just very also about after before over under up out if because can will would could should".split()
)
_PHRASE = re.compile(r'"([^"]*)"')
_WORD = re.compile(r"[^\W_]+")  # letters and digits (FTS5's unicode61 token characters)


def _string(text: str) -> str:
    """An FTS5 string: double quotes doubled, the whole in double quotes."""
    return '"' + text.replace('"', '""') + '"'


@dataclass(frozen=True)
class SpokenQuery:
    expression: str  # the FTS5 MATCH expression
    units: tuple[str, ...]  # each word or phrase as its own expression (coverage counts them)


def spoken_query(text: str | None) -> SpokenQuery | None:
    """The FTS5 query of a user's text (module docstring); None when it holds no word."""
    if not text:
        return None
    phrases = []
    for inner in _PHRASE.findall(text):
        words = _WORD.findall(inner.lower())
        if words and " ".join(words) not in phrases:
            phrases.append(" ".join(words))
    sequence = _WORD.findall(_PHRASE.sub(" ", text).lower())
    words = list(dict.fromkeys(sequence))
    informative = [w for w in words if w not in STOP_WORDS]
    if informative or phrases:
        words = informative
    phrases, words = phrases[:MAX_TERMS], words[: max(0, MAX_TERMS - len(phrases))]
    if not phrases and not words:
        return None
    units = tuple(_string(u) for u in (*phrases, *words))
    # adjacent pairs of the query's words, as phrases: they only rank (a cue that says "old
    # lighthouse" above one that says "old" and "lighthouse" apart), they never make a match alone
    kept = set(words)
    pairs = list(
        dict.fromkeys(
            f"{a} {b}"
            for a, b in zip(sequence, sequence[1:], strict=False)
            if a in kept and b in kept and a != b
        )
    )
    ranking = " OR ".join((*units, *(_string(p) for p in pairs[:MAX_TERMS])))
    required = " AND ".join(_string(p) for p in phrases)
    if not phrases:
        expression = ranking
    elif not words:
        expression = required
    else:  # the phrases are required; the words rank among the cues that say them
        expression = f"{required} AND ({ranking})"
    return SpokenQuery(expression, units)


def split_clues(text: str | None) -> tuple[str | None, str | None]:
    """(what is seen, what is said) of a ``both`` query: the words outside its quoted phrases and
    the phrases; the whole text for both when it has no phrase or nothing outside them."""
    if not text:
        return text, text
    phrases = [p for p in _PHRASE.findall(text) if _WORD.search(p)]
    rest = " ".join(_PHRASE.sub(" ", text).replace('"', " ").split())
    if not phrases or not _WORD.search(rest):
        return text, text
    return rest, " ".join(_string(p) for p in phrases)


@dataclass
class SpokenMatch:
    """A video's best matching cue (and its other matching cues, for moments)."""

    video_id: str
    rank: int  # 1-based, in the spoken ranking of the whole index (within the filter)
    cue_id: int
    start_s: float
    end_s: float
    text: str
    score: float  # -bm25 of the cue: higher is better
    coverage: float = 0.0  # IDF-weighted share of the query's words and phrases the cue says (0..1)
    snippet: str = ""
    highlights: list[tuple[int, int]] = field(default_factory=list)  # [start, end) in ``snippet``
    cues: list[dict] = field(default_factory=list)  # the video's matching cues, best first (at most 8)


def spoken_ranking(index, query: SpokenQuery, *, allowed=None) -> list[SpokenMatch]:
    """Every video whose cues match ``query``, best cue first (within ``allowed`` ids when given)."""
    if not getattr(index, "has_cues", False):
        return []
    out: dict[str, SpokenMatch] = {}
    for row in index.match_cues(query.expression):
        vid = row["video_id"]
        if allowed is not None and vid not in allowed:
            continue
        match = out.get(vid)
        if match is None:
            match = out[vid] = SpokenMatch(
                vid, len(out) + 1, row["id"], row["start_s"], row["end_s"], row["text"], -row["bm25"]
            )
        if len(match.cues) < MAX_CUES_PER_VIDEO:
            match.cues.append(row)
    ranking = list(out.values())
    for i, m in enumerate(ranking):  # equal scores share a rank (several videos say the same line)
        if i and _same(m.score, ranking[i - 1].score):
            m.rank = ranking[i - 1].rank
    return ranking


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def describe(index, query: SpokenQuery, matches: list[SpokenMatch]) -> None:
    """Snippets, highlights and coverage of ``matches`` (a page's: the queries touch only their cues)."""
    if not matches:
        return
    ids = sorted({c["id"] for m in matches for c in m.cues})
    snippets = index.cue_snippets(query.expression, ids, marks=MARKS, tokens=SNIPPET_TOKENS)
    coverage = cue_coverage(index, query, ids)
    for m in matches:
        m.snippet, m.highlights = _marked(snippets.get(m.cue_id, m.text))
        m.coverage = coverage.get(m.cue_id, 0.0)
        for c in m.cues:
            c["coverage"] = coverage.get(c["id"], 0.0)
            c["snippet"], c["highlights"] = _marked(snippets.get(c["id"], c["text"]))


def cue_coverage(index, query: SpokenQuery, cue_ids: list[int]) -> dict[int, float]:
    """Per cue: sum of the IDF of the query's units it matches over the sum of all units' IDF."""
    total = max(1, index.cue_total())
    weights, said = [], []
    for unit in query.units:
        n = index.count_cue_matches(unit)
        weights.append(math.log(1.0 + (total - n + 0.5) / (n + 0.5)))
        said.append(index.cues_matching(unit, cue_ids) if n else set())
    whole = sum(weights) or 1.0
    return {cid: sum(w for w, s in zip(weights, said, strict=True) if cid in s) / whole for cid in cue_ids}


def _marked(snippet: str) -> tuple[str, list[tuple[int, int]]]:
    """FTS5's snippet with :data:`MARKS` -> (plain text, [start, end) of each marked run)."""
    text, spans, start = [], [], None
    n = 0
    for ch in snippet:
        if ch == MARKS[0]:
            start = n
        elif ch == MARKS[1]:
            if start is not None and n > start:
                spans.append((start, n))
            start = None
        else:
            text.append(ch)
            n += 1
    return "".join(text), spans


# -- a page of results ------------------------------------------------------------------------------
@dataclass
class SpokenPage:
    """The spoken side of one page of a search (module docstring, "Fusion")."""

    query: SpokenQuery
    ranking: dict[str, SpokenMatch]  # every matching video's best cue, by id
    window: list[SpokenMatch]  # this page's window of the spoken ranking
    earlier: set[str]  # videos of earlier pages' spoken windows (not shown again)
    more: bool  # the spoken ranking goes on past this page


def spoken_page(
    index, text: str | None, *, offset: int, size: int, allowed=None, shown=(), visual_ids=()
) -> SpokenPage | None:
    """The spoken side of the page at ``offset`` of ``size`` ranks (None: the query has no word to
    look for). ``shown``: the videos earlier visual windows showed; ``visual_ids``: this page's visual
    window, whose spoken matches are described (snippets, coverage) with the window's."""
    query = spoken_query(text)
    if query is None:
        return None
    ranking = spoken_ranking(index, query, allowed=allowed)
    shown = set(shown)
    window = [m for m in ranking[offset : offset + size] if m.video_id not in shown]
    by_id = {m.video_id: m for m in ranking}
    page = SpokenPage(
        query, by_id, window, {m.video_id for m in ranking[:offset]}, len(ranking) > offset + size
    )
    described = {m.video_id: m for m in window}
    described.update({v: by_id[v] for v in visual_ids if v in by_id})
    describe(index, query, list(described.values()))
    return page


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


# -- the searcher's side (engine.searcher calls these) -------------------------------------------------
def said_search(searcher, p, q_vec, allowed, result, clock, t_start):
    """``sources=said``: the page's window of the spoken ranking, scored by BM25 (-bm25)."""
    with clock.stage("spoken"):
        page = spoken_page(searcher.index, p.query, offset=p.offset, size=p.shortlist, allowed=allowed)
    hits = [] if page is None else spoken_hits(searcher, page, set(), q_vec)
    for hit in hits:
        hit.spoken = page.ranking[hit.video_id]
        hit.score, hit.source = hit.spoken.score, Sources.SAID
    result.more = page is not None and page.more
    if p.group_by == "clip" and page is not None:
        result.clips = fuse_clips([], page, hits, rule=searcher.config.fusion,
                                  make_clip=lambda h, cue: cue_clip(searcher, p, q_vec, h, cue))  # fmt: skip
        for clip in result.clips:
            clip.score = -clip.cue["bm25"]
        result.clips = [c for c in result.clips if p.min_score is None or c.relevance >= p.min_score]
        result.clips = result.clips[: p.top_k]
    searcher._relevance(q_vec, hits)
    if p.min_score is not None:
        hits = [h for h in hits if h.relevance is not None and h.relevance >= p.min_score]
    result.hits = hits[: p.top_k]
    with clock.stage("moment"):
        for hit in result.hits:
            if p.include_evidence:
                searcher._bank_evidence(p, q_vec, hit)
                hit.moment, hit.moment_source = (hit.spoken.start_s, hit.spoken.end_s), "cue"
                hit.timeline = searcher._timeline(q_vec, hit)
        for clip in result.clips or []:
            if p.include_evidence and clip.hit.timeline is None:
                clip.hit.timeline = searcher._timeline(q_vec, clip.hit)
    result.timings_ms["total"] = (time.perf_counter() - t_start) * 1e3
    return result


def spoken_hits(searcher, page, visual_ids: set[str], q_vec) -> list:
    """Hits for the spoken window's videos outside the visual window (stage-1 score: q·v_j)."""
    out = []
    for m in page.window:
        if m.video_id in visual_ids:
            continue
        score = float(np.dot(searcher.index.embedding(m.video_id), q_vec))
        out.append(Hit(m.video_id, score, score, None, record=searcher.index.video(m.video_id)))
    return out


def fused_updates(searcher, on_update, page, spoken_only, p, q_vec):
    """Progress updates of the fused ranking (on copies: the tiers keep their own scores)."""
    if on_update is None:
        return None

    def update(hits):
        copies = [copy.copy(h) for h in hits]
        on_update(fuse(copies, [copy.copy(h) for h in spoken_only], page, rule=searcher.config.fusion,
                       offset=p.offset, relevance_of=lambda h: searcher._visual_relevance(q_vec, h)))  # fmt: skip

    return update


def cue_clip(searcher, p, q_vec, hit, cue: dict):
    """A moment found through a cue alone: its times, the bank frames inside it as evidence."""
    bank = searcher.index.frame_bank(hit.video_id)
    rel = bank_relevance(searcher.index, hit, q_vec)
    inside = np.flatnonzero((bank.timestamps >= cue["start_s"]) & (bank.timestamps <= cue["end_s"]))
    evidence = [
        EvidenceItem(int(bank.frame_indices[i]), float(bank.timestamps[i]), float(rel[i]))
        for i in inside if p.include_evidence
    ]  # fmt: skip
    from engine.searcher import ClipHit  # the searcher imports this module

    return ClipHit(hit, 0.0, (cue["start_s"], cue["end_s"]), evidence, cue.get("coverage", 0.0))
