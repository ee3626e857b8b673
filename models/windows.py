"""Query-aware selection of moments: the frames a query-conditioned streaming head reads (Eq. 2-3).

For a query about time (something moves, grows or turns colour; one event before another; how often
one happens) the evidence lies in a few short moments: the frames of one changing event, the
showings of two events, each showing of a counted one. Selection therefore goes dense around the
candidate's relevant moments, in time order:

    r_c = q · f_c over the candidate's frame bank (about one frame a second)      (relevance)
    W times: the unchosen frame of highest relevance is a peak p; its window is the run of
             frames around p whose relevance lies above  median(r) + level * (r_p - median(r)),
             at most ``frames`` long, widened by ``margin`` frames of context on each side
             (a window keeps one frame clear of the others)                      (Eq. 2: I(V, c))
    each window read densely: ``reads`` source frames evenly from its first to its last bank frame,
             at the source's own rate, each with the frame ``pair_s`` after it  (Eq. 2: dense)
    the windows in chronological order; each window is one clip C_t              (Eq. 3: clips)

so the head streams T = W clips, one moment each, in the order they happened: the frames of a moving
shape in one clip, in order (what no single frame shows), the two events of an order query in two
clips whose order is the video's, each showing of a counted event in a clip of its own. The windows
past the real moments hold the next best frames (haystack, or other events): the head learns to read
them as "nothing here". The plan is recorded with a trained head (``WindowPlan``) and serving cuts
windows by the same rule.

Pure numpy; no model dependency.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["MOTION_PAIR_S", "WindowPlan", "moment_plan", "moment_windows", "played_backwards", "window_reads"]

# Seconds between the two frames of a temporal pair when a moment is read to see motion: what the
# tiny-world motion recipes train clips on (training.backbone_config), and what a one-shot tier that
# reads moments uses (``moment_plan``).
MOTION_PAIR_S = 0.2


@dataclass(frozen=True)
class WindowPlan:
    """How a candidate's moments are cut (module docstring)."""

    windows: int = 4  # W = T: clips per candidate
    frames: int = 8  # L: at most this many consecutive bank frames per window (context included)
    level: float = 0.5  # a window spans frames above median + level * (peak - median)
    margin: int = 1  # frames of context on each side of a window's run
    # each bank frame read with the source frame this many seconds after it (0: none): the backbone
    # groups frames in temporal pairs (Qwen3-VL's temporal patch of 2), so a pair a moment apart
    # shows how things move within one patch (``window_reads``)
    pair_s: float = 0.0
    # 0: a window reads its bank frames; N: N source frames evenly from its first to its last bank
    # frame (``window_reads``). A bank of about one frame a second cuts a 3-6 s change into a few
    # frames, and a window of them often holds one end of it (the end where the shape is largest, or
    # matches the query best); N frames spread over the whole run show the change from end to end
    reads: int = 0

    def __post_init__(self) -> None:
        if (
            self.windows < 1
            or self.frames < 2
            or self.margin < 0
            or not 0.0 <= self.level < 1.0
            or self.pair_s < 0
            or self.reads < 0
            or self.reads == 1
        ):
            raise ValueError(f"invalid window plan {self}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> WindowPlan:
        return cls(**data)  # a plan recorded before ``reads`` existed reads its bank frames (0)


def moment_windows(relevance, plan: WindowPlan = WindowPlan()) -> list[np.ndarray]:
    """The candidate's moments for a query: up to ``plan.windows`` windows of consecutive frame-bank
    positions (int64 arrays, each ascending, at least two frames where the bank has them), in
    chronological order. ``relevance`` [C]: q · f_c over the bank."""
    r = np.asarray(relevance, dtype=np.float64).reshape(-1)
    count = r.shape[0]
    if count == 0:
        return []
    centre = float(np.median(r))
    taken = np.zeros(count, dtype=bool)  # chosen frames and the one frame kept clear around each window
    windows = []
    for _ in range(plan.windows):
        free = np.where(taken, -np.inf, r)
        if not np.isfinite(free).any():
            break
        peak = int(np.argmax(free))
        floor = centre + plan.level * (r[peak] - centre)
        first = last = peak
        run_cap = max(1, plan.frames - 2 * plan.margin)
        while last - first + 1 < run_cap:  # grow the run toward the stronger neighbour above the floor
            left = first - 1 if first > 0 and not taken[first - 1] and r[first - 1] >= floor else None
            right = last + 1 if last + 1 < count and not taken[last + 1] and r[last + 1] >= floor else None
            if left is None and right is None:
                break
            if right is None or (left is not None and r[left] >= r[right]):
                first = left
            else:
                last = right
        for _ in range(plan.margin):  # context on either side, where it is free
            if first > 0 and not taken[first - 1] and last - first + 1 < plan.frames:
                first -= 1
            if last + 1 < count and not taken[last + 1] and last - first + 1 < plan.frames:
                last += 1
        if first == last:  # a clip holds at least a temporal pair of frames
            if last + 1 < count and not taken[last + 1]:
                last += 1
            elif first > 0 and not taken[first - 1]:
                first -= 1
        windows.append(np.arange(first, last + 1, dtype=np.int64))
        taken[max(0, first - 1) : last + 2] = True
    return sorted(windows, key=lambda w: int(w[0]))


# How a moment is read to see motion (``moment_plan``): the run of at most MOTION_WINDOW_FRAMES bank
# frames above the floor, no context frames, read as MOTION_WINDOW_READS temporal pairs spread from
# its first to its last frame (the motion recipe trains clips of 2-4 temporal pairs over an event).
# Chosen on development seeds 0, 4 and 5 of benchmarks/bench_quality.py's time collections with the
# shipped weights, one-shot reading one moment of each video of a reversal pair (training/tiny_world/
# README.md, "Reading a whole moment"); the plan before (at most 4 bank frames with a frame of
# context either side, read as they are) held one end of a change as often as the whole of it.
MOTION_WINDOW_FRAMES = 8
MOTION_WINDOW_READS = 4


def moment_plan(moments: int) -> WindowPlan | None:
    """The window plan that reads each candidate's top ``moments`` moments to see motion: each the
    run of at most ``MOTION_WINDOW_FRAMES`` bank frames around a relevance peak, read as
    ``MOTION_WINDOW_READS`` temporal pairs ``MOTION_PAIR_S`` apart spread over it (None for 0:
    Q-Frame's K' frames)."""
    if not moments:
        return None
    return WindowPlan(
        windows=moments,
        frames=MOTION_WINDOW_FRAMES,
        margin=0,
        pair_s=MOTION_PAIR_S,
        reads=MOTION_WINDOW_READS,
    )


def window_reads(
    windows: list[np.ndarray], frame_indices, fps: float, frame_count: int, plan: WindowPlan
) -> tuple[np.ndarray, list[np.ndarray]]:
    """The source frames a candidate's windows read, chronological, and each window's clip as
    positions into them: the windows' bank frames (``frame_indices`` [C] maps bank positions to
    source frames), or, with ``plan.reads`` = N, N source frames evenly from a window's first bank
    frame to its last (rounded to the nearest source frame); each followed, with ``plan.pair_s`` > 0,
    by the source frame ``pair_s`` seconds later (at least the next one, at most the video's last), so
    that every temporal pair of a clip is a moment and a moment after it."""
    indices = np.asarray(frame_indices, dtype=np.int64)
    step = max(1, round(plan.pair_s * fps)) if plan.pair_s > 0 else 0
    reads, segments, at = [], [], 0
    for window in windows:
        bank = indices[np.asarray(window, dtype=np.int64)]
        if plan.reads and len(bank):
            bank = np.round(np.linspace(bank[0], bank[-1], plan.reads)).astype(np.int64)
        if step:
            bank = np.stack([bank, np.minimum(bank + step, max(frame_count - 1, 0))], axis=1).reshape(-1)
        reads.append(bank)
        segments.append(np.arange(at, at + len(bank), dtype=np.int64))
        at += len(bank)
    read = np.concatenate(reads) if reads else np.zeros(0, dtype=np.int64)
    return read, segments


def played_backwards(read, segments) -> tuple[np.ndarray, np.ndarray]:
    """Each moment of a candidate played backwards, the moments in their own order: ``order``, the
    positions into ``read`` (and its decoded frames) to take the frames from, and the source frame
    indices the backwards clip's prompt gives them (each window's own, mirrored within it, so still
    ascending). ``segments``: each clip's positions into ``read`` (``window_reads``), consecutive and
    ascending.

    A shape shown still reads nearly the same either way; a change reads as its opposite (a shape
    moving left as one moving right, red turning blue as blue turning red), so the streaming head's
    q · z_T less its backwards reading tells a change the query asks for from a still showing of the
    same shape, which single frames cannot (engine.search.cascade)."""
    read = np.asarray(read, dtype=np.int64)
    order = np.arange(len(read), dtype=np.int64)
    mirrored = read.copy()
    for segment in segments:
        seg = np.asarray(segment, dtype=np.int64)
        if len(seg) == 0:
            continue
        order[seg] = seg[::-1]
        mirrored[seg] = read[seg[0]] + read[seg[-1]] - read[seg[::-1]]
    return order, mirrored
