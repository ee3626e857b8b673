"""Loading what a search needs: the index, the backbone (and head), the frame cache, the Searcher.

The model an index needs and the encoder that matches it come from :mod:`indexer.assembly`, the one
place that checks an index against a model; :func:`_searcher_for` adds the Searcher, for the first
load and for every later index swap alike, after checking that stage 2's head is served with the
clip plan it was trained with (:func:`check_clip_plan`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from core.config import MIN_RELEVANCE, Embedder
from core.errors import ConfigurationError, summarize
from engine.config import EngineConfig

if TYPE_CHECKING:
    from engine.batching import EncodeBatcher
    from engine.cache import FrameCache
    from engine.searcher import Searcher
    from indexer.store import IndexReader
    from models.backbone import Backbone
    from models.head import StreamingHead
    from models.selection import ClipPlan
    from models.streaming import VideoEncoder

__all__ = ["ConfigurationError", "Engine", "load_engine"]

logger = logging.getLogger(__name__)

WARM_UP_QUERY = "warm-up query"  # any text: its answer is thrown away


@dataclass
class Engine:
    config: EngineConfig
    index: IndexReader
    encoder: VideoEncoder
    cache: FrameCache
    searcher: Searcher
    random_weights: bool = False
    info: dict = field(default_factory=dict)
    head_fingerprint: str = Embedder.ONESHOT
    rerank: RerankModel = field(default_factory=lambda: RerankModel())
    batcher: EncodeBatcher | None = None  # stage-2 encodes of concurrent searches (config.batching)

    @property
    def head(self) -> StreamingHead | None:
        return self.encoder.head

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
            encoder, searcher = _searcher_for(
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
            self.searcher.search(
                {"query": WARM_UP_QUERY, "mode": "rerank", "top_k": 1, "shortlist": 1, "heavy": 1}
            )
        seconds = time.perf_counter() - t0
        logger.info("warmed up in %.2f s", seconds)
        return seconds

    def close(self) -> None:
        for thing in (self.batcher, self.searcher, self.cache, self.index):
            close = getattr(thing, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # closing must not mask the shutdown
                    logger.exception("closing %s failed", type(thing).__name__)


@dataclass
class RerankModel:
    """What stage 2 re-encodes candidates with, when it is not the index's own encoder: a streaming
    rerank head (QASLR_RERANK_HEAD) and, for early exit, its gate (QASLR_RERANK_GATE)."""

    head: StreamingHead | None = None
    fingerprint: str | None = None
    gate: object | None = None
    source: str | None = None  # "QASLR_RERANK_HEAD", or "checkpoint" for the backbone's own head
    # the time head (models.time_head) for queries about order and count, and where it came from
    time_head: object | None = None
    time_fingerprint: str | None = None
    time_source: str | None = None  # "QASLR_TIME_HEAD", or "checkpoint" (MODEL/time_head/)


def checkpoint_head_dir(model: str) -> Path | None:
    """The rerank head a local checkpoint ships (``MODEL/rerank_head/``, core.config.CHECKPOINT_HEAD_DIR),
    or None."""
    from core.config import CHECKPOINT_HEAD_DIR
    from models.head import CONFIG_FILENAME

    path = Path(model) / CHECKPOINT_HEAD_DIR
    return path if (path / CONFIG_FILENAME).is_file() else None


def load_rerank_model(config: EngineConfig, backbone: Backbone, *, index_head: bool = False) -> RerankModel:
    """Load the rerank head and gate the config names (each optional). With no head named at all
    (no rerank head, no index head: ``index_head``) and ``config.checkpoint_head``, the head the
    checkpoint ships is served (the tiny-world checkpoint's, trained for stage 2 on the shapes world)."""
    rerank = RerankModel()
    path, source = config.rerank_head, "QASLR_RERANK_HEAD"
    if path is None and config.checkpoint_head and not index_head:
        path, source = checkpoint_head_dir(config.model), "checkpoint"
    if path is not None:
        from models.head import head_fingerprint, load_head

        try:
            rerank.head = load_head(path, device=backbone.device)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"the rerank head cannot be loaded: {summarize(exc)}") from exc
        rerank.fingerprint = head_fingerprint(path)
        rerank.source = source
        if rerank.head.config.hidden_size != backbone.hidden_size:
            raise ConfigurationError(
                f"the rerank head ({source}) expects hidden size {rerank.head.config.hidden_size}, but the "
                f"backbone's is {backbone.hidden_size}: it was trained for another backbone"
            )
    _load_time_head(rerank, config, backbone)
    gate = config.rerank_gate
    if gate is None and rerank.source == "checkpoint" and (path / "gate" / "gate.json").is_file():
        gate = path / "gate"  # the early-exit gate trained with the checkpoint's head
    if gate is not None:
        from models.gate import load_gate

        try:
            rerank.gate = load_gate(gate)
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigurationError(f"the early-exit gate cannot be loaded: {summarize(exc)}") from exc
    return rerank


