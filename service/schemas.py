"""Request and response models of the HTTP API (pydantic; they also drive the OpenAPI docs).

Request fields are strictly typed (``"seed": false`` is not a number, ``"top_k": "5"`` is not an
integer; ``3.0`` is the integer 3, as JSON Schema has it) and every constraint the server enforces is expressed in the schema, so that a request the
OpenAPI document calls valid is answered, and one it calls invalid is refused with 422. The one
server-specific bound, ``frames <= max_frames``, is written into the document by ``create_app``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema, WithJsonSchema

from core.config import (
    DEFAULT_HEAVY,
    DEFAULT_HEAVY_MARGIN,
    DEFAULT_SOURCES,
    DEFAULT_TOP_K,
    MAX_FILTER_FIELDS,
    MAX_FILTER_KEY_CHARS,
    MAX_FILTER_STRING_CHARS,
    MAX_FILTER_VALUES,
    MAX_FRAMES,
    MAX_QUERY_CHARS,
    MAX_SEED,
    MAX_SHORTLIST,
    MAX_TOP_K,
    MIN_RELEVANCE,
    QUERY_BLANKS,
    QUERY_PATTERN,
    SearchMode,
    Sources,
)
from service.images import MAX_IMAGE_BYTES
from service.paging import PAGE_TOKEN_PATTERN

IMAGE_PATTERN = r"^(data:image/[A-Za-z0-9.+-]+;base64,)?[A-Za-z0-9+/=\s]+$"
_SEARCH_EXAMPLE = {
    "query": "a dog catches a frisbee on the beach",
    "top_k": 5,
    "shortlist": 10,
    "mode": "rerank",
    "frames": 32,
    "filter": {"kind": "single", "duration_s": {"gte": 60}},
    "include_evidence": True,
}


def _json_integer(value):
    """An integer as JSON Schema defines one: a number without a fractional part (``3`` or ``3.0``);
    never a boolean or a string (``"seed": false`` and ``"top_k": "5"`` are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("Input should be a valid integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("Input should be a valid integer, got a number with a fractional part")
        return int(value)
    return value


def _json_number(value):
    """A JSON number (never a boolean or a string)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("Input should be a valid number")
    return float(value)


def json_int(ge: int, le: int):
    """An integer field type with bounds, as JSON Schema defines integers (see ``_json_integer``)."""
    return Annotated[
        int,
        BeforeValidator(_json_integer),
        Field(ge=ge, le=le),
        WithJsonSchema({"type": "integer", "minimum": ge, "maximum": le}),
    ]


TopK = json_int(1, MAX_TOP_K)
Shortlist = json_int(1, MAX_SHORTLIST)
Frames = json_int(1, MAX_FRAMES)
Seed = json_int(0, MAX_SEED)
ExitThreshold = Annotated[
    float,
    BeforeValidator(lambda v: _json_number(v)),
    Field(gt=0, le=1),
    WithJsonSchema({"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
]
MinScore = Annotated[
    float,
    BeforeValidator(lambda v: _json_number(v)),
    Field(ge=-1, le=1),
    WithJsonSchema({"type": "number", "minimum": -1, "maximum": 1}),
]
FilterString = Annotated[StrictStr, Field(max_length=MAX_FILTER_STRING_CHARS)]
FilterValue = FilterString | StrictInt | StrictFloat | StrictBool | None
RangeBound = FilterString | StrictInt | StrictFloat
FilterField = Annotated[str, StringConstraints(min_length=1, max_length=MAX_FILTER_KEY_CHARS)]


class InCondition(BaseModel):
    """``{"in": [...]}``: the field equals one of the values."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    values: list[FilterValue] = Field(..., alias="in", max_length=MAX_FILTER_VALUES)

    def to_filter(self) -> dict:
        return {"in": list(self.values)}


class RangeCondition(BaseModel):
    """``{"gte"|"gt"|"lte"|"lt": bound, ...}``: numbers compare with numbers, strings with strings."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    gte: RangeBound | SkipJsonSchema[None] = None
    gt: RangeBound | SkipJsonSchema[None] = None
    lte: RangeBound | SkipJsonSchema[None] = None
    lt: RangeBound | SkipJsonSchema[None] = None

    @model_validator(mode="before")
    @classmethod
    def _bounds_given(cls, value):
        if isinstance(value, dict):
            if not value:
                raise ValueError("a range needs at least one of gte, gt, lte, lt")
            nulls = [k for k, v in value.items() if v is None]
            if nulls:
                raise ValueError(
                    f"range bounds must be numbers or strings, not null ({', '.join(map(str, nulls))})"
                )
        return value

    def to_filter(self) -> dict:
        return self.model_dump(exclude_none=True)


FilterCondition = InCondition | RangeCondition | FilterValue


class SearchRequest(BaseModel):
    """``POST /search``. Stage 1 ranks the whole index by q·v_j (FAISS); ``rerank`` additionally
    re-scores the top ``shortlist`` candidates with query-aware selection and query-conditioned
    encoding (paper §A.4)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [_SEARCH_EXAMPLE],
            "anyOf": [{"required": ["query"]}, {"required": ["image"]}],
        },
    )

    query: StrictStr = Field(
        None,  # required unless an image is sent (the schema's anyOf; the searcher enforces it)
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        pattern=QUERY_PATTERN,
        description=f"text query (1-{MAX_QUERY_CHARS} characters, not only white space; trimmed); "
        "required unless `image` is given",
    )
    image: StrictStr = Field(
        None,
        pattern=IMAGE_PATTERN,
        description="an image query: a base64 JPEG, PNG, WebP, GIF or BMP (optionally as a data: URL), "
        f"at most {MAX_IMAGE_BYTES // (1024 * 1024)} MiB (413 beyond; 415 when it does not decode to a picture). "
        "With `query`, image and text are embedded together",
        json_schema_extra={"contentEncoding": "base64"},
    )
    top_k: TopK = Field(DEFAULT_TOP_K, description="results to return")
    shortlist: Shortlist | None = Field(
        None,
        description=f"R, stage-1 candidates that stage 2 rescores at a time (1..{MAX_SHORTLIST}; default: the "
        "server's QASLR_DEFAULT_SHORTLIST). It does not depend on `top_k`: the ranking is stage 2's order of "
        "each window of R candidates in turn, and a page larger than R runs on into the next window",
    )
    mode: SearchMode = Field(
        SearchMode.RERANK,
        description="`indexed`: stage 1 only; `frames`: stage 1, then the frame tier ranks the shortlist by "
        "its stored frame banks (no backbone call); `rerank`: the cascade, the frame tier then the heavy "
        "tier (one-shot or the streaming head) on the frame tier's top `heavy` candidates",
    )
    heavy: int | None = Field(
        None,
        ge=0,
        le=MAX_SHORTLIST,
        description=f"rerank mode: how many of the frame tier's top candidates the heavy tier re-encodes "
        f"(0..shortlist; 0 = the frame tier alone; more than the shortlist re-encodes all of it, and the answer "
        f"says so; default {DEFAULT_HEAVY}, and then only when the frame tier's answer is close to call, see "
        "`heavy_margin`, which by default is never; a request that gives `heavy` always gets it)",
    )
    heavy_margin: float | None = Field(
        None,
        ge=0,
        le=2,
        description=f"rerank mode: run the heavy tier only when the frame tier's first two scores lie within "
        f"this (default {DEFAULT_HEAVY_MARGIN} when `heavy` is not given, else 2: always; 0 = never: the "
        "frame tier's ranking stands, as measured best for single-event queries; order and count queries go "
        "to the time head whatever this is)",
    )
    frames: Frames | None = Field(
        None,
        description="K', frames selected per candidate in stage 2 (at most the server's max_frames, which "
        "this document states as the maximum). With a streaming head in stage 2, K' <= L re-encodes every "
        "candidate one-shot (`rerank_embedder` says so), and more than the head was trained on is refused",
    )
    filter: dict[FilterField, FilterCondition] | None = Field(
        None,
        max_length=MAX_FILTER_FIELDS,
        description="metadata filter: {field: value} equality, {field: {'in': [...]}}, "
        "{field: {'gte'|'gt'|'lte'|'lt': number or string}}; fields are the index's metadata keys and "
        "duration_s, fps, num_frames, width, height",
        examples=[{"kind": "single", "duration_s": {"gte": 60, "lt": 600}}],
    )
    include_evidence: StrictBool = Field(True, description="return evidence frames and the best moment")
    seed: Seed | None = Field(None, description="seed of the query-aware frame sampling (default: server's)")
    min_score: MinScore | None = Field(
        None,
        description="leave out results whose `relevance` is below this (with group_by=clip, the moment's): "
        f"a cut-off that means the same for every query and mode; {MIN_RELEVANCE} separates a match from "
        '"nothing like it" in the shapes-world measurement',
    )
    group_by: Literal["video", "clip"] = Field(
        "video",
        description="`video`: one result per video; `clip`: moments, several per video allowed, scored by "
        "their frames' relevance and ranked across the page's candidates",
    )
    sources: Sources = Field(
        DEFAULT_SOURCES,
        description="what to rank by: `seen`, the frames (stage 1 and the cascade); `said`, the videos' subtitle "
        'cues (SQLite FTS5, BM25; words are alternatives, `"quoted phrases"` must be said in order); `both`, '
        "the two fused (the server's QASLR_FUSION: by default the better of the two relevances plus a third of "
        "the other); in `both`, quoted phrases are what is said and the words outside them what is seen. `both` "
        "is the default: on an index without subtitles, or a page no cue matches, it answers what `seen` does",
    )
    page_token: StrictStr | None = Field(
        None,
        pattern=PAGE_TOKEN_PATTERN,
        description="the `next_page_token` of the previous answer to the same request: the results that "
        "follow its last (the pages together are one ranking)",
    )
    exit_threshold: ExitThreshold | None = Field(
        None,
        description="early exit in stage 2 (§A.10): stop streaming a candidate at the first step whose gate "
        "probability reaches this (needs a server with an early-exit gate; default: the server's setting, "
        "usually full streaming)",
    )

    @field_validator("query")
    @classmethod
    def _trim(cls, value: str) -> str:
        return value.strip(QUERY_BLANKS)

    @field_validator("image")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return "".join(value.split())

    @field_validator("filter")
    @classmethod
    def _plain_filter(cls, value):
        """The searcher's filter language takes plain JSON values."""
        if value is None:
            return value
        return {k: v.to_filter() if isinstance(v, BaseModel) else v for k, v in value.items()}


