"""What the search page shows: ``GET /videos/{id}/frames/{frame_index}`` (a JPEG thumbnail through
the frame cache), ``GET /videos/{id}/media`` (the indexed file, with range requests) and
``POST /media-token`` (a short-lived token for ``<img>``/``<video>``, which cannot send headers).

Ids are looked up in the index and nothing else: an id that is not there (``../``, encoded slashes,
NUL, anything) is a 404, and no client input ever becomes a path.
"""

from __future__ import annotations

import asyncio
import threading
from email.utils import formatdate

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response, StreamingResponse

from service import media
from service.auth import require_api_key, require_media_access
from service.errors import ApiError
from service.schemas import ErrorResponse, MediaTokenResponse
from service.state import AppState, get_state

router = APIRouter(tags=["media"])

_THUMBNAILS_AT_ONCE = threading.BoundedSemaphore(2)  # decoding must not starve the model worker's CPU
_ERRORS = {
    401: {"model": ErrorResponse, "description": "no valid API key or media token"},
    404: {"model": ErrorResponse, "description": "no indexed video with this id, or no such frame"},
    503: {"model": ErrorResponse},
}
VideoId = Path(
    ...,
    min_length=1,
    max_length=512,
    description="the video's id in the index (may contain `/`, as ids made from relative paths do)",
)


def _shown(video_id: str) -> str:
    return repr(video_id if len(video_id) <= 80 else video_id[:77] + "...")


def _record(state: AppState, video_id: str):
    engine = state.require_engine()
    try:
        return engine, media.servable_record(engine.index, video_id)
    except media.NotServable:
        raise ApiError(404, "not_found", f"no indexed video with id {_shown(video_id)}") from None


@router.post(
    "/media-token",
    response_model=MediaTokenResponse,
    summary="A short-lived token for thumbnails and video files",
    description="Send the API key as on `/search`; the token goes into the `token` query parameter of "
    "`/videos/{id}/frames/...` and `/videos/{id}/media` (for `<img>` and `<video>` elements). It is valid "
    f"for {media.MEDIA_TOKEN_TTL_S // 60} minutes, for those routes only.",
    responses={401: {"model": ErrorResponse}},
    dependencies=[Depends(require_api_key)],
)
async def media_token(state: AppState = Depends(get_state)) -> MediaTokenResponse:
    token, expiry = media.issue_media_token(state.settings.api_keys)
    return MediaTokenResponse(token=token, expires_at=expiry, expires_in_s=media.MEDIA_TOKEN_TTL_S)


@router.get(
    "/videos/{video_id:path}/frames/{frame_index}",
    summary="One frame as a JPEG thumbnail",
    description="The frame at the working resolution stage 2 sees, from the frame cache (decoded on a "
    "miss), shrunk to fit `size` x `size` (never enlarged).",
    response_class=Response,
    responses={200: {"content": {"image/jpeg": {}}, "description": "the thumbnail"}, **_ERRORS},
    dependencies=[Depends(require_media_access)],
)
async def frame_thumbnail(
    video_id: str = VideoId,
    frame_index: int = Path(..., ge=0, le=2**31 - 1, description="index of the frame in the source video"),
    size: int = Query(
        media.DEFAULT_THUMB_SIZE,
        ge=media.MIN_THUMB_SIZE,
        le=media.MAX_THUMB_SIZE,
        description="the thumbnail's longer side is at most this many pixels",
    ),
    token: str | None = Query(None, max_length=200, description="a media token (POST /media-token)"),
    state: AppState = Depends(get_state),
) -> Response:
    engine, record = _record(state, video_id)
    if frame_index >= int(record.num_frames):
        raise ApiError(
            404,
            "not_found",
            f"video {_shown(video_id)} has {record.num_frames} frames (0-{record.num_frames - 1})",
        )

    def render() -> bytes:
        with _THUMBNAILS_AT_ONCE:
            return media.thumbnail_jpeg(engine.searcher.frames, record, frame_index, size)

    try:
        jpeg = await asyncio.to_thread(render)
    except media.FrameUnreadable:
        raise ApiError(
            404, "frame_unreadable", f"frame {frame_index} of {_shown(video_id)} could not be read"
        ) from None
    return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"})


@router.get(
    "/videos/{video_id:path}/media",
    summary="The indexed video, in a format browsers play (range requests supported)",
    description="The source file of an indexed video, found by its id, when browsers play it (H.264 in MP4, "
    "VP8/VP9 in WebM); otherwise a browser-safe H.264/MP4 preview of it, made on the first request (which "
    "waits for it; `indexer previews` makes them ahead of time) and kept in the index. `Range: bytes=a-b` "
    "(one range) gets 206 with those bytes; a range outside the file gets 416; several ranges get the whole "
    "file. `ETag`/`Last-Modified` are sent; a matching `If-None-Match` gets 304.",
    response_class=Response,
    responses={
        200: {"content": {"video/mp4": {}, "video/webm": {}}, "description": "the whole file"},
        206: {"content": {"video/mp4": {}, "video/webm": {}}, "description": "the requested byte range"},
        304: {"description": "the file is unchanged (If-None-Match)"},
        416: {"model": ErrorResponse, "description": "the range selects no byte of the file"},
        422: {
            "model": ErrorResponse,
            "description": "browsers cannot play the source and no playable preview could be made (the "
            "message says why); its thumbnails and times still apply",
        },
        **_ERRORS,
    },
    dependencies=[Depends(require_media_access)],
)
async def video_media(
    request: Request,
    video_id: str = VideoId,
    token: str | None = Query(None, max_length=200, description="a media token (POST /media-token)"),
    state: AppState = Depends(get_state),
) -> Response:
    engine, record = _record(state, video_id)

    try:
        served = await asyncio.to_thread(media.playable_file, engine.index.directory, record)
    except media.FrameUnreadable:
        raise ApiError(
            404, "media_unreadable", f"the file of {_shown(video_id)} is no longer readable"
        ) from None
    except media.NoPreview as exc:
        raise ApiError(422, "media_unplayable", str(exc)) from None
    size = served.size
    headers = {
        "Accept-Ranges": "bytes",
        "Cache-Control": "private, max-age=3600",
        "Content-Disposition": "inline",
        "ETag": served.etag,
        "Last-Modified": formatdate(served.last_modified, usegmt=True),
    }
    if served.etag in (request.headers.get("if-none-match") or "").replace(" ", "").split(","):
        return Response(status_code=304, headers=headers)
    try:
        wanted = media.parse_range(request.headers.get("range"), size)
    except media.RangeNotSatisfiable as exc:
        raise ApiError(
            416, "range_not_satisfiable", str(exc), headers={"Content-Range": f"bytes */{size}"}
        ) from None
    kind = served.media_type
    if wanted is None:
        headers["Content-Length"] = str(size)
        return StreamingResponse(media.read_chunks(served.path, 0, size), media_type=kind, headers=headers)
    headers.update({"Content-Length": str(wanted.length), "Content-Range": wanted.content_range})
    return StreamingResponse(
        media.read_chunks(served.path, wanted.start, wanted.length),
        status_code=206,
        media_type=kind,
        headers=headers,
    )
