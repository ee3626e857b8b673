"""Optional early-exit gate training (§A.1 Table 3 step 8, §A.10), after embedding training.

The embedding head is frozen. The label of step t is an agreement A_t with the full-step decision,
the event whose probability the gate p_t estimates (Assumption 2, Eq. 24):

- streamed queries (classification, QA: local-clip decisions): A_t = the step-t decision (argmax
  over the candidates with z_t) equals the full-step one (with z_T);
- query-conditioned scoring (the two-stage recipe, where stage 2 streams every candidate and each
  may stop on its own): for candidate c of a query's bounded set, A_t = stopping c at step t keeps
  its order against every other candidate's full score (sign(q·z_t^c - q·z_T^c') =
  sign(q·z_T^c - q·z_T^c') for all c'), so the ranking is what the full stream gives.

The gate (models.gate.EarlyExitGate) is fitted with binary cross-entropy on valid steps, and its
calibration (expected calibration error) is reported on held-out pairs when given.
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
def conditioned_agreement_targets(model: nn.Module, store: FeatureStore, pairs: Sequence[Pair]):
    """Candidates' step readouts [S, T, d], step mask [S, T] and ranking-agreement labels [S, T]
    for query-conditioned text -> video pairs (every listed candidate encoded under the query)."""
    from training.features import conditioned_key
    from training.scoring import takes_query

    model.eval()
    steps, masks, labels = [], [], []
    for p in pairs:
        keys = [conditioned_key(c, p.query.text) for c in p.candidates]
        q = store.text(p.query.text).float()
        queries = q[None].expand(len(keys), -1) if takes_query(model) else None
        out = stream_items(model, store, keys, queries=queries)
        s_t = out.steps.float() @ q  # [C, T]
        s_final = out.final.float() @ q  # [C]
        for c in range(len(keys)):
            others = torch.cat([s_final[:c], s_final[c + 1 :]])  # [C-1]
            full = s_final[c] > others  # [C-1]
            at_t = s_t[c][:, None] > others[None, :]  # [T, C-1]
            labels.append((at_t == full[None, :]).all(dim=1).float())
            steps.append(out.steps[c].float())
            masks.append(out.step_mask[c])
    t = max(x.shape[0] for x in steps)
    pad = torch.nn.functional.pad
    return (
        torch.stack([pad(x, (0, 0, 0, t - x.shape[0])) for x in steps]),
        torch.stack([pad(m, (0, t - m.shape[0])) for m in masks]),
        torch.stack([pad(y, (0, t - y.shape[0])) for y in labels]),
    )


@torch.no_grad()
def agreement_targets(
    model: nn.Module, store: FeatureStore, pairs: Sequence[Pair], *, scoring: str = "indexable"
):
    """Step readouts [P, T, d], step mask [P, T] and agreement labels A_t [P, T] (float)."""
    if scoring == "conditioned":
        conditioned = [
            p for p in pairs if p.query.video is None and p.positive.video is not None and p.candidates
        ]
        if conditioned:
            return conditioned_agreement_targets(model, store, conditioned)
    pairs = [p for p in pairs if p.query.video is not None and p.positive.video is None and p.candidates]
    if not pairs:
        raise ValueError(
            "gate training needs pairs with a streamed query and text candidates (classification, qa), or "
            "query-conditioned text -> video pairs (--scoring conditioned)"
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
    scoring: str = "indexable",
    val_pairs: Sequence[Pair] = (),
) -> tuple[EarlyExitGate, dict]:
    """Fit the gate on ``pairs``; calibration is measured on ``val_pairs`` (held out) when given."""
    steps, mask, labels = agreement_targets(model, store, pairs, scoring=scoring)
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
    if val_pairs:
        v_steps, v_mask, v_labels = agreement_targets(model, store, val_pairs, scoring=scoring)
        with torch.no_grad():
            v_p = gate(v_steps, v_mask)[v_mask]
        stats["val_ece"] = round(expected_calibration_error(v_p, v_labels[v_mask]), 4)
        stats["val_agreement_rate"] = round(float(v_labels[v_mask].mean()), 4)
    logger.info("early-exit gate: %s", stats)
    return gate, stats


def expected_calibration_error(p: torch.Tensor, y: torch.Tensor, bins: int = 10) -> float:
    """Mean |accuracy - confidence| over equal-width probability bins, weighted by bin size: how far
    p_t is from Pr(A_t) on these steps (the epsilon_g of Assumption 2, on average)."""
    edges = torch.linspace(0, 1, bins + 1)
    total, err = len(p), 0.0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        inside = (p >= lo) & ((p < hi) if hi < 1 else (p <= hi))
        if inside.any():
            err += float(inside.sum()) / total * abs(float(y[inside].mean()) - float(p[inside].mean()))
    return err


@torch.no_grad()
def exit_tradeoff(
    model: nn.Module,
    gate: EarlyExitGate,
    store: FeatureStore,
    pairs: Sequence[Pair],
    *,
    etas: Sequence[float] = (0.5, 0.7, 0.9, 0.95),
    t_min: int = 2,
) -> list[dict]:
    """Early exit in stage 2 as serving does it (§A.10, Eq. 19): every candidate of a query's bounded
    set streams until the gate's p_t >= eta (t >= t_min) and is scored by q·z at that step. Per eta:
    the share of clips saved, and how often the top-1 candidate is the full stream's (the agreement
    Prop. 3 bounds) over query-conditioned text -> video ``pairs`` (held out from the gate's data)."""
    from models.gate import exit_steps
    from training.features import conditioned_key
    from training.scoring import takes_query

    model.eval()
    streamed = []
    for p in pairs:
        if p.query.video is not None or not p.candidates:
            continue
        keys = [conditioned_key(c, p.query.text) for c in p.candidates]
        q = store.text(p.query.text).float()
        out = stream_items(
            model, store, keys, queries=q[None].expand(len(keys), -1) if takes_query(model) else None
        )
        streamed.append((q, out, gate(out.steps.float(), out.step_mask)))
    if not streamed:
        raise ValueError("exit_tradeoff needs query-conditioned text -> video pairs with candidate sets")
    rows = []
    for eta in etas:
        used = planned = agree = 0
        for q, out, p in streamed:
            stop = exit_steps(p, out.step_mask, t_min=t_min, eta=eta)  # [C]
            early = out.steps.float()[torch.arange(len(stop)), stop] @ q
            used += int((stop + 1).sum())
            planned += int(out.step_mask.sum())
            agree += int(int(early.argmax()) == int((out.final.float() @ q).argmax()))
        rows.append({"eta": eta, "clips_saved": 1 - used / planned, "top1_agreement": agree / len(streamed)})
    return rows