class EvidenceFrame(BaseModel):
    frame_index: int = Field(..., description="index of the frame in the source video")
    timestamp_s: float = Field(..., description="frame_index / fps")
    relevance: float = Field(..., description="similarity of the frame's stored embedding to the query")


class Moment(BaseModel):
    start_s: float
    end_s: float
    source: Literal["relevance", "refined", "cue", "time"] = Field(
        ...,
        description="`relevance`: the run of frame-bank frames around the relevance peak (edges half-way "
        "to the bank frames outside); `refined`: the same, its edges moved to the source's frame rate; `cue`: "
        "the times of the subtitle cue that matched (a result found by what is said, whose cue matched it at "
        "least as well as its frames); `time`: a query about order or count ranked by the time head (or, "
        "an order, by the streaming head that reads the query's words), from the first event's showing to the "
        "last one's",
    )


class Spoken(BaseModel):
    """What was said: the subtitle cue that matched the query."""

    text: str = Field(..., description="the cue's text (markup stripped)")
    snippet: str = Field(..., description="the cue around the matched words (FTS5 snippet; `…` where cut)")
    highlights: list[tuple[int, int]] = Field(
        default_factory=list, description="[start, end) character ranges of the matched words in `snippet`"
    )
    start_s: float
    end_s: float
    rank: int = Field(..., description="the video's rank by what is said (its best cue's BM25)")
    score: float = Field(..., description="the cue's BM25 score (higher is better)")
    coverage: float = Field(
        ...,
        description="the share of the query's words and phrases the cue says, weighted by their rarity "
        "among the index's cues (0..1; 1: every word)",
    )


