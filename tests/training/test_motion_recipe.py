"""training.motion_recipe: the direct motion recipe runs from the shipped weights, moves them, and
records its checks (a smoke run: two steps; what it reaches is measured in training/tiny_world/README.md)."""

from __future__ import annotations

import json
import math

import pytest
from safetensors.torch import load_file

from training.backbone import ASSET_DIR
from training.motion_recipe import MotionRecipe, main

pytestmark = pytest.mark.slow  # renders world clips and trains the backbone two steps (about 10 s)


def test_two_steps_move_the_weights_and_record_both_checks(tmp_path, capsys):
    out = tmp_path / "motion"
    args = ["--steps", "2", "--eval-every", "1", "--eval-pairs", "2", "--pairs", "1", "--images", "4"]
    assert main([str(out), *args]) == 0
    record = json.loads((out / "motion_recipe.json").read_text())
    assert record["recipe"] == {**vars(MotionRecipe()), "steps": 2, "eval_every": 1, "eval_pairs": 2,
                                "pairs": 1, "images": 4}  # fmt: skip
    assert [e["step"] for e in record["evals"]] == [0, 1, 2]
    for e in record["evals"]:
        assert 0.0 <= e["reversal"] <= 1.0 and 0.0 <= e["text_to_frame_top1"] <= 1.0
    shipped, trained = (
        load_file(str(ASSET_DIR / "model.safetensors")),
        load_file(str(out / "model.safetensors")),
    )
    assert shipped.keys() == trained.keys()
    assert any(not (shipped[k] == trained[k]).all() for k in shipped)
    assert (out / "tokenizer.json").read_bytes() == (ASSET_DIR / "tokenizer.json").read_bytes()
    assert '"reversal"' in capsys.readouterr().out


def test_videos_distil_after_videos_from_steps(tmp_path):
    """--videos-from N: event clips and long videos distil from step N + 1 on, frames from the first."""
    out = tmp_path / "motion"
    args = ["--steps", "3", "--eval-every", "3", "--log-every", "1", "--eval-pairs", "2", "--pairs", "1",
            "--images", "2", "--distill", "1", "--clips", "1", "--long", "1", "--long-frames", "4",
            "--videos-from", "2"]  # fmt: skip
    assert main([str(out), *args]) == 0
    logged = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = {e["step"]: e for e in logged if "eval" not in e}
    assert sorted(steps) == [1, 2, 3]
    assert all("distill" in steps[k] for k in steps)
    assert ["distill_clips" in steps[k] for k in (1, 2, 3)] == [False, False, True]


def test_sentences_around_hold_a_world_text_among_other_words():
    import numpy as np

    from training.motion_recipe import sentences_around
    from world.vocab import EVENTS

    said = sentences_around(np.random.default_rng(3), 60)
    assert said == sentences_around(np.random.default_rng(3), 60)  # reproducible from the seed
    assert all(any(e.name in s for e in EVENTS) for s in said)
    assert any("then" in s or "after" in s or "before" in s for s in said)  # order texts
    assert any("twice" in s or "three times" in s or "once" in s for s in said)  # count texts
    assert len(set(said)) > 40


def test_empty_frames_and_sentences_distil_beside_the_event_frames(tmp_path, monkeypatch):
    """--empty and --sentences: the teacher and the trained weights both embed the step's empty
    haystacks and sentences around world texts, and the distillation compares them."""
    import training.backbone_config as config
    from world.vocab import EVENTS, PHRASINGS

    seen: list[tuple[str, int, list]] = []
    texts, images = config.embed_texts, config.embed_images

    def spy_texts(backbone, said):
        seen.append(("texts", id(backbone), list(said)))
        return texts(backbone, said)

    def spy_images(backbone, frames):
        seen.append(("images", id(backbone), len(frames)))
        return images(backbone, frames)

    monkeypatch.setattr(config, "embed_texts", spy_texts)
    monkeypatch.setattr(config, "embed_images", spy_images)
    out = tmp_path / "motion"
    args = ["--steps", "1", "--eval-every", "1", "--log-every", "1", "--eval-pairs", "2", "--pairs", "1",
            "--images", "2", "--distill", "1", "--empty", "3", "--sentences", "5"]  # fmt: skip
    assert main([str(out), *args]) == 0
    step = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert "distill" in [e for e in step if "eval" not in e][0]
    models = {who for _, who, _ in seen}
    assert len(models) == 2  # the teacher and the trained weights
    plain = {e.text(p) for e in EVENTS for p in range(len(PHRASINGS))}
    around = lambda said: [t for t in said if t not in plain and any(e.name in t for e in EVENTS)]  # noqa: E731
    for who in models:
        embedded = [said for kind, w, said in seen if kind == "texts" and w == who]
        assert any(len(around(said)) == 5 for said in embedded)
    frames = sorted(n for kind, _, n in seen if kind == "images")
    assert 5 in frames and 3 in frames  # the teacher: 2 event + 3 empty; the trained: the 3 empty apart


