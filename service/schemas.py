"""Request and response models of the HTTP API (pydantic; they also drive the OpenAPI docs)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

MAX_SHORTLIST = 200
MAX_TOP_K = 100

_SEARCH_EXAMPLE = {
    "query": "a dog catches a frisbee on the beach",
    "top_k": 5,
    "shortlist": 10,
    "mode": "rerank",
    "frames": 32,
    "filter": {"split": "test", "duration_s": {"gte": 60}},
    "include_evidence": True,
}


class SearchRequest(BaseModel):
    """``POST /search``. Stage 1 ranks the whole index by q·v_j (FAISS); ``rerank`` additionally
    re-scores the top ``shortlist`` candidates with query-aware selection and query-conditioned
    encoding (paper §A.4)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_SEARCH_EXAMPLE]})

    query: str = Field(
        ..., min_length=1, max_length=1000, description="text query (trimmed, 1-1000 characters)"
    )
    top_k: int = Field(10, ge=1, le=MAX_TOP_K, description="results to return")
    shortlist: int | None = Field(
        None,
        ge=1,
        le=MAX_SHORTLIST,
        description="R, stage-1 candidates that stage 2 rescores (top_k..200; default max(10, top_k))",
    )
    mode: Literal["indexed", "rerank"] = Field(
        "rerank", description="`indexed`: stage 1 only; `rerank`: both stages"
    )
    frames: int | None = Field(
        None,
        ge=1,
        description="K', frames selected per candidate in stage 2 (bounded by the server's max_frames)",
    )
    filter: dict[str, Any] | None = Field(
        None,
        description="metadata filter: {field: value} equality, {field: {'in': [...]}}, "
        "{field: {'gte'|'gt'|'lte'|'lt': number}}; fields are the index's metadata keys and "
        "duration_s, fps, num_frames",
        examples=[{"split": "test", "duration_s": {"gte": 60, "lt": 600}}],
    )
    include_evidence: bool = Field(True, description="return evidence frames and the best moment")
    seed: int | None = Field(None, description="seed of the query-aware frame sampling (default: server's)")

    @field_validator("query", mode="before")
    @classmethod
    def _trim(cls, value):
        return value.strip() if isinstance(value, str) else value

    @field_validator("filter")
    @classmethod
    def _filter_keys(cls, value):
        if value is None:
            return value
        if len(value) > 32:
            raise ValueError("at most 32 filter fields")
        for key in value:
            if not key or len(key) > 128:
                raise ValueError("filter field names must be 1-128 characters")
        return value

    @field_validator("shortlist")
    @classmethod
    def _shortlist_covers_top_k(cls, value, info: ValidationInfo):
        top_k = info.data.get("top_k")
        if value is not None and top_k is not None and value < top_k:
            raise ValueError(f"must be >= top_k ({top_k}), got {value}")
        return value


class EvidenceFrame(BaseModel):
    frame_index: int = Field(..., description="index of the frame in the source video")
    timestamp_s: float = Field(..., description="frame_index / fps")
    relevance: float = Field(..., description="similarity of the frame's stored embedding to the query")


class Moment(BaseModel):
    start_s: float
    end_s: float
    source: Literal["streaming", "relevance"] = Field(
        ...,
        description="`streaming`: the clip whose readout gained most similarity; `relevance`: frame scores",
    )


class Evidence(BaseModel):
    frames: list[EvidenceFrame]
    moment: Moment | None


class SearchResult(BaseModel):
    video_id: str
    score: float = Field(..., description="final score: s_ij = q·v_ij after rerank, else stage-1 q·v_j")
    stage1_score: float
    stage1_rank: int = Field(..., description="1-based rank in the stage-1 list")
    reranked: bool = Field(..., description="false when stage 2 did not run for this candidate")
    duration_s: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    evidence: Evidence | None = None


class Timings(BaseModel):
    queue: float = 0.0
    query_embed: float = 0.0
    filter: float = 0.0
    faiss: float = 0.0
    selection: float = 0.0
    decode: float = 0.0
    encode: float = 0.0
    head: float = 0.0
    total: float = 0.0


class CacheStats(BaseModel):
    backend: str
    hits: int = 0
    misses: int = 0
    decoded_frames: int = 0
    errors: int = 0


class SearchResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "request_id": "4f1c0d6e9b2a4c8e",
                    "query": "a dog catches a frisbee on the beach",
                    "mode": "rerank",
                    "embedder": "qaslr",
                    "shortlist": 10,
                    "frames": 32,
                    "results": [
                        {
                            "video_id": "beach_day",
                            "score": 0.61,
                            "stage1_score": 0.48,
                            "stage1_rank": 3,
                            "reranked": True,
                            "duration_s": 94.0,
                            "metadata": {"split": "test"},
                            "evidence": {
                                "frames": [{"frame_index": 1200, "timestamp_s": 40.0, "relevance": 0.52}],
                                "moment": {"start_s": 38.0, "end_s": 44.0, "source": "streaming"},
                            },
                        }
                    ],
                    "timings_ms": {"query_embed": 12.0, "faiss": 0.4, "total": 640.0},
                    "cache": {"backend": "redis", "hits": 300, "misses": 20, "decoded_frames": 20},
                    "warnings": [],
                }
            ]
        }
    )

    request_id: str
    query: str
    mode: Literal["indexed", "rerank"]
    embedder: str
    shortlist: int
    frames: int
    results: list[SearchResult]
    timings_ms: Timings
    cache: CacheStats
    warnings: list[str] = Field(default_factory=list)


class VideoResponse(BaseModel):
    id: str
    status: str
    fps: float | None = None
    num_frames: int | None = None
    duration_s: float | None = None
    width: int | None = None
    height: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
    request_id: str
