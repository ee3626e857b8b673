"""Stage 2 (paper §3.1, §A.4): re-score the shortlist with query-aware selection and
query-conditioned encoding.

For each of the R candidates j, given the query text and its embedding q:

    relevance_c = q · f_c over the C frame-bank embeddings f_c                    (selection)
    K' positions ~ Q-Frame(relevance on its own scale, seed(request, j)) (Eq. 2)  (selection)
    those frames from the frame cache, else the index's frame store, else
    decoded from the source video                                                (decode)
    encode them under the query (Eq. 4, c = the query):                          (encode, head)
        streaming (a rerank head, or the index's head): clips of L frames, all candidates' clips
        in shared backbone batches, step by step; the head's memory starts from H_0 shifted by q
        when it was trained query-conditioned; a candidate may exit early (§A.10)
        one-shot (no head): the K' frames in one backbone context
        short candidates (at most L frames) keep the one-shot pathway (§3.1)
        the query text goes into the backbone prompt where the encoder's TextConditioning says
    s_ij = q · v_ij ; rerank the shortlist by s_ij

A stage-1 miss stays a miss: stage 2 only reorders the shortlist. Candidates are processed in
chunks (``encode_chunk``); after each chunk ``on_update`` sees the hits so far (progressive results).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from core.errors import summarize
from models.backbone import VideoClip
from models.selection import query_aware_positions, selection_seed
from models.streaming import ExitPolicy, VideoEncoder
from service.frames import FrameSource, FrameStats
from service.moments import best_step, best_window, duration_of, frame_span, relevance_scores

logger = logging.getLogger(__name__)


@dataclass
class EvidenceItem:
    frame_index: int
    timestamp_s: float
    relevance: float


@dataclass
class Hit:
    video_id: str
    score: float
    stage1_score: float
    stage1_rank: int  # 1-based
    reranked: bool = False
    record: object = None  # indexer.store.VideoRecord
    evidence: list[EvidenceItem] | None = None
    moment: tuple[float, float] | None = None
    moment_source: str | None = None
    step_scores: np.ndarray | None = None  # q·z_t for t = 1..T^ (streaming)
    clips_used: int | None = None  # T^: clips encoded (fewer than planned after an early exit)
    clips_planned: int | None = None  # T
    embedding: np.ndarray | None = None  # v_ij [d], for callers who compare encodings
    step_spans: list[tuple[float, float]] | None = None  # (start_s, end_s) of each streamed clip
    timeline: object = None  # service.moments.Timeline: relevance over time (set for returned hits)


@dataclass
class RerankStats:
    """Per-request counters of stage 2."""

    frames: FrameStats = field(default_factory=FrameStats)
    warnings: list[str] = field(default_factory=list)


class Reranker:
    """Stage 2 over one index with one encoder (the rerank encoder: a rerank head, the index's head,
    or one-shot)."""

    def __init__(
        self,
        encoder: VideoEncoder,
        index,
        frames: FrameSource,
        *,
        temperature: float,
        gate=None,
        exit_min_steps: int = 2,
        encode_chunk: int = 16,
    ):
        self.encoder = encoder
        self.index = index
        self.frames = frames
        self.temperature = temperature
        self.gate = gate
        self.exit_min_steps = exit_min_steps
        self.encode_chunk = encode_chunk

    @property
    def streaming(self) -> bool:
        return self.encoder.head is not None

    def select(self, hit: Hit, q: np.ndarray, k: int, seed: int):
        """(frame indices, timestamps, relevance) of the K' frames chosen for ``hit`` (Eq. 2)."""
        bank = self.index.frame_bank(hit.video_id)
        relevance = relevance_scores(bank.embeddings, q)  # [C]
        pos = query_aware_positions(
            relevance, k, temperature=self.temperature, seed=selection_seed(seed, hit.video_id)
        )
        return bank.frame_indices[pos], bank.timestamps[pos], relevance[pos]

    def exit_policy(self, threshold: float | None) -> ExitPolicy | None:
        if threshold is None:
            return None
        if self.gate is None or not self.streaming:
            raise ValueError("this server has no early-exit gate for a streaming stage 2 (QASLR_RERANK_GATE)")
        return ExitPolicy(self.gate, eta=float(threshold), t_min=self.exit_min_steps)

    def run(
        self,
        query: str | None,
        q: torch.Tensor,
        hits: list[Hit],
        *,
        frames: int,
        seed: int,
        exit_threshold: float | None = None,
        stats: RerankStats,
        clock,
        on_update: Callable[[list[Hit]], None] | None = None,
        chunk: int | None = None,
    ) -> list[Hit]:
        """Re-score ``hits`` in place and return them in stage-2 order (candidates stage 2 could not
        process keep their stage-1 order after the reranked ones). ``clock.stage(name)`` is a context
        manager that times (and deadline-checks) each stage; ``clock.move(a, b, s)`` re-books time.
        ``chunk`` (default ``encode_chunk``) candidates are encoded together between updates."""
        q_vec = q.numpy().astype(np.float32)  # [d]
        policy = self.exit_policy(exit_threshold)
        step = int(chunk or self.encode_chunk)
        for start in range(0, len(hits), step):  # chunks bound the memory held at once
            chunk = hits[start : start + step]
            with clock.stage("selection"):
                chosen = [self.select(hit, q_vec, frames, seed) for hit in chunk]
            with clock.stage("decode"):
                got = self.frames.get(
                    [(h.record, idx) for h, (idx, _, _) in zip(chunk, chosen, strict=True)], stats.frames
                )
            stats.warnings += stats.frames.notes
            stats.frames.notes = []
            clips, ready = [], []
            for hit, sel, frames_or_error in zip(chunk, chosen, got, strict=True):
                if isinstance(frames_or_error, Exception):
                    stats.warnings.append(
                        f"{hit.video_id}: frames could not be read ({summarize(frames_or_error)}); kept its stage-1 rank"
                    )
                    continue
                clips.append(
                    VideoClip(frames=frames_or_error, frame_indices=sel[0], fps=float(hit.record.fps))
                )
                ready.append((hit, sel))
            if clips:
                head_before = self.encoder.head_seconds
                with clock.stage("encode"):
                    embeddings = self.encoder.encode(
                        clips,
                        texts=[query] * len(clips),
                        queries=q[None].expand(len(clips), -1),
                        exit_policy=policy,
                    )
                clock.move("encode", "head", self.encoder.head_seconds - head_before)
                for (hit, sel), emb in zip(ready, embeddings, strict=True):
                    self._score(hit, sel, emb, q)
            if on_update is not None:
                on_update(_ordered(hits))
        return _ordered(hits)

    def _score(self, hit: Hit, selection, emb, q: torch.Tensor) -> None:
        indices, stamps, rel = selection
        hit.score = float(emb.final.float() @ q)  # s_ij = q · v_ij (Eq. 1)
        hit.embedding = emb.final.float().numpy()
        hit.reranked = True
        hit.evidence = [
            EvidenceItem(int(i), float(t), float(r)) for i, t, r in zip(indices, stamps, rel, strict=True)
        ]
        hit.clips_used, hit.clips_planned = emb.steps_used, emb.planned_steps
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


def clip_len(encoder: VideoEncoder, num_selected: int) -> int:
    """L for ``num_selected`` frames: the clip length the streaming plan would use (Eq. 3)."""
    positions, _ = encoder.clip_plan(num_selected)
    return int(positions.shape[1]) if positions.size else 1


def _ordered(hits: list[Hit]) -> list[Hit]:
    """Reranked candidates by s_ij (ties: stage-1 order), then the rest in stage-1 order."""
    reranked = sorted((h for h in hits if h.reranked), key=lambda h: (-h.score, h.stage1_rank))
    return reranked + sorted((h for h in hits if not h.reranked), key=lambda h: h.stage1_rank)
