"""``GET /videos/{id}``: the stored metadata of one video (never its file path)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path

from core.errors import strip_paths
from service.auth import require_api_key
from service.errors import ApiError
from service.schemas import ErrorResponse, VideoResponse
from service.state import AppState, get_state

router = APIRouter(tags=["videos"], dependencies=[Depends(require_api_key)])


@router.get(
    "/videos/{video_id}",
    response_model=VideoResponse,
    summary="Metadata of one video",
    responses={404: {"model": ErrorResponse}, 401: {"model": ErrorResponse}, 503: {"model": ErrorResponse}},
)
async def get_video(
    video_id: str = Path(..., min_length=1, max_length=512, description="the video's id in the index"),
    state: AppState = Depends(get_state),
) -> VideoResponse:
    engine = state.require_engine()
    record = engine.index.video(video_id)
    if record is None:
        shown = video_id if len(video_id) <= 80 else video_id[:77] + "..."
        raise ApiError(404, "not_found", f"no video with id {shown!r} in the index")
    return VideoResponse(
        id=record.id,
        status=record.status,
        fps=record.fps,
        num_frames=record.num_frames,
        duration_s=record.duration_s,
        width=record.width,
        height=record.height,
        metadata=record.metadata,
        error=strip_paths(record.error) if record.error else None,  # no path, even from old indexes
    )
