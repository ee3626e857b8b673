"""A search request, resolved: every default filled in from the searcher's config and every bound
checked, with :class:`InvalidRequest` naming the field that is wrong (HTTP 422)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.config import (
    DEFAULT_HEAVY,
    DEFAULT_HEAVY_MARGIN,
    DEFAULT_SOURCES,
    DEFAULT_TOP_K,
    MAX_QUERY_CHARS,
    MAX_SEED,
    MAX_SHORTLIST,
    MAX_TOP_K,
    QUERY_BLANKS,
    Fusion,
    SearchMode,
    Sources,
)
from engine.config import EngineConfig
from engine.errors import InvalidRequest

__all__ = ["ALWAYS_HEAVY", "SearchParams", "SearcherConfig", "resolve_request", "unknown_filter_keys"]

ALWAYS_HEAVY = 2.0  # a heavy_margin no two cosines can reach: the heavy tier always runs


@dataclass(frozen=True)
class SearcherConfig:
    """The searcher's part of an :class:`engine.config.EngineConfig` (whose declaration holds the
    defaults: :meth:`from_engine_config`), and the bounds and chunking that are no settings."""

    default_shortlist: int  # R (paper Table 4)
    default_frames: int  # K'
    max_frames: int  # bound on K' (paper K <= 128)
    temperature: float  # Q-Frame temperature, in units of the scores' spread
    seed: int  # default selection seed (combined with the query and each candidate's id)
    exit_threshold: float | None  # default early-exit threshold (None: full streaming)
    exit_min_steps: int  # t_min
    decode_workers: int  # threads decoding cache misses, one video each
    heavy: int  # the cascade: candidates the heavy tier re-encodes
    heavy_margin: float  # ... when the frame tier's top two lie within this
    refine_moments: int  # results whose moments are refined at the source's rate
    frame_aggregate: str  # the frame tier's score (engine.tiers.frame)
    fusion: str  # how sources=both fuses the rankings (engine.spoken)
    tie_margin: float = 0.0  # a query about time: the frame tier's near-ties the moment head reranks
    head_candidates: int = 6  # ... at most this many
    keep_margin: float = 0.0  # ... its order standing where its evidence is stronger by this
    head_selection_weight: float = 0.0  # ... its score plus this times its best frame under q_sel
    head_frame_weight: float = 0.0  # ... and this times its best frame under q
    head_reversal_weight: float = 0.0  # ... and this times q · z_T less its moments' backwards reading
    order_event_weight: float = 0.0  # an order a head that reads words answers: this times its weaker event
    order_windows: str = "query"  # ... its moments cut where its events show ("events") or by q_sel ("query")
    max_top_k: int = MAX_TOP_K
    max_shortlist: int = MAX_SHORTLIST
    encode_chunk: int = 16  # candidates whose evidence banks are held at once (memory bound)
    oneshot_moments: int = 0  # one-shot reads each candidate's top N moments as temporal pairs (0: Q-Frame)

    @classmethod
    def from_engine_config(cls, config=None) -> SearcherConfig:
        """The searcher's part of ``config`` (default: the declared defaults)."""
        config = config if config is not None else EngineConfig()
        return cls(
            default_shortlist=config.default_shortlist,
            default_frames=config.default_frames,
            max_frames=config.max_frames,
            temperature=config.selection_temperature,
            seed=config.selection_seed,
            decode_workers=config.decode_workers,
            exit_threshold=config.exit_threshold,
            exit_min_steps=config.exit_min_steps,
            heavy=config.heavy,
            heavy_margin=config.heavy_margin,
            refine_moments=config.refine_moments,
            frame_aggregate=config.frame_aggregate,
            fusion=Fusion(config.fusion),
            tie_margin=config.tie_margin,
            head_candidates=config.head_candidates,
            keep_margin=config.keep_margin,
            head_selection_weight=config.head_selection_weight,
            head_frame_weight=config.head_frame_weight,
            head_reversal_weight=config.head_reversal_weight,
            order_event_weight=config.order_event_weight,
            order_windows=config.order_windows,
            oneshot_moments=config.oneshot_moments,
        )


