"""Video -> embedding: the streaming pathway (QASLR) and the one-shot pathway (single-round).

``VideoEncoder`` is the one place where selected, decoded frames become embeddings; the indexer
(query-independent, uniform frames), the searcher (query-conditioned, selected frames) and the
trainer's feature cache all call it, so every path shares the same batching and masking.

QASLR pathway for a batch of videos (§3.2-3.3):
    frames [K_V, H, W, 3] --partition (Eq. 3)--> clips C_1..C_T of L frames
    all clips of all videos --backbone, shared padded batches (Eq. 4)--> U_t [S_t, D]
    U_t --compress (Eq. 5)--> evidence bank E_t [<=M, D]
    E_1..E_T --streaming head (Eq. 6-10)--> z_1..z_T ; z_T is the video embedding
Every video keeps its own evidence banks and memory; batching only shares backbone calls.

One-shot pathway: all selected frames of a video in one backbone context, last-token pooled.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from core.config import Embedder
from models.backbone import Backbone, VideoClip
from models.compression import compress_evidence
from models.head import StreamingHead
from models.selection import frames_per_clip, partition_clips

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamingConfig:
    max_frames: int = 128  # K_max (§3.2)
    clip_len: int = 16  # L at the full budget (§3.2)
    max_evidence: int = 256  # M evidence tokens per clip (§3.2)
    clip_batch_size: int = 8  # clips per backbone forward pass (shared across videos)


@dataclass
class EvidenceBanks:
    """Compressed evidence of one video: one bank per clip (Eq. 5)."""

    tokens: torch.Tensor  # [T, M', D]
    mask: torch.Tensor  # [T, M'] bool
    clip_frames: list[np.ndarray] = field(default_factory=list)  # source frame indices of each clip


@dataclass
class VideoEmbedding:
    final: torch.Tensor  # [d] float32, L2-normalised (z_T, or the one-shot embedding)
    steps: torch.Tensor  # [T, d] readouts after each clip (one row for one-shot)
    clip_frames: list[np.ndarray]  # source frame indices of each clip (one entry for one-shot)


def pad_banks(banks: Sequence[EvidenceBanks]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stack per-video banks into head inputs: evidence [B, T, M, D], evidence_mask [B, T, M], step_mask [B, T]."""
    b = len(banks)
    t = max((bank.tokens.shape[0] for bank in banks), default=0)
    m = max((bank.tokens.shape[1] for bank in banks), default=0)
    d = banks[0].tokens.shape[-1]
    ref = banks[0].tokens
    evidence = ref.new_zeros(b, t, m, d)
    mask = torch.zeros(b, t, m, dtype=torch.bool, device=ref.device)
    steps = torch.zeros(b, t, dtype=torch.bool, device=ref.device)
    for i, bank in enumerate(banks):
        ti, mi = bank.tokens.shape[:2]
        evidence[i, :ti, :mi] = bank.tokens
        mask[i, :ti, :mi] = bank.mask
        steps[i, :ti] = True
    return evidence, mask, steps


