"""The moment rule and the relevance timeline, vectorised, give what the frame-by-frame loops gave
(the loops are kept here as the reference): the same runs, peaks and order, the same bins."""

from __future__ import annotations

import numpy as np
import pytest

from engine.moments import MOMENT_LEVEL, TIMELINE_POINTS, relevance_runs, relevance_timeline


def _runs_by_loop(r, level=MOMENT_LEVEL, limit=None):
    median = float(np.median(r))
    threshold = median + level * (float(r.max()) - median)
    above, runs, i, n = r >= threshold, [], 0, len(r)
    while i < n:
        if not above[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and above[j + 1]:
            j += 1
        runs.append((i, j, i + int(np.argmax(r[i : j + 1])), threshold))
        i = j + 1
    runs.sort(key=lambda run: (-r[run[2]], run[0]))
    return runs[:limit] if limit is not None else runs


def _timeline_by_loop(t, r, frame_s, duration):
    ends = np.append(t[1:], max(t[-1] + frame_s, duration or 0.0))
    bins = np.array_split(np.arange(len(t)), min(TIMELINE_POINTS, len(t)))
    return [(float(t[b[0]]), float(ends[b[-1]]), float(r[b].max())) for b in bins if len(b)]


@pytest.mark.parametrize("seed", range(40))
def test_the_vectorised_rule_gives_the_loops_runs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    r = rng.normal(size=n).astype(np.float32)
    if seed % 4 == 0:  # ties at the peak, in separate runs
        r[rng.choice(n, size=min(n, 3), replace=False)] = r.max() + 1
    if seed % 5 == 0:  # a plateau
        r[:] = np.round(r)
    for limit in (None, 1, 3):
        got = [(x.first, x.last, x.peak, x.threshold) for x in relevance_runs(r, limit=limit)]
        assert got == _runs_by_loop(r.astype(np.float64), limit=limit)


@pytest.mark.parametrize("n", [1, 2, 119, 120, 121, 250, 3601])
def test_the_vectorised_timeline_bins_like_array_split(n):
    rng = np.random.default_rng(n)
    t = np.sort(rng.uniform(0, n, size=n))
    r = rng.normal(size=n).astype(np.float32)
    got = relevance_timeline(t, r, 0.25, float(n) + 1).points
    assert got == _timeline_by_loop(t, r.astype(np.float64), 0.25, float(n) + 1)


def test_a_hits_bank_relevance_is_kept_per_query_vector():
    """One search scores a bank under q (the frame tier, evidence, moments) and, for a query about time,
    under its selection query q_sel (engine.search.cascade): each vector gets its own product, however
    the calls interleave (a relevance kept for q and handed back for q_sel once cut every moment by q)."""
    from types import SimpleNamespace

    from engine.moments import bank_relevance
    from engine.results import Hit

    rng = np.random.default_rng(0)
    bank = SimpleNamespace(embeddings=rng.normal(size=(50, 8)).astype(np.float16))
    index = SimpleNamespace(frame_bank=lambda video_id: bank)
    hit = Hit("v", 0.0, 0.0, 1)
    q, q_sel = rng.normal(size=8).astype(np.float32), rng.normal(size=8).astype(np.float32)
    want_q = bank.embeddings.astype(np.float32) @ q
    want_sel = bank.embeddings.astype(np.float32) @ q_sel
    for vector, want in ((q, want_q), (q_sel, want_sel), (q, want_q), (q_sel.astype(np.float64), want_sel)):
        np.testing.assert_allclose(bank_relevance(index, hit, vector), want, rtol=1e-4, atol=1e-4)
    assert bank_relevance(index, hit, q) is bank_relevance(index, hit, q)  # one product per vector