@pytest.fixture()
def world_backbone(tiny_world_checkpoint):
    from models.backbone import load_backbone

    return load_backbone(tiny_world_checkpoint, device="cpu", dtype="float32")


def _frames(seed: int, n: int, size: int):
    import numpy as np

    return np.random.default_rng(seed).integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)


def test_temporal_difference_moves_moving_clips_only(world_backbone):
    """Only the frame difference learns: a still frame and a still clip embed as before, a clip whose
    two frames differ does not."""
    import numpy as np
    import torch
    from torch.nn.utils import parametrize

    from models.backbone import VideoClip
    from training.backbone_config import embed_clips, embed_images
    from training.motion_recipe import bake, temporal_only

    b, size = world_backbone, world_backbone.frame_size
    frame, moving = _frames(0, 1, size)[0], _frames(1, 2, size)
    still = VideoClip(np.stack([frame, frame]), [0, 1], 2.0)
    clip = VideoClip(moving, [0, 1], 2.0)
    with torch.no_grad():
        before = (embed_images(b, [frame]), embed_clips(b, [still]), embed_clips(b, [clip]))
    (difference,) = temporal_only(b.model)
    assert [p for p in b.model.parameters() if p.requires_grad] == [difference]
    with torch.no_grad():
        difference.add_(torch.randn_like(difference) * difference.std())
        after = (embed_images(b, [frame]), embed_clips(b, [still]), embed_clips(b, [clip]))
    torch.testing.assert_close(after[0], before[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(after[1], before[1], atol=1e-5, rtol=0)
    assert float((after[2] - before[2]).abs().max()) > 1e-3
    bake(b.model)
    proj = b.model.model.visual.patch_embed.proj
    assert not parametrize.is_parametrized(proj) and proj.weight.shape[2] == 2
    with torch.no_grad():
        torch.testing.assert_close(embed_clips(b, [clip]), after[2], atol=1e-5, rtol=0)


def test_change_only_tokens_leave_every_other_world_text_as_it_was(world_backbone):
    import torch

    from training.backbone_config import embed_texts
    from training.motion_recipe import change_only_tokens, words_only
    from world.vocab import EVENTS, Change, count_text, order_text

    b = world_backbone
    tokens = change_only_tokens(b)
    assert tokens
    others = [EVENTS[3].text(0), order_text(EVENTS[1], EVENTS[9]), count_text(EVENTS[5], 3)]
    said = Change(EVENTS[2], "left").text(0)
    for text in others:
        assert not set(b.processor.tokenizer(b.render_prompt(text=text))["input_ids"]) & set(tokens)
    b.model.requires_grad_(False)
    (table,) = words_only(b.model, tokens)
    with torch.no_grad():
        before = embed_texts(b, others + [said])
    opt = torch.optim.AdamW([table], lr=1e-2, weight_decay=0.0)
    embed_texts(b, [said]).sum().backward()
    opt.step()
    with torch.no_grad():
        after = embed_texts(b, others + [said])
    torch.testing.assert_close(after[:-1], before[:-1], atol=0, rtol=0)
    assert float((after[-1] - before[-1]).abs().max()) > 1e-4


def test_a_rerun_with_more_steps_goes_on_from_the_saved_state(tmp_path):
    out = tmp_path / "motion"
    args = [
        "--eval-every",
        "1",
        "--log-every",
        "1",
        "--eval-pairs",
        "2",
        "--pairs",
        "1",
        "--train",
        "temporal",
    ]
    assert main([str(out), "--steps", "1", *args]) == 0
    first = json.loads((out / "motion_recipe.json").read_text())
    assert main([str(out), "--steps", "2", *args]) == 0
    record = json.loads((out / "motion_recipe.json").read_text())
    assert [e["step"] for e in record["evals"]] == [0, 1, 2]
    assert record["evals"][:2] == first["evals"]  # kept from the first run, not measured again
    logged = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in logged if "eval" not in e] == [1, 2]  # step 1 was not trained twice


def test_train_backbone_runs_the_recipe_as_its_third_phase(tmp_path):
    """`qaslr train-backbone OUT --first-phase DIR --motion-recipe-steps N`: the recipe from DIR's
    weights, recorded in recipe.json (its hash names it), weights written."""
    import dataclasses

    from training.backbone import BackboneTrainConfig, recipe_hash, train_backbone

    base = BackboneTrainConfig()
    small = dataclasses.replace(base.motion_recipe, steps=0, pairs=1, images=2, eval_pairs=2, eval_every=1)
    config = dataclasses.replace(base, motion_recipe=dataclasses.replace(small, steps=1))
    assert recipe_hash(config) != recipe_hash(dataclasses.replace(config, motion_recipe=small))
    assert recipe_hash(dataclasses.replace(config, motion_recipe=small)) == recipe_hash(
        dataclasses.replace(base, motion_recipe=dataclasses.replace(base.motion_recipe, steps=0))
    )  # a recipe without the phase hashes as before it existed
    out = train_backbone(tmp_path / "tw", config, first_phase=ASSET_DIR, progress=False)
    recipe = json.loads((out / "recipe.json").read_text())
    assert recipe["recipe_hash"] == recipe_hash(config)
    assert [e["step"] for e in recipe["phases"]["motion_recipe"]["evals"]] == [1]
    assert {"reversal", "text_to_video_top1", "text_to_frame_top1"} <= recipe["phases"]["motion_recipe"][
        "evals"
    ][0].keys()
    assert "reversal" in recipe["final"]
    shipped, trained = (
        load_file(str(ASSET_DIR / "model.safetensors")),
        load_file(str(out / "model.safetensors")),
    )
    assert shipped.keys() == trained.keys()


def _centre(mask):
    """The event's coverage centroid (x, y) in a frame's mask, None where it does not show."""
    import numpy as np

    if mask.sum() < 1e-3:
        return None
    ys, xs = np.indices(mask.shape)
    return np.array([(xs * mask).sum(), (ys * mask).sum()]) / mask.sum()


@pytest.mark.parametrize("kind", ["right", "recolour"])
def test_a_reversal_pair_with_stills_is_the_same_pair_and_its_shape_shown_still(kind):
    """motion_pair(stills=True): the same two clips as without, then the shape still over the same
    frames, once per colour the change shows, drawn from the same random state."""
    import numpy as np

    from training.world_data import WorldSampler
    from world.vocab import Change, EventKind

    change = Change(EventKind("red", "square"), kind, "blue" if kind == "recolour" else None)
    plain = WorldSampler(128, seed=21).motion_pair(change, frames=8)
    forward, backward, *stills = WorldSampler(128, seed=21).motion_pair(change, frames=8, stills=True)
    assert (forward.clip.frames == plain[0].clip.frames).all()
    assert (backward.clip.frames == plain[1].clip.frames).all()
    colours = ["red", "blue"] if kind == "recolour" else ["red"]
    assert [s.label for s in stills] == [EventKind(c, "square").index for c in colours]
    side = min(forward.masks.shape[1:])
    for still in stills:
        assert still.change is None and still.clip.frame_indices == forward.clip.frame_indices
        shown = [c for c in map(_centre, still.masks) if c is not None]
        assert len(shown) >= 2  # the still showing spans the event's frames
        assert max(np.linalg.norm(c - shown[0]) for c in shown) <= 0.1 * side  # WORLD.md: drifts <= 10 %
        assert not (still.clip.frames == forward.clip.frames).all()
    if kind == "right":
        moved = [c for c in map(_centre, forward.masks) if c is not None]
        assert max(np.linalg.norm(c - moved[0]) for c in moved) > 0.2 * side


def test_the_still_loss_weighs_only_the_pairs_own_stills():
    """still_loss: a text whose clip beats its pair's still showings costs little, one a still showing
    beats costs much, and another pair's still showing, however close to the text, is no negative."""
    import torch

    from training.motion_recipe import still_loss

    e = torch.eye(4)
    z_said = e[[0, 0, 1, 1]]  # two pairs (clips 0, 1 and 2, 3), a text per clip
    own = torch.tensor([0.9, 0.9, 0.5, 0.5])  # each text against its own clip
    # pair 0's still shows e2 (far from its texts); pair 1's e1 (its texts' own direction, above their
    # clips) and e0 (pair 0's texts' direction: pair 0 must not weigh it)
    z_still, owner = e[[2, 1, 0]], torch.tensor([0, 1, 1])
    assert still_loss(z_said[:2], own[:2], z_still[:1], owner[:1], 14.0) < 1e-4  # its clip above its still
    # pair 0's texts: logits (12.6, 0); pair 1's: (7, 14, 0). Had pair 0 weighed e0 too: (12.6, 0, 14, 0)
    expected = (2 * math.log1p(math.exp(-12.6)) + 2 * (-7 + math.log(math.exp(7) + math.exp(14) + 1))) / 4
    assert still_loss(z_said, own, z_still, owner, 14.0).item() == pytest.approx(expected, rel=1e-5)
    assert expected > 3.4  # a still showing at cosine 1 above a clip at 0.5 costs about 7 a text


def test_the_still_loss_runs_in_the_recipe_and_the_check_reports_above_still(tmp_path):
    out = tmp_path / "motion"
    args = ["--steps", "1", "--eval-every", "1", "--log-every", "1", "--eval-pairs", "2", "--pairs", "1",
            "--images", "2", "--stills", "1"]  # fmt: skip
    assert main([str(out), *args]) == 0
    step = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [e["still"] > 0 for e in step if "eval" not in e] == [True]
    record = json.loads((out / "motion_recipe.json").read_text())
    for e in record["evals"]:
        assert 0.0 <= e["above_still"] <= 1.0 and set(e["by_change_still"]) <= set(e["by_change"])
