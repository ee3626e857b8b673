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


def _router(data) -> dict:
    """A quick router for a synthetic head: router.json's fields fitted on the split's own queries."""
    from training.moment_head import fit_router

    about = torch.tensor([float(i.kind != "event") for i in data.items])
    return fit_router(torch.stack([i.q for i in data.items]), about, epochs=20)


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


@pytest.mark.parametrize("query_words", [False, True])
def test_the_recipe_trains_and_a_served_head_scores_as_training_scored(
    split, tiny_world_checkpoint, tmp_path, query_words
):
    """One epoch of Eq. 14; then the same head, saved with its router and served as the rerank head,
    gives each candidate the score training computed for it (the same windows, frames, evidence);
    with ``query_words`` the words training attached are the ones serving reads."""
    from engine import EngineConfig, load_engine
    from engine.results import Hit
    from engine.tiers.base import RerankStats, TierRequest
    from training.moment_data import attach_words
    from training.moment_head import MomentRecipe, save, scores, train_head

    work, data = split
    if query_words:
        attach_words(work, 11, tiny_world_checkpoint, CORPUS, [data])
        assert all(i.words is not None and i.words.shape == i.states.shape for i in data.items)
    hidden, embed = data.items[0].states.shape[-1], data.items[0].q.shape[-1]
    recipe = MomentRecipe(epochs=1, batch=4, windows=PLAN, query_words=query_words)
    head, history = train_head([data], [], recipe, hidden=hidden, embed=embed, max_evidence=256)
    assert np.isfinite(history[-1]["loss"]) and head.config.query_words == query_words
    router = _router(data)
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


def test_the_development_numbers_logged_in_training_are_the_served_head_s(split):
    """The dev record of an epoch is measured as the head is served (dropout off): the last epoch's
    equals evaluating the trained head afterwards."""
    from training.moment_head import MomentRecipe, evaluate, train_head

    _, data = split
    hidden, embed = data.items[0].states.shape[-1], data.items[0].q.shape[-1]
    recipe = MomentRecipe(epochs=1, batch=4, windows=PLAN, dropout=0.5)
    head, history = train_head([data], [data], recipe, hidden=hidden, embed=embed, max_evidence=256)
    assert history[-1]["dev"] == evaluate(head, [data], recipe=recipe)["head"]


def test_order_contrast_adds_the_own_video_with_its_clips_the_other_way_as_a_negative(split):
    """--order-contrast: an order query's own video stands once more among its candidates, its clips
    reversed and not a positive (the same evidence: only the order tells them apart); other kinds as
    they are; the recipe trains with it."""
    from training.moment_head import MomentRecipe, make_batch, order_contrast, train_head

    _, data = split
    item = next(i for i in data.items if i.kind == "order" and len(i.windows[i.target]) >= 2)
    got = order_contrast(item)
    t = item.target
    assert got.candidates == [*item.candidates, item.candidates[t]] and got.target == t
    assert got.windows[-1] == item.windows[t][::-1] != item.windows[t]
    assert got.true_of == [*item.true_of, False]
    assert got.frame_scores[-1] == item.frame_scores[t]
    assert item.windows[t] == got.windows[t]  # the item itself untouched
    for other in (i for i in data.items if i.kind != "order"):
        assert order_contrast(other) is other
    batch = make_batch([got], data.evidence)
    c = batch.size[1]
    assert torch.equal(batch.evidence[c - 1, 0], batch.evidence[t, len(item.windows[t]) - 1])
    hidden, embed = item.states.shape[-1], item.q.shape[-1]
    recipe = MomentRecipe(epochs=1, batch=4, windows=PLAN, order_contrast=True)
    _, history = train_head([data], [], recipe, hidden=hidden, embed=embed, max_evidence=256)
    assert np.isfinite(history[-1]["loss"])


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
    from training.moment_head import MomentRecipe, save, scores, train_head
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
    out = save(head, _router(data), tmp_path / "head", {})
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


