"""One score space per ranking (issue #22): every candidate of a head-tier ranking is streamed by the
head, a request of K' <= L goes one-shot for all and says so, and a head is served only with the
clip plan it was trained with.

A one-shot index of three tiny videos (one so short that its frame bank holds 4 frames, fewer than
its L) built with the tiny checkpoint through the indexer facade; the stage-2 heads are built by
code and saved with ``save_head``, and everything loads through ``engine.load_engine``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from core.errors import ConfigurationError
from engine import EngineConfig, load_engine
from engine.errors import InvalidRequest
from models.selection import ClipPlan

L = 4  # the index's clip length; its K is 16
SHORT = "short"  # 12 frames at 12 fps: 4 bank frames at 4/s
QUERY = {"query": "a red square", "mode": "rerank", "shortlist": 3, "heavy": 3, "top_k": 3}


@pytest.fixture(scope="module")
def index(tmp_path_factory, video_factory, tiny_checkpoint) -> Path:
    from indexer import BuildOptions, build_index

    root = tmp_path_factory.mktemp("score_space")
    lines = []
    for name, frames, seed in ((SHORT, 12, 1), ("long-a", 48, 2), ("long-b", 60, 3)):
        path = video_factory(root / f"{name}.mp4", num_frames=frames, fps=12, size=(96, 64), seed=seed)
        lines.append(json.dumps({"id": name, "path": str(path)}))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    options = BuildOptions(
        model=str(tiny_checkpoint), embedder="oneshot", frames=16, clip_len=L, max_evidence=32,
        bank_per_second=4, workers=1, frame_store="none",
    )  # fmt: skip
    report = build_index(root / "manifest.jsonl", root / "index", options)
    assert not report.stopped and not report.has_failures
    return root / "index"


def _head(directory: Path, plan: ClipPlan | None) -> Path:
    from models.head import StreamingHeadConfig, create_head, save_head

    config = StreamingHeadConfig(
        hidden_size=64, embed_dim=64, num_heads=4, num_think_tokens=8, max_evidence_tokens=32, clip_plan=plan
    )
    return save_head(create_head(config, seed=0), directory)


# trained K' = 8 in clips of 2 (T_max = 4): the clips an index of K = 16, L = 4 cuts at K' <= 8
MATCHING = ClipPlan(frames=8, max_frames=8, clip_len=2, max_evidence=32)


@pytest.fixture(scope="module")
def engine(index, tiny_checkpoint, tmp_path_factory):
    head = _head(tmp_path_factory.mktemp("matching_head"), MATCHING)
    config = EngineConfig(
        index=index, model=str(tiny_checkpoint), rerank_head=head, default_frames=8, max_frames=16,
        batching=False, refine_moments=0,
    )  # fmt: skip
    engine = load_engine(config)
    yield engine
    engine.close()


def test_a_head_tier_ranking_streams_its_short_candidate_through_the_head(engine):
    """The short video's bank holds 4 frames (at most L): it is streamed like the others (2 clips of
    2, readouts after each), not scored one-shot in another space."""
    out = engine.searcher.search({**QUERY, "frames": 8})
    assert out.rerank_embedder == "qaslr"
    hits = {h.video_id: h for h in out.hits}
    assert set(hits) == {SHORT, "long-a", "long-b"}
    assert all(h.tier == "head" and h.step_scores is not None for h in hits.values())
    short = hits[SHORT]
    assert len(short.evidence) == 4 and short.clips_planned == 2 and len(short.step_scores) == 2


def test_a_request_of_at_most_l_frames_goes_one_shot_for_every_candidate_and_says_so(engine):
    out = engine.searcher.search({**QUERY, "frames": L, "exit_threshold": 0.5})
    assert out.rerank_embedder == "oneshot" and out.embedder == "oneshot"
    assert [h.tier for h in out.hits] == ["oneshot"] * 3
    assert all(h.clips_planned == 1 and h.step_scores is None for h in out.hits)
    assert any("one-shot" in w and f"L = {L}" in w for w in out.warnings), out.warnings
    assert any(w.startswith("exit_threshold ignored") for w in out.warnings), out.warnings


def test_a_request_for_more_frames_than_the_head_was_trained_on_is_refused(engine):
    with pytest.raises(InvalidRequest, match="trained on K' = 8") as refused:
        engine.searcher.search({**QUERY, "frames": 12})
    assert refused.value.field == "frames"
    fewer = engine.searcher.search({**QUERY, "frames": 6})  # the head's own plan at a smaller budget
    assert {h.tier for h in fewer.hits} == {"head"}


def test_a_head_trained_with_another_clip_plan_is_refused_naming_both_plans(index, tiny_checkpoint, tmp_path):
    # K' = 8 in clips of 4 (T_max = 2); this index cuts 8 frames into 4 clips of 2 (T_max = 4)
    head = _head(tmp_path / "head", ClipPlan(frames=8, max_frames=8, clip_len=4, max_evidence=32))
    config = EngineConfig(index=index, model=str(tiny_checkpoint), rerank_head=head, default_frames=8,
                          model_processes=0)  # fmt: skip
    with pytest.raises(ConfigurationError) as refused:
        load_engine(config)
    message = str(refused.value)
    assert "K'=8 frames in 2 clips of 4 (K_max=8, L=4), M=32" in message  # trained
    assert "K'=8 frames in 4 clips of 2 (K_max=16, L=4), M=32" in message  # served
    assert "QASLR_DEFAULT_FRAMES=8" in message and "--max-frames 8 --clip-len 2" in message
    # another default K' than the trained one is a mismatch too
    matching = _head(tmp_path / "matching", MATCHING)
    with pytest.raises(ConfigurationError, match="K' 8 vs 6"):
        load_engine(config.replace(rerank_head=matching, default_frames=6))


def test_a_refused_head_starts_no_model_process(index, tiny_checkpoint, tmp_path, monkeypatch):
    """The clip plan is checked before the runtime starts: a configuration refused for it spawns no
    model process (each would import torch and load the backbone, only to be killed)."""
    import engine.runtime.model_process as model_process

    started = []
    real = model_process.start_model_processes

    def recording(*args, **kwargs):
        started.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(model_process, "start_model_processes", recording)
    head = _head(tmp_path / "head", ClipPlan(frames=8, max_frames=8, clip_len=4, max_evidence=32))
    config = EngineConfig(index=index, model=str(tiny_checkpoint), rerank_head=head, default_frames=8,
                          model_processes=1)  # fmt: skip
    with pytest.raises(ConfigurationError, match="K'=8 frames in 2 clips of 4"):
        load_engine(config)
    assert started == []
    # the same settings with a head trained on this plan do start the one asked for
    engine = load_engine(config.replace(rerank_head=_head(tmp_path / "matching", MATCHING)))
    try:
        assert len(started) == 1 and len(engine.runtime.backends) == 1
    finally:
        engine.close()


def test_a_head_saved_before_clip_plans_still_loads_with_a_warning(index, tiny_checkpoint, tmp_path, caplog):
    head = _head(tmp_path / "old", None)
    config_file = head / "head_config.json"
    data = json.loads(config_file.read_text())
    data.pop("clip_plan", None)  # what save_head wrote before plans were recorded
    config_file.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="engine.assembly"):
        engine = load_engine(
            EngineConfig(index=index, model=str(tiny_checkpoint), rerank_head=head, model_processes=0)
        )
    try:
        assert engine.searcher.reranker.streaming and engine.searcher.head_frames is None
        assert any("records no clip plan" in r.getMessage() for r in caplog.records)
        out = engine.searcher.search({**QUERY, "frames": 12})  # nothing to hold it to
        assert {h.tier for h in out.hits} == {"head"}
    finally:
        engine.close()


def _checkpoint_with_head(tiny_checkpoint, root: Path, plan: ClipPlan | None) -> Path:
    """A copy of the tiny checkpoint that ships a rerank head (core.config.CHECKPOINT_HEAD_DIR), as
    the tiny-world checkpoint ships its own."""
    import shutil

    from core.config import CHECKPOINT_HEAD_DIR

    model = Path(shutil.copytree(tiny_checkpoint, root / "model"))
    _head(model / CHECKPOINT_HEAD_DIR, plan)
    return model


def test_a_checkpoints_own_head_is_served_by_default_and_says_so(index, tiny_checkpoint, tmp_path):
    model = _checkpoint_with_head(tiny_checkpoint, tmp_path, MATCHING)
    config = EngineConfig(index=index, model=str(model), default_frames=8, max_frames=16, batching=False)
    engine = load_engine(config)
    try:
        assert engine.info["rerank"] == "streaming head" and engine.info["rerank_head_source"] == "checkpoint"
        assert engine.info["rerank_head"]  # its fingerprint, as /readyz and the page show it
        out = engine.searcher.search({**QUERY, "frames": 8})
        assert out.rerank_embedder == "qaslr" and {h.tier for h in out.hits} == {"head"}
    finally:
        engine.close()
    # switched off, the same checkpoint serves one-shot stage 2
    engine = load_engine(config.replace(checkpoint_head=False))
    try:
        assert engine.info["rerank"] == "one-shot" and engine.info["rerank_head_source"] is None
    finally:
        engine.close()


def test_a_checkpoints_head_that_does_not_fit_the_index_steps_aside_for_one_shot(
    index, tiny_checkpoint, tmp_path, caplog
):
    """A default is not a request: where the checkpoint's head was trained with another clip plan
    the server starts with one-shot stage 2 and says why (a head named by QASLR_RERANK_HEAD refuses)."""
    model = _checkpoint_with_head(
        tiny_checkpoint, tmp_path, ClipPlan(frames=8, max_frames=8, clip_len=4, max_evidence=32)
    )
    with caplog.at_level(logging.WARNING, logger="engine.assembly"):
        engine = load_engine(EngineConfig(index=index, model=str(model), default_frames=8, batching=False))
    try:
        assert engine.info["rerank"] == "one-shot" and engine.info["rerank_head_source"] is None
        assert any("not serving the checkpoint's rerank head" in r.getMessage() for r in caplog.records)
    finally:
        engine.close()


def test_the_words_of_a_query_decide_no_route(engine):
    """No template over the sentence routes a search: a query that names an order or a count goes
    where any other query with the same measured signals goes (here, with no router: the frame
    tier's answer stands at margin 0)."""
    plain = engine.searcher.search({**QUERY, "frames": 8, "heavy_margin": 0})
    assert {h.tier for h in plain.hits} == {"frame"}  # any lead >= 0: the frame tier's answer stands
    timed = engine.searcher.search(
        {**QUERY, "query": "a red square appears twice", "frames": 8, "heavy_margin": 0}
    )
    assert {h.tier for h in timed.hits} == {"frame"} and "router" not in (timed.route or "")
