"""``POST /search`` and ``POST /search/stream``: HTTP to one engine call and back. The request is
validated and resolved once (``Engine.resolve``), searched by ``Engine.search`` (the engine's runtime
admits it and runs it), and its answer shaped (the stream sends the stage-1 ranking at once, then each
stage-2 update, then the answer); an engine refusal becomes its status through one table
(``service.errors.ENGINE_REFUSALS``)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import Counter

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from service import images
from service.auth import require_api_key
from service.errors import ApiError, engine_refusal, error_body
from service.honesty import answer_warnings
from service.paging import InvalidPageToken, StalePageToken, decode_page_token, ranking_digest
from service.responses import to_response, to_result
from service.schemas import ErrorResponse, SearchRequest, SearchResponse
from service.state import AppState, get_state

logger = logging.getLogger(__name__)

router = APIRouter(tags=["search"], dependencies=[Depends(require_api_key)])

STREAM_UPDATE_CHUNK = 4  # stage-2 candidates encoded between two streamed updates
SEARCH_BODY_BYTES = images.MAX_IMAGE_BASE64_CHARS + 64 * 1024  # an image query and the rest

_RESPONSES = {
    401: {"model": ErrorResponse},
    413: {
        "model": ErrorResponse,
        "description": f"the request body is larger than {SEARCH_BODY_BYTES // 1024} KiB, or the image larger "
        f"than {images.MAX_IMAGE_BYTES // (1024 * 1024)} MiB or {images.MAX_IMAGE_PIXELS} pixels",
    },
    409: {"model": ErrorResponse, "description": "`page_token` belongs to another request or index"},
    415: {
        "model": ErrorResponse,
        "description": "`image` is not a picture in a supported format, or the body was not sent with "
        "`Content-Type: application/json` (e.g. a form, as `curl -d` sends without `-H`)",
    },
    422: {"model": ErrorResponse, "description": "invalid request, or a body that is not UTF-8 JSON"},
    429: {"model": ErrorResponse, "description": "the search queue is full"},
    503: {
        "model": ErrorResponse,
        "description": "not ready yet, the request deadline passed, or the model process restarts",
    },
    500: {"model": ErrorResponse, "description": "an unexpected server error (logged under the request id)"},
}


class _Prepared:
    def __init__(self, engine, params, digest: str, start: int = 1):
        self.engine, self.params, self.digest = engine, params, digest
        self.start = start  # the rank of the page's first result


async def _prepare(body: SearchRequest, state: AppState, *, update_chunk: int | None = None) -> _Prepared:
    """The engine and the request resolved once: the image decoded, the page token checked."""
    engine = state.require_engine()
    image, image_hash = None, None
    if body.image is not None:
        try:
            image, image_hash = await asyncio.to_thread(
                images.query_image, body.image, frame_size=engine.frame_size
            )
        except images.ImageError as exc:
            raise ApiError(exc.status, exc.code, str(exc), field="image") from None
    digest = ranking_digest(
        query=body.query,
        image=image_hash,
        filter=body.filter,
        mode=body.mode,
        shortlist=body.shortlist,
        min_score=body.min_score,
        group_by=body.group_by,
        index=engine.info.get("index_built_at"),
        sources=body.sources,
    )
    offset, skip, start = 0, 0, 1
    if body.page_token is not None:
        try:
            offset, skip, start = decode_page_token(body.page_token, digest)
        except InvalidPageToken as exc:
            raise ApiError(422, "validation_error", f"page_token: {exc}", field="page_token") from None
        except StalePageToken as exc:
            raise ApiError(409, "stale_page_token", f"page_token: {exc}", field="page_token") from None
    request = {
        **{
            name: getattr(body, name)
            for name in type(body).model_fields
            if name not in ("image", "page_token")
        },
        "image": image,
        "offset": offset,
        "skip": skip,
        "update_chunk": update_chunk,
    }
    try:
        # ``heavy`` above the shortlist re-encodes the whole shortlist (and the answer says so): the
        # schema cannot bound one field by another, so the API does not refuse what it documents
        params = engine.resolve(request, clamp_heavy=True)
    except Exception as exc:
        raise _refusal(exc, state) or exc from None
    return _Prepared(engine, params, digest, start)


def _refusal(exc: BaseException, state: AppState) -> ApiError | None:
    """The HTTP answer to an engine error (service.errors.ENGINE_REFUSALS; None: not one)."""
    engine = state.engine
    capacity = engine.admission.capacity if engine is not None else 0
    return engine_refusal(
        exc, capacity=capacity, timeout=state.settings.request_timeout_s,
        rejected=lambda reason: state.metrics.rejected.labels(reason).inc(),
    )  # fmt: skip


async def _watch_disconnect(request: Request, gone: threading.Event, poll_s: float = 0.1) -> None:
    """Set ``gone`` when the client closes the connection (until cancelled)."""
    while not gone.is_set():
        try:
            if await request.is_disconnected():
                gone.set()
                return
        except Exception:  # a server that cannot tell: rely on the deadline
            return
        await asyncio.sleep(poll_s)


@router.post(
    "/search",
    response_model=SearchResponse,
    summary="Two-stage video search by text, image, or both",
    description="Stage 1 ranks the index by q·v_j (FAISS); in `rerank` mode stage 2 re-scores the top "
    "`shortlist` candidates with query-aware frame selection and query-conditioned encoding (QASLR §A.4). "
    "`page_token` continues the ranking where the last page ended (page 2 starts at rank `top_k` + 1; the "
    "ranking is stage 2's order of each window of `shortlist` stage-1 candidates in turn, the same whatever `top_k`). `sources` chooses what is "
    "ranked: what is seen (the frames), what is said (the videos' subtitles: each result then carries its cue as "
    "`spoken`, with a snippet and its times), or both fused (the default; quoted phrases are then what is said).",
    responses=_RESPONSES,
)
async def search(
    body: SearchRequest, request: Request, state: AppState = Depends(get_state)
) -> SearchResponse:
    request.state.search_mode = body.mode
    prep = await _prepare(body, state)
    gone = threading.Event()
    watcher = asyncio.ensure_future(_watch_disconnect(request, gone))
    try:
        result = await prep.engine.search(prep.params, deadline=_deadline(state), cancelled=gone.is_set)
    except Exception as exc:
        gone.set()  # a refused or abandoned search stops what it still had queued
        refusal = _refusal(exc, state)
        if refusal is None:
            raise
        raise refusal from None
    finally:
        watcher.cancel()
    state.metrics.observe_search(result)
    response = to_response(
        result,
        request.state.request_id,
        cache_backend=prep.engine.cache.backend,
        digest=prep.digest,
        start=prep.start,
    )
    response.warnings += answer_warnings(prep.engine)  # the shapes-world backbone says so
    return response


@router.post(
    "/search/stream",
    summary="The same search, streamed as it settles (NDJSON)",
    description='One JSON object per line (`application/x-ndjson`): `{"type": "stage1", "results"}` '
    'as soon as FAISS answers; `{"type": "update", "results", "reranked", "tiers", "page_start"}` when the frame tier has '
    f"ranked the shortlist and each time the heavy tier has re-scored {STREAM_UPDATE_CHUNK} more candidates "
    "(results by video, best first, without timelines; `tiers` counts the results each tier has scored); "
    'then `{"type": "final", "response"}` with exactly what `POST /search` answers, or '
    '`{"type": "error", "error", "status"}`. Errors found before the first line (validation, '
    "queue full) are ordinary JSON error responses with their status.",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/x-ndjson": {}}, "description": "the stream of updates"},
        **_RESPONSES,
    },
)
async def search_stream(body: SearchRequest, request: Request, state: AppState = Depends(get_state)):
    request.state.search_mode = body.mode
    prep = await _prepare(body, state, update_chunk=STREAM_UPDATE_CHUNK)
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue = asyncio.Queue()
    started = time.perf_counter()
    p = prep.params
    updates = {"n": 0}

    def on_update(hits) -> None:  # on the search thread
        kind = "stage1" if updates["n"] == 0 else "update"
        updates["n"] += 1
        # the page's part of this window, filtered on the relevance the final answer filters on (the
        # engine gives each hit its relevance, non-increasing in rank, before each update)
        shown = [
            h for h in hits[p.skip : p.skip + p.top_k]
            if p.min_score is None or (h.relevance is not None and h.relevance >= p.min_score)
        ]  # fmt: skip
        message = {
            "type": kind,
            "results": [to_result(h).model_dump(mode="json") for h in shown],
            "reranked": sum(1 for h in hits if h.reranked),
            "tiers": dict(Counter(h.tier for h in hits if h.tier is not None)),
            "candidates": len(hits),
            "page_start": prep.start,  # the rank of the first result (pages continue the ranking)
            "elapsed_ms": round((time.perf_counter() - started) * 1e3, 3),
        }
        loop.call_soon_threadsafe(lines.put_nowait, message)

    gone = threading.Event()
    task = asyncio.ensure_future(
        prep.engine.search(prep.params, deadline=_deadline(state), on_update=on_update, cancelled=gone.is_set)
    )
    task.add_done_callback(_retrieve)  # a client that went away must not leave it unretrieved
    first = asyncio.ensure_future(lines.get())
    await asyncio.wait({task, first}, return_when=asyncio.FIRST_COMPLETED)
    if not first.done() and task.exception() is not None:  # refused before anything was sent
        first.cancel()
        refusal = _refusal(task.exception(), state)
        if refusal is None:
            raise task.exception()
        raise refusal from None
    request_id = request.state.request_id

    async def stream():
        pending = first
        try:
            async for line in _lines(pending):
                yield line
        finally:  # the stream ended or the client went away: stop waiting, and stop the search
            if not task.done():
                gone.set()
            for future in (first, *waiting):
                future.cancel()

    waiting: list = []

    async def _lines(pending):
        while True:
            if pending is None:
                pending = asyncio.ensure_future(lines.get())
                waiting.append(pending)
            await asyncio.wait({task, pending}, return_when=asyncio.FIRST_COMPLETED)
            if pending.done():
                yield json.dumps(pending.result()) + "\n"
                pending = None
                continue
            pending.cancel()
            while not lines.empty():
                yield json.dumps(lines.get_nowait()) + "\n"
            exc = task.exception()
            if exc is None:
                result = task.result()
                state.metrics.observe_search(result)
                response = to_response(
                    result,
                    request_id,
                    cache_backend=prep.engine.cache.backend,
                    digest=prep.digest,
                    start=prep.start,
                )
                response.warnings += answer_warnings(prep.engine)  # the shapes-world backbone says so
                yield json.dumps({"type": "final", "response": response.model_dump(mode="json")}) + "\n"
            else:
                refusal = _refusal(exc, state) or ApiError(
                    500, "internal_error", f"internal server error (request id {request_id})"
                )
                if refusal.status == 500:
                    logger.error("streamed search failed (request id %s)", request_id, exc_info=exc)
                body = error_body(refusal.code, refusal.message, field=refusal.field)
                yield json.dumps({"type": "error", "status": refusal.status, **body}) + "\n"
            return

    return StreamingResponse(
        stream(),
        media_type="application/x-ndjson",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _deadline(state: AppState) -> float:
    """This request's deadline, a ``time.monotonic()`` instant (QASLR_REQUEST_TIMEOUT_S from now)."""
    return time.monotonic() + state.settings.request_timeout_s


def _retrieve(task) -> None:
    if not task.cancelled():
        task.exception()
