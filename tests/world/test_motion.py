"""Motion and change, order anywhere, count to three: the world's events over time follow its rules,
and a reversal pair holds the same frames in the opposite order."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from world.corpus import CorpusConfig, _plan, make_corpus
from world.render import Event, Renderer, VideoSpec, random_haystack
from world.vocab import (
    CHANGE_REVERSAL,
    CHANGES,
    COUNT_GAP_S,
    EVENT_SIZE,
    GREY_SPREAD,
    GROW_FACTOR,
    MOVE_TRAVEL,
    ORDER_GAP_S,
    STATIC_DRIFT,
    Change,
    EventKind,
    change_texts,
)

SMALL = dict(min_duration_s=36.0, max_duration_s=70.0, fps=(4.0,), short_side=(32, 48))


def _spec(event: Event, seed: int = 0, width: int = 120, height: int = 80, fps: float = 8.0) -> VideoSpec:
    rng = np.random.default_rng(seed)
    return VideoSpec(width, height, fps, 12.0, (event,), random_haystack(rng), seed=seed, antialias=False)


def _boxes(spec: VideoSpec, event: Event):
    r = Renderer(spec)
    return [r.event_boxes(i)[0] for i in spec.event_frames(event)]


def test_change_texts_follow_the_world_phrasings_and_reverse():
    square, circle = EventKind("red", "square"), EventKind("blue", "circle")
    assert change_texts(Change(square, "right")) == (
        "a red square moves from left to right",
        "a red square moves to the right",
    )
    assert Change(square, "down").reversed().text() == "a red square moves from bottom to top"
    assert change_texts(Change(circle, "grow")) == ("a blue circle grows", "a blue circle gets bigger")
    assert Change(circle, "grow").reversed().text(1) == "a blue circle gets smaller"
    turn = Change(square, "recolour", "blue")
    assert change_texts(turn) == ("a square turns from red to blue", "a square changes from red to blue")
    assert turn.reversed() == Change(EventKind("blue", "square"), "recolour", "red")
    assert {c: CHANGE_REVERSAL[CHANGE_REVERSAL[c]] for c in CHANGES} == {c: c for c in CHANGES}
    with pytest.raises(ValueError):
        Change(square, "recolour")  # a colour change names the colour it turns to
    with pytest.raises(ValueError):
        Change(square, "spin")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("direction", ["right", "left", "down", "up"])
def test_a_moving_shape_crosses_the_frame_in_a_straight_line_at_constant_speed(direction, seed):
    width, height = (120, 80) if seed % 2 else (64, 140)  # landscape and portrait
    event = Event(EventKind("green", "bar" if seed % 3 == 0 else "square"), 2.0, 2.0 + 3 + seed * 0.5,
                  change=direction)  # fmt: skip
    spec = _spec(event, seed, width, height)
    boxes = _boxes(spec, event)
    xs, ys, sizes = (np.array(v) for v in zip(*[b for _, b in boxes], strict=True))
    along, across = (xs, ys) if direction in ("right", "left") else (ys, xs)
    extent = width if direction in ("right", "left") else height
    sign = 1 if direction in ("right", "down") else -1
    steps = np.diff(along) * sign
    assert (steps > 0).all() and np.allclose(steps, steps[0])  # one direction, constant speed
    assert np.ptp(across) == 0 and np.ptp(sizes) == 0  # a straight line; the shape keeps its size
    speed = steps[0] * spec.fps
    assert speed * (event.end_s - event.start_s) >= MOVE_TRAVEL * extent - 1e-6  # at least half across
    short = min(width, height)
    assert EVENT_SIZE[0] * short - 1e-6 <= sizes[0] <= EVENT_SIZE[1] * short + 1e-6
    r = Renderer(spec)
    for i in spec.event_frames(event):  # wholly inside the frame, throughout
        mask = r.event_mask(i)
        assert mask.any() and not mask[0].any() and not mask[-1].any()
        assert not mask[:, 0].any() and not mask[:, -1].any()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("change", ["grow", "shrink"])
def test_a_growing_or_shrinking_shape_stays_in_place_and_changes_size_twofold(change, seed):
    event = Event(EventKind("cyan", "circle"), 1.0, 5.0 + seed * 0.2, change=change)
    spec = _spec(event, seed)
    boxes = _boxes(spec, event)
    xs, ys, sizes = (np.array(v) for v in zip(*[b for _, b in boxes], strict=True))
    assert np.ptp(xs) == 0 and np.ptp(ys) == 0
    sign = 1 if change == "grow" else -1
    assert (np.diff(sizes) * sign > 0).all()
    short = min(spec.width, spec.height)
    # linear in time: from the frames, its size at the showing's start and end differ by the factor
    frames = spec.event_frames(event)
    times = np.array([spec.frame_time(i) for i in frames])
    slope, at_zero = np.polyfit(times, sizes, 1)
    assert np.allclose(at_zero + slope * times, sizes)
    first, last = at_zero + slope * event.start_s, at_zero + slope * event.end_s
    assert max(first, last) / min(first, last) >= GROW_FACTOR - 1e-6
    assert EVENT_SIZE[0] * short - 1e-6 <= sizes.min() and sizes.max() <= EVENT_SIZE[1] * short + 1e-6


@pytest.mark.parametrize("seed", range(4))
def test_a_colour_change_switches_once_in_place(seed):
    event = Event(EventKind("red", "triangle"), 1.0, 5.0, change="recolour", to_colour="blue")
    spec = _spec(event, seed)
    boxes = _boxes(spec, event)
    colours = [kind.colour for kind, _ in boxes]
    assert colours[0] == "red" and colours[-1] == "blue"
    assert sum(a != b for a, b in zip(colours, colours[1:], strict=False)) == 1  # switches once
    assert len({box for _, box in boxes}) == 1  # in place, one size
    r = Renderer(spec)
    for i in spec.event_frames(event):  # only the event is coloured
        frame, mask = r.frame(i).astype(int), r.event_mask(i)
        outside = frame[mask == 0]
        assert (outside.max(axis=1) - outside.min(axis=1)).max() <= GREY_SPREAD


@pytest.mark.parametrize("change", CHANGES)
def test_a_reversal_pair_holds_the_same_frames_in_the_opposite_order(change):
    """The same spec with the event played backwards: the same multiset of frames, identical outside
    the event's span and mirrored inside it; the viewer sees the reversed change."""
    to = "orange" if change == "recolour" else None
    forward = Event(EventKind("white", "square"), 3.0, 7.5, change=change, to_colour=to)
    backward = Event(EventKind("white", "square"), 3.0, 7.5, change=change, to_colour=to, backwards=True)
    a, b = _spec(forward, 7), _spec(backward, 7)
    ra, rb = Renderer(a), Renderer(b)
    fa = [ra.frame(i).tobytes() for i in range(a.num_frames)]
    fb = [rb.frame(i).tobytes() for i in range(b.num_frames)]
    assert Counter(fa) == Counter(fb) and fa != fb
    span = a.event_frames(forward)
    for i in range(a.num_frames):
        assert fb[i] == (fa[span.start + span.stop - 1 - i] if i in span else fa[i])
    assert backward.seen_change == forward.seen_change.reversed()
    boxes = _boxes(b, backward)
    if change in ("right", "left", "down", "up", "grow", "shrink"):  # the reversed motion, by its boxes
        assert [box for _, box in boxes] == [box for _, box in reversed(_boxes(a, forward))]
    else:
        assert boxes[0][0].colour == "orange" and boxes[-1][0].colour == "white"


