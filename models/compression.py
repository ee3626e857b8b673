"""Evidence compression: valid hidden states U_t -> at most M evidence tokens E_t (QASLR Eq. 5).

    E_t = Compress(U_t) in R^{B x M x D}                                         # Eq. 5

The paper says only that compression "uses cosine similarity to compress valid hidden states
after masking" and that banks with fewer than M states are padded and masked. The exact rule
implemented here, per batch row with n valid states (mask True) and budget M:

1. Masked states are dropped first; they never influence the output.
2. If n <= M, the evidence bank is the n valid states in their original order, unchanged
   (identity), padded with zero vectors whose mask is False.
3. If n > M, pick M anchors at evenly spaced positions among the valid states
   (``torch.linspace(0, n - 1, M).round()``; distinct because n > M). Every valid state is
   assigned to the anchor with the highest cosine similarity (ties -> earliest anchor), and each
   anchor is forced onto itself. Evidence token j is the mean of the states assigned to anchor j
   (never empty: it holds at least the anchor). Tokens stay in anchor, i.e. temporal, order.

The output width is M' = min(M, max_b n_b), so it is bounded by M and no wider than needed.
Deterministic (no randomness), dtype and device preserved; means of low-precision inputs are
accumulated in float32.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import Tensor

logger = logging.getLogger(__name__)

__all__ = ["compress_evidence"]


def _merge_by_cosine(valid: Tensor, num_tokens: int, extra: Tensor | None = None):
    """valid [n, D] with n > num_tokens -> [num_tokens, D] cosine-assigned anchor means; with
    ``extra`` [n, E] (e.g. the tokens' positions), also its means over the same assignment."""
    n, dim = valid.shape
    acc_dtype = torch.promote_types(valid.dtype, torch.float32)
    x = valid.to(acc_dtype)
    anchor_pos = torch.linspace(0, n - 1, num_tokens, device=valid.device).round().long()  # [M]
    xn = F.normalize(x, dim=-1)  # [n, D]
    sim = xn @ xn[anchor_pos].T  # [n, M] cosine similarity
    assign = sim.argmax(dim=-1)  # [n]
    assign[anchor_pos] = torch.arange(num_tokens, device=valid.device)  # anchors keep themselves
    sums = torch.zeros(num_tokens, dim, dtype=acc_dtype, device=valid.device)
    sums.index_add_(0, assign, x)
    counts = torch.bincount(assign, minlength=num_tokens).to(acc_dtype)  # >= 1 each
    merged = (sums / counts[:, None]).to(valid.dtype)
    if extra is None:
        return merged
    side = torch.zeros(num_tokens, extra.shape[1], dtype=torch.float32, device=valid.device)
    side.index_add_(0, assign, extra.float())
    return merged, (side / counts[:, None].float()).to(extra.dtype)


def compress_evidence(hidden: Tensor, mask: Tensor, max_tokens: int, positions: Tensor | None = None):
    """Compress valid hidden states into at most ``max_tokens`` evidence tokens (Eq. 5); with
    ``positions`` [B, S, P] (models.backbone.ClipStates.positions) also each evidence token's position
    (the mean over the states merged into it), returned third.

    Args:
        hidden: [B, S, D] backbone hidden states U_t of one clip per row.
        mask: [B, S] bool, True where the state is valid.
        max_tokens: M, the evidence budget.

    Returns:
        evidence [B, M', D] and evidence_mask [B, M'] with M' = min(M, max valid count).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if hidden.ndim != 3 or mask.shape != hidden.shape[:2]:
        raise ValueError(
            f"expected hidden [B,S,D] and mask [B,S], got {tuple(hidden.shape)} and {tuple(mask.shape)}"
        )
    mask = mask.to(device=hidden.device, dtype=torch.bool)
    batch, _, dim = hidden.shape
    counts = mask.sum(dim=1)  # [B]
    width = min(max_tokens, int(counts.max())) if batch > 0 else 0  # M'
    evidence = hidden.new_zeros(batch, width, dim)  # [B, M', D]
    evidence_mask = torch.zeros(batch, width, dtype=torch.bool, device=hidden.device)
    places = None if positions is None else positions.new_zeros(batch, width, positions.shape[-1])
    for b in range(batch):
        valid = hidden[b][mask[b]]  # [n, D], masked states dropped
        n = valid.shape[0]
        if n == 0:
            continue
        where = None if positions is None else positions[b][mask[b]]
        if n <= max_tokens:  # identity: the valid states in order
            evidence[b, :n] = valid
            evidence_mask[b, :n] = True
            if where is not None:
                places[b, :n] = where
        elif where is None:
            evidence[b] = _merge_by_cosine(valid, max_tokens)
            evidence_mask[b] = True
        else:
            evidence[b], places[b] = _merge_by_cosine(valid, max_tokens, where)
            evidence_mask[b] = True
    if positions is None:
        return evidence, evidence_mask
    return evidence, evidence_mask, places
