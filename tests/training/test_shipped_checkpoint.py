"""A work directory's copy of the shipped tiny-world checkpoint follows the shipped files: written once,
kept while they stay, written again once they change (a demo or benchmark directory kept across an
update of training/tiny_world/ never serves stale weights or a stale time head)."""

from __future__ import annotations

import json

from models.backbone import checkpoint_fingerprint
from training.backbone import ASSET_DIR, ASSETS_DIGEST_FILE, assets_digest, current_tiny_world_checkpoint


def test_a_copy_is_kept_while_current_and_written_again_when_stale(tmp_path):
    directory = current_tiny_world_checkpoint(tmp_path / "tiny-world")
    recorded = directory / ASSETS_DIGEST_FILE
    assert recorded.read_text().strip() == assets_digest()
    # the heads shipped with the weights record the fingerprint of the checkpoint as written by code
    time_head = json.loads((ASSET_DIR / "time_head" / "time_head.json").read_text())
    assert time_head["backbone"] == checkpoint_fingerprint(directory)
    fingerprint, written = checkpoint_fingerprint(directory), (directory / "config.json").stat().st_mtime_ns
    assert current_tiny_world_checkpoint(directory) == directory
    assert (directory / "config.json").stat().st_mtime_ns == written  # current: not written again
    # written from other weights (as before an update of the shipped files): written again
    recorded.write_text("0" * 16)
    (directory / "leftover.txt").write_text("from the old copy")
    current_tiny_world_checkpoint(directory)
    assert recorded.read_text().strip() == assets_digest()
    assert checkpoint_fingerprint(directory) == fingerprint and not (directory / "leftover.txt").exists()


def test_the_digest_covers_the_weights_and_the_time_head(tmp_path):
    import shutil

    copy = shutil.copytree(ASSET_DIR, tmp_path / "assets")
    assert assets_digest(copy) == assets_digest()
    head = next(p for p in (copy / "time_head").iterdir() if p.suffix == ".json")
    head.write_text(head.read_text() + " ")
    assert assets_digest(copy) != assets_digest()


def test_the_shipped_weights_are_what_train_backbone_runs_by_default():
    """`qaslr train-backbone OUT` (the default recipe) is the recipe the shipped weights record: its
    settings and content hash, the motion recipe as the third phase."""
    from dataclasses import asdict

    from training.backbone_config import BackboneTrainConfig, recipe_hash

    recipe = json.loads((ASSET_DIR / "recipe.json").read_text())
    config = BackboneTrainConfig()
    assert recipe["recipe_hash"] == recipe_hash(config)
    assert recipe["config"] == json.loads(json.dumps(asdict(config)))
    assert config.motion_recipe.steps > 0 and recipe["phases"]["motion_recipe"]["evals"]
    assert recipe["final"]["reversal"] >= 0.9  # the check it was judged by, on the recipe's check seeds


def test_the_shipped_rerank_head_reads_moments_with_its_router_and_selection_query(tmp_path):
    """The rerank head the checkpoint ships (training/tiny_world/rerank_head/) loads through the
    production loaders, reads moments as its recipe trains them, ships a router and a selection query
    for the backbone's embedding size, and records the recipe it was trained by (qaslr train-rerank-head)."""
    from core.config import CHECKPOINT_HEAD_DIR
    from models.head import load_head
    from models.router import load_router
    from training.moment_head import MomentRecipe

    shipped = ASSET_DIR / CHECKPOINT_HEAD_DIR
    head = load_head(shipped)
    recipe = MomentRecipe()
    assert head.config.window_plan == recipe.windows and head.config.text_memory and head.config.update_gate
    router = load_router(shipped)
    assert router is not None and router.selection is not None
    assert router.weight.shape[0] == router.selection.weight.shape[0] == head.config.embed_dim
    record = json.loads((shipped / "training.json").read_text())
    assert record["recipe"]["windows"] == recipe.windows.to_dict()
    assert record["recipe"]["epochs"] == recipe.epochs and record["recipe"]["dropout"] == recipe.dropout
    # the score it was trained to rank by (the frame-bank terms beside q · z_T; none in older records)
    for name in ("selection_weight", "frame_weight"):
        assert record["recipe"].get(name, 0.0) == getattr(recipe, name)
    assert record["selection"]["held-out changes: q_sel names a right event first"] >= 0.8
    # its selection query is the current recipe's, refit after the weights (qaslr train-rerank-head
    # --selection-only), which were trained beside the linear map the record keeps
    from training.selection_query import LINEAR_RECIPE, SelectionRecipe

    assert record["selection"]["recipe"] == SelectionRecipe().to_dict()
    assert router.selection.hidden == SelectionRecipe().hidden
    beside = {"hidden": 0, **record["selection_trained_beside"]["recipe"]}  # recorded before "hidden"
    assert beside == LINEAR_RECIPE.to_dict()
    # a copy of the checkpoint serves it: the digest covers it
    copy = current_tiny_world_checkpoint(tmp_path / "tw")
    assert (copy / CHECKPOINT_HEAD_DIR / "selection.safetensors").is_file()
