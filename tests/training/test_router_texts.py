"""The router fitted on the world's texts (training.router_texts): on events it never saw it calls no
single-event text about time and nearly every change; the router the checkpoint ships, loaded as serving
loads it, calls none of the world's single-event texts about time and nearly every change."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.slow  # embeds about a thousand texts with the tiny-world backbone


@pytest.fixture(scope="module")
def embed(tiny_world_checkpoint):
    from models.backbone import load_backbone

    backbone = load_backbone(tiny_world_checkpoint, device="cpu")
    return lambda texts: backbone.embed_texts(list(texts))


def test_fitted_on_the_texts_it_tells_events_from_changes_on_events_it_never_saw(embed):
    from training.router_texts import RouterRecipe, train_router_on_texts

    router, record = train_router_on_texts(embed, RouterRecipe(orders=200, epochs=500))
    assert len(router["weight"]) == embed(["a red square appears"]).shape[-1] and router["threshold"] == 0.5
    assert len(record["held_events"]) == 6
    held = record["called about time, the fit without the held-out events"]
    assert held["event, held-out events"] <= 0.05, held
    assert held["change, held-out events"] >= 0.9, held
    assert record["called about time, the fit on every text (shipped)"]["event"] == 0.0, record


def test_the_shipped_router_calls_no_single_event_text_of_the_world_about_time(tiny_world_checkpoint, embed):
    """Every event in every phrasing ("a red square appears", "white triangle shows up briefly", ...)
    stays below the threshold, so the cascade keeps it on the frame tier; the router the head was trained
    beside called 19-22 % of them about time."""
    from engine.loader import checkpoint_head_dir
    from models.router import load_router
    from world.vocab import CHANGES, EVENTS, PHRASINGS, Change, change_texts

    router = load_router(checkpoint_head_dir(str(tiny_world_checkpoint)))
    singles = [e.text(p) for e in EVENTS for p in range(len(PHRASINGS))]
    changes = [t for e in EVENTS for c in CHANGES if c != "recolour" for t in change_texts(Change(e, c))]

    def called(texts):
        q = torch.cat([embed(texts[i : i + 64]).float() for i in range(0, len(texts), 64)])
        return [t for t, v in zip(texts, q, strict=True) if router.probability(v) >= router.threshold]

    assert called(singles) == []
    assert len(called(changes)) >= 0.95 * len(changes)


def test_router_only_reproduces_the_shipped_router_and_leaves_the_head(tiny_world_checkpoint, tmp_path):
    """`qaslr train-rerank-head OUT --router-only` on the shipped head writes the shipped router.json (the
    command that reproduces it: the same fields and numbers to 1e-3 relative; another CPU's kernels round
    the backbone's embeddings in their last bits, and the fit's iterations carry that to about 6e-5); the head's weights and selection query are the same
    bytes, and training.json keeps the router before as router_trained_beside."""
    import json
    import shutil

    from core.config import CHECKPOINT_HEAD_DIR
    from models.router import ROUTER_FILENAME, load_router
    from qaslr.cli import main
    from training.backbone import ASSET_DIR

    model = ["--model", str(tiny_world_checkpoint), "--workdir", str(tmp_path / "work")]
    assert main(["train-rerank-head", str(tmp_path / "empty"), "--router-only", *model]) == 2  # no head there
    shipped = ASSET_DIR / CHECKPOINT_HEAD_DIR
    out = shutil.copytree(shipped, tmp_path / "head")
    d = len(json.loads((shipped / ROUTER_FILENAME).read_text())["weight"])
    (out / ROUTER_FILENAME).write_text(json.dumps({"weight": [0.0] * d, "bias": 0.0, "threshold": 0.5}))
    assert main(["train-rerank-head", str(out), "--router-only", *model]) == 0
    got, want = (json.loads((d / ROUTER_FILENAME).read_text()) for d in (out, shipped))
    assert got.keys() == want.keys() and got["threshold"] == want["threshold"]
    assert got["bias"] == pytest.approx(want["bias"], rel=1e-3, abs=1e-4)
    assert got["weight"] == pytest.approx(want["weight"], rel=1e-3, abs=1e-4)
    for name in ("head.safetensors", "selection.safetensors"):
        assert (out / name).read_bytes() == (shipped / name).read_bytes()
    record = json.loads((out / "training.json").read_text())
    assert "refit" in record["router"] and "dev_accuracy" in record["router_trained_beside"]
    assert load_router(out).selection is not None
