"""The named training recipes (training/recipes.py) and how `qaslr train` reads its defaults from them."""

import json
import subprocess
import sys

import pytest

from core.config import DEFAULT_TEXT_CONDITIONING, TextConditioning
from qaslr.cli import build_parser, main
from qaslr.commands.train import resolve_recipe
from training.recipes import DEFAULT_RECIPE, RECIPES, get_recipe, recipe_names

FEATURE_ARGS = ["--max-frames", "8", "--clip-len", "2", "--evidence-tokens", "32"]
# what `qaslr train` defaulted to before the recipes were data (no --recipe, or --recipe indexable)
PAPER_DEFAULTS = dict(
    selection="uniform", scoring="indexable", think_tokens=32, init_temperature=0.05,
    query_conditioning=False, evidence_sink=False, identity_init=False, query_whitening=False, epochs=5,
    batch_size=32,
    lr=1e-4, weight_decay=0.01, lambda_step=0.1, lambda_distill=0.01, lambda_clip=0.0,
)  # fmt: skip
TWO_STAGE_CHANGES = dict(
    selection="query-aware", scoring="conditioned", query_conditioning=True, evidence_sink=True,
    identity_init=True, lambda_clip=30.0,
)  # fmt: skip


def _train_args(*extra):
    args = build_parser().parse_args(["train", "--data", "d.jsonl", "--model", "m", *extra])
    resolve_recipe(args)
    return vars(args)


def test_one_text_conditioning_default_for_training_and_serving():
    assert DEFAULT_TEXT_CONDITIONING == TextConditioning.NONE
    assert all(r.text_conditioning == DEFAULT_TEXT_CONDITIONING for r in RECIPES.values())


def test_recipes_are_named_frozen_records_of_todays_defaults():
    from training.losses import LAMBDA_CLIP, LAMBDA_DISTILL, LAMBDA_STEP

    assert set(RECIPES) == {"paper", "two-stage"} and DEFAULT_RECIPE == "paper"
    assert set(recipe_names()) == {"paper", "two-stage", "indexable"}
    assert get_recipe(None) is get_recipe("paper") is get_recipe("indexable")
    paper, two_stage = get_recipe("paper"), get_recipe("two-stage")
    assert paper.settings() == {**PAPER_DEFAULTS, "text_conditioning": "none"}
    assert two_stage.settings() == {**PAPER_DEFAULTS, **TWO_STAGE_CHANGES, "text_conditioning": "none"}
    assert (paper.lambda_step, paper.lambda_distill, two_stage.lambda_clip) == (
        LAMBDA_STEP,
        LAMBDA_DISTILL,
        LAMBDA_CLIP,
    )
    with pytest.raises(AttributeError):
        paper.lr = 1.0  # frozen
    with pytest.raises(ValueError, match="unknown recipe 'fast'"):
        get_recipe("fast")


@pytest.mark.parametrize("recipe", [[], ["--recipe", "paper"], ["--recipe", "indexable"]])
def test_the_command_line_takes_the_paper_recipe_by_default(recipe):
    args = _train_args(*recipe)
    assert {k: args[k] for k in PAPER_DEFAULTS} == PAPER_DEFAULTS
    assert args["text_conditioning"] == "none" and args["recipe"] == "paper"


def test_two_stage_recipe_and_explicit_flags_override_it():
    args = _train_args("--recipe", "two-stage")
    assert {k: args[k] for k in PAPER_DEFAULTS} == {**PAPER_DEFAULTS, **TWO_STAGE_CHANGES}
    args = _train_args(
        "--recipe", "two-stage", "--no-evidence-sink", "--epochs", "20", "--lr", "3e-4",
        "--lambda-clip", "0", "--text-conditioning", "after", "--selection", "uniform",
    )  # fmt: skip
    assert (args["evidence_sink"], args["epochs"], args["lr"], args["lambda_clip"]) == (False, 20, 3e-4, 0.0)
    assert args["text_conditioning"] == "after" and args["selection"] == "uniform"
    assert args["scoring"] == "conditioned"
    assert args["identity_init"] is True and args["query_conditioning"] is True
    # the recipe's query conditioning is for conditioned scoring only
    assert _train_args("--recipe", "two-stage", "--scoring", "indexable")["query_conditioning"] is False


def test_reading_the_recipes_does_not_import_torch():
    code = "import sys, training.recipes, qaslr.commands.train; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_a_head_trained_with_the_defaults_records_where_the_query_text_went(
    synthetic_set, tiny_checkpoint, tmp_path
):
    out = tmp_path / "run"
    code = main(
        ["train", "--data", str(synthetic_set / "train.jsonl"), "--cache", str(tmp_path / "cache"),
         "--model", str(tiny_checkpoint), *FEATURE_ARGS, "--no-progress", "--think-tokens", "8",
         "--out", str(out), "--max-steps", "1", "--epochs", "1"]
    )  # fmt: skip
    assert code == 0
    assert json.loads((out / "head" / "head_config.json").read_text())["text_conditioning"] == "none"
    recorded = json.loads((out / "train_args.json").read_text())
    assert (recorded["recipe"], recorded["text_conditioning"]) == ("paper", "none")