@pytest.mark.parametrize("seed", range(10))
def test_a_static_event_drifts_at_most_a_tenth_of_the_short_side(seed):
    event = Event(EventKind("yellow", "circle"), 1.0, 6.0)
    spec = _spec(event, seed)
    xs, ys, _ = (np.array(v) for v in zip(*[b for _, b in _boxes(spec, event)], strict=True))
    drift = np.hypot(xs - xs[0], ys - ys[0]).max()
    assert drift <= STATIC_DRIFT * min(spec.width, spec.height) + 1e-6


def test_order_pairs_lie_anywhere_over_the_same_haystack_with_the_events_swapped():
    config = CorpusConfig(videos=2, order_pairs=6, seed=4, **SMALL)
    plans = [(t, s) for t, s in _plan(config) if t.kind == "order"]
    phrasings = set()
    for (a, sa), (b, sb) in zip(plans[::2], plans[1::2], strict=True):
        assert a.group == b.group and (sa.haystack, sa.seed, sa.width, sa.fps) == (
            sb.haystack,
            sb.seed,
            sb.width,
            sb.fps,
        )
        (n1, s1, e1), (n2, s2, e2) = a.events
        assert b.events == ((n2, s1, e1), (n1, s2, e2))  # the same times, the events swapped
        assert ORDER_GAP_S[0] - 0.01 <= s2 - e1 <= ORDER_GAP_S[1] + 0.01
        assert s1 >= 5.0 and e2 <= a.duration_s - 5.0 + 0.01
        phrasings |= {("then" in q) + 2 * ("after" in q) + 4 * ("before" in q) for q in a.queries + b.queries}
    assert len(phrasings) >= 2


def test_count_to_three_pairs_share_the_haystack_and_differ_only_in_the_extra_showing():
    config = CorpusConfig(videos=0, count3_pairs=2, seed=5, **SMALL)
    plans = [(t, s) for t, s in _plan(config) if t.kind == "count"]
    for (twice, ts), (thrice, rs) in zip(plans[::2], plans[1::2], strict=True):
        assert len(twice.events) == 2 and len(thrice.events) == 3
        assert set(twice.events) < set(thrice.events)
        assert twice.queries[0].endswith(("twice", "two times")) and thrice.queries[0].endswith("three times")
        starts, ends = zip(*[(s, e) for _, s, e in thrice.events], strict=True)
        assert all(s - e >= COUNT_GAP_S - 1e-9 for e, s in zip(ends, starts[1:], strict=False))
        (extra,) = [e for e in rs.events if e not in ts.events]
        a, b = Renderer(ts), Renderer(rs)
        extra_frames = set(rs.event_frames(extra))
        for i in range(0, rs.num_frames, 3):
            assert np.array_equal(a.frame(i), b.frame(i)) == (i not in extra_frames), i


def test_a_motion_corpus_names_each_pair_and_queries_each_video_by_the_change_it_shows(tmp_path):
    config = CorpusConfig(videos=1, motion_pairs=3, seed=3, **SMALL)
    corpus = make_corpus(tmp_path / "m", config)
    motion = [v for v in corpus.videos if v.kind == "motion"]
    assert len(motion) == 6
    for f, b in zip(motion[::2], motion[1::2], strict=True):
        assert f.group == b.group and f.change != b.change
        assert f.events[0][1:] == b.events[0][1:]
        assert 3.0 <= f.events[0][2] - f.events[0][1] <= 6.0
        assert f.queries != b.queries
    rows = {
        json.loads(line)["id"]: json.loads(line)["metadata"]
        for line in corpus.manifest.read_text().splitlines()
    }
    assert {rows[v.id]["group"] for v in motion} == {v.group for v in motion}
    assert all(rows[v.id]["title"] == v.change and rows[v.id]["kind"] == "motion" for v in motion)
    assert len({v.change for v in motion}) == 6
    assert all((corpus.root / v.path).stat().st_size > 0 for v in corpus.videos)