def test_a_head_that_reads_the_words_answers_an_order_on_the_default_path(
    split, tiny_world_checkpoint, tmp_path
):
    """A served head with ``query_words`` takes an order of two events on the default search (the order
    route, engine.search.cascade): every candidate's events are found in its frame bank, the head reads
    the ``head_candidates`` that show their weaker event best, each scores q · z_T + order_event_weight ·
    min_k max_t p_k · f_t above the rest, its confidence is its probability among those read (Eq. 11's
    softmax of q · z_T / tau: summing to 1 over them, 0 for the rest) and its relevance the weakest event's
    times that, and its moment spans the two events; a count is not its."""
    from engine import EngineConfig, load_engine
    from engine.tiers.timehead import event_scores
    from training.moment_data import attach_words
    from training.moment_head import MomentRecipe, save, train_head

    work, data = split
    attach_words(work, 11, tiny_world_checkpoint, CORPUS, [data])
    hidden, embed = data.items[0].states.shape[-1], data.items[0].q.shape[-1]
    recipe = MomentRecipe(epochs=1, batch=4, windows=PLAN, query_words=True)
    head, _ = train_head([data], [], recipe, hidden=hidden, embed=embed, max_evidence=256)
    out = save(head, _router(data), tmp_path / "head", {})
    index = next(work.glob("moment-index-*"))
    weight = 10.0  # the events' evidence decides which videos lead: the first shows both, and stands
    engine = load_engine(EngineConfig(index=index, model=str(tiny_world_checkpoint), rerank_head=out,
                                      model_processes=0, batching=False, order_event_weight=weight,
                                      order_windows="events"))  # fmt: skip
    try:
        name, m = engine.searcher.reranker.name, engine.config.head_candidates
        assert engine.searcher.cascade.reads_order
        text = next(i.text for i in data.items if i.kind == "order")
        got = engine.search_sync({"query": text, "top_k": 10})
        assert got.route.startswith("an order: the streaming head reads"), got.route
        assert not any("ignored" in w for w in got.warnings), got.warnings
        read, rest = got.hits[:m], got.hits[m:]
        assert {h.tier for h in read} == {name} and all(h.tier != name for h in rest)
        q = engine.encoder.embed_queries([text])[0].float().numpy()
        tau = float(engine.searcher.reranker.encoder.head.temperature.detach())
        heads = np.array([float(hit.embedding @ q) for hit in read])
        expected = np.exp((heads - heads.max()) / tau) / np.exp((heads - heads.max()) / tau).sum()
        for hit, s, p in zip(read, heads, expected, strict=True):
            shows = float(hit.event_peaks.min())  # its weaker event's best frame
            assert hit.score == pytest.approx(s + weight * shows, abs=1e-4)
            assert hit.time_confidence == pytest.approx(p, abs=1e-3)
            assert hit.relevance == pytest.approx(hit.events_relevance * p, abs=1e-3)
        assert sum(h.time_confidence for h in read) == pytest.approx(1.0) and len(set(expected.round(6))) > 1
        assert all(h.time_confidence == 0.0 and h.relevance == 0.0 for h in rest)
        assert [h.score for h in read] == sorted((h.score for h in read), reverse=True)
        weaker = [float(h.event_peaks.min()) for h in got.hits]
        assert min(weaker[:m]) >= max(weaker[m:], default=-1.0)  # it read those that show both best
        for hit in read:  # its moments were cut where each event shows best (order_windows "events"; by
            # the selection query, "query", this assertion fails here)
            bank = engine.index.frame_bank(hit.video_id)
            best = bank.frame_indices[event_scores(bank, hit.events).argmax(axis=0)]
            assert set(best.tolist()) <= {e.frame_index for e in hit.evidence}, hit.video_id
        first = got.hits[0]
        assert first.moment_source == "time" and first.moment[0] < first.moment[1]
        assert first.events_relevance is not None
        count = next(i.text for i in data.items if i.kind == "count")
        assert not engine.search_sync({"query": count}).route.startswith("an order")
        # the 30 ordinary sentences the time head's keep rule holds (tests/engine/test_time_routing.py): read as
        # orders by this head too, each keeps the frame tier's first or puts first a video that shows the event
        from tests.engine.test_time_routing import natural_queries

        truth = {
            v["id"]: v for v in json.loads((work / "moment-corpus-11" / "truth.json").read_text())["videos"]
        }
        singles = [v for v in truth.values() if v["kind"] == "single"]
        routed = 0
        for name, query in natural_queries([v["events"][0][0] for v in singles]):
            frame_top = engine.search_sync({"query": query, "mode": "frames", "top_k": 3}).hits[0].video_id
            got = engine.search_sync({"query": query, "top_k": 3})
            top = got.hits[0].video_id
            assert top == frame_top or name in {e[0] for e in truth[top]["events"]}, (query, got.route)
            routed += got.route.startswith("an order")
        assert routed >= 10, routed
    finally:
        engine.close()


