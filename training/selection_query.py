"""The selection query's recipe (models.router.SelectionQuery): where query-aware selection looks for
the moments of a query about time.

Every text the world can say (world.vocab: each of the 32 events in every phrasing, counted once,
twice and three times, in each of its changes, and ``orders`` random pairs of events in order) is
paired with the events it names; its target is their still frames' text, the mean of the unit
embeddings of "<event> appears" (phrasing 0) of each event it names (a colour change names the
shape in both colours). The map is trained by cosine regression,

    L = mean_i (1 - q_sel,i · t_i),        q_sel = normalize(q + W q + b),   W, b = 0 at start

with AdamW. What it learns is measured on changes it never saw: ``held_share`` of the (event, change)
combinations are held out of training, and the record says how often q and q_sel name the right
event first among the 32 (their still texts) on them. Only the map trains; the backbone is frozen.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from models.router import SelectionQuery
from world.vocab import (
    CHANGES,
    COLOURS,
    COUNT_PHRASINGS,
    EVENTS,
    ORDER_PHRASINGS,
    PHRASINGS,
    Change,
    EventKind,
    change_texts,
    count_text,
    order_text,
)

__all__ = ["SelectionRecipe", "selection_rows", "train_selection"]


@dataclass(frozen=True)
class SelectionRecipe:
    orders: int = 800  # random ordered pairs of events (of 32 x 31)
    held_share: float = 0.2  # (event, change) combinations held out to measure what it learned
    steps: int = 600
    lr: float = 1e-2
    weight_decay: float = 1e-2
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Row:
    text: str
    events: tuple[int, ...]  # indices into world.vocab.EVENTS it names
    kind: str  # event, count, change, order
    combo: tuple | None = None  # a change's (event, change, colour it turns to)


def selection_rows(recipe: SelectionRecipe) -> list[Row]:
    """Every text the world says about single events, counts and changes, and ``recipe.orders``
    ordered pairs (module docstring)."""
    rng = random.Random(recipe.seed)
    rows = []
    for e in EVENTS:
        rows += [Row(e.text(p), (e.index,), "event") for p in range(len(PHRASINGS))]
        rows += [Row(count_text(e, n, p), (e.index,), "count") for n in COUNT_PHRASINGS
                 for p in range(len(COUNT_PHRASINGS[n]))]  # fmt: skip
        for change in CHANGES:
            tos = [c for c in COLOURS if c != e.colour] if change == "recolour" else [None]
            for to in tos:
                named = (e.index,) + ((EventKind(to, e.shape).index,) if to else ())
                rows += [Row(t, named, "change", (e.index, change, to))
                         for t in change_texts(Change(e, change, to))]  # fmt: skip
    for _ in range(recipe.orders):
        a, b = rng.sample(EVENTS, 2)
        rows.append(Row(order_text(a, b, rng.randrange(len(ORDER_PHRASINGS))), (a.index, b.index), "order"))
    return rows


def train_selection(
    embed_texts: Callable[[Sequence[str]], torch.Tensor], recipe: SelectionRecipe = SelectionRecipe()
) -> tuple[SelectionQuery, dict]:
    """The selection query for a backbone whose text embedding is ``embed_texts`` (texts -> [n, d]),
    and what it measured (module docstring)."""
    torch.manual_seed(recipe.seed)
    rows = selection_rows(recipe)
    combos = sorted({r.combo for r in rows if r.combo is not None}, key=str)
    random.Random(recipe.seed).shuffle(combos)
    held = set(combos[: round(len(combos) * recipe.held_share)])
    train = [r for r in rows if r.combo not in held]
    test = [r for r in rows if r.combo is not None and r.combo in held]
    with torch.no_grad():
        stills = F.normalize(_embed(embed_texts, [e.text(0) for e in EVENTS]), dim=-1)
        q_train = F.normalize(_embed(embed_texts, [r.text for r in train]), dim=-1)
        q_test = F.normalize(_embed(embed_texts, [r.text for r in test]), dim=-1)

    def targets(rs):
        return F.normalize(torch.stack([stills[list(r.events)].mean(0) for r in rs]), dim=-1)

    d = stills.shape[1]
    layer = torch.nn.Linear(d, d)
    torch.nn.init.zeros_(layer.weight)
    torch.nn.init.zeros_(layer.bias)
    opt = torch.optim.AdamW(layer.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    t_train = targets(train)
    for _ in range(recipe.steps):
        loss = (1 - (F.normalize(q_train + layer(q_train), dim=-1) * t_train).sum(-1)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    selection = SelectionQuery(layer.weight.detach().clone(), layer.bias.detach().clone())
    record = {"recipe": recipe.to_dict(), "texts": {"train": len(train), "held out": len(test)},
              "final_loss": float(loss.detach())}  # fmt: skip
    with torch.no_grad():
        for name, q, rs in (("train", q_train, train), ("held-out changes", q_test, test)):
            for label, vec in (("q", q), ("q_sel", selection(q))):
                top = (vec @ stills.T).argmax(-1).tolist()
                record[f"{name}: {label} names a right event first"] = sum(
                    t in r.events for t, r in zip(top, rs, strict=True)
                ) / max(len(rs), 1)
    return selection, record


def _embed(embed_texts, texts: list[str], batch: int = 64) -> torch.Tensor:
    return torch.cat([embed_texts(texts[i : i + batch]).float() for i in range(0, len(texts), batch)])