def _load_time_head(rerank: RerankModel, config: EngineConfig, backbone: Backbone) -> None:
    """The time head ``config`` names (QASLR_TIME_HEAD), else the checkpoint's own ``time_head/``
    (core.config.CHECKPOINT_TIME_HEAD_DIR) unless ``checkpoint_time_head`` is off. Its inputs are this
    backbone's embeddings: a head trained on another backbone is refused when named, and a
    checkpoint's is not served (with a warning)."""
    from core.config import CHECKPOINT_TIME_HEAD_DIR
    from models.time_head import TIME_CONFIG_FILENAME, load_time_head, time_head_fingerprint

    path, source = config.time_head, "QASLR_TIME_HEAD"
    if path is None and config.checkpoint_time_head:
        path, source = Path(config.model) / CHECKPOINT_TIME_HEAD_DIR, "checkpoint"
        if not (path / TIME_CONFIG_FILENAME).is_file():
            return
    if path is None:
        return
    try:
        head = load_time_head(path)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ConfigurationError(f"the time head cannot be loaded: {summarize(exc)}") from exc
    trained_on = head.config.backbone
    if trained_on is not None and trained_on != backbone.fingerprint:
        message = (
            f"the time head ({source}) was trained on backbone {trained_on}, not this one "
            f"({backbone.fingerprint}): train one for it with `qaslr train-time-head`"
        )
        if source != "checkpoint":
            raise ConfigurationError(message)
        logger.warning("not serving the checkpoint's time head: %s", message)
        return
    rerank.time_head, rerank.time_fingerprint, rerank.time_source = head, time_head_fingerprint(path), source


def _searcher_for(
    index: IndexReader,
    config: EngineConfig,
    backbone: Backbone,
    head: StreamingHead | None,
    cache: FrameCache,
    *,
    reuse: VideoEncoder | None = None,
    rerank: RerankModel | None = None,
    batcher: EncodeBatcher | None = None,
) -> tuple[VideoEncoder, Searcher]:
    """(encoder, Searcher) over ``index``: the encoder that embeds as the index was built, and the
    stage-2 encoder: the rerank head when one is loaded, else the index's head, else one-shot with
    the configured text conditioning (all with the index's K, L, M and instruction)."""
    from engine.searcher import Searcher, SearcherConfig
    from indexer.assembly import encoder_for
    from models.streaming import VideoEncoder

    encoder = encoder_for(index.manifest, backbone, head, clip_batch_size=config.clip_batch_size, reuse=reuse)
    rerank = rerank or RerankModel()
    if rerank.source == "checkpoint" and rerank.head is not None:
        # the checkpoint's own head is a default, not a request: over an index that cuts clips
        # otherwise it steps aside for one-shot stage 2 (a head named by QASLR_RERANK_HEAD refuses)
        try:
            check_clip_plan(
                rerank.head, config, encoder.config, backbone.temporal_patch, which="checkpoint's head"
            )
        except ConfigurationError as exc:
            logger.warning("not serving the checkpoint's rerank head: %s", exc)
            rerank.head, rerank.fingerprint, rerank.source = None, None, None
    stage2_head = rerank.head if rerank.head is not None else encoder.head
    if stage2_head is not None:
        which = "rerank head (QASLR_RERANK_HEAD)" if rerank.head is not None else "index's head (QASLR_HEAD)"
        check_clip_plan(stage2_head, config, encoder.config, backbone.temporal_patch, which=which)
    conditioning = None if stage2_head is not None else config.rerank_text_conditioning
    rerank_encoder = VideoEncoder(
        backbone,
        stage2_head,
        config=encoder.config,
        instruction=encoder.instruction,
        text_conditioning=conditioning,
    )
    # a streaming stage 2 sends requests of K' <= L to the one-shot tier (§3.1, engine.searcher)
    oneshot_encoder = None
    if stage2_head is not None:
        oneshot_encoder = VideoEncoder(
            backbone,
            None,
            config=encoder.config,
            instruction=encoder.instruction,
            text_conditioning=config.rerank_text_conditioning,
        )
    gate = rerank.gate if stage2_head is not None else None
    if config.exit_threshold is not None and gate is None:
        raise ConfigurationError(
            "QASLR_EXIT_THRESHOLD needs an early-exit gate (QASLR_RERANK_GATE) and a streaming stage 2"
        )
    searcher = Searcher(
        encoder,
        index,
        cache,
        config=SearcherConfig.from_engine_config(config),
        frame_size=backbone.frame_size,
        rerank_encoder=rerank_encoder,
        oneshot_encoder=oneshot_encoder,
        gate=gate,
        batcher=batcher,
        time_head=rerank.time_head,
    )
    return encoder, searcher