def test_windows_are_labelled_by_the_still_event_they_show(split, tiny_world_checkpoint):
    """training.order_mix: a window is labelled with the one still event its frames overlap (world
    truth), or as haystack; a window on a change is left out."""
    from training.order_mix import HAYSTACK, window_labels

    work, data = split
    labels = window_labels(work, tiny_world_checkpoint, CORPUS, data)
    truth = {v["id"]: v for v in json.loads((work / "moment-corpus-11" / "truth.json").read_text())["videos"]}
    assert labels and set(labels) <= set(data.evidence)
    named = [(key, name) for key, name in labels.items() if name != HAYSTACK]
    assert named and any(name == HAYSTACK for name in labels.values())
    for (video, _, _), name in named:
        shown = truth[video.split("/", 1)[1]]
        assert shown["kind"] != "motion" and name in {e[0] for e in shown["events"]}


def test_composed_order_queries_contrast_the_same_clips_in_the_other_order():
    """A composed "A, then B": the target reads A's clip before B's among haystack clips, the mirror
    the same clips with A and B swapped, the others another event in A's or B's place; the text
    names A first; every window is a (video, first, last) key make_batch reads."""
    from models.backbone import ClipStates
    from training.moment_head import make_batch
    from training.order_mix import HAYSTACK, composed_orders
    from world.meaning import Meaning

    names = ["red square", "blue circle", "green bar", "white triangle", "cyan square"]
    labels = {(f"9/v{i}", 2 * k, 2 * k + 1): name for i, name in enumerate(names) for k in range(2)}
    labels.update({(f"9/h{k}", 0, 1): HAYSTACK for k in range(6)})
    evidence = {key: (torch.full((3, 8), float(n)), torch.ones(3, dtype=torch.bool), torch.zeros(3, 4))
                for n, key in enumerate(sorted(labels))}  # fmt: skip

    def embed(texts):
        hidden = torch.randn(len(texts), 5, 8)
        return torch.randn(len(texts), 8), ClipStates(hidden, torch.ones(len(texts), 5, dtype=torch.bool))

    items = composed_orders(labels, embed, 20, seed=3)
    assert len(items) == 20 and {i.kind for i in items} == {"order"}
    for item in items:
        target, mirror, other_first, other_last, mirror2 = item.windows
        events = [(k, labels[w]) for k, w in enumerate(target) if labels[w] != HAYSTACK]
        (ia, a), (ib, b) = events
        assert ia < ib and a != b
        assert item.text in Meaning("order", (a, b)).texts()
        assert mirror[ia] == target[ib] and mirror[ib] == target[ia]
        assert labels[other_first[ia]] not in (a, b) and other_first[ib] == target[ib]
        assert labels[other_last[ib]] not in (a, b) and other_last[ia] == target[ia]
        assert labels[mirror2[ia]] == b and labels[mirror2[ib]] == a
        assert item.true_of == [True, False, False, False, False] and item.target == 0 and item.partner == 1
    batch = make_batch(items[:2], evidence)
    assert batch.size == (2, 5) and batch.step_mask.all()


def test_composed_same_colour_orders_tell_their_candidates_apart_by_shape_alone():
    """``same_colour`` = 1: every composed order's four events (A, B, the other first, the other last)
    are one colour's shapes; 0 draws them from every colour, and a world with no colour of four
    labelled events cannot compose them."""
    from models.backbone import ClipStates
    from training.order_mix import HAYSTACK, composed_orders
    from world.vocab import parse_event

    names = [f"{c} {s}" for c in ("red", "blue") for s in ("square", "circle", "bar", "triangle")]
    names.append("green bar")
    labels = {(f"9/v{i}", 0, 1): name for i, name in enumerate(names)}
    labels.update({(f"9/h{k}", 0, 1): HAYSTACK for k in range(6)})

    def embed(texts):
        hidden = torch.randn(len(texts), 5, 8)
        return torch.randn(len(texts), 8), ClipStates(hidden, torch.ones(len(texts), 5, dtype=torch.bool))

    def colours(item):
        shown = {labels[w] for row in item.windows for w in row if labels[w] != HAYSTACK}
        return {parse_event(name).colour for name in shown}, len(shown)

    for item in composed_orders(labels, embed, 30, seed=1, same_colour=1.0):
        assert colours(item) in (({"red"}, 4), ({"blue"}, 4))
    mixed = [colours(item)[0] for item in composed_orders(labels, embed, 30, seed=1)]
    assert any(len(c) > 1 for c in mixed)
    few = {key: name for key, name in labels.items() if not name.startswith(("red", "blue"))}
    few.update({(f"9/x{i}", 0, 1): f"{c} square" for i, c in enumerate(("white", "cyan", "yellow"))})
    with pytest.raises(ValueError, match="four labelled events"):
        composed_orders(few, embed, 3, same_colour=0.5)
