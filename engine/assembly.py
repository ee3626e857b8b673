"""Assembling a Searcher over an open index: the encoders the index needs (from
:mod:`indexer.assembly`, the one place that checks an index against a model), the stage-2 encoder
and heads, checked against the clip plan they were trained with (:func:`check_clip_plan`). The same
assembly serves the first load and every later index swap (engine.api.Engine.swap_index).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.errors import ConfigurationError
from engine.config import EngineConfig

if TYPE_CHECKING:
    from engine.cache import FrameCache
    from engine.runtime.batching import EncodeBatcher
    from engine.search import Searcher
    from indexer.store import IndexReader
    from models.backbone import Backbone
    from models.head import StreamingHead
    from models.selection import ClipPlan
    from models.streaming import VideoEncoder

__all__ = ["RerankModel", "check_clip_plan", "searcher_for", "serving_clip_plan"]

logger = logging.getLogger(__name__)


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
    router: object | None = None  # models.router.Router: which queries the rerank head answers


def searcher_for(
    index: IndexReader,
    config: EngineConfig,
    backbone: Backbone,
    head: StreamingHead | None,
    cache: FrameCache,
    *,
    reuse: VideoEncoder | None = None,
    rerank: RerankModel | None = None,
    batcher: EncodeBatcher | None = None,
    checked: bool = False,
) -> tuple[VideoEncoder, Searcher]:
    """(encoder, Searcher) over ``index``: the encoder that embeds as the index was built, and the
    stage-2 encoder: the rerank head when one is loaded, else the index's head, else one-shot with
    the configured text conditioning (all with the index's K, L, M and instruction). ``checked``: the
    caller already ran :func:`stage2_head` on this index, config and ``rerank``."""
    from engine.search import Searcher, SearcherConfig
    from indexer.assembly import encoder_for
    from models.streaming import VideoEncoder

    encoder = encoder_for(index.manifest, backbone, head, clip_batch_size=config.clip_batch_size, reuse=reuse)
    rerank = rerank or RerankModel()
    if checked:
        stage2 = rerank.head if rerank.head is not None else head
    else:
        stage2 = stage2_head(index, config, backbone, head, rerank)
    conditioning = None if stage2 is not None else config.rerank_text_conditioning
    rerank_encoder = VideoEncoder(
        backbone,
        stage2,
        config=encoder.config,
        instruction=encoder.instruction,
        text_conditioning=conditioning,
    )
    # a streaming stage 2 sends requests of K' <= L to the one-shot tier (§3.1, engine.search.cascade)
    oneshot_encoder = None
    if stage2 is not None:
        oneshot_encoder = VideoEncoder(
            backbone,
            None,
            config=encoder.config,
            instruction=encoder.instruction,
            text_conditioning=config.rerank_text_conditioning,
        )
    gate = rerank.gate if stage2 is not None else None
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
        router=rerank.router if stage2 is rerank.head else None,
    )
    return encoder, searcher


def stage2_head(
    index: IndexReader,
    config: EngineConfig,
    backbone: Backbone,
    head: StreamingHead | None,
    rerank: RerankModel,
) -> StreamingHead | None:
    """The head stage 2 will serve over ``index`` (the rerank head when one is loaded, else the index's
    ``head``; None: one-shot), its clip plan checked before anything is started for it: a head named by
    QASLR_RERANK_HEAD (or the index's) trained on another plan is refused (ConfigurationError); the
    checkpoint's own head, a default rather than a request, steps aside for one-shot stage 2 (``rerank`` is
    updated to say so)."""
    # the index's K, L, M, as the encoder that embeds like the index holds them (indexer.assembly.encoder_for)
    streaming = index.manifest.streaming_config(clip_batch_size=config.clip_batch_size)
    if rerank.source == "checkpoint" and rerank.head is not None:
        # the checkpoint's own head is a default, not a request: over an index that cuts clips
        # otherwise it steps aside for one-shot stage 2 (a head named by QASLR_RERANK_HEAD refuses)
        try:
            check_clip_plan(
                rerank.head, config, streaming, backbone.temporal_patch, which="checkpoint's head"
            )
        except ConfigurationError as exc:
            logger.warning("not serving the checkpoint's rerank head: %s", exc)
            rerank.head, rerank.fingerprint, rerank.source = None, None, None
    stage2 = rerank.head if rerank.head is not None else head
    if stage2 is not None:
        which = "rerank head (QASLR_RERANK_HEAD)" if rerank.head is not None else "index's head (QASLR_HEAD)"
        check_clip_plan(stage2, config, streaming, backbone.temporal_patch, which=which)
    return stage2


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
    if head.config.window_plan is not None:  # it reads moments: its windows cut its clips, whatever K'
        return
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
