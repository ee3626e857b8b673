"""(index manifest + backbone + head) -> VideoEncoder: the one place that loads the model an index
needs, checks that it is the model the index was built with, and wires the encoder.

Used by the indexer facade (:mod:`indexer.api`, behind ``indexer build|add``) and by the search service
(``engine.loader.load_engine`` and ``Engine.swap_index``, which add the Searcher on top).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.config import Embedder
from core.errors import ConfigurationError
from indexer.store.format import IndexMismatchError, Manifest

if TYPE_CHECKING:
    from models.backbone import Backbone
    from models.head import StreamingHead
    from models.streaming import VideoEncoder

logger = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    """A backbone and, for the QASLR embedder, the streaming head with its fingerprint."""

    backbone: Backbone
    head: StreamingHead | None = None
    head_fingerprint: str = Embedder.ONESHOT  # what a manifest records for this model

    @property
    def embedder(self) -> Embedder:
        return Embedder.QASLR if self.head is not None else Embedder.ONESHOT


def load_model(
    model: str | os.PathLike,
    *,
    head_dir: str | os.PathLike | None = None,
    device: str | None = None,
    dtype: str | None = None,
    embed_dim: int | None = None,
    frame_size: int | None = None,
) -> LoadedModel:
    """Load the backbone (Matryoshka-truncated to ``embed_dim`` when given) and, with ``head_dir``, the
    streaming head on the backbone's device. Raises BackboneNotFoundError, FileNotFoundError or
    ValueError (bad head files) with a message for the user."""
    from models.backbone import load_backbone
    from models.head import head_fingerprint, load_head

    kwargs = {"device": device, "dtype": dtype, "embed_dim": embed_dim}
    if frame_size is not None:
        kwargs["frame_size"] = frame_size
    backbone = load_backbone(model, **kwargs)
    if backbone.random_weights:
        logger.warning(
            "the backbone %s has RANDOM WEIGHTS (a generated test checkpoint): rankings are meaningless",
            os.path.basename(str(model).rstrip("/")) or model,
        )
    if head_dir is None:
        return LoadedModel(backbone)
    head = load_head(head_dir, device=backbone.device)
    return LoadedModel(backbone, head, head_fingerprint(head_dir))


def load_model_for_index(
    manifest: Manifest,
    model: str | os.PathLike,
    *,
    head_dir: str | os.PathLike | None,
    device: str | None = None,
    dtype: str | None = None,
    frame_size: int | None = None,
) -> LoadedModel:
    """The model an existing index needs: the backbone sized by its manifest (embedding dimension,
    working resolution unless ``frame_size`` overrides it) and the head when it was built with one;
    refused (ConfigurationError, IndexMismatchError) unless it is the model the index was built with."""
    if manifest.uses_head and head_dir is None:
        raise ConfigurationError(
            f"the index was built with a streaming head (fingerprint {manifest.head_fingerprint}); "
            "pass the same head (--head DIR, or QASLR_HEAD)"
        )
    if not manifest.uses_head and head_dir is not None:
        logger.warning("the index is one-shot; ignoring the streaming head given")
        head_dir = None
    from models.backbone import EmbedDimError

    try:
        loaded = load_model(
            model,
            head_dir=head_dir,
            device=device,
            dtype=dtype,
            embed_dim=manifest.embed_dim,
            frame_size=frame_size or manifest.frame_size,
        )
    except EmbedDimError as exc:  # a backbone narrower than the index's vectors: another model
        raise IndexMismatchError(
            f"the index does not match the loaded model: the index's vectors have {manifest.embed_dim} "
            f"dimensions, the loaded backbone only {exc.hidden_size}. " + index_needs(manifest)
        ) from exc
    check_compatible(
        manifest,
        backbone_fingerprint=loaded.backbone.fingerprint,
        head_fingerprint=loaded.head_fingerprint,
        embed_dim=loaded.backbone.embed_dim,
    )
    return loaded


def check_compatible(
    manifest: Manifest,
    *,
    backbone_fingerprint: str,
    head_fingerprint: str,
    embed_dim: int | None = None,
    where: str = "the index",
) -> None:
    """Raise IndexMismatchError, naming both sides, unless the loaded backbone, head (and embedding
    dimension, when given) are the ones the index was built with."""
    m = manifest
    problems = []
    if m.backbone_fingerprint != backbone_fingerprint:
        problems.append(
            f"backbone: index built with {m.backbone_id!r} (fingerprint {m.backbone_fingerprint}), "
            f"loaded backbone has fingerprint {backbone_fingerprint}"
        )
    if m.head_fingerprint != head_fingerprint:
        problems.append(f"head: index built with {m.head_fingerprint!r}, loaded head is {head_fingerprint!r}")
    if embed_dim is not None and m.embed_dim != embed_dim:
        problems.append(f"embedding dimension: index has {m.embed_dim}, the backbone embeds to {embed_dim}")
    if problems:
        raise IndexMismatchError(
            f"{where} does not match the loaded model: " + "; ".join(problems) + ". " + index_needs(m)
        )


def index_needs(manifest: Manifest) -> str:
    """The model an index needs and how to get it, for mismatch errors."""
    m = manifest
    head = "" if not m.uses_head else f", streaming head {m.head_fingerprint} (--head DIR)"
    return (
        f"The index was built with backbone {m.backbone_id!r} (fingerprint {m.backbone_fingerprint}, "
        f"embed_dim {m.embed_dim}, frame size {m.frame_size}{head}). Fix: load that backbone "
        f"(--model {m.backbone_id}, or QASLR_MODEL), or rebuild the index with this model (indexer build)."
    )


def encoder_for(
    manifest: Manifest,
    backbone: Backbone,
    head: StreamingHead | None,
    *,
    clip_batch_size: int,
    reuse: VideoEncoder | None = None,
) -> VideoEncoder:
    """The encoder that embeds exactly as the index was built (its K, L, M and instruction);
    ``reuse`` is returned when it already does. Raises ValueError when head and backbone disagree."""
    from models.streaming import VideoEncoder

    config = manifest.streaming_config(clip_batch_size=clip_batch_size)
    if (
        reuse is not None
        and reuse.backbone is backbone
        and reuse.head is head
        and reuse.config == config
        and reuse.instruction == manifest.instruction
    ):
        return reuse
    return VideoEncoder(backbone, head, config=config, instruction=manifest.instruction)


def check_index_head(head, options, temporal_patch: int) -> None:
    """Refuse (ConfigurationError) to index with a head that cannot embed the index's videos as it was
    trained: a query-conditioned (rerank) head needs a query, and a head records the clip plan of its
    training features (models.selection.ClipPlan), which the index's K, L and M (``options``, the
    build's indexer.api.BuildOptions) must cut alike."""
    from core.errors import ConfigurationError
    from models.selection import ClipPlan

    if head.config.query_conditioning:
        raise ConfigurationError(
            "this head is query-conditioned (a stage-2 rerank head, `qaslr train --recipe two-stage`): it "
            "cannot embed videos without a query. Serve it with QASLR_RERANK_HEAD over a one-shot index, or "
            "index with a head trained by the paper recipe"
        )
    trained = head.config.clip_plan
    if trained is None:
        logger.warning("the head records no clip plan (saved before heads recorded one): indexing unchecked")
        return
    m = options.max_evidence if options.max_evidence is not None else head.config.max_evidence_tokens
    index_plan = ClipPlan(options.frames, options.frames, options.clip_len, m)
    problems = trained.differences(index_plan, temporal_patch)
    if problems:
        raise ConfigurationError(
            f"the head was trained with the clip plan {trained.describe(temporal_patch)}, but this index "
            f"would embed with {index_plan.describe(temporal_patch)} ({'; '.join(problems)}). Fix: build "
            f"with --frames {trained.max_frames} --clip-len {trained.clip_len} --max-evidence "
            f"{trained.max_evidence}, or train the head with --max-frames {options.frames} --clip-len "
            f"{options.clip_len} --evidence-tokens {m}"
        )
