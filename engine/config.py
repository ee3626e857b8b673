"""One typed configuration for the search engine: what to load and how to search.

The engine is built from an :class:`EngineConfig` alone (``engine.load_engine(config)``), so it runs
inside the HTTP service, a benchmark, a notebook or a batch job alike. The service's pydantic
``Settings`` read the same fields from the environment and hand the engine ``settings.engine_config()``;
the defaults below are the only place they are set (from :mod:`core.config`'s constants).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

from core.config import (
    BATCH_NICE,
    DEFAULT_FRAMES,
    DEFAULT_FUSION,
    DEFAULT_HEAVY,
    DEFAULT_HEAVY_MARGIN,
    DEFAULT_MODEL_ID,
    DEFAULT_REFINE_MOMENTS,
    DEFAULT_SHORTLIST,
    DEFAULT_TEXT_CONDITIONING,
    FRAME_AGGREGATE,
    MAX_FRAMES,
    QFRAME_TEMPERATURE,
    SEARCH_NICE,
    TextConditioning,
)

__all__ = ["EngineConfig"]


@dataclass(frozen=True)
class EngineConfig:
    # -- what to load ---------------------------------------------------------------------------
    index: Path | None = None  # index directory written by `indexer build`
    model: str = DEFAULT_MODEL_ID  # backbone hub id or local checkpoint directory
    head: Path | None = None  # the index's streaming head (required when it was built with one)
    rerank_head: Path | None = None  # a streaming head for stage 2 (default: the index's own, or one-shot)
    rerank_gate: Path | None = None  # the early-exit gate for a streaming stage 2
    # serve the checkpoint's own rerank head (core.config.CHECKPOINT_HEAD_DIR) when neither
    # rerank_head nor an index head is named; False: one-shot stage 2 for a one-shot index
    checkpoint_head: bool = True
    # the time head for queries about order and count (models.time_head); default: the checkpoint's
    # own time_head/ folder (core.config.CHECKPOINT_TIME_HEAD_DIR) unless checkpoint_time_head is off
    time_head: Path | None = None
    checkpoint_time_head: bool = True
    device: str = "auto"  # auto (cuda if available), cpu, cuda, cuda:1
    dtype: str = "auto"  # auto = bfloat16 on CUDA, float32 on CPU
    frame_size: int | None = None  # override the working resolution (default: the index's)
    faiss_device: str = "auto"  # where stage 1 runs: auto, cpu, gpu

    # -- the frame cache --------------------------------------------------------------------------
    redis_url: str | None = None  # redis://host:port/db; None = in-process LRU
    cache_ttl_s: int = 24 * 3600
    cache_max_items: int = 4096  # frames held by the in-process LRU (0 = off)
    cache_prefix: str = "qaslr:frame:"
    redis_timeout_s: float = 0.5
    redis_retry_s: float = 5.0  # after a Redis error, skip Redis this long

    # -- the model worker -------------------------------------------------------------------------
    queue_size: int = 8  # searches waiting for the model worker beyond the running one(s)
    batching: bool = True  # request threads + one batcher for stage-2 encodes (False: one model thread)
    search_threads: int = 0  # request threads running searches with batching (0: queue_size + 1)
    cpu_slots: int = 0  # ... of which run their cheap stages at once (0: the cores + 1; engine.worker)
    batch_max_wait_ms: float = 5.0  # the longest a clip waits in the batcher for others to join it
    batch_max_frames: int = 0  # frames per batched encode call (0: clip_batch_size x the index's L)
    batch_workers: int = 0  # threads running batched encodes (0: 1 on a GPU, the spare cores on a CPU)
    # with batching: processes of their own that run the batched query and image backbone calls, one
    # per batcher worker (engine.model_process; -1: auto, one per core on a CPU of 2+ cores, none on a GPU)
    model_processes: int = -1
    batch_nice: int = (
        BATCH_NICE  # Linux: added to the batcher threads' nice value, so searches' cheap stages go first
    )
    search_nice: int = SEARCH_NICE  # Linux: added to the search threads' (not the light lane's) nice value

    # -- search defaults and bounds ---------------------------------------------------------------
    default_shortlist: int = DEFAULT_SHORTLIST  # R (paper Table 4)
    default_frames: int = DEFAULT_FRAMES  # K'
    max_frames: int = MAX_FRAMES  # bound on K' (paper K <= 128)
    selection_temperature: float = QFRAME_TEMPERATURE  # Q-Frame temperature (models.selection)
    selection_seed: int = 0  # default seed of query-aware selection
    rerank_text_conditioning: TextConditioning = DEFAULT_TEXT_CONDITIONING  # one-shot stage 2's prompt
    exit_threshold: float | None = None  # early exit in stage 2 (needs rerank_gate)
    exit_min_steps: int = 2  # t_min
    decode_workers: int = 4  # threads decoding cache misses (one video each)
    clip_batch_size: int = 8  # clips per backbone forward pass (shared by candidates)
    heavy: int = DEFAULT_HEAVY  # the cascade: the frame tier's top this many get the heavy tier
    heavy_margin: float = DEFAULT_HEAVY_MARGIN  # ... when its first two scores lie within this
    refine_moments: int = DEFAULT_REFINE_MOMENTS  # results whose moments are refined at the source's rate
    frame_aggregate: str = FRAME_AGGREGATE  # the frame tier's score: max, top2 or z
    fusion: str = DEFAULT_FUSION  # how sources=both fuses the seen and said rankings: relevance or rrf

    def replace(self, **changes) -> EngineConfig:
        return replace(self, **changes)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_object(cls, obj) -> EngineConfig:
        """The engine's fields read off any object that has them as attributes (e.g. Settings)."""
        return cls(**{name: getattr(obj, name) for name in cls.field_names() if hasattr(obj, name)})
