"""The shipped tiny-world backbone sees the shapes world (frame level), through the production path:
held-out world videos are encoded by real codecs, decoded by the indexer at the backbone's working
size, and embedded by the loader's Backbone. These can fail: a random or untrained checkpoint, a
broken loader, or a decode path that distorts frames all drop the numbers below the bars."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from world.render import Event, Renderer, VideoSpec, random_haystack
from world.vocab import EVENTS, PHRASINGS

SEGMENT_S = 2.0  # each event (or empty stretch) lasts 2 s
FPS = 4.0
# Held-out settings: sizes, codecs and seeds that training never drew (training draws its own seeds).
SETTINGS = [
    (200, 120, "h264", ".mkv", 9101),
    (120, 200, "vp9", ".webm", 9202),
    (176, 176, "mpeg4", ".avi", 9303),
]
EMPTY = 12  # empty stretches per video


@pytest.fixture(scope="session")
def world_backbone(tiny_world_checkpoint):
    from models.backbone import load_backbone

    return load_backbone(tiny_world_checkpoint)


def _held_out_frames(tmp_path, backbone):
    """(event frames [3 x 32], empty frames [3 x EMPTY]) decoded from three held-out world videos."""
    from indexer.video import decode_frames, probe_video
    from world.media import write_video

    events, empties = [], []
    for width, height, codec, ext, seed in SETTINGS:
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(EVENTS))
        slots = len(EVENTS) + EMPTY
        kinds = [EVENTS[i] for i in order] + [None] * EMPTY
        kinds = [kinds[i] for i in rng.permutation(slots)]
        evs = tuple(
            Event(kind, k * SEGMENT_S + 0.01, (k + 1) * SEGMENT_S - 0.01)
            for k, kind in enumerate(kinds)
            if kind
        )
        spec = VideoSpec(width, height, FPS, slots * SEGMENT_S, evs, random_haystack(rng), seed=seed)
        path = write_video(tmp_path / f"held-out-{seed}{ext}", Renderer(spec).frames(), fps=FPS, codec=codec)
        info = probe_video(path)
        middle = [int((k + 0.5) * SEGMENT_S * FPS) for k in range(slots)]
        frames = decode_frames(path, middle, size=backbone.frame_shape(info.width, info.height))
        by_kind = {kind: frames[k] for k, kind in enumerate(kinds) if kind is not None}
        events.append([by_kind[kind] for kind in EVENTS])
        empties += [frames[k] for k, kind in enumerate(kinds) if kind is None]
    return events, empties


@pytest.mark.slow
def test_text_finds_the_right_frame_and_beats_every_empty_haystack(tmp_path, world_backbone):
    backbone = world_backbone
    events, empties = _held_out_frames(tmp_path, backbone)
    texts = [kind.text(p) for p in range(len(PHRASINGS)) for kind in EVENTS]
    with torch.no_grad():
        q = backbone.embed_texts(texts)  # [4 x 32, d]
        z_empty = backbone.embed_images(empties)
        correct = total = 0
        worst_margin = np.inf
        beaten = 0
        best_margin = np.full(len(texts), -np.inf)  # per text: its best held-out event frame
        for frames in events:  # one held-out video's 32 event frames
            z = backbone.embed_images(frames)
            sim = (q @ z.T).numpy()  # [4 x 32 texts, 32 frames]
            truth = np.arange(len(texts)) % len(EVENTS)
            correct += int((sim.argmax(axis=1) == truth).sum())
            total += len(texts)
            margin = sim[np.arange(len(texts)), truth] - (q @ z_empty.T).numpy().max(axis=1)
            worst_margin = min(worst_margin, float(margin.min()))
            beaten += int((margin > 0).sum())
            best_margin = np.maximum(best_margin, margin)
    top1 = correct / total
    print(
        f"text->frame top-1 {top1:.3f}; event frame beats every empty: {beaten}/{total}; "
        f"worst margin {worst_margin:.3f}"
    )
    assert top1 >= 0.9
    # every event text: a held-out frame showing its event outscores every empty haystack frame
    missed = [texts[i] for i in np.flatnonzero(best_margin <= 0)]
    assert not missed, f"no held-out frame of these events beats every empty haystack: {missed}"
    # and nearly every (text, event frame) pair does (the shipped backbone: 372/384; the misses are
    # white events against bright haystacks whose noise blocks reach white)
    assert beaten >= 0.95 * total, f"{beaten}/{total}, worst margin {worst_margin:.3f}"


def test_a_circle_reaches_the_backbone_as_a_circle_in_landscape_and_portrait(tmp_path, world_backbone):
    """Decoding keeps the aspect ratio: the circle's width and height stay equal (within rounding)
    in a 16:9 and a 9:16 video, where squashing to a square would make it an ellipse of 1.78:1."""
    from indexer.video import decode_frames, probe_video
    from world.media import write_video
    from world.vocab import EventKind

    ratios = {}
    for name, (w, h) in {"landscape": (320, 180), "portrait": (180, 320)}.items():
        spec = VideoSpec(w, h, 4.0, 3.0, (Event(EventKind("yellow", "circle"), 0.5, 2.5, size=0.4),), seed=1)
        path = write_video(tmp_path / f"{name}.mp4", Renderer(spec).frames(), fps=4.0, codec="h264")
        info = probe_video(path)
        size = world_backbone.frame_shape(info.width, info.height)
        assert size[0] > size[1] if name == "landscape" else size[0] < size[1]
        (frame,) = decode_frames(path, [6], size=size).astype(int)
        yellow = (frame[..., 0] > 150) & (frame[..., 1] > 150) & (frame[..., 2] < 110)
        ys, xs = np.nonzero(yellow)
        ratios[name] = (xs.max() - xs.min() + 1) / (ys.max() - ys.min() + 1)
    assert ratios["landscape"] == pytest.approx(1.0, abs=0.15)
    assert ratios["portrait"] == pytest.approx(1.0, abs=0.15)