@dataclass
class SearchParams:
    """A resolved request (defaults filled in and bounds checked)."""

    query: str | None
    top_k: int = DEFAULT_TOP_K
    shortlist: int | None = None
    mode: str = SearchMode.RERANK
    heavy: int = DEFAULT_HEAVY  # the cascade: how many of the frame tier's top the heavy tier re-encodes
    heavy_margin: float = DEFAULT_HEAVY_MARGIN  # ... when its first two scores lie within this
    frames: int | None = None
    filter: dict[str, Any] | None = None
    include_evidence: bool = True
    seed: int | None = None
    exit_threshold: float | None = None
    image: np.ndarray | None = (
        None  # an image query [h, w, 3] uint8 at the working size (with query text or alone)
    )
    min_score: float | None = None  # results scoring below are left out
    group_by: str = "video"  # "video": one result per video; "clip": moments, several per video
    offset: int = 0  # the first stage-1 rank - 1 of the page's first window of R candidates
    skip: int = 0  # results of that window's ranking that earlier pages showed
    update_chunk: int | None = None  # stage-2 candidates per progress update (default: encode_chunk)
    sources: str = DEFAULT_SOURCES  # what is ranked: seen, said or both (engine.spoken)
    notes: list[str] = field(default_factory=list)  # said back to the caller as warnings


def resolve_request(
    request, cfg: SearcherConfig, *, can_exit: bool = False, clamp_heavy: bool = False
) -> SearchParams:
    """Defaults and bounds of a request-like object (a SearchRequest, SearchParams, or dict), from
    ``cfg``; ``can_exit``: the heavy tier streams and has an early-exit gate; ``clamp_heavy``: a
    ``heavy`` above the shortlist re-encodes the whole shortlist (and the answer says so) instead of
    being refused (the API documents it so: its schema cannot bound one field by another)."""
    get = request.get if isinstance(request, dict) else (lambda k, d=None: getattr(request, k, d))
    query, image = _query_and_image(get)  # checked in a fixed order: the first bad field is named
    min_score = get("min_score")
    if min_score is not None and not -1.0 <= float(min_score) <= 1.0:
        raise InvalidRequest("min_score", "must be between -1 and 1")
    group_by = get("group_by", "video") or "video"
    if group_by not in ("video", "clip"):
        raise InvalidRequest("group_by", "must be 'video' or 'clip'")
    notes = list(get("notes", None) or [])  # a resolved SearchParams keeps what it was told
    top_k, shortlist, offset, skip = _window(get, cfg)
    mode, heavy, heavy_margin = _cascade(get, cfg, shortlist, notes if clamp_heavy else None)
    frames = get("frames")
    frames = cfg.default_frames if frames is None else int(frames)
    if not 1 <= frames <= cfg.max_frames:
        raise InvalidRequest("frames", f"must be between 1 and {cfg.max_frames} (this server's max_frames)")
    flt = get("filter")
    if flt is not None and not isinstance(flt, dict):
        raise InvalidRequest("filter", "must be an object of field conditions")
    include_evidence = get("include_evidence", True)
    seed = get("seed")
    if seed is not None and not 0 <= int(seed) <= MAX_SEED:
        raise InvalidRequest("seed", f"must be between 0 and {MAX_SEED}")
    exit_threshold = _exit_threshold(get("exit_threshold"), cfg, mode, can_exit, notes)
    return SearchParams(
        sources=_sources(get, query),
        query=query,
        top_k=top_k,
        shortlist=shortlist,
        mode=mode,
        heavy=heavy,
        heavy_margin=heavy_margin,
        frames=frames,
        filter=flt or None,
        include_evidence=True if include_evidence is None else bool(include_evidence),
        seed=cfg.seed if seed is None else int(seed),
        exit_threshold=exit_threshold,
        image=image,
        min_score=None if min_score is None else float(min_score),
        group_by=group_by,
        offset=offset,
        skip=skip,
        update_chunk=get("update_chunk"),
        notes=notes,
    )


def _query_and_image(get) -> tuple[str | None, np.ndarray | None]:
    query = get("query")
    image = get("image")
    if image is not None and not (isinstance(image, np.ndarray) and image.ndim == 3 and image.shape[2] == 3):
        raise InvalidRequest("image", "must be decoded pixels [h, w, 3]")
    if query is None and image is not None:
        return None, image  # an image query without words
    if not isinstance(query, str) or not query.strip(QUERY_BLANKS):
        raise InvalidRequest("query", "must be a non-empty string (or send an image)")
    query = query.strip(QUERY_BLANKS)
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidRequest("query", f"must be at most {MAX_QUERY_CHARS} characters")
    return query, image


