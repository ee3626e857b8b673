"""Options shared by `qaslr train` and `qaslr eval` (the data, the backbone, the feature cache) and the
helpers that turn them into a feature store. Not a command itself."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from core.config import DEFAULT_CLIP_LEN, DEFAULT_MAX_EVIDENCE, DEFAULT_MAX_FRAMES, TextConditioning
from training.recipes import DEFAULT_RECIPE, get_recipe, recipe_names

logger = logging.getLogger(__name__)


def add_feature_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("backbone and feature cache (must match between train and eval)")
    g.add_argument("--model", required=True, help="backbone: hub id or checkpoint directory (frozen)")
    g.add_argument(
        "--cache",
        default=None,
        help="feature cache root (default: .qaslr-features next to the (first) --data file); features are "
        "stored under a subfolder named by the backbone and selection fingerprint",
    )
    g.add_argument(
        "--max-frames",
        type=int,
        default=DEFAULT_MAX_FRAMES,
        help="K_max selected frames per video (paper 128)",
    )
    g.add_argument(
        "--clip-len", type=int, default=DEFAULT_CLIP_LEN, help="L frames per clip at full budget (paper 16)"
    )
    g.add_argument(
        "--evidence-tokens",
        type=int,
        default=DEFAULT_MAX_EVIDENCE,
        help="M evidence tokens per clip (paper 256)",
    )
    g.add_argument(
        "--selection",
        choices=("uniform", "query-aware"),
        default=None,
        help="frame selection for items with a conditioning text (QA questions, query-conditioned "
        f"candidates); query-independent items always use uniform selection ({by_recipe('selection')})",
    )
    g.add_argument(
        "--scoring",
        choices=("indexable", "conditioned"),
        default=None,
        help="Eq. 1: indexable (one query-independent embedding per video) or conditioned (each "
        f"candidate of a bounded set encoded under each query) ({by_recipe('scoring')})",
    )
    g.add_argument(
        "--text-conditioning",
        choices=tuple(TextConditioning),
        default=None,
        help="where a query-conditioned candidate's query text goes in the backbone prompt: none, "
        "after the video (the reference order) or before it; the head records it "
        f"({by_recipe('text_conditioning')}, as in serving)",
    )
    g.add_argument(
        "--recipe",
        choices=recipe_names(),
        default=None,
        help="the training recipe (training/recipes.py) whose settings are the defaults of the "
        "options marked 'by recipe'; explicit options override it. "
        + "; ".join(f"{n} = {get_recipe(n).summary}" for n in recipe_names() if n == get_recipe(n).name)
        + f" (default: {DEFAULT_RECIPE}; indexable is an older name of paper)",
    )
    g.add_argument("--instruction", default=None, help="backbone instruction (system message)")
    g.add_argument(
        "--device",
        default=None,
        help="cpu, cuda, cuda:1, auto: the backbone's and (qaslr train) the head's device "
        "(default auto: cuda if available)",
    )
    g.add_argument(
        "--tasks",
        default=None,
        help="comma-separated subset of retrieval,moment,classification,qa (default: all in the file)",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bars")


def by_recipe(field: str) -> str:
    """Help text: a recipe-defaulted option's default under each recipe."""
    values = {n: getattr(get_recipe(n), field) for n in recipe_names() if n == get_recipe(n).name}
    values = {n: ({True: "on", False: "off"}[v] if isinstance(v, bool) else v) for n, v in values.items()}
    if len(set(values.values())) == 1:
        return f"by recipe: {next(iter(values.values()))}"
    return "by recipe: " + ", ".join(f"{v} with {n}" for n, v in values.items())


def apply_recipe(args, fields: tuple[str, ...] = ("selection", "scoring", "text_conditioning")):
    """Fill every option in ``fields`` the command line left unset (None) from the chosen recipe
    (training/recipes.py; --recipe, default paper); explicit options keep their values. Sets
    ``args.recipe`` to the recipe's name and returns the recipe."""
    recipe = get_recipe(getattr(args, "recipe", None))
    args.recipe = recipe.name
    for field in fields:
        if getattr(args, field, None) is None:
            setattr(args, field, getattr(recipe, field))
    return recipe


def feature_settings(args):
    from training.features import FeatureSettings

    return FeatureSettings(
        max_frames=args.max_frames,
        clip_len=args.clip_len,
        max_evidence=args.evidence_tokens,
        selection=args.selection,
        instruction=args.instruction,
        text_conditioning=args.text_conditioning,
    )


def load_task_pairs(path: str, tasks: str | None):
    from training.data import TASKS, DataError, load_pairs

    pairs = load_pairs(path)
    if tasks:
        wanted = [t.strip() for t in tasks.split(",") if t.strip()]
        bad = [t for t in wanted if t not in TASKS]
        if bad:
            raise DataError(f"--tasks: unknown task(s) {bad}; choose from {TASKS}")
        pairs = [p for p in pairs if p.task in wanted]
        if not pairs:
            raise DataError(f"{path}: no pairs of task(s) {wanted}")
    return pairs


def default_cache(data_path: str) -> Path:
    return Path(data_path).resolve().parent / ".qaslr-features"


def open_store(args, pairs, *, cache_root: Path):
    """Return a FeatureStore holding every item ``pairs`` need, encoding missing ones with the
    backbone (which is loaded only when something is missing and its directory is local)."""
    from models.backbone import checkpoint_fingerprint, load_backbone
    from training.features import FeatureStore, build_cache, cache_fingerprint, required_items

    settings = feature_settings(args)
    model_dir = Path(args.model)
    if model_dir.is_dir():
        directory = cache_root / cache_fingerprint(checkpoint_fingerprint(model_dir), settings)
        if (directory / "manifest.json").is_file():
            import json

            manifest = json.loads((directory / "manifest.json").read_text())
            items, texts = required_items(pairs, scoring=args.scoring)
            if {i.key for i in items} <= set(manifest["keys"]) and set(texts) <= set(manifest["text_keys"]):
                logger.info("feature cache hit: %s", directory)
                return FeatureStore(directory)
    backbone = load_backbone(args.model, device=args.device)
    directory = build_cache(
        cache_root,
        backbone=backbone,
        pairs=pairs,
        settings=settings,
        scoring=args.scoring,
        progress=not args.no_progress,
    )
    del backbone
    return FeatureStore(directory)
