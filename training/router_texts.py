"""The router's recipe on the world's texts (models.router.Router: is a query about time?).

The router is a logistic regression on q, p = sigmoid(w · q + b); the cascade (engine.search.cascade)
sends a query with p >= 0.5 to the head's route. It is fitted on every text the world says
(training.selection_query.selection_rows: each of the 32 events in every phrasing, counted once, twice
and three times, in each of its changes, and ``orders`` random pairs in order), a text labelled about
time unless it names one event alone, the two classes weighed alike (binary cross-entropy with
pos_weight = events alone / about time), full batch AdamW, lr 0.05, weight decay 1e-3, as the router
fitted on the training splits' queries was (training.moment_head.fit_router), for ``epochs``.

Why the texts and not the splits' queries: the splits hold about nine queries about time to one about an
event alone, and only the events their videos show; the router the shipped head was trained beside
called 19-22 % of the world's single-event texts about time (every phrasing of "a red square", "a white
bar", "a cyan triangle"...: it had learnt events, not phrasings), and with them the cascade's tie rule
was all that kept "white triangle shows up briefly" off the head (training/tiny_world/README.md).

What it learns is measured on events it never saw: a second fit leaves ``held_events`` of the 32 out of
every text, and the record gives, for each kind of text, the share called about time among the texts
naming a held-out event and among the rest. The router that ships is the fit on every text.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch

from training.selection_query import SelectionRecipe, embed_batched, selection_rows
from world.vocab import EVENTS

__all__ = ["RouterRecipe", "train_router_on_texts"]


@dataclass(frozen=True)
class RouterRecipe:
    orders: int = (
        SelectionRecipe.orders
    )  # random ordered pairs of events (of 32 x 31), as the selection query's
    held_events: int = 6  # events left out of the measuring fit
    epochs: int = 1000
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def train_router_on_texts(
    embed_texts: Callable[[Sequence[str]], torch.Tensor], recipe: RouterRecipe = RouterRecipe()
) -> tuple[dict, dict]:
    """(router.json's fields, the record) for a backbone whose text embedding is ``embed_texts`` (texts ->
    [n, d]): the weights and bias fitted on every text, threshold 0.5; and what the fit without
    ``recipe.held_events`` measured (module docstring)."""
    from models.router import Router
    from training.moment_head import fit_router

    rows = selection_rows(SelectionRecipe(orders=recipe.orders, seed=recipe.seed))
    with torch.no_grad():
        q = embed_batched(embed_texts, [r.text for r in rows])
    about = torch.tensor([float(r.kind != "event") for r in rows])
    held_events = set(random.Random(recipe.seed).sample(range(len(EVENTS)), recipe.held_events))
    held = torch.tensor([any(e in held_events for e in r.events) for r in rows])
    kinds = {
        kind: torch.tensor([r.kind == kind for r in rows]) for kind in ("event", "count", "change", "order")
    }

    def share(router: dict, mask: torch.Tensor) -> float:  # of the texts in mask, those called about time
        return round(float(Router.from_fields(router).calls(q[mask]).float().mean()), 4)

    measuring = fit_router(q[~held], about[~held], epochs=recipe.epochs, seed=recipe.seed)
    called = {
        f"{kind}, {name}": share(measuring, mask)
        for kind, of_kind in kinds.items()
        for name, mask in (("held-out events", of_kind & held), ("the rest", of_kind & ~held))
        if mask.any()
    }
    router = fit_router(q, about, epochs=recipe.epochs, seed=recipe.seed)
    fitted = {kind: share(router, of_kind) for kind, of_kind in kinds.items()}
    record = {
        "recipe": recipe.to_dict(),
        "texts": len(rows),
        "held_events": sorted(EVENTS[i].name for i in held_events),
        "called about time, the fit without the held-out events": called,
        "called about time, the fit on every text (shipped)": fitted,
    }
    return router, record
