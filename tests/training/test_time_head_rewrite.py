"""``--rewrite``: a training query's right video rewritten so that it no longer holds what is asked, over
the same background (one showing more or fewer; the two events swapped), as a negative."""

from __future__ import annotations

import numpy as np

from training.time_head import rewritten, rule_score, showings


def _bank(rng, at: dict[int, list[int]], length: int = 90) -> np.ndarray:
    x = rng.normal(0, 0.03, size=(length, 2)).astype(np.float32)
    for k, starts in at.items():
        for s in starts:
            x[s : s + 3, k] += rng.uniform(0.4, 0.8)
    return x


def test_a_count_gains_or_loses_exactly_one_showing_over_the_same_frames():
    seen = set()
    for seed in range(30):
        rng = np.random.default_rng(seed)
        x = _bank(rng, {0: [10, 45]})[:, :1]
        assert len(showings(x[:, 0])) == 2
        out = rewritten(x, "count:2", rng)
        n = len(showings(out[:, 0]))
        assert n in (1, 3)
        seen.add(n)
        assert rule_score(out, "count:2") < rule_score(x, "count:2")  # the rule reads it as wrong too
        if n == 1:  # one showing replaced by background frames: the length kept
            assert len(out) == len(x)
        else:  # one showing copied in: every frame of the video is still there, in order
            assert len(out) > len(x)
            kept = [i for i in range(len(out)) if any(np.array_equal(out[i], r) for r in x)]
            assert len(kept) >= len(x)
    assert seen == {1, 3}
    once = _bank(np.random.default_rng(0), {0: [20]})[:, :1]
    assert all(
        len(showings(rewritten(once, "count:1", np.random.default_rng(s))[:, 0])) == 2 for s in range(5)
    )


def test_an_order_swaps_its_two_events_and_keeps_every_frame():
    rng = np.random.default_rng(1)
    x = _bank(rng, {0: [15], 1: [60]})
    out = rewritten(x, "order", rng)
    assert sorted(map(tuple, out.round(6).tolist())) == sorted(map(tuple, x.round(6).tolist()))
    assert int(np.argmax(out[:, 1])) < int(np.argmax(out[:, 0]))  # the second event now shows first
    assert rule_score(out, "order") < 0.5 * rule_score(x, "order")


def test_what_cannot_be_rewritten_is_none():
    rng = np.random.default_rng(2)
    mirror = _bank(rng, {0: [60], 1: [15]})  # already the other order: nothing to swap forwards
    assert rewritten(mirror, "order", rng) is None
    flat = np.zeros((40, 1), np.float32)
    flat[:, 0] = 0.5  # every frame a showing: no quiet frame to put another in
    assert rewritten(flat, "count:1", rng) is None
