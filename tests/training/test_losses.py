"""Each loss of Eq. 11-14 against values computed by hand on small tensors."""

import math

import pytest
import torch
import torch.nn.functional as F

from training.losses import (
    clip_teacher,
    clip_teacher_loss,
    co_positive_mask,
    contrastive_loss,
    distill_loss,
    final_loss,
    step_loss,
    step_loss_conditioned,
    total_loss,
)


def _ce(row, target, excluded=()):
    """-log softmax by hand over the kept entries of one row."""
    kept = [v for j, v in enumerate(row) if j == target or j not in excluded]
    return -(row[target] - math.log(sum(math.exp(v) for v in kept)))


def test_contrastive_masks_co_positives_but_keeps_target():
    logits = torch.tensor([[2.0, 1.0, 0.5], [0.0, 3.0, 1.0]], dtype=torch.float64)
    target = torch.tensor([0, 1])
    exclude = torch.tensor(
        [[True, True, False], [False, False, False]]
    )  # row 0 tries to exclude its own target
    got = contrastive_loss(logits, target, exclude)
    want = (_ce([2.0, 1.0, 0.5], 0, excluded={1}) + _ce([0.0, 3.0, 1.0], 1)) / 2
    assert got.item() == pytest.approx(want, abs=1e-12)


def test_final_loss_indexable_with_co_positive_group():
    a = F.normalize(torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=torch.float64), dim=-1)
    b = F.normalize(torch.tensor([[1.0, 0.2], [0.8, 0.6], [-0.2, 1.0]], dtype=torch.float64), dim=-1)
    tau = 0.5
    groups = ["v1", "v1", "v2"]  # pairs 0 and 1 come from the same video
    exclude = co_positive_mask(groups)
    assert exclude.tolist() == [[False, True, False], [True, False, False], [False, False, False]]
    got = final_loss(a, b, tau, exclude=exclude)
    s = (a @ b.T / tau).tolist()
    want = (_ce(s[0], 0, {1}) + _ce(s[1], 1, {0}) + _ce(s[2], 2)) / 3
    assert got.item() == pytest.approx(want, abs=1e-12)


def test_co_positive_mask_same_item_without_group():
    mask = co_positive_mask([None, None, "g"], ["x", "x", "y"])
    assert mask.tolist() == [[False, True, False], [True, False, False], [False, False, False]]


def test_final_loss_conditioned():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    cands = torch.tensor(
        [[[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], [[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64
    )
    target = torch.tensor([0, 2])
    got = final_loss(q, cands, 1.0, target=target)
    want = (_ce([1.0, 0.0, 0.6], 0) + _ce([0.8, 0.0, 1.0], 2)) / 2
    assert got.item() == pytest.approx(want, abs=1e-12)


def test_final_and_step_losses_add_the_offset_before_the_temperature():
    """The rerank head trains beside the frame bank's terms (training.moment_head.frame_terms): the
    logits are (q · b_ij + offset_ij) / tau, at the final readout and at every step."""
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    cands = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]], dtype=torch.float64)
    offset = torch.tensor([[0.0, 1.5, 0.2]], dtype=torch.float64)
    want = _ce([2 * 1.0, 2 * 1.5, 2 * 0.8], 0)
    assert final_loss(q, cands, 0.5, target=torch.tensor([0]), offset=offset).item() == pytest.approx(
        want, abs=1e-12
    )
    steps = cands[:, :, None, :]  # [1, 3, 1, 2]
    valid = torch.ones(1, 3, 1, dtype=torch.bool)
    got = step_loss_conditioned(q, steps, valid, torch.tensor([0]), 0.5, offset=offset)
    assert got.item() == pytest.approx(want, abs=1e-12)


def test_step_loss_reindexes_targets_within_valid_subset():
    # 3 pairs, 2 steps; pair 1 has no step-2 readout. Text queries are reused at every step.
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=torch.float64)
    z = torch.tensor(
        [
            [[1.0, 0.0], [0.8, 0.6]],
            [[0.0, 1.0], [0.0, 0.0]],
            [[0.6, 0.8], [0.0, 1.0]],
        ],
        dtype=torch.float64,
    )  # [B, T, d]
    valid = torch.tensor([[True, True], [True, False], [True, True]])
    got = step_loss(q, z, valid, 1.0)
    s1 = (q @ z[:, 0].T).tolist()
    step1 = sum(_ce(s1[i], i) for i in range(3))
    # step 2: B_2 = {0, 2}, reindexed to targets 0 and 1
    rows = [0, 2]
    s2 = [[float(q[i] @ z[j, 1]) for j in rows] for i in rows]
    step2 = _ce(s2[0], 0) + _ce(s2[1], 1)
    assert got.item() == pytest.approx((step1 + step2) / (3 + 2), abs=1e-12)


