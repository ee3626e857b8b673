"""The selection query (models.router.SelectionQuery, training.selection_query): trained on the shipped
backbone's query embeddings of the world's texts, it points a change it never saw at the event that
changes, and it is saved and loaded beside a head's router."""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = pytest.mark.slow  # embeds about a thousand texts with the tiny-world backbone


@pytest.fixture(scope="module")
def embed(tiny_world_checkpoint):
    from models.backbone import DEFAULT_INSTRUCTION, load_backbone

    backbone = load_backbone(tiny_world_checkpoint, device="cpu")
    cache = {}

    def embed_texts(texts):  # each text embedded once for every recipe below
        missing = [t for t in texts if t not in cache]
        if missing:
            cache.update(
                zip(missing, backbone.embed_texts(missing, instruction=DEFAULT_INSTRUCTION), strict=True)
            )
        return torch.stack([cache[t] for t in texts])

    return embed_texts


@pytest.fixture(scope="module")
def trained(embed):
    from training.selection_query import SelectionRecipe, train_selection

    return train_selection(embed, SelectionRecipe(orders=100, steps=300, hidden=256))


def test_its_residual_branch_fits_the_texts_closer_than_the_linear_map(embed, trained):
    """The recipe's residual branch points q closer at the still text of the events it names than the
    linear map does, on the changes neither saw (and as closely as a linear map fitted as long)."""
    from training.selection_query import SelectionRecipe, train_selection

    _, branch = trained
    _, linear = train_selection(embed, SelectionRecipe(orders=100, steps=300, hidden=0))
    cosine = "held-out changes: q_sel's cosine to its target"
    assert branch["recipe"]["hidden"] == 256 and linear["recipe"]["hidden"] == 0
    assert branch[cosine] > linear[cosine] + 0.02, (branch[cosine], linear[cosine])


def test_it_names_the_event_of_a_change_it_never_saw(trained):
    """On the (event, change) combinations held out of training, q_sel names a right event first
    (among the 32 events' still texts) far more often than q does."""
    _, record = trained
    held = "held-out changes: {} names a right event first"
    assert record["texts"]["held out"] > 100
    assert record[held.format("q_sel")] >= 0.8
    assert record[held.format("q_sel")] >= record[held.format("q")] + 0.3


def test_it_is_saved_and_loaded_with_the_router(trained, tmp_path):
    from models.router import ROUTER_FILENAME, load_router

    selection, _ = trained
    d = selection.weight.shape[0]
    (tmp_path / ROUTER_FILENAME).write_text(json.dumps({"weight": [0.0] * d, "bias": 0.0, "threshold": 0.5}))
    assert load_router(tmp_path).selection is None  # a router without one: selection uses q
    selection.save(tmp_path)
    loaded = load_router(tmp_path).selection
    q = torch.nn.functional.normalize(torch.randn(3, d), dim=-1)
    torch.testing.assert_close(loaded(q), selection(q))
    assert loaded.fingerprint == selection.fingerprint
    assert loaded.hidden == selection.hidden == 256
    assert torch.allclose(loaded(q).norm(dim=-1), torch.ones(3))


def test_a_linear_map_saved_before_the_branch_still_loads(trained, tmp_path):
    """A selection.safetensors of weight and bias alone (a head trained before the residual branch)
    loads as the linear map q_sel = normalize(q + W q + b), with the fingerprint it had."""
    import hashlib

    from safetensors.torch import save_file

    from models.router import load_selection

    selection, _ = trained
    weight, bias = selection.weight, selection.bias
    save_file({"weight": weight, "bias": bias}, str(tmp_path / "selection.safetensors"))
    loaded = load_selection(tmp_path)
    assert loaded.hidden == 0
    q = torch.nn.functional.normalize(torch.randn(3, weight.shape[0]), dim=-1)
    torch.testing.assert_close(loaded(q), torch.nn.functional.normalize(q + q @ weight.T + bias, dim=-1))
    before = hashlib.sha256(weight.numpy().tobytes() + bias.numpy().tobytes()).hexdigest()[:16]
    assert loaded.fingerprint == before  # caches named by the linear map's fingerprint stay valid


def test_selection_only_refits_the_selection_query_and_leaves_the_head(tiny_world_checkpoint, tmp_path):
    """`qaslr train-rerank-head OUT --selection-only`: the selection query of the head in OUT is fitted
    again (here by a small recipe) and loads through the production loader beside the router; the
    head's weights are the same bytes; training.json keeps the record the weights were trained beside."""
    import argparse
    import shutil

    from core.config import CHECKPOINT_HEAD_DIR
    from models.router import load_router
    from qaslr.cli import main
    from qaslr.commands.train_rerank_head import _refit_selection
    from training.backbone import ASSET_DIR
    from training.selection_query import SelectionRecipe

    assert main(["train-rerank-head", str(tmp_path / "empty"), "--selection-only"]) == 2  # no head there
    out = shutil.copytree(ASSET_DIR / CHECKPOINT_HEAD_DIR, tmp_path / "head")
    weights = (out / "head.safetensors").read_bytes()
    before = json.loads((out / "training.json").read_text())
    old = load_router(out).selection
    args = argparse.Namespace(out=str(out), workdir=str(tmp_path / "work"), model=str(tiny_world_checkpoint))
    assert _refit_selection(args, SelectionRecipe(orders=50, steps=50, hidden=64)) == 0
    record = json.loads((out / "training.json").read_text())
    refit = load_router(out).selection
    assert refit.hidden == 64 and refit.fingerprint != old.fingerprint
    assert record["selection"]["recipe"]["hidden"] == 64 and "refit" in record["selection"]
    assert record["selection_trained_beside"] == before.get("selection_trained_beside", before["selection"])
    assert (out / "head.safetensors").read_bytes() == weights
    assert {k: v for k, v in record.items() if not k.startswith("selection")} == {
        k: v for k, v in before.items() if not k.startswith("selection")
    }
