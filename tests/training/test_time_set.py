"""The order and count training set (training/time_set.py) and what training does with it: families
that differ only in time structure, each distinct frame selection encoded once, and L_clip left out
of the pairs whose answer is an order or a count (issue #22)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

from training.data import load_pairs
from training.time_set import TimeSetConfig, make_time_set
from world.vocab import COLOURS, parse_event

FRAMES = 12
CONFIG = TimeSetConfig(
    order_families=(2, 0), count_families=(2, 0), singles=(2, 0), frames=FRAMES, candidates=4, seed=3
)


@pytest.fixture(scope="module")
def time_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("time_set")
    make_time_set(root, CONFIG, progress=False)
    return root


def _truth(root) -> dict[str, dict]:
    rows = [json.loads(line) for line in (root / "train_truth.jsonl").read_text().splitlines()]
    return {r["id"]: r for r in rows}


def _shown(path, colour: str) -> list[int]:
    """Frames of the video at ``path`` with at least 0.2 % of pixels within 40 of ``colour``."""
    from indexer.video import decode_frames, probe_video

    info = probe_video(path)
    frames = decode_frames(path, range(info.num_frames), size=(info.width, info.height)).astype(int)
    near = (np.abs(frames - np.array(COLOURS[colour])) <= 40).all(-1).mean(axis=(1, 2))
    return [i for i, share in enumerate(near) if share > 0.002]


def test_families_differ_only_in_time_structure_and_the_frames_show_it(time_set):
    truth = _truth(time_set)
    assert len(truth) == 2 * 4 + 2 * 2 + 2
    for video in truth.values():
        for name, _, _ in video["runs"]:
            shown = _shown(video["path"], parse_event(name).colour)
            others = [r for r in video["runs"] if parse_event(r[0]).colour == parse_event(name).colour]
            expected = sorted(i for _, p, n in others for i in range(p, p + n))
            assert shown == expected, (video["id"], name)
    for fam in {v["family"] for v in truth.values() if "o" in v["family"][2:3]}:
        ab, ba = truth[f"{fam}ab"]["runs"], truth[f"{fam}ba"]["runs"]
        # the mirror: the same runs, the events swapped
        assert [r[1:] for r in ab] == [r[1:] for r in ba] and [r[0] for r in ab] == [r[0] for r in ba][::-1]
    for fam in {v["family"] for v in truth.values() if "c" in v["family"][2:3]}:
        twice, once = truth[f"{fam}t"]["runs"], truth[f"{fam}o"]["runs"]
        assert len(twice) == 2 and len(once) == 1 and twice[0][0] == once[0][0]
        assert twice[1][1] > twice[0][1] + twice[0][2]  # haystack between the two showings


def test_every_time_query_has_its_family_as_hard_negatives(time_set):
    pairs = load_pairs(time_set / "train.jsonl")
    kinds = Counter(p.meta["kind"] for p in pairs)
    assert kinds == {"ordered": 4, "counted": 4, "single": 2}
    for p in pairs:
        keys = [c.key() for c in p.candidates]
        assert p.positive.key() in keys and len(keys) == len(set(keys)) == CONFIG.candidates
        if p.meta["kind"] == "ordered":  # the mirror is among the candidates
            path = p.positive.video.path
            mirror = path[:-6] + ("ba" if path.endswith("ab.mp4") else "ab") + ".mp4"
            assert any(c.video.path == mirror for c in p.candidates)
        if p.meta["kind"] == "counted":
            other = p.positive.video.path[:-5] + ("o" if p.positive.video.path.endswith("t.mp4") else "t")
            assert any(c.video.path == other + ".mp4" for c in p.candidates)


def test_the_feature_cache_encodes_each_distinct_selection_once(
    time_set, tiny_checkpoint, tmp_path, monkeypatch
):
    """Under text conditioning none a candidate's evidence is a function of its frames: one encode
    per video, however many queries list it, and the same evidence under each."""
    from models.backbone import load_backbone
    from models.streaming import VideoEncoder
    from training.features import FeatureSettings, FeatureStore, build_cache, conditioned_key

    encoded = []
    original = VideoEncoder.evidence

    def counting(self, videos, **kwargs):
        encoded.extend(len(v.frames) for v in videos)
        return original(self, videos, **kwargs)

    monkeypatch.setattr(VideoEncoder, "evidence", counting)
    pairs = load_pairs(time_set / "train.jsonl")
    settings = FeatureSettings(
        max_frames=FRAMES, clip_len=4, max_evidence=32, selection="query-aware", text_conditioning="none"
    )
    backbone = load_backbone(tiny_checkpoint, device="cpu")
    store = FeatureStore(
        build_cache(
            tmp_path, backbone=backbone, pairs=pairs, settings=settings, scoring="conditioned", progress=False
        )
    )
    videos = {c.video.path for p in pairs for c in p.candidates}
    assert len(encoded) == len(videos) and set(encoded) == {FRAMES}  # every frame kept, once per video
    shared = next(c for c in pairs[0].candidates if sum(c in p.candidates for p in pairs) > 1)
    queries = [p.query.text for p in pairs if shared in p.candidates]
    first, second = (store.banks(conditioned_key(shared, q))[0] for q in queries[:2])
    assert first.shape[0] == FRAMES // 4 and bool((first == second).all())


@pytest.fixture(scope="module")
def conditioned(time_set, tiny_checkpoint, tmp_path_factory):
    """The time set's query-conditioned features (tiny backbone) and a random query-conditioned head."""
    from models.backbone import load_backbone
    from models.head import StreamingHeadConfig, create_head
    from training.features import FeatureSettings, FeatureStore, build_cache

    settings = FeatureSettings(max_frames=FRAMES, clip_len=4, max_evidence=32, selection="query-aware")
    store = FeatureStore(
        build_cache(
            tmp_path_factory.mktemp("time_features"), backbone=load_backbone(tiny_checkpoint, device="cpu"),
            pairs=load_pairs(time_set / "train.jsonl"), settings=settings, scoring="conditioned", progress=False,
        )
    )  # fmt: skip
    config = StreamingHeadConfig(
        hidden_size=64, embed_dim=64, num_heads=4, num_think_tokens=8, query_conditioning=True
    )
    return store, create_head(config, seed=0)


