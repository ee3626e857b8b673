"""The QASLR rerank head for what one frame cannot show: trained by the paper's recipe on world queries
about time (motion and change, order, count), measured against the frame tier on the same inputs.

The head is the streaming head of models.head (Eq. 6-10) over the candidate's moments
(models.windows: T clips of consecutive bank frames around its relevance peaks, in time order, each
bank frame read with the source frame 0.2 s after it as the motion recipe trains clips; candidates
and peaks chosen by the selection query, training.selection_query),
conditioned on the query three ways: H_0 shifted by P_c q, one update over the query's token states
before the first clip (``text_memory``: it reads the query's text), and s_ij = q · z_T (Eq. 1). Its
memory update is gated (``update_gate``) and every clip's evidence has a "nothing here" sink.
Only the head trains; the backbone is frozen (its evidence is computed once, training.moment_data).

Loss per batch of queries, each with its candidates (the frame tier's first few, the query's own
video the positive, its pair partner a hard negative, the other candidates it is true of masked):

    L_final    Eq. 11  CE over each query's candidates of q · z_T / tau, co-positives masked
    L_step     Eq. 12  the same at every step t (z_t after t clips), over queries whose positive has one
    L_distill  Eq. 13  1 - z_t · sg(z_T) over each candidate's earlier steps
    L = L_final + lambda_step L_step + lambda_distill L_distill                       (Eq. 14)

with the paper's lambda_step = 0.1 and lambda_distill = 0.01, AdamW; the head starts from the
identity initialisation (models.head: it reads out about the clips' own states) with dropout 0.1
and weight decay 0.1 for 20 epochs (on development seed 201 the first recipe, N(0, 0.02), no dropout,
40 epochs, overfitted: training loss 0.5, change within the pair 0.66; this one 0.69-0.75). A
router, a logistic regression on q with its two classes weighed alike, learns which queries are about time (the decision of whether the head runs is made from it and
from the frame tier's own evidence, engine.search); it is saved with the head (``router.json``). The
shipped head's router was fitted again on the world's texts (training.router_texts), not the splits'
queries.
Every constant here was chosen on the development seeds (``MomentRecipe.dev_seeds``); the numbers a
user reads come from benchmarks/bench_quality.py on seeds that chose nothing.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from core.config import DEFAULT_HEAD_FRAME_WEIGHT, DEFAULT_HEAD_SELECTION_WEIGHT
from models.head import StreamingHead, StreamingHeadConfig, create_head, save_head
from models.router import Router, frame_evidence, save_router
from models.windows import WindowPlan, moment_plan
from training.losses import LAMBDA_DISTILL, LAMBDA_STEP, distill_loss, final_loss, step_loss_conditioned
from training.moment_data import QueryItem, Split

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MomentRecipe:
    train_seeds: tuple[int, ...] = (101, 102, 103)
    dev_seeds: tuple[int, ...] = (201,)  # every constant below was chosen on these
    corpus: dict = field(
        default_factory=lambda: dict(
            videos=6, order_pairs=10, count_pairs=6, count3_pairs=6, motion_pairs=24,
            min_duration_s=40.0, max_duration_s=90.0,
        )
    )  # fmt: skip
    candidates: int = 6
    # each candidate's moments read whole, as temporal pairs spread over each run above its floor, as
    # the motion recipe trains clips and one-shot reads moments (models.windows.moment_plan)
    windows: WindowPlan = field(default_factory=lambda: moment_plan(4))
    think_tokens: int = 8
    heads: int = 4
    depth: int = 1
    epochs: int = 20
    batch: int = 16
    lr: float = 3e-4
    weight_decay: float = 0.1
    dropout: float = 0.1
    init_temperature: float = 0.05
    lambda_step: float = LAMBDA_STEP
    lambda_distill: float = LAMBDA_DISTILL
    # the score the head is trained to rank by: q · z_T + selection_weight · max_c q_sel · f_c +
    # frame_weight · max_c q · f_c. With the weights it is served with (engine.search.cascade: 2 and
    # 0.5) q · z_T would learn only what the frame bank does not tell; tried on development split 201,
    # that head ranked worse by the served score (change within the pair 0.83 against 0.95, Hit@1 among
    # the candidates 0.46 against 0.55: training/tiny_world/README.md), so it trains by q · z_T alone
    selection_weight: float = 0.0
    frame_weight: float = 0.0
    # order contrast: every order query's own video also stands as a negative with its clips in the
    # other order (the same evidence, the events the other way round; ``order_contrast``)
    order_contrast: bool = False
    # composed order queries added to the training splits' (training.order_mix: clips of two still
    # events from the splits' encoded windows, in one order and the other)
    composed_orders: int = 0
    # the share of them whose four events are one colour's shapes (training.order_mix ``same_colour``)
    composed_same_colour: float = 0.0
    # the head reads the query's words and their places besides its token states (models.head
    # ``query_words``)
    query_words: bool = False
    seed: int = 0

    def to_dict(self) -> dict:
        data = asdict(self)
        data["windows"] = self.windows.to_dict()
        return data


def head_config(recipe: MomentRecipe, hidden: int, embed: int, max_evidence: int) -> StreamingHeadConfig:
    return StreamingHeadConfig(
        hidden_size=hidden,
        embed_dim=embed,
        num_think_tokens=recipe.think_tokens,
        max_evidence_tokens=max_evidence,
        num_heads=recipe.heads,
        depth=recipe.depth,
        init_temperature=recipe.init_temperature,
        query_conditioning=True,
        text_memory=True,
        query_words=recipe.query_words,
        update_gate=True,
        evidence_positions=True,
        evidence_sink=True,
        text_conditioning="none",
        window_plan=recipe.windows,
        identity_init=True,  # the untrained head reads out about the clips' own states (models.head)
        dropout=recipe.dropout,
    )


# -- batches --------------------------------------------------------------------------------------------


@dataclass
class Batch:
    evidence: torch.Tensor  # [B*C, T, M, D]
    evidence_mask: torch.Tensor  # [B*C, T, M]
    positions: torch.Tensor  # [B*C, T, M, 4] where each evidence token is
    step_mask: torch.Tensor  # [B*C, T]
    q: torch.Tensor  # [B, d]
    states: torch.Tensor  # [B*C, S, D] the query's token states, repeated per candidate
    states_mask: torch.Tensor  # [B*C, S]
    target: torch.Tensor  # [B]
    valid: torch.Tensor  # [B, C] a real candidate (not padding)
    selected: torch.Tensor  # [B, C] max_c q_sel · f_c of each candidate's bank
    own: torch.Tensor  # [B, C] max_c q · f_c
    true_of: torch.Tensor  # [B, C]
    size: tuple[int, int]  # (B, C)
    words: torch.Tensor | None = None  # [B*C, S, D] the query's word embeddings (items that have them)


def window_key(candidate: str, window: tuple) -> tuple:
    """A window's evidence key: (candidate, first, last), or a composed candidate's (video, first,
    last) as it stands (training.order_mix: its clips come from several videos)."""
    return window if len(window) == 3 else (candidate, *window)


def make_batch(items: list[QueryItem], evidence: dict, *, order=None) -> Batch:
    """The head's inputs for ``items``; ``order`` (per item, per candidate: a permutation of its
    windows) feeds the Table 5 controls (shuffled, reversed clips)."""
    b, c = len(items), max(len(i.candidates) for i in items)
    t = max(len(w) for i in items for w in i.windows)
    m = max(evidence[window_key(cand, w)][0].shape[0] for i in items
            for cand, ws in zip(i.candidates, i.windows, strict=True) for w in ws)  # fmt: skip
    d_hidden = items[0].states.shape[-1]
    s = max(i.states.shape[0] for i in items)
    ev = torch.zeros(b * c, t, m, d_hidden)
    emask = torch.zeros(b * c, t, m, dtype=torch.bool)
    places = torch.zeros(b * c, t, m, 4)
    smask = torch.zeros(b * c, t, dtype=torch.bool)
    states = torch.zeros(b * c, s, d_hidden)
    words = torch.zeros(b * c, s, d_hidden) if all(i.words is not None for i in items) else None
    qmask = torch.zeros(b * c, s, dtype=torch.bool)
    valid = torch.zeros(b, c, dtype=torch.bool)
    true_of = torch.zeros(b, c, dtype=torch.bool)
    selected, own = torch.zeros(b, c), torch.zeros(b, c)
    for i, item in enumerate(items):
        for j, (cand, ws) in enumerate(zip(item.candidates, item.windows, strict=True)):
            row = i * c + j
            valid[i, j], true_of[i, j] = True, item.true_of[j]
            selected[i, j], own[i, j] = item.frame_scores[j], item.query_frame_scores[j]
            steps = ws if order is None else [ws[k] for k in order(i, j, len(ws))]
            for k, w in enumerate(steps):
                tokens, mask, where = evidence[window_key(cand, w)]
                ev[row, k, : tokens.shape[0]] = tokens.float()
                emask[row, k, : mask.shape[0]] = mask
                places[row, k, : where.shape[0]] = where.float()
                smask[row, k] = True
            n = item.states.shape[0]
            states[row, :n] = item.states.float()
            if words is not None:
                words[row, :n] = item.words.float()
            qmask[row, :n] = True
    q = torch.stack([i.q for i in items])
    target = torch.tensor([i.target for i in items])
    return Batch(
        ev, emask, places, smask, q, states, qmask, target, valid, selected, own, true_of, (b, c), words
    )


def run_head(head: StreamingHead, batch: Batch, *, reset_memory: bool = False):
    """(final [B, C, d], steps [B, C, T, d], step mask [B, C, T]) of every candidate under its query."""
    b, c = batch.size
    q_rows = batch.q.repeat_interleave(c, dim=0)
    out = head(batch.evidence, batch.evidence_mask, batch.step_mask, reset_memory=reset_memory, query=q_rows,
               query_states=batch.states, query_mask=batch.states_mask, evidence_positions=batch.positions,
               query_words=batch.words)  # fmt: skip
    t = out.step_embeddings.shape[1]
    return (
        out.final.view(b, c, -1),
        out.step_embeddings.view(b, c, t, -1),
        out.step_mask.view(b, c, t),
    )


def batch_loss(head: StreamingHead, batch: Batch, recipe: MomentRecipe) -> dict[str, torch.Tensor]:
    """Eq. 11-14 over one batch (module docstring)."""
    final, steps, step_mask = run_head(head, batch)
    tau = head.temperature
    rows = torch.arange(batch.size[0])
    positive = torch.zeros_like(batch.valid)
    positive[rows, batch.target] = True
    exclude = ~batch.valid | (batch.true_of & ~positive)  # padding and co-positives (Eq. 11)
    offset = frame_evidence(batch.selected, batch.own, recipe.selection_weight, recipe.frame_weight)
    l_final = final_loss(batch.q, final, tau, exclude=exclude, target=batch.target, offset=offset)
    step_valid = step_mask & ~exclude[..., None]
    l_step = step_loss_conditioned(batch.q, steps, step_valid, batch.target, tau, offset=offset)
    b, c, t, d = steps.shape
    l_distill = distill_loss(steps.reshape(b * c, t, d), step_mask.reshape(b * c, t))
    total = l_final + recipe.lambda_step * l_step + recipe.lambda_distill * l_distill
    return {"loss": total, "final": l_final, "step": l_step, "distill": l_distill}


# -- data -----------------------------------------------------------------------------------------------


def moment_splits(
    work: Path, model: Path, recipe: MomentRecipe, *groups: tuple[int, ...], selection_recipe=None
):
    """(selection query, its record, the splits of each group of seeds): every split rendered before
    any backbone loads (libvpx has failed to open its encoder, EINVAL, in a process that had already
    built indexes), then the selection query trained on the world's texts (training.selection_query, by
    ``selection_recipe``: its default when None), then each split's candidates and moments chosen by it
    (training.moment_data)."""
    from training.moment_data import build_split, query_embedder, render_split
    from training.selection_query import SelectionRecipe, train_selection

    seeds = [s for group in groups for s in group]
    for seed in seeds:
        render_split(work, seed, recipe.corpus)
    selection, record = train_selection(
        query_embedder(work, seeds[0], model, recipe.corpus), selection_recipe or SelectionRecipe()
    )
    splits = [
        [
            build_split(
                work,
                s,
                model,
                corpus=recipe.corpus,
                candidates=recipe.candidates,
                plan=recipe.windows,
                selection=selection,
            )
            for s in group
        ]  # fmt: skip
        for group in groups
    ]
    return selection, record, splits


# -- training -------------------------------------------------------------------------------------------


def train_head(train: list[Split], dev: list[Split], recipe: MomentRecipe, *, hidden: int, embed: int,
               max_evidence: int, log=None) -> tuple[StreamingHead, list[dict]]:  # fmt: skip
    """Train a head on ``train`` (Eq. 14, AdamW), evaluating on ``dev`` after every few epochs."""
    torch.manual_seed(recipe.seed)
    head = create_head(head_config(recipe, hidden, embed, max_evidence), seed=recipe.seed)
    evidence = {k: v for s in train for k, v in s.evidence.items()}
    items = [i for s in train for i in s.items]
    if recipe.order_contrast:
        items = [order_contrast(i) for i in items]
    opt = torch.optim.AdamW(head.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    steps_per_epoch = math.ceil(len(items) / recipe.batch)
    total = recipe.epochs * steps_per_epoch
    rng = np.random.default_rng(recipe.seed)
    history = []
    step = 0
    started = time.perf_counter()
    for epoch in range(recipe.epochs):
        head.train()
        order = rng.permutation(len(items))
        for start in range(0, len(items), recipe.batch):
            lr = recipe.lr * 0.5 * (1 + math.cos(math.pi * step / total))
            for group in opt.param_groups:
                group["lr"] = lr
            batch = make_batch([items[k] for k in order[start : start + recipe.batch]], evidence)
            losses = batch_loss(head, batch, recipe)
            opt.zero_grad(set_to_none=True)
            losses["loss"].backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
            step += 1
        record = {"epoch": epoch + 1, "minutes": (time.perf_counter() - started) / 60,
                  **{k: float(v.detach()) for k, v in losses.items()}, "temperature": float(head.temperature.detach())}  # fmt: skip
        if dev and ((epoch + 1) % 5 == 0 or epoch + 1 == recipe.epochs):
            head.eval()  # measured as served, dropout off (the next epoch trains again)
            record["dev"] = evaluate(head, dev, recipe=recipe)["head"]
        history.append(record)
        if log is not None:
            log.write(json.dumps(record) + "\n")
            log.flush()
        logger.info("epoch %d: %s", epoch + 1, record)
    head.eval()
    return head, history


def order_contrast(item: QueryItem) -> QueryItem:
    """An order query with one more negative candidate: its own video's clips read in the other
    order (Table 5's reversed control as a training negative). The evidence is the same as the
    positive's, so only the order of the clips tells the two apart: a hard negative that the pair
    partner (other pixels, another rendering of the events) is only in part. Other kinds as they are:
    a change is read within each clip, and a count does not change with the order."""
    if item.kind != "order" or len(item.windows[item.target]) < 2:
        return item
    t = item.target
    return replace(
        item,
        candidates=[*item.candidates, item.candidates[t]],
        true_of=[*item.true_of, False],
        windows=[*item.windows, item.windows[t][::-1]],
        frame_scores=[*item.frame_scores, item.frame_scores[t]],
        query_frame_scores=[*item.query_frame_scores, item.query_frame_scores[t]],
    )


# -- evaluation -----------------------------------------------------------------------------------------

CONTROLS = ("full", "shuffled", "reversed", "reset memory", "last clip only")


@torch.no_grad()
def scores(head: StreamingHead, items: list[QueryItem], evidence: dict, control: str = "full", *,
           seed: int = 0, batch: int = 32) -> list[list[np.ndarray]]:  # fmt: skip
    """Per item, per candidate: the readout scores q · z_t after each clip ([T]), under a Table 5
    control ("shuffled" / "reversed" clips, "reset memory" before every clip with the readouts pooled
    as training/README.md describes, "last clip only")."""
    rng = np.random.default_rng(seed)

    def order(i, j, n):
        if control == "shuffled":
            return list(rng.permutation(n))
        if control == "reversed":
            return list(range(n))[::-1]
        if control == "last clip only":
            return [n - 1]
        return list(range(n))

    out = []
    for start in range(0, len(items), batch):
        part = items[start : start + batch]
        b = make_batch(part, evidence, order=order)
        final, steps, mask = run_head(head, b, reset_memory=control == "reset memory")
        if control == "reset memory":  # every clip read alone; their readouts pooled (normalised mean)
            pooled = F.normalize((steps * mask[..., None]).sum(dim=2), dim=-1)
            steps = pooled[:, :, None, :].expand_as(steps)
        sims = torch.einsum("bd,bctd->bct", b.q, steps)
        for i, item in enumerate(part):
            out.append([sims[i, j, : int(mask[i, j].sum())].numpy() for j in range(len(item.candidates))])
    return out


def _metrics(items: list[QueryItem], choose) -> dict:
    """Within-pair accuracy and Hit@1 among the candidates, per kind of query and overall."""
    pair, hit = {}, {}
    for item in items:
        s = choose(item)
        kinds = (item.kind, "all")
        top = int(np.argmax(s))
        for k in kinds:
            hit.setdefault(k, []).append(item.true_of[top])
        if item.partner is not None:
            for k in kinds:
                pair.setdefault(k, []).append(s[item.target] > s[item.partner])
    return {
        "within_pair": {k: float(np.mean(v)) for k, v in pair.items()},
        "hit@1": {k: float(np.mean(v)) for k, v in hit.items()},
        "queries": {k: len(v) for k, v in hit.items()},
    }


def evaluate(head: StreamingHead, splits: list[Split], *, controls: bool = False,
             recipe: MomentRecipe | None = None) -> dict:  # fmt: skip
    """The head against the frame tier on the same candidates; with ``controls`` Table 5's controls
    and Table 6's partial readouts (after 25 / 50 / 75 / 100 % of the clips). "head" (and every
    control) ranks by the score ``recipe`` trains (q · z_T, plus the frame bank's terms,
    models.router.frame_evidence, where the recipe weighs them); "served" by the score the cascade serves, q · z_T + HEAD_SELECTION_WEIGHT ·
    max_c q_sel · f_c + HEAD_FRAME_WEIGHT · max_c q · f_c (core.config), and "frame terms" by those
    terms alone, no head."""
    recipe = recipe or MomentRecipe()
    items = [i for s in splits for i in s.items]
    evidence = {k: v for s in splits for k, v in s.evidence.items()}

    def bank(selection_weight: float, frame_weight: float):
        return lambda item: frame_evidence(
            np.asarray(item.frame_scores), np.asarray(item.query_frame_scores), selection_weight, frame_weight
        )

    trained = bank(recipe.selection_weight, recipe.frame_weight)
    served = bank(DEFAULT_HEAD_SELECTION_WEIGHT, DEFAULT_HEAD_FRAME_WEIGHT)

    def ranked(got, terms, pick=lambda s: s[-1]):
        return lambda item, it=iter(got): np.asarray([pick(s) for s in next(it)]) + terms(item)

    full = scores(head, items, evidence)
    result = {
        "frame tier": _metrics(items, lambda item: np.asarray(item.frame_scores)),
        "head": _metrics(items, ranked(full, trained)),
        "served": _metrics(items, ranked(full, served)),
        "frame terms": _metrics(items, served),
    }
    if controls:
        for control in CONTROLS[1:]:
            result[control] = _metrics(items, ranked(scores(head, items, evidence, control), trained))
        for share in (0.25, 0.5, 0.75):
            result[f"after {round(100 * share)} %"] = _metrics(
                items,
                ranked(full, trained, pick=lambda s, share=share: s[max(0, math.ceil(share * len(s)) - 1)]),
            )
    return result


# -- the router -----------------------------------------------------------------------------------------


def fit_router(x: torch.Tensor, about: torch.Tensor, *, epochs: int = 300, seed: int = 0) -> dict:
    """A logistic regression on q (``x`` [n, d]): is the query about time (``about`` 1: an order, a
    count, a change) rather than an event alone (0), the two classes weighed alike; full batch AdamW.
    Returns router.json's weight, bias and threshold."""
    torch.manual_seed(seed)
    layer = torch.nn.Linear(x.shape[1], 1)
    opt = torch.optim.AdamW(layer.parameters(), lr=0.05, weight_decay=1e-3)
    # the classes weigh alike: a split holds about nine queries about time to one about an event alone,
    # and a router trained on them as they come sent two in three single-event queries of a held-out
    # collection to the head (bench_quality's development seed 0)
    balance = (about == 0).sum() / (about == 1).sum().clamp(min=1)
    for _ in range(epochs):
        loss = F.binary_cross_entropy_with_logits(layer(x).squeeze(1), about, pos_weight=balance)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {"weight": layer.weight[0].tolist(), "bias": float(layer.bias.detach()), "threshold": 0.5}


def router_accuracy(router: dict, splits: list[Split]) -> float:
    """How often ``router`` (router.json's fields) calls the splits' queries as they are: about time, or an
    event alone."""
    items = [i for s in splits for i in s.items]
    about = torch.tensor([i.kind != "event" for i in items])
    with torch.no_grad():
        calls = Router.from_fields(router).calls(torch.stack([i.q for i in items]))
    return float((calls == about).float().mean())


def save(head: StreamingHead, router: dict, out: Path, record: dict) -> Path:
    """The head (models.head.save_head), its router and what it took, in ``out``."""
    save_head(head, out)
    save_router(router, out)
    (out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    return out
