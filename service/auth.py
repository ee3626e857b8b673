"""Optional API keys: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``, compared in constant
time against every configured key. No keys configured = authentication off."""

from __future__ import annotations

import hmac

from fastapi import Depends, Request

from service.errors import ApiError
from service.state import AppState, get_state


def _presented(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    key = request.headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


def key_matches(presented: str, keys: list[str]) -> bool:
    """Constant time in the presented key for each configured key; every key is compared."""
    given = presented.encode()
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(given, key.encode())
    return ok


async def require_api_key(request: Request, state: AppState = Depends(get_state)) -> None:
    keys = state.settings.api_keys
    if not keys:
        return
    presented = _presented(request)
    if presented is None or not key_matches(presented, keys):
        raise ApiError(
            401,
            "unauthorized",
            "missing or invalid API key: send `Authorization: Bearer <key>` or `X-API-Key: <key>`",
            headers={"WWW-Authenticate": "Bearer"},
        )


async def require_media_access(request: Request, state: AppState = Depends(get_state)) -> None:
    """The media routes (thumbnails, video files) accept the API key as on every route, or a media
    token in the ``token`` query parameter (``POST /media-token``), since ``<img>`` and ``<video>``
    elements cannot send headers. A key is never accepted in a URL."""
    from service.media import media_token_valid

    keys = state.settings.api_keys
    if not keys:
        return
    presented = _presented(request)
    if presented is not None and key_matches(presented, keys):
        return
    token = request.query_params.get("token")
    if token and media_token_valid(token, keys):
        return
    raise ApiError(
        401,
        "unauthorized",
        "missing or invalid API key or media token: send `Authorization: Bearer <key>`, `X-API-Key: <key>`, "
        "or `?token=` from POST /media-token",
        headers={"WWW-Authenticate": "Bearer"},
    )
