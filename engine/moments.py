"""Where in a video the query matched, from per-frame relevance q·f_c over its frame bank.

One rule for every mode and tier: a moment is the run of bank frames around the relevance peak
that stays at or above half-way from the video's own median relevance to its peak, its edges
half-way to the neighbouring bank frames (:func:`relevance_runs`, :func:`run_span`);
:mod:`engine.refine` then moves the edges of the top results to the source's frame rate. The
relevance timeline (the strip under each result) bins the same scores, or shows the streaming
head's readout similarity q·z_t after each clip when the head ranked the result.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch


def relevance_scores(embeddings: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Frame-bank relevance q · f_c: [C, d] float16 x [d] -> [C] float32 (float32 arithmetic).

    A float16 bank is widened by torch (several times faster than numpy's float16 cast, which
    dominated the cost on hour-long banks) a block of rows at a time into a buffer that stays in
    cache, so the bank is read once and no float32 copy of it is written (benchmarks/bench_bank_scale.py)."""
    e = np.asarray(embeddings)
    qv = np.asarray(q, dtype=np.float32)
    if e.dtype != np.float16 or e.ndim != 2 or not e.flags.c_contiguous or e.shape[0] == 0:
        return np.asarray(e, dtype=np.float32) @ qv
    bank, qt = _torch_view(e), torch.from_numpy(qv)
    n, d = bank.shape
    rows = max(1, _RELEVANCE_BLOCK // max(1, d))
    if n <= rows:
        return (bank.float() @ qt).numpy()
    out = torch.empty(n, dtype=torch.float32)
    buf = torch.empty((rows, d), dtype=torch.float32)
    for s in range(0, n, rows):
        m = min(rows, n - s)
        buf[:m].copy_(bank[s : s + m])
        torch.mv(buf[:m], qt, out=out[s : s + m])
    return out.numpy()


_RELEVANCE_BLOCK = 1 << 18  # float32 elements widened at a time (1 MiB)


_viewed_readonly = False


def _torch_view(array: np.ndarray) -> torch.Tensor:
    """A zero-copy torch view of a (possibly read-only, memory-mapped) bank; it is only read. torch
    warns once about read-only arrays: that first time is silenced."""
    global _viewed_readonly
    if array.flags.writeable or _viewed_readonly:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        view = torch.from_numpy(array)
    _viewed_readonly = True
    return view


def frame_span(indices, fps: float, duration: float | None) -> tuple[float, float]:
    """[first frame's time, one frame past the last frame's time], clipped to the duration."""
    indices = np.asarray(indices)
    start = float(indices.min()) / fps
    end = float(indices.max() + 1) / fps
    if duration is not None:
        end = min(end, duration)
    return start, max(start, end)


def duration_of(record) -> float | None:
    value = getattr(record, "duration_s", None)
    return float(value) if value is not None else None


TIMELINE_POINTS = 120  # a frame-bank timeline is binned to at most this many points


@dataclass
class Timeline:
    """Relevance over time: ``source`` "streaming" (q·z_t after each streamed clip) or "relevance"
    (frame-bank relevance q·f_c, max-pooled into at most TIMELINE_POINTS bins); points are
    (start_s, end_s, value)."""

    source: str
    points: list[tuple[float, float, float]]


def relevance_timeline(
    timestamps: np.ndarray, relevance: np.ndarray, frame_s: float, duration: float | None
) -> Timeline:
    """The frame bank's relevance over time; each bank frame stands until the next one."""
    t = np.asarray(timestamps, dtype=np.float64)
    r = np.asarray(relevance, dtype=np.float64)
    if len(t) == 0:
        return Timeline("relevance", [])
    ends = np.append(t[1:], max(t[-1] + frame_s, duration or 0.0))
    # the bins np.array_split(range(len(t)), k) makes: the first len(t) % k hold one row more
    k = min(TIMELINE_POINTS, len(t))
    size, extra = divmod(len(t), k)
    firsts = np.arange(k) * size + np.minimum(np.arange(k), extra)
    lasts = np.append(firsts[1:], len(t)) - 1
    peaks = np.maximum.reduceat(r, firsts)
    return Timeline(
        "relevance",
        list(zip(t[firsts].tolist(), ends[lasts].tolist(), peaks.tolist(), strict=True)),
    )


# -- moments from per-frame relevance (one rule for every mode) ----------------------------------
# A moment is the run of bank frames around the relevance peak that stays at or above half-way
# from the video's own median relevance to its peak (the full width at half maximum, on the
# video's own scale: a grey haystack sets the floor, the event sets the peak).
MOMENT_LEVEL = 0.5


@dataclass
class RelevanceRun:
    """Rows ``first..last`` of a bank (chronological) around ``peak``, above ``threshold``; the
    moment's edges lie between ``first - 1`` and ``first`` and between ``last`` and ``last + 1``."""

    first: int
    last: int
    peak: int
    threshold: float


def relevance_runs(relevance: np.ndarray, *, level: float = MOMENT_LEVEL, limit: int | None = None):
    """The runs above the half-way threshold, best peak first (at most ``limit``): the first is the
    run around the global peak."""
    r = np.asarray(relevance, dtype=np.float64)
    n = len(r)
    if n == 0:
        return []
    median = float(np.median(r))
    threshold = median + level * (float(r.max()) - median)
    # each run's first and last rows from the edges of the above-threshold mask (no loop over frames)
    step = np.diff(np.concatenate(([0], (r >= threshold).astype(np.int8), [0])))
    firsts, lasts = np.flatnonzero(step == 1), np.flatnonzero(step == -1) - 1
    if limit == 1 and len(firsts):  # the run around the global peak (the first rows' on a tie)
        k = int(np.searchsorted(lasts, int(np.argmax(r))))
        firsts, lasts = firsts[k : k + 1], lasts[k : k + 1]
    runs = [
        RelevanceRun(int(i), int(j), int(i) + int(np.argmax(r[i : j + 1])), threshold)
        for i, j in zip(firsts, lasts, strict=True)
    ]
    runs.sort(key=lambda run: (-r[run.peak], run.first))
    return runs[:limit] if limit is not None else runs


def run_span(run: RelevanceRun, timestamps: np.ndarray, frame_s: float, duration: float | None):
    """The moment of ``run`` at bank resolution: each edge half-way between the last bank frame
    outside and the first inside (the event's edge lies somewhere between them)."""
    t = np.asarray(timestamps, dtype=np.float64)
    start = 0.5 * (t[run.first - 1] + t[run.first]) if run.first > 0 else 0.0
    if run.last + 1 < len(t):
        end = 0.5 * (t[run.last] + t[run.last + 1])
    else:
        end = t[run.last] + frame_s
        if duration is not None:
            end = max(end, duration)
    if duration is not None:
        end = min(end, duration)
    return float(start), float(max(start, end))


def bank_relevance(index, hit, q: np.ndarray) -> np.ndarray:
    """q·f_c over ``hit``'s frame bank: computed on first use in a search and kept on the hit per query
    vector, so the frame tier, selection, evidence, moments, timelines and clips of one search share one
    product per vector (q, and the selection query q_sel of a query about time: each its own)."""
    vector = np.ascontiguousarray(q, dtype=np.float32).reshape(-1)
    key = vector.tobytes()
    got = hit.bank_relevance.get(key)
    if got is None:
        got = hit.bank_relevance[key] = relevance_scores(index.frame_bank(hit.video_id).embeddings, vector)
    return got
