"""Where in a video the query matched: frame relevance, the best streaming step, the best window.

- Streaming encodings: the span of the clip t* = argmax_t (q·z_t - q·z_{t-1}), the step whose
  readout gained the most similarity to the query, with z_0 the readout of the initial think tokens
  H_0 (Eq. 6, 9); the span runs from the clip's first frame to one frame past its last.
- Otherwise (one-shot encodings, stage-1 evidence): the window of L consecutive evidence frames with
  the highest mean relevance, the same span rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def relevance_scores(embeddings: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Frame-bank relevance q · f_c: [C, d] float16 x [d] -> [C] float32."""
    return np.asarray(embeddings, dtype=np.float32) @ np.asarray(q, dtype=np.float32)


def best_step(step_scores: np.ndarray, baseline: float) -> int:
    """argmax_t (q·z_t - q·z_{t-1}) with q·z_0 = ``baseline``; ties go to the earliest step."""
    s = np.asarray(step_scores, dtype=np.float64)
    gains = np.diff(np.concatenate([[baseline], s]))
    return int(np.argmax(gains))


def best_window(indices: np.ndarray, relevance: np.ndarray, length: int, fps: float, duration: float | None):
    """Span of the ``length`` consecutive frames with the highest mean relevance."""
    n = len(indices)
    if n == 0:
        return None
    length = max(1, min(length, n))
    sums = np.convolve(np.asarray(relevance, dtype=np.float64), np.ones(length), mode="valid")
    start = int(np.argmax(sums))
    return frame_span(np.asarray(indices)[start : start + length], fps, duration)


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
    bins = np.array_split(np.arange(len(t)), min(TIMELINE_POINTS, len(t)))
    return Timeline(
        "relevance", [(float(t[b[0]]), float(ends[b[-1]]), float(r[b].max())) for b in bins if len(b)]
    )


def clip_windows(indices: np.ndarray, relevance: np.ndarray, length: int, fps: float, duration: float | None):
    """Non-overlapping windows of ``length`` consecutive bank frames, best mean relevance first:
    (rows, mean relevance, span) for each, greedily (the best window, then the best one left...)."""
    n = len(indices)
    if n == 0:
        return []
    length = max(1, min(length, n))
    means = np.convolve(np.asarray(relevance, dtype=np.float64), np.ones(length), mode="valid") / length
    taken = np.zeros(n, dtype=bool)
    out = []
    for start in np.argsort(-means, kind="stable"):
        rows = np.arange(start, start + length)
        if taken[rows].any():
            continue
        taken[rows] = True
        out.append((rows, float(means[start]), frame_span(np.asarray(indices)[rows], fps, duration)))
    out.sort(key=lambda w: -w[1])
    return out
