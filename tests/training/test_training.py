"""Training on the tiny synthetic set: the loss falls, Hit@1 rises above chance, resume is exact,
and the feature cache / controls / aggregators behave as specified."""

from __future__ import annotations

import math

import pytest
import torch

from training.aggregators import build_model, load_model, save_model
from training.data import load_pairs
from training.evaluate import evaluate_checkpoints, evaluate_pairs, recall_at_k
from training.scoring import pair_losses, score_pairs, stream_items
from training.trainer import TrainConfig, Trainer, epoch_batches


def _binomial_p_at_least(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


def _model(kind="qaslr", seed=0):
    return build_model(
        kind,
        hidden_size=64,
        embed_dim=64,
        num_think_tokens=8,
        max_evidence=32,
        init_temperature=0.01,
        seed=seed,
    )


def _single_retrieval(path):
    return [p for p in load_pairs(path) if p.task == "retrieval" and p.meta.get("kind") == "single"]


@pytest.mark.slow
def test_training_lowers_loss_and_beats_chance(synthetic_set, feature_store, tmp_path):
    pairs = _single_retrieval(synthetic_set / "train.jsonl")  # 16 pairs over 8 videos
    model = _model()
    config = TrainConfig(epochs=300, batch_size=len(pairs), lr=3e-4, seed=0, checkpoint_every=0, log_every=1)
    trainer = Trainer(model, feature_store, pairs, config=config, out_dir=tmp_path, progress=False)
    before = evaluate_pairs(model, feature_store, pairs)["retrieval"]
    trainer.fit()
    after = evaluate_pairs(model, feature_store, pairs)["retrieval"]
    import json

    losses = [json.loads(line)["final"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10
    hits = round(after["hit@1"] * after["n"])
    # Above chance: one-sided binomial test against the candidate-set chance rate, alpha = 0.01.
    assert _binomial_p_at_least(hits, after["n"], after["chance@1"]) < 0.01, (before, after)


def test_resume_matches_uninterrupted_run(synthetic_set, feature_store, tmp_path):
    pairs = load_pairs(synthetic_set / "train.jsonl")
    config = TrainConfig(epochs=2, batch_size=16, lr=1e-3, seed=3, checkpoint_every=0)
    full = _model(seed=1)
    Trainer(full, feature_store, pairs, config=config, out_dir=tmp_path / "a", progress=False).fit()
    first = _model(seed=1)
    t1 = Trainer(first, feature_store, pairs, config=config, out_dir=tmp_path / "b", progress=False)
    t1.fit(stop_after=5)  # interrupted mid-epoch, checkpoint written
    assert t1.step == 5
    resumed = _model(seed=7)  # a different init: everything must come from the checkpoint
    t2 = Trainer(resumed, feature_store, pairs, config=config, out_dir=tmp_path / "b", progress=False)
    t2.fit()
    assert t2.step == sum(len(epoch_batches(pairs, config, e)) for e in range(2))
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    with pytest.raises(ValueError, match="training settings differ"):
        changed = TrainConfig(epochs=2, batch_size=16, lr=5e-4, seed=3)
        Trainer(_model(), feature_store, pairs, config=changed, out_dir=tmp_path / "b", progress=False).fit()


def test_sub_batches_are_homogeneous_and_cover_the_epoch(synthetic_set):
    pairs = load_pairs(synthetic_set / "train.jsonl")
    config = TrainConfig(batch_size=16, seed=0)
    steps = epoch_batches(pairs, config, 0)
    seen = [i for step in steps for sub in step for i in sub]
    assert len(seen) == len(set(seen)) and len(seen) >= len(pairs) - 4 * len(steps)
    for step in steps:
        for sub in step:
            assert len({pairs[i].input_format for i in sub}) == 1
    assert any(len(step) > 1 for step in steps)  # several formats share one optimizer step
    assert epoch_batches(pairs, config, 1) != steps and epoch_batches(pairs, config, 0) == steps


def test_every_task_and_both_scorings_give_finite_losses(
    synthetic_set, feature_store, tiny_checkpoint, tmp_path
):
    from models.backbone import load_backbone
    from training.features import FeatureSettings, FeatureStore, build_cache

    pairs = load_pairs(synthetic_set / "train.jsonl")
    model = _model()
    for task in ("retrieval", "moment", "classification", "qa"):
        batch = [p for p in pairs if p.task == task][:6]
        terms = pair_losses(model, feature_store, batch, candidate_negatives="all")
        loss = terms.final + terms.step + terms.distill
        assert torch.isfinite(loss) and terms.step > 0 and terms.distill >= 0
        loss.backward()
    # Query-conditioned (Eq. 1, second case): candidates encoded under each query, query-aware selection.
    batch = [p for p in pairs if p.task == "retrieval"][:3]
    settings = FeatureSettings(
        max_frames=8, clip_len=2, max_evidence=32, selection="query-aware", candidate_per_second=2.0
    )
    backbone = load_backbone(tiny_checkpoint, device="cpu")
    store = FeatureStore(
        build_cache(
            tmp_path, backbone=backbone, pairs=batch, settings=settings, scoring="conditioned", progress=False
        )
    )
    assert store.fingerprint != feature_store.fingerprint
    assert any("|cond:" in key for key in store.evidence)
    terms = pair_losses(model, store, batch, scoring="conditioned")
    assert torch.isfinite(terms.final) and torch.isfinite(terms.step)
    scores = score_pairs(model, store, batch, scoring="conditioned")
    assert [len(s) for s in scores] == [len(p.candidates) for p in batch]


def test_clip_teacher_reads_the_backbones_own_clip_embeddings(tiny_checkpoint):
    """L_clip's u_t is taken from the cached evidence bank (its last valid state): that must be the
    backbone's pooled embedding of the clip on its own, as the original pathway computes it."""
    import numpy as np

    from models.backbone import VideoClip, load_backbone
    from models.streaming import StreamingConfig, VideoEncoder
    from training.scoring import clip_embeddings

    backbone = load_backbone(tiny_checkpoint, device="cpu")
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, size=(8, 64, 64, 3), dtype=np.uint8)
    video = VideoClip(frames, list(range(0, 16, 2)), 4.0)
    encoder = VideoEncoder(backbone, config=StreamingConfig(max_frames=8, clip_len=4, max_evidence=4096))
    bank = encoder.evidence([video])[0]

    u, valid = clip_embeddings(bank.tokens[None], bank.mask[None], backbone.embed_dim)
    expected = torch.cat(
        [backbone.pool(backbone.encode_clips([VideoClip(frames[i : i + 4], video.frame_indices[i : i + 4], 4.0)]))
         for i in (0, 4)]
    )  # fmt: skip
    assert valid.all() and u.shape == (1, 2, backbone.embed_dim)
    assert torch.allclose(u[0], expected, atol=1e-5)


def test_conditioned_loss_is_never_a_one_column_zero_and_masks_co_positives(
    synthetic_set, tiny_checkpoint, tmp_path
):
    """The query-conditioned loss used to fall back to the positive alone when a pair listed no
    candidates: a one-column cross-entropy, identically 0. Now such a pair is refused, a real
    candidate set gives a positive loss with gradients, other pairs' positives encoded under the
    query join as in-batch negatives, and a co-positive (same group) leaves the denominator."""
    import dataclasses

    from models.backbone import load_backbone
    from models.head import StreamingHeadConfig, create_head
    from training.features import FeatureSettings, FeatureStore, build_cache

    pairs, seen = [], set()
    for p in load_pairs(synthetic_set / "train.jsonl"):  # three retrieval pairs of unrelated videos
        if (
            p.task == "retrieval"
            and p.meta.get("kind") == "single"
            and p.group not in seen
            and len(pairs) < 3
        ):
            pairs.append(p)
            seen.add(p.group)
    settings = FeatureSettings(max_frames=8, clip_len=2, max_evidence=32, selection="query-aware")
    backbone = load_backbone(tiny_checkpoint, device="cpu")
    # pair 1's query is also encoded against pair 0's positive (so it can be an in-batch negative)
    extra = dataclasses.replace(pairs[1], id="x", candidates=(pairs[1].positive, pairs[0].positive))
    store = FeatureStore(
        build_cache(
            tmp_path, backbone=backbone, pairs=[*pairs, extra], settings=settings, scoring="conditioned",
            progress=False,
        )
    )  # fmt: skip
    head = create_head(
        StreamingHeadConfig(
            hidden_size=64, embed_dim=64, num_heads=4, num_think_tokens=8, query_conditioning=True
        ),
        seed=0,
    )
    assert pair_losses(head, store, pairs, scoring="conditioned").clip is None  # only when asked
    terms = pair_losses(head, store, pairs, scoring="conditioned", clip_loss=True)
    assert terms.final > 0.05
    assert terms.clip is not None and 0 < terms.clip < 2  # L_clip of the two-stage recipe
    (terms.final + terms.clip).backward()
    assert head.query_proj.weight.grad is not None and head.query_proj.weight.grad.abs().sum() > 0

    lonely = [dataclasses.replace(p, candidates=()) for p in pairs]
    with pytest.raises(ValueError, match="bounded candidate set"):
        pair_losses(head, store, lonely, scoring="conditioned")

    # in-batch negative: pair 0's positive joins row 1 when it was encoded under row 1's query
    only_pos = [dataclasses.replace(p, candidates=(p.positive,)) for p in pairs[:2]]
    with_negative = pair_losses(head, store, only_pos, scoring="conditioned").final
    assert with_negative > 0  # row 1 has a negative although it lists none
    # a co-positive (same group as the positive) is masked: the loss is what it was without it
    same_group = [dataclasses.replace(p, group="g") for p in only_pos]
    assert pair_losses(head, store, same_group, scoring="conditioned").final < 1e-6

    # early-exit labels for stage 2: per candidate, does stopping at step t keep its order against
    # every other candidate's full score? Always at the last step; a gate fits and reports calibration.
    from training.gate_training import agreement_targets, train_gate

    steps, mask, labels = agreement_targets(head, store, pairs, scoring="conditioned")
    assert steps.shape[:2] == mask.shape == labels.shape and steps.shape[0] == sum(
        len(p.candidates) for p in pairs
    )
    last = mask.long().cumsum(1).argmax(1)
    assert bool((labels[torch.arange(len(labels)), last] == 1).all())
    _, stats = train_gate(head, store, pairs, epochs=5, scoring="conditioned", val_pairs=pairs)
    assert 0 <= stats["val_ece"] <= 1


def test_feature_cache_is_incremental_and_decodes_by_index(
    synthetic_set, feature_store, tiny_checkpoint, tmp_path
):
    from models.backbone import load_backbone
    from training.features import FeatureSettings, build_cache

    pairs = load_pairs(synthetic_set / "val.jsonl")
    backbone = load_backbone(tiny_checkpoint, device="cpu")
    settings = FeatureSettings(max_frames=8, clip_len=2, max_evidence=32)
    first = build_cache(tmp_path, backbone=backbone, pairs=pairs[:5], settings=settings, progress=False)
    second = build_cache(tmp_path, backbone=backbone, pairs=pairs, settings=settings, progress=False)
    assert first == second
    import json

    manifest = json.loads((second / "manifest.json").read_text())
    assert len(manifest["shards"]) == 2 and len(manifest["keys"]) == len(set(manifest["keys"]))
    assert not list(second.rglob("*.png")) and not list(second.rglob("*.jpg"))  # frames are never copied
    key = pairs[0].positive.key() if pairs[0].positive.video else pairs[0].query.key()
    tokens, mask = feature_store.banks(key)
    assert tokens.shape[0] == 4 and tokens.shape[-1] == 64 and mask.any(-1).all()  # 8 frames -> 4 clips of 2


def test_controls_checkpoints_and_recall(synthetic_set, feature_store):
    pairs = load_pairs(synthetic_set / "test.jsonl")
    model = _model().eval()
    keys = [p.positive.key() for p in pairs if p.task == "retrieval"][:3]
    with torch.no_grad():
        base = stream_items(model, feature_store, keys)
        rev = stream_items(model, feature_store, keys, control="reverse")
        last = stream_items(model, feature_store, keys, control="last")
        reset = stream_items(model, feature_store, keys, control="reset")
        tokens, mask = feature_store.banks(keys[0])
        only_last = model(tokens[-1:][None], mask[-1:][None], torch.ones(1, 1, dtype=torch.bool)).final[0]
    assert not torch.allclose(base.final, rev.final)
    assert torch.allclose(last.final[0], only_last, atol=1e-6)
    assert last.steps.shape[1] == 1
    # reset memory keeps every clip (the mean of per-clip readouts of a reset stream), so it differs
    # from the last-clip control, as in the paper's Table 5
    per_clip = [
        model(tokens[i : i + 1][None], mask[i : i + 1][None], torch.ones(1, 1, dtype=torch.bool)).final[0]
        for i in range(tokens.shape[0])
    ]
    pooled = torch.nn.functional.normalize(torch.stack(per_clip).mean(0), dim=-1)
    assert torch.allclose(reset.final[0], pooled, atol=1e-5)
    assert not torch.allclose(reset.final[0], last.final[0], atol=1e-3)
    cps = evaluate_checkpoints(model, feature_store, pairs)
    assert set(cps) == {"25%", "50%", "75%", "100%"}
    assert cps["100%"] == evaluate_pairs(model, feature_store, pairs)
    rec = recall_at_k(model, feature_store, pairs)
    assert rec["n_videos"] == 4 and 0 <= rec["recall@1"] <= rec["recall@5"] == 1.0


@pytest.mark.parametrize("kind", ["mean", "gru", "transformer", "qaslr"])
def test_aggregators_are_causal_and_round_trip(kind, tmp_path):
    model = _model(kind).eval()
    g = torch.Generator().manual_seed(0)
    ev = torch.randn(2, 3, 5, 64, generator=g)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[1, 2] = False
    steps = torch.tensor([[True, True, True], [True, True, False]])
    with torch.no_grad():
        out = model(ev, mask, steps)
        changed = ev.clone()
        changed[:, 2] += 1.0  # only the last clip changes
        out2 = model(changed, mask, steps)
    assert out.step_embeddings.shape == (2, 3, 64)
    assert torch.allclose(
        out.step_embeddings[:, :2], out2.step_embeddings[:, :2], atol=1e-5
    )  # no peeking ahead
    assert torch.allclose(out.final[1], out.step_embeddings[1, 1], atol=1e-6)  # z_T = last valid step
    assert torch.allclose(out.final.norm(dim=-1), torch.ones(2), atol=1e-5)
    save_model(model, tmp_path)
    again = load_model(tmp_path).eval()
    with torch.no_grad():
        assert torch.allclose(again(ev, mask, steps).final, out.final, atol=1e-6)