def serving_clip_plan(config: EngineConfig, streaming) -> ClipPlan:
    """The clip plan stage 2 serves by default: the index's K_max, L, M (``streaming``, its
    StreamingConfig) and the engine's default K' (``default_frames``)."""
    from models.selection import ClipPlan

    return ClipPlan(
        frames=config.default_frames,
        max_frames=streaming.max_frames,
        clip_len=streaming.clip_len,
        max_evidence=streaming.max_evidence,
    )


def check_clip_plan(head: StreamingHead, config: EngineConfig, streaming, temporal_patch: int, *, which: str):
    """Refuse (ConfigurationError) to serve ``head`` in stage 2 with a clip plan other than the one
    it was trained with (models.selection.ClipPlan: same K' and M, and every frame count up to K'
    cut into the same clips); the message names both plans and what to change. A head that records
    no plan (saved before plans were recorded) is served with a warning."""
    serving = serving_clip_plan(config, streaming)
    trained = head.config.clip_plan
    if trained is None:
        logger.warning(
            "the %s records no clip plan (saved before heads recorded one): serving it with %s "
            "unchecked; retrain it with `qaslr train` to record its plan",
            which,
            serving.describe(temporal_patch),
        )
        return
    problems = trained.differences(serving, temporal_patch)
    if not problems:
        return
    raise ConfigurationError(
        f"the {which} was trained with the clip plan {trained.describe(temporal_patch)}, but stage 2 "
        f"would serve it with {serving.describe(temporal_patch)} ({'; '.join(problems)}). Fix: serve "
        f"with QASLR_DEFAULT_FRAMES={trained.frames} over an index whose K, L and M cut clips as "
        f"training did (indexer build --frames {trained.max_frames} --clip-len {trained.clip_len} "
        f"--max-evidence {trained.max_evidence}), or retrain the head with features cut as this "
        f"server cuts them ({_training_options(serving, temporal_patch)})"
    )


def _training_options(serving: ClipPlan, temporal_patch: int) -> str:
    """`qaslr train` feature options whose plan agrees with ``serving``, when there are such."""
    from models.selection import ClipPlan

    length = serving.clip_lengths(temporal_patch)[-1]
    plan = ClipPlan(serving.frames, serving.frames, length, serving.max_evidence)
    options = f"--max-frames {serving.frames} --clip-len {length} --evidence-tokens {serving.max_evidence}"
    if plan.differences(serving, temporal_patch):
        return (
            f"--max-frames {serving.frames} --evidence-tokens {serving.max_evidence}, and a --clip-len "
            "that cuts clips as this index does"
        )
    return options


