"""The batch policy: when a waiting batch of backbone work starts, which kind goes first, and how
much of it one worker takes (engine.runtime.batching's rules, as one small object the batch queue
asks; a scheduler behind an interface, so that a policy can change without touching the queue).

- the kinds go in the order of :data:`KIND_ORDER` (a search's refine frames, then queries, then the
  heavy tier's clips), so cheap work never waits behind another search's heavy encodes;
- a batch starts when ``max_frames`` frames of its kind wait, when its oldest item has waited
  ``max_wait_s``, or as soon as no other search could join it (every running search is in the batcher);
- a worker takes its even share of what waits of the batch's kind with the other free workers (at
  least ``min_split`` frames, at most ``max_frames``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CLIPS", "IMAGES", "KIND_ORDER", "MIN_SPLIT_FRAMES", "QUERIES", "BatchPolicy"]

CLIPS, QUERIES, IMAGES = "clips", "queries", "images"  # the kinds of work (engine.runtime.batching)
# which kind goes first when several wait: the frames that finish a search, then the queries that
# start one, then the heavy tier's clips (cheap work never waits behind expensive work)
KIND_ORDER = {IMAGES: 0, QUERIES: 1, CLIPS: 2}
# the smallest share of a batch worth a call of its own on another worker: on a CPU an image costs
# the same from 8 images a call on, and one image a call costs three times that
# (benchmarks/bench_backbone_threads.py)
MIN_SPLIT_FRAMES = 8


@dataclass(frozen=True)
class BatchPolicy:
    max_wait_s: float = 0.005
    max_frames: int = 128
    min_split: int = MIN_SPLIT_FRAMES

    def first(self, queue):
        """The ticket a batch forms around: the first waiting one of the cheapest kind."""
        return min(queue, key=lambda t: KIND_ORDER[t.kind])

    def wait_s(self, head, *, waiting_frames: int, others_may_join: bool, now: float) -> float:
        """How much longer the batch around ``head`` waits for more work (0 or less: start now)."""
        if waiting_frames >= self.max_frames or not others_may_join:
            return 0.0
        return head.submitted + self.max_wait_s - now

    def budget(self, *, waiting_frames: int, free_workers: int) -> int:
        """Frames this worker's batch takes: its even share of what waits, within the bounds."""
        share = -(-waiting_frames // max(1, free_workers))
        return min(self.max_frames, max(self.min_split, share))
