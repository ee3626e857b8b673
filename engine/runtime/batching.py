"""Dynamic batching of stage-2 backbone work across concurrent requests.

Every request of a stage-2 search hands its backbone work to one :class:`EncodeBatcher`, and
batcher threads run the work of concurrent requests in shared backbone calls. Three kinds, each in
calls of its own:

- ``clips``: the heavy tier's candidates (their selected frames), in ``VideoEncoder.encode`` calls;
- ``queries``: the query embedding q of a search that goes on to stage 2, in
  ``VideoEncoder.embed_queries`` calls (a stage-1-only search embeds its own query on the light lane,
  so it never waits here);
- ``images``: the source frames that refine the top result's moment (engine.refine), in
  ``Backbone.embed_images`` calls.

A clip costs its frames of the budget; a query or an image costs one. The rules:

- a batch starts when ``max_frames`` frames are waiting, or when the oldest waiting item has waited
  ``max_wait_s``, or as soon as no other search could join it: with ``peers`` (the number of
  searches running, engine.runtime.admission's ``Admission.running``), once every running search is
  in the batcher (waiting, or in a running batch). A lone request never waits, and under load the
  batch takes everyone who is about to come: on a CPU, larger calls are what let two batcher
  threads run side by side past the interpreter lock (``benchmarks/bench_backbone_threads.py``);
- the kinds go in the order of engine.runtime.policy's ``KIND_ORDER`` (a search's refine frames,
  then queries, then the heavy tier's clips), so cheap work never waits behind another search's
  heavy encodes (these rules are :class:`engine.runtime.policy.BatchPolicy`'s);
- within a kind it takes clips FIFO by request (the oldest request's clips first, then the next request's, until
  ``max_frames``): a request's clips are never passed over by later requests', so none starves;
  a request larger than the budget is split over consecutive batches;
- only work of one kind, encoder and early-exit policy shares a call; within a call the items are
  sorted by (frame shape, length), or a query's text length, so padded backbone batches hold like
  shapes;
- ``workers`` threads take batches from the one queue (one on a GPU; on a CPU, as many as the
  cores allow beside torch's own threads: a batch runs while the next one forms); with several,
  a streaming head's time (``head_s``) is shared out approximately;
- what waits is shared out among the workers that are free to take it: a worker takes its even
  share of the waiting frames of the batch's kind (at least ``min_split``), and the next free
  worker takes the rest at once. On a CPU a call's cost grows with its images (no saving from one
  large call), while two calls run side by side on two cores at 1.6-1.8x
  (``benchmarks/bench_backbone_threads.py``): when every running search hands its work over at
  once, one batch on one worker would leave the other core idle;
- with ``backends`` (engine.runtime.model_process: one model process per worker, the default on a
  CPU of two or more cores), a worker runs its batches of queries and images in its own process, past this
  process's interpreter lock; clips stay on the worker thread;
- the queue is bounded (``max_queued`` clips waiting): beyond it :meth:`submit` raises
  :class:`engine.errors.QueueFull` (HTTP 429);
- a request that is cancelled (its client went away) or whose deadline passed has its waiting clips
  dropped before they reach the backbone; its caller gets :class:`EncodeCancelled`;
- on Linux the batcher threads run at a lower CPU priority (``nice`` added to their nice value,
  default :data:`DEFAULT_NICE`; the engine's ``batch_nice``, QASLR_BATCH_NICE), set before their first torch op so that any
  OpenMP threads they start inherit it: on a CPU, cheap work (stage 1, the frame tier, the time
  head, moments) on the search threads takes a core from the encodes whenever it needs one, instead of
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

import numpy as np
import torch

from core.config import BATCH_NICE
from engine.errors import EncodeCancelled, QueueFull
from engine.runtime.admission import lower_thread_priority, off_the_cpu
from engine.runtime.policy import CLIPS, IMAGES, MIN_SPLIT_FRAMES, QUERIES, BatchPolicy

__all__ = [
    "BatchStats",
    "CLIPS",
    "EncodeBatcher",
    "EncodeCancelled",
    "EncodeTicket",
    "IMAGES",
    "QUERIES",
    "auto_workers",
    "lower_thread_priority",
    "serialize_processor",
]

logger = logging.getLogger(__name__)

DEFAULT_NICE = BATCH_NICE  # added to the batcher threads' nice value (Linux; 0: none)


@dataclass
class BatchStats:
    """One backbone call of the batcher: what it held (``clips``: its items, of ``kind``)."""

    clips: int
    frames: int
    requests: int
    seconds: float
    kind: str = CLIPS


@dataclass(eq=False)  # a ticket is itself: the queue finds and removes it by identity
class EncodeTicket:
    """One request's work in the batcher: its ``items`` (clips; the frames of ``images``; the texts
    of ``queries``). ``queue_s``: from submission to the first batch that
    took its clips; ``compute_s``: the wall time of the batches its clips were in (what it waited on
    while they ran); ``head_s``: its share of their streaming-head time."""

    encoder: object
    items: list
    texts: list | None
    queries: torch.Tensor | None
    exit_policy: object
    cancelled: Callable[[], bool] | None
    deadline: float | None
    kind: str = CLIPS
    query_states: list | None = None  # per clip: its query's token states (a head that reads the text)
    submitted: float = field(default_factory=time.perf_counter)
    results: list = field(default_factory=list)
    taken: int = 0  # items handed to a batch so far (FIFO within the request)
    finished: int = 0
    queue_s: float | None = None
    compute_s: float = 0.0
    busy_until: float = 0.0  # when the last of its batches so far ended (perf_counter)
    head_s: float = 0.0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.items)

    @property
    def key(self) -> tuple:
        p = self.exit_policy
        policy = (
            None
            if p is None
            else (id(getattr(p, "gate", None)), getattr(p, "eta", None), getattr(p, "t_min", None))
        )
        return (self.kind, id(self.encoder), policy, self.queries is None, self.texts is None,
                self.query_states is None)  # fmt: skip

    def cost(self, i: int) -> int:
        """What item ``i`` takes of a batch's frame budget: a clip its frames, anything else one."""
        return len(self.items[i].frames) if self.kind == CLIPS else 1

    def order_key(self, i: int) -> tuple:
        """Like shapes together: a clip's (frame shape, length), an image's shape, a text's length."""
        item = self.items[i]
        if self.kind == CLIPS:
            return (tuple(item.frames.shape[1:]), len(item.frames))
        if self.kind == IMAGES:
            return (tuple(np.shape(item)), 0)
        return ((), len(item or ""))

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
        peers: Callable[[], int] | None = None,
        min_split: int = MIN_SPLIT_FRAMES,
        backends: Sequence | None = None,
    ):
        self.policy = BatchPolicy(float(max_wait_s), max(1, int(max_frames)), max(1, int(min_split)))
        self.nice = min(19, max(0, int(nice)))
        self.max_queued = int(max_queued)
        # engine.runtime.model_process.ModelProcess per worker: its query and image calls run there
        self.backends = list(backends or [])
        self.workers = len(self.backends) or max(1, int(workers))
        self.on_batch = on_batch
        self.peers = peers  # () -> searches that may hand work here; None: always wait max_wait_s
        self._free = 0  # workers waiting in _take for a batch (free to run one)
        self._inside = 0  # tickets submitted and not done (waiting, or in a running batch)
        self._queue: deque[EncodeTicket] = deque()
        self._queued_clips = 0
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(
                target=self._loop,
                args=(self.backends[i] if self.backends else None,),
                name=f"qaslr-batcher-{i}",
                daemon=True,
            )
            for i in range(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def max_wait_s(self) -> float:
        return self.policy.max_wait_s

    @property
    def max_frames(self) -> int:
        return self.policy.max_frames

    @property
    def min_split(self) -> int:
        return self.policy.min_split

    @property
    def queued_clips(self) -> int:
        return self._queued_clips

    def submit(
        self,
        encoder,
        items: Sequence,
        *,
        texts: Sequence | None = None,
        queries: torch.Tensor | None = None,
        exit_policy=None,
        cancelled: Callable[[], bool] | None = None,
        deadline: float | None = None,
        kind: str = CLIPS,
        query_states: Sequence | None = None,
    ) -> EncodeTicket:
        """Queue ``items`` (of ``kind``: clips, image frames, or query texts) for
        ``encoder`` (a VideoEncoder; for ``images``, a Backbone); ``query_states``, one per clip, for a
        head that reads the query's text."""
        if kind not in (CLIPS, QUERIES, IMAGES):
            raise ValueError(f"unknown kind of batched work {kind!r}")
        ticket = EncodeTicket(
            encoder,
            list(items),
            None if texts is None else list(texts),
            queries,
            exit_policy,
            cancelled,
            deadline,
            kind,
            None if query_states is None else list(query_states),
        )
        if not ticket.items:
            ticket.done.set()
            return ticket
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            if self._queued_clips + len(ticket.items) > self.max_queued and self._queue:
                raise QueueFull(f"{self._queued_clips} clips wait for the backbone (bound {self.max_queued})")
            self._queue.append(ticket)
            self._queued_clips += len(ticket.items)
            self._inside += 1
            self._cond.notify_all()
        return ticket

    def wake(self) -> None:
        """A search ended (or anything else :meth:`_take` waits on changed): look again whether
        anyone else can still join the waiting batch."""
        with self._cond:
            self._cond.notify_all()

    def _others_may_join(self) -> bool:
        """Whether a running search that is not in the batcher could still hand it work."""
        return self.peers is None or self.peers() > self._inside

    def encode(self, encoder, items, **kwargs) -> tuple[list, EncodeTicket]:
        """Submit and wait: (embeddings, the ticket with its timings)."""
        ticket = self.submit(encoder, items, **kwargs)
        return ticket.wait(), ticket

    def run(
        self,
        clock,
        encoder,
        items: Sequence,
        *,
        queue: str,
        compute: str | None = None,
        head: str | None = None,
        inside: str | None = None,
        **kwargs,
    ) -> list:
        """Run ``items`` for the search whose stage clock is ``clock`` (engine.search.clock; its deadline
        and cancellation go with the work) and wait: one result per item. The answer's timings keep
        the wait apart from the work: the time the items waited in the queue is booked under
        ``queue``; the wall time of the batches that ran them under ``compute`` (their streaming-head
        share under ``head``); or, called within the caller's stage ``inside`` (which times the whole
        wait), the queue time is moved out of that stage and the work stays in it. ``kwargs`` go to
        :meth:`submit` (``kind``, ``texts``, ...)."""
        clock.check()
        t0 = time.perf_counter()
        ticket = self.submit(
            encoder, items, cancelled=getattr(clock, "cancelled", None), deadline=getattr(clock, "deadline", None),
            **kwargs,
        )  # fmt: skip
        try:
            return ticket.wait()
        except EncodeCancelled:
            clock.check()  # the deadline passed, or the client went away: say which
            raise
        finally:
            waited = time.perf_counter() - t0
            work = min(ticket.compute_s, waited)
            if inside is not None:  # the enclosing stage timed the whole wait: move the queue out
                clock.move(inside, queue, waited - work)
            else:
                clock.add(queue, waited - work)
                clock.add(compute, work - (ticket.head_s if head else 0.0))
                if head:
                    clock.add(head, ticket.head_s)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for t in self._queue:
                self._fail(t, EncodeCancelled("the batcher closed"))
            self._queue.clear()
            self._queued_clips = 0
            self._cond.notify_all()
        for backend in self.backends:
            backend.close()

    # -- the batcher thread ----------------------------------------------------------------------
    def _fail(self, ticket: EncodeTicket, exc: BaseException) -> None:
        if not ticket.done.is_set():
            ticket.error = exc
            self._finish(ticket)

    def _finish(self, ticket: EncodeTicket) -> None:
        with self._cond:  # re-entrant: callers may hold it
            if ticket.done.is_set():
                return
            self._inside -= 1
            ticket.done.set()

    def _drop_expired(self) -> None:
        for t in [t for t in self._queue if t.expired()]:
            self._queue.remove(t)
            self._queued_clips -= len(t.items) - t.taken
            self._fail(t, EncodeCancelled("the request was cancelled or its deadline passed"))

    def _waiting_frames(self, key) -> int:
        return sum(t.cost(i) for t in self._queue if t.key == key for i in range(t.taken, len(t.items)))

    def _take(self) -> list[tuple[EncodeTicket, list[int]]] | None:
        """Wait for work; the next batch as (ticket, video positions) pieces, FIFO by request."""
        with self._cond:
            self._free += 1
            try:
                return self._take_locked()
            finally:
                self._free -= 1
                if self._queue:
                    self._cond.notify_all()  # what this batch left goes to the next free worker

    def _take_locked(self) -> list[tuple[EncodeTicket, list[int]]] | None:
        """:meth:`_take` with the lock held (counted among the free workers)."""
        while True:
            if self._closed:
                return None
            self._drop_expired()
            if not self._queue:
                self._cond.wait(0.1)
                continue
            head = self.policy.first(self._queue)  # the first of the cheapest kind
            wait = self.policy.wait_s(
                head, waiting_frames=self._waiting_frames(head.key), others_may_join=self._others_may_join(),
                now=time.perf_counter(),
            )  # fmt: skip
            if wait > 0:
                self._cond.wait(wait)
                continue
            break
        key, pieces = head.key, []
        # this worker's even share of what waits, with the other free workers (see the module doc)
        budget = self.policy.budget(waiting_frames=self._waiting_frames(key), free_workers=self._free)
        for t in list(self._queue):
            if t.key != key:
                continue
            positions = []
            while t.taken < len(t.items):
                n = t.cost(t.taken)
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
            if t.taken == len(t.items):
                self._queue.remove(t)
            if budget <= 0 or t.taken < len(t.items):
                break  # the budget is spent: later requests wait for the next batch (FIFO)
        return pieces

    def _loop(self, backend=None) -> None:
        lower_thread_priority(self.nice)  # before this thread's first torch op (see the module doc)
        while True:
            try:
                pieces = self._take()
            except Exception as exc:  # a broken queue fails its waiting requests rather than hang them
                logger.exception("the batcher could not take a batch")
                with self._cond:
                    for t in list(self._queue):
                        self._fail(t, exc)
                    self._queue.clear()
                    self._queued_clips = 0
                continue
            if pieces is None:
                return
            pieces = [(t, pos) for t, pos in pieces if not t.done.is_set()]
            if pieces:
                self._run(pieces, backend)

    def _run(self, pieces: list[tuple[EncodeTicket, list[int]]], backend=None) -> None:
        # (ticket, position) of every item, like shapes together: stable, so that a request's items
        # keep their order
        slots = sorted(((t, i) for t, pos in pieces for i in pos), key=lambda s: s[0].order_key(s[1]))
        first = slots[0][0]
        batch = [t.items[i] for t, i in slots]
        encoder = first.encoder
        head_before = getattr(encoder, "head_seconds", 0.0)
        t0 = time.perf_counter()
        try:
            out = self._call(first, batch, slots, backend)
        except BaseException as exc:  # every request in the batch learns why
            logger.exception("a batched encode failed")
            for t, _ in pieces:
                with self._cond:
                    if t in self._queue:
                        self._queue.remove(t)
                        self._queued_clips -= len(t.items) - t.taken
                self._fail(t, exc)
            return
        seconds = time.perf_counter() - t0
        head = getattr(encoder, "head_seconds", 0.0) - head_before
        frames = sum(t.cost(i) for t, i in slots)
        for (t, i), emb in zip(slots, out, strict=True):
            t.results[i] = emb
        with self._cond:  # another worker may be finishing other pieces of the same requests
            for t, pos in pieces:
                share = sum(t.cost(i) for i in pos) / max(frames, 1)
                t.compute_s += max(0.0, t0 + seconds - max(t0, t.busy_until))  # overlapping batches once
                t.busy_until = max(t.busy_until, t0 + seconds)
                t.head_s += head * share
                t.finished += len(pos)
                if t.finished == len(t.items):
                    self._finish(t)
        if self.on_batch is not None:
            try:
                self.on_batch(BatchStats(len(batch), frames, len(pieces), seconds, first.kind))
            except Exception:
                logger.exception("the batch observer failed")

    @staticmethod
    def _call(first: EncodeTicket, batch: list, slots: list, backend=None) -> list:
        """One shared backbone call over ``batch`` (items of ``first``'s kind, each from the
        (ticket, position) in ``slots``), one result each: queries and images in the worker's model
        process (``backend``) when it holds the encoder's backbone."""
        encoder = first.encoder
        if first.kind == QUERIES:
            if _holds(backend, getattr(encoder, "backbone", None)):
                return list(backend.embed_texts(batch, instruction=encoder.instruction))
            return list(encoder.embed_queries(batch))
        if first.kind == IMAGES:
            if _holds(backend, encoder):
                return list(backend.embed_images(batch))
            return list(encoder.embed_images(batch))
        texts = None if first.texts is None else [t.texts[i] for t, i in slots]
        queries = None if first.queries is None else torch.stack([t.queries[i] for t, i in slots])
        extra = {} if first.query_states is None else {"query_states": [t.query_states[i] for t, i in slots]}
        return encoder.encode(batch, texts=texts, queries=queries, exit_policy=first.exit_policy, **extra)


def _holds(backend, backbone) -> bool:
    """Whether ``backend`` (a model process, or None) runs a copy of ``backbone``."""
    return backend is not None and backend.fingerprint == getattr(backbone, "fingerprint", None)


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
