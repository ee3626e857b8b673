"""The typed state one search carries from stage to stage (engine.search.searcher).

Each stage reads what the stages before it wrote and adds its own part: the resolved request and
the answer being built (:meth:`SearchState.begin`), the query embedding and the filter (stage 1),
the shortlist as hits, the spoken page (``sources=both``), then stage 2's order; the last stages
shape ``outcome`` from ``hits``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from engine.results import Hit, SearchOutcome
from engine.search.clock import StageClock
from engine.search.request import SearchParams

__all__ = ["SearchState"]


@dataclass
class SearchState:
    params: SearchParams
    outcome: SearchOutcome
    clock: StageClock
    started: float  # time.perf_counter() at the search's start (``timings_ms.total``)
    seen_text: str | None = None  # the text the frames are searched with
    said_text: str | None = None  # ... and the cues (sources=both splits quoted phrases off)
    q: torch.Tensor | None = None  # the query embedding [1, d]
    allowed: set | None = None  # the ids a filter allows (None: no filter)
    shown: list[str] = field(default_factory=list)  # videos earlier pages' visual windows showed
    hits: list[Hit] = field(default_factory=list)  # the shortlist, in the order of the last stage
    spoken: object = None  # engine.spoken.SpokenPage of a both-search that has words to look for
    spoken_only: list[Hit] = field(default_factory=list)  # its spoken window outside the visual one
    on_update: Callable[[list[Hit]], None] | None = None  # progressive results (the stream)
    q_np: np.ndarray | None = None  # ``q`` as float32 numpy [1, d]
    # a query about time (engine.search.cascade.Cascade.read_query): the router's probability, and where
    # it calls the query about time, the selection query q_sel [d] that stage 1 and selection look with
    about_time: float | None = None
    select_q: torch.Tensor | None = None
    # ... and whether stage 1 also ranks every video by q_sel's best bank frame (a query for the
    # streaming head: within one event; a query the time head reads keeps q's and q_sel's FAISS rankings)
    select_frames: bool = False
    # ... or, for an order or a count the time head reads, its event phrases and their embeddings [E, d]
    # (embedded once: the time tier reads them, engine.tiers.base.TierRequest.events) ...
    events: tuple[tuple[str, ...], np.ndarray] | None = None
    # ... and whether stage 1 also ranked every video by their weakest event's best bank frame (whether
    # it shows every event at all; where the frame scan serves)
    event_frames: bool = False
    # ... and q's own window of its FAISS ranking (where stage 1 took other rankings in turn): the shortlist
    # the frame tier would rank were the query not read as about time, which a reading that does not stand
    # falls back to (engine.search.cascade.Cascade._keep_time_unless_shown)
    plain_hits: list[Hit] | None = None
    # what the query's words ask about time (engine.search.cascade.Cascade.time_asked: models.time_query's
    # order or count, None for none), parsed once: whether it has been, and what it asks ...
    time_asked_read: bool = False
    time_asked: object = None
    # ... who read its events (the time head, or the streaming head for an order; None: no one), and
    # whether its first did not stand (the frame tier's order stands)
    time_read_by: object = None  # engine.search.cascade.EventReader
    time_reverted: bool = False

    @classmethod
    def begin(
        cls, params: SearchParams, embedder: str, *, started: float, deadline, on_update, cancelled
    ) -> SearchState:
        outcome = SearchOutcome(
            query=params.query or "",
            mode=params.mode,
            embedder=embedder,
            shortlist=params.shortlist,
            frames=params.frames,
            hits=[],
            warnings=list(params.notes),
            offset=params.offset,
            skip=params.skip,
            sources=params.sources,
        )
        clock = StageClock(outcome.timings_ms, deadline, cancelled)
        return cls(params, outcome, clock, started, on_update=on_update)

    @property
    def q_vec(self) -> np.ndarray:
        """The query embedding as float32 numpy [d]."""
        return self.q_np[0]

    def finish(self) -> SearchOutcome:
        self.outcome.timings_ms["total"] = (time.perf_counter() - self.started) * 1e3
        return self.outcome
