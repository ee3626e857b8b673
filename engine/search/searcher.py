"""The two-stage search (paper §3.1, §A.4, Table 4) as a straight line of stages over one
:class:`engine.search.state.SearchState`, usable with or without HTTP:

    resolve      the request's defaults and bounds, once (engine.search.request)
    stage 1      q embedded, the filter, the FAISS window of R candidates (engine.search.stage1)
    what is said sources=said ranks the cues instead; both joins the spoken page (engine.search.said)
    stage 2      the cascade: the frame tier, then the time or heavy tier as its policy routes
                 (engine.search.cascade, engine.tiers)
    fusion       both: the seen and said rankings fused (engine.spoken.fusion)
    results      clips, relevance, min_score, evidence, moments, timelines (engine.search.shape)

Pages cut one ranking: the ranking is stage 2's order of the first window of R stage-1 candidates,
then of the next window of R, and so on (R, the shortlist, is the request's or the server's and
never depends on ``top_k``). A page starts where the last ended (``offset``: its window, ``skip``:
the results of that window earlier pages showed) and holds the next ``top_k`` results, running on
into the next window when its own ends. Along an answer ``relevance`` never rises
(engine.relevance.monotone, from the start of the page's first window), and ``min_score`` filters
on that relevance, so it ends the ranking where the first result falls below it.

A stage-1 miss stays a miss: stage 2 only reorders the shortlist. One ranking, one score space:
every candidate the heavy tier scores goes through the same pathway; a streaming stage 2 applies
§3.1's short-input rule to the whole request (K' <= L: the one-shot tier for all, said in the
answer's ``rerank_embedder``, each hit's ``tier`` and a warning) and refuses K' above its head's
trained K'. Scores are reproducible: selection is seeded per (request seed, query, candidate) as
training seeds it (models.selection.selection_seed), and frames come from a cache that keeps
exactly the pixels first read, so warm and cold requests give identical scores.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from core.config import FRAME_SCAN_MAX_BYTES, Embedder, SearchMode, Sources
from engine.cache import FrameCache
from engine.errors import InvalidRequest
from engine.frames import FrameSource
from engine.refine import MomentRefiner
from engine.relevance import monotone
from engine.results import Hit, SearchOutcome
from engine.runtime.batching import serialize_processor
from engine.search import said
from engine.search.cascade import Cascade
from engine.search.evidence import Evidence
from engine.search.request import SearcherConfig, SearchParams, resolve_request
from engine.search.shape import finish_page, rank_window
from engine.search.stage1 import STAGE2_MODES, Stage1
from engine.search.state import SearchState
from engine.spoken import split_clues
from engine.tiers import encoding_tier
from engine.tiers.frame import FrameTier
from engine.tiers.timehead import TimeTier, weakest_event_relevance
from models.streaming import VideoEncoder

__all__ = ["Searcher"]

# an answer's stage-2 counters, summed over the windows of its page
_COUNTERS = ("cache_hits", "cache_misses", "decoded_frames", "cache_errors", "store_frames", "store_errors")

logger = logging.getLogger(__name__)


class Searcher:
    """Stage 1 + stage 2 over an open index. ``encoder`` embeds exactly as the index was built (and
    embeds queries); ``rerank_encoder`` re-encodes candidates in stage 2 (default: ``encoder``; a
    streaming rerank head, or one-shot with a text-conditioning choice); ``gate`` enables early exit.
    Thread-safe: concurrent searches share only locked state (the frame cache, the frame source's
    counters and decode pool, the index reader, FAISS behind a lock, the backbone's processor); with
    a ``batcher`` (engine.runtime.batching.EncodeBatcher) the backbone work of all concurrent
    searches runs in shared backbone calls on the batcher's threads."""

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
        router=None,
    ):
        self.encoder, self.index, self.cache, self.batcher = encoder, index, cache, batcher
        config = self.config = config or SearcherConfig.from_engine_config()
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
        self.cascade = self._cascade(rerank_encoder or encoder, oneshot_encoder, gate, time_head, router)
        self.stage1 = Stage1(encoder, index, batcher=batcher, frame_scan=self._frame_scan(index))
        if batcher is not None:
            serialize_processor(getattr(encoder, "backbone", None))
        backbone = getattr(encoder, "backbone", None)
        refiner = None
        if config.refine_moments > 0 and backbone is not None:
            # the index's edge frames were embedded at its own working size: another size decodes
            same_size = size == manifest.frame_size and hasattr(index, "edge_frames")
            refiner = MomentRefiner(
                backbone, self.frames, batcher=batcher, edges=index.edge_frames if same_size else None
            )
        self.evidence = Evidence(
            index, aggregate=config.frame_aggregate, refiner=refiner, refine_moments=config.refine_moments
        )

    def _frame_scan(self, index) -> bool:
        """Whether stage 1 ranks the frame banks by a motion query's selection query
        (engine.search.stage1): where one is served and the banks fit FRAME_SCAN_MAX_BYTES; they are
        read now, not in a user's search."""
        if not self.cascade.selects or not hasattr(index, "frame_scan"):
            return False
        size = index.frame_scan_bytes()
        if size > FRAME_SCAN_MAX_BYTES:
            logger.warning(
                "stage 1 does not scan the frame banks for motion queries: they take %.1f GB in memory, "
                "more than %.1f GB (core.config.FRAME_SCAN_MAX_BYTES); FAISS rankings alone",
                size / 1e9, FRAME_SCAN_MAX_BYTES / 1e9,
            )  # fmt: skip
            return False
        index.frame_scan()
        return True

    def _cascade(
        self, stage2: VideoEncoder, oneshot: VideoEncoder | None, gate, time_head, router
    ) -> Cascade:
        """Stage 2's tiers over this index: the frame tier, the heavy tier (and, for a streaming one,
        the one-shot tier its requests of K' <= L go to, §3.1), the time tier when a time head serves,
        and the router that sends queries about time to a head that reads moments."""
        config = self.config
        options = dict(
            temperature=config.temperature,
            exit_min_steps=config.exit_min_steps,
            encode_chunk=config.encode_chunk,
            moments=config.oneshot_moments,
        )
        reranker = encoding_tier(stage2, self.index, self.frames, gate=gate, **options)
        reranker.batcher = self.batcher
        short = None
        if reranker.streaming:
            oneshot = oneshot or VideoEncoder(
                stage2.backbone, config=stage2.config, instruction=stage2.instruction
            )
            short = encoding_tier(oneshot, self.index, self.frames, **options)
            short.batcher = self.batcher
        return Cascade(
            FrameTier(self.index, aggregate=config.frame_aggregate),
            reranker,
            short_reranker=short,
            time_tier=None if time_head is None else TimeTier(self.index, self.encoder, time_head),
            router=router,
            tie_margin=config.tie_margin,
            head_candidates=config.head_candidates,
            keep_margin=config.keep_margin,
            selection_weight=config.head_selection_weight,
            frame_weight=config.head_frame_weight,
            reversal_weight=config.head_reversal_weight,
            weakest_event=self._weakest_event,
            order_event_weight=config.order_event_weight,
            order_windows=config.order_windows,
            embed_queries=lambda texts: self.encoder.embed_queries(texts).float().numpy(),
        )

    def _weakest_event(self, hit) -> float | None:
        """Whether a time-tier hit shows every event its plan read: its weakest event's relevance
        (engine.relevance, against the collection's null); MIN_RELEVANCE separates a match from nothing
        like it (docs/results.md)."""
        return weakest_event_relevance(hit, self.evidence.null)

    # -- what the tiers are ----------------------------------------------------------------------------
    @property
    def reranker(self):
        """The heavy tier (the streaming head's, or one-shot)."""
        return self.cascade.reranker

    @property
    def frame_tier(self) -> FrameTier:
        return self.cascade.frame_tier

    @property
    def time_tier(self) -> TimeTier | None:
        return self.cascade.time_tier

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
        return self.cascade.heavy_tier(frames)

    @property
    def decoded_frames(self) -> int:
        """Frames decoded from video files over this searcher's life (cache misses served)."""
        return self.frames.decoded_frames

    def frame_shape(self, record) -> tuple[int, int]:
        return self.frames.frame_shape(record)

    def close(self) -> None:
        self.frames.close()

    # -- a search ----------------------------------------------------------------------------------
    def resolve(self, request, *, clamp_heavy: bool = False) -> SearchParams:
        """Defaults and bounds of a request-like object (a SearchRequest or dict; engine.search.request).

        A rerank request for more frames than the streaming head was trained with (its clip plan's
        K') is refused (InvalidRequest on ``frames``, HTTP 422): the head never saw clips cut from
        more frames. Fewer frames are allowed: they are cut by the same rule (Eq. 3, checked against
        the head's plan for every count up to K' when the engine loaded it) as training cuts a
        candidate with fewer frames than K', so they are the head's own plan at a smaller budget, a
        latency choice left to the client; K' <= L goes one-shot (:meth:`heavy_tier`)."""
        can_exit = self.reranker.gate is not None and self.reranker.streaming
        p = resolve_request(request, self.config, can_exit=can_exit, clamp_heavy=clamp_heavy)
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
        """Run one search (the stages of the module docstring). ``request``: a dict or request object,
        resolved here, or the :class:`SearchParams` :meth:`resolve` made. ``deadline`` is a
        ``time.monotonic()`` instant checked between stages; ``on_update(hits)`` (optional) sees the
        stage-1 ranking, then the ranking after each chunk of stage 2 (progressive results);
        ``cancelled()`` (optional) True stops the search between stages with
        :class:`engine.errors.SearchCancelled` (and drops its work waiting in the batcher)."""
        started = time.perf_counter()
        p = request if isinstance(request, SearchParams) else self.resolve(request)
        state = SearchState.begin(
            p, self.embedder, started=started, deadline=deadline, on_update=on_update, cancelled=cancelled
        )
        fusion = self.config.fusion
        # sources=both: "quoted phrases" are what is said, the rest what is seen (engine.spoken); an
        # index without cues is searched as before, quotes and all
        both = p.sources == Sources.BOTH and getattr(self.index, "has_cues", False)
        state.seen_text, state.said_text = split_clues(p.query) if both else (p.query, p.query)
        self.stage1.embed_query(state)
        self.cascade.read_query(state)  # about time? (the router), once for every window of the page
        if not self.stage1.apply_filter(state):
            return state.finish()
        self._page(state, fusion)
        return state.finish()

    def _window(self, state: SearchState, fusion: str) -> list:
        """One window of the ranking (R stage-1 candidates, or the spoken ranking's), ranked, with
        relevance: stage 1, what is said, stage 2, fusion (the module docstring's stages)."""
        p = state.params
        if p.sources == Sources.SAID:  # what is said alone: no stage 1 or 2
            return said.said_window(state, self.index, self.evidence, fusion=fusion)
        self.stage1.shortlist(state)
        if p.sources == Sources.BOTH:
            said.join(state, self.index, self.evidence, fusion=fusion)
        if state.on_update is not None:
            state.on_update(list(state.hits))
        if p.mode in STAGE2_MODES and state.hits:
            self.cascade.run(state)
            self._say_if_alone(state)
        said.fuse_hits(state, self.evidence, fusion=fusion)
        return rank_window(state, self.evidence, fusion=fusion)

    def _page(self, state: SearchState, fusion: str) -> None:
        """The page's ``top_k`` results from ``offset`` and ``skip`` on (module docstring), and where
        the next page starts (``outcome.next_offset``, ``outcome.next_skip``; None: the ranking ends)."""
        p, outcome = state.params, state.outcome
        if state.on_update is not None:
            state.on_update = self._relevance_updates(state, state.on_update)
        offset, skip, need, floor = p.offset, p.skip, p.top_k, None
        window, page, route = state, [], None
        totals = dict.fromkeys(_COUNTERS, 0)
        while True:
            for name in _COUNTERS:
                setattr(outcome, name, 0)
            ranked = self._window(window, fusion)
            if window is state:
                self._say_if_time_ignored(state)
            for name in _COUNTERS:
                totals[name] += getattr(outcome, name)
            route = route or outcome.route
            floor = monotone(ranked, floor)  # from the window's first result: pages agree on it
            taken = ranked[skip : skip + need]
            kept = taken
            if p.min_score is not None:  # relevance never rises: the first below ends the ranking
                kept = [r for r in taken if r.relevance is not None and r.relevance >= p.min_score]
            page += kept
            need -= len(kept)
            if len(kept) < len(taken):
                outcome.more = False
                break
            if skip + len(taken) < len(ranked):
                outcome.next_offset, outcome.next_skip = offset, skip + len(taken)
                break
            if not outcome.more:
                break
            offset, skip = offset + p.shortlist, 0
            if need == 0:
                outcome.next_offset, outcome.next_skip = offset, 0
                break
            window = dataclasses.replace(
                state, params=dataclasses.replace(p, offset=offset), hits=[], shown=[], spoken=None,
                spoken_only=[], on_update=None,
            )  # fmt: skip
        for name in _COUNTERS:
            setattr(outcome, name, totals[name])
        outcome.route = route
        outcome.warnings[:] = list(dict.fromkeys(outcome.warnings))  # a window's warning said once
        if p.group_by == "clip":
            outcome.clips = page
            outcome.hits = list({id(c.hit): c.hit for c in page}.values())
        else:
            outcome.hits = page
        finish_page(state, self.evidence)

    def _relevance_updates(self, state: SearchState, on_update):
        """Progress updates whose hits carry the relevance the final answer shows (so a streamed
        ``min_score`` filters on the same number): each hit's relevance, non-increasing in rank."""
        evidence = self.evidence

        def update(hits: list[Hit]) -> None:
            evidence.relevance(state.q_vec, hits)
            monotone(hits)
            on_update(hits)

        return update

    def _say_if_time_ignored(self, state: SearchState) -> None:
        """A query that asks for a count or an order ("... three times") that no tier answered for this
        request was searched as a plain description: the answer says so, naming what the words asked."""
        asked = self.cascade.time_asked(state)
        if asked is None or (state.time_read_by is not None and not state.time_reverted):
            return
        what = f"a count ({asked.count} times)" if asked.kind == "count" else "an order"
        head = self.time_tier.head.config if self.time_tier is not None else None
        reader = state.time_read_by
        why = (
            f"{reader.name} read it, but its first showed the events neither plainly nor, by its "
            "confidence, as asked: the words may not ask for that here"
            if state.time_reverted and reader.calibrated
            else f"{reader.name} read it, but its first did not show every event plainly: the words may "
            "not ask for that here"
            if state.time_reverted
            else "this server has no time head"
            if head is None
            else f"this server's time head answers {', '.join(head.conditions)}"
            if not head.supports(asked.condition, len(asked.events))
            else "the request's mode or heavy did not run the time head"
        )
        state.outcome.warnings.append(
            f"the query asks for {what}, which was ignored ({why}): it was searched as a description "
            f"of {' then '.join(repr(e) for e in asked.events)}"
        )

    def _say_if_alone(self, state: SearchState) -> None:
        """A window of one candidate (a narrow filter, the ranking's end) has nothing to reorder: when
        a heavy tier scored it anyway, the answer says so."""
        if len(state.hits) != 1 or state.hits[0].tier in (None, self.frame_tier.name):
            return
        state.outcome.warnings.append(
            f"only one candidate in the shortlist: the {state.hits[0].tier} tier scored it, though there "
            "was nothing to reorder (a narrower filter or the ranking's end)"
        )
