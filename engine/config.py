"""Every setting of the search engine, declared once, and :class:`EngineConfig`, the one typed
configuration the engine is built from.

A :class:`Setting` names a setting, its type, its default (from :mod:`core.config`'s constants where
one exists), its environment variable (``QASLR_<NAME>``), its help text and whether it is a flag of
``qaslr serve``. :data:`SETTINGS` declares the engine's settings; :class:`EngineConfig` is made from
it (one field each), and so are the HTTP service's ``Settings`` (which adds only its own HTTP
settings, declared beside it the same way), the ``qaslr serve`` flags, ``.env.example`` and the
settings table of ``docs/architecture.md`` (``python -m service.settings_doc --write`` writes both;
a test fails when they drift).

Layers, each over the one before: the index manifest (a setting left unset takes what the index
records: :meth:`EngineConfig.over_manifest`) < these defaults < the environment < flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass, replace
from pathlib import Path
from typing import Any, Literal

from core.config import (
    BATCH_NICE,
    DEFAULT_FRAMES,
    DEFAULT_FUSION,
    DEFAULT_HEAD_CANDIDATES,
    DEFAULT_HEAD_FRAME_WEIGHT,
    DEFAULT_HEAD_REVERSAL_WEIGHT,
    DEFAULT_HEAD_SELECTION_WEIGHT,
    DEFAULT_HEAVY,
    DEFAULT_HEAVY_MARGIN,
    DEFAULT_KEEP_MARGIN,
    DEFAULT_ORDER_EVENT_WEIGHT,
    DEFAULT_REFINE_MOMENTS,
    DEFAULT_SHORTLIST,
    DEFAULT_TEXT_CONDITIONING,
    DEFAULT_TIE_MARGIN,
    FRAME_AGGREGATE,
    MAX_FRAMES,
    MAX_SHORTLIST,
    QFRAME_TEMPERATURE,
    SEARCH_NICE,
    FrameAggregate,
    Fusion,
    TextConditioning,
)

__all__ = ["SETTINGS", "EngineConfig", "Setting"]


@dataclass(frozen=True)
class Setting:
    """One setting, declared once (module docstring)."""

    name: str
    type: Any  # the Python type (a Literal or an enum for a closed set of values)
    default: Any
    help: str  # the one text: .env.example's comment, the docs table's meaning, the flag's help
    group: str  # its section of .env.example
    env: str = ""  # its environment variable (default: QASLR_<NAME>)
    aliases: tuple[str, ...] = ()  # other environment variables it is read from
    bounds: dict = field(default_factory=dict)  # ge, gt, le, lt (the service validates them)
    example: str | None = None  # the value .env.example shows, when not the default
    shown_default: str | None = None  # the docs table's default, when the value does not say it
    flag: bool | str = False  # a `qaslr serve` flag (True: --<name>; or the flag's own name)
    secret: bool = False  # never in a repr or the log
    from_index: str | None = None  # unset: the index manifest's field of this name (the lowest layer)

    @property
    def variable(self) -> str:
        return self.env or f"QASLR_{self.name.upper()}"


LOAD, CACHE, RUNTIME, SEARCH = "what to load", "frame cache", "runtime", "search defaults and bounds"
DTYPES = Literal["auto", "float32", "bfloat16", "float16"]

SETTINGS: tuple[Setting, ...] = (
    # -- what to load -------------------------------------------------------------------------------
    Setting("index", Path | None, None, "Index directory written by `indexer build` (required), or the "
            "symlink `indexer publish` switches.", LOAD, example="/data/index/current",
            shown_default="(required)", flag=True),
    Setting("model", str | None, None, "Backbone: a Hugging Face hub id or a local checkpoint directory; "
            "unset = the backbone the index was built with (its manifest's backbone_id).", LOAD,
            shown_default="the index's backbone", flag=True, from_index="backbone_id"),
    Setting("head", Path | None, None, "Streaming head directory; required when the index was built with "
            "one (embedder \"qaslr\"), ignored for one-shot indexes.", LOAD, flag=True),
    Setting("rerank_head", Path | None, None, "Stage 2's own streaming head (e.g. trained with `qaslr train "
            "--recipe two-stage`); unset = the index's head, or one-shot re-encoding for a one-shot index.",
            LOAD),
    Setting("rerank_gate", Path | None, None, "Early-exit gate of the stage-2 head (`qaslr train "
            "--gate-epochs`); needed for exit_threshold.", LOAD),
    Setting("checkpoint_head", bool, True, "Serve the rerank head a local checkpoint ships in its "
            "rerank_head/ folder when neither QASLR_RERANK_HEAD nor QASLR_HEAD is set (a head whose clip "
            "plan does not fit the index steps aside for one-shot; /readyz says which head serves); "
            "false = one-shot stage 2.", LOAD),
    Setting("time_head", Path | None, None, "Time head for queries about order (\"A, then B\") and count "
            "(\"A twice\"), trained by `qaslr train-time-head` (refused when trained on another backbone); "
            "unset = the checkpoint's own time_head/ folder (the tiny-world checkpoint ships one).", LOAD),
    Setting("checkpoint_time_head", bool, True, "Serve the time head a local checkpoint ships in its "
            "time_head/ folder when QASLR_TIME_HEAD is unset; false = order and count queries go through "
            "the cascade like any other query.", LOAD),
    Setting("device", str, "auto", "torch device: auto (cuda if available), cpu, cuda, cuda:1.", LOAD,
            flag=True),
    Setting("dtype", DTYPES, "auto", "Backbone dtype: auto (bfloat16 on CUDA, float32 on CPU), float32, "
            "bfloat16, float16.", LOAD, flag=True),
    Setting("frame_size", int | None, None, "Working resolution override (a multiple of 32); unset = the "
            "index's frame size.", LOAD, shown_default="the index's"),
    Setting("faiss_device", Literal["auto", "cpu", "gpu"], "auto", "Where stage 1 (FAISS) runs: auto (a GPU "
            "when faiss-gpu is installed and sees one: Flat and IVF indexes; HNSW and filtered searches "
            "stay on the CPU), cpu, gpu; /readyz says which.", LOAD),
    # -- the frame cache -----------------------------------------------------------------------------
    Setting("redis_url", str | None, None, "Redis for decoded frames, shared by replicas "
            "(redis://host:port/db); unset = an in-process LRU.", CACHE, env="REDIS_URL",
            aliases=("QASLR_REDIS_URL",), example="redis://127.0.0.1:6379/0", flag=True, secret=True),
    Setting("cache_ttl_s", int, 24 * 3600, "TTL of a cached frame in Redis, seconds.", CACHE, bounds={"ge": 1}),
    Setting("cache_max_items", int, 4096, "Frames kept by the in-process LRU when REDIS_URL is unset "
            "(0 = no cache).", CACHE, bounds={"ge": 0}),
    Setting("cache_prefix", str, "qaslr:frame:", "Key prefix in Redis.", CACHE),
    Setting("redis_timeout_s", float, 0.5, "Redis socket timeout, seconds.", CACHE, bounds={"gt": 0}),
    Setting("redis_retry_s", float, 5.0, "After a Redis error, skip Redis this long (seconds).", CACHE,
            bounds={"ge": 0}),
    # -- the runtime ---------------------------------------------------------------------------------
    Setting("queue_size", int, 8, "Searches admitted beyond the running one (queue_size + 1 at once); "
            "more get HTTP 429.", RUNTIME, bounds={"ge": 0}, flag=True),
    Setting("request_timeout_s", float, 30.0, "Per-request deadline in seconds, checked between stages; past "
            "it the request gets HTTP 503.", RUNTIME, bounds={"gt": 0}, flag="--request-timeout"),
    Setting("batching", bool, True, "Dynamic batching: searches run on search threads, and the backbone "
            "work of concurrent searches (queries, the heavy tier's clips, refine frames) shares backbone "
            "calls; false = the old single model thread that runs each search whole.", RUNTIME),
    Setting("search_threads", int, 0, "With batching: threads running searches (0 = queue_size + 1, so "
            "every admitted search starts at once; stage-1-only searches have a lane of their own).", RUNTIME,
            bounds={"ge": 0, "le": 256}),
    Setting("cpu_slots", int, 0, "With batching: searches running their cheap stages at once (0 = the cores "
            "+ 1; more only share the cores); a search waiting for the batcher gives its slot up, and the "
            "wait is the answer's queue time.", RUNTIME, bounds={"ge": 0, "le": 256}),
    Setting("batch_max_wait_ms", float, 5.0, "With batching: the longest (ms) work waits in the batcher for "
            "other searches' work to join it.", RUNTIME, bounds={"ge": 0, "le": 1000}),
    Setting("batch_max_frames", int, 0, "With batching: frames per shared backbone call (0 = clip_batch_size "
            "x the index's clip length L; a query or an image counts one).", RUNTIME, bounds={"ge": 0}),
    Setting("batch_workers", int, 0, "With batching: threads running batched calls (0 = one on a GPU; on a "
            "CPU, the cores torch's own threads leave; with model processes, one per process).", RUNTIME,
            bounds={"ge": 0, "le": 64}),
    Setting("model_processes", int, -1, "With batching: processes of their own, one per batcher worker, each "
            "holding a copy of the backbone, that run the batched query and image calls past the server's "
            "interpreter lock (-1 = auto: one per core on a CPU of two or more cores, at most four, while "
            "their copies fit in half the free memory; none on a GPU; 0 = off, every call in this process).",
            RUNTIME, bounds={"ge": -1, "le": 64}),
    Setting("batch_nice", int, BATCH_NICE, "With batching, on Linux: added to the batcher threads' nice value "
            "(0-19), so the cheap stages of other searches take a core from the encodes first; 0 = off.",
            RUNTIME, bounds={"ge": 0, "le": 19}),
    Setting("search_nice", int, SEARCH_NICE, "With batching, on Linux: added to the search threads' nice value "
            "(0-19; not the light lane's), so a stage-1-only search takes a busy core from other searches' "
            "stages first; 0 = off.", RUNTIME, bounds={"ge": 0, "le": 19}),
    Setting("decode_workers", int, 4, "Threads decoding frame-cache misses (one video each).", RUNTIME,
            bounds={"ge": 1, "le": 64}),
    Setting("clip_batch_size", int | Literal["auto"], 8, "Clips per backbone forward pass (candidates' clips "
            "share these batches); auto = sized by the device (8 on a CPU; on CUDA, as many as fill half "
            "the free memory, at most 64).", RUNTIME, bounds={"ge": 1}),
    # -- search defaults and bounds ------------------------------------------------------------------
    Setting("heavy", int, DEFAULT_HEAVY, "The cascade: how many of the frame tier's top candidates the heavy "
            "tier (one-shot or the streaming head) re-encodes when a request gives no `heavy` (0 = the frame "
            "tier alone).", SEARCH, bounds={"ge": 0, "le": MAX_SHORTLIST}),
    Setting("heavy_margin", float, DEFAULT_HEAVY_MARGIN, "... only when the frame tier's first two scores lie "
            "within this (its answer is close to call); 0 = never unless a request asks (single-event "
            "queries stop at the frame tier); 2 = always.", SEARCH, bounds={"ge": 0, "le": 2}),
    Setting("tie_margin", float, DEFAULT_TIE_MARGIN, "A query the rerank head's router calls about time "
            "(motion, order, count) goes to a streaming head that reads moments when the frame tier's first "
            "candidates lie within this of its best score (it cannot tell them apart).", SEARCH,
            bounds={"ge": 0, "le": 2}),
    Setting("head_candidates", int, DEFAULT_HEAD_CANDIDATES, "... at most this many of them (what the head was "
            "trained to rerank).", SEARCH, bounds={"ge": 2, "le": MAX_SHORTLIST}),
    Setting("keep_margin", float, DEFAULT_KEEP_MARGIN, "... and the head's order stands only where its best "
            "beats the frame tier's first by this on the head's own score (else the frame tier's order "
            "stands, and the answer says so).", SEARCH, bounds={"ge": 0, "le": 2}),
    Setting("head_selection_weight", float, DEFAULT_HEAD_SELECTION_WEIGHT, "... and each candidate the head "
            "read scores its own score plus this times its best frame's cosine with the query's selection query "
            "(whether the events the query names show at all), where the router ships a selection query; 0 = "
            "without it.", SEARCH, bounds={"ge": 0, "le": 10}),
    Setting("head_frame_weight", float, DEFAULT_HEAD_FRAME_WEIGHT, "... plus this times its best frame's "
            "cosine with the query itself; both 0 = the head's score alone.", SEARCH,
            bounds={"ge": 0, "le": 10}),
    Setting("head_reversal_weight", float, DEFAULT_HEAD_REVERSAL_WEIGHT, "... plus this times how much better "
            "its moments read forwards than each played backwards (a change reads as its opposite, a shape "
            "shown still as itself); above 0 the head reads every one of the first `head_candidates` and each "
            "twice; 0 = one reading of the near-ties.", SEARCH, bounds={"ge": 0, "le": 20}),
    Setting("order_event_weight", float, DEFAULT_ORDER_EVENT_WEIGHT, "An order of two events, where the streaming "
            "head reads the query's words: each candidate it read scores its own score plus this times its weaker "
            "event's best frame (whether both events show at all).", SEARCH, bounds={"ge": 0, "le": 10}),
    Setting("order_windows", Literal["events", "query"], "query", "... and the moments it reads are cut where the "
            "query's selection query points, as its training cut them (query), or where each event shows best "
            "(events).", SEARCH),
    Setting("refine_moments", int, DEFAULT_REFINE_MOMENTS, "Results whose moments are refined at the source's "
            "frame rate (0 = bank resolution only).", SEARCH, bounds={"ge": 0}),
    Setting("frame_aggregate", FrameAggregate, FRAME_AGGREGATE, "The frame tier's score of a candidate from "
            "its frame bank: max, top2 or z.", SEARCH),
    Setting("fusion", Fusion, DEFAULT_FUSION, "How sources=both fuses what is seen with what is said "
            "(subtitles): relevance (the better of the two 0..1 relevances plus a third of the other) or "
            "rrf (reciprocal rank fusion, k=60).", SEARCH),
    Setting("default_shortlist", int, DEFAULT_SHORTLIST, "Shortlist R when a request gives none (the paper's "
            "10); requests may ask for 1..200. It never depends on top_k: pages cut one ranking.", SEARCH,
            bounds={"ge": 1, "le": MAX_SHORTLIST}),
    Setting("default_frames", int, DEFAULT_FRAMES, "Stage-2 frames K' per candidate when a request gives none "
            "(the paper's K' is 128: 32 keeps CPU latency down; use 128 on a GPU). A streaming stage-2 head "
            "that records its clip plan must be served at its trained K'.", SEARCH, bounds={"ge": 1},
            flag=True),
    Setting("max_frames", int, MAX_FRAMES, "The most frames K' a request may ask for (stated in the OpenAPI "
            "document).", SEARCH, bounds={"ge": 1}, flag=True),
    Setting("selection_temperature", float, QFRAME_TEMPERATURE, "Q-Frame selection temperature, in units of "
            "the frame scores' own spread (robust std).", SEARCH, bounds={"gt": 0}),
    Setting("selection_seed", int, 0, "Default seed of query-aware selection (combined with the query and "
            "each candidate's id).", SEARCH),
    Setting("rerank_text_conditioning", TextConditioning, DEFAULT_TEXT_CONDITIONING, "One-shot stage 2: where "
            "the query text goes in the backbone prompt (none, after, before the frames); a streaming rerank "
            "head uses the placement it was trained with.", SEARCH),
    Setting("exit_threshold", float | None, None, "Early exit in stage 2 (needs QASLR_RERANK_GATE): stop a "
            "candidate's stream at the first step whose gate probability reaches this; unset = full "
            "streaming unless a request asks.", SEARCH, bounds={"gt": 0, "le": 1}),
    Setting("exit_min_steps", int, 2, "t_min: the earliest step a candidate may exit.", SEARCH, bounds={"ge": 1}),
    Setting("oneshot_moments", int, 0, "One-shot stage 2 reads each candidate's top N moments, each the run of "
            "bank frames around a relevance peak read whole as temporal pairs (models.windows.moment_plan: a "
            "frame and the source frame a moment after it, in time order), instead of Q-Frame's K' frames: what "
            "a backbone that sees motion needs (training/motion_recipe.py); 0 = Q-Frame.", SEARCH,
            bounds={"ge": 0}),
)  # fmt: skip


class _EngineConfigMethods:
    def replace(self, **changes) -> EngineConfig:
        return replace(self, **changes)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_object(cls, obj) -> EngineConfig:
        """The engine's fields read off any object that has them as attributes (e.g. Settings)."""
        return cls(**{name: getattr(obj, name) for name in cls.field_names() if hasattr(obj, name)})

    def over_manifest(self, manifest) -> EngineConfig:
        """The lowest layer: each setting left unset that an index records takes the index's value
        (``model``: the backbone the index was built with)."""
        changes = {
            s.name: getattr(manifest, s.from_index)
            for s in SETTINGS
            if s.from_index and getattr(self, s.name) is None and getattr(manifest, s.from_index, None)
        }
        return replace(self, **changes) if changes else self


EngineConfig = make_dataclass(
    "EngineConfig",
    [(s.name, s.type, field(default=s.default, metadata={"setting": s})) for s in SETTINGS],
    bases=(_EngineConfigMethods,),
    frozen=True,
    namespace={"__doc__": "The engine's settings (:data:`SETTINGS`): what to load, the frame cache, the "
               "runtime, and search defaults and bounds.", "__module__": __name__},
)  # fmt: skip
