"""The two-stage search (paper §3.1, §A.4, Table 4), usable with or without HTTP.

    q = backbone text embedding of the query                              (query_embed)
    stage 1: FAISS top-R over the stored v_j (optionally within a filter) (filter, faiss)
    stage 2 (mode "rerank"): the heavy tier (engine.tiers) re-scores the R candidates with query-aware
        selection and query-conditioned encoding (selection, decode, encode, head), s_ij = q · v_ij
A stage-1 miss stays a miss: stage 2 only reorders the shortlist. One ranking, one score space: every
candidate the heavy tier scores goes through the same pathway; a streaming stage 2 applies §3.1's
short-input rule to the whole request (K' <= L: the one-shot tier for all, said in the answer's
``rerank_embedder``, each hit's ``tier`` and a warning) and refuses K' above its head's trained K'.
What is said (``sources``, engine.spoken): ``said`` ranks the index's cues instead (no stage 1 or 2),
``both`` fuses that spoken ranking with the visual one; a page on which nothing was said is the
visual answer unchanged.

Evidence and the best moment (engine.moments). The evidence of a reranked candidate is its K'
selected frames (chronological) with their frame-bank relevance, and its moment comes from the
streaming step that gained most similarity to q (or, one-shot, the best window of frames). In
``indexed`` mode the evidence is the top-K' frames of the bank by relevance.
Scores are reproducible: selection is seeded per (request seed, query, candidate) as training seeds
it (models.selection.selection_seed), and frames come from a cache that keeps exactly the pixels
first read (decoded, or from the index's frame store), so warm and cold requests give identical
scores.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from core.config import (
    Embedder,
    SearchMode,
    Sources,
)
from engine.batching import QUERIES, serialize_processor
from engine.cache import FrameCache
from engine.clock import DeadlineExceeded, SearchCancelled, StageClock
from engine.frames import FrameSource, FrameStats
from engine.hits import EvidenceItem, Hit, bank_relevance
from engine.moments import (
    Timeline,
    duration_of,
    relevance_runs,
    relevance_timeline,
    run_span,
)
from engine.refine import MomentRefiner
from engine.relevance import NullSample, relevance
from engine.request import InvalidRequest, SearcherConfig, SearchParams, resolve_request, unknown_filter_keys
from engine.spoken import (
    combined_relevance,
    cue_clip,
    cue_moment_preferred,
    fuse,
    fuse_clips,
    fused_updates,
    said_search,
    split_clues,
    spoken_hits,
    spoken_page,
)
from engine.temporal import asks_for_time
from engine.tiers import RerankStats, TierRequest, encoding_tier
from engine.tiers.frame import FrameTier, frame_score
from engine.tiers.timehead import TimeTier, weakest_event_relevance
from models.selection import query_key
from models.streaming import VideoEncoder

__all__ = [
    "ClipHit",
    "DeadlineExceeded",
    "EvidenceItem",
    "Hit",
    "InvalidRequest",
    "SearchCancelled",
    "SearchOutcome",
    "Searcher",
]

logger = logging.getLogger(__name__)

STAGES = (
    "queue", "query_queue", "query_embed", "filter", "faiss", "spoken", "frame", "selection", "decode",
    "heavy_queue", "encode", "head", "moment", "refine_queue", "refine", "total",
)  # fmt: skip
STAGE2_MODES = (SearchMode.FRAMES, SearchMode.RERANK)
MAX_CLIPS_PER_VIDEO = 8  # group_by "clip": moments kept per candidate


@dataclass
class SearchOutcome:
    query: str
    mode: str
    embedder: str
    shortlist: int
    frames: int
    hits: list[Hit]
    clips: list[ClipHit] | None = None  # group_by "clip": the moments, best first
    more: bool = False  # the stage-1 ranking goes on past this page
    offset: int = 0
    rerank_embedder: str | None = None
    timings_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    cache_hits: int = 0
    cache_misses: int = 0
    store_frames: int = 0
    decoded_frames: int = 0
    cache_errors: int = 0
    store_errors: int = 0
    warnings: list[str] = field(default_factory=list)
    sources: str = Sources.SEEN  # what the ranking is by (engine.spoken)


@dataclass
class ClipHit:
    """One moment of a candidate (group_by "clip")."""

    hit: Hit  # its video's result
    score: float  # the frame tier's score over the moment's frames (engine.tiers.frame)
    moment: tuple[float, float]
    evidence: list[EvidenceItem]
    relevance: float | None = None  # engine.relevance of the moment's best frame (or its cue's coverage)
    source: str = Sources.SEEN  # found by what is seen, said, or both (engine.spoken)
    cue: dict | None = None  # the cue that matched it (said, both)
    visual_relevance: float | None = None


class Searcher:
    """Stage 1 + stage 2 over an open index. ``encoder`` embeds exactly as the index was built (and
    embeds queries); ``rerank_encoder`` re-encodes candidates in stage 2 (default: ``encoder``; a
    streaming rerank head, or one-shot with a text-conditioning choice); ``gate`` enables early exit.
    Thread-safe: concurrent searches share only locked state (the frame cache, the frame source's
    counters and decode pool, the index reader, FAISS behind ``_faiss_lock``, the backbone's
    processor); with a ``batcher`` (:class:`engine.batching.EncodeBatcher`) the heavy tier's encodes
    of all concurrent searches run in shared backbone calls on the batcher's thread."""

    def __init__(
        self,
        encoder: VideoEncoder,
        index,
        cache: FrameCache,
        *,
        config: SearcherConfig | None = None,
        frame_size: int | None = None,
        rerank_encoder: VideoEncoder | None = None,
        oneshot_encoder: VideoEncoder | None = None,
        gate=None,
        batcher=None,
        time_head=None,
    ):
        self.encoder = encoder
        self.index = index
        self.cache = cache
        config = self.config = config or SearcherConfig()
        manifest = index.manifest
        self.embedder = encoder.mode
        if manifest.embedder != encoder.mode:
            raise ValueError(
                f"the index was built with the {manifest.embedder!r} embedder but the encoder is {encoder.mode!r}"
            )
        size = int(frame_size or manifest.frame_size)
        self.frames = FrameSource(
            cache,
            frame_size=size,
            decode_workers=config.decode_workers,
            # the index's stored pixels are at its own working size: another size decodes instead
            store=index if size == manifest.frame_size and hasattr(index, "stored_rows") else None,
        )
        tier_options = dict(
            temperature=config.temperature,
            exit_min_steps=config.exit_min_steps,
            encode_chunk=config.encode_chunk,
        )
        self.reranker = encoding_tier(
            rerank_encoder or encoder, index, self.frames, gate=gate, **tier_options
        )
        self.reranker.batcher = batcher
        self.batcher = batcher
        # §3.1 for whole requests: a streaming stage 2 hands a request of K' <= L to the one-shot
        # tier (every candidate of it), never some candidates of one ranking
        self.short_reranker = None
        if self.reranker.streaming:
            stage2 = self.reranker.encoder
            oneshot_encoder = oneshot_encoder or VideoEncoder(
                stage2.backbone, config=stage2.config, instruction=stage2.instruction
            )
            self.short_reranker = encoding_tier(oneshot_encoder, index, self.frames, **tier_options)
            self.short_reranker.batcher = batcher
        self._faiss_lock = threading.Lock()  # a GPU FAISS index is not safe to search from two threads
        if batcher is not None:
            serialize_processor(getattr(encoder, "backbone", None))
        self.frame_tier = FrameTier(index, aggregate=config.frame_aggregate)
        self.time_tier = None if time_head is None else TimeTier(index, encoder, time_head)
        self.null_sample: NullSample | None = None
        backbone = getattr(encoder, "backbone", None)
        self.refiner = (
            MomentRefiner(backbone, self.frames, batcher=batcher)
            if config.refine_moments > 0 and backbone is not None
            else None
        )

    @property
    def rerank_embedder(self) -> Embedder:
        return self.reranker.encoder.mode

    @property
    def head_frames(self) -> int | None:
        """K' the streaming stage-2 head was trained with (its recorded clip plan), else None."""
        head = self.reranker.encoder.head
        plan = None if head is None else head.config.clip_plan
        return None if plan is None else plan.frames

    def heavy_tier(self, frames: int):
        """The heavy tier for a request of ``frames`` = K': the streaming head's, unless K' <= L
        (§3.1: short inputs keep the backbone's own pathway), which goes one-shot for every candidate."""
        if self.short_reranker is not None and self.reranker.encoder.is_short(frames):
            return self.short_reranker
        return self.reranker

    @property
    def decoded_frames(self) -> int:
        """Frames decoded from video files over this searcher's life (cache misses served)."""
        return self.frames.decoded_frames

    def frame_shape(self, record) -> tuple[int, int]:
        return self.frames.frame_shape(record)

    def close(self) -> None:
        self.frames.close()

    # -- request handling ------------------------------------------------------------------------
    def resolve(self, request) -> SearchParams:
        """Defaults and bounds of a request-like object (a SearchRequest, SearchParams, or dict).

        A rerank request for more frames than the streaming head was trained with (its clip plan's
        K') is refused (InvalidRequest on ``frames``, HTTP 422): the head never saw clips cut from
        more frames. Fewer frames are allowed: they are cut by the same rule (Eq. 3, checked against
        the head's plan for every count up to K' when the engine loaded it) as training cuts a
        candidate with fewer frames than K' (a short window, a small bank: every frame), so they are
        the head's own plan at a smaller budget, a latency choice left to the client; K' <= L goes
        one-shot (:meth:`heavy_tier`)."""
        p = resolve_request(
            request, self.config, can_exit=self.reranker.gate is not None and self.reranker.streaming
        )
        trained = self.head_frames
        if (
            trained is not None
            and p.mode == SearchMode.RERANK
            and p.frames > trained
            and self.heavy_tier(p.frames) is self.reranker
        ):
            short = self.reranker.encoder.config.short_video_frames
            raise InvalidRequest(
                "frames",
                f"this server's streaming rerank head was trained on K' = {trained} frames per "
                f"candidate: ask for at most {trained} (at most {short} re-encodes one-shot)",
            )
        return p

    def search(
        self, request, *, deadline: float | None = None, on_update=None, cancelled=None
    ) -> SearchOutcome:
        """Run one search. ``deadline`` is a ``time.monotonic()`` instant checked between stages;
        ``on_update(hits)`` (optional) sees the stage-1 ranking, then the ranking after each chunk
        of stage 2 (progressive results); ``cancelled()`` (optional) True stops the search between
        stages with :class:`SearchCancelled` (and drops its clips waiting in the batcher)."""
        t_start = time.perf_counter()
        p = self.resolve(request)
        result = SearchOutcome(
            query=p.query or "",
            mode=p.mode,
            embedder=self.embedder,
            shortlist=p.shortlist,
            frames=p.frames,
            hits=[],
            warnings=list(p.notes),
            offset=p.offset,
            sources=p.sources,
        )
        clock = StageClock(result.timings_ms, deadline, cancelled)

        # sources=both: "quoted phrases" are what is said, the rest what is seen (engine.spoken); an
        # index without cues is searched as before, quotes and all
        both = p.sources == Sources.BOTH and getattr(self.index, "has_cues", False)
        seen_text, said_text = split_clues(p.query) if both else (p.query, p.query)
        q = self._embed_query(p, seen_text, clock)  # [1, d]
        q_np = q.numpy().astype(np.float32)

        allowed = None
        if p.filter:
            with clock.stage("filter"):
                try:
                    allowed = self.index.filter_ids(p.filter)
                except (ValueError, TypeError, KeyError) as exc:
                    raise InvalidRequest("filter", str(exc) or "malformed filter") from exc
                result.warnings += unknown_filter_keys(self.index, p.filter)
        if allowed is not None and not allowed:
            result.timings_ms["total"] = (time.perf_counter() - t_start) * 1e3
            return result

        spoken, spoken_only = None, []
        if p.sources == Sources.SAID:  # what is said alone: no stage 1, no stage 2
            return said_search(self, p, q_np[0], allowed, result, clock, t_start)
        with clock.stage("faiss"):
            # this page's window of the ranking, and one more to know whether another page follows
            with self._faiss_lock:
                found = self.index.search(q_np, p.offset + p.shortlist + 1, allowed_ids=allowed)[0]
        result.more = len(found) > p.offset + p.shortlist
        shown = [v for v, _ in found[: p.offset]]
        found = [(rank, v, s) for rank, (v, s) in enumerate(found, start=1)][
            p.offset : p.offset + p.shortlist
        ]
        if p.sources == Sources.BOTH:
            with clock.stage("spoken"):
                spoken = spoken_page(self.index, said_text, offset=p.offset, size=p.shortlist, allowed=allowed,
                                     shown=shown, visual_ids=[v for _, v, _ in found])  # fmt: skip
            if spoken is not None:  # videos an earlier page showed through speech are not shown again
                found = [f for f in found if f[1] not in spoken.earlier]
                result.more = result.more or spoken.more
                spoken_only = spoken_hits(self, spoken, {v for _, v, _ in found}, q_np[0])
                on_update = fused_updates(self, on_update, spoken, spoken_only, p, q_np[0])
        hits: list[Hit] = []
        for rank, video_id, score in found:
            hits.append(
                Hit(
                    video_id=video_id,
                    score=float(score),
                    stage1_score=float(score),
                    stage1_rank=rank,
                    record=self.index.video(video_id),
                )
            )

        if on_update is not None:
            on_update(list(hits))
        if p.mode in STAGE2_MODES and hits:
            stats = RerankStats()
            try:
                tier_request = TierRequest(
                    query=seen_text if p.image is None else None, q=q[0], frames=p.frames, seed=p.seed,
                    stats=stats, clock=clock, exit_threshold=p.exit_threshold, on_update=on_update,
                    chunk=p.update_chunk, query_key=query_key(seen_text, p.image),
                )  # fmt: skip
                hits = self._cascade(p, tier_request, hits, result)
            finally:
                f = stats.frames
                result.cache_hits, result.cache_misses = f.cache_hits, f.cache_misses
                result.decoded_frames, result.cache_errors = f.decoded_frames, f.cache_errors
                result.store_frames, result.store_errors = f.store_frames, f.store_errors
                result.warnings += stats.warnings
        if spoken is not None:
            with clock.stage("spoken"):
                hits = fuse(hits, spoken_only, spoken, rule=self.config.fusion, offset=p.offset,
                            relevance_of=lambda h: self._visual_relevance(q_np[0], h))  # fmt: skip
        if p.group_by == "clip":
            with clock.stage("moment"):
                result.clips = self._clips(p, q_np[0], [h for h in hits if h.stage1_rank is not None])
                if spoken is not None:
                    result.clips = fuse_clips(result.clips, spoken, hits, rule=self.config.fusion,
                                              make_clip=lambda h, cue: cue_clip(self, p, q_np[0], h, cue))  # fmt: skip
                result.clips = [c for c in result.clips if p.min_score is None or c.relevance >= p.min_score][
                    : p.top_k
                ]
        with clock.stage("frame"):
            self._relevance(q_np[0], hits)
        if p.min_score is not None:  # on the relevance a user can read (engine.relevance), in every mode
            hits = [h for h in hits if h.relevance is not None and h.relevance >= p.min_score]
        result.hits = hits[: p.top_k]
        if p.include_evidence:
            with clock.stage("moment"):
                for hit in result.hits:
                    if hit.evidence is None:  # not re-encoded: the top-K' bank frames
                        self._bank_evidence(p, q_np[0], hit)
                    if hit.moment_source != TimeTier.name:  # the time tier's moment spans its events
                        self._moment(q_np[0], hit)
                    if cue_moment_preferred(hit):  # what was said matched it at least as well
                        hit.moment, hit.moment_source = (hit.spoken.start_s, hit.spoken.end_s), "cue"
                        hit.moment_run = None
                    hit.timeline = self._timeline(q_np[0], hit)
                for clip in result.clips or []:  # a clip's video may lie outside the top videos
                    if clip.hit.timeline is None:
                        clip.hit.timeline = self._timeline(q_np[0], clip.hit)
            self._refine(p, q_np[0], result, clock)
        else:
            for hit in result.hits:
                hit.evidence, hit.moment, hit.moment_source = None, None, None
        result.timings_ms["total"] = (time.perf_counter() - t_start) * 1e3
        return result

    def _embed_query(self, p: SearchParams, text: str | None, clock) -> torch.Tensor:
        """q, [1, d]. A search that goes on to stage 2 embeds its text query in a backbone call
        shared with other searches' queries (the batcher, when there is one: its wait is booked as
        ``query_queue``); a stage-1-only search (the light lane) or an image query embeds its own."""
        if self.batcher is None or p.image is not None or p.mode not in STAGE2_MODES:
            with clock.stage("query_embed"):
                images = None if p.image is None else [p.image]
                return self.encoder.embed_queries([text], images=images).float()
        (q,) = self.batcher.run(
            clock, self.encoder, [text], kind=QUERIES, queue="query_queue", compute="query_embed"
        )
        return q.float()[None]

    def _cascade(self, p: SearchParams, request: TierRequest, hits: list[Hit], result: SearchOutcome):
        """Stage 2 as a cascade: the frame tier over all R candidates, then the heavy tier (one-shot
        or the streaming head) over the frame tier's top ``p.heavy`` only, and only when the frame
        tier's first two scores lie within ``p.heavy_margin`` (its answer is too close to call; by
        default 0, never: core.config says why) or the query asks about order or count and the heavy
        tier is a streaming head. The heavy tier orders
        what it scored, by its own score, above the rest, which keep the frame tier's order: one
        score space per ranked group, and every hit says which tier ranked it. A query about order
        or count that the server's time head answers goes to the time tier instead, over all R
        (it reads the frame banks: no candidate is re-encoded)."""
        hits = self.frame_tier.run(request, hits)
        m = min(p.heavy, len(hits)) if p.mode == SearchMode.RERANK else 0
        plan = self.time_tier.plan(request.query) if m and self.time_tier is not None else None
        if plan is not None:  # order or count: the time head reads every candidate (engine.tiers.timehead)
            result.rerank_embedder = TimeTier.name
            return self.time_tier.run(request, hits, plan)
        if m and p.heavy_margin is not None and len(hits) > 1:
            lead = (hits[0].frame_score or 0.0) - (hits[1].frame_score or 0.0)
            timed = self.reranker.streaming and asks_for_time(request.query)  # engine.temporal
            if lead >= p.heavy_margin and not timed:  # the frame tier's answer is not close to call
                return hits
        if m == 0:
            return hits
        tier = self.heavy_tier(p.frames)
        if tier is not self.reranker:  # K' <= L: the whole request one-shot (§3.1), and it says so
            result.warnings.append(
                f"frames = {p.frames} is at most L = {self.reranker.encoder.config.short_video_frames}: "
                "stage 2 re-encoded every candidate one-shot (short inputs keep the backbone's own "
                "pathway), not with the streaming head"
            )
            if request.exit_threshold is not None:
                result.warnings.append("exit_threshold ignored: one-shot encoding has no early exit")
                request = dataclasses.replace(request, exit_threshold=None)
        result.rerank_embedder = tier.encoder.mode
        top, rest = hits[:m], hits[m:]
        outer = request.on_update
        if outer is not None:
            request.on_update = lambda sub: outer(self._heavy_first(sub, tier.name) + rest)
        top = tier.run(request, top)
        return self._heavy_first(top, tier.name) + rest

    def _heavy_first(self, hits: list[Hit], name: str) -> list[Hit]:
        """The heavy tier's hits by its score, then those it could not score in frame-tier order."""
        heavy = sorted((h for h in hits if h.tier == name), key=lambda h: (-h.score, h.stage1_rank))
        light = sorted(
            (h for h in hits if h.tier != name), key=lambda h: (-(h.frame_score or 0.0), h.stage1_rank)
        )
        return heavy + light

    # -- evidence helpers ------------------------------------------------------------------------
    def _timeline(self, q_vec: np.ndarray, hit: Hit) -> Timeline:
        """Relevance over time, from what stage 2 computed: the readout similarity q·z_t after each
        streamed clip, or (one-shot, stage 1) the frame bank's relevance q·f_c."""
        if hit.step_scores is not None and hit.step_spans:
            return Timeline(
                "streaming",
                [(a, b, float(v)) for (a, b), v in zip(hit.step_spans, hit.step_scores, strict=False)],
            )
        bank = self.index.frame_bank(hit.video_id)
        relevance = bank_relevance(self.index, hit, q_vec)
        fps = float(hit.record.fps) if hit.record is not None else 1.0
        return relevance_timeline(bank.timestamps, relevance, 1.0 / fps, duration_of(hit.record))

    def _clips(self, p: SearchParams, q_vec: np.ndarray, hits: list[Hit]) -> list[ClipHit]:
        """group_by "clip": every candidate's moments (the runs of bank frames above half-way from the
        video's median relevance to its peak, engine.moments), each scored like the frame tier
        scores a video but over the run's frames only, best first across the candidates: a video's
        best moment carries its frame score, so the clip ranking and the video ranking agree."""
        clips = []
        null = self._null(q_vec)
        for hit in hits:
            bank = self.index.frame_bank(hit.video_id)
            relevance_values = bank_relevance(self.index, hit, q_vec)
            fps = float(hit.record.fps) if hit.record is not None else 1.0
            for run in relevance_runs(relevance_values, limit=MAX_CLIPS_PER_VIDEO):
                rows = np.arange(run.first, run.last + 1)
                score = frame_score(relevance_values, self.frame_tier.aggregate, rows=rows)
                evidence = [  # a clip's moment is the result itself; its frames are evidence
                    EvidenceItem(
                        int(bank.frame_indices[i]), float(bank.timestamps[i]), float(relevance_values[i])
                    )
                    for i in rows
                    if p.include_evidence
                ]
                span = run_span(run, bank.timestamps, 1.0 / fps, duration_of(hit.record))
                clip_relevance = relevance(float(relevance_values[run.peak]), null)
                clips.append(
                    ClipHit(hit=hit, score=score, moment=span, evidence=evidence, relevance=clip_relevance)
                )
        clips.sort(key=lambda c: (-c.score, c.hit.stage1_rank, c.moment[0]))
        return clips

    def _visual_relevance(self, q_vec: np.ndarray, hit: Hit) -> float | None:
        if hit.events is not None:  # a query about time: its weakest event's (each must be shown)
            return weakest_event_relevance(hit, self._null)
        if hit.peak is None:
            rel = bank_relevance(self.index, hit, q_vec)
            hit.peak = float(rel.max()) if rel.size else None
        return None if hit.peak is None else relevance(hit.peak, self._null(q_vec))

    def _null(self, q_vec: np.ndarray) -> float:
        if self.null_sample is None:  # drawn once per index, on first use
            self.null_sample = NullSample(self.index)
        return self.null_sample.median(q_vec)

    def _relevance(self, q_vec: np.ndarray, hits: list[Hit]) -> None:
        """Each hit's relevance (engine.relevance): its bank's peak against the collection's null."""
        if not hits:
            return
        for hit in hits:
            hit.visual_relevance = self._visual_relevance(q_vec, hit)
            hit.relevance = combined_relevance(hit.visual_relevance, hit.spoken)

    def _bank_evidence(self, p: SearchParams, q_vec: np.ndarray, hit: Hit) -> None:
        """Evidence of a hit no heavy tier re-encoded: the top-K' frames of its bank by relevance,
        chronological."""
        bank = self.index.frame_bank(hit.video_id)
        relevance = bank_relevance(self.index, hit, q_vec)
        pos = np.sort(np.argsort(-relevance, kind="stable")[: p.frames])
        hit.evidence = [
            EvidenceItem(int(bank.frame_indices[i]), float(bank.timestamps[i]), float(relevance[i]))
            for i in pos
        ]

    def _moment(self, q_vec: np.ndarray, hit: Hit) -> None:
        """The hit's moment, by one rule for every mode and tier: the run of bank frames around the
        relevance peak above half-way from the video's median to its peak (engine.moments), its
        edges half-way to the neighbouring bank frames (refined later for the top results)."""
        bank = self.index.frame_bank(hit.video_id)
        relevance = bank_relevance(self.index, hit, q_vec)
        runs = relevance_runs(relevance, limit=1)
        if not runs:
            hit.moment, hit.moment_source = None, None
            return
        fps = float(hit.record.fps) if hit.record is not None else 1.0
        hit.moment = run_span(runs[0], bank.timestamps, 1.0 / fps, duration_of(hit.record))
        hit.moment_source = "relevance"
        hit.moment_run = runs[0]

    def _refine(self, p: SearchParams, q_vec: np.ndarray, result: SearchOutcome, clock) -> None:
        """Refine the moments of the first ``refine_moments`` results at the source's frame rate (a
        stage-2 step: stage-1-only searches keep bank-resolution moments and their cost)."""
        if self.refiner is None or p.mode not in STAGE2_MODES:
            return
        todo = [h for h in result.hits[: self.config.refine_moments] if getattr(h, "moment_run", None)]
        if not todo:
            return
        stats = FrameStats()
        with clock.stage("refine"):
            for hit in todo:
                span = self.refiner.refine(
                    hit, self.index.frame_bank(hit.video_id), hit.moment_run, q_vec, stats, clock=clock
                )
                if span is not None:
                    hit.moment = span
                    hit.moment_source = "refined"
        # the refiner's reads are its own: the answer's cache counts are the heavy tier's frames
