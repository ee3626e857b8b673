"""Optional early-exit gate training (§A.1 Table 3 step 8, §A.10), after embedding training.

The embedding head is frozen. For every training pair whose *query* side is streamed (classification
and QA: local-clip decisions) and that has a bounded candidate set, the label of step t is the
agreement A_t between the step-t decision (argmax over candidates with z_t) and the full-step
decision (with z_T) — the event whose probability the gate p_t estimates (Assumption 2, Eq. 24).
The gate (models.gate.EarlyExitGate) is fitted with binary cross-entropy on valid steps.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from models.gate import EarlyExitGate, load_gate, save_gate  # noqa: F401  (re-exported)
from training.data import Pair
from training.features import FeatureStore
from training.scoring import stream_items

logger = logging.getLogger(__name__)


@torch.no_grad()
def agreement_targets(model: nn.Module, store: FeatureStore, pairs: Sequence[Pair]):
    """Step readouts [P, T, d], step mask [P, T] and agreement labels A_t [P, T] (float)."""
    pairs = [p for p in pairs if p.query.video is not None and p.positive.video is None and p.candidates]
    if not pairs:
        raise ValueError(
            "gate training needs pairs with a streamed query and text candidates (classification, qa)"
        )
    model.eval()
    out = stream_items(model, store, [p.query.key() for p in pairs])
    labels = torch.zeros(out.step_mask.shape)
    for i, p in enumerate(pairs):
        cands = torch.stack([store.text(c.text) for c in p.candidates]).to(out.steps.dtype)  # [C, d]
        decisions = (out.steps[i] @ cands.T).argmax(-1)  # [T]
        final = int((out.final[i] @ cands.T).argmax())
        labels[i] = (decisions == final).float()
    return out.steps.float(), out.step_mask, labels


def train_gate(
    model: nn.Module,
    store: FeatureStore,
    pairs: Sequence[Pair],
    *,
    epochs: int = 50,
    lr: float = 1e-3,
    seed: int = 0,
) -> tuple[EarlyExitGate, dict]:
    steps, mask, labels = agreement_targets(model, store, pairs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gate = EarlyExitGate(steps.shape[-1])
    opt = torch.optim.AdamW(gate.parameters(), lr=lr)
    for _ in range(epochs):
        p = gate(steps, mask).clamp(1e-6, 1 - 1e-6)
        loss = F.binary_cross_entropy(p[mask], labels[mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        p = gate(steps, mask)
        acc = float(((p[mask] >= 0.5).float() == labels[mask]).float().mean())
    stats = {
        "pairs": int(steps.shape[0]),
        "bce": round(float(loss.detach()), 4),
        "train_accuracy": round(acc, 4),
        "agreement_rate": round(float(labels[mask].mean()), 4),
    }
    logger.info("early-exit gate: %s", stats)
    return gate, stats
