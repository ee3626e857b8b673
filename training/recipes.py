"""Training recipes as data: every setting `qaslr train` (and, for the feature options, `qaslr eval`)
defaults per recipe, one frozen record per recipe, looked up by name (``--recipe NAME``).

- ``paper``: the paper's post-training recipe (§3.4, §A.1-A.2), the default. Uniform frame selection
  and indexable scoring (one query-independent embedding per video, Eq. 1): a head for `indexer
  build`. Loss Eq. 14 = L_final (Eq. 11, co-positive masking) + 0.1 L_step (Eq. 12) + 0.01 L_distill
  (Eq. 13); AdamW, lr 1e-4 (§A.2); N = 32 think tokens (§3.2); initial tau 0.05 (Eq. 1 / Eq. 11).
  ``indexable`` is its older name.
- ``two-stage``: a rerank head for the service's stage 2 (QASLR_RERANK_HEAD). Query-aware selection
  (Q-Frame, §A.4) and conditioned scoring (each candidate encoded under each query, Eq. 1), the query
  embedding as the head's conditioning input (Eq. 4, c = q), and three additions of ours measured in
  training/README.md ("The two-stage recipe"): L_clip with weight 30 (training/losses.py), the
  evidence sink (a learnable "nothing here" token next to Eq. 7's evidence) and identity
  initialisation of the evidence-to-readout path.

Explicit command-line flags override a recipe's values. Where the query text goes in the backbone
prompt defaults to ``core.config.DEFAULT_TEXT_CONDITIONING`` in every recipe, the same default
serving uses, and a trained head records it in its config. This module imports nothing heavy, so
the command line can read its defaults without loading torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from core.config import DEFAULT_TEXT_CONDITIONING, TextConditioning

__all__ = ["DEFAULT_RECIPE", "RECIPES", "RECIPE_ALIASES", "Recipe", "get_recipe", "recipe_names"]

# The loss weights of Eq. 14 (§A.2) and of L_clip; the same numbers as training/losses.py's defaults
# (LAMBDA_STEP, LAMBDA_DISTILL, LAMBDA_CLIP), which tests/training/test_recipes.py keeps in step. Written
# out here so that reading a recipe does not import torch.
_LAMBDA_STEP = 0.1  # Eq. 12, §A.2
_LAMBDA_DISTILL = 0.01  # Eq. 13, §A.2
_LAMBDA_CLIP = 30.0  # L_clip of the two-stage recipe (ours; training/README.md)


@dataclass(frozen=True)
class Recipe:
    """One training recipe: the defaults it gives `qaslr train`'s options (same names, underscores)."""

    name: str
    summary: str
    # feature options (must match between train and eval; they key the feature cache)
    selection: str = "uniform"  # uniform | query-aware (Eq. 2 / Q-Frame, §A.4)
    scoring: str = "indexable"  # indexable | conditioned (Eq. 1)
    text_conditioning: TextConditioning = DEFAULT_TEXT_CONDITIONING  # query text in the prompt
    # the head
    think_tokens: int = 32  # N (§3.2)
    init_temperature: float = 0.05  # initial tau of Eq. 1 / Eq. 11 (learnable)
    query_conditioning: bool = False  # Eq. 4 with c = q (only with conditioned scoring)
    evidence_sink: bool = False  # the "nothing here" evidence token (ours, next to Eq. 7)
    identity_init: bool = False  # evidence-to-readout path starts as the identity (ours)
    query_whitening: bool = False  # q whitened by the training queries before P_c (ours)
    # optimisation (§A.2)
    epochs: int = 5  # paper: 3-5
    batch_size: int = 32
    lr: float = 1e-4  # AdamW
    weight_decay: float = 0.01
    lambda_step: float = _LAMBDA_STEP  # Eq. 14's weight of L_step (Eq. 12)
    lambda_distill: float = _LAMBDA_DISTILL  # Eq. 14's weight of L_distill (Eq. 13)
    lambda_clip: float = 0.0  # weight of L_clip (ours); 0 = off

    def __post_init__(self) -> None:
        if self.selection not in ("uniform", "query-aware"):
            raise ValueError(f"recipe {self.name}: selection must be uniform or query-aware")
        if self.scoring not in ("indexable", "conditioned"):
            raise ValueError(f"recipe {self.name}: scoring must be indexable or conditioned")
        if (self.lambda_clip > 0 or self.query_conditioning) and self.scoring != "conditioned":
            raise ValueError(f"recipe {self.name}: L_clip and query conditioning need conditioned scoring")

    def settings(self) -> dict:
        """The option defaults this recipe stands for (everything but its name and summary)."""
        d = asdict(self)
        del d["name"], d["summary"]
        return d


PAPER = Recipe(
    name="paper",
    summary="the paper's recipe (§3.4, §A.1-A.2): uniform selection, indexable scoring, Eq. 11-14; "
    "a head for `indexer build`",
)
TWO_STAGE = Recipe(
    name="two-stage",
    summary="a rerank head for stage 2: query-aware selection, conditioned scoring, a query-"
    "conditioned head, L_clip (weight 30, single-event pairs only), evidence sink, identity init",
    selection="query-aware",
    scoring="conditioned",
    query_conditioning=True,
    evidence_sink=True,
    identity_init=True,
    lambda_clip=_LAMBDA_CLIP,
)

RECIPES: dict[str, Recipe] = {r.name: r for r in (PAPER, TWO_STAGE)}
RECIPE_ALIASES = {"indexable": "paper"}  # --recipe indexable, the paper recipe's older name
DEFAULT_RECIPE = PAPER.name


def recipe_names() -> tuple[str, ...]:
    """Every name ``get_recipe`` accepts (recipes, then aliases): the choices of ``--recipe``."""
    return (*RECIPES, *RECIPE_ALIASES)


def get_recipe(name: str | None = None) -> Recipe:
    """The recipe called ``name`` (or an alias of it); ``None`` gives the default, ``paper``."""
    key = DEFAULT_RECIPE if name is None else RECIPE_ALIASES.get(name, name)
    try:
        return RECIPES[key]
    except KeyError:
        raise ValueError(f"unknown recipe {name!r}; choose from {', '.join(recipe_names())}") from None
