import pytest
import torch

from models.compression import compress_evidence


def _batch(seed=0, b=3, s=40, d=16):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(b, s, d, generator=g)
    mask = torch.zeros(b, s, dtype=torch.bool)
    mask[0, :40] = True  # 40 valid
    mask[1, 5:15] = True  # 10 valid
    mask[2, ::3] = True  # 14 valid, interleaved
    return hidden, mask


def test_output_bounded_by_budget():
    hidden, mask = _batch()
    ev, ev_mask = compress_evidence(hidden, mask, 12)
    assert ev.shape == (3, 12, 16) and ev_mask.shape == (3, 12)
    assert ev_mask.sum(1).tolist() == [12, 10, 12]
    ev, ev_mask = compress_evidence(hidden, mask, 256)  # width shrinks to the largest valid count
    assert ev.shape == (3, 40, 16)
    assert ev_mask.sum(1).tolist() == [40, 10, 14]


def test_identity_when_under_budget():
    hidden, mask = _batch()
    ev, ev_mask = compress_evidence(hidden, mask, 14)
    torch.testing.assert_close(ev[1, :10], hidden[1, 5:15], rtol=0, atol=0)
    torch.testing.assert_close(ev[2, :14], hidden[2, ::3], rtol=0, atol=0)
    assert torch.all(ev[1, 10:] == 0) and not ev_mask[1, 10:].any()


def test_masked_states_ignored():
    hidden, mask = _batch()
    ev, ev_mask = compress_evidence(hidden, mask, 8)
    garbage = hidden.clone()
    garbage[~mask] = torch.randn(int((~mask).sum()), 16) * 100
    ev2, ev_mask2 = compress_evidence(garbage, mask, 8)
    assert torch.equal(ev, ev2) and torch.equal(ev_mask, ev_mask2)


def test_merged_tokens_are_means_of_clusters():
    # Three well separated directions, repeated in temporal blocks: with M=3 each token is a block mean.
    d = 8
    base = torch.eye(d)[:3] * 5
    states = torch.cat(
        [base[i] + 0.01 * torch.randn(6, d, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    )
    ev, ev_mask = compress_evidence(states[None], torch.ones(1, 18, dtype=torch.bool), 3)
    assert ev_mask.all()
    for i in range(3):
        torch.testing.assert_close(ev[0, i], states[6 * i : 6 * i + 6].mean(0))


def test_deterministic_dtype_device_and_empty_rows():
    hidden, mask = _batch()
    mask[1] = False
    a = compress_evidence(hidden.double(), mask, 8)
    b = compress_evidence(hidden.double(), mask, 8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert a[0].dtype == torch.float64
    assert not a[1][1].any() and torch.all(a[0][1] == 0)
    half, _ = compress_evidence(hidden.bfloat16(), mask, 8)
    assert half.dtype == torch.bfloat16
    none, none_mask = compress_evidence(hidden, torch.zeros_like(mask), 8)
    assert none.shape == (3, 0, 16) and none_mask.shape == (3, 0)


def test_rejects_bad_input():
    hidden, mask = _batch()
    with pytest.raises(ValueError):
        compress_evidence(hidden, mask, 0)
    with pytest.raises(ValueError):
        compress_evidence(hidden, mask[:, :5], 4)


def test_duplicate_anchors_stay_finite():
    # Parallel states tie on cosine similarity: every anchor must still own at least itself.
    states = torch.ones(1, 20, 4) * torch.arange(1, 21).float()[None, :, None]
    ev, ev_mask = compress_evidence(states, torch.ones(1, 20, dtype=torch.bool), 5)
    assert ev_mask.all() and torch.isfinite(ev).all()
    assert torch.all(ev[0, 1:, 0] > 1)  # later anchors are not collapsed into the first one
