"""The one-shot tier: the K' selected frames in one backbone context (the paper's single-round
baseline, Table 4 "two-stage single-round"); the query text goes into the prompt where the
encoder's TextConditioning says. Its moment is the best window of the selected frames' relevance."""

from __future__ import annotations

import torch

from engine.hits import Hit
from engine.moments import best_window, duration_of
from engine.tiers import register
from engine.tiers.encoded import EncodeTier, clip_len


@register
class OneShotTier(EncodeTier):
    name = "oneshot"

    def _moment(self, hit: Hit, selection, emb, q: torch.Tensor) -> None:
        indices, _, rel = selection
        fps, duration = float(hit.record.fps), duration_of(hit.record)
        hit.moment = best_window(indices, rel, clip_len(self.encoder, len(indices)), fps, duration)
        hit.moment_source = "relevance"