class VideoEncoder:
    """Embeds frame sets with the streaming head (``mode == Embedder.QASLR``) or one-shot (``head=None``)."""

    def __init__(
        self,
        backbone: Backbone,
        head: StreamingHead | None = None,
        *,
        config: StreamingConfig = StreamingConfig(),
        instruction: str | None = None,
    ):
        self.backbone = backbone
        self.head = head.to(backbone.device).eval() if head is not None else None
        self.config = config
        self.instruction = instruction
        if head is not None:
            if head.config.hidden_size != backbone.hidden_size:
                raise ValueError(
                    f"head expects backbone hidden size {head.config.hidden_size}, backbone has {backbone.hidden_size}"
                )
            if head.config.embed_dim != backbone.embed_dim:
                raise ValueError(
                    f"head embeds to d={head.config.embed_dim} but queries embed to d={backbone.embed_dim}"
                )

    @property
    def mode(self) -> Embedder:
        return Embedder.QASLR if self.head is not None else Embedder.ONESHOT

    @property
    def embed_dim(self) -> int:
        return self.backbone.embed_dim

    def clip_plan(self, num_selected: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions (into the selected frames) of each clip and their mask (Eq. 3)."""
        length = frames_per_clip(
            num_selected,
            k_max=self.config.max_frames,
            l_max=self.config.clip_len,
            temporal_patch=self.backbone.temporal_patch,
        )
        return partition_clips(np.arange(num_selected), length)

    def embed_queries(self, texts: Sequence[str], *, instruction: str | None = None) -> torch.Tensor:
        """q for each text: [B, d] float32 on the CPU."""
        return self.backbone.embed_texts(list(texts), instruction=instruction or self.instruction).cpu()

    # -- streaming pathway -----------------------------------------------------------------------
    def _clip_jobs(self, videos: Sequence[VideoClip], texts) -> list[tuple[int, np.ndarray, str | None]]:
        """(video, positions of the clip's frames, conditioning text) for every clip, video-major,
        clips in chronological order (Eq. 3)."""
        jobs = []
        for v, video in enumerate(videos):
            _check(video)
            positions, mask = self.clip_plan(len(video.frames))
            for row, valid in zip(positions, mask, strict=True):
                jobs.append((v, row[valid], texts[v] if texts else None))
        return jobs

    def _clip_evidence(self, videos: Sequence[VideoClip], texts):
        """Yield (video, clip frame indices, evidence [M', D], mask [M']) clip by clip, in order.
        Clips of different videos share backbone batches of ``clip_batch_size``; frames are sliced
        per batch, so memory does not grow with the number of clips."""
        jobs = self._clip_jobs(videos, texts)
        step = self.config.clip_batch_size
        for start in range(0, len(jobs), step):
            chunk = jobs[start : start + step]
            clips = [
                VideoClip(videos[v].frames[pos], np.asarray(videos[v].frame_indices)[pos], videos[v].fps)
                for v, pos, _ in chunk
            ]
            states = self.backbone.encode_clips(
                clips, texts=[t for _, _, t in chunk], instruction=self.instruction
            )
            tokens, mask = compress_evidence(states.hidden, states.mask, self.config.max_evidence)  # Eq. 5
            for (v, _, _), clip, tok, msk in zip(chunk, clips, tokens, mask, strict=True):
                n = int(msk.sum())
                yield v, np.asarray(clip.frame_indices), tok[:n], msk[:n]

    @torch.inference_mode()
    def evidence(
        self, videos: Sequence[VideoClip], *, texts: Sequence[str | None] | None = None
    ) -> list[EvidenceBanks]:
        """All evidence banks of every video (backbone + compression), e.g. for the training cache.
        ``texts`` (one per video) conditions every clip of that video."""
        per_video: list[list[tuple[np.ndarray, torch.Tensor, torch.Tensor]]] = [[] for _ in videos]
        for v, frames, tok, msk in self._clip_evidence(videos, texts):
            per_video[v].append((frames, tok, msk))
        banks = []
        for items in per_video:
            m = max(tok.shape[0] for _, tok, _ in items)
            tokens = items[0][1].new_zeros(len(items), m, items[0][1].shape[-1])
            mask = torch.zeros(len(items), m, dtype=torch.bool, device=tokens.device)
            for t, (_, tok, msk) in enumerate(items):
                tokens[t, : tok.shape[0]] = tok
                mask[t, : msk.shape[0]] = msk
            banks.append(EvidenceBanks(tokens=tokens, mask=mask, clip_frames=[f for f, _, _ in items]))
        return banks

    @torch.inference_mode()
    def _stream_online(self, videos: Sequence[VideoClip], texts) -> list[VideoEmbedding]:
        """Inference without keeping evidence: each clip's bank updates its video's memory as soon as
        it is computed (Eq. 7-9), so working memory is one backbone batch plus N x D per video."""
        head = self.head
        p = next(head.parameters())
        state: dict[int, torch.Tensor] = {}
        readouts: list[list[torch.Tensor]] = [[] for _ in videos]
        clip_frames: list[list[np.ndarray]] = [[] for _ in videos]
        for v, frames, tok, msk in self._clip_evidence(videos, texts):
            h = state.get(v)
            h = head.init_state(1) if h is None else h  # H_0, once per video (Eq. 6)
            h = head.update(h, tok[None].to(p.device, p.dtype), msk[None].to(p.device))
            state[v] = h
            readouts[v].append(head.readout(h)[0].float().cpu())  # z_t
            clip_frames[v].append(frames)
        results = []
        for v in range(len(videos)):
            steps = torch.stack(readouts[v])
            results.append(VideoEmbedding(final=steps[-1], steps=steps, clip_frames=clip_frames[v]))
        return results

    @torch.inference_mode()
    def stream(self, banks: Sequence[EvidenceBanks], *, reset_memory: bool = False) -> list[VideoEmbedding]:
        """Run the streaming head over precomputed evidence banks (independent state per video)."""
        if self.head is None:
            raise RuntimeError("no streaming head loaded: this encoder runs in one-shot mode")
        evidence, mask, steps = pad_banks(banks)
        p = next(self.head.parameters())
        out = self.head(evidence.to(p.device, p.dtype), mask, steps, reset_memory=reset_memory)
        results = []
        for i, bank in enumerate(banks):
            t = bank.tokens.shape[0]
            results.append(
                VideoEmbedding(
                    final=out.final[i].float().cpu(),
                    steps=out.step_embeddings[i, :t].float().cpu(),
                    clip_frames=bank.clip_frames,
                )
            )
        return results

    # -- both pathways ---------------------------------------------------------------------------
    def encode(
        self, videos: Sequence[VideoClip], *, texts: Sequence[str | None] | None = None
    ) -> list[VideoEmbedding]:
        """Embed each video (optionally conditioned on one text per video)."""
        if not videos:
            return []
        if texts is not None and len(texts) != len(videos):
            raise ValueError("texts must have one entry (or None) per video")
        if self.head is not None:
            return self._stream_online(videos, texts)
        return self._oneshot(videos, texts)

    def _oneshot(self, videos: Sequence[VideoClip], texts) -> list[VideoEmbedding]:
        budget = self.config.clip_batch_size * self.config.clip_len  # frames per backbone call
        results: list[VideoEmbedding] = []
        start = 0
        while start < len(videos):
            end, frames = start, 0
            while end < len(videos) and (end == start or frames + len(videos[end].frames) <= budget):
                frames += len(videos[end].frames)
                end += 1
            chunk = videos[start:end]
            for v in chunk:
                _check(v)
            z = self.backbone.embed_videos(
                [VideoClip(v.frames, v.frame_indices, v.fps) for v in chunk],
                texts=list(texts[start:end]) if texts else None,
                instruction=self.instruction,
            ).cpu()
            for v, row in zip(chunk, z, strict=True):
                results.append(
                    VideoEmbedding(final=row, steps=row[None], clip_frames=[np.asarray(v.frame_indices)])
                )
            start = end
        return results


def _check(video: VideoClip) -> None:
    if len(video.frames) == 0:
        raise ValueError("a video needs at least one selected frame")
    if len(video.frames) != len(video.frame_indices):
        raise ValueError("frames and frame_indices differ in length")
