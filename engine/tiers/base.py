"""The interface every stage-2 tier implements, and what a tier is handed.

A tier re-scores some candidates of the shortlist (paper §3.1, §A.4: stage 2 only reorders what
stage 1 found) and returns the whole list in its new order. Tiers differ in what they pay: the
frame tier reads the stored frame bank (no backbone call), the encoding tiers re-encode selected
frames under the query (one-shot, or the streaming head). A new tier is one new module in this
package that subclasses :class:`Tier` and registers itself with :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from engine.frames import FrameStats
from engine.results import Hit


@dataclass
class RerankStats:
    """Per-request counters of stage 2."""

    frames: FrameStats = field(default_factory=FrameStats)
    warnings: list[str] = field(default_factory=list)


@dataclass
class TierRequest:
    """One request as a tier sees it."""

    query: str | None  # the query text for a backbone prompt (None for an image query)
    q: torch.Tensor  # the query embedding [d]
    frames: int  # K': frames selected per candidate
    seed: int  # the request's selection seed (combined per query and candidate: models.selection)
    stats: RerankStats
    clock: object  # engine.search.clock.StageClock: .stage(name), .move(a, b, seconds), .check()
    exit_threshold: float | None = None
    on_update: Callable[[list[Hit]], None] | None = None
    chunk: int | None = None  # candidates between two progress updates
    query_key: str = ""  # models.selection.query_key of the request's query ("": from ``query``)
    query_states: tuple | None = None  # the query's token states, once read (a head that reads its text)
    select_q: torch.Tensor | None = None  # where selection looks (models.router.SelectionQuery; None: q)
    events: tuple | None = None  # (event phrases, their embeddings [E, d]) already embedded (the time tier's)
    # per video id, the relevance [C] that selection cuts its moments from instead of select_vec's (an
    # order's events, each on its own scale: engine.search.cascade.Cascade._order)
    select_relevance: dict | None = None
    # a streaming head that reads moments also reads each one played backwards (Hit.change:
    # engine.search.cascade, a query its router calls about time)
    backwards: bool = False

    def __post_init__(self) -> None:
        if not self.query_key:
            from models.selection import query_key

            self.query_key = query_key(self.query)

    @property
    def q_vec(self) -> np.ndarray:
        return self.q.numpy().astype(np.float32)

    @property
    def select_vec(self) -> np.ndarray:
        """The vector query-aware selection scores the frame bank with (Eq. 2): q_sel, else q."""
        return self.q_vec if self.select_q is None else self.select_q.numpy().astype(np.float32)


class Tier:
    """A stage-2 tier. ``name`` is how the API and each result name it; ``heavy`` says whether it
    calls the backbone (the cascade spends its budget on heavy tiers only)."""

    name: ClassVar[str]
    heavy: ClassVar[bool] = True

    def run(self, request: TierRequest, hits: list[Hit]) -> list[Hit]:
        """Re-score ``hits`` (all of them) in place and return them in the tier's order."""
        raise NotImplementedError


TIERS: dict[str, type[Tier]] = {}


def register(cls: type[Tier]) -> type[Tier]:
    """Class decorator: make ``cls`` available by ``cls.name``."""
    if cls.name in TIERS and TIERS[cls.name] is not cls:
        raise ValueError(f"a stage-2 tier named {cls.name!r} is already registered")
    TIERS[cls.name] = cls
    return cls
