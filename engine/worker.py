"""One model worker thread behind a bounded queue, so model work never blocks the event loop.

``capacity = queue_size + 1`` jobs may be admitted at once (one running, ``queue_size`` waiting); a
job beyond that is refused with :class:`QueueFull` (HTTP 429). A caller that gives up at its
deadline gets :class:`WorkerTimeout` (HTTP 503); its job, if it has not started, is skipped when
its turn comes, and a running job sees the same deadline between search stages.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class QueueFull(RuntimeError):
    pass


class WorkerTimeout(TimeoutError):
    pass


class _Abandoned(Exception):
    pass


class ModelWorker:
    def __init__(self, queue_size: int, *, on_depth: Callable[[int], None] | None = None):
        self.capacity = int(queue_size) + 1
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qaslr-model")
        self._pending = 0
        self._lock = threading.Lock()
        self._on_depth = on_depth

    @property
    def depth(self) -> int:
        """Jobs admitted and not finished (running + waiting)."""
        return self._pending

    def _changed(self, delta: int) -> None:
        with self._lock:
            self._pending += delta
            depth = self._pending
        if self._on_depth is not None:
            self._on_depth(depth)

    async def run(self, fn: Callable[[], T], *, timeout: float) -> T:
        with self._lock:
            if self._pending >= self.capacity:
                raise QueueFull(f"{self._pending} searches admitted (capacity {self.capacity})")
            self._pending += 1
        if self._on_depth is not None:
            self._on_depth(self._pending)
        abandoned = threading.Event()

        def job():
            try:
                if abandoned.is_set():
                    raise _Abandoned()
                return fn()
            finally:
                self._changed(-1)

        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, job)
        except BaseException:
            self._changed(-1)
            raise
        future.add_done_callback(_retrieve)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=max(timeout, 0.0))
        except TimeoutError as exc:
            abandoned.set()
            raise WorkerTimeout() from exc

    def call_soon(self, fn: Callable[[], T]):
        """Run ``fn`` on the worker thread outside the queue accounting (tests, warm-up); returns a
        concurrent.futures.Future."""
        return self._executor.submit(fn)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _retrieve(future) -> None:
    if not future.cancelled():
        future.exception()  # mark retrieved: abandoned jobs must not log "never retrieved"