class Evidence(BaseModel):
    frames: list[EvidenceFrame]
    moment: Moment | None


class TimelinePoint(BaseModel):
    start_s: float
    end_s: float
    value: float


class Timeline(BaseModel):
    """Relevance over time, from what the search computed for this video."""

    source: Literal["streaming", "relevance"] = Field(
        ...,
        description="`streaming`: q·z_t, the readout's similarity to the query after each clip stage 2 streamed; "
        "`relevance`: the frame bank's relevance q·f_c (one-shot and stage-1 results), max-pooled into bins",
    )
    points: list[TimelinePoint]


class SearchResult(BaseModel):
    """One video in a search answer (the searcher's internal result is ``SearchOutcome``)."""

    video_id: str
    score: float = Field(
        ...,
        description="the ranking score of the `tier` that ranked this result; it orders the results of one "
        "tier in one answer and means one thing per tier (compare results across tiers or queries by "
        "`relevance`, the only cross-tier number): stage 1 (`tier` null): q·v_j; `frame`: the frame tier's "
        "aggregate of q·f_c over the frame bank (QASLR_FRAME_AGGREGATE, max by default); `oneshot`/`head`: "
        "s_ij = q·v_ij of the re-encoded candidate; `time`: the time head's score for the order or count "
        "asked; group_by=clip: the frame tier's over the moment's frames. When what was said is fused in "
        "(a page with a spoken match), the fused score (QASLR_FUSION relevance: max(seen, said) + 1/3 "
        "min(seen, said) over the two relevances; rrf: 1/(60 + seen rank) + 1/(60 + said rank)); with "
        "sources=said, the cue's BM25 (FTS5, higher is better), which in a small collection can round to "
        "0.000 even for a cue that says every word of the query (its `relevance`, the share of the query's "
        "words it says, is then 1.0)",
    )
    stage1_score: float
    stage1_rank: int | None = Field(
        ..., description="1-based rank in the stage-1 list; null for a video found only by what is said"
    )
    source: Sources = Field(
        Sources.SEEN,
        description="which ranking found it: `seen` (its frames), `said` (its subtitles), `both`",
    )
    spoken: Spoken | None = Field(None, description="the cue that matched (source said or both)")
    seen_score: float | None = Field(
        None,
        description="when fused: the visual score it had before fusion (what `score` is with sources=seen)",
    )
    reranked: bool = Field(..., description="false when stage 2 did not run for this candidate")
    clips_used: int | None = Field(
        None,
        description="stage 2: clips streamed for this candidate (fewer than planned after an early exit)",
    )
    clips_planned: int | None = Field(None, description="stage 2: clips its selected frames make (T)")
    duration_s: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    evidence: Evidence | None = None
    video_score: float | None = Field(
        None, description="group_by=clip: the score of the clip's video (`score` is the clip's)"
    )
    timeline: Timeline | None = Field(None, description="relevance over time (with include_evidence)")
    tier: str | None = Field(
        None,
        description="the tier whose score ranks this result: `frame`, `oneshot`, `head`, or `time` (the time head, for a query about order or count); null: stage 1",
    )
    relevance: float | None = Field(
        None,
        description="whether the video holds what the query describes, 0..1, comparable across results, tiers "
        f"and queries: its best frame's cosine with the query against the query's score on typical frames of "
        f"this collection (found by what is said: the larger of that and its cue's share of the query's words; "
        "ranked by the time head, `tier` `time`: its weakest event's, times the head's calibrated confidence "
        "that the events show in the order or number asked); "
        f'below {MIN_RELEVANCE} the page says "no good match" (`min_score` filters on it). Along an answer it '
        "never rises from one result to the next: each result shows the least of its own and those ranked "
        "above it, so it never contradicts the order shown",
    )
    events_relevance: float | None = Field(
        None,
        description="ranked by the time head (`tier` `time`): whether the video shows every event the query "
        "names, in any order or number, 0..1: its weakest event's relevance (`relevance` is this times the "
        f"head's confidence that they show as asked; below {MIN_RELEVANCE} an event does not show, and the "
        'page says so instead of "not as asked"); null for other tiers',
    )


