"""Per-app state: settings, metrics, and the engine as it loads (the engine owns its runtime:
admission, search threads, the batcher; engine.runtime)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from fastapi import Request

from service.errors import ApiError
from service.metrics import Metrics
from service.settings import Settings

logger = logging.getLogger(__name__)


def _client_safe_reason(exc: BaseException) -> str:
    """Why loading failed, without paths or internals (the log has the details)."""
    name = type(exc).__name__
    if name == "ConfigurationError":  # our own messages: they name settings, never paths
        return str(exc)
    reasons = {
        "IndexMismatchError": "the index was built with a different model or head than the one configured",
        "IndexFormatError": "the index directory is missing, incomplete or corrupt",
        "BackboneNotFoundError": "the backbone weights could not be found",
    }
    return reasons.get(name, "loading the model or index failed") + " (details in the server log)"


class AppState:
    def __init__(self, settings: Settings, engine=None):
        self.settings = settings
        self.metrics = Metrics()
        self._engine_arg = engine
        self.engine = None
        self.status = "loading"
        self.error: str | None = None
        self._owns_engine = False
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._reload_lock = threading.Lock()

    # -- loading -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Load in the background (``/readyz`` is 503 until done). ``engine`` may be a loaded Engine
        (used as is, not closed at shutdown) or a callable returning one."""
        arg = self._engine_arg
        if arg is not None and not callable(arg):
            self._set_ready(arg, owned=False)
            return
        self._thread = threading.Thread(target=self._load, args=(arg,), name="qaslr-load", daemon=True)
        self._thread.start()

    def _load(self, factory: Callable | None) -> None:
        from engine.loader import load_engine

        try:
            if factory is not None:
                engine = factory()
            else:
                engine = load_engine(
                    self.settings.engine_config(), on_cache_error=lambda exc: self.metrics.redis_errors.inc()
                )
            if self.settings.warm_up and hasattr(engine, "warm_up"):
                engine.warm_up()  # before /readyz says ready: the first query costs what later ones do
        except BaseException as exc:
            logger.exception("loading the search engine failed")
            self.error = _client_safe_reason(exc)
            self.status = "failed"
            self._ready.set()
            return
        self._set_ready(engine, owned=factory is None)

    def _set_ready(self, engine, *, owned: bool) -> None:
        engine.observe(
            queue_depth=self.metrics.queue_depth.set,
            batch=self.metrics.observe_batch,
            cache_error=lambda exc: self.metrics.redis_errors.inc(),
        )
        self.engine = engine
        self._owns_engine = owned
        self.status = "ready"
        self.metrics.ready.set(1)
        self.metrics.random_weights.set(1 if engine.random_weights else 0)
        self._ready.set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def require_engine(self):
        if self.engine is not None:
            return self.engine
        if self.status == "failed":
            raise ApiError(503, "not_ready", f"the service failed to start: {self.error}")
        raise ApiError(
            503,
            "not_ready",
            "the model and index are still loading; retry shortly",
            headers={"Retry-After": "2"},
        )

    def reload_index(self) -> dict:
        """Swap in the index at the configured path (SIGHUP or ``POST /admin/reload-index``); one
        reload at a time. Raises (and keeps serving the old index) if the new one is unusable.

        A service whose start failed (a corrupt or missing index: ``/readyz`` says so, the process
        stays up rather than crash-looping) loads from scratch here, once the index is fixed."""
        with self._reload_lock:
            if self.engine is None and self.status == "failed" and self._engine_arg is None:
                logger.info("loading the search engine again after a failed start")
                self.status, self.error = "loading", None
                self._load(None)
                if self.engine is None:
                    raise RuntimeError(f"loading failed again: {self.error}")
                info = {k: self.engine.info.get(k) for k in ("index", "index_built_at", "videos")}
            else:
                engine = self.require_engine()
                info = engine.swap_index(retire_after_s=self.settings.request_timeout_s + 30)
        self.metrics.index_reloads.inc()
        return info

    def shutdown(self) -> None:
        """Close the engine this app loaded (its runtime with it); one handed in is its owner's."""
        if self.engine is not None and self._owns_engine:
            self.engine.close()


def get_state(request: Request) -> AppState:
    return request.app.state.qaslr