def test_step_loss_applies_the_same_co_positive_mask():
    q = torch.eye(3, dtype=torch.float64)
    z = torch.stack([torch.eye(3, dtype=torch.float64)] * 2, dim=1) * 0.5  # [3, 2, 3]
    z[1, 1] = torch.tensor([0.9, 0.1, 0.0], dtype=torch.float64)
    valid = torch.ones(3, 2, dtype=torch.bool)
    exclude = co_positive_mask(["a", "a", "b"])
    got = step_loss(q, z, valid, 1.0, exclude=exclude)
    total = 0.0
    for t in range(2):
        s = (q @ z[:, t].T).tolist()
        total += _ce(s[0], 0, {1}) + _ce(s[1], 1, {0}) + _ce(s[2], 2)
    assert got.item() == pytest.approx(total / 6, abs=1e-12)


def test_step_loss_no_valid_step_is_zero():
    q = torch.eye(2)
    assert step_loss(q, torch.zeros(2, 3, 2), torch.zeros(2, 3, dtype=torch.bool), 1.0).item() == 0.0


def test_step_loss_conditioned_excludes_invalid_candidates():
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    cands = torch.tensor([[[[1.0, 0.0]], [[0.0, 1.0]], [[0.5, 0.5]]]], dtype=torch.float64)  # [1, 3, 1, 2]
    valid = torch.tensor([[[True], [True], [False]]])
    got = step_loss_conditioned(q, cands, valid, torch.tensor([0]), 1.0)
    assert got.item() == pytest.approx(_ce([1.0, 0.0], 0), abs=1e-12)


def test_distill_by_hand_and_teacher_is_detached():
    s = 1 / math.sqrt(2)
    steps = torch.tensor(
        [
            [[1.0, 0.0], [s, s], [0.0, 1.0]],  # T_1 = 3, teacher (0, 1)
            [[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]],  # T_2 = 2, teacher (1, 0)
            [[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]],  # T_3 = 1, no term
        ],
        dtype=torch.float64,
        requires_grad=True,
    )
    mask = torch.tensor([[True, True, True], [True, True, False], [True, False, False]])
    got = distill_loss(steps, mask)
    # Z = (3-1) + (2-1) + (1-1) = 3; terms: 1-0, 1-s, 1-0
    assert got.item() == pytest.approx((1 + (1 - s) + 1) / 3, abs=1e-12)
    got.backward()
    assert steps.grad[0, 2].abs().sum() == 0  # sg(): no gradient into the teacher
    assert steps.grad[1, 1].abs().sum() == 0
    assert steps.grad[0, 0].abs().sum() > 0


def test_distill_zero_when_z_is_zero():
    steps = torch.randn(2, 1, 4)
    assert distill_loss(steps, torch.ones(2, 1, dtype=torch.bool)).item() == 0.0
    assert distill_loss(torch.zeros(0, 3, 4), torch.zeros(0, 3, dtype=torch.bool)).item() == 0.0


def test_total_loss_weights():
    f, s, d = torch.tensor(2.0), torch.tensor(3.0), torch.tensor(5.0)
    assert total_loss(f, s, d).item() == pytest.approx(2 + 0.1 * 3 + 0.01 * 5)
    assert total_loss(f, None, d).item() == pytest.approx(2 + 0.01 * 5)
    assert total_loss(f).item() == pytest.approx(2.0)


def test_clip_teacher_pools_the_clips_seen_so_far_by_query_similarity():
    q = torch.tensor([[1.0, 0.0]])
    u = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [0.6, 0.8]]])  # q.u = 0, 1, 0.6
    mask = torch.tensor([[True, True, True]])
    y = clip_teacher(q, u, mask, tau=0.5)
    assert torch.allclose(y[0, 0], u[0, 0])  # after one clip: that clip
    w = torch.softmax(torch.tensor([0.0, 1.0]) / 0.5, 0)
    assert torch.allclose(y[0, 1], F.normalize(w[0] * u[0, 0] + w[1] * u[0, 1], dim=0), atol=1e-6)
    sharp = clip_teacher(q, u, mask, tau=1e-3)
    assert torch.allclose(sharp[0, 2], u[0, 1], atol=1e-4)  # a low temperature keeps the best clip
    # an invalid step is neither a teacher nor weighted into later steps
    y2 = clip_teacher(q, u, torch.tensor([[True, False, True]]), tau=0.5)
    assert y2[0, 1].abs().sum() == 0
    w2 = torch.softmax(torch.tensor([0.0, 0.6]) / 0.5, 0)
    assert torch.allclose(y2[0, 2], F.normalize(w2[0] * u[0, 0] + w2[1] * u[0, 2], dim=0), atol=1e-6)


def test_clip_teacher_loss_by_hand_and_teacher_is_detached():
    steps = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], requires_grad=True)
    teacher = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]], requires_grad=True)
    got = clip_teacher_loss(steps, teacher, torch.tensor([[True, True]]))
    assert got.item() == pytest.approx((0 + 1) / 2)
    got.backward()
    assert teacher.grad is None and steps.grad.abs().sum() > 0
    assert clip_teacher_loss(steps, teacher, torch.tensor([[False, False]])).item() == 0.0
    assert total_loss(torch.tensor(1.0), clip=torch.tensor(0.5), lambda_clip=2.0).item() == pytest.approx(2.0)
