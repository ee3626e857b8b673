"""``--dim``: a training query's event shown fainter, alike in every candidate, so the head meets
events that peak low (a white shape on grey) as it meets them in serving."""

from __future__ import annotations

import numpy as np

from training.time_head import DIM_LOW, TimeQueryItem, dimmed


def _item(columns: int) -> TimeQueryItem:
    rng = np.random.default_rng(0)
    rel = {k: rng.uniform(0.1, 1.0, size=(30, columns)).astype(np.float32) for k in ("a", "b", "c")}
    return TimeQueryItem("q", "order" if columns == 2 else "count:2", "a", "b", rel)


def test_one_event_is_dimmed_by_one_factor_in_every_candidate():
    item = _item(2)
    seen = set()
    for seed in range(40):
        out = dimmed(item, np.random.default_rng(seed))
        ratios = {k: out.relevance[k] / item.relevance[k] for k in item.relevance}
        factors = np.stack([r.mean(axis=0) for r in ratios.values()])  # [candidates, events]
        for r in ratios.values():  # one factor per event column, over every frame
            assert np.allclose(r, r[0], rtol=1e-5)
        assert np.allclose(factors, factors[0], rtol=1e-5)  # the same in every candidate
        kept = np.isclose(factors[0], 1.0)
        assert kept.sum() >= 1  # at most one event is dimmed
        low = factors[0][~kept]
        assert np.all((low >= DIM_LOW - 1e-6) & (low < 1.0))
        seen.update(np.flatnonzero(~kept).tolist())
        assert out.relevance["a"].dtype == np.float32
    assert seen == {0, 1}  # either event may be the faint one
    assert np.array_equal(item.relevance["a"], _item(2).relevance["a"])  # the item itself is untouched


def test_a_count_query_has_one_event_to_dim():
    item = _item(1)
    factors = set()
    for seed in range(20):
        out = dimmed(item, np.random.default_rng(seed))
        assert out.relevance["a"].shape == (30, 1)
        factors.add(round(float((out.relevance["b"] / item.relevance["b"]).mean()), 4))
    assert 1.0 in factors and len(factors) > 1  # the missing slot's draw leaves it whole