class Timings(BaseModel):
    queue: float = Field(0.0, description="waiting for admission to a search thread (the model worker)")
    query_queue: float = Field(
        0.0,
        description="the query waiting in the batcher for a backbone call shared with other searches' queries",
    )
    query_embed: float = 0.0
    filter: float = 0.0
    faiss: float = 0.0
    spoken: float = Field(0.0, description="the spoken ranking (FTS5 over the cues) and its fusion")
    frame: float = 0.0
    selection: float = 0.0
    decode: float = 0.0
    heavy_queue: float = Field(
        0.0, description="the heavy tier's clips waiting in the batcher for a shared backbone call"
    )
    encode: float = 0.0
    head: float = 0.0
    moment: float = 0.0
    refine_queue: float = Field(
        0.0,
        description="the source frames of the top moment waiting in the batcher for a shared backbone call",
    )
    refine: float = 0.0
    total: float = Field(0.0, description="the whole search, queueing included")


class CacheStats(BaseModel):
    """Where stage 2's frames came from: ``hits`` from the frame cache; each miss from the index's
    frame store (``store_frames``) or decoded from the source video (``decoded_frames``)."""

    backend: str
    hits: int = Field(0, description="frames served by the frame cache (Redis or in-process)")
    misses: int = Field(0, description="frames not in the frame cache: store_frames + decoded_frames")
    store_frames: int = Field(0, description="frames read from the index's frame store")
    decoded_frames: int = Field(0, description="frames decoded from the source video files")
    errors: int = Field(0, description="frame-cache errors (the search read or decoded instead)")
    store_errors: int = Field(
        0, description="stored frames that could not be read (damaged); decoded from the source instead"
    )


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
                            "metadata": {
                                "title": "a red square appears",
                                "kind": "single",
                                "duration_s": 94.0,
                            },
                            "evidence": {
                                "frames": [{"frame_index": 1200, "timestamp_s": 40.0, "relevance": 0.52}],
                                "moment": {"start_s": 38.0, "end_s": 44.0, "source": "streaming"},
                            },
                        }
                    ],
                    "timings_ms": {"query_embed": 12.0, "faiss": 0.4, "total": 640.0},
                    "cache": {
                        "backend": "redis",
                        "hits": 300,
                        "misses": 20,
                        "store_frames": 20,
                        "decoded_frames": 0,
                    },
                    "warnings": [],
                }
            ]
        }
    )

    request_id: str
    query: str
    mode: SearchMode
    embedder: str
    rerank_embedder: str | None = Field(
        None,
        description="what stage 2 re-encoded with (qaslr: a streaming head; oneshot), or `time` when the time head ranked a query about order or count; null in indexed mode",
    )
    route: str | None = Field(
        None,
        description="which stage-2 tier ranked the answer and the measured signals why (e.g. the rerank "
        "head's router calling the query about time while the frame tier could not tell its first "
        "candidates apart); null in indexed mode",
    )
    shortlist: int
    frames: int
    results: list[SearchResult]
    timings_ms: Timings
    cache: CacheStats
    warnings: list[str] = Field(default_factory=list)
    group_by: Literal["video", "clip"] = "video"
    sources: Sources = Field(DEFAULT_SOURCES, description="what the ranking is by (seen, said, both)")
    page_start: int = Field(
        1,
        description="the rank of this page's first result in the whole ranking (page 2 of top_k 3 starts at 4)",
    )
    next_page_token: str | None = Field(
        None,
        description="send as `page_token` (with the same request; `top_k` may change) for the results that "
        "follow this page's last; null: the ranking ends here",
    )


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


class MediaTokenResponse(BaseModel):
    """A short-lived token for the media routes (``?token=``), for elements that cannot send headers."""

    token: str
    expires_at: int = Field(..., description="Unix time after which the token is refused")
    expires_in_s: int
