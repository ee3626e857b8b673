"""The two-stage search (paper §3.1, §A.4, Table 4), usable with or without HTTP.

    q = backbone text embedding of the query                              (query_embed)
    stage 1: FAISS top-R over the stored v_j (optionally within a filter) (filter, faiss)
    stage 2, for each of the R candidates j:                              (mode "rerank")
        relevance_c = q · f_c for the C frame-bank embeddings f_c            (selection)
        K' positions ~ Q-Frame(relevance, temperature 0.8, seeded) (Eq. 2)  (selection)
        decode those frames through the frame cache                          (decode)
        clips of all candidates, each conditioned on the query (the query text follows the
        video in the prompt), share backbone batches (Eq. 3-5)               (encode)
        streaming head over each candidate's evidence banks (Eq. 6-10)       (head)
          -- or one-shot encoding of the selected frames for "oneshot" indexes
        s_ij = q · v_ij ; rerank the shortlist by s_ij
A stage-1 miss stays a miss: stage 2 only reorders the shortlist.

Evidence and the best moment. The evidence of a reranked candidate is the K' selected frames (in
chronological order) with their frame-bank relevance. The best moment is
- streaming indexes: the span of the clip t* = argmax_t (q·z_t - q·z_{t-1}), the step whose
  readout gained the most similarity to the query, with z_0 the readout of the initial think
  tokens H_0 (Eq. 6, 9); its span runs from the clip's first frame to one frame past its last;
- one-shot indexes (and ``indexed`` mode, whose evidence is the top-K' frames of the bank by
  relevance): the window of L consecutive evidence frames (L = the clip length the streaming plan
  would use for K' frames, Eq. 3) with the highest mean relevance, same span rule.
Scores are reproducible: the selection seed is fixed per request (``seed``, default the server's),
and frames come from a lossless cache, so warm and cold requests give identical scores.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core.config import (
    DEFAULT_FRAMES,
    DEFAULT_SHORTLIST,
    DEFAULT_TOP_K,
    MAX_FRAMES,
    MAX_QUERY_CHARS,
    MAX_SEED,
    MAX_SHORTLIST,
    MAX_TOP_K,
    QUERY_BLANKS,
    Embedder,
    SearchMode,
)
from core.errors import summarize
from indexer.video import VideoError, decode_frames
from models.backbone import VideoClip, working_size
from models.selection import query_aware_positions
from models.streaming import VideoEncoder
from service.cache import FrameCache, frame_key

logger = logging.getLogger(__name__)

STAGES = ("queue", "query_embed", "filter", "faiss", "selection", "decode", "encode", "head", "total")


class InvalidRequest(ValueError):
    """Bad input that names the offending field (mapped to HTTP 422)."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


class DeadlineExceeded(TimeoutError):
    """The request's deadline passed between stages (mapped to HTTP 503)."""


@dataclass(frozen=True)
class SearcherConfig:
    default_shortlist: int = DEFAULT_SHORTLIST  # R (paper Table 4)
    default_frames: int = DEFAULT_FRAMES  # K'
    max_frames: int = MAX_FRAMES  # bound on K' (paper K <= 128)
    temperature: float = 0.8  # Q-Frame softmax temperature
    seed: int = 0  # default selection seed
    max_top_k: int = MAX_TOP_K
    max_shortlist: int = MAX_SHORTLIST
    encode_chunk: int = 16  # candidates whose evidence banks are held at once (memory bound)
    decode_workers: int = 4  # threads decoding cache misses, one video each

    @classmethod
    def from_settings(cls, settings) -> SearcherConfig:
        return cls(
            default_shortlist=settings.default_shortlist,
            default_frames=settings.default_frames,
            max_frames=settings.max_frames,
            temperature=settings.selection_temperature,
            seed=settings.selection_seed,
            decode_workers=settings.decode_workers,
        )


