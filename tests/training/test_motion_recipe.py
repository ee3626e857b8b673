"""training.motion_recipe: the direct motion recipe runs from the shipped weights, moves them, and
records its checks (a smoke run: two steps; what it reaches is measured in training/tiny_world/README.md)."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from training.backbone import ASSET_DIR
from training.motion_recipe import MotionRecipe, main

pytestmark = pytest.mark.slow  # renders world clips and trains the backbone two steps (about 10 s)


def test_two_steps_move_the_weights_and_record_both_checks(tmp_path, capsys):
    out = tmp_path / "motion"
    args = ["--steps", "2", "--eval-every", "1", "--eval-pairs", "2", "--pairs", "1", "--images", "4"]
    assert main([str(out), *args]) == 0
    record = json.loads((out / "motion_recipe.json").read_text())
    assert record["recipe"] == {**vars(MotionRecipe()), "steps": 2, "eval_every": 1, "eval_pairs": 2,
                                "pairs": 1, "images": 4}  # fmt: skip
    assert [e["step"] for e in record["evals"]] == [0, 1, 2]
    for e in record["evals"]:
        assert 0.0 <= e["reversal"] <= 1.0 and 0.0 <= e["text_to_frame_top1"] <= 1.0
    shipped, trained = (
        load_file(str(ASSET_DIR / "model.safetensors")),
        load_file(str(out / "model.safetensors")),
    )
    assert shipped.keys() == trained.keys()
    assert any(not (shipped[k] == trained[k]).all() for k in shipped)
    assert (out / "tokenizer.json").read_bytes() == (ASSET_DIR / "tokenizer.json").read_bytes()
    assert '"reversal"' in capsys.readouterr().out
