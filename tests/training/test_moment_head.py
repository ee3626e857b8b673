"""The rerank head for queries about time (training.moment_data, training.moment_head): its training
data reads each candidate's moments exactly as serving reads them, its recipe runs (Eq. 11-14), and a
trained head with its router is served by the engine's heavy tier with the scores training saw."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from models.windows import WindowPlan

pytestmark = pytest.mark.slow  # renders and indexes a small world corpus

CORPUS = dict(
    videos=2, motion_pairs=1, order_pairs=1, count_pairs=1, min_duration_s=30.0, max_duration_s=40.0
)
PLAN = WindowPlan(windows=2, frames=6, pair_s=0.2)


@pytest.fixture(scope="module")
def split(tmp_path_factory, tiny_world_checkpoint):
    from training.moment_data import build_split

    work = tmp_path_factory.mktemp("moment_head")
    return work, build_split(work, 11, tiny_world_checkpoint, corpus=CORPUS, candidates=3, plan=PLAN)


def test_every_video_is_queried_by_every_phrasing_of_what_it_shows(split):
    _, data = split
    kinds = {item.kind for item in data.items}
    assert kinds == {"event", "change", "order", "count"}
    for item in data.items:
        assert len(item.candidates) == 3 and item.true_of[item.target]
        if item.partner is not None:  # a pair's partner is a hard negative, never a co-positive
            assert not item.true_of[item.partner]
        assert all(1 <= len(ws) <= PLAN.windows for ws in item.windows)
        for cand, ws in zip(item.candidates, item.windows, strict=True):
            assert all((cand, a, b) in data.evidence for a, b in ws)
            assert [a for a, _ in ws] == sorted(a for a, _ in ws)  # chronological
    # order queries come in all four phrasings, each its own item
    assert len({i.text for i in data.items if i.kind == "order"}) == 2 * 4


def test_the_recipe_trains_and_a_served_head_scores_as_training_scored(
    split, tiny_world_checkpoint, tmp_path
):
    """One epoch of Eq. 14; then the same head, saved with its router and served as the rerank head,
    gives each candidate the score training computed for it (the same windows, frames, evidence)."""
    from engine import EngineConfig, load_engine
    from engine.results import Hit
    from engine.tiers.base import RerankStats, TierRequest
    from training.moment_head import MomentRecipe, save, scores, train_head, train_router

    work, data = split
    hidden, embed = data.items[0].states.shape[-1], data.items[0].q.shape[-1]
    recipe = MomentRecipe(epochs=1, batch=4, windows=PLAN)
    head, history = train_head([data], [], recipe, hidden=hidden, embed=embed, max_evidence=256)
    assert np.isfinite(history[-1]["loss"])
    router = train_router([data], [], epochs=20)
    out = save(head, router, tmp_path / "head", {"recipe": recipe.to_dict()})
    assert json.loads((out / "router.json").read_text())["threshold"] == 0.5

    index = next(work.glob("moment-index-*"))
    engine = load_engine(EngineConfig(index=index, model=str(tiny_world_checkpoint), rerank_head=out,
                                      model_processes=0, batching=False))  # fmt: skip
    try:
        tier = engine.searcher.reranker
        assert tier.window_plan == PLAN and engine.searcher.cascade.router is not None
        item = next(i for i in data.items if i.kind == "order")
        trained = [s[-1] for s in scores(head, [item], data.evidence)[0]]
        hits = [Hit(c.split("/", 1)[1], 0.0, 0.0, k + 1, record=engine.index.video(c.split("/", 1)[1]))
                for k, c in enumerate(item.candidates)]  # fmt: skip
        request = TierRequest(query=item.text, q=engine.encoder.embed_queries([item.text])[0].float(),
                              frames=32, seed=0, stats=RerankStats(), clock=_Clock())  # fmt: skip
        served = {h.video_id: h.score for h in tier.run(request, hits)}
        for cand, want in zip(item.candidates, trained, strict=True):
            assert served[cand.split("/", 1)[1]] == pytest.approx(float(want), abs=2e-3)
    finally:
        engine.close()


class _Clock:
    """A stage clock that times nothing (engine.search.clock's interface)."""

    def stage(self, name):
        return torch.no_grad()  # any context manager

    def move(self, *args):
        pass

    def check(self):
        pass


def test_a_served_head_reads_the_moments_its_selection_query_chose_as_training_did(
    split, tiny_world_checkpoint, tmp_path
):
    """With a selection query (models.router), training chooses each candidate's windows by q_sel;
    served, the cascade sets q_sel on the request of a query its router calls about time, and the head
    scores each candidate as training scored it (the same windows), after the frame tier has scored
    them by q as it does when served."""
    from engine import EngineConfig, load_engine
    from engine.results import Hit
    from engine.tiers.base import RerankStats, TierRequest
    from models.backbone import DEFAULT_INSTRUCTION, load_backbone
    from training.moment_data import build_split
    from training.moment_head import MomentRecipe, save, scores, train_head, train_router
    from training.selection_query import SelectionRecipe, train_selection

    work, _ = split
    backbone = load_backbone(tiny_world_checkpoint, device="cpu")
    selection, _ = train_selection(
        lambda texts: backbone.embed_texts(texts, instruction=DEFAULT_INSTRUCTION),
        SelectionRecipe(orders=50, steps=100),
    )
    data = build_split(
        work, 11, tiny_world_checkpoint, corpus=CORPUS, candidates=3, plan=PLAN, selection=selection
    )
    item = next(i for i in data.items if i.kind == "change")
    plain = build_split(work, 11, tiny_world_checkpoint, corpus=CORPUS, candidates=3, plan=PLAN)
    assert any(  # the selection query chose other windows than q would for some query
        a.windows != b.windows for a, b in zip(data.items, plain.items, strict=True)
    )
    recipe = MomentRecipe(epochs=1, batch=4, windows=PLAN)
    hidden, embed = item.states.shape[-1], item.q.shape[-1]
    head, _ = train_head([data], [], recipe, hidden=hidden, embed=embed, max_evidence=256)
    out = save(head, train_router([data], [], epochs=20), tmp_path / "head", {})
    selection.save(out)
    index = next(work.glob("moment-index-*"))
    engine = load_engine(EngineConfig(index=index, model=str(tiny_world_checkpoint), rerank_head=out,
                                      model_processes=0, batching=False))  # fmt: skip
    try:
        assert engine.searcher.cascade.router.selection.fingerprint == selection.fingerprint
        assert engine.info["cascade"]["about_time"]  # /readyz and the page say the head answers them
        trained = [s[-1] for s in scores(head, [item], data.evidence)[0]]
        hits = [Hit(c.split("/", 1)[1], 0.0, 0.0, k + 1, record=engine.index.video(c.split("/", 1)[1]))
                for k, c in enumerate(item.candidates)]  # fmt: skip
        q = engine.encoder.embed_queries([item.text])[0].float()
        request = TierRequest(query=item.text, q=q, frames=32, seed=0, stats=RerankStats(), clock=_Clock(),
                              select_q=selection(q))  # fmt: skip
        frame_tier = engine.searcher.cascade.frame_tier
        frame_tier.run(request, hits)  # as served: the frame tier reads q first
        # the frame-bank terms the head trained beside (training.moment_head.frame_terms) are the ones
        # the cascade adds to its score: max_c q_sel · f_c and max_c q · f_c of each candidate
        selected = dict(zip(item.candidates, frame_tier.scores(hits, request.select_vec), strict=True))
        own = {c: h.frame_score for c, h in zip(item.candidates, hits, strict=True)}
        served = {h.video_id: h.score for h in engine.searcher.reranker.run(request, hits)}
        for j, (cand, want) in enumerate(zip(item.candidates, trained, strict=True)):
            assert served[cand.split("/", 1)[1]] == pytest.approx(float(want), abs=2e-3)
            assert item.frame_scores[j] == pytest.approx(selected[cand], abs=2e-3)
            assert item.query_frame_scores[j] == pytest.approx(own[cand], abs=2e-3)
    finally:
        engine.close()
