"""The one-shot tier: the K' selected frames in one backbone context (the paper's single-round
baseline, Table 4 "two-stage single-round"); the query text goes into the prompt where the
encoder's TextConditioning says."""

from __future__ import annotations

from engine.tiers.base import register
from engine.tiers.encoded import EncodeTier


@register
class OneShotTier(EncodeTier):
    name = "oneshot"
