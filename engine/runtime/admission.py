"""Admission: search threads behind a bounded admission queue, so model work never blocks the
event loop (or, for a synchronous caller, runs under the same bounds).

``capacity = queue_size + 1`` jobs may be admitted at once (running or waiting); a job beyond that
is refused with :class:`engine.errors.QueueFull` (HTTP 429). A caller that gives up at its deadline
gets :class:`engine.errors.WorkerTimeout` (HTTP 503); its job, if it has not started, is skipped when
its turn comes, and a running job sees the same deadline between search stages. :meth:`Admission.run`
awaits a job (the service's event loop); :meth:`Admission.run_sync` waits for it on the calling thread
(the command line, benchmarks, notebooks): the same queue, threads and bounds.

``threads=1`` is the single model thread that runs each search whole. With more threads (dynamic
batching, :mod:`engine.runtime.batching`) searches run side by side: their cheap stages on these threads,
their heavy encodes on the batcher's thread, so a stage-1 search never waits behind a rerank's
encode. ``cpu_slots`` bounds how many of them run their cheap stages at once (more only share the
cores and the interpreter lock); a search waiting for the batcher gives its slot up meanwhile
(:func:`off_the_cpu`), so every admitted search's clips still meet in the batcher. With
``light_threads`` > 0 a job submitted with ``light=True`` (a stage-1-only search) runs on a lane of
its own and takes no slot: it never waits behind a rerank. With ``search_nice`` (Linux) the search
threads run at a lower CPU priority than the light lane (and, by default, a higher one than the
batcher's encodes: core.config SEARCH_NICE < BATCH_NICE), so on busy cores a stage-1 search goes first.
Both lanes share the admission queue.
:meth:`Admission.call_soon` runs a function with the model to itself (no search starts while it
runs, as with the single thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from core.config import CPU_SLOTS_EXTRA, CPU_SLOTS_PER_CORE
from engine.errors import QueueFull, WorkerTimeout

T = TypeVar("T")
logger = logging.getLogger(__name__)


def lower_thread_priority(nice: int) -> bool:
    """Add ``nice`` to the calling thread's nice value (at most 19). On Linux nice values are per
    thread (``setpriority(PRIO_PROCESS, tid)``), and threads it starts later inherit it. Elsewhere,
    or when refused, nothing changes; returns whether it changed."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    try:
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, now + int(nice)))
    except OSError as exc:
        logger.debug("could not lower the priority of thread %d: %s", tid, exc)
        return False
    return True


class _Abandoned(Exception):
    pass


