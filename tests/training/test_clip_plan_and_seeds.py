"""What training hands serving: the clip plan a head records, and the selection seed of a candidate
under a query, derived by one function in both (issue #22, "one score space per ranking")."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import torch

from models.selection import ClipPlan, query_key, selection_seed


def _feature_store(directory, **settings):
    """An (empty) feature cache as build_cache writes its manifest, opened by FeatureStore."""
    from training.features import FORMAT_VERSION, FeatureSettings, FeatureStore

    directory.mkdir(parents=True)
    manifest = {
        "version": FORMAT_VERSION, "fingerprint": "f", "backbone": "tiny", "backbone_fingerprint": "b",
        "hidden_size": 64, "embed_dim": 64, "settings": FeatureSettings(**settings).fingerprint_fields(),
        "shards": [], "text_shards": [], "keys": [], "text_keys": [],
    }  # fmt: skip
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return FeatureStore(directory)


def test_a_trained_head_records_its_clip_plan_and_loads_with_it(tmp_path):
    from models.head import load_head
    from training.aggregators import build_model, save_model
    from training.trainer import TrainConfig, Trainer

    store = _feature_store(tmp_path / "features", max_frames=8, clip_len=2, max_evidence=32)
    model = build_model("qaslr", hidden_size=64, embed_dim=64, num_think_tokens=4, max_evidence=32, seed=0)
    assert model.config.clip_plan is None
    Trainer(
        model, store, [], config=TrainConfig(epochs=1, batch_size=2), out_dir=tmp_path / "run", progress=False
    )
    save_model(model, tmp_path / "head")
    written = json.loads((tmp_path / "head" / "head_config.json").read_text())
    assert written["clip_plan"] == {"frames": 8, "max_frames": 8, "clip_len": 2, "max_evidence": 32}
    assert load_head(tmp_path / "head").config.clip_plan == ClipPlan(8, 8, 2, 32)


def test_training_and_serving_derive_the_same_seed_for_the_same_seed_query_and_candidate(monkeypatch):
    """The training feature selector and the serving tier each hand query-aware selection the seed
    of (seed 7, "a red square", the candidate video); another query gives both another seed."""
    import models.selection
    from engine.hits import Hit
    from engine.tiers import encoded
    from engine.tiers.base import RerankStats, TierRequest
    from training.data import Side, VideoRef
    from training.features import FeatureSettings, StreamItem, _Selector, conditioned_key

    seeds: dict[str, list[int]] = {"training": [], "serving": []}

    def spy(side, real):
        def positions(scores, k, *, temperature, seed):
            seeds[side].append(seed)
            return real(scores, k, temperature=temperature, seed=seed)

        return positions

    real = models.selection.query_aware_positions
    monkeypatch.setattr(models.selection, "query_aware_positions", spy("training", real))
    monkeypatch.setattr(encoded, "query_aware_positions", spy("serving", real))
    rng = np.random.default_rng(0)
    bank = rng.standard_normal((10, 8)).astype(np.float32)
    video = "videos/clip.mp4"  # the candidate: its video path in training, its video id when served

    backbone = SimpleNamespace(embed_texts=lambda texts, instruction=None: torch.ones(len(texts), 8))
    selector = _Selector(backbone, FeatureSettings(max_frames=4, selection="query-aware", selection_seed=7))
    selector._bank[video] = (np.arange(0, 40, 4), torch.from_numpy(bank))  # 10 bank frames
    frame_bank = SimpleNamespace(
        frame_indices=np.arange(0, 40, 4), timestamps=np.arange(10.0), embeddings=bank
    )
    tier = encoded.EncodeTier(None, SimpleNamespace(frame_bank=lambda _: frame_bank), None, temperature=0.25)

    for query in ("a red square", "a blue circle"):
        ref = VideoRef(video)
        item = StreamItem(conditioned_key(Side(video=ref), query), ref, query, query)
        selector.select(item, SimpleNamespace(num_frames=40, fps=4.0))
        request = TierRequest(query=query, q=torch.ones(8), frames=4, seed=7, stats=RerankStats(), clock=None)
        tier.select(Hit(video, 0.0, 0.0, 1), request)
    assert seeds["training"] == seeds["serving"]
    assert seeds["serving"][0] == selection_seed(7, query_key("a red square"), video)
    assert seeds["serving"][0] != seeds["serving"][1]
