"""The selection query (models.router.SelectionQuery, training.selection_query): trained on the shipped
backbone's query embeddings of the world's texts, it points a change it never saw at the event that
changes, and it is saved and loaded beside a head's router."""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = pytest.mark.slow  # embeds about a thousand texts with the tiny-world backbone


@pytest.fixture(scope="module")
def trained(tiny_world_checkpoint):
    from models.backbone import DEFAULT_INSTRUCTION, load_backbone
    from training.selection_query import SelectionRecipe, train_selection

    backbone = load_backbone(tiny_world_checkpoint, device="cpu")
    recipe = SelectionRecipe(orders=100, steps=300)
    return train_selection(lambda texts: backbone.embed_texts(texts, instruction=DEFAULT_INSTRUCTION), recipe)


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
    assert torch.allclose(loaded(q).norm(dim=-1), torch.ones(3))
