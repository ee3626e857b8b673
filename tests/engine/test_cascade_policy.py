"""The cascade's policy (engine.search.cascade): which tier runs on which candidates, given what the
search measured, as a table of cases; no index or model needed."""

from __future__ import annotations

import pytest

from engine.search.cascade import HEAVY, ORDER, TIME, CascadePolicy, Signals

R = 10


def _signals(**changes) -> Signals:
    values = dict(mode="rerank", budget=3, heavy_margin=0.05, lead=0.01, time_plan=None)
    return Signals(**{**values, **changes})


@pytest.mark.parametrize(
    ("signals", "route"),
    [
        (_signals(mode="frames"), (None, 0)),  # the frame tier's order stands
        (_signals(budget=0), (None, 0)),  # heavy 0: the frame tier alone
        (_signals(budget=0, time_plan="order"), (None, 0)),  # no budget: not the time tier either
        (_signals(time_plan="order", lead=0.5), (TIME, R)),  # the time head answers it: all of R
        (_signals(lead=0.5), (None, 0)),  # the frame tier's lead settles it
        (_signals(lead=0.05), (None, 0)),  # a lead that reaches the margin settles it
        (_signals(lead=0.01), (HEAVY, 3)),  # too close to call: the heavy tier on the top 3
        (_signals(lead=None), (HEAVY, 3)),  # one candidate: nothing to compare, the budget decides
        (_signals(lead=0.5, heavy_margin=2.0), (HEAVY, 3)),  # asked for (heavy given): always
        # a head that reads moments, its router sure the query is about time, the frame tier's first
        # few near-tied: the head on those few, whatever the lead and the budget's size
        (_signals(lead=0.0, moments=True, about_time=0.9, ties=4), (HEAVY, 4)),
        (_signals(lead=0.5, moments=True, about_time=0.9, ties=2, heavy_margin=0.0), (HEAVY, 2)),
        (_signals(lead=0.5, moments=True, about_time=0.2, ties=4, heavy_margin=0.0), (None, 0)),  # not time
        (_signals(lead=0.5, moments=True, about_time=0.9, ties=1, heavy_margin=0.0), (None, 0)),  # no tie
        (_signals(lead=0.5, moments=False, about_time=0.9, ties=4, heavy_margin=0.0), (None, 0)),  # no head
        (_signals(mode="frames", moments=True, about_time=0.9, ties=4), (None, 0)),  # frames mode
        (_signals(budget=0, moments=True, about_time=0.9, ties=4), (None, 0)),  # heavy 0: the frame tier
        # a head that reads each moment backwards too reads every one of the first head_candidates, where the
        # router routes it there (near-ties), and nowhere else
        (
            _signals(lead=0.0, moments=True, about_time=0.9, ties=2, backwards=True, candidates=6),
            (HEAVY, 6, True),
        ),
        # ... not where the frame tier's first two are too close to call for a query not about time: the heavy
        # tier reads the budget's top forwards only
        (_signals(lead=0.01, backwards=True, candidates=6), (HEAVY, 3)),
        (_signals(lead=0.01, moments=True, about_time=0.2, ties=4, backwards=True, candidates=6), (HEAVY, 3)),
        (
            _signals(
                lead=0.5, moments=True, about_time=0.9, ties=1, heavy_margin=0.0, backwards=True, candidates=6
            ),
            (None, 0),
        ),  # fmt: skip
        (
            _signals(
                lead=0.5, moments=True, about_time=0.2, ties=4, heavy_margin=0.0, backwards=True, candidates=6
            ),
            (None, 0),
        ),  # fmt: skip
        # the time head answers what its parse reads, beside a head that reads moments too: where
        # it reads the query it measurably wins on order and count (docs/results.md)
        (_signals(moments=True, about_time=0.9, ties=4, time_plan="order"), (TIME, R)),
        (_signals(moments=True, about_time=0.2, ties=4, time_plan="order", lead=0.5), (TIME, R)),
        (_signals(moments=True, about_time=0.9, ties=1, time_plan="count", lead=0.5), (TIME, R)),
        # a head that reads the query's words answers an order itself, before the time head, whatever the
        # router and the ties say; not without a budget
        (_signals(moments=True, about_time=0.2, ties=1, order_plan="order", lead=0.5), (ORDER, R)),
        (_signals(moments=True, about_time=0.9, ties=4, order_plan="order", time_plan="order"), (ORDER, R)),
        (_signals(budget=0, moments=True, order_plan="order"), (None, 0)),
        (_signals(mode="frames", moments=True, order_plan="order"), (None, 0)),
    ],
)
def test_the_policy_routes_by_the_measured_signals(signals, route):
    got = CascadePolicy().route(signals, R)
    tier, candidates, *backwards = route
    assert (got.tier, got.candidates) == (tier, candidates) and got.why
    assert got.backwards == bool(backwards and backwards[0])  # only the router's route reads backwards