class _SharedExclusive:
    """Searches share the model; an exclusive holder (call_soon) has it alone. A waiting exclusive
    holder goes before searches that arrive after it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._exclusive_waiting = 0

    def want_exclusive(self) -> None:
        with self._cond:
            self._exclusive_waiting += 1

    def acquire_exclusive(self) -> None:
        with self._cond:
            while self._exclusive or self._shared:
                self._cond.wait()
            self._exclusive_waiting -= 1
            self._exclusive = True

    def release_exclusive(self) -> None:
        with self._cond:
            self._exclusive = False
            self._cond.notify_all()

    def acquire_shared(self) -> None:
        with self._cond:
            while self._exclusive or self._exclusive_waiting:
                self._cond.wait()
            self._shared += 1

    def release_shared(self) -> None:
        with self._cond:
            self._shared -= 1
            self._cond.notify_all()


class Admission:
    def __init__(
        self,
        queue_size: int,
        *,
        threads: int = 1,
        light_threads: int = 0,
        cpu_slots: int = 0,
        search_nice: int = 0,
        on_depth: Callable[[int], None] | None = None,
    ):
        self.capacity = int(queue_size) + 1
        self.threads = max(1, int(threads))
        self.search_nice = min(19, max(0, int(search_nice)))
        self._executor = ThreadPoolExecutor(
            max_workers=self.threads,
            thread_name_prefix="qaslr-model",
            initializer=lower_thread_priority,  # before the thread's first torch op (engine.runtime.batching)
            initargs=(self.search_nice,),
        )
        self.cpu_slots = max(0, int(cpu_slots))  # 0: every running search at once
        self._slots = threading.Semaphore(self.cpu_slots) if self.cpu_slots else None
        self.light_threads = max(0, int(light_threads))
        self._light = (
            ThreadPoolExecutor(max_workers=self.light_threads, thread_name_prefix="qaslr-light")
            if self.light_threads
            else None
        )
        # call_soon's own thread: it waits for the running searches without taking a search thread
        self._side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qaslr-model-exclusive")
        self._model = _SharedExclusive()
        self._running = 0  # searches in their function on the search threads (not the light lane)
        self.on_search_done: Callable[[], None] | None = None  # e.g. the batcher's wake()
        self._pending = 0
        self._lock = threading.Lock()
        self.on_depth = on_depth

    @property
    def running(self) -> int:
        """Searches running on the search threads (holding a CPU slot or waiting for the batcher):
        those that may hand the batcher work (engine.runtime.batching's ``peers``)."""
        return self._running

    def _leave(self) -> None:
        with self._lock:
            self._running -= 1
        if self.on_search_done is not None:
            self.on_search_done()

    @property
    def depth(self) -> int:
        """Jobs admitted and not finished (running + waiting)."""
        return self._pending

    def _changed(self, delta: int) -> None:
        with self._lock:
            self._pending += delta
            depth = self._pending
        if self.on_depth is not None:
            self.on_depth(depth)

    def submit(self, fn: Callable[[], T], *, light: bool = False):
        """Admit ``fn`` (or raise QueueFull) and queue it on a search thread (on the light lane when
        ``light`` and there is one): (its concurrent.futures.Future, the event that abandons it)."""
        with self._lock:
            if self._pending >= self.capacity:
                raise QueueFull(f"{self._pending} searches admitted (capacity {self.capacity})")
            self._pending += 1
        if self.on_depth is not None:
            self.on_depth(self._pending)
        abandoned = threading.Event()
        try:
            lane = self._light if light and self._light is not None else self._executor
            future = lane.submit(self._job, fn, light, abandoned)
        except BaseException:
            self._changed(-1)
            raise
        return future, abandoned

    async def run(self, fn: Callable[[], T], *, timeout: float, light: bool = False) -> T:
        """Run ``fn`` on a search thread and await it; past ``timeout`` seconds, WorkerTimeout."""
        future, abandoned = self.submit(fn, light=light)
        waiting = asyncio.wrap_future(future)
        waiting.add_done_callback(_retrieve)
        try:
            return await asyncio.wait_for(asyncio.shield(waiting), timeout=max(timeout, 0.0))
        except TimeoutError as exc:
            abandoned.set()
            raise WorkerTimeout() from exc

    def run_sync(self, fn: Callable[[], T], *, timeout: float, light: bool = False) -> T:
        """:meth:`run` for a caller without an event loop: waits on the calling thread."""
        future, abandoned = self.submit(fn, light=light)
        try:
            return future.result(timeout=max(timeout, 0.0))
        except concurrent.futures.TimeoutError as exc:
            abandoned.set()
            raise WorkerTimeout() from exc

    def _job(self, fn: Callable[[], T], light: bool, abandoned: threading.Event) -> T:
        """``fn`` on this search thread: skipped when abandoned before it starts; with the model
        shared (not while call_soon holds it) and, off the light lane, a CPU slot."""
        try:
            if abandoned.is_set():
                raise _Abandoned()
            self._model.acquire_shared()
            try:
                slots = None if light else self._slots
                while slots is not None and not slots.acquire(timeout=0.05):
                    if abandoned.is_set():
                        raise _Abandoned()
                try:
                    if abandoned.is_set():
                        raise _Abandoned()
                    _held.slots = slots
                    if light:
                        return fn()
                    with self._lock:
                        self._running += 1
                    try:
                        return fn()
                    finally:
                        self._leave()
                finally:
                    _held.slots = None
                    if slots is not None:
                        slots.release()
            finally:
                self._model.release_shared()
        finally:
            self._changed(-1)

    def call_soon(self, fn: Callable[[], T]):
        """Run ``fn`` with the model to itself, outside the queue accounting (tests, warm-up): the
        searches already running finish first, and none starts until it returns; returns a
        concurrent.futures.Future."""
        self._model.want_exclusive()  # from now on, searches wait for it

        def exclusive():
            self._model.acquire_exclusive()
            try:
                return fn()
            finally:
                self._model.release_exclusive()

        return self._side.submit(exclusive)

    def on_each_light_thread(self, fn: Callable[[], object], *, timeout_s: float = 120.0) -> int:
        """Run ``fn`` once on every thread of the light lane, outside the queue accounting (warm-up:
        on CUDA a thread's first backbone call pays for its own library handles, tens of
        milliseconds, which a stage-1 search there would otherwise pay); returns the threads it ran
        on (0 without a light lane). Each job waits at a barrier, so no thread takes two."""
        if self._light is None:
            return 0
        barrier = threading.Barrier(self.light_threads)

        def once():
            barrier.wait(timeout_s)
            fn()
            return threading.get_ident()

        futures = [self._light.submit(once) for _ in range(self.light_threads)]
        return len({f.result(timeout=timeout_s) for f in futures})

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._light is not None:
            self._light.shutdown(wait=False, cancel_futures=True)
        self._side.shutdown(wait=False, cancel_futures=True)


def auto_cpu_slots() -> int:
    """Searches on the CPU at once when none are configured: the cores this process may use, plus
    one (core.config CPU_SLOTS_PER_CORE, CPU_SLOTS_EXTRA)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores * CPU_SLOTS_PER_CORE + CPU_SLOTS_EXTRA)


_held = threading.local()  # the CPU slot semaphore the calling search thread holds, if any


@contextmanager
def off_the_cpu():
    """While a search thread waits for work done elsewhere (its clips in the batcher), its CPU slot
    goes to another search; it takes one back before it goes on."""
    slots = getattr(_held, "slots", None)
    if slots is None:
        yield
        return
    _held.slots = None
    slots.release()
    try:
        yield
    finally:
        slots.acquire()
        _held.slots = slots


def _retrieve(future) -> None:
    if not future.cancelled():
        future.exception()  # mark retrieved: abandoned jobs must not log "never retrieved"
