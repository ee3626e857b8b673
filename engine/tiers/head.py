"""The streaming-head tier (paper §3.2-3.3, Table 4 "two-stage QASLR"): clips of L selected frames,
all candidates' clips in shared backbone batches, step by step; the head's memory starts from H_0
shifted by q when it was trained query-conditioned; a candidate may exit early (§A.10, Eq. 19).
Each hit keeps its readout similarity after every step, q·z_t, for the relevance strip.

Every candidate it is given streams, however few its frames (a candidate with fewer selected frames
than L streams as the clips Eq. 3 cuts it into, as the training features stream it): one ranking,
one score space. §3.1's short-input rule is the searcher's, for a whole request (K' <= L goes to the
one-shot tier, engine.search.cascade)."""

from __future__ import annotations

import torch

from engine.moments import duration_of, frame_span
from engine.results import Hit
from engine.tiers.base import register
from engine.tiers.encoded import EncodeTier
from models.streaming import ExitPolicy


@register
class HeadTier(EncodeTier):
    name = "head"

    def exit_policy(self, threshold: float | None) -> ExitPolicy | None:
        if threshold is None:
            return None
        if self.gate is None:
            return super().exit_policy(threshold)
        return ExitPolicy(self.gate, eta=float(threshold), t_min=self.exit_min_steps)

    def _score(self, hit: Hit, selection, emb, q: torch.Tensor) -> None:
        super()._score(hit, selection, emb, q)
        if emb.streamed:
            fps, duration = float(hit.record.fps), duration_of(hit.record)
            steps = (emb.steps.float() @ q).numpy()  # q·z_t, t = 1..T^
            hit.step_scores = steps
            hit.step_spans = [frame_span(f, fps, duration) for f in emb.clip_frames[: len(steps)]]