@dataclass
class SearchParams:
    """A resolved request (defaults filled in and bounds checked)."""

    query: str
    top_k: int = DEFAULT_TOP_K
    shortlist: int | None = None
    mode: str = SearchMode.RERANK
    frames: int | None = None
    filter: dict[str, Any] | None = None
    include_evidence: bool = True
    seed: int | None = None


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
    record: Any = None  # indexer.store.VideoRecord
    evidence: list[EvidenceItem] | None = None
    moment: tuple[float, float] | None = None
    moment_source: str | None = None
    step_scores: np.ndarray | None = None  # q·z_t for t = 1..T (streaming), for callers who want it


@dataclass
class SearchOutcome:
    query: str
    mode: str
    embedder: str
    shortlist: int
    frames: int
    hits: list[Hit]
    timings_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    cache_hits: int = 0
    cache_misses: int = 0
    decoded_frames: int = 0
    cache_errors: int = 0
    warnings: list[str] = field(default_factory=list)


class _Clock:
    def __init__(self, timings: dict[str, float], deadline: float | None):
        self.timings = timings
        self.deadline = deadline

    def stage(self, name: str):
        clock = self

        class _Stage:
            def __enter__(self):
                clock.check()
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                clock.timings[name] += (time.perf_counter() - self.t0) * 1e3
                return False

        return _Stage()

    def check(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeadlineExceeded("the request deadline passed")


class Searcher:
    """Stage 1 + stage 2 over an open index with a loaded encoder. Not thread-safe: the service
    calls it from its single model worker; other callers should do the same."""

    def __init__(
        self,
        encoder: VideoEncoder,
        index,
        cache: FrameCache,
        *,
        config: SearcherConfig | None = None,
        settings=None,
        frame_size: int | None = None,
    ):
        self.encoder = encoder
        self.index = index
        self.cache = cache
        if config is None:
            config = SearcherConfig.from_settings(settings) if settings is not None else SearcherConfig()
        self.config = config
        manifest = index.manifest
        self.frame_size = int(frame_size or manifest.frame_size)
        self.embedder = encoder.mode
        if manifest.embedder != encoder.mode:
            raise ValueError(
                f"the index was built with the {manifest.embedder!r} embedder but the encoder is {encoder.mode!r}"
            )
        self.decoded_frames = 0  # total frames decoded from video files (cache misses served)
        self._z0: torch.Tensor | None = None
        self._pool: ThreadPoolExecutor | None = None

    # -- request handling ------------------------------------------------------------------------
    def resolve(self, request) -> SearchParams:
        """Defaults and bounds of a request-like object (a SearchRequest, SearchParams, or dict)."""
        get = request.get if isinstance(request, dict) else (lambda k, d=None: getattr(request, k, d))
        query = get("query")
        if not isinstance(query, str) or not query.strip(QUERY_BLANKS):
            raise InvalidRequest("query", "must be a non-empty string")
        query = query.strip(QUERY_BLANKS)
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidRequest("query", f"must be at most {MAX_QUERY_CHARS} characters")
        cfg = self.config
        top_k = int(get("top_k", DEFAULT_TOP_K) or DEFAULT_TOP_K)
        if not 1 <= top_k <= cfg.max_top_k:
            raise InvalidRequest("top_k", f"must be between 1 and {cfg.max_top_k}")
        shortlist = get("shortlist")
        # R is at least top_k: a smaller shortlist is raised to top_k (the API documents this)
        shortlist = max(cfg.default_shortlist, top_k) if shortlist is None else max(int(shortlist), top_k)
        if not 1 <= shortlist <= cfg.max_shortlist:
            raise InvalidRequest("shortlist", f"must be between 1 and {cfg.max_shortlist}")
        mode = get("mode", SearchMode.RERANK) or SearchMode.RERANK
        if mode not in tuple(SearchMode):
            raise InvalidRequest("mode", "must be 'indexed' or 'rerank'")
        mode = SearchMode(mode)
        frames = get("frames")
        frames = cfg.default_frames if frames is None else int(frames)
        if not 1 <= frames <= cfg.max_frames:
            raise InvalidRequest(
                "frames", f"must be between 1 and {cfg.max_frames} (this server's max_frames)"
            )
        flt = get("filter")
        if flt is not None and not isinstance(flt, dict):
            raise InvalidRequest("filter", "must be an object of field conditions")
        include_evidence = get("include_evidence", True)
        seed = get("seed")
        if seed is not None and not 0 <= int(seed) <= MAX_SEED:
            raise InvalidRequest("seed", f"must be between 0 and {MAX_SEED}")
        return SearchParams(
            query=query,
            top_k=top_k,
            shortlist=shortlist,
            mode=mode,
            frames=frames,
            filter=flt or None,
            include_evidence=True if include_evidence is None else bool(include_evidence),
            seed=cfg.seed if seed is None else int(seed),
        )

    def search(self, request, *, deadline: float | None = None) -> SearchOutcome:
        """Run one search. ``deadline`` is a ``time.monotonic()`` instant checked between stages."""
        t_start = time.perf_counter()
        p = self.resolve(request)
        result = SearchOutcome(
            query=p.query,
            mode=p.mode,
            embedder=self.embedder,
            shortlist=p.shortlist,
            frames=p.frames,
            hits=[],
        )
        clock = _Clock(result.timings_ms, deadline)

        with clock.stage("query_embed"):
            q = self.encoder.embed_queries([p.query]).float()  # [1, d]
        q_np = q.numpy().astype(np.float32)

        allowed = None
        if p.filter:
            with clock.stage("filter"):
                try:
                    allowed = self.index.filter_ids(p.filter)
                except (ValueError, TypeError, KeyError) as exc:
                    raise InvalidRequest("filter", str(exc) or "malformed filter") from exc
        if allowed is not None and not allowed:
            result.timings_ms["total"] = (time.perf_counter() - t_start) * 1e3
            return result

        with clock.stage("faiss"):
            found = self.index.search(q_np, p.shortlist, allowed_ids=allowed)[0]
        hits = []
        for rank, (video_id, score) in enumerate(found, start=1):
            hits.append(
                Hit(
                    video_id=video_id,
                    score=float(score),
                    stage1_score=float(score),
                    stage1_rank=rank,
                    record=self.index.video(video_id),
                )
            )

        if p.mode == SearchMode.RERANK and hits:
            hits = self._rerank(p, q, hits, result, clock)
        elif p.include_evidence:
            with clock.stage("selection"):
                for hit in hits[: p.top_k]:
                    self._indexed_evidence(p, q_np[0], hit)
        result.hits = hits[: p.top_k]
        if not p.include_evidence:
            for hit in result.hits:
                hit.evidence, hit.moment, hit.moment_source = None, None, None
        result.timings_ms["total"] = (time.perf_counter() - t_start) * 1e3
        return result

    # -- stage 2 -------------------------------------------------------------------------------------
    def _rerank(
        self, p: SearchParams, q: torch.Tensor, hits: list[Hit], result: SearchOutcome, clock
    ) -> list[Hit]:
        q_vec = q[0].numpy().astype(np.float32)  # [d]
        selections: list[tuple[Hit, np.ndarray, np.ndarray, np.ndarray]] = []
        with clock.stage("selection"):
            for hit in hits:
                bank = self.index.frame_bank(hit.video_id)
                relevance = relevance_scores(bank.embeddings, q_vec)  # [C]
                pos = query_aware_positions(
                    relevance, p.frames, temperature=self.config.temperature, seed=p.seed
                )
                selections.append((hit, bank.frame_indices[pos], bank.timestamps[pos], relevance[pos]))

        clips: list[VideoClip] = []
        ready: list[tuple[Hit, np.ndarray, np.ndarray, np.ndarray]] = []
        with clock.stage("decode"):
            decoded = self._frames(selections, result)
        for sel, frames in zip(selections, decoded, strict=True):
            hit = sel[0]
            if frames is None:
                continue
            clips.append(VideoClip(frames=frames, frame_indices=sel[1], fps=float(hit.record.fps)))
            ready.append(sel)

        embeddings = []
        step = self.config.encode_chunk
        for start in range(0, len(clips), step):  # chunks bound the evidence kept in memory
            chunk = clips[start : start + step]
            texts = [p.query] * len(chunk)  # query-conditioned encoding (§A.4)
            if self.encoder.mode == Embedder.QASLR:
                with clock.stage("encode"):
                    banks = self.encoder.evidence(chunk, texts=texts)  # candidates' clips share batches
                with clock.stage("head"):
                    embeddings += self.encoder.stream(banks)
            else:
                with clock.stage("encode"):
                    embeddings += self.encoder.encode(chunk, texts=texts)
        if clips:
            z0 = self._initial_readout() if self.encoder.mode == Embedder.QASLR else None
            for (hit, indices, stamps, rel), emb in zip(ready, embeddings, strict=True):
                hit.score = float(emb.final.float() @ q[0])  # s_ij = q · v_ij
                hit.reranked = True
                hit.evidence = [
                    EvidenceItem(int(i), float(t), float(r))
                    for i, t, r in zip(indices, stamps, rel, strict=True)
                ]
                fps, duration = float(hit.record.fps), _duration(hit.record)
                if z0 is not None:
                    steps = (emb.steps.float() @ q[0]).numpy()  # q·z_t, t = 1..T
                    hit.step_scores = steps
                    t_star = best_step(steps, float(z0 @ q[0]))
                    hit.moment = frame_span(emb.clip_frames[t_star], fps, duration)
                    hit.moment_source = "streaming"
                else:
                    hit.moment = best_window(indices, rel, self._clip_len(len(indices)), fps, duration)
                    hit.moment_source = "relevance"
        # Reranked candidates by s_ij (ties: stage-1 order); candidates stage 2 could not process
        # (e.g. an unreadable file) keep their stage-1 order after them.
        reranked = sorted((h for h in hits if h.reranked), key=lambda h: (-h.score, h.stage1_rank))
        return reranked + [h for h in hits if not h.reranked]

    def _frames(self, selections, result: SearchOutcome) -> list[np.ndarray | None]:
        """Decoded frames of every selection via the cache: one batched cache read, the misses of
        each video decoded in a small thread pool (decord releases the GIL), one batched write."""
        shapes = [self.frame_shape(hit.record) for hit, _, _, _ in selections]
        keys_per = [
            [frame_key(hit.record.fingerprint, i, shape) for i in indices]
            for (hit, indices, _, _), shape in zip(selections, shapes, strict=True)
        ]
        errors_before = self.cache.errors
        cached = self.cache.get_many([k for keys in keys_per for k in keys])
        per_video: list[list[np.ndarray | None]] = []
        jobs: list[tuple[int, list[int]]] = []  # (selection, positions that missed)
        offset = 0
        for s, keys in enumerate(keys_per):
            got = cached[offset : offset + len(keys)]
            offset += len(keys)
            per_video.append(got)
            missing = [j for j, frame in enumerate(got) if frame is None]
            result.cache_hits += len(keys) - len(missing)
            result.cache_misses += len(missing)
            if missing:
                jobs.append((s, missing))

        def decode(job):
            s, missing = job
            hit, indices = selections[s][0], selections[s][1]
            try:
                return decode_frames(hit.record.path, indices[missing], size=shapes[s])
            except (VideoError, OSError) as exc:
                return exc

        if len(jobs) > 1 and self.config.decode_workers > 1:
            decoded = list(self._decode_pool().map(decode, jobs))
        else:
            decoded = [decode(job) for job in jobs]
        failed: set[int] = set()
        fresh: dict[str, np.ndarray] = {}
        for (s, missing), frames in zip(jobs, decoded, strict=True):
            hit = selections[s][0]
            if isinstance(frames, Exception):
                logger.warning("stage 2 skipped for %s: %s", hit.video_id, summarize(frames))
                result.warnings.append(f"{hit.video_id}: frames could not be decoded; kept its stage-1 rank")
                failed.add(s)
                continue
            self.decoded_frames += len(missing)
            result.decoded_frames += len(missing)
            for j, frame in zip(missing, frames, strict=True):
                per_video[s][j] = frame
                fresh[keys_per[s][j]] = frame
        if fresh:
            self.cache.set_many(fresh)
        result.cache_errors += self.cache.errors - errors_before
        return [None if s in failed else np.stack(got) for s, got in enumerate(per_video)]  # [K', H, W, 3]

    def frame_shape(self, record) -> tuple[int, int]:
        """(w, h) at which stage 2 decodes this video's frames: the backbone's working size for it."""
        return working_size(int(record.width), int(record.height), self.frame_size)

    def _decode_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.config.decode_workers, thread_name_prefix="qaslr-decode")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    # -- evidence helpers ------------------------------------------------------------------------
    def _indexed_evidence(self, p: SearchParams, q_vec: np.ndarray, hit: Hit) -> None:
        """Stage-1 evidence: the top-K' frames of the bank by relevance, chronological."""
        bank = self.index.frame_bank(hit.video_id)
        relevance = relevance_scores(bank.embeddings, q_vec)
        pos = np.sort(np.argsort(-relevance, kind="stable")[: p.frames])
        hit.evidence = [
            EvidenceItem(int(bank.frame_indices[i]), float(bank.timestamps[i]), float(relevance[i]))
            for i in pos
        ]
        fps = float(hit.record.fps) if hit.record is not None else 1.0
        hit.moment = best_window(
            bank.frame_indices[pos], relevance[pos], self._clip_len(len(pos)), fps, _duration(hit.record)
        )
        hit.moment_source = "relevance"

    def _clip_len(self, num_selected: int) -> int:
        positions, _ = self.encoder.clip_plan(num_selected)
        return int(positions.shape[1]) if positions.size else 1

    @torch.inference_mode()
    def _initial_readout(self) -> torch.Tensor:
        """z_0: the readout of the initial think tokens H_0 (Eq. 6, 9), the baseline of the first gain."""
        if self._z0 is None:
            head = self.encoder.head
            self._z0 = head.readout(head.init_state(1))[0].float().cpu()
        return self._z0


