"""The encoding tiers' shared pipeline (paper §3.1, §A.4): query-aware selection, frames, and a
query-conditioned encoding of each candidate.

For each candidate j, given the query text and its embedding q:

    relevance_c = q · f_c over the C frame-bank embeddings f_c                    (selection)
    K' positions ~ Q-Frame(relevance on its own scale, seed(request, q, j)) (Eq. 2) (selection)
    those frames from the frame cache, else the index's frame store, else
    decoded from the source video                                                (decode)
    encode them under the query (Eq. 4, c = the query)                           (encode, head)
    s_ij = q · v_ij ; rerank by s_ij

How the frames are encoded is the subclass's: one-shot (:mod:`engine.tiers.oneshot`) or the
streaming head (:mod:`engine.tiers.head`), the same pathway for every candidate it is given (one
score space per ranking). The seed is derived as training derives it (models.selection.
selection_seed). The moment is not a tier's: every mode takes it from per-frame relevance by one
rule (engine.moments, engine.search.evidence). Candidates are processed in chunks (``encode_chunk``); after
each chunk ``on_update`` sees the hits so far (progressive results). A candidate whose frames
cannot be read keeps its earlier rank.
"""

from __future__ import annotations

import logging

import torch

from core.errors import summarize
from engine.frames import FrameSource
from engine.moments import bank_relevance
from engine.results import EvidenceItem, Hit, ordered
from engine.tiers.base import Tier, TierRequest
from models.backbone import VideoClip
from models.selection import query_aware_positions, selection_seed
from models.streaming import VideoEncoder

logger = logging.getLogger(__name__)


class EncodeTier(Tier):
    """Stage 2 over one index with one encoder."""

    heavy = True
    batcher = None  # engine.runtime.batching.EncodeBatcher shared by concurrent searches (None: encode here)

    def __init__(
        self,
        encoder: VideoEncoder,
        index,
        frames: FrameSource | None,
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

    @staticmethod
    def seed_for(request: TierRequest, hit: Hit) -> int:
        """The selection seed of ``hit`` under ``request``: (request seed, query, candidate), by the
        one derivation training uses too (models.selection.selection_seed)."""
        return selection_seed(request.seed, request.query_key, hit.video_id)

    def select(self, hit: Hit, request: TierRequest):
        """(frame indices, timestamps, relevance) of the K' frames chosen for ``hit`` (Eq. 2)."""
        bank = self.index.frame_bank(hit.video_id)
        relevance = bank_relevance(self.index, hit, request.q_vec)  # [C]
        pos = query_aware_positions(
            relevance, request.frames, temperature=self.temperature, seed=self.seed_for(request, hit)
        )
        return bank.frame_indices[pos], bank.timestamps[pos], relevance[pos]

    def exit_policy(self, threshold: float | None):
        """The early-exit policy for ``threshold`` (None: stream in full); only a streaming tier has one."""
        if threshold is None:
            return None
        raise ValueError("this server has no early-exit gate for a streaming stage 2 (QASLR_RERANK_GATE)")

    def run(self, request: TierRequest, hits: list[Hit]) -> list[Hit]:
        """Re-score ``hits`` in place and return them in stage-2 order (candidates this tier could not
        process keep their earlier order after the reranked ones). ``request.clock.stage(name)`` times
        (and deadline-checks) each stage; ``clock.move(a, b, s)`` re-books time."""
        q, clock, stats = request.q, request.clock, request.stats
        policy = self.exit_policy(request.exit_threshold)
        step = int(request.chunk or self.encode_chunk)
        for start in range(0, len(hits), step):  # chunks bound the memory held at once
            chunk = hits[start : start + step]
            with clock.stage("selection"):
                chosen = [self.select(hit, request) for hit in chunk]
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
                        f"{hit.video_id}: frames could not be read ({summarize(frames_or_error)}); kept its earlier rank"
                    )
                    continue
                clips.append(
                    VideoClip(frames=frames_or_error, frame_indices=sel[0], fps=float(hit.record.fps))
                )
                ready.append((hit, sel))
            if clips:
                embeddings = self._encode(request, clips, policy)
                for (hit, sel), emb in zip(ready, embeddings, strict=True):
                    self._score(hit, sel, emb, q)
            if request.on_update is not None:
                request.on_update(ordered(hits))
        return ordered(hits)

    def _encode(self, request: TierRequest, clips: list[VideoClip], policy) -> list:
        """Encode ``clips`` under the query: directly, or through the batcher (shared backbone
        calls with other requests' clips; the time waiting there is booked as ``heavy_queue``)."""
        clock, q = request.clock, request.q
        texts, queries = [request.query] * len(clips), q[None].expand(len(clips), -1)
        if self.batcher is None:
            head_before = self.encoder.head_seconds
            with clock.stage("encode"):
                embeddings = self.encoder.encode(clips, texts=texts, queries=queries, exit_policy=policy)
            clock.move("encode", "head", self.encoder.head_seconds - head_before)
            return embeddings
        return self.batcher.run(
            clock, self.encoder, clips, queue="heavy_queue", compute="encode", head="head",
            texts=texts, queries=queries, exit_policy=policy,
        )  # fmt: skip

    def _score(self, hit: Hit, selection, emb, q: torch.Tensor) -> None:
        indices, stamps, rel = selection
        hit.score = float(emb.final.float() @ q)  # s_ij = q · v_ij (Eq. 1)
        hit.embedding = emb.final.float().numpy()
        hit.reranked = True
        hit.tier = self.name
        hit.evidence = [
            EvidenceItem(int(i), float(t), float(r)) for i, t, r in zip(indices, stamps, rel, strict=True)
        ]
        hit.clips_used, hit.clips_planned = emb.steps_used, emb.planned_steps
