"""Dynamic batching of stage-2 backbone work across concurrent requests.

The heavy tier of every request hands its clips (the candidates' selected frames) to one
:class:`EncodeBatcher`; batcher threads run them in shared ``VideoEncoder.encode`` calls:

- a batch starts when the oldest waiting clip has waited ``max_wait_s`` (a few ms: a lone request
  pays at most that) or when ``max_frames`` frames are waiting, whichever comes first;
- it takes clips FIFO by request (the oldest request's clips first, then the next request's, until
  ``max_frames``): a request's clips are never passed over by later requests', so none starves;
  a request larger than the budget is split over consecutive batches;
- only clips of the same encoder and early-exit policy share a call; within a call the clips are
  sorted by (frame shape, length), so padded backbone batches hold like shapes;
- ``workers`` threads take batches from the one queue (one on a GPU; on a CPU, as many as the
  cores allow beside torch's own threads: a batch runs while the next one forms); with several,
  a streaming head's time (``head_s``) is shared out approximately;
- the queue is bounded (``max_queued`` clips waiting): beyond it :meth:`submit` raises
  :class:`engine.worker.QueueFull` (HTTP 429);
- a request that is cancelled (its client went away) or whose deadline passed has its waiting clips
  dropped before they reach the backbone; its caller gets :class:`EncodeCancelled`;
- on Linux the batcher threads run at a lower CPU priority (``nice`` added to their nice value,
  default :data:`DEFAULT_NICE`; the engine's ``batch_nice``, QASLR_BATCH_NICE), set before their first torch op so that any
  OpenMP threads they start inherit it: on a CPU, cheap work (query embedding, stage 1, the frame
  tier) on the search threads takes a core from the encodes whenever it needs one, instead of
  sharing it with them (``benchmarks/bench_load.py``: stage-1 p95 under rerank load).

Scores do not depend on batching: every clip is encoded as it would be alone (the backbone batches
are padded per clip and the streaming head keeps one state per video).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from core.config import BATCH_NICE
from engine.worker import QueueFull, lower_thread_priority, off_the_cpu

__all__ = [
    "BatchStats",
    "EncodeBatcher",
    "EncodeCancelled",
    "EncodeTicket",
    "auto_workers",
    "lower_thread_priority",
    "serialize_processor",
]

logger = logging.getLogger(__name__)

DEFAULT_NICE = BATCH_NICE  # added to the batcher threads' nice value (Linux; 0: none)


class EncodeCancelled(RuntimeError):
    """The request's waiting clips were dropped (cancelled, or past its deadline)."""


@dataclass
class BatchStats:
    """One backbone call of the batcher: what it held."""

    clips: int
    frames: int
    requests: int
    seconds: float


@dataclass
class EncodeTicket:
    """One request's clips in the batcher. ``queue_s``: from submission to the first batch that
    took its clips; ``compute_s``: the wall time of the batches its clips were in (what it waited on
    while they ran); ``head_s``: its share of their streaming-head time."""

    encoder: object
    videos: list
    texts: list | None
    queries: torch.Tensor | None
    exit_policy: object
    cancelled: Callable[[], bool] | None
    deadline: float | None
    submitted: float = field(default_factory=time.perf_counter)
    results: list = field(default_factory=list)
    taken: int = 0  # videos handed to a batch so far (FIFO within the request)
    finished: int = 0
    queue_s: float | None = None
    compute_s: float = 0.0
    head_s: float = 0.0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.videos)

    @property
    def key(self) -> tuple:
        p = self.exit_policy
        policy = (
            None
            if p is None
            else (id(getattr(p, "gate", None)), getattr(p, "eta", None), getattr(p, "t_min", None))
        )
        return (id(self.encoder), policy, self.queries is None, self.texts is None)

    def expired(self) -> bool:
        if self.cancelled is not None and self.cancelled():
            return True
        return self.deadline is not None and time.monotonic() > self.deadline

    def wait(self, poll_s: float = 0.05) -> list:
        """The embeddings, in submission order; raises what the batch raised, or EncodeCancelled."""
        with off_the_cpu():  # the search's CPU slot goes to another search meanwhile
            while not self.done.wait(poll_s):
                pass
        if self.error is not None:
            raise self.error
        return self.results


