"""The shapes-world renderer follows the world's rules, and its videos decode as the indexer reads them."""

from __future__ import annotations

import numpy as np
import pytest

from world.render import Event, Haystack, Renderer, VideoSpec, random_haystack
from world.vocab import COLOURS, EVENTS, GREY_SPREAD, EventKind, count_text, order_text, parse_event


def _spec(**kw) -> VideoSpec:
    base = dict(
        width=160,
        height=96,
        fps=8.0,
        duration_s=6.0,
        events=(Event(EventKind("red", "circle"), 2.0, 3.5),),
        haystack=random_haystack(np.random.default_rng(3)),
        seed=5,
    )
    base.update(kw)
    return VideoSpec(**base)


def test_texts_follow_the_world_phrasings():
    kind = EventKind("orange", "bar")
    assert [kind.text(p) for p in range(4)] == [
        "an orange bar appears",
        "an orange bar",
        "orange bar shows up briefly",
        "there is an orange bar",
    ]
    a, b = EventKind("red", "square"), EventKind("blue", "circle")
    assert order_text(a, b) == "a red square appears, then a blue circle appears"
    assert order_text(a, b, 1) == "first a red square appears, then a blue circle appears"
    assert order_text(a, b, 2) == "a blue circle appears after a red square appears"
    assert order_text(a, b, 3) == "a red square appears before a blue circle appears"
    assert len(EVENTS) == 32 and len({e.name for e in EVENTS}) == 32
    assert parse_event("cyan triangle") == EventKind("cyan", "triangle")
    with pytest.raises(ValueError):
        EventKind("purple", "square")


def test_count_texts_say_once_twice_or_three_times_in_the_world_phrasings():
    kind = EventKind("red", "square")
    assert [count_text(kind, 1, p) for p in range(2)] == [
        "a red square appears once",
        "a red square appears only once",
    ]
    assert [count_text(kind, 2, p) for p in range(2)] == [
        "a red square appears twice",
        "a red square appears two times",
    ]
    assert count_text(EventKind("orange", "bar"), 2) == "an orange bar appears twice"
    assert count_text(kind, 3) == "a red square appears three times"
    with pytest.raises(ValueError, match="counts showings"):
        count_text(kind, 4)


@pytest.mark.parametrize("seed", range(6))
def test_haystack_is_grey_and_event_is_the_only_colour(seed):
    """Everything but the event keeps its channels within the grey spread; the event's pixels are
    its colour (nominal +- 20 per channel)."""
    rng = np.random.default_rng(seed)
    kind = EVENTS[seed * 5 % 32]
    spec = _spec(events=(Event(kind, 1.0, 3.0),), haystack=random_haystack(rng), seed=seed, antialias=False)
    r = Renderer(spec)
    empty = r.frame(0).astype(int)
    assert (empty.max(axis=2) - empty.min(axis=2)).max() <= GREY_SPREAD
    frame = r.frame(16).astype(int)  # t = 2 s
    mask = r.event_mask(16) > 0.99
    assert mask.any()
    nominal = np.array(COLOURS[kind.colour])
    assert np.abs(frame[mask] - nominal).max() <= 21
    outside = frame[r.event_mask(16) == 0]
    assert (outside.max(axis=1) - outside.min(axis=1)).max() <= GREY_SPREAD


def test_event_sizes_and_visibility_follow_the_rules():
    rng = np.random.default_rng(0)
    for i in range(40):
        w, h = int(rng.integers(64, 480)), int(rng.integers(64, 480))
        kind = EVENTS[i % 32]
        spec = _spec(width=w, height=h, events=(Event(kind, 0.5, 2.0),), seed=i)
        r = Renderer(spec)
        ((_, (cx, cy, size)),) = r.event_boxes(8)
        short = min(w, h)
        assert 0.15 * short - 1e-6 <= size <= 0.45 * short + 1e-6
        mask = r.event_mask(8)
        ys, xs = np.nonzero(mask)
        assert ys.min() >= 0 and xs.min() >= 0 and ys.max() < h and xs.max() < w  # wholly inside
        assert not r.event_boxes(2) and not r.event_boxes(17)  # only during the event
    with pytest.raises(ValueError):
        _spec(events=(Event(EVENTS[0], 1, 3), Event(EVENTS[1], 2, 4)))  # never two at once


def test_frames_are_a_pure_function_of_spec_and_index():
    spec = _spec(haystack=Haystack(blobs=2, distractors=2, blocks_amp=10, flicker_amp=5))
    a = list(Renderer(spec).frames())
    b = Renderer(spec)
    assert np.array_equal(a[13], b.frame(13)) and np.array_equal(a[3], b.frame(3))
    assert not np.array_equal(a[3], a[4])  # the haystack moves


@pytest.mark.parametrize(
    "codec,ext", [("h264", ".mp4"), ("mpeg4", ".avi"), ("vp9", ".webm"), ("h264", ".mkv")]
)
def test_world_videos_decode_through_the_indexer(tmp_path, codec, ext):
    from indexer.video import decode_frames, probe_video
    from world.media import write_video

    spec = _spec()
    path = write_video(tmp_path / f"v{ext}", Renderer(spec).frames(), fps=spec.fps, codec=codec)
    info = probe_video(path)
    assert (info.width, info.height, info.num_frames) == (160, 96, 48)
    assert info.fps == pytest.approx(8.0)
    frames = decode_frames(path, [20], size=(160, 96))
    red = frames[0].astype(int)
    assert ((red[..., 0] - red[..., 1]) > 100).sum() > 50  # the red circle survived the codec


def test_a_container_refuses_a_codec_it_cannot_carry(tmp_path):
    from world.media import write_video

    with pytest.raises(ValueError, match="does not carry"):
        write_video(tmp_path / "x.webm", [np.zeros((32, 32, 3), np.uint8)], codec="h264")
