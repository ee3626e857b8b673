"""Optional API keys: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``, compared in constant
time against every configured key. No keys configured = authentication off, which only a server on
loopback gets by default: one bound beyond it without keys refuses to start unless told
``allow_unprotected`` (:func:`unprotected_problem`, as Redis's protected mode).

The admin routes (``/admin/*``) take keys of their own (``admin_keys``; an API key does not open
them). Without admin keys they answer only a server bound to loopback (with the API key, when there
are API keys), and are refused (403) beyond it (:func:`require_admin_key`)."""

from __future__ import annotations

import hmac
import ipaddress

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


def _require_key(request: Request, keys: list[str], message: str) -> None:
    """A 401 with ``message`` unless the request presents one of ``keys``."""
    presented = _presented(request)
    if presented is None or not key_matches(presented, keys):
        raise ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


async def require_api_key(request: Request, state: AppState = Depends(get_state)) -> None:
    keys = state.settings.api_keys
    if keys:
        _require_key(request, keys, "missing or invalid API key: send `Authorization: Bearer <key>` or "
                     "`X-API-Key: <key>`")  # fmt: skip


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


def is_loopback(host: str) -> bool:
    """Whether a bind address reaches only this machine (127.0.0.0/8, ::1, localhost)."""
    host = (host or "").strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unprotected_problem(settings) -> str | None:
    """Why a server must not start as configured (None: it may): bound beyond loopback with no API
    keys, and not told ``allow_unprotected``."""
    if is_loopback(settings.host) or settings.api_keys or settings.allow_unprotected:
        return None
    return (
        f"refusing to serve on {settings.host} without API keys: anyone who reaches the port could search "
        "and watch every video. Set QASLR_API_KEYS (or --api-key), bind 127.0.0.1, or start it unprotected "
        "on purpose with --allow-unprotected (QASLR_ALLOW_UNPROTECTED=1)"
    )


async def require_admin_key(request: Request, state: AppState = Depends(get_state)) -> None:
    """The admin routes: an admin key, or (no admin keys configured) a loopback server's API access."""
    settings = state.settings
    admin = settings.admin_keys
    if not admin:
        if not is_loopback(settings.host):
            raise ApiError(
                403,
                "admin_disabled",
                f"the admin routes are off on a server bound to {settings.host}: configure an admin key "
                "(QASLR_ADMIN_KEYS or --admin-key) and send it as `X-API-Key: <admin key>`, or send the "
                "server SIGHUP to reload the index",
            )
        await require_api_key(request, state)
        return
    _require_key(request, admin, "missing or invalid admin key: the admin routes take an admin key "
                 "(QASLR_ADMIN_KEYS), sent as `Authorization: Bearer <key>` or `X-API-Key: <key>`; an API key "
                 "does not open them")  # fmt: skip
