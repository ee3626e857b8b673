"""The search engine: stage 1 (FAISS) and stage 2 (tiers) over an index, with no web code.

    from engine import EngineConfig, load_engine
    engine = load_engine(EngineConfig(index="data/index", model="training/tiny_world"))
    outcome = engine.searcher.search({"query": "a red square appears", "top_k": 5})

The HTTP service (:mod:`service`) maps requests to these calls and shapes the answers; so can a
benchmark, a batch job or a notebook. Modules: :mod:`engine.config` (the one config),
:mod:`engine.loader` (index + backbone + head + cache -> :class:`Engine`), :mod:`engine.searcher`
(the two stages), :mod:`engine.tiers` (stage-2 tiers), :mod:`engine.frames` and :mod:`engine.cache`
(stage-2 pixels), :mod:`engine.moments` (moments and timelines), :mod:`engine.worker` (the bounded
model queue and its search threads), :mod:`engine.batching` (stage-2 encodes of concurrent searches in
shared backbone calls), :mod:`engine.model_process` (the backbone in processes of its own, on a CPU).
"""

from engine.config import EngineConfig
from engine.loader import Engine, load_engine

__all__ = ["Engine", "EngineConfig", "load_engine"]
