"""Which queries are about time: the router a rerank head that reads moments ships with.

A logistic regression on the query embedding q (trained with the head, training.moment_head):

    p(about time | q) = sigmoid(w · q + b)

"About time" is what single frames cannot answer: something moves, grows or changes colour, one
event happens before another, an event happens a number of times. The cascade (engine.search.cascade)
sends a query to the head when p reaches ``threshold`` and the frame tier cannot tell its first
candidates apart; the decision is learned from the query's embedding, never read off its words by a
template, and every answer records it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["ROUTER_FILENAME", "Router", "load_router"]

ROUTER_FILENAME = "router.json"


@dataclass(frozen=True)
class Router:
    weight: torch.Tensor  # [d]
    bias: float
    threshold: float = 0.5

    def probability(self, q: torch.Tensor) -> float:
        """p(about time) for one query embedding [d]."""
        return 1.0 / (1.0 + math.exp(-(float(q.float() @ self.weight) + self.bias)))


def load_router(directory: str | Path) -> Router | None:
    """The router saved beside a head (``router.json``), or None when it has none."""
    path = Path(directory) / ROUTER_FILENAME
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return Router(
        torch.tensor(data["weight"], dtype=torch.float32), float(data["bias"]), float(data["threshold"])
    )