@pytest.mark.parametrize(("weight", "first"), [(0.0, "still"), (4.0, "moves")])
def test_the_heads_backwards_reading_weighs_a_change_above_a_still_showing(weight, first):
    """s += reversal_weight · Hit.change (q · z_T less the moments read backwards): a still showing's crisp
    frames outscore the moving shape on the frame bank's terms, and its reading is the same either way."""
    from types import SimpleNamespace

    from engine.results import Hit
    from engine.search.cascade import Cascade

    cascade = Cascade(None, SimpleNamespace(name="head"), selection_weight=3.0, reversal_weight=weight)
    moves = Hit("moves", 0.30, 0.0, 1, tier="head", frame_score=0.3, change=0.15)
    still = Hit("still", 0.30, 0.0, 2, tier="head", frame_score=0.3, change=0.0)
    unread = Hit("unread", 0.20, 0.0, 3, tier="frame", frame_score=0.2, change=None)
    out = cascade._with_frame_evidence([moves, still, unread], {"moves": 0.60, "still": 0.75, "unread": 0.9})
    assert [h.video_id for h in out] == [first, ({"moves", "still"} - {first}).pop(), "unread"]
    assert moves.score == pytest.approx(0.30 + 3.0 * 0.60 + weight * 0.15)
    assert still.score == pytest.approx(0.30 + 3.0 * 0.75)


@pytest.mark.parametrize(
    ("selection_weight", "frame_weight", "first"),
    [
        (0.0, 0.0, "moves"),  # the head's own score: q · z_T alone
        (0.5, 0.5, "moves"),  # 0.30 + 0.05 + 0.15 against 0.05 + 0.35 + 0.05: the head's reading wins
        (
            2.0,
            0.5,
            "shows",
        ),  # q_sel's best frame weighs most (core.config): 0.30 + 0.20 + 0.10 < 0.05 + 1.40 + 0.05
    ],
)
def test_a_candidate_the_head_read_scores_its_reading_plus_each_frame_term_by_its_own_weight(
    selection_weight, frame_weight, first
):
    """s = q · z_T + selection_weight · max_c q_sel · f_c + frame_weight · max_c q · f_c
    (Cascade._with_frame_evidence), for the candidates the head read; one it did not read keeps the
    frame tier's score, below them."""
    from types import SimpleNamespace

    from engine.results import Hit
    from engine.search.cascade import Cascade

    def hit(video, score, frame, rank, tier="head"):
        return Hit(video, score, 0.0, rank, tier=tier, frame_score=frame)

    cascade = Cascade(None, SimpleNamespace(name="head"), selection_weight=selection_weight,
                      frame_weight=frame_weight)  # fmt: skip
    # "moves": the head reads a change (0.30), its best frame barely the query's events under q_sel (0.10);
    # "shows": the head reads little (0.05), its frames show the events (0.70)
    ranked = [hit("moves", 0.30, 0.30, 1), hit("shows", 0.05, 0.10, 2), hit("unread", 0.90, 0.90, 3, "frame")]
    shows = {"moves": 0.10, "shows": 0.70, "unread": 0.95}
    out = cascade._with_frame_evidence(ranked, shows)
    assert [h.video_id for h in out][0] == first
    assert out[-1].video_id == "unread" and out[-1].score == 0.90
    by_id = {h.video_id: h.score for h in out}
    assert by_id["moves"] == pytest.approx(0.30 + selection_weight * 0.10 + frame_weight * 0.30)
    assert by_id["shows"] == pytest.approx(0.05 + selection_weight * 0.70 + frame_weight * 0.10)


@pytest.mark.parametrize(("lead", "stands"), [(0.005, False), (0.02, True)])
def test_the_heads_order_stands_only_where_its_best_beats_the_frame_tiers_first_by_the_keep_margin(
    lead, stands
):
    """Cascade._keep_unless_stronger with keep_margin 0.01: the head's first ahead of the frame tier's
    first by less keeps the frame tier's order (each hit back on its frame-tier score) and the route
    says so; by more, the head's order stands."""
    from types import SimpleNamespace

    from engine.results import Hit
    from engine.search.cascade import Cascade

    cascade = Cascade(SimpleNamespace(name="frame"), SimpleNamespace(name="head"), keep_margin=0.01)
    first = Hit("frame-first", 1.0, 0.0, 1, tier="head", frame_score=0.8)
    other = Hit("head-first", 1.0 + lead, 0.0, 2, tier="head", frame_score=0.7)
    rest = Hit("unread", 0.6, 0.0, 3, tier="frame", frame_score=0.6)
    state = SimpleNamespace(outcome=SimpleNamespace(route="about time"))
    out = cascade._keep_unless_stronger(state, [first, other, rest], [other, first, rest], 2)
    if stands:
        assert [h.video_id for h in out] == ["head-first", "frame-first", "unread"]
        assert state.outcome.route == "about time" and out[0].tier == "head"
    else:
        assert [h.video_id for h in out] == ["frame-first", "head-first", "unread"]
        assert "the frame tier's order stands" in state.outcome.route
        assert [(h.tier, h.score) for h in out[:2]] == [("frame", 0.8), ("frame", 0.7)]


