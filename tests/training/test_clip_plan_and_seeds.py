"""What training hands serving: the selection seed of a candidate under a query, derived by one
function in both (issue #22, "one score space per ranking")."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from models.selection import query_key, selection_seed


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