def make_batcher(config: EngineConfig, clip_len: int, device="cpu", backbone=None) -> EncodeBatcher | None:
    """The stage-2 batcher ``config`` asks for (None with ``batching`` off): at most
    ``batch_max_frames`` frames per call (0: ``clip_batch_size`` clips of the index's ``clip_len``),
    on ``batch_workers`` threads (0: :func:`engine.batching.auto_workers` for ``device``), or on one
    thread per model process (``model_processes``, engine.model_process) when there are any."""
    if not config.batching:
        return None
    from engine.batching import EncodeBatcher, auto_workers

    clips = config.clip_batch_size
    if not isinstance(clips, int):  # "auto": sized by the device (models.streaming.auto_clip_batch_size)
        from models.streaming import CPU_CLIP_BATCH, auto_clip_batch_size

        clips = auto_clip_batch_size(backbone, int(clip_len)) if backbone is not None else CPU_CLIP_BATCH
    frames = config.batch_max_frames or clips * int(clip_len)
    workers = config.batch_workers or auto_workers(device)
    backends = []
    if backbone is not None and config.model_processes:
        from engine.model_process import auto_model_processes, start_model_processes, weights_bytes

        count = config.model_processes
        if count < 0:
            count = auto_model_processes(device, weights_bytes=weights_bytes(backbone))
        elif str(device).startswith("cuda"):
            logger.warning(
                "model processes run on the CPU only: the backbone on %s serves every call itself", device
            )
            count = 0
        if count:
            backends = start_model_processes(backbone, str(config.model), count, nice=config.batch_nice)
    return EncodeBatcher(
        max_wait_s=config.batch_max_wait_ms / 1e3, max_frames=frames, workers=workers, nice=config.batch_nice,
        backends=backends,
    )  # fmt: skip


def load_engine(config: EngineConfig, *, on_cache_error=None) -> Engine:
    """Open the index, load the backbone sized by its manifest (frame size, Matryoshka dim) and the
    head it was built with, refuse a mismatched model, and wire up the cache and the searcher."""
    from engine.cache import make_cache
    from indexer.assembly import load_model_for_index
    from indexer.store import IndexReader

    if config.index is None:
        raise ConfigurationError(
            "no index configured: set QASLR_INDEX or pass --index DIR (built by `indexer build`)"
        )
    index = IndexReader(Path(config.index), faiss_device=config.faiss_device)
    try:
        m = index.manifest
        loaded = load_model_for_index(
            m,
            config.model,
            head_dir=config.head,
            device=config.device,
            dtype=config.dtype,
            frame_size=config.frame_size,
        )
        backbone = loaded.backbone
        if backbone.frame_size != m.frame_size:
            logger.warning(
                "working resolution %d differs from the index's %d: stage-2 frames are decoded at %d "
                "(the index's frame store, at its own size, is not used)",
                backbone.frame_size,
                m.frame_size,
                backbone.frame_size,
            )
        cache = make_cache(config, on_error=on_cache_error)
        rerank = load_rerank_model(config, backbone, index_head=loaded.head is not None)
        batcher = make_batcher(config, m.clip_len, backbone.device, backbone=backbone)
        try:
            encoder, searcher = _searcher_for(
                index, config, backbone, loaded.head, cache, rerank=rerank, batcher=batcher
            )
        except BaseException:
            if batcher is not None:
                batcher.close()
            raise
    except BaseException:
        index.close()
        raise
    model = str(config.model)
    info = {
        "index": Path(config.index).resolve().name,
        "index_built_at": m.built_at,
        "backbone": Path(model).name if Path(model).exists() else model,
        "embedder": m.embedder,
        "device": str(backbone.device),
        "dtype": str(backbone.dtype).removeprefix("torch."),
        "videos": len(index),
        "faiss": index.faiss_info(),
        "embed_dim": m.embed_dim,
        "frame_size": backbone.frame_size,
        "cache": cache.backend,
        "frame_store": m.frame_store,
        "rerank": "streaming head" if searcher.reranker.streaming else "one-shot",
        "rerank_head": rerank.fingerprint,
        # which head streams stage 2 (None: one-shot): the checkpoint's, QASLR_RERANK_HEAD's, the index's
        "rerank_head_source": (rerank.source or "index") if searcher.reranker.streaming else None,
        "early_exit_gate": rerank.gate is not None,
        # queries about order and count (engine.tiers.timehead): the time head's digest and source
        "time_head": rerank.time_fingerprint,
        "time_head_source": rerank.time_source,
        "cascade": {"heavy": config.heavy, "heavy_margin": config.heavy_margin},
        "min_relevance": MIN_RELEVANCE,
        "batching": None
        if batcher is None
        else {
            "workers": batcher.workers,
            "max_frames": batcher.max_frames,
            "model_processes": len(batcher.backends),
        },
    }
    logger.info("search engine ready: %s", info)
    return Engine(
        config=config,
        index=index,
        encoder=encoder,
        cache=cache,
        searcher=searcher,
        random_weights=bool(backbone.random_weights),
        info=info,
        head_fingerprint=loaded.head_fingerprint,
        rerank=rerank,
        batcher=batcher,
    )
