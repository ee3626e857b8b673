"""What is said: a query's spoken ranking over an index's cues (SQLite FTS5, BM25) and its fusion
with what is seen.

Three steps, one module each: :mod:`engine.spoken.query` (the user's text as an FTS5 expression,
and a ``both`` query split into what is seen and what is said), :mod:`engine.spoken.ranking` (the
matching cues, best cue per video, one page of that ranking with snippets and coverage) and
:mod:`engine.spoken.fusion` (the fused order of a page's videos and clips). The search's own
stages for what is said (``sources=said`` alone; ``both``'s page and fusion) are
:mod:`engine.search.said`'s.
"""

from engine.spoken.fusion import agreement, combined_relevance, cue_moment_preferred, fuse, fuse_clips
from engine.spoken.query import SpokenQuery, split_clues, spoken_query
from engine.spoken.ranking import SpokenMatch, SpokenPage, spoken_page, spoken_ranking

__all__ = [
    "SpokenMatch",
    "SpokenPage",
    "SpokenQuery",
    "agreement",
    "combined_relevance",
    "cue_moment_preferred",
    "fuse",
    "fuse_clips",
    "split_clues",
    "spoken_page",
    "spoken_query",
    "spoken_ranking",
]
