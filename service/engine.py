"""Loading what a search needs: the index, the backbone (and head), the frame cache, the Searcher."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from service.settings import Settings

logger = logging.getLogger(__name__)


class ConfigurationError(RuntimeError):
    """The settings cannot work (no index, a head is missing, ...); the message says how to fix it."""


@dataclass
class Engine:
    settings: Settings
    index: object  # indexer.store.IndexReader
    encoder: object  # models.streaming.VideoEncoder
    cache: object  # service.cache.FrameCache
    searcher: object  # service.searcher.Searcher
    random_weights: bool = False
    info: dict = field(default_factory=dict)
    head_fingerprint: str = "oneshot"

    def swap_index(self, directory: Path | str | None = None, *, retire_after_s: float = 60.0) -> dict:
        """Open ``directory`` (default: the configured index path, re-resolved, so a moved symlink is
        followed), check it against the loaded backbone and head, and make it the index new searches
        use. The Searcher is replaced by one attribute assignment: a search that already holds the
        old Searcher finishes on the old index, which is closed ``retire_after_s`` later (after any
        request deadline). An incompatible or broken index raises and changes nothing."""
        import threading

        from indexer.store import IndexReader
        from models.streaming import VideoEncoder
        from service.searcher import Searcher

        path = Path(directory or self.settings.index).resolve()
        new_index = IndexReader(path)
        try:
            m = new_index.manifest
            backbone = self.encoder.backbone
            new_index.check_compatible(
                backbone_fingerprint=backbone.fingerprint, head_fingerprint=self.head_fingerprint
            )
            if m.embed_dim != backbone.embed_dim:
                raise ConfigurationError(
                    f"the new index embeds to {m.embed_dim}, the backbone to {backbone.embed_dim}"
                )
            encoder = self.encoder
            config = m.streaming_config(clip_batch_size=self.settings.clip_batch_size)
            if config != encoder.config or m.instruction != encoder.instruction:
                encoder = VideoEncoder(backbone, encoder.head, config=config, instruction=m.instruction)
            searcher = Searcher(
                encoder, new_index, self.cache, settings=self.settings, frame_size=backbone.frame_size
            )
        except BaseException:
            new_index.close()
            raise
        old_searcher, old_index = self.searcher, self.index
        self.encoder, self.index, self.searcher = (
            encoder,
            new_index,
            searcher,
        )  # new searches see the new index
        self.info.update(index=path.name, index_built_at=m.built_at, videos=len(new_index))
        logger.info("index swapped to %s (%d videos)", path, len(new_index))

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

    def close(self) -> None:
        for thing in (self.searcher, self.cache, self.index):
            close = getattr(thing, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # closing must not mask the shutdown
                    logger.exception("closing %s failed", type(thing).__name__)


def load_engine(settings: Settings, *, on_cache_error=None) -> Engine:
    """Open the index, load the backbone sized by its manifest (frame size, Matryoshka dim) and the
    head it was built with, refuse a mismatched model, and wire up the cache and the searcher."""
    from indexer.store import IndexReader
    from models.backbone import load_backbone
    from models.streaming import VideoEncoder
    from service.cache import make_cache
    from service.searcher import Searcher

    if settings.index is None:
        raise ConfigurationError(
            "no index configured: set QASLR_INDEX or pass --index DIR (built by `indexer build`)"
        )
    index = IndexReader(Path(settings.index))
    try:
        m = index.manifest
        backbone = load_backbone(
            settings.model,
            device=settings.device,
            dtype=settings.dtype,
            frame_size=settings.frame_size or m.frame_size,
            embed_dim=m.embed_dim,
        )
        head = None
        head_fp = "oneshot"
        if m.embedder == "qaslr":
            if settings.head is None:
                raise ConfigurationError(
                    f"the index was built with a streaming head (fingerprint {m.head_fingerprint}); "
                    "pass the same head with --head DIR or QASLR_HEAD"
                )
            from models.head import head_fingerprint, load_head

            head_fp = head_fingerprint(settings.head)
            head = load_head(settings.head, device=backbone.device)
        elif settings.head is not None:
            logger.warning("the index is one-shot; ignoring the streaming head %s", settings.head)
        index.check_compatible(backbone_fingerprint=backbone.fingerprint, head_fingerprint=head_fp)
        if backbone.frame_size != m.frame_size:
            logger.warning(
                "working resolution %d differs from the index's %d: stage-2 frames are decoded at %d",
                backbone.frame_size,
                m.frame_size,
                backbone.frame_size,
            )
        encoder = VideoEncoder(
            backbone,
            head,
            config=m.streaming_config(clip_batch_size=settings.clip_batch_size),
            instruction=m.instruction,
        )
        cache = make_cache(settings, on_error=on_cache_error)
        searcher = Searcher(encoder, index, cache, settings=settings, frame_size=backbone.frame_size)
    except BaseException:
        index.close()
        raise
    if backbone.random_weights:
        logger.warning(
            "the backbone %s has RANDOM WEIGHTS (a generated test checkpoint): search rankings are meaningless",
            settings.model,
        )
    info = {
        "index": Path(settings.index).resolve().name,
        "index_built_at": m.built_at,
        "backbone": str(settings.model)
        if not Path(str(settings.model)).exists()
        else Path(str(settings.model)).name,
        "embedder": m.embedder,
        "device": str(backbone.device),
        "dtype": str(backbone.dtype).removeprefix("torch."),
        "videos": len(index),
        "embed_dim": m.embed_dim,
        "frame_size": backbone.frame_size,
        "cache": cache.backend,
    }
    logger.info("search engine ready: %s", info)
    return Engine(
        settings=settings,
        index=index,
        encoder=encoder,
        cache=cache,
        searcher=searcher,
        random_weights=bool(backbone.random_weights),
        info=info,
        head_fingerprint=head_fp,
    )
