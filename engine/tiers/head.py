"""The streaming-head tier (paper §3.2-3.3, Table 4 "two-stage QASLR"): clips of L selected frames,
all candidates' clips in shared backbone batches, step by step; the head's memory starts from H_0
shifted by q when it was trained query-conditioned; a candidate may exit early (§A.10, Eq. 19).
Its moment is the clip whose step gained most similarity to q.

Short candidates (at most L frames) keep the one-shot pathway (§3.1) and get its moment."""

from __future__ import annotations

import torch

from engine.hits import Hit
from engine.moments import best_step, best_window, duration_of, frame_span
from engine.tiers import register
from engine.tiers.encoded import EncodeTier, clip_len
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

    def _moment(self, hit: Hit, selection, emb, q: torch.Tensor) -> None:
        indices, _, rel = selection
        fps, duration = float(hit.record.fps), duration_of(hit.record)
        if emb.streamed:
            steps = (emb.steps.float() @ q).numpy()  # q·z_t, t = 1..T^
            hit.step_scores = steps
            hit.step_spans = [frame_span(f, fps, duration) for f in emb.clip_frames[: len(steps)]]
            t_star = best_step(steps, self._initial_score(q))
            hit.moment = frame_span(emb.clip_frames[t_star], fps, duration)
            hit.moment_source = "streaming"
        else:
            hit.moment = best_window(indices, rel, clip_len(self.encoder, len(indices)), fps, duration)
            hit.moment_source = "relevance"

    @torch.inference_mode()
    def _initial_score(self, q: torch.Tensor) -> float:
        """q · z_0: the readout of the initial think tokens H_0 (shifted by q for a query-conditioned
        head), the baseline of the first step's gain."""
        head = self.encoder.head
        p = next(head.parameters())
        z0 = head.readout(head.init_state(1, q[None].to(p.device, p.dtype)))[0].float().cpu()
        return float(z0 @ q)