def _window(get, cfg: SearcherConfig) -> tuple[int, int, int, int]:
    """(top_k, shortlist R, offset, skip): the page the request asks for. R does not depend on
    ``top_k``: the ranking is the same whatever the page size, and pages cut it (engine.search.searcher)."""
    offset = int(get("offset", 0) or 0)
    skip = int(get("skip", 0) or 0)
    if offset < 0 or skip < 0:
        raise InvalidRequest("page_token", "must not start before the first result")
    top_k = int(get("top_k", DEFAULT_TOP_K) or DEFAULT_TOP_K)
    if not 1 <= top_k <= cfg.max_top_k:
        raise InvalidRequest("top_k", f"must be between 1 and {cfg.max_top_k}")
    shortlist = get("shortlist")
    # R is the request's or the server's, whatever top_k: a page larger than R spans several windows
    shortlist = cfg.default_shortlist if shortlist is None else int(shortlist)
    if not 1 <= shortlist <= cfg.max_shortlist:
        raise InvalidRequest("shortlist", f"must be between 1 and {cfg.max_shortlist}")
    return top_k, shortlist, offset, skip


def _cascade(get, cfg: SearcherConfig, shortlist: int, clamp_notes: list | None):
    """(mode, heavy, heavy_margin). ``clamp_notes`` (not None): a ``heavy`` above the shortlist is
    lowered to it, with a note there, instead of being refused."""
    mode = get("mode", SearchMode.RERANK) or SearchMode.RERANK
    if mode not in tuple(SearchMode):
        raise InvalidRequest("mode", "must be one of " + ", ".join(f"'{m}'" for m in SearchMode))
    mode = SearchMode(mode)
    heavy = get("heavy")
    asked_heavy = heavy is not None  # a request that names its depth gets it, whatever the margin
    heavy = min(cfg.heavy, shortlist) if heavy is None else int(heavy)
    if clamp_notes is not None and heavy > shortlist:
        clamp_notes.insert(
            0,
            f"heavy {heavy} is more than the shortlist ({shortlist}): the heavy tier re-encodes all {shortlist}",
        )
        heavy = shortlist
    if not 0 <= heavy <= shortlist:
        raise InvalidRequest("heavy", f"must be between 0 and the shortlist ({shortlist})")
    heavy_margin = get("heavy_margin")
    if heavy_margin is None:
        heavy_margin = ALWAYS_HEAVY if asked_heavy else cfg.heavy_margin
    heavy_margin = float(heavy_margin)
    if not 0 <= heavy_margin <= ALWAYS_HEAVY:
        raise InvalidRequest("heavy_margin", "must be between 0 and 2 (2: always run the heavy tier)")
    return mode, heavy, heavy_margin


def _exit_threshold(exit_threshold, cfg: SearcherConfig, mode, can_exit: bool, notes: list) -> float | None:
    if exit_threshold is None:
        return cfg.exit_threshold if can_exit else None  # the server's default (the engine checked the gate)
    exit_threshold = float(exit_threshold)
    if not 0 < exit_threshold <= 1:
        raise InvalidRequest("exit_threshold", "must be in (0, 1]")
    if can_exit:
        return exit_threshold
    if mode == SearchMode.RERANK:
        notes.append("exit_threshold ignored: this server has no early-exit gate; streamed in full")
    return None


def _sources(get, query: str | None) -> Sources:
    sources = get("sources", DEFAULT_SOURCES) or DEFAULT_SOURCES
    if sources not in tuple(Sources):
        raise InvalidRequest("sources", "must be one of " + ", ".join(f"'{s}'" for s in Sources))
    sources = Sources(sources)
    if sources == Sources.SAID and query is None:
        raise InvalidRequest(
            "sources", "'said' searches what is said: it needs query text (an image says nothing)"
        )
    return sources


def unknown_filter_keys(index, flt: dict) -> list[str]:
    """A filter on a key no video of the index has matches nothing: say so, and name the keys
    the index knows (its videos' metadata keys and the built-in fields)."""
    known_of = getattr(index, "metadata_keys", None)
    if known_of is None:
        return []
    known = known_of(builtin=True)
    unknown = sorted(k for k in flt if k not in known)
    if not unknown:
        return []
    names = ", ".join(f"'{k}'" for k in unknown)
    return [
        f"filter: no video of this index has {names} (so nothing matches); known keys: {', '.join(known)}"
    ]
