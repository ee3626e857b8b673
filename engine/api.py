"""The engine: one object that owns an index, its models, the frame cache, the searcher and the
runtime, and answers searches.

    from engine import EngineConfig, load_engine
    engine = load_engine(EngineConfig(index="data/index"))        # the backbone the index records
    outcome = engine.search_sync({"query": "a red square appears", "top_k": 5})
    outcome = await engine.search(request, deadline=..., on_update=..., cancelled=...)  # in a loop

A search goes: the request resolved once (:meth:`Engine.resolve`), admitted by the runtime (a
bounded queue: :class:`engine.errors.QueueFull` beyond it), run on a search thread under its deadline
(stage 1, the cascade, evidence: engine.search), its backbone work batched with other searches'
(engine.runtime). The HTTP service, ``qaslr search``, the benchmarks and the tests all search
through this object; every refusal is an :class:`engine.errors.EngineError`.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from core.config import Embedder, SearchMode
from engine.assembly import RerankModel, searcher_for
from engine.config import EngineConfig
from engine.results import SearchOutcome
from engine.runtime.policy import QUERIES
from engine.search import SearchParams

if TYPE_CHECKING:
    from engine.cache import FrameCache
    from engine.runtime import Runtime
    from engine.search import Searcher
    from indexer.store import IndexReader
    from models.head import StreamingHead
    from models.streaming import VideoEncoder

__all__ = ["Engine"]

logger = logging.getLogger(__name__)

WARM_UP_QUERY = "warm-up query"  # any text: its answer is thrown away
# the search Engine.warm_up runs (every stage the default search takes, the heavy tier on one candidate)
WARM_UP_REQUEST = {"query": WARM_UP_QUERY, "mode": "rerank", "top_k": 1, "shortlist": 1, "heavy": 1}


class Engine:
    def __init__(
        self,
        *,
        config: EngineConfig,
        index: IndexReader,
        encoder: VideoEncoder,
        cache: FrameCache,
        searcher: Searcher,
        runtime: Runtime,
        random_weights: bool = False,
        info: dict | None = None,
        head_fingerprint: str = Embedder.ONESHOT,
        rerank: RerankModel | None = None,
    ):
        self.config, self.index, self.encoder, self.cache = config, index, encoder, cache
        self.searcher = searcher  # the current index's: a swap replaces it in one assignment
        self.runtime = runtime
        self.random_weights = random_weights
        self.info = info if info is not None else {}
        self.head_fingerprint = head_fingerprint
        self.rerank = rerank or RerankModel()

    @property
    def head(self) -> StreamingHead | None:
        return self.encoder.head

    @property
    def batcher(self):
        """Stage-2 backbone work of concurrent searches in shared calls (None: batching off)."""
        return self.runtime.batcher

    @property
    def admission(self):
        return self.runtime.admission

    @property
    def frame_size(self) -> int:
        """The working size stage 2 reads frames at (an image query is resized to it)."""
        return self.searcher.frames.frame_size

    # -- searching ---------------------------------------------------------------------------------
    def resolve(self, request, *, clamp_heavy: bool = False) -> SearchParams:
        """The request's defaults and bounds, once (:class:`engine.errors.InvalidRequest` names a bad
        field); :meth:`search` takes the result as it is. ``clamp_heavy``: see engine.search.request."""
        return self.searcher.resolve(request, clamp_heavy=clamp_heavy)

    async def search(self, request, *, deadline=None, on_update=None, cancelled=None) -> SearchOutcome:
        """Admit and run one search (see the module docstring). ``deadline``: a ``time.monotonic()``
        instant (default: ``request_timeout_s`` from now); ``on_update(hits)`` sees progressive
        rankings (on the search thread); ``cancelled()`` True stops the search between stages."""
        job, deadline, light = self._job(request, deadline, on_update, cancelled)
        return await self.admission.run(job, timeout=deadline - time.monotonic(), light=light)

    def search_sync(self, request, *, deadline=None, on_update=None, cancelled=None) -> SearchOutcome:
        """:meth:`search` for a caller without an event loop (the command line, a benchmark, a
        notebook): the same admission, threads, deadline and batching."""
        job, deadline, light = self._job(request, deadline, on_update, cancelled)
        return self.admission.run_sync(job, timeout=deadline - time.monotonic(), light=light)

    def _job(self, request, deadline, on_update, cancelled):
        """(the search as an admission job, its deadline, whether it takes the light lane). The job
        books its wait for a search thread as ``timings_ms.queue`` (``total`` includes it)."""
        searcher = self.searcher  # a search that started on an index finishes on it
        params = request if isinstance(request, SearchParams) else searcher.resolve(request)
        if deadline is None:
            deadline = time.monotonic() + self.config.request_timeout_s
        admitted = time.perf_counter()

        def job() -> SearchOutcome:
            queued_ms = (time.perf_counter() - admitted) * 1e3
            outcome = searcher.search(params, deadline=deadline, on_update=on_update, cancelled=cancelled)
            outcome.timings_ms["queue"] = queued_ms
            outcome.timings_ms["total"] += queued_ms
            return outcome

        # stage 1 only: the light lane, never behind a rerank's search thread
        return job, deadline, params.mode == SearchMode.INDEXED

    def observe(self, *, queue_depth=None, batch=None, cache_error=None) -> None:
        """Hooks for a caller's metrics: ``queue_depth(n)`` as admissions change, ``batch(stats)``
        after each batched backbone call, ``cache_error(exc)`` on each frame-cache error."""
        if queue_depth is not None:
            self.admission.on_depth = queue_depth
        if batch is not None and self.batcher is not None and self.batcher.on_batch is None:
            self.batcher.on_batch = batch
        if cache_error is not None and getattr(self.cache, "on_error", "absent") is None:
            self.cache.on_error = cache_error

    # -- the index and the process ---------------------------------------------------------------------
    def swap_index(self, directory: Path | str | None = None, *, retire_after_s: float = 60.0) -> dict:
        """Open ``directory`` (default: the configured index path, re-resolved, so a moved symlink is
        followed), check it against the loaded backbone and head, and make it the index new searches
        use. The Searcher is replaced by one attribute assignment: a search that already holds the
        old Searcher finishes on the old index, which is closed ``retire_after_s`` later (after any
        request deadline). An incompatible or broken index raises and changes nothing."""
        from indexer.assembly import check_compatible
        from indexer.store import IndexReader

        path = Path(directory or self.config.index).resolve()
        new_index = IndexReader(path, faiss_device=self.config.faiss_device)
        try:
            m = new_index.manifest
            backbone = self.encoder.backbone
            check_compatible(
                m,
                backbone_fingerprint=backbone.fingerprint,
                head_fingerprint=self.head_fingerprint,
                embed_dim=backbone.embed_dim,
                where=f"the new index {path.name}",
            )
            encoder, searcher = searcher_for(
                new_index, self.config, self.encoder.backbone, self.head, self.cache, reuse=self.encoder,
                rerank=self.rerank, batcher=self.batcher,
            )  # fmt: skip
        except BaseException:
            new_index.close()
            raise
        old_searcher, old_index = self.searcher, self.index
        # new searches see the new index from this assignment on
        self.encoder, self.index, self.searcher = encoder, new_index, searcher
        self.info.update(
            index=path.name, index_built_at=m.built_at, videos=len(new_index), faiss=new_index.faiss_info()
        )
        logger.info("index swapped to %s (%d videos)", path.name, len(new_index))

        def retire():
            for thing in (old_searcher, old_index):
                try:
                    thing.close()
                except Exception:
                    logger.exception("closing the retired %s failed", type(thing).__name__)

        timer = threading.Timer(retire_after_s, retire)
        timer.daemon = True
        timer.start()
        return {"index": path.name, "built_at": m.built_at, "videos": len(new_index)}

    def warm_up(self) -> float:
        """Run one search through every stage the default search takes (query embedding, FAISS, the
        frame tier, the heavy tier on one candidate, moment refinement), so the first user's query
        costs what later ones do: the first backbone calls pay for lazy initialisation (the processor,
        the tokenizer, thread pools, memory), and wait for every model process to load and take its
        first calls. Returns the seconds it took."""
        t0 = time.perf_counter()
        if self.batcher is not None and self.batcher.backends:  # each one, not just those a search meets
            import numpy as np

            size = self.encoder.backbone.frame_size
            for backend in self.batcher.backends:
                backend.warm_up(np.zeros((size, size, 3), np.uint8), images=self.batcher.min_split)
        if len(self.index) == 0:
            self.encoder.embed_queries([WARM_UP_QUERY])
        else:
            self.searcher.search(dict(WARM_UP_REQUEST))
        self._warm_query_shapes()
        seconds = time.perf_counter() - t0
        logger.info("warmed up in %.2f s", seconds)
        return seconds

    def _warm_query_shapes(self) -> None:
        """On CUDA (where text prompts are padded to a few lengths, models.backbone
        ``TEXT_PAD_MULTIPLE``): each length once where queries are embedded, the batcher's worker
        (a query embedding, no search) and every light-lane thread, so a user's first query meets no new shape
        and no new thread (measured cold, before this: 54-61 ms for the query's embedding against
        7-9 ms warm). Nothing on the CPU, where neither costs."""
        shape_texts = getattr(getattr(self.encoder, "backbone", None), "shape_texts", None)
        texts = shape_texts(instruction=getattr(self.encoder, "instruction", None)) if shape_texts else []
        if not texts:
            return
        for text in texts:  # one at a time: a lone user's query is a batch of one
            if self.batcher is not None:  # where a stage-2 search's query is embedded
                self.batcher.encode(self.encoder, [text], kind=QUERIES)
            else:
                self.encoder.embed_queries([text])
        self.admission.on_each_light_thread(lambda: [self.encoder.embed_queries([t]) for t in texts])

    def close(self) -> None:
        """Stop the runtime (admission, batcher, model processes), then close the index's parts."""
        for thing in (self.runtime, self.searcher, self.cache, self.index):
            close = getattr(thing, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # closing must not mask the shutdown
                    logger.exception("closing %s failed", type(thing).__name__)
