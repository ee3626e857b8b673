"""Loading what a search needs: the index, the backbone (and heads), the frame cache, the runtime,
and the Searcher over them (engine.assembly), into one :class:`engine.api.Engine`.

The model an index needs comes from :mod:`indexer.assembly`; the heads stage 2 serves (a rerank head,
its early-exit gate, the time head) are loaded here, each from the setting that names it or from
the checkpoint's own folder (``rerank_head/``, ``time_head/``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from core.config import MIN_RELEVANCE
from core.errors import ConfigurationError, summarize
from engine.api import Engine
from engine.assembly import RerankModel, searcher_for, stage2_head
from engine.config import EngineConfig
from engine.runtime import Runtime, make_batcher

if TYPE_CHECKING:
    from models.backbone import Backbone

__all__ = ["ConfigurationError", "Engine", "checkpoint_head_dir", "load_engine", "load_rerank_model"]

logger = logging.getLogger(__name__)


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
        from models.router import load_router

        try:
            rerank.head = load_head(path, device=backbone.device)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"the rerank head cannot be loaded: {summarize(exc)}") from exc
        rerank.fingerprint = head_fingerprint(path)
        rerank.source = source
        rerank.router = load_router(path)  # which queries are about time (a head that reads moments)
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
    checkpoint's is not served (with a warning). It is served beside a rerank head that reads moments
    (models.windows): the order and count queries its parse reads go to it, where it measurably wins
    (engine.search.cascade)."""
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


def load_engine(config: EngineConfig, *, on_cache_error=None) -> Engine:
    """Open the index, load the backbone sized by its manifest (frame size, Matryoshka dim) and the
    head it was built with, refuse a mismatched model, and start the cache, the runtime (admission,
    batcher, model processes) and the searcher. Settings left unset take what the index records
    (:meth:`EngineConfig.over_manifest`: the lowest layer)."""
    from engine.cache import make_cache
    from indexer.assembly import load_model_for_index
    from indexer.store import IndexReader

    if config.index is None:
        raise ConfigurationError(
            "no index configured: set QASLR_INDEX or pass --index DIR (built by `indexer build`)"
        )
    index = IndexReader(Path(config.index), faiss_device=config.faiss_device)
    try:
        config = config.over_manifest(index.manifest)
        m = index.manifest
        loaded = load_model_for_index(
            m, config.model, head_dir=config.head, device=config.device, dtype=config.dtype,
            frame_size=config.frame_size,
        )  # fmt: skip
        backbone = loaded.backbone
        if backbone.frame_size != m.frame_size:
            logger.warning(
                "working resolution %d differs from the index's %d: stage-2 frames are decoded at %d "
                "(the index's frame store, at its own size, is not used)",
                backbone.frame_size, m.frame_size, backbone.frame_size,
            )  # fmt: skip
        cache = make_cache(config, on_error=on_cache_error)
        rerank = load_rerank_model(config, backbone, index_head=loaded.head is not None)
        # a stage-2 head trained on another clip plan is refused before any model process starts
        stage2_head(index, config, backbone, loaded.head, rerank)
        runtime = Runtime(config, make_batcher(config, m.clip_len, backbone.device, backbone=backbone))
        try:
            encoder, searcher = searcher_for(
                index,
                config,
                backbone,
                loaded.head,
                cache,
                rerank=rerank,
                batcher=runtime.batcher,
                checked=True,
            )
        except BaseException:
            runtime.close()
            raise
    except BaseException:
        index.close()
        raise
    info = _info(config, index, backbone, cache, searcher, rerank, runtime)
    logger.info("search engine ready: %s", info)
    return Engine(
        config=config, index=index, encoder=encoder, cache=cache, searcher=searcher, runtime=runtime,
        random_weights=bool(backbone.random_weights), info=info, head_fingerprint=loaded.head_fingerprint,
        rerank=rerank,
    )  # fmt: skip


def _info(
    config: EngineConfig, index, backbone, cache, searcher, rerank: RerankModel, runtime: Runtime
) -> dict:
    """What the engine serves, as ``/readyz`` and the ``search engine ready`` log line say it."""
    m, model, batcher = index.manifest, str(config.model), runtime.batcher
    return {
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
        # oneshot_moments: one-shot reads each candidate's top N moments as temporal pairs (0: Q-Frame);
        # about_time: the streaming head reads the moments of queries its router calls about time;
        # orders: ... and answers an order of two events itself (it reads the query's words), before the time head
        "cascade": {
            "heavy": config.heavy,
            "heavy_margin": config.heavy_margin,
            "oneshot_moments": config.oneshot_moments,
            "about_time": searcher.cascade.moments and searcher.cascade.router is not None,
            "orders": searcher.cascade.reads_order,
        },
        "min_relevance": MIN_RELEVANCE,
        "batching": None
        if batcher is None
        else {
            "workers": batcher.workers,
            "max_frames": batcher.max_frames,
            "model_processes": len(batcher.backends),
        },
    }
