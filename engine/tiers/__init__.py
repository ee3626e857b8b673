"""Stage-2 tiers: small modules behind one interface (:class:`engine.tiers.base.Tier`).

Each module defines one tier and registers it here by its ``name``; :func:`encoding_tier` picks the
heavy tier an encoder calls for (the streaming head when it has one, else one-shot).
"""

from __future__ import annotations

from engine.tiers.base import RerankStats, Tier, TierRequest

TIERS: dict[str, type[Tier]] = {}


def register(cls: type[Tier]) -> type[Tier]:
    """Class decorator: make ``cls`` available by ``cls.name``."""
    if cls.name in TIERS and TIERS[cls.name] is not cls:
        raise ValueError(f"a stage-2 tier named {cls.name!r} is already registered")
    TIERS[cls.name] = cls
    return cls


def encoding_tier(encoder, index, frames, **options) -> Tier:
    """The heavy tier for ``encoder``: the streaming head's when it has a head, else one-shot."""
    return TIERS["head" if encoder.head is not None else "oneshot"](encoder, index, frames, **options)


# the tiers register on import (one module each)
from engine.tiers import frame, head, oneshot, timehead  # noqa: E402,F401

__all__ = ["TIERS", "RerankStats", "Tier", "TierRequest", "encoding_tier", "register"]
