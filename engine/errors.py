"""The engine's errors: one hierarchy under :class:`EngineError`, each a refusal a caller can act on.

Every search the engine refuses or stops raises one of these (the HTTP service maps them to
statuses from one table, ``service.errors.ENGINE_REFUSALS``); anything else is a bug. This module
imports nothing of the engine, so every part of it (the runtime, the search, the tiers) can raise
them without an import circle.

    EngineError
    +-- InvalidRequest      a request field out of bounds or malformed (names the field; 422)
    +-- Overloaded
    |   +-- QueueFull       the admission queue, or the batcher's, is full (429)
    +-- DeadlineExceeded    the request's deadline passed between stages (503)
    |   +-- WorkerTimeout   ... while it waited for admission (503)
    +-- SearchCancelled     nobody waits for the answer any more (499)
    |   +-- EncodeCancelled its backbone work was dropped from the batcher (499)
    +-- ModelProcessDied    the model process running its backbone work died and restarts (503)
"""

from __future__ import annotations

__all__ = [
    "DeadlineExceeded",
    "EncodeCancelled",
    "EngineError",
    "InvalidRequest",
    "ModelProcessDied",
    "Overloaded",
    "QueueFull",
    "SearchCancelled",
    "WorkerTimeout",
]


class EngineError(Exception):
    """Anything the engine refuses or stops on purpose."""


class InvalidRequest(EngineError, ValueError):
    """Bad input that names the offending field (mapped to HTTP 422)."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


class Overloaded(EngineError, RuntimeError):
    """The engine has no room for more work now; retry shortly."""


class QueueFull(Overloaded):
    """The admission queue (or the batcher's bound) is full (HTTP 429)."""


class DeadlineExceeded(EngineError, TimeoutError):
    """The request's deadline passed between stages (mapped to HTTP 503)."""


class WorkerTimeout(DeadlineExceeded):
    """The caller's deadline passed while its search waited for (or ran on) a search thread."""


class SearchCancelled(EngineError, RuntimeError):
    """Nobody waits for the answer any more (the client went away): the search stopped between
    stages and its waiting stage-2 clips were dropped."""


class EncodeCancelled(SearchCancelled):
    """The request's waiting backbone work was dropped (cancelled, or past its deadline)."""


class ModelProcessDied(EngineError, RuntimeError):
    """The model process running a batch died with it (killed, out of memory); it restarts for the
    next batch."""
