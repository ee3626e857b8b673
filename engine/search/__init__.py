"""The search: a straight line of stages over typed state (engine.search.searcher has the map).

:mod:`engine.search.request` (the request resolved once), :mod:`engine.search.state` (what one
search carries), :mod:`engine.search.stage1` (query, filter, FAISS), :mod:`engine.search.cascade`
(stage 2's tiers and the policy that routes between them), :mod:`engine.search.said` (what is said,
as stages), :mod:`engine.search.evidence` and :mod:`engine.search.shape` (evidence, moments and the
results), :mod:`engine.search.clock` (timings, deadline, cancellation).
"""

from engine.search.request import SearcherConfig, SearchParams, resolve_request
from engine.search.searcher import Searcher

__all__ = ["SearchParams", "Searcher", "SearcherConfig", "resolve_request"]
