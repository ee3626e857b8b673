"""The encoding tiers' shared pipeline (paper §3.1, §A.4): query-aware selection, frames, and a
query-conditioned encoding of each candidate.

For each candidate j, given the query text and its embedding q:

    relevance_c = q · f_c over the C frame-bank embeddings f_c (q_sel · f_c for a
        query about time where the head ships a selection query: models.router)  (selection)
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
from dataclasses import dataclass

import numpy as np
import torch

from core.errors import summarize
from engine.frames import FrameSource
from engine.moments import bank_relevance
from engine.results import EvidenceItem, Hit, ordered
from engine.tiers.base import Tier, TierRequest
from models.backbone import VideoClip
from models.selection import query_aware_positions, selection_seed
from models.streaming import VideoEncoder
from models.windows import moment_plan, moment_windows, played_backwards, window_reads

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
        moments: int = 0,
    ):
        self.encoder = encoder
        self.index = index
        self.frames = frames
        self.temperature = temperature
        self.gate = gate
        self.exit_min_steps = exit_min_steps
        self.encode_chunk = encode_chunk
        self.moments = moments  # a one-shot tier's moments read as temporal pairs (0: Q-Frame)

    @property
    def streaming(self) -> bool:
        return self.encoder.head is not None

    @staticmethod
    def seed_for(request: TierRequest, hit: Hit) -> int:
        """The selection seed of ``hit`` under ``request``: (request seed, query, candidate), by the
        one derivation training uses too (models.selection.selection_seed)."""
        return selection_seed(request.seed, request.query_key, hit.video_id)

    @property
    def window_plan(self):
        """The moment windows (models.windows) when selection is by moments: a head's own plan, or,
        one-shot, ``moments`` of them read as temporal pairs (``oneshot_moments``)."""
        head = getattr(self.encoder, "head", None)
        return moment_plan(self.moments) if head is None else head.config.window_plan

    def select(self, hit: Hit, request: TierRequest) -> Selection:
        """The frames chosen for ``hit`` (Eq. 2): K' by Q-Frame, cut into clips by Eq. 3; or, for a
        head trained on moments (or a one-shot tier given ``moments``), its windows (models.windows:
        dense around the relevance peaks, in time order, one clip each, with their pair frames)."""
        bank = self.index.frame_bank(hit.video_id)
        given = request.select_relevance
        if given is not None and hit.video_id in given:  # an order's events (engine.search.cascade)
            relevance = given[hit.video_id]
        else:
            relevance = bank_relevance(self.index, hit, request.select_vec)  # [C]: q_sel · f_c, else q · f_c
        plan = self.window_plan
        if plan is None:
            pos = query_aware_positions(
                relevance, request.frames, temperature=self.temperature, seed=self.seed_for(request, hit)
            )
            return Selection(bank.frame_indices[pos], pos, bank, relevance)
        windows = moment_windows(relevance, plan)
        record = hit.record
        read, segments = window_reads(
            windows, bank.frame_indices, float(record.fps), int(record.num_frames), plan
        )
        pos = np.concatenate(windows) if windows else np.zeros(0, dtype=np.int64)
        return Selection(read, pos, bank, relevance, segments)

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
                    [(h.record, sel.read) for h, sel in zip(chunk, chosen, strict=True)], stats.frames
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
                    VideoClip(frames_or_error, sel.read, float(hit.record.fps), segments=sel.segments)
                )
                ready.append((hit, sel))
            if clips:
                turned = self._played_backwards(request, clips)  # [] unless the request asks
                # one encoding for both readings: they share the backbone's batches
                encoded = self._encode(request, clips + turned, policy, self._query_states(request))
                for i, ((hit, sel), emb) in enumerate(zip(ready, encoded[: len(clips)], strict=True)):
                    self._score(hit, sel, emb, q)
                    if turned:  # q · z_T less its moments' backwards reading
                        hit.change = hit.score - float(encoded[len(clips) + i].final.float() @ q)
            if request.on_update is not None:
                request.on_update(ordered(hits))
        return ordered(hits)

    def _played_backwards(self, request: TierRequest, clips: list[VideoClip]) -> list[VideoClip]:
        """Where the request asks (``request.backwards``) and a streaming head reads moments: the same
        clips with each moment played backwards (models.windows.played_backwards), from the frames already
        decoded, to be encoded beside them; else none."""
        if not request.backwards or not self.streaming or any(c.segments is None for c in clips):
            return []
        turned = []
        for clip in clips:
            order, mirrored = played_backwards(clip.frame_indices, clip.segments)
            turned.append(VideoClip(clip.frames[order], mirrored, clip.fps, segments=clip.segments))
        return turned

    def _query_states(self, request: TierRequest):
        """The query's token states (the backbone's hidden states of its prompt), once per request,
        for a head that reads the query's text; else None."""
        head = self.encoder.head
        if head is None or not head.config.text_memory:
            return None
        if request.query_states is None:
            words = bool(head.config.query_words)
            with request.clock.stage("query_embed"):
                states = self.encoder.backbone.text_states(
                    [request.query], instruction=self.encoder.instruction, words=words
                )
            n = int(states.mask[0].sum())
            request.query_states = (states.hidden[0, :n].float().cpu(), states.mask[0, :n].cpu())
            if words:
                request.query_states += (states.words[0, :n].float().cpu(),)
        return request.query_states

    def _encode(self, request: TierRequest, clips: list[VideoClip], policy, query_states=None) -> list:
        """Encode ``clips`` under the query: directly, or through the batcher (shared backbone
        calls with other requests' clips; the time waiting there is booked as ``heavy_queue``)."""
        clock, q = request.clock, request.q
        texts, queries = [request.query] * len(clips), q[None].expand(len(clips), -1)
        states = None if query_states is None else [query_states] * len(clips)
        if self.batcher is None:
            head_before = self.encoder.head_seconds
            with clock.stage("encode"):
                embeddings = self.encoder.encode(
                    clips, texts=texts, queries=queries, exit_policy=policy, query_states=states
                )
            clock.move("encode", "head", self.encoder.head_seconds - head_before)
            return embeddings
        return self.batcher.run(
            clock, self.encoder, clips, queue="heavy_queue", compute="encode", head="head",
            texts=texts, queries=queries, exit_policy=policy, query_states=states,
        )  # fmt: skip

    def _score(self, hit: Hit, selection: Selection, emb, q: torch.Tensor) -> None:
        hit.score = float(emb.final.float() @ q)  # s_ij = q · v_ij (Eq. 1)
        hit.embedding = emb.final.float().numpy()
        hit.reranked = True
        hit.tier = self.name
        bank, pos = selection.bank, selection.positions
        hit.evidence = [
            EvidenceItem(int(bank.frame_indices[p]), float(bank.timestamps[p]), float(selection.relevance[p]))
            for p in pos
        ]
        hit.clips_used, hit.clips_planned = emb.steps_used, emb.planned_steps


@dataclass
class Selection:
    """What stage 2 reads of one candidate: the source frames (chronological), the bank positions
    they were chosen as (the evidence; a window's pair frames are not bank frames), and each clip's
    positions into ``read`` when the windows cut them (None: Eq. 3)."""

    read: np.ndarray  # source frame indices to read
    positions: np.ndarray  # bank positions chosen
    bank: object  # the candidate's FrameBank
    relevance: np.ndarray  # q · f_c over the bank
    segments: list | None = None
