"""Head-only forward passes over the feature cache: pair losses (training) and candidate scores
(evaluation). The trainer and the evaluator share these so they score pairs identically.

A side of a pair is either a text (its cached embedding, reused at every step, §3.4) or a streamed
item (a video, window, or video+question) whose cached evidence banks run through the aggregator,
giving step readouts z_1..z_T and the final z_T (Eq. 10).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from training.data import Pair, Side
from training.features import FeatureStore, conditioned_key
from training.losses import (
    clip_teacher,
    clip_teacher_loss,
    co_positive_mask,
    contrastive_loss,
    distill_loss,
    step_loss,
    step_loss_conditioned,
)

CONTROLS = ("none", "shuffle", "reverse", "reset", "last")


@dataclass
class Embedded:
    final: Tensor  # [n, d]
    steps: Tensor | None = None  # [n, T, d] for streamed sides; None for texts (reused)
    step_mask: Tensor | None = None  # [n, T]
    clips: Tensor | None = None  # [n, T, d] u_t, each clip's own backbone embedding (L_clip)
    clip_mask: Tensor | None = None  # [n, T]

    @property
    def streamed(self) -> bool:
        return self.steps is not None


def _perturb(tokens: Tensor, mask: Tensor, control: str, rng: np.random.Generator) -> tuple[Tensor, Tensor]:
    """Test-time clip-order controls of Table 5 on one item's banks [T, M, D]."""
    if control == "shuffle":
        order = torch.from_numpy(rng.permutation(tokens.shape[0]))
        return tokens[order], mask[order]
    if control == "reverse":
        return tokens.flip(0), mask.flip(0)
    if control == "last":
        return tokens[-1:], mask[-1:]
    return tokens, mask


def stream_items(
    model: nn.Module,
    store: FeatureStore,
    keys: Sequence[str],
    *,
    control: str = "none",
    seed: int = 0,
    queries: Tensor | None = None,
) -> Embedded:
    """Run the aggregator over the cached evidence of ``keys`` (each video keeps its own state).
    ``queries`` [len(keys), d]: the conditioning input of a query-conditioned head (Eq. 4), one row
    per key; ignored by aggregators that take none."""
    if control not in CONTROLS:
        raise ValueError(f"control must be one of {CONTROLS}, got {control!r}")
    rng = np.random.default_rng(seed)
    banks = [_perturb(*store.banks(k), control, rng) for k in keys]
    b = len(banks)
    t = max(x.shape[0] for x, _ in banks)
    m = max(x.shape[1] for x, _ in banks)
    p = next(model.parameters())
    evidence = torch.zeros(b, t, m, banks[0][0].shape[-1], dtype=p.dtype, device=p.device)
    mask = torch.zeros(b, t, m, dtype=torch.bool, device=p.device)
    steps = torch.zeros(b, t, dtype=torch.bool, device=p.device)
    for i, (tok, msk) in enumerate(banks):
        evidence[i, : tok.shape[0], : tok.shape[1]] = tok
        mask[i, : msk.shape[0], : msk.shape[1]] = msk
        steps[i, : tok.shape[0]] = True
    kwargs = {}
    if queries is not None and takes_query(model):
        kwargs["query"] = queries.to(p.device, p.dtype)
    out = model(evidence, mask, steps, reset_memory=control == "reset", **kwargs)
    final = out.final
    if control == "reset":
        final = pooled_readouts(out.step_embeddings, out.step_mask)
    clips, clip_mask = clip_embeddings(evidence, mask, out.final.shape[-1])
    return Embedded(
        final=final, steps=out.step_embeddings, step_mask=out.step_mask, clips=clips, clip_mask=clip_mask
    )