def relevance_scores(embeddings: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Frame-bank relevance q · f_c: [C, d] float16 x [d] -> [C] float32."""
    return np.asarray(embeddings, dtype=np.float32) @ np.asarray(q, dtype=np.float32)


def best_step(step_scores: np.ndarray, baseline: float) -> int:
    """argmax_t (q·z_t - q·z_{t-1}) with q·z_0 = ``baseline``; ties go to the earliest step."""
    s = np.asarray(step_scores, dtype=np.float64)
    gains = np.diff(np.concatenate([[baseline], s]))
    return int(np.argmax(gains))


def best_window(indices: np.ndarray, relevance: np.ndarray, length: int, fps: float, duration: float | None):
    """Span of the ``length`` consecutive frames with the highest mean relevance."""
    n = len(indices)
    if n == 0:
        return None
    length = max(1, min(length, n))
    sums = np.convolve(np.asarray(relevance, dtype=np.float64), np.ones(length), mode="valid")
    start = int(np.argmax(sums))
    return frame_span(np.asarray(indices)[start : start + length], fps, duration)


def frame_span(indices, fps: float, duration: float | None) -> tuple[float, float]:
    """[first frame's time, one frame past the last frame's time], clipped to the duration."""
    indices = np.asarray(indices)
    start = float(indices.min()) / fps
    end = float(indices.max() + 1) / fps
    if duration is not None:
        end = min(end, duration)
    return start, max(start, end)


def _duration(record) -> float | None:
    value = getattr(record, "duration_s", None)
    return float(value) if value is not None else None