def test_l_clip_leaves_order_and_count_pairs_to_the_contrastive_terms(time_set, conditioned):
    """L_clip's teacher pools clips by relevance alone (the same for a video and its mirror), so it
    is computed over single-event pairs only: a batch of order and count pairs gets none."""
    import dataclasses

    from training.scoring import is_time_pair, pair_losses

    pairs = load_pairs(time_set / "train.jsonl")
    store, head = conditioned
    timed = [p for p in pairs if is_time_pair(p)]
    single = [p for p in pairs if not is_time_pair(p)]
    assert len(timed) == 8 and len(single) == 2
    assert float(pair_losses(head, store, timed, scoring="conditioned", clip_loss=True).clip.detach()) == 0.0
    assert float(pair_losses(head, store, single, scoring="conditioned", clip_loss=True).clip.detach()) > 0
    # the same pairs without their kind are taught again: the rule reads meta.kind, nothing else
    unmarked = [dataclasses.replace(p, meta={}) for p in timed]
    assert float(pair_losses(head, store, unmarked, scoring="conditioned", clip_loss=True).clip.detach()) > 0


def test_early_exit_tradeoff_counts_saved_clips_and_agreement_with_the_full_stream(time_set, conditioned):
    """A gate that never fires saves nothing and agrees always; one that always fires stops every
    candidate at t_min and saves the rest of its clips (Eq. 19)."""
    from training.gate_training import exit_tradeoff, train_gate

    pairs = load_pairs(time_set / "train.jsonl")
    store, head = conditioned
    gate, _ = train_gate(head, store, pairs, epochs=3, scoring="conditioned")
    never, always = exit_tradeoff(head, gate, store, pairs, etas=(1.01, 0.0), t_min=2)
    assert never == {"eta": 1.01, "clips_saved": 0.0, "top1_agreement": 1.0}
    steps = FRAMES // 4  # 3 clips a candidate, stopped after 2
    assert always["clips_saved"] == pytest.approx(1 - 2 / steps)
    # the agreement of a gate that always fires, counted here from the streams themselves: the top-1
    # after t_min clips against the full stream's, query by query (issue 40: a bound alone cannot fail)
    from training.features import conditioned_key
    from training.scoring import stream_items, takes_query

    agree = total = 0
    for p in pairs:
        if p.query.video is not None or not p.candidates:
            continue
        keys = [conditioned_key(c, p.query.text) for c in p.candidates]
        q = store.text(p.query.text).float()
        with torch.no_grad():
            out = stream_items(
                head, store, keys, queries=q[None].expand(len(keys), -1) if takes_query(head) else None
            )
        early = out.steps.float()[:, 1] @ q  # stopped after t_min = 2 clips
        agree += int(int(early.argmax()) == int((out.final.float() @ q).argmax()))
        total += 1
    assert total and always["top1_agreement"] == pytest.approx(agree / total)