def pooled_readouts(steps: Tensor, step_mask: Tensor) -> Tensor:
    """The reset-memory control's video embedding (Table 5): with the memory re-initialised before
    every clip, each readout z_t sees clip t alone, so z_T would be the last-clip control again; the
    paper reports the two apart (and only the last-clip control drops clips), so the reset control
    keeps every clip: the L2-normalised mean of the per-clip readouts over the valid steps.
    steps [n, T, d], step_mask [n, T] -> [n, d]."""
    weights = step_mask.to(steps.dtype)[..., None]  # [n, T, 1]
    pooled = (steps * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
    return torch.nn.functional.normalize(pooled, dim=-1)


def clip_embeddings(evidence: Tensor, mask: Tensor, embed_dim: int) -> tuple[Tensor, Tensor]:
    """u_t of L_clip: the backbone's own pooled embedding of every clip, i.e. the last valid state of
    its evidence bank (``Backbone.pool``: last token, first d dims, L2-normalised), exact while a
    clip's states fit in M (compression keeps them unchanged; a merged bank's last token is an anchor
    mean). evidence [n, T, M, D], mask [n, T, M] -> u [n, T, d], valid [n, T]."""
    counts = mask.long().sum(dim=-1)  # [n, T] valid states per clip
    last = (counts - 1).clamp(min=0)[..., None, None].expand(-1, -1, 1, embed_dim)  # [n, T, 1, d]
    u = evidence[..., :embed_dim].gather(2, last).squeeze(2).float()  # [n, T, d]
    return torch.nn.functional.normalize(u, dim=-1), counts > 0


def takes_query(model: nn.Module) -> bool:
    """A streaming head trained with the query as its conditioning input (Eq. 4, c = q)."""
    return bool(getattr(getattr(model, "config", None), "query_conditioning", False))


def _conditioning_queries(store: FeatureStore, texts: Sequence[str | None]) -> Tensor | None:
    if any(t is None for t in texts):
        return None
    return torch.stack([store.text(t) for t in texts])


def embed_sides(
    model: nn.Module, store: FeatureStore, sides: Sequence[Side], *, keys: Sequence[str] | None = None, **kw
) -> Embedded:
    """Embeddings of a homogeneous list of sides (all texts, or all streamed items)."""
    if all(s.video is None for s in sides):
        p = next(model.parameters())
        return Embedded(final=torch.stack([store.text(s.text) for s in sides]).to(p.device, p.dtype))
    if any(s.video is None for s in sides):
        raise ValueError("a sub-batch must be homogeneous: all text sides or all video sides")
    return stream_items(model, store, list(keys or [s.key() for s in sides]), **kw)


def is_conditioned(pair: Pair, scoring: str) -> bool:
    """Query-conditioned scoring (Eq. 1, second case) applies to text -> video pairs with a bounded set."""
    return scoring == "conditioned" and pair.query.video is None and pair.positive.video is not None


@dataclass
class Negatives:
    """Candidates shared from other sub-batches of the same optimizer step (detached)."""

    embeddings: Tensor  # [P, d]
    keys: list[str]
    groups: list[str | None]
    queries: list[str] | None = None  # the query key of the pair each negative is the positive of


@dataclass
class LossTerms:
    final: Tensor
    step: Tensor
    distill: Tensor
    clip: Tensor | None = None  # L_clip (two-stage recipe), where computed


def pair_losses(
    model: nn.Module,
    store: FeatureStore,
    pairs: Sequence[Pair],
    *,
    scoring: str = "indexable",
    negatives: Negatives | None = None,
    candidate_negatives: str = "text",
    clip_loss: bool = False,
) -> LossTerms:
    """Eq. 11-13 for one homogeneous sub-batch (and L_clip with ``clip_loss``, query-conditioned
    sub-batches only).

    Indexable: columns are the B paired positives (y_i = i, co-positives of the same group masked,
    Eq. 11), then each pair's own listed candidates (negatives for that pair only; ``candidate_negatives``
    = none | text | all says which kinds are used), then the shared ``negatives`` of other sub-batches
    (masked when they are co-positives). Query-conditioned: each row scores its own bounded candidate
    set, every candidate encoded under that row's query.
    """
    tau = model.temperature
    query = embed_sides(model, store, [p.query for p in pairs])
    if all(is_conditioned(p, scoring) for p in pairs):
        return _conditioned_losses(model, store, pairs, query, tau, clip_loss=clip_loss)
    pos_keys = [p.positive.key() for p in pairs]
    groups = [p.group for p in pairs]
    positive = embed_sides(model, store, [p.positive for p in pairs])
    b = len(pairs)
    exclude = co_positive_mask(groups, pos_keys)  # [B, B]
    # Identical queries are co-positives too: pair j's positive answers pair i's query just as well.
    query_keys = [p.query.key() for p in pairs]
    exclude |= torch.tensor([[qi == qj for qj in query_keys] for qi in query_keys]) & ~torch.eye(
        b, dtype=torch.bool
    )
    for i, p in enumerate(pairs):  # a pair's listed candidates are always its negatives
        listed = {c.key() for c in p.candidates}
        for j in range(b):
            if pos_keys[j] in listed and pos_keys[j] != pos_keys[i]:
                exclude[i, j] = False
    columns, col_exclude = [positive.final], [exclude]
    kind = pairs[0].positive.kind
    if candidate_negatives == "all" or (candidate_negatives == "text" and kind == "text"):
        extra: dict[str, Side] = {}
        for p in pairs:
            for c in p.candidates:
                if c.key() not in pos_keys:
                    extra.setdefault(c.key(), c)
        if extra:
            columns.append(embed_sides(model, store, list(extra.values())).final)
            ex = torch.ones(b, len(extra), dtype=torch.bool)
            for i, p in enumerate(pairs):
                listed = {c.key() for c in p.candidates}
                for j, key in enumerate(extra):
                    ex[i, j] = key not in listed  # someone else's candidate: not a known negative here
            col_exclude.append(ex)
    if negatives is not None and len(negatives.keys):
        columns.append(negatives.embeddings.to(positive.final.dtype))
        ex = torch.zeros(b, len(negatives.keys), dtype=torch.bool)
        for i in range(b):
            for j, (key, group) in enumerate(zip(negatives.keys, negatives.groups, strict=True)):
                ex[i, j] = key == pos_keys[i] or (group is not None and group == groups[i])
                ex[i, j] |= negatives.queries is not None and negatives.queries[j] == query_keys[i]
        col_exclude.append(ex)
    logits = query.final @ torch.cat(columns).T / tau  # [B, C]
    exclude_all = torch.cat(col_exclude, dim=1).to(logits.device)
    final = contrastive_loss(logits, torch.arange(b, device=logits.device), exclude_all)  # Eq. 11
    streamed = [s for s in (query, positive) if s.streamed]
    if streamed:  # Eq. 12: B_t = pairs with a valid step-t readout on every streaming side
        t = max(s.steps.shape[1] for s in streamed)
        valid = torch.ones(b, t, dtype=torch.bool, device=logits.device)
        for side in streamed:
            valid &= nn.functional.pad(side.step_mask, (0, t - side.step_mask.shape[1]))

        def steps_of(side: Embedded) -> Tensor:  # a non-streaming side is reused at every step
            return (
                nn.functional.pad(side.steps, (0, 0, 0, t - side.steps.shape[1]))
                if side.streamed
                else side.final
            )

        step = step_loss(steps_of(query), steps_of(positive), valid, tau, exclude=exclude.to(logits.device))
    else:
        step = logits.new_zeros(())
    distill = _distill(streamed, logits)
    return LossTerms(final=final, step=step, distill=distill)


def _distill(streamed: list[Embedded], like: Tensor) -> Tensor:
    if not streamed:
        return like.new_zeros(())
    t = max(s.steps.shape[1] for s in streamed)
    steps = torch.cat([nn.functional.pad(s.steps, (0, 0, 0, t - s.steps.shape[1])) for s in streamed])
    mask = torch.cat([nn.functional.pad(s.step_mask, (0, t - s.step_mask.shape[1])) for s in streamed])
    return distill_loss(steps, mask)  # Eq. 13


def _conditioned_losses(model, store, pairs, query: Embedded, tau, *, clip_loss: bool = False) -> LossTerms:
    """Eq. 11-13 for query-conditioned scoring (Eq. 1, second case): row i scores candidates encoded
    under its own query q_i. The columns of row i are its bounded candidate set (the paired positive
    is the target) plus, as in-batch negatives, the other rows' positives whenever their evidence
    encoded under q_i is in the cache; candidates of the positive's group other than the positive
    itself are co-positives and are masked out of the denominator (Eq. 11)."""
    b = len(pairs)
    sets: list[list[Side]] = []
    for i, p in enumerate(pairs):
        if not p.candidates:
            raise ValueError(
                f"pair {p.id!r}: query-conditioned scoring needs a bounded candidate set (Eq. 1); "
                "a pair without candidates would give a one-column, always-zero loss"
            )
        cands = list(p.candidates)
        keys = {c.key() for c in cands}
        if p.positive.key() not in keys:
            cands.insert(0, p.positive)
            keys.add(p.positive.key())
        for j, other in enumerate(pairs):  # in-batch negatives, where encoded under this query
            k = other.positive.key()
            if j != i and k not in keys and conditioned_key(other.positive, p.query.text) in store.evidence:
                cands.append(other.positive)
                keys.add(k)
        sets.append(cands)
    c = max(len(s) for s in sets)
    keys, rows = [], []
    for i, (p, cands) in enumerate(zip(pairs, sets, strict=True)):
        for cand in cands:
            keys.append(conditioned_key(cand, p.query.text))
            rows.append(i)
    queries = query.final[torch.tensor(rows)] if takes_query(model) else None
    cand = stream_items(model, store, keys, queries=queries)
    d, t = cand.final.shape[-1], cand.steps.shape[1]
    finals = cand.final.new_zeros(b, c, d)
    steps = cand.final.new_zeros(b, c, t, d)
    valid = torch.zeros(b, c, t, dtype=torch.bool, device=cand.final.device)
    present = torch.zeros(b, c, dtype=torch.bool, device=cand.final.device)
    co_positive = torch.zeros(b, c, dtype=torch.bool, device=cand.final.device)
    target = torch.zeros(b, dtype=torch.long, device=cand.final.device)
    groups = {p.positive.key(): p.group for p in pairs}
    k = 0
    for i, (p, cands) in enumerate(zip(pairs, sets, strict=True)):
        n = len(cands)
        finals[i, :n], steps[i, :n], valid[i, :n] = (
            cand.final[k : k + n],
            cand.steps[k : k + n],
            cand.step_mask[k : k + n],
        )
        present[i, :n] = True
        pos = p.positive.key()
        target[i] = next(j for j, x in enumerate(cands) if x.key() == pos)
        for j, x in enumerate(cands):
            same_group = p.group is not None and groups.get(x.key(), None) == p.group
            co_positive[i, j] = j != target[i] and same_group
        k += n
    logits = torch.einsum("bd,bcd->bc", query.final, finals) / tau  # s_ij = q_i . v_ij / tau (Eq. 1)
    final = contrastive_loss(logits, target, ~present | co_positive)
    step = step_loss_conditioned(query.final, steps, valid & ~co_positive[..., None], target, tau)
    distill = distill_loss(cand.steps, cand.step_mask)
    clip = None
    if clip_loss:
        u = cand.clips.to(cand.steps.dtype)
        teacher = clip_teacher(query.final[torch.tensor(rows)].detach(), u, cand.clip_mask)
        # the teacher pools clips by relevance alone, the same whatever their order or number: a
        # pair whose answer is an order or a count (meta kind) is left to the contrastive terms
        taught = torch.tensor([not is_time_pair(pairs[r]) for r in rows], device=cand.steps.device)
        clip = clip_teacher_loss(cand.steps, teacher, cand.step_mask & cand.clip_mask & taught[:, None])
    return LossTerms(final=final, step=step, distill=distill, clip=clip)


TIME_KINDS = frozenset({"ordered", "counted"})  # meta kinds whose answer is an order or a count


def is_time_pair(pair: Pair) -> bool:
    """Whether ``pair`` asks for an order or a count (its ``meta.kind``), which L_clip's order- and
    count-blind target cannot give."""
    return pair.meta.get("kind") in TIME_KINDS


# ---- evaluation ------------------------------------------------------------------------------------


def readout_at(emb: Embedded, row: int, fraction: float) -> Tensor:
    """The readout after ``fraction`` of the row's valid clips (ceil, at least one): Table 6 checkpoints."""
    if not emb.streamed:
        return emb.final[row]
    n = int(emb.step_mask[row].sum())
    t = max(1, math.ceil(fraction * n - 1e-9))
    return emb.steps[row, t - 1] if fraction < 1 else emb.final[row]


@torch.no_grad()
def score_pairs(
    model: nn.Module,
    store: FeatureStore,
    pairs: Sequence[Pair],
    *,
    scoring: str = "indexable",
    fraction: float = 1.0,
    control: str = "none",
    seed: int = 0,
    batch_size: int = 64,
) -> list[np.ndarray]:
    """For every pair, the scores q . v of its bounded candidate set (in listed order)."""
    model.eval()
    texts: dict[str, Tensor] = {}
    stream_keys: dict[str, str | None] = {}  # item key -> the query it is conditioned on
    for p in pairs:
        for side, cond in _scored_sides(p, scoring):
            if side.video is None:
                texts[side.text] = store.text(side.text)
            else:
                stream_keys[_key(side, cond)] = cond
    embs: dict[str, Tensor] = {}
    # conditioned and plain items in separate chunks: only the former give a query-conditioned head its q
    keys = sorted(stream_keys, key=lambda k: stream_keys[k] is not None)
    start = 0
    while start < len(keys):
        conditioned = stream_keys[keys[start]] is not None
        end = start
        while (
            end < len(keys)
            and end - start < batch_size
            and (stream_keys[keys[end]] is not None) == conditioned
        ):
            end += 1
        chunk = keys[start:end]
        queries = _conditioning_queries(store, [stream_keys[k] for k in chunk]) if conditioned else None
        out = stream_items(model, store, chunk, control=control, seed=seed + start, queries=queries)
        for i, key in enumerate(chunk):
            embs[key] = readout_at(out, i, fraction).float().cpu()
        start = end
    scores = []
    for p in pairs:
        q = _vec(p.query, None, texts, embs)
        cond = p.query.text if is_conditioned(p, scoring) else None
        cands = torch.stack([_vec(c, cond, texts, embs) for c in p.candidates])
        scores.append((cands @ q).numpy())
    return scores


def _key(side: Side, cond: str | None) -> str:
    return side.key() if cond is None else conditioned_key(side, cond)


def _vec(side: Side, cond, texts, embs) -> Tensor:
    return texts[side.text].float().cpu() if side.video is None else embs[_key(side, cond)]


def _scored_sides(p: Pair, scoring: str):
    yield p.query, None
    cond = p.query.text if is_conditioned(p, scoring) else None
    for c in p.candidates:
        yield c, cond