# (its first: weakest event's relevance, the head's confidence), (the frame tier's first: the same), stands
TIME_FIRSTS = [
    ((0.90, 0.10), (0.95, 0.99), True),  # it shows every event plainly: it stands, whatever the confidence
    ((0.37, 0.93), (0.38, 0.05), True),  # neither shows them plainly; the head sure of its first, not theirs
    ((0.67, 0.95), (0.88, 0.04), True),  # a mirror pair: the same events shown at other strengths
    ((0.10, 0.93), (0.90, 0.40), False),  # its first hardly shows an event: relevance 0.09 against 0.36
    ((0.37, 0.45), (0.38, 0.05), False),  # the head not sure of its own first
    ((0.37, 0.93), (0.38, 0.60), False),  # ... or sure of the frame tier's first too
    ((0.37, None), (0.38, None), False),  # no confidence (a head without one): the threshold alone
]


@pytest.mark.parametrize("calibrated", [True, False])
@pytest.mark.parametrize(("ours", "theirs", "stands"), TIME_FIRSTS)
def test_the_time_heads_first_stands_where_it_shows_the_events_or_its_confidence_is_the_stronger_evidence(
    ours, theirs, stands, calibrated
):
    """Cascade._keep_time_unless_shown: the time head's first (another video than the frame tier's)
    stands where its weakest event reaches MIN_RELEVANCE, or where the head's calibrated confidence puts
    its own first at 0.5 or more and the frame tier's below and its relevance (weakest event x confidence)
    is not below the frame tier's first's; else the frame tier's order stands, every hit back on the frame
    tier, and the route says which. The streaming head reading an order (``calibrated`` False: its
    confidence is a share among the candidates it read, not a per-video probability) has the first rule
    alone."""
    from types import SimpleNamespace

    from engine.results import Hit
    from engine.search.cascade import ORDER_READER, TIME_READER, Cascade

    weakest = {"head-first": ours[0], "frame-first": theirs[0]}
    cascade = Cascade(
        SimpleNamespace(name="frame"),
        SimpleNamespace(name="head"),
        weakest_event=lambda h: weakest[h.video_id],
    )
    reader = TIME_READER if calibrated else ORDER_READER
    first = Hit("frame-first", 0.2, 0.0, 1, tier="time", frame_score=0.8, time_confidence=theirs[1])
    other = Hit("head-first", 0.9, 0.0, 2, tier="time", frame_score=0.7, time_confidence=ours[1])
    state = SimpleNamespace(outcome=SimpleNamespace(route="order", rerank_embedder="time"))
    out = cascade._keep_time_unless_shown(state, [first, other], [other, first], reader)
    assert state.time_read_by == reader and reader.calibrated == calibrated
    if stands and (
        calibrated or ours[0] >= 0.85
    ):  # without the confidence: where it shows every event plainly
        assert [h.video_id for h in out] == ["head-first", "frame-first"] and out[0].tier == "time"
        assert ("confidence" in state.outcome.route) == (ours[0] < 0.85)
    else:
        assert [h.video_id for h in out] == ["frame-first", "head-first"]
        assert f"{reader.name}'s first does not show every event it read" in state.outcome.route
        assert [(h.tier, h.score, h.time_confidence) for h in out] == [
            ("frame", 0.8, None),
            ("frame", 0.7, None),
        ]


def test_a_reading_that_does_not_stand_falls_back_to_the_frame_tiers_order_over_the_querys_own_shortlist():
    """Cascade._keep_time_unless_shown where stage 1 took the events' rankings in turn: the frame tier's
    order it falls back to is over q's own shortlist (``state.plain_hits``), not the widened one, where a
    video only the misread events brought in stood first and q's own first was missing."""
    from types import SimpleNamespace

    from engine.results import Hit
    from engine.search.cascade import Cascade

    def rank(request, hits):  # the frame tier's order: by frame score (here given, not from banks)
        for hit in hits:
            hit.score, hit.tier = hit.frame_score, "frame"
        return sorted(hits, key=lambda h: -h.frame_score)

    frame_tier = SimpleNamespace(name="frame", run=rank)
    cascade = Cascade(frame_tier, SimpleNamespace(name="head"), weakest_event=lambda h: 0.1)
    brought_in = Hit("events-only", 0.5, 0.0, 2, tier="frame", frame_score=0.53)
    widened = [brought_in, Hit("q-second", 0.4, 0.0, 1, tier="frame", frame_score=0.52)]
    read = [Hit("time-first", 0.9, 0.0, 3, tier="time", frame_score=0.2), *widened]
    plain = [Hit("q-second", 0.4, 0.0, 2, frame_score=0.52), Hit("q-first", 0.6, 0.0, 1, frame_score=0.55)]
    state = SimpleNamespace(outcome=SimpleNamespace(route="order", rerank_embedder="time"), plain_hits=plain)
    out = cascade._keep_time_unless_shown(state, widened, read, request=object())
    assert [h.video_id for h in out] == ["q-first", "q-second"]
    assert state.time_reverted and state.outcome.route.endswith("(over the query's own shortlist)")
    state.plain_hits = None  # stage 1 took q's ranking alone: the frame tier's order over it
    assert [h.video_id for h in cascade._keep_time_unless_shown(state, widened, read, request=object())] == [
        "events-only",
        "q-second",
    ]
