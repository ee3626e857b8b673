import pytest
import torch

from models.gate import EarlyExitGate, exit_step, exit_steps


def test_exit_step_first_crossing_after_t_min():
    p = [0.9, 0.2, 0.6, 0.95, 0.1]
    assert exit_step(p, 5, t_min=1, eta=0.5) == 0  # first step already crosses
    assert exit_step(p, 5, t_min=2, eta=0.5) == 2  # step 1 is not eligible; first crossing wins
    assert exit_step(p, 5, t_min=2, eta=0.9) == 3
    assert exit_step(p, 5, t_min=3, eta=0.6) == 2  # p_t >= eta is inclusive


def test_exit_step_falls_back_to_last_valid_step():
    p = [0.1, 0.2, 0.3, 0.99]
    assert exit_step(p, 3, t_min=1, eta=0.5) == 2  # step 4 is padding: ignored
    assert exit_step(p, 4, t_min=5, eta=0.0) == 3  # t_min beyond the sequence
    assert exit_step(torch.tensor(p), 4, t_min=1, eta=0.5) == 3
    with pytest.raises(ValueError):
        exit_step(p, 0, t_min=1, eta=0.5)
    with pytest.raises(ValueError):
        exit_step(p, 2, t_min=0, eta=0.5)


def test_exit_steps_agrees_with_exit_step():
    g = torch.Generator().manual_seed(0)
    p = torch.rand(64, 8, generator=g)
    lengths = torch.randint(0, 9, (64,), generator=g)
    step_mask = torch.arange(8)[None] < lengths[:, None]
    for t_min in (1, 2, 4):
        for eta in (0.3, 0.7, 0.95):
            got = exit_steps(p, step_mask, t_min=t_min, eta=eta)
            want = [
                exit_step(p[b], int(lengths[b]), t_min=t_min, eta=eta) if lengths[b] > 0 else -1
                for b in range(64)
            ]
            assert got.dtype == torch.long
            assert got.tolist() == want


def test_gate_probabilities_masked_and_in_range():
    torch.manual_seed(0)
    gate = EarlyExitGate(16, hidden_dim=8)
    z = torch.nn.functional.normalize(torch.randn(3, 5, 16), dim=-1)
    step_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    p = gate(z, step_mask)
    assert p.shape == (3, 5)
    assert torch.all(p[~step_mask] == 0)
    assert torch.all((p[step_mask] > 0) & (p[step_mask] < 1))
    # the step fraction is an input: the same readout at a different position gets a different p
    same = z[:1, :1].expand(1, 5, 16)
    q = gate(same, torch.ones(1, 5, dtype=torch.bool))
    assert not torch.allclose(q[0, 0], q[0, -1])
    q.sum().backward()
    assert gate.mlp[0].weight.grad is not None
