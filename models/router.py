"""Which queries are about time, and what their moments look like: the router and the selection
query a rerank head that reads moments ships with.

A logistic regression on the query embedding q (trained with the head, training.moment_head):

    p(about time | q) = sigmoid(w · q + b)

"About time" is what single frames cannot answer: something moves, grows or changes colour, one
event happens before another, an event happens a number of times. The cascade (engine.search.cascade)
sends a query to the head when p reaches ``threshold`` and the frame tier cannot tell its first
candidates apart; the decision is learned from the query's embedding, never read off its words by a
template, and every answer records it.

The selection query (``SelectionQuery``) is where query-aware selection looks for such a query's
moments. A query about time names what changes or what happens when ("a red square moves from left
to right", "A, then B"); the frames that hold its evidence show the events it names, but its
embedding need not lie near theirs (a tiny-world backbone that learned to see motion moved its
motion texts' embeddings away from the still frames of their events: models.windows picks moments
by q · f_c). A small residual map, trained with the head on the world's texts
(training.selection_query), points q at the events it names:

    q_sel = normalize(q + W q + b + W_2 gelu(W_1 q + b_1) + b_2)
                                      (W, b, W_2, b_2 = 0 at initialisation: q itself)

(the residual branch W_2 gelu(W_1 q + b_1) + b_2 where it ships one: a map without it is linear).

Selection (Eq. 2: the frame tier's ranking of the candidates a head reads, and each candidate's
windows) uses q_sel; the head scores with q and the query's text, s_ij = q · z_T (Eq. 1).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

__all__ = [
    "ROUTER_FILENAME",
    "SELECTION_FILENAME",
    "Router",
    "SelectionQuery",
    "frame_evidence",
    "load_router",
    "load_selection",
    "save_router",
]

ROUTER_FILENAME = "router.json"
SELECTION_FILENAME = "selection.safetensors"


def frame_evidence(selected, own, selection_weight: float, frame_weight: float):
    """The frame bank's terms of a rerank head's score, s = q · z_T + selection_weight · max_c q_sel · f_c
    + frame_weight · max_c q · f_c: ``selected`` the candidate's best frame under q_sel, ``own`` under q
    (floats, arrays or tensors alike). The cascade adds them where it serves the head
    (engine.search.cascade); training can rank by the same sum (training.moment_head)."""
    return selection_weight * selected + frame_weight * own


@dataclass(frozen=True)
class SelectionQuery:
    """q -> q_sel (module docstring)."""

    weight: torch.Tensor  # [d, d]
    bias: torch.Tensor  # [d]
    # the residual branch W_2 gelu(W_1 q + b_1) + b_2 (None: a linear map)
    hidden_weight: torch.Tensor | None = None  # W_1 [h, d]
    hidden_bias: torch.Tensor | None = None  # b_1 [h]
    out_weight: torch.Tensor | None = None  # W_2 [d, h]
    out_bias: torch.Tensor | None = None  # b_2 [d]

    def __call__(self, q: torch.Tensor) -> torch.Tensor:
        """q_sel for query embeddings [..., d] (float32, unit length)."""
        x = q.float()
        y = x + x @ self.weight.T + self.bias
        if self.hidden_weight is not None:
            y = y + F.gelu(x @ self.hidden_weight.T + self.hidden_bias) @ self.out_weight.T + self.out_bias
        return F.normalize(y, dim=-1)

    @property
    def hidden(self) -> int:
        """The residual branch's width (0: a linear map)."""
        return 0 if self.hidden_weight is None else int(self.hidden_weight.shape[0])

    def tensors(self) -> dict[str, torch.Tensor]:
        """What ``selection.safetensors`` holds, by name."""
        named = {"weight": self.weight, "bias": self.bias, "hidden_weight": self.hidden_weight,
                 "hidden_bias": self.hidden_bias, "out_weight": self.out_weight, "out_bias": self.out_bias}  # fmt: skip
        return {k: v.float().contiguous() for k, v in named.items() if v is not None}

    @property
    def fingerprint(self) -> str:
        """A short digest of the map (names caches of what selection chose with it)."""
        import hashlib

        digest = hashlib.sha256(b"".join(v.numpy().tobytes() for v in self.tensors().values()))
        return digest.hexdigest()[:16]

    def save(self, directory: str | Path) -> Path:
        from safetensors.torch import save_file

        path = Path(directory) / SELECTION_FILENAME
        save_file(self.tensors(), str(path))
        return path


@dataclass(frozen=True)
class Router:
    weight: torch.Tensor  # [d]
    bias: float
    threshold: float = 0.5
    selection: SelectionQuery | None = None  # where selection looks for a query about time's moments

    def probability(self, q: torch.Tensor) -> float:
        """p(about time) for one query embedding [d]."""
        return 1.0 / (1.0 + math.exp(-(float(q.float() @ self.weight) + self.bias)))

    def calls(self, q: torch.Tensor) -> torch.Tensor:
        """Whether each query embedding of ``q`` [n, d] is about time (p >= threshold), in one product:
        how training measures a router over many texts."""
        return torch.sigmoid(q.float() @ self.weight + self.bias) >= self.threshold

    @classmethod
    def from_fields(cls, fields: dict, selection: SelectionQuery | None = None) -> Router:
        """The router of router.json's fields (weight, bias, threshold)."""
        return cls(
            torch.tensor(fields["weight"], dtype=torch.float32), float(fields["bias"]), float(fields["threshold"]),
            selection=selection,
        )  # fmt: skip


def load_selection(directory: str | Path) -> SelectionQuery | None:
    """The selection query saved beside a head (``selection.safetensors``), or None when it has none
    (selection then uses q itself)."""
    path = Path(directory) / SELECTION_FILENAME
    if not path.is_file():
        return None
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    return SelectionQuery(**tensors)


def save_router(fields: dict, directory: str | Path) -> Path:
    """Write router.json's fields (weight, bias, threshold) into ``directory``, as training writes them."""
    path = Path(directory) / ROUTER_FILENAME
    path.write_text(json.dumps(fields, indent=1) + "\n")
    return path


def load_router(directory: str | Path) -> Router | None:
    """The router saved beside a head (``router.json``) with its selection query, or None when it has
    none."""
    path = Path(directory) / ROUTER_FILENAME
    if not path.is_file():
        return None
    return Router.from_fields(json.loads(path.read_text()), selection=load_selection(directory))
