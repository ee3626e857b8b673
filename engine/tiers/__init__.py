"""Stage-2 tiers: small modules behind one interface (:class:`engine.tiers.base.Tier`).

Each module defines one tier and registers it (:func:`engine.tiers.base.register`) by its ``name``;
:func:`encoding_tier` picks the heavy tier an encoder calls for (the streaming head when it has one,
else one-shot). Which tier runs on which candidates is the cascade's policy (engine.search.cascade).
"""

from __future__ import annotations

# the tiers register on import (one module each)
from engine.tiers import frame, head, oneshot, timehead  # noqa: F401
from engine.tiers.base import TIERS, RerankStats, Tier, TierRequest, register


def encoding_tier(encoder, index, frames, **options) -> Tier:
    """The heavy tier for ``encoder``: the streaming head's when it has a head, else one-shot."""
    return TIERS["head" if encoder.head is not None else "oneshot"](encoder, index, frames, **options)


__all__ = ["TIERS", "RerankStats", "Tier", "TierRequest", "encoding_tier", "register"]
