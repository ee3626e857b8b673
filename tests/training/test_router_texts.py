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

    router = train_router_on_texts(embed, RouterRecipe(orders=200, epochs=500))
    assert len(router["weight"]) == embed(["a red square appears"]).shape[-1] and router["threshold"] == 0.5
    record = router["texts"]
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
