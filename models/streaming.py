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

One call, one pathway: with a head every video of an ``encode`` call streams, however few its frames
(as the training features stream them), so the scores of one ranking share one space. §3.1's short-
input rule ("short inputs keep the backbone's original embedding pathway") applies to a whole
request (engine.searcher: K' <= L goes to the one-shot tier) or, at index time, per video as a
property of the index (``encode(short_oneshot=True)``), never to some candidates of one ranking.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from core.config import DEFAULT_TEXT_CONDITIONING, Embedder, TextConditioning
from models.backbone import Backbone, VideoClip
from models.compression import compress_evidence
from models.head import StreamingHead
from models.selection import frames_per_clip, partition_clips

logger = logging.getLogger(__name__)


CPU_CLIP_BATCH = 8  # clips per backbone call on the CPU (and the "auto" choice there)
MAX_AUTO_CLIP_BATCH = 64  # the "auto" choice's ceiling on a GPU
AUTO_MEMORY_SHARE = 0.5  # share of the free GPU memory the "auto" choice plans to fill


def clip_bytes(backbone: Backbone, clip_len: int) -> int:
    """Estimated peak device bytes one clip of ``clip_len`` frames adds to an inference backbone call
    at the backbone's working size: the uint8 frames, their fp32 and model-dtype pixel values, the
    vision tower's widest activations per patch (residual, q/k/v, MLP), the text model's per token
    (the same, the kept final hidden states, the deepstack features) and one layer's text attention
    scores when the kernel materialises them; times 1.5 for the allocator's slack. A planning
    figure for :func:`auto_clip_batch_size`; benchmarks/gpu_check.sh reports the measured peak."""
    config = backbone.model.config
    vision, text = config.vision_config, config.text_config
    elem = torch.finfo(backbone.dtype).bits // 8
    frames = clip_len + (-clip_len % backbone.temporal_patch)
    side = backbone.frame_size
    patches = frames // vision.temporal_patch_size * (side // vision.patch_size) ** 2
    tokens = patches // vision.spatial_merge_size**2
    pixel = frames * 3 * side * side * (1 + 4 + elem)
    tower = patches * (4 * vision.hidden_size + 2 * vision.intermediate_size) * elem
    kept = (1 + len(getattr(vision, "deepstack_visual_indexes", []) or [])) * text.hidden_size
    lm = tokens * (4 * text.hidden_size + 3 * text.intermediate_size + kept) * elem
    scores = text.num_attention_heads * tokens * tokens * elem
    return int(1.5 * (pixel + tower + lm + scores))


def auto_clip_batch_size(backbone: Backbone, clip_len: int, *, free_bytes: int | None = None) -> int:
    """Clips per backbone call for ``clip_batch_size="auto"``: :data:`CPU_CLIP_BATCH` (8) on the CPU
    (more clips only add latency there); on CUDA as many clips as fill :data:`AUTO_MEMORY_SHARE` of the
    device's free memory (``free_bytes``, default ``torch.cuda.mem_get_info``; measured after the
    weights are loaded) by :func:`clip_bytes`, between 1 and :data:`MAX_AUTO_CLIP_BATCH` (64). For the
    2B backbone at L = 16 and 448² a clip plans about 0.6 GB: 64 on an 80 GB GPU, about 12 on 16 GB."""
    device = backbone.device
    if device.type != "cuda":
        return CPU_CLIP_BATCH
    if free_bytes is None:
        free_bytes = torch.cuda.mem_get_info(device)[0]
    fit = int(AUTO_MEMORY_SHARE * free_bytes) // max(1, clip_bytes(backbone, clip_len))
    return max(1, min(MAX_AUTO_CLIP_BATCH, fit))


@dataclass(frozen=True)
class StreamingConfig:
    max_frames: int = 128  # K_max (§3.2)
    clip_len: int = 16  # L at the full budget (§3.2)
    max_evidence: int = 256  # M evidence tokens per clip (§3.2)
    # clips per backbone forward pass (shared across videos); "auto": auto_clip_batch_size (8 on the
    # CPU, from the free memory on a GPU). A throughput knob: the embeddings do not depend on it.
    clip_batch_size: int | str = "auto"
    short_video_frames: int | None = None  # §3.1: inputs of at most this many frames are short (None: L)

    def __post_init__(self) -> None:
        if self.clip_batch_size != "auto" and not (
            isinstance(self.clip_batch_size, int) and self.clip_batch_size >= 1
        ):
            raise ValueError(
                f"clip_batch_size must be a positive integer or 'auto', got {self.clip_batch_size!r}"
            )
        if self.short_video_frames is None:
            object.__setattr__(self, "short_video_frames", self.clip_len)


@dataclass
class EvidenceBanks:
    """Compressed evidence of one video: one bank per clip (Eq. 5)."""

    tokens: torch.Tensor  # [T, M', D]
    mask: torch.Tensor  # [T, M'] bool
    clip_frames: list[np.ndarray] = field(default_factory=list)  # source frame indices of each clip
    positions: torch.Tensor | None = None  # [T, M', 4] where each token is (models.backbone.ClipStates)


@dataclass
class VideoEmbedding:
    final: torch.Tensor  # [d] float32, L2-normalised (z_T, or the one-shot embedding)
    steps: torch.Tensor  # [T^, d] readouts after each clip used (one row for one-shot)
    clip_frames: list[np.ndarray]  # source frame indices of each clip used (one entry for one-shot)
    planned_steps: int = 1  # T: clips planned; fewer were used (len(steps)) after an early exit
    streamed: bool = False  # True: the head's readouts after each clip; False: one-shot

    @property
    def steps_used(self) -> int:
        return int(self.steps.shape[0])


@dataclass
class ExitPolicy:
    """Early exit (§A.10): stop a video's stream at the first step t >= t_min with gate p_t >= eta."""

    gate: object  # models.gate.EarlyExitGate: (z [1, T, d], mask [1, T]) -> p [1, T]
    eta: float
    t_min: int = 2

    def stops(self, z: torch.Tensor, t: int, planned: int) -> bool:
        """``z`` [1, d]: the readout after step ``t`` (1-based) of ``planned`` steps."""
        if t < self.t_min or t >= planned:
            return False
        gate = self.gate
        p = next(gate.parameters())
        x = z.to(p.device, p.dtype)[:, None, :]  # [1, 1, d]; the gate sees t / T through its input
        prob = gate.probability(x, t, planned)
        return bool(prob >= self.eta)


def pad_banks(banks: Sequence[EvidenceBanks], *, positions: bool = False) -> tuple:
    """Stack per-video banks into head inputs: evidence [B, T, M, D], evidence_mask [B, T, M], step_mask
    [B, T]; with ``positions``, also the tokens' positions [B, T, M, 4] (zeros where a bank has none)."""
    b = len(banks)
    t = max((bank.tokens.shape[0] for bank in banks), default=0)
    m = max((bank.tokens.shape[1] for bank in banks), default=0)
    d = banks[0].tokens.shape[-1]
    ref = banks[0].tokens
    evidence = ref.new_zeros(b, t, m, d)
    mask = torch.zeros(b, t, m, dtype=torch.bool, device=ref.device)
    steps = torch.zeros(b, t, dtype=torch.bool, device=ref.device)
    places = torch.zeros(b, t, m, 4, device=ref.device)
    for i, bank in enumerate(banks):
        ti, mi = bank.tokens.shape[:2]
        evidence[i, :ti, :mi] = bank.tokens
        mask[i, :ti, :mi] = bank.mask
        steps[i, :ti] = True
        if bank.positions is not None:
            places[i, :ti, :mi] = bank.positions
    return (evidence, mask, steps, places) if positions else (evidence, mask, steps)


class VideoEncoder:
    """Embeds frame sets with the streaming head (``mode == Embedder.QASLR``) or one-shot (``head=None``)."""

    def __init__(
        self,
        backbone: Backbone,
        head: StreamingHead | None = None,
        *,
        config: StreamingConfig = StreamingConfig(),
        instruction: str | None = None,
        text_conditioning: TextConditioning | str | None = None,
    ):
        self.backbone = backbone
        self.head = head.to(backbone.device).eval() if head is not None else None
        self.config = config
        # clips per backbone call: the config's, or with "auto" chosen once for this device
        self.clip_batch_size: int = (
            auto_clip_batch_size(backbone, config.clip_len)
            if config.clip_batch_size == "auto"
            else int(config.clip_batch_size)
        )
        self.instruction = instruction
        # where query-conditioned encodings put the query text: the head's own training choice, or
        # the caller's, else the measured default (core.config); see TextConditioning
        if text_conditioning is None:
            text_conditioning = (
                head.config.text_conditioning if head is not None else DEFAULT_TEXT_CONDITIONING
            )
        self.text_conditioning = TextConditioning(text_conditioning)
        # time spent in the head (memory updates, readouts, gate) so far, per calling thread, so that
        # concurrent encodes (engine.batching's workers) each see only their own: see head_seconds
        self._head_seconds: dict[int, float] = {}
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

    @property
    def head_seconds(self) -> float:
        """Seconds this thread has spent in the head so far (a difference of two readings times one
        encode, also while other threads encode with the same encoder)."""
        return self._head_seconds.get(threading.get_ident(), 0.0)

    def clip_plan(self, num_selected: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions (into the selected frames) of each clip and their mask (Eq. 3)."""
        length = frames_per_clip(
            num_selected,
            k_max=self.config.max_frames,
            l_max=self.config.clip_len,
            temporal_patch=self.backbone.temporal_patch,
        )
        return partition_clips(np.arange(num_selected), length)

    def embed_queries(
        self,
        texts: Sequence[str | None],
        *,
        instruction: str | None = None,
        images: Sequence[np.ndarray] | None = None,
    ) -> torch.Tensor:
        """q for each text: [B, d] float32 on the CPU. With ``images`` (one [H, W, 3] uint8 frame per
        query), each query is its image, with its text when that is not None."""
        instruction = instruction or self.instruction
        if images is not None:
            return self.backbone.embed_images(list(images), texts=list(texts), instruction=instruction).cpu()
        return self.backbone.embed_texts(list(texts), instruction=instruction).cpu()

    # -- conditioning ------------------------------------------------------------------------------
    def _prompt_texts(self, texts) -> list[str | None] | None:
        """The per-video texts that go into the backbone prompt under this encoder's conditioning."""
        if texts is None or self.text_conditioning == TextConditioning.NONE:
            return None
        return list(texts)

    # -- streaming pathway -----------------------------------------------------------------------
    def _clip_jobs(self, videos: Sequence[VideoClip], texts) -> list[tuple[int, int, np.ndarray, str | None]]:
        """(video, step, positions of the clip's frames, conditioning text) for every clip, step-major
        (every video's first clip, then every video's second, ...; Eq. 3 within a video), so that a
        video that exits early (§A.10) drops out of the remaining backbone batches."""
        jobs = []
        for v, video in enumerate(videos):
            _check(video)
            if video.segments is not None:  # the selection cut the clips (models.windows)
                clips = [np.asarray(pos, dtype=np.int64) for pos in video.segments]
            else:
                positions, mask = self.clip_plan(len(video.frames))
                clips = [row[valid] for row, valid in zip(positions, mask, strict=True)]
            for t, pos in enumerate(clips):
                jobs.append((v, t, pos, texts[v] if texts else None))
        jobs.sort(key=lambda job: (job[1], job[0]))
        return jobs

    def _clip_evidence(self, videos: Sequence[VideoClip], texts, skip=None):
        """Yield (video, clip frame indices, evidence [M', D], mask [M']) clip by clip; each video's
        clips in chronological order. Clips of different videos share backbone batches of
        ``clip_batch_size``; frames are sliced per batch, so memory does not grow with the number of
        clips. ``skip(video)`` is asked before a clip is batched: True drops it (early exit)."""
        jobs = self._clip_jobs(videos, self._prompt_texts(texts))
        step = self.clip_batch_size
        while jobs:
            chunk: list = []
            in_chunk: set[int] = set()
            # at most one clip per video in a batch when exits are possible, so a video's exit is
            # known before its next clip is encoded
            while jobs and len(chunk) < step and not (skip is not None and jobs[0][0] in in_chunk):
                job = jobs.pop(0)
                if skip is None or not skip(job[0]):
                    chunk.append(job)
                    in_chunk.add(job[0])
            if not chunk:
                continue
            clips = [
                VideoClip(videos[v].frames[pos], np.asarray(videos[v].frame_indices)[pos], videos[v].fps)
                for v, _, pos, _ in chunk
            ]
            states = self.backbone.encode_clips(
                clips,
                texts=[t for *_, t in chunk],
                instruction=self.instruction,
                text_first=self.text_conditioning == TextConditioning.BEFORE,
            )
            where = states.positions
            if where is None:  # a backbone that does not say where its tokens are
                where = torch.zeros(*states.mask.shape, 4, device=states.hidden.device)
            tokens, mask, places = compress_evidence(
                states.hidden, states.mask, self.config.max_evidence, positions=where
            )  # Eq. 5
            for (v, *_), clip, tok, msk, pos in zip(chunk, clips, tokens, mask, places, strict=True):
                n = int(msk.sum())
                yield v, np.asarray(clip.frame_indices), tok[:n], msk[:n], pos[:n]

    @torch.inference_mode()
    def evidence(
        self, videos: Sequence[VideoClip], *, texts: Sequence[str | None] | None = None
    ) -> list[EvidenceBanks]:
        """All evidence banks of every video (backbone + compression), e.g. for the training cache.
        ``texts`` (one per video) conditions every clip of that video (as ``text_conditioning`` says)."""
        per_video: list[list[tuple]] = [[] for _ in videos]
        for v, frames, tok, msk, pos in self._clip_evidence(videos, texts):
            per_video[v].append((frames, tok, msk, pos))
        banks = []
        for items in per_video:
            m = max(tok.shape[0] for _, tok, _, _ in items)
            tokens = items[0][1].new_zeros(len(items), m, items[0][1].shape[-1])
            mask = torch.zeros(len(items), m, dtype=torch.bool, device=tokens.device)
            places = torch.zeros(len(items), m, items[0][3].shape[-1], device=tokens.device)
            for t, (_, tok, msk, pos) in enumerate(items):
                tokens[t, : tok.shape[0]] = tok
                mask[t, : msk.shape[0]] = msk
                places[t, : pos.shape[0]] = pos
            banks.append(EvidenceBanks(tokens, mask, [f for f, *_ in items], positions=places))
        return banks

    @torch.inference_mode()
    def _stream_online(
        self, videos: Sequence[VideoClip], texts, queries, exit_policy, query_states=None
    ) -> list[VideoEmbedding]:
        """Inference without keeping evidence: each clip's bank updates its video's memory as soon as
        it is computed (Eq. 7-9), so working memory is one backbone batch plus N x D per video. With
        ``exit_policy`` a video stops at the first step t >= t_min whose gate probability reaches eta
        (§A.10): its remaining clips are never encoded (Eq. 19)."""
        head = self.head
        p = next(head.parameters())
        planned = [
            len(v.segments) if v.segments is not None else len(self.clip_plan(len(v.frames))[0])
            for v in videos
        ]
        state: dict[int, torch.Tensor] = {}
        readouts: list[list[torch.Tensor]] = [[] for _ in videos]
        clip_frames: list[list[np.ndarray]] = [[] for _ in videos]
        exited: set[int] = set()
        skip = exited.__contains__ if exit_policy is not None else None
        for v, frames, tok, msk, pos in self._clip_evidence(videos, texts, skip=skip):
            t0 = time.perf_counter()
            h = state.get(v)
            if h is None:  # H_0, once per video (Eq. 6), conditioned on q for a query-conditioned head
                q = None if queries is None else queries[v : v + 1].to(p.device, p.dtype)
                states, smask, words = _unpack_query(None if query_states is None else query_states[v])
                if states is not None:
                    states, smask = states[None].to(p.device, p.dtype), smask[None].to(p.device)
                    words = None if words is None else words[None].to(p.device, p.dtype)
                h = head.init_state(1, q, states, smask, words)
            h = head.update(
                h,
                tok[None].to(p.device, p.dtype),
                msk[None].to(p.device),
                positions=pos[None].to(p.device, p.dtype),
            )
            state[v] = h
            z = head.readout(h)  # z_t, [1, d]
            readouts[v].append(z[0].float().cpu())
            clip_frames[v].append(frames)
            if exit_policy is not None and exit_policy.stops(z, len(readouts[v]), planned[v]):
                exited.add(v)
            me = threading.get_ident()
            self._head_seconds[me] = self._head_seconds.get(me, 0.0) + time.perf_counter() - t0
        results = []
        for v in range(len(videos)):
            steps = torch.stack(readouts[v])
            results.append(
                VideoEmbedding(
                    final=steps[-1],
                    steps=steps,
                    clip_frames=clip_frames[v],
                    planned_steps=planned[v],
                    streamed=True,
                )
            )
        return results

    @torch.inference_mode()
    def stream(
        self,
        banks: Sequence[EvidenceBanks],
        *,
        reset_memory: bool = False,
        queries: torch.Tensor | None = None,
        query_states: tuple | None = None,
    ) -> list[VideoEmbedding]:
        """Run the streaming head over precomputed evidence banks (independent state per video);
        ``query_states``: the queries' token states [B, S, D] and mask [B, S] (``text_memory``), and
        their words [B, S, D] third for a head that reads them (``query_words``)."""
        if self.head is None:
            raise RuntimeError("no streaming head loaded: this encoder runs in one-shot mode")
        evidence, mask, steps, places = pad_banks(banks, positions=True)
        p = next(self.head.parameters())
        q = None if queries is None else queries.to(p.device, p.dtype)
        states, smask, words = _unpack_query(query_states)
        if states is not None:
            states, smask = states.to(p.device, p.dtype), smask.to(p.device)
            words = None if words is None else words.to(p.device, p.dtype)
        out = self.head(
            evidence.to(p.device, p.dtype), mask, steps, reset_memory=reset_memory, query=q,
            query_states=states, query_mask=smask, evidence_positions=places.to(p.device, p.dtype),
            query_words=words,
        )  # fmt: skip
        results = []
        for i, bank in enumerate(banks):
            t = bank.tokens.shape[0]
            results.append(
                VideoEmbedding(
                    final=out.final[i].float().cpu(),
                    steps=out.step_embeddings[i, :t].float().cpu(),
                    clip_frames=bank.clip_frames,
                    planned_steps=t,
                    streamed=True,
                )
            )
        return results

    # -- both pathways ---------------------------------------------------------------------------
    def is_short(self, num_frames: int) -> bool:
        """§3.1: short inputs keep the backbone's original (one-shot) embedding pathway; here, an
        input of at most ``short_video_frames`` frames (default L), which fits one clip at the full
        budget, where streaming would only cut one backbone context into pieces. The rule is for a
        whole ranking's inputs, never some of them: the searcher applies it to a request's K'
        (engine.searcher), the indexer to an index's videos (``encode(short_oneshot=True)``)."""
        return num_frames <= self.config.short_video_frames

    def encode(
        self,
        videos: Sequence[VideoClip],
        *,
        texts: Sequence[str | None] | None = None,
        queries: torch.Tensor | None = None,
        exit_policy: ExitPolicy | None = None,
        short_oneshot: bool = False,
        query_states: Sequence[tuple] | None = None,
    ) -> list[VideoEmbedding]:
        """Embed each video, optionally conditioned on one query per video: ``texts`` go into the
        backbone prompt as ``text_conditioning`` says, ``queries`` [B, d] (their embeddings) into a
        query-conditioned head. One pathway for every video of the call: streaming (QASLR) with a
        head, one-shot without; a video with few frames streams as the clips Eq. 3 cuts it into
        (``clip_plan``, at least one clip of ``temporal_patch`` frames), exactly as the training
        features stream it (``evidence``), unless its selection cut the clips (``VideoClip.segments``).
        ``query_states``: per video, the query's token states [S, D] and mask [S], for a head that
        reads the query's text (``text_memory``), and its words [S, D] third (``query_words``).
        ``short_oneshot`` applies §3.1 per video instead (at most ``short_video_frames`` -> one-shot): the indexer's rule, where it is a property of the index
        (its L) and of the video alone, the same for every query. ``exit_policy`` enables early exit
        (streaming only)."""
        if not videos:
            return []
        if texts is not None and len(texts) != len(videos):
            raise ValueError("texts must have one entry (or None) per video")
        if queries is not None and len(queries) != len(videos):
            raise ValueError("queries must have one row per video")
        if self.head is None:
            return self._oneshot(videos, texts)
        if not short_oneshot:
            return self._stream_online(videos, texts, queries, exit_policy, query_states)
        long = [i for i, v in enumerate(videos) if not self.is_short(len(v.frames))]
        short = [i for i in range(len(videos)) if i not in set(long)]
        out: list[VideoEmbedding | None] = [None] * len(videos)

        def pick(seq, idx):
            return None if seq is None else [seq[i] for i in idx]

        if long:
            q = None if queries is None else queries[long]
            streamed = self._stream_online([videos[i] for i in long], pick(texts, long), q, exit_policy)
            for i, emb in zip(long, streamed, strict=True):
                out[i] = emb
        if short:
            for i, emb in zip(
                short, self._oneshot([videos[i] for i in short], pick(texts, short)), strict=True
            ):
                out[i] = emb
        return out  # type: ignore[return-value]

    def _oneshot(self, videos: Sequence[VideoClip], texts) -> list[VideoEmbedding]:
        texts = self._prompt_texts(texts)
        budget = self.clip_batch_size * self.config.clip_len  # frames per backbone call
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
                text_first=self.text_conditioning == TextConditioning.BEFORE,
            ).cpu()
            for v, row in zip(chunk, z, strict=True):
                results.append(
                    VideoEmbedding(
                        final=row, steps=row[None], clip_frames=[np.asarray(v.frame_indices)], planned_steps=1
                    )
                )
            start = end
        return results


def _check(video: VideoClip) -> None:
    if len(video.frames) == 0:
        raise ValueError("a video needs at least one selected frame")
    if len(video.frames) != len(video.frame_indices):
        raise ValueError("frames and frame_indices differ in length")


def _unpack_query(query_states: tuple | None) -> tuple:
    """(states, mask, words) from a query's (states, mask) or (states, mask, words); Nones for None."""
    if query_states is None:
        return None, None, None
    states, mask, *words = query_states
    return states, mask, (words[0] if words else None)
