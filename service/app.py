"""The FastAPI application factory.

    app = create_app(settings)            # loads model + index in the background at startup
    app = create_app(settings, engine=e)  # reuse a loaded Engine (or pass a callable returning one)

Routes: ``GET /`` (the search page), ``POST /search``, ``POST /search/stream``, ``GET /videos/{id}``,
``GET /videos/{id}/frames/{n}``, ``GET /videos/{id}/media``, ``POST /media-token``, ``GET /healthz``, ``GET /readyz``, ``GET /metrics``,
``POST /admin/reload-index`` (also on SIGHUP), and the OpenAPI docs at ``/docs`` and ``/redoc``
(from local assets, service/docs.py). ``serve(settings)`` runs the app under uvicorn.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from core.config import MAX_BODY_BYTES, app_version
from service.docs import install_docs
from service.errors import BodyLimitMiddleware, RequestIdMiddleware, install_error_handlers
from service.routers import admin, health, media, page, search, videos
from service.settings import Settings
from service.state import AppState

logger = logging.getLogger(__name__)

DESCRIPTION = """Long-video retrieval with Query-Aware Streaming Latent Reasoning (QASLR).

* `POST /search` — stage 1: FAISS over query-independent video embeddings; stage 2 (`mode=rerank`):
  query-aware frame selection and query-conditioned encoding of the shortlist (paper §A.4).
* Every response carries `X-Request-ID`; errors are `{"error": {"code", "message", "field"}, "request_id"}`.
* When API keys are configured, send `Authorization: Bearer <key>` or `X-API-Key: <key>`.
* Request bodies are limited to 64 KiB (413 beyond); search bodies, which may carry an image query, to
  about 5.4 MiB (the image itself to 4 MiB).
* `POST /search/stream`: the same search as NDJSON, the stage-1 ranking first, then each stage-2 update.
* `GET /videos/{id}/frames/{n}` (JPEG thumbnails) and `GET /videos/{id}/media` (the file, with range
  requests) also accept `?token=` from `POST /media-token`, for `<img>` and `<video>` elements.
* `GET /` is the search page.
"""


class MetricsMiddleware:
    """Counts and times every HTTP request by route template, search mode and status."""

    def __init__(self, app, state: AppState):
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = {"code": 500}

        async def capture(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            mode = (scope.get("state") or {}).get("search_mode", "")
            labels = (path, mode, str(status["code"]))
            m = self.state.metrics
            m.requests.labels(*labels).inc()
            m.latency.labels(*labels).observe(time.perf_counter() - t0)


def create_app(settings: Settings | None = None, *, engine=None) -> FastAPI:
    settings = settings or Settings()
    state = AppState(settings, engine)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state.start()
        hup = _install_sighup(state)
        try:
            yield
        finally:
            if hup is not None:
                hup()
            state.shutdown()

    app = FastAPI(
        title="QASLR long-video search",
        version=app_version(),
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served from local assets by install_docs (no CDN)
        redoc_url=None,
    )
    app.state.qaslr = state
    install_error_handlers(app)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=MAX_BODY_BYTES,
        limits={"/search": search.SEARCH_BODY_BYTES, "/search/stream": search.SEARCH_BODY_BYTES},
    )
    app.add_middleware(MetricsMiddleware, state=state)
    app.add_middleware(RequestIdMiddleware)  # added last = outermost: ids even on 500s
    app.include_router(health.router)
    app.include_router(search.router)
    app.include_router(media.router)
    app.include_router(videos.router)
    app.include_router(admin.router)
    app.include_router(page.router)
    app.mount("/static", page.static_files(), name="static")
    install_docs(app)
    _state_server_bounds(app, settings)
    return app


def _state_server_bounds(app: FastAPI, settings: Settings) -> None:
    """Write this server's own bound on ``frames`` (its max_frames) into the OpenAPI document, so
    that the document never calls a request valid that the server refuses."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = build()
            frames = schema["components"]["schemas"]["SearchRequest"]["properties"]["frames"]
            for option in frames.get("anyOf", [frames]):
                if option.get("type") == "integer":
                    option["maximum"] = settings.max_frames
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


def _install_sighup(state: AppState):
    """SIGHUP = reload the index (zero-downtime upgrades, deploy/README.md). Only possible when the
    app runs on the main thread's event loop (as under `qaslr serve`); returns an uninstaller."""
    import asyncio
    import signal

    def on_hup() -> None:
        def reload() -> None:
            try:
                info = state.reload_index()
                logger.info("SIGHUP: now serving index %s", info)
            except Exception:
                logger.exception("SIGHUP: index reload refused; still serving the previous index")

        threading.Thread(target=reload, name="qaslr-reload", daemon=True).start()

    try:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, on_hup)
    except (RuntimeError, ValueError, NotImplementedError, AttributeError):
        logger.debug("SIGHUP reload not installed (not on the main thread)")
        return None
    return lambda: loop.remove_signal_handler(signal.SIGHUP)


def serve(settings: Settings | None = None, *, engine=None) -> None:
    """Run the API under uvicorn until interrupted (``qaslr serve`` and ``qaslr demo`` call this)."""
    import signal

    import uvicorn

    from core.logs import redact_output

    settings = settings or Settings()
    restore_output = redact_output(redact_logs(settings))  # native libraries' output too
    app = create_app(settings, engine=engine)
    logger.info("serving on http://%s:%d (docs at /docs)", settings.host, settings.port)
    # SIGTERM: uvicorn stops accepting, lets in-flight searches finish (at most their deadline) and
    # shuts down; then it re-raises the signal, which this handler turns into a normal exit
    previous = _set_handler(signal.SIGTERM, _exit_quietly)
    try:
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level.lower(),
            access_log=False,
            log_config=None,  # uvicorn's loggers go through the (redacting) root handlers
            timeout_graceful_shutdown=int(settings.request_timeout_s) + 5,
        )
    except _GracefulExit:
        logger.info("stopped by SIGTERM after draining in-flight requests")
    finally:
        _set_handler(signal.SIGTERM, previous)
        restore_output()


class _GracefulExit(SystemExit):
    pass


def _exit_quietly(signum, frame) -> None:
    raise _GracefulExit(0)


def _set_handler(signum, handler):
    import signal

    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signum, handler)


def redact_logs(settings: Settings):
    """From here on, the process's log names no filesystem path and no key: API keys and the Redis
    URL's password become ``***``, and paths keep only their last component (core.logs)."""
    from urllib.parse import urlsplit

    from core.logs import Redactor, configure_logging

    secrets = list(settings.api_keys) + list(settings.admin_keys)
    if settings.redis_url:
        password = urlsplit(settings.redis_url).password
        if password:
            secrets.append(password)
    paths = [str(p) for p in (settings.index, settings.head) if p]
    if settings.model and Path(settings.model).exists():  # a local checkpoint directory (not a hub id)
        paths.append(str(settings.model))
    paths += [str(Path(p).resolve()) for p in paths]
    redactor = Redactor(secrets, paths)
    configure_logging(settings.log_level, redact=redactor)
    return redactor
