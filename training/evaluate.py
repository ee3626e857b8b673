"""Evaluation metrics and controls (§4.1, §A.3, §A.6, §A.8).

- Hit@1 / Hit@5 within each pair's bounded candidate set (retrieval, moment, classification);
  accuracy for multiple-choice QA (the option with the highest similarity, §A.3 "QA scoring").
- Recall@k of the positive video over the whole set of videos of a split (an index, not a bounded set).
- Hit@1 after 25 / 50 / 75 / 100 % of the clips (Table 6): streamed sides read out at step ceil(p T_i).
- Test-time controls of Table 5: shuffled clips, reversed clips, reset memory, last clip only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from training.data import Pair
from training.features import FeatureStore
from training.scoring import embed_sides, score_pairs

CHECKPOINTS = (0.25, 0.5, 0.75, 1.0)


def ranks(scores: Sequence[np.ndarray], targets: Sequence[int]) -> np.ndarray:
    """1-based rank of each target among its candidates (ties count against the target)."""
    return np.array([int((s > s[t]).sum() + (s == s[t]).sum()) for s, t in zip(scores, targets, strict=True)])


def evaluate_pairs(
    model: nn.Module,
    store: FeatureStore,
    pairs: Sequence[Pair],
    *,
    scoring: str = "indexable",
    fraction: float = 1.0,
    control: str = "none",
    seed: int = 0,
) -> dict:
    """Hit@1/Hit@5 (accuracy for QA) per task and per task/kind (``meta.kind``), and their means."""
    pairs = [p for p in pairs if p.candidates]
    if not pairs:
        raise ValueError("no pair has a candidate set to evaluate")
    scores = score_pairs(model, store, pairs, scoring=scoring, fraction=fraction, control=control, seed=seed)
    r = ranks(scores, [p.target_index for p in pairs])
    groups: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(pairs):
        groups[p.task].append(i)
        if "kind" in p.meta:
            groups[f"{p.task}/{p.meta['kind']}"].append(i)
    out: dict = {}
    for name, idx in sorted(groups.items()):
        rr = r[idx]
        sizes = [len(pairs[i].candidates) for i in idx]
        entry = {
            "n": len(idx),
            "hit@1": float((rr <= 1).mean()),
            "hit@5": float((rr <= 5).mean()),
            "chance@1": float(np.mean([1 / n for n in sizes])),
        }
        if name.startswith("qa"):
            entry["accuracy"] = entry["hit@1"]
        out[name] = entry
    tasks = sorted({p.task for p in pairs})
    out["mean_hit@1"] = float(np.mean([out[t]["hit@1"] for t in tasks]))
    out["mean_chance@1"] = float(np.mean([out[t]["chance@1"] for t in tasks]))
    return out


@torch.no_grad()
def recall_at_k(
    model: nn.Module, store: FeatureStore, pairs: Sequence[Pair], *, ks: Sequence[int] = (1, 5, 10)
) -> dict:
    """Text -> video retrieval over every whole video of the split (indexable embeddings)."""
    model.eval()
    pairs = [p for p in pairs if p.task == "retrieval" and p.query.video is None]
    if not pairs:
        return {}
    videos = {}
    for p in pairs:
        for side in (p.positive, *p.candidates):
            if side.video is not None and side.video.start_s is None and side.video.end_s is None:
                videos.setdefault(side.key(), side)
    keys = list(videos)
    index = embed_sides(model, store, list(videos.values())).final.float().cpu()  # [V, d]
    queries = torch.stack([store.text(p.query.text) for p in pairs]).float()  # [Q, d]
    scores = (queries @ index.T).numpy()
    r = ranks(list(scores), [keys.index(p.positive.key()) for p in pairs])
    return {
        "n_queries": len(pairs),
        "n_videos": len(keys),
        **{f"recall@{k}": float((r <= k).mean()) for k in ks},
    }


def evaluate_checkpoints(
    model, store, pairs, *, scoring: str = "indexable", fractions=CHECKPOINTS, **kw
) -> dict:
    """Table 6 layout: metrics after each fraction of the clips."""
    return {
        f"{int(round(f * 100))}%": evaluate_pairs(model, store, pairs, scoring=scoring, fraction=f, **kw)
        for f in fractions
    }
