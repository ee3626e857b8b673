"""Training fixtures: a tiny synthetic needle-in-a-haystack set and its feature cache (session-scoped,
under pytest's temporary directories). The backbone is the shared ``tiny_checkpoint``."""

from __future__ import annotations

import pytest

# Small enough for CI: 12 s of 64 px video at 4 fps per clip, 8 selected frames in 4 clips of 2.
FEATURES = dict(max_frames=8, clip_len=2, max_evidence=32)


@pytest.fixture(scope="session")
def synthetic_set(tmp_path_factory):
    from training.synthetic import SyntheticConfig, make_synthetic

    root = tmp_path_factory.mktemp("synthetic")
    config = SyntheticConfig(
        train_videos=8, val_videos=4, test_videos=4, min_duration_s=8, max_duration_s=12, fps=4, seed=0
    )
    make_synthetic(root, config)
    return root


@pytest.fixture(scope="session")
def feature_store(synthetic_set, tiny_checkpoint, tmp_path_factory):
    from models.backbone import load_backbone
    from training.data import load_pairs
    from training.features import FeatureSettings, FeatureStore, build_cache

    pairs = [p for split in ("train", "val", "test") for p in load_pairs(synthetic_set / f"{split}.jsonl")]
    backbone = load_backbone(tiny_checkpoint, device="cpu")
    directory = build_cache(
        tmp_path_factory.mktemp("features"),
        backbone=backbone,
        pairs=pairs,
        settings=FeatureSettings(**FEATURES),
        progress=False,
    )
    return FeatureStore(directory)
