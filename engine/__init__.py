"""The search engine: one object that owns an index, its models, the search and the runtime, with no
web code.

    from engine import EngineConfig, load_engine
    engine = load_engine(EngineConfig(index="data/index"))
    outcome = engine.search_sync({"query": "a red square appears", "top_k": 5})   # or: await engine.search(...)

The HTTP service (:mod:`service`), ``qaslr search``, the benchmarks and the tests search through the
same :class:`Engine`. Its parts: :mod:`engine.config` (every setting, declared once, and
:class:`EngineConfig`), :mod:`engine.loader` (index + backbone + heads + cache + runtime -> Engine),
:mod:`engine.api` (:class:`Engine`), :mod:`engine.search` (the request resolved once, stage 1, the
cascade, evidence and results), :mod:`engine.tiers` (stage-2 tiers), :mod:`engine.spoken` (what is
said), :mod:`engine.runtime` (admission, the batcher and its policy, model processes),
:mod:`engine.frames` and :mod:`engine.cache` (stage-2 pixels), :mod:`engine.moments`,
:mod:`engine.refine`, :mod:`engine.relevance`, and the leaves :mod:`engine.results` (what a search
returns) and :mod:`engine.errors` (what it refuses).

Names are imported on first use, so a process that needs one part (a model process, a test of the
cache) does not load the rest.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Engine": "engine.api",
    "EngineConfig": "engine.config",
    "load_engine": "engine.loader",
    "EngineError": "engine.errors",
    "InvalidRequest": "engine.errors",
    "SearchOutcome": "engine.results",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
