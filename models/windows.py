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

__all__ = ["WindowPlan", "moment_windows"]


@dataclass(frozen=True)
class WindowPlan:
    """How a candidate's moments are cut (module docstring)."""

    windows: int = 4  # W = T: clips per candidate
    frames: int = 8  # L: at most this many consecutive bank frames per window (context included)
    level: float = 0.5  # a window spans frames above median + level * (peak - median)
    margin: int = 1  # frames of context on each side of a window's run

    def __post_init__(self) -> None:
        if self.windows < 1 or self.frames < 2 or self.margin < 0 or not 0.0 <= self.level < 1.0:
            raise ValueError(f"invalid window plan {self}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> WindowPlan:
        return cls(**data)


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
