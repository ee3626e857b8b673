"""Service settings: one pydantic-settings class, read from the environment.

The search engine's own fields (what to load, the frame cache, search defaults) take their defaults
from :class:`engine.config.EngineConfig`, and :meth:`Settings.engine_config` hands them to the engine;
the HTTP fields (host, port, keys, deadline) are the service's alone.

Every field reads ``QASLR_<FIELD>`` (e.g. ``QASLR_INDEX``, ``QASLR_API_KEYS``), except the Redis URL,
which reads the conventional ``REDIS_URL`` (``QASLR_REDIS_URL`` also works). ``qaslr serve`` flags
override the environment. ``.env.example`` at the repository root documents each variable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.config import MAX_SHORTLIST, FrameAggregate, Fusion, TextConditioning
from engine.config import EngineConfig

_E = EngineConfig()  # the engine's defaults


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="QASLR_", extra="ignore", populate_by_name=True, env_ignore_empty=True
    )

    # -- what to load ---------------------------------------------------------------------------
    index: Path | None = Field(None, description="index directory written by `indexer build` (required)")
    model: str = Field(_E.model, description="backbone hub id or local checkpoint directory")
    head: Path | None = Field(
        None, description="streaming head directory; required when the index was built with one"
    )
    rerank_head: Path | None = Field(
        None,
        description="streaming head for stage 2 (e.g. one trained with `qaslr train --recipe two-stage`); "
        "default: the index's own head, or one-shot re-encoding for a one-shot index",
    )
    checkpoint_head: bool = Field(
        _E.checkpoint_head,
        description="serve the rerank head a local checkpoint ships in its rerank_head/ folder (the "
        "tiny-world checkpoint does) when neither QASLR_RERANK_HEAD nor QASLR_HEAD is set; false: "
        "one-shot stage 2",
    )
    time_head: Path | None = Field(
        None,
        description="time head for queries about order and count (trained by `qaslr train-time-head`); "
        "default: the checkpoint's own time_head/ folder (the tiny-world checkpoint ships one)",
    )
    checkpoint_time_head: bool = Field(
        _E.checkpoint_time_head,
        description="serve the time head a local checkpoint ships in its time_head/ folder when "
        "QASLR_TIME_HEAD is not set; false: order and count queries go through the cascade like any other",
    )
    rerank_gate: Path | None = Field(
        None, description="early-exit gate directory for stage 2 (written by `qaslr train --gate-epochs`)"
    )
    device: str = Field(_E.device, description="torch device: auto (cuda if available), cpu, cuda, cuda:1")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        _E.dtype, description="backbone dtype; auto = bfloat16 on CUDA, float32 on CPU"
    )

    # -- HTTP -------------------------------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        repr=False,
        description="comma-separated API keys; empty = no authentication",
    )
    log_level: str = "info"

    # -- frame cache ------------------------------------------------------------------------------
    redis_url: str | None = Field(
        None,
        validation_alias=AliasChoices("REDIS_URL", "QASLR_REDIS_URL", "redis_url"),
        repr=False,  # may carry a password
        description="redis://host:port/db; unset = in-process LRU cache",
    )
    cache_ttl_s: int = Field(_E.cache_ttl_s, ge=1, description="TTL of a cached frame in Redis")
    cache_max_items: int = Field(
        _E.cache_max_items, ge=0, description="frames held by the in-process LRU (0 = off)"
    )
    cache_prefix: str = Field(_E.cache_prefix, description="Redis key prefix")
    redis_timeout_s: float = Field(_E.redis_timeout_s, gt=0, description="Redis socket timeout")
    redis_retry_s: float = Field(
        _E.redis_retry_s, ge=0, description="after a Redis error, skip Redis this long"
    )

    # -- serving behaviour ------------------------------------------------------------------------
    queue_size: int = Field(
        _E.queue_size, ge=0, description="searches waiting for the model worker beyond the running one"
    )
    batching: bool = Field(
        _E.batching,
        description="run searches on request threads and the heavy tier's encodes of concurrent searches in "
        "shared backbone calls (dynamic batching); false = the old single model thread for everything",
    )
    search_threads: int = Field(
        _E.search_threads, ge=0, le=256,
        description="with batching: threads running searches (0 = queue_size + 1: every admitted search starts; "
        "stage-1-only searches have a lane of their own)",
    )  # fmt: skip
    cpu_slots: int = Field(
        _E.cpu_slots, ge=0, le=256,
        description="with batching: searches running their cheap stages at once (0 = the cores + 1; more only "
        "share the cores; a search waiting for the batcher gives its slot up, and the wait is the answer's queue time)",
    )  # fmt: skip
    batch_max_wait_ms: float = Field(
        _E.batch_max_wait_ms, ge=0, le=1000,
        description="with batching: the longest a clip waits in the batcher for other requests' clips",
    )  # fmt: skip
    batch_max_frames: int = Field(
        _E.batch_max_frames, ge=0,
        description="with batching: frames per shared encode call (0 = clip_batch_size x the index's clip length L)",
    )  # fmt: skip
    batch_workers: int = Field(
        _E.batch_workers, ge=0, le=64,
        description="with batching: threads running batched encodes (0 = one on a GPU; on a CPU, the cores "
        "torch's own threads leave; with model processes, one per process)",
    )  # fmt: skip
    model_processes: int = Field(
        _E.model_processes, ge=-1, le=64,
        description="with batching: processes of their own, one per batcher worker, that hold a copy of the "
        "backbone and run the batched query and image calls past the server's interpreter lock (-1 = auto: one "
        "per core on a CPU of two or more cores while their copies of the weights fit in half the free memory, "
        "none on a GPU; 0 = off, every call in the server)",
    )  # fmt: skip
    batch_nice: int = Field(
        _E.batch_nice, ge=0, le=19,
        description="with batching, on Linux: added to the batcher threads' nice value, so the cheap stages of "
        "other searches (query embedding, stage 1, the frame tier) take a core from the encodes first; 0 = off",
    )  # fmt: skip
    search_nice: int = Field(
        _E.search_nice, ge=0, le=19,
        description="with batching, on Linux: added to the search threads' nice value (not the light lane's), so "
        "a stage-1-only search takes a busy core from other searches' stages first; 0 = off",
    )  # fmt: skip
    fusion: Fusion = Field(
        _E.fusion,
        description="how sources=both fuses what is seen with what is said: relevance (the better of the two "
        "0..1 relevances plus a third of the other) or rrf (reciprocal rank fusion, k=60); engine.spoken",
    )
    request_timeout_s: float = Field(30.0, gt=0, description="per-request deadline (503 after it)")
    warm_up: bool = Field(
        True,
        description="run one search through every stage before /readyz reports ready (a first query "
        "then costs what later ones do)",
    )

    # -- search defaults and bounds ---------------------------------------------------------------
    default_shortlist: int = Field(
        _E.default_shortlist, ge=1, le=MAX_SHORTLIST, description="R when the request gives none (paper: 10)"
    )
    default_frames: int = Field(
        _E.default_frames, ge=1, description="K' stage-2 frames per candidate when not given"
    )
    max_frames: int = Field(_E.max_frames, ge=1, description="upper bound on a request's K' (paper K <= 128)")
    selection_temperature: float = Field(
        _E.selection_temperature,
        gt=0,
        description="Q-Frame softmax temperature, in units of the frame scores' own spread (robust std)",
    )
    selection_seed: int = Field(
        _E.selection_seed,
        description="default seed of query-aware selection (combined with each candidate's id)",
    )
    rerank_text_conditioning: TextConditioning = Field(
        _E.rerank_text_conditioning,
        description="one-shot stage 2: where the query text goes in the backbone prompt (none, after, "
        "before the frames); a streaming rerank head uses the placement it was trained with",
    )
    exit_threshold: float | None = Field(
        None,
        gt=0,
        le=1,
        description="early exit in stage 2 (needs rerank_gate): stop a candidate's stream at the first "
        "step whose gate probability reaches this; unset = full streaming unless a request asks",
    )
    exit_min_steps: int = Field(
        _E.exit_min_steps, ge=1, description="t_min: the earliest step a candidate may exit"
    )
    decode_workers: int = Field(
        _E.decode_workers, ge=1, le=64, description="threads decoding cache misses (one video each)"
    )
    clip_batch_size: int = Field(
        _E.clip_batch_size, ge=1, description="clips per backbone forward pass (shared by candidates)"
    )
    heavy: int = Field(
        _E.heavy, ge=0, le=MAX_SHORTLIST,
        description="the cascade: how many of the frame tier's top candidates the heavy tier re-encodes "
        "when a request gives no `heavy` (0 = the frame tier alone)",
    )  # fmt: skip
    heavy_margin: float = Field(
        _E.heavy_margin, ge=0, le=2,
        description="the cascade: run the heavy tier only when the frame tier's first two scores lie within this "
        "(requests that give `heavy` always get it; 2 = always)",
    )  # fmt: skip
    refine_moments: int = Field(
        _E.refine_moments, ge=0, description="results whose moments are refined at the source's frame rate"
    )
    frame_aggregate: FrameAggregate = Field(
        _E.frame_aggregate,
        description="the frame tier's score of a candidate: max, top2 or z (engine.tiers.frame)",
    )
    frame_size: int | None = Field(None, description="override the working resolution (default: the index's)")
    faiss_device: Literal["auto", "cpu", "gpu"] = Field(
        _E.faiss_device,
        description="where stage 1 (FAISS) runs: auto = a GPU when faiss-gpu is installed and sees one (Flat and "
        "IVF indexes; HNSW and filtered searches stay on the CPU), else the CPU; /readyz says which",
    )

    def engine_config(self) -> EngineConfig:
        """What the search engine is built from: these settings' engine fields."""
        return EngineConfig.from_object(self)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value):
        if value is None:
            return []
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return [str(k).strip() for k in value if str(k).strip()]

    @field_validator("redis_url", mode="before")
    @classmethod
    def _empty_is_none(cls, value):
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _bounds(self) -> Settings:
        if self.default_frames > self.max_frames:
            raise ValueError(f"default_frames ({self.default_frames}) exceeds max_frames ({self.max_frames})")
        return self
