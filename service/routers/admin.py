"""Operations that change what the service serves (API key required when keys are configured)."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Depends

from service.auth import require_admin_key
from service.errors import ApiError
from service.schemas import ErrorResponse
from service.state import AppState, get_state

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/admin", tags=["operations"], dependencies=[Depends(require_admin_key)])


@router.post(
    "/reload-index",
    summary="Hot-swap to the index now at the configured path",
    description="Re-opens the configured index path (follow a symlink you switched with `indexer publish`), "
    "checks its manifest against the loaded model and head, and swaps it in. It takes an admin key "
    "(QASLR_ADMIN_KEYS; without one configured, only a server bound to loopback answers it). Searches already running finish "
    "on the old index; an unusable new index is refused with 409 and the old one keeps serving. SIGHUP does "
    "the same.",
    responses={
        200: {
            "content": {"application/json": {"example": {"index": "v2", "built_at": "...", "videos": 1200}}}
        },
        401: {
            "model": ErrorResponse,
            "description": "missing or invalid admin key (an API key does not open it)",
        },
        403: {
            "model": ErrorResponse,
            "description": "no admin key is configured and the server is bound beyond loopback",
        },
        409: {"model": ErrorResponse, "description": "the new index does not match the model, or is broken"},
        503: {"model": ErrorResponse},
    },
)
async def reload_index(state: AppState = Depends(get_state)) -> dict:
    if state.status != "failed":  # a failed start may be retried here; "loading" is a 503
        state.require_engine()
    try:
        return await asyncio.to_thread(state.reload_index)
    except Exception as exc:
        logger.exception("index reload refused; still serving the previous index")
        reason = {
            "IndexMismatchError": "the new index was built with a different model or head than the one loaded",
            "IndexFormatError": "the new index directory is missing, incomplete or corrupt",
            "ConfigurationError": "the new index does not fit the loaded model",
        }.get(type(exc).__name__, "the new index could not be opened")
        raise ApiError(409, "index_refused", f"{reason}; still serving the previous index") from None