class EncodeBatcher:
    def __init__(
        self,
        *,
        max_wait_s: float = 0.005,
        max_frames: int = 128,
        max_queued: int = 4096,
        workers: int = 1,
        on_batch: Callable[[BatchStats], None] | None = None,
        nice: int = DEFAULT_NICE,
    ):
        self.max_wait_s = float(max_wait_s)
        self.nice = min(19, max(0, int(nice)))
        self.max_frames = max(1, int(max_frames))
        self.max_queued = int(max_queued)
        self.workers = max(1, int(workers))
        self.on_batch = on_batch
        self._queue: deque[EncodeTicket] = deque()
        self._queued_clips = 0
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"qaslr-batcher-{i}", daemon=True)
            for i in range(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def queued_clips(self) -> int:
        return self._queued_clips

    def submit(
        self,
        encoder,
        videos: Sequence,
        *,
        texts: Sequence | None = None,
        queries: torch.Tensor | None = None,
        exit_policy=None,
        cancelled: Callable[[], bool] | None = None,
        deadline: float | None = None,
    ) -> EncodeTicket:
        ticket = EncodeTicket(
            encoder,
            list(videos),
            None if texts is None else list(texts),
            queries,
            exit_policy,
            cancelled,
            deadline,
        )
        if not ticket.videos:
            ticket.done.set()
            return ticket
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            if self._queued_clips + len(ticket.videos) > self.max_queued and self._queue:
                raise QueueFull(f"{self._queued_clips} clips wait for the backbone (bound {self.max_queued})")
            self._queue.append(ticket)
            self._queued_clips += len(ticket.videos)
            self._cond.notify_all()
        return ticket

    def encode(self, encoder, videos, **kwargs) -> tuple[list, EncodeTicket]:
        """Submit and wait: (embeddings, the ticket with its timings)."""
        ticket = self.submit(encoder, videos, **kwargs)
        return ticket.wait(), ticket

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for t in self._queue:
                self._fail(t, EncodeCancelled("the batcher closed"))
            self._queue.clear()
            self._queued_clips = 0
            self._cond.notify_all()

    # -- the batcher thread ----------------------------------------------------------------------
    def _fail(self, ticket: EncodeTicket, exc: BaseException) -> None:
        if not ticket.done.is_set():
            ticket.error = exc
            ticket.done.set()

    def _drop_expired(self) -> None:
        for t in [t for t in self._queue if t.expired()]:
            self._queue.remove(t)
            self._queued_clips -= len(t.videos) - t.taken
            self._fail(t, EncodeCancelled("the request was cancelled or its deadline passed"))

    def _waiting_frames(self, key) -> int:
        return sum(len(v.frames) for t in self._queue if t.key == key for v in t.videos[t.taken :])

    def _take(self) -> list[tuple[EncodeTicket, list[int]]] | None:
        """Wait for work; the next batch as (ticket, video positions) pieces, FIFO by request."""
        with self._cond:
            while True:
                if self._closed:
                    return None
                self._drop_expired()
                if not self._queue:
                    self._cond.wait(0.1)
                    continue
                head = self._queue[0]
                wait = head.submitted + self.max_wait_s - time.perf_counter()
                if wait > 0 and self._waiting_frames(head.key) < self.max_frames:
                    self._cond.wait(wait)
                    continue
                break
            key, budget, pieces = head.key, self.max_frames, []
            for t in list(self._queue):
                if t.key != key:
                    continue
                positions = []
                while t.taken < len(t.videos):
                    n = len(t.videos[t.taken].frames)
                    if (pieces or positions) and n > budget:
                        break
                    positions.append(t.taken)
                    t.taken += 1
                    budget -= n
                if positions:
                    pieces.append((t, positions))
                    self._queued_clips -= len(positions)
                    if t.queue_s is None:
                        t.queue_s = time.perf_counter() - t.submitted
                if t.taken == len(t.videos):
                    self._queue.remove(t)
                if budget <= 0 or t.taken < len(t.videos):
                    break  # the budget is spent: later requests wait for the next batch (FIFO)
            return pieces

    def _loop(self) -> None:
        lower_thread_priority(self.nice)  # before this thread's first torch op (see the module doc)
        while True:
            pieces = self._take()
            if pieces is None:
                return
            pieces = [(t, pos) for t, pos in pieces if not t.done.is_set()]
            if pieces:
                self._run(pieces)

    def _run(self, pieces: list[tuple[EncodeTicket, list[int]]]) -> None:
        items = [(t, i) for t, pos in pieces for i in pos]
        # like shapes together: (frame shape, length), stable so a request's clips keep their order
        order = sorted(
            range(len(items)),
            key=lambda k: (
                tuple(items[k][0].videos[items[k][1]].frames.shape[1:]),
                len(items[k][0].videos[items[k][1]].frames),
            ),
        )
        first = items[0][0]
        videos = [items[k][0].videos[items[k][1]] for k in order]
        texts = None if first.texts is None else [items[k][0].texts[items[k][1]] for k in order]
        queries = None
        if first.queries is not None:
            queries = torch.stack([items[k][0].queries[items[k][1]] for k in order])
        encoder = first.encoder
        head_before = getattr(encoder, "head_seconds", 0.0)
        t0 = time.perf_counter()
        try:
            out = encoder.encode(videos, texts=texts, queries=queries, exit_policy=first.exit_policy)
        except BaseException as exc:  # every request in the batch learns why
            logger.exception("a batched encode failed")
            for t, _ in pieces:
                with self._cond:
                    if t in self._queue:
                        self._queue.remove(t)
                        self._queued_clips -= len(t.videos) - t.taken
                self._fail(t, exc)
            return
        seconds = time.perf_counter() - t0
        head = getattr(encoder, "head_seconds", 0.0) - head_before
        frames = sum(len(v.frames) for v in videos)
        for k, emb in zip(order, out, strict=True):
            t, i = items[k]
            t.results[i] = emb
        for t, pos in pieces:
            share = sum(len(t.videos[i].frames) for i in pos) / max(frames, 1)
            t.compute_s += seconds
            t.head_s += head * share
            t.finished += len(pos)
            if t.finished == len(t.videos):
                t.done.set()
        if self.on_batch is not None:
            try:
                self.on_batch(BatchStats(len(videos), frames, len(pieces), seconds))
            except Exception:
                logger.exception("the batch observer failed")


def auto_workers(device) -> int:
    """Batcher threads for a backbone on ``device``: one on a GPU (one stream of big batches); on a
    CPU, the cores that torch's intra-op threads leave (at least one, at most four)."""
    if str(device).startswith("cuda"):
        return 1
    cores = os.cpu_count() or 1
    return max(1, min(4, cores // max(1, torch.get_num_threads())))


class _SerializedProcessor:
    """A backbone's processor whose calls hold one lock: the fast tokenizer behind it is not safe
    to call from several threads at once (its padding settings are set per call)."""

    def __init__(self, processor, lock: threading.Lock):
        object.__setattr__(self, "_processor", processor)
        object.__setattr__(self, "_lock", lock)

    def __call__(self, *args, **kwargs):
        with self._lock:
            return self._processor(*args, **kwargs)

    def apply_chat_template(self, *args, **kwargs):
        with self._lock:
            return self._processor.apply_chat_template(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._processor, name)

    def __setattr__(self, name, value):
        setattr(self._processor, name, value)


def serialize_processor(backbone) -> None:
    """Make ``backbone``'s processor calls safe from several threads (idempotent; a backbone
    without a processor is left alone)."""
    processor = getattr(backbone, "processor", None)
    if processor is None or isinstance(processor, _SerializedProcessor):
        return
    backbone.processor = _SerializedProcessor(processor, threading.Lock())
