"""A search's stage clock: the answer's ``timings_ms`` per stage, and its deadline and cancellation,
checked as each stage begins (engine.search). Work timed elsewhere (the batcher, engine.runtime.batching)
is booked with :meth:`StageClock.add` and re-booked with :meth:`StageClock.move`."""

from __future__ import annotations

import time

from engine.errors import DeadlineExceeded, SearchCancelled

__all__ = ["StageClock"]


class StageClock:
    def __init__(self, timings: dict[str, float], deadline: float | None, cancelled=None):
        self.timings = timings
        self.deadline = deadline
        self.cancelled = cancelled  # () -> bool: True once nobody waits for the answer

    def stage(self, name: str):
        clock = self

        class _Stage:
            def __enter__(self):
                clock.check()
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                clock.timings[name] += (time.perf_counter() - self.t0) * 1e3
                return False

        return _Stage()

    def check(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeadlineExceeded("the request deadline passed")
        if self.cancelled is not None and self.cancelled():
            raise SearchCancelled("the client went away")

    def add(self, name: str, seconds: float) -> None:
        """Book ``seconds`` measured elsewhere (e.g. by the batcher) under ``name``."""
        self.timings[name] += max(0.0, seconds) * 1e3

    def move(self, source: str, target: str, seconds: float) -> None:
        """Re-book ``seconds`` measured under ``source`` to ``target`` (e.g. head time inside encode)."""
        ms = max(0.0, seconds) * 1e3
        self.timings[source] -= ms
        self.timings[target] += ms
