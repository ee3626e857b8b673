"""What is said, the ranking: the index's cues that match a query, best cue per video, and one
page of that ranking.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.spoken.query import SpokenQuery, spoken_query

MAX_CUES_PER_VIDEO = 8  # cues kept per video as moments (group_by clip)
SNIPPET_TOKENS = 16  # FTS5 snippet length
MARKS = ("\ue000", "\ue001")  # private-use characters around matched words in FTS5 snippets


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
