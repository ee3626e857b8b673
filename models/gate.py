"""Optional early-exit gate (QASLR §A.10).

For local-clip QA the paper optionally stops streaming early: it returns the intermediate readout
at the first eligible step t >= t_min whose stop probability satisfies p_t >= eta, and otherwise
continues to the final readout. The fixed-length retrieval results use the complete sequence, so
the gate is off by default in the service. The paper does not specify the gate's architecture;
here it is a small MLP over the step readout z_t and the step fraction t / T:

    p_t = sigmoid(MLP([z_t ; t / T]))

where t is the 1-based index among the row's valid steps and T its number of valid steps.
Expected cost with early exit is C_fixed + E[T^] (C_vlm(L) + C_head) (§A.12 Eq. 19).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

logger = logging.getLogger(__name__)

__all__ = ["EarlyExitGate", "exit_step", "exit_steps", "load_gate", "save_gate"]


class EarlyExitGate(nn.Module):
    def __init__(self, embed_dim: int, *, hidden_dim: int = 256):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(embed_dim + 1, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, 1),
        )

    def forward(self, step_embeddings: Tensor, step_mask: Tensor) -> Tensor:
        """step_embeddings [B, T, d], step_mask [B, T] -> stop probability p [B, T] (0 where masked)."""
        step_mask = step_mask.to(device=step_embeddings.device, dtype=torch.bool)
        dtype = step_embeddings.dtype
        t = step_mask.cumsum(dim=1).to(dtype)  # [B, T], 1-based index among valid steps
        total = step_mask.sum(dim=1, keepdim=True).clamp(min=1).to(dtype)  # [B, 1]
        x = torch.cat([step_embeddings, (t / total)[..., None]], dim=-1)  # [B, T, d + 1]
        p = torch.sigmoid(self.mlp(x).squeeze(-1))  # [B, T]
        return torch.where(step_mask, p, 0.0)

    def probability(self, z: Tensor, t: int, total: int) -> Tensor:
        """p_t while streaming: one readout ``z`` [B, 1, d] at 1-based step ``t`` of ``total``
        planned steps -> [B] (the same features as :meth:`forward`)."""
        frac = z.new_full((*z.shape[:2], 1), t / max(total, 1))
        return torch.sigmoid(self.mlp(torch.cat([z, frac], dim=-1)).squeeze(-1))[:, 0]


def exit_step(stop_prob: Sequence[float] | Tensor, valid_steps: int, *, t_min: int, eta: float) -> int:
    """0-based index of the step whose readout is returned (§A.10).

    The first step t (1-based, t_min <= t <= valid_steps) with p_t >= eta; if none qualifies,
    the last valid step ``valid_steps - 1`` (full streaming).
    """
    probs = stop_prob.detach().reshape(-1).tolist() if isinstance(stop_prob, Tensor) else list(stop_prob)
    if not 1 <= valid_steps <= len(probs):
        raise ValueError(f"valid_steps must be in [1, {len(probs)}], got {valid_steps}")
    if t_min < 1:
        raise ValueError(f"t_min must be >= 1, got {t_min}")
    for t in range(t_min, valid_steps + 1):
        if probs[t - 1] >= eta:
            return t - 1
    return valid_steps - 1


def exit_steps(p: Tensor, step_mask: Tensor, *, t_min: int, eta: float) -> Tensor:
    """Batched ``exit_step``: p [B, T], step_mask [B, T] -> LongTensor [B] of 0-based step positions.

    Steps are counted among each row's valid steps (for prefix masks this is exactly ``exit_step``
    with ``valid_steps = step_mask[b].sum()``). Rows with no valid step get -1.
    """
    if t_min < 1:
        raise ValueError(f"t_min must be >= 1, got {t_min}")
    step_mask = step_mask.to(device=p.device, dtype=torch.bool)
    _, num_steps = p.shape
    t = step_mask.long().cumsum(dim=1)  # [B, T], 1-based among valid steps
    eligible = step_mask & (t >= t_min) & (p >= eta)  # [B, T]
    positions = torch.arange(num_steps, device=p.device)
    last_valid = (
        torch.where(step_mask, positions, -1).amax(dim=1)
        if num_steps
        else p.new_full((p.shape[0],), -1).long()
    )
    first_eligible = torch.where(eligible, positions, num_steps).amin(dim=1) if num_steps else last_valid
    return torch.where(first_eligible < num_steps, first_eligible, last_valid)


def save_gate(gate: EarlyExitGate, directory: str | os.PathLike) -> Path:
    """Write ``gate.safetensors`` and ``gate.json`` (its sizes) into ``directory``."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in gate.state_dict().items()}, str(out / "gate.safetensors"))
    first = gate.mlp[0]
    (out / "gate.json").write_text(
        json.dumps({"embed_dim": first.in_features - 1, "hidden_dim": first.out_features}) + "\n"
    )
    return out


def load_gate(directory: str | os.PathLike) -> EarlyExitGate:
    """Load a gate written by :func:`save_gate`."""
    from safetensors.torch import load_file

    d = Path(directory)
    cfg = json.loads((d / "gate.json").read_text())
    gate = EarlyExitGate(cfg["embed_dim"], hidden_dim=cfg["hidden_dim"])
    gate.load_state_dict(load_file(str(d / "gate.safetensors")))
    return gate
