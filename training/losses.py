"""The QASLR training objective (§3.4, Eq. 11-14) as pure functions of embeddings.

    L_final   = CE(S~, y),  s_ij = a_i . b_ij / tau,  y_i = i                              (Eq. 11)
    L_step    = sum_t |B_t| CE(S~^(t), y^(t)) / sum_t |B_t|                                 (Eq. 12)
    L_distill = 1/Z sum_{i in S} sum_{t < T_i} [1 - z_i^(t) . sg(z_i^(T_i))],  0 when Z = 0 (Eq. 13)
    L         = L_final + lambda_step L_step + lambda_distill L_distill                     (Eq. 14)

Two-stage recipe only (our addition, not in the paper): L_clip, a distillation from the backbone's
original pathway. For a candidate encoded under query q with per-clip backbone embeddings u_1..u_T
(each clip's own pooled embedding, the last state of its evidence bank), the teacher after step t is

    y_t = normalize( sum_{s <= t} softmax_s(q . u_s / tau_clip) u_s )
    L_clip = 1/Z sum_{i, t valid} [1 - z_i^(t) . y_i^(t)]                                   (ours)

the query-weighted pooling of the clips seen so far. Contrastive pairs alone are few; this target
exists for every (query, candidate) pair, labelled or not, and says where a brief event's clip is.
It is the same for a video and its mirror, and for one showing or two: pairs whose answer is an order
or a count (``meta.kind`` ordered / counted, training.scoring.is_time_pair) are left out of it, or
it would teach the head to be blind to exactly what they ask.

S~ is S with excluded co-positive logits set to -inf; the paired target is never excluded, so it
stays the sole positive (§3.4, §A.8 "Negative construction"). All embeddings are L2-normalised.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "LAMBDA_DISTILL",
    "LAMBDA_STEP",
    "clip_teacher",
    "clip_teacher_loss",
    "co_positive_mask",
    "contrastive_loss",
    "distill_loss",
    "final_loss",
    "step_loss",
    "step_loss_conditioned",
    "total_loss",
]

LAMBDA_STEP = 0.1  # §A.2
LAMBDA_DISTILL = 0.01  # §A.2
LAMBDA_CLIP = 30.0  # L_clip of the two-stage recipe (ours; measured in training/README.md)
TAU_CLIP = 0.05  # tau_clip: the teacher's weighting temperature over clips


def co_positive_mask(groups: list[str | None], keys: list[str] | None = None) -> Tensor:
    """[B, B] bool: True where column j is a co-positive of row i (same group id, or the very same
    positive item) and j != i. Rows without a group only exclude identical items."""
    b = len(groups)
    out = torch.zeros(b, b, dtype=torch.bool)
    for i in range(b):
        for j in range(b):
            if i == j:
                continue
            same_group = groups[i] is not None and groups[i] == groups[j]
            same_item = keys is not None and keys[i] == keys[j]
            out[i, j] = same_group or same_item
    return out


def contrastive_loss(
    logits: Tensor, target: Tensor, exclude: Tensor | None = None, *, reduction: str = "mean"
) -> Tensor:
    """CE over logits [B, C] with ``exclude`` [B, C] set to -inf, except each row's target (Eq. 11)."""
    if exclude is not None:
        keep_target = F.one_hot(target, logits.shape[1]).bool()
        logits = logits.masked_fill(exclude & ~keep_target, float("-inf"))
    return F.cross_entropy(logits, target, reduction=reduction)


def final_loss(
    queries: Tensor,
    candidates: Tensor,
    temperature: Tensor | float,
    *,
    exclude: Tensor | None = None,
    target: Tensor | None = None,
    offset: Tensor | None = None,
) -> Tensor:
    """Eq. 11. Indexable: candidates [C, d] shared by all rows (C >= B, the first B are the paired
    positives, y_i = i unless ``target`` is given). Query-conditioned: candidates [B, C, d], b_ij
    encoded under query i; ``target`` [B] picks the positive among each row's C. ``offset`` [B, C] is
    added to every similarity before the temperature (a score the head is served beside, which it
    then learns to complete: training.moment_head)."""
    if candidates.dim() == 2:
        sims = queries @ candidates.T  # [B, C]
    else:
        sims = torch.einsum("bd,bcd->bc", queries, candidates)  # [B, C]
    logits = (sims if offset is None else sims + offset) / temperature
    if target is None:
        target = torch.arange(queries.shape[0], device=queries.device)
    return contrastive_loss(logits, target, exclude)


def step_loss(
    queries: Tensor,
    positives: Tensor,
    valid: Tensor,
    temperature: Tensor | float,
    *,
    exclude: Tensor | None = None,
) -> Tensor:
    """Eq. 12 for in-batch (indexable) pairs. queries/positives are [B, T, d] step readouts of a
    streaming side or [B, d] for a non-streaming side (reused at every step, e.g. the text query);
    valid [B, T] marks pairs whose streaming sides all have a step-t readout. At step t the logits are
    restricted to B_t x B_t, targets are reindexed within B_t, and ``exclude`` [B, B] applies."""
    b, t_max = valid.shape
    total, weight = queries.new_zeros(()), 0
    for t in range(t_max):
        rows = valid[:, t].nonzero().squeeze(1)  # B_t
        if rows.numel() == 0:
            continue
        a = queries[rows, t] if queries.dim() == 3 else queries[rows]  # [|B_t|, d]
        p = positives[rows, t] if positives.dim() == 3 else positives[rows]
        logits = a @ p.T / temperature  # [|B_t|, |B_t|]
        sub_exclude = exclude[rows][:, rows] if exclude is not None else None
        target = torch.arange(rows.numel(), device=queries.device)  # reindexed targets y^(t)
        total = total + contrastive_loss(logits, target, sub_exclude, reduction="sum")
        weight += rows.numel()
    return total / weight if weight else total


def step_loss_conditioned(
    queries: Tensor,
    candidates: Tensor,
    candidate_valid: Tensor,
    target: Tensor,
    temperature: Tensor | float,
    offset: Tensor | None = None,
) -> Tensor:
    """Eq. 12 for query-conditioned bounded candidate sets: candidates [B, C, T, d] (b_ij^(t)),
    candidate_valid [B, C, T] (False also for padded candidates), target [B]. B_t holds the rows
    whose positive has a step-t readout; candidates without one are excluded from the row.
    ``offset`` [B, C] as in ``final_loss``, at every step."""
    b, c, t_max, _ = candidates.shape
    rows_all = torch.arange(b, device=queries.device)
    total, weight = queries.new_zeros(()), 0
    for t in range(t_max):
        rows = candidate_valid[rows_all, target, t].nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        a = queries[rows, t] if queries.dim() == 3 else queries[rows]  # [|B_t|, d]
        sims = torch.einsum("bd,bcd->bc", a, candidates[rows, :, t])  # [|B_t|, C]
        logits = (sims if offset is None else sims + offset[rows]) / temperature
        logits = logits.masked_fill(~candidate_valid[rows, :, t], float("-inf"))
        total = total + F.cross_entropy(logits, target[rows], reduction="sum")
        weight += rows.numel()
    return total / weight if weight else total


def distill_loss(steps: Tensor, step_mask: Tensor) -> Tensor:
    """Eq. 13 over streamed inputs: steps [S, T, d] (L2-normalised readouts), step_mask [S, T].
    The teacher is each row's detached last valid readout z^(T_i); every other valid step t < T_i
    contributes 1 - z^(t) . sg(z^(T_i)); Z counts those terms; Z = 0 gives 0."""
    if steps.numel() == 0:
        return steps.new_zeros(())
    step_mask = step_mask.bool()
    positions = torch.arange(steps.shape[1], device=steps.device)
    last = torch.where(step_mask, positions, -1).amax(dim=1)  # [S], index of T_i (-1: none)
    rows = torch.arange(steps.shape[0], device=steps.device)
    teacher = steps[rows, last.clamp(min=0)].detach()  # sg(z^(T_i)), [S, d]
    terms = step_mask & (positions[None] != last[:, None])  # valid steps t < T_i, [S, T]
    z = terms.sum()
    if z == 0:
        return steps.new_zeros(())
    cos = (steps * teacher[:, None]).sum(-1)  # [S, T]
    return ((1 - cos) * terms).sum() / z


def clip_teacher(queries: Tensor, clips: Tensor, step_mask: Tensor, tau: float = TAU_CLIP) -> Tensor:
    """y_t of L_clip: queries [S, d], clips [S, T, d] (u_t, L2-normalised), step_mask [S, T] ->
    [S, T, d], the softmax(q . u_s / tau)-weighted mean of u_1..u_t, L2-normalised (zeros where a
    step is invalid)."""
    step_mask = step_mask.bool()
    scores = torch.einsum("sd,std->st", queries, clips) / tau  # [S, T]
    scores = scores.masked_fill(~step_mask, float("-inf"))
    t = clips.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=clips.device).tril()  # [t, s]: s <= t
    logits = scores[:, None, :].masked_fill(~causal[None], float("-inf"))  # [S, t, s]
    weights = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # rows with no valid s -> 0
    teacher = F.normalize(weights @ clips, dim=-1)  # [S, t, s] @ [S, s, d] -> [S, t, d]
    return torch.where(step_mask[..., None], teacher, 0.0)


def clip_teacher_loss(steps: Tensor, teacher: Tensor, step_mask: Tensor) -> Tensor:
    """L_clip: mean of 1 - z^(t) . y^(t) over valid steps; steps and teacher [S, T, d]."""
    mask = step_mask.bool()
    z = mask.sum()
    if z == 0:
        return steps.new_zeros(())
    cos = (steps * teacher.detach()).sum(-1)  # [S, T]
    return ((1 - cos) * mask).sum() / z


def total_loss(
    final: Tensor,
    step: Tensor | None = None,
    distill: Tensor | None = None,
    *,
    lambda_step: float = LAMBDA_STEP,
    lambda_distill: float = LAMBDA_DISTILL,
    clip: Tensor | None = None,
    lambda_clip: float = LAMBDA_CLIP,
) -> Tensor:
    """Eq. 14 (plus L_clip of the two-stage recipe when given). A ``None`` term is disabled (the
    ablations of Table 6)."""
    loss = final
    if clip is not None:
        loss = loss + lambda_clip * clip
    if step is not None:
        loss = loss + lambda_step * step
    if distill is not None:
        loss = loss + lambda_distill * distill
    return loss
