"""Query-aware selection of moments (models.windows) and the head that reads the query's text with a
gated memory (models.head): each moment its own clip, in time order; the query's words change the
memory before the first clip; a gate that can keep the memory as it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.head import StreamingHeadConfig, create_head, load_head, save_head
from models.windows import (
    MOTION_PAIR_S,
    WindowPlan,
    moment_plan,
    moment_windows,
    played_backwards,
    window_reads,
)


def _relevance(n=60, peaks=(), base=0.1, seed=0):
    rng = np.random.default_rng(seed)
    r = base + 0.01 * rng.standard_normal(n)
    for centre, width, height in peaks:
        r[centre - width // 2 : centre - width // 2 + width] = height
    return r


def test_each_moment_is_played_backwards_in_its_own_place_with_its_own_frame_indices():
    """models.windows.played_backwards: within each clip the frames in reverse order (each temporal pair a
    moment and the one before it), the clips in their order, the prompt's indices each window's own,
    mirrored, so still ascending; twice is the identity."""
    plan = WindowPlan(windows=2, frames=4, margin=0, pair_s=0.2)
    read, segments = window_reads(
        [np.array([2, 3]), np.array([10, 11, 12])], np.arange(0, 600, 25), 25.0, 600, plan
    )
    order, mirrored = played_backwards(read, segments)
    assert read.tolist() == [50, 55, 75, 80, 250, 255, 275, 280, 300, 305]
    assert order.tolist() == [3, 2, 1, 0, 9, 8, 7, 6, 5, 4]  # each clip's frames reversed, in their place
    assert read[order].tolist() == [80, 75, 55, 50, 305, 300, 280, 275, 255, 250]
    assert mirrored.tolist() == [
        50,
        55,
        75,
        80,
        250,
        255,
        275,
        280,
        300,
        305,
    ]  # evenly read: the same indices
    uneven = np.array([5, 6, 9, 20, 30, 31])
    order, mirrored = played_backwards(uneven, [np.array([0, 1, 2]), np.array([3, 4, 5])])
    assert mirrored.tolist() == [5, 8, 9, 20, 21, 31]  # a gap mirrored within its window, ascending
    back, _ = played_backwards(uneven[order], [np.array([0, 1, 2]), np.array([3, 4, 5])])
    assert uneven[order][back].tolist() == uneven.tolist()


def test_each_relevant_moment_is_one_window_in_time_order():
    r = _relevance(peaks=[(40, 4, 0.6), (10, 3, 0.5), (25, 2, 0.55)])
    windows = moment_windows(r, WindowPlan(windows=3, frames=8, margin=1))
    assert [int(w[0]) for w in windows] == sorted(int(w[0]) for w in windows)  # chronological
    spans = [(int(w[0]), int(w[-1])) for w in windows]
    assert spans == [(8, 12), (23, 26), (37, 42)]  # each run, with a frame of context either side
    for w in windows:
        assert np.array_equal(w, np.arange(w[0], w[-1] + 1))  # consecutive bank frames


def test_windows_are_capped_disjoint_and_kept_apart():
    r = _relevance(peaks=[(30, 20, 0.7)])  # one long run: the window takes the frames nearest the peak
    windows = moment_windows(r, WindowPlan(windows=4, frames=6, margin=1))
    assert all(2 <= len(w) <= 6 for w in windows)
    taken = np.concatenate(windows)
    assert len(np.unique(taken)) == len(taken)  # disjoint
    ordered = sorted(windows, key=lambda w: w[0])
    assert all(b[0] - a[-1] >= 2 for a, b in zip(ordered, ordered[1:], strict=False))  # a frame between


def test_a_short_bank_gives_what_it_has():
    assert moment_windows(np.array([])) == []
    (only,) = moment_windows(np.array([0.3]), WindowPlan(windows=4))
    assert only.tolist() == [0]
    windows = moment_windows(np.array([0.1, 0.9, 0.2]), WindowPlan(windows=4, margin=0))
    assert sum(len(w) for w in windows) <= 3 and all(len(w) >= 1 for w in windows)


def test_a_window_read_densely_spans_its_whole_run():
    # a bank of one frame a second over a 10 fps video: bank position i is source frame 10 i
    bank = np.arange(0, 600, 10)
    window = np.arange(20, 26)  # six bank frames, 20 s to 25 s
    read, segments = window_reads(
        [window], bank, 10.0, 600, WindowPlan(frames=8, margin=0, pair_s=0.2, reads=4)
    )
    # four reads from the first bank frame to the last, each with the frame 0.2 s (2 frames) after it
    assert read.tolist() == [200, 202, 217, 219, 233, 235, 250, 252]
    assert [s.tolist() for s in segments] == [list(range(8))]
    # without reads a window reads its bank frames, each with its pair frame
    read, _ = window_reads([window[:2]], bank, 10.0, 600, WindowPlan(frames=8, pair_s=0.2))
    assert read.tolist() == [200, 202, 210, 212]
    # the video's last frame bounds a pair frame
    read, _ = window_reads([np.array([58, 59])], bank, 10.0, 591, WindowPlan(pair_s=0.2, reads=2))
    assert read.tolist() == [580, 582, 590, 590]


def test_the_motion_plan_reads_the_whole_change_not_one_end():
    # a change whose relevance rises toward one end (a shape that grows): the plan's window covers the
    # run above the floor, and its reads reach both ends of it
    r = np.full(60, 0.1)
    r[30:36] = [0.40, 0.45, 0.50, 0.55, 0.60, 0.65]
    plan = moment_plan(1)
    assert plan.reads and plan.pair_s == MOTION_PAIR_S and plan.margin == 0
    (window,) = moment_windows(r, plan)
    assert (int(window[0]), int(window[-1])) == (30, 35)
    read, _ = window_reads([window], np.arange(60) * 4, 4.0, 240, plan)
    assert read[0] == 120 and read[-2] == 140  # the first bank frame of the run and its last
    assert moment_plan(0) is None


@pytest.mark.parametrize(
    "bad", [dict(windows=0), dict(frames=1), dict(level=1.0), dict(margin=-1), dict(reads=1), dict(reads=-2)]
)
def test_a_window_plan_refuses_what_cannot_work(bad):
    with pytest.raises(ValueError):
        WindowPlan(**bad)


def _config(**kw):
    base = dict(hidden_size=16, embed_dim=12, num_think_tokens=4, max_evidence_tokens=8, num_heads=2,
                query_conditioning=True, text_memory=True, update_gate=True, evidence_sink=True,
                window_plan=WindowPlan(windows=3, frames=6))  # fmt: skip
    base.update(kw)
    return StreamingHeadConfig(**base)


def test_a_head_that_reads_the_query_needs_and_uses_its_token_states():
    head = create_head(_config(), seed=1).double().eval()
    g = torch.Generator().manual_seed(0)
    ev = torch.randn(1, 3, 5, 16, generator=g, dtype=torch.float64)
    mask, steps = torch.ones(1, 3, 5, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool)
    q = torch.nn.functional.normalize(torch.randn(1, 12, generator=g, dtype=torch.float64), dim=-1)
    words = torch.randn(1, 7, 16, generator=g, dtype=torch.float64)
    with pytest.raises(ValueError, match="query_states"):
        head(ev, mask, steps, query=q)
    a = head(ev, mask, steps, query=q, query_states=words).final
    other = torch.randn(1, 7, 16, generator=g, dtype=torch.float64)
    b = head(ev, mask, steps, query=q, query_states=other).final  # another query's words, the same q
    c = head(
        ev,
        mask,
        steps,
        query=q,
        query_states=torch.cat([words, words[:, :1] * 9], 1),
        query_mask=torch.tensor([[True] * 7 + [False]]),
    ).final  # a masked token changes nothing
    assert not torch.allclose(a, b)
    assert torch.allclose(a, c)


def test_a_closed_gate_keeps_the_memory_as_it_was():
    head = create_head(_config(text_memory=False), seed=2).double().eval()
    with torch.no_grad():
        head.gate.weight.zero_()
        head.gate.bias.fill_(-60.0)  # g = 0: no update passes
    state = head.init_state(1, torch.zeros(1, 12, dtype=torch.float64))
    ev = torch.randn(1, 5, 16, dtype=torch.float64)
    after = head.update(state, ev, torch.ones(1, 5, dtype=torch.bool))
    assert torch.allclose(after, state)


def test_the_new_fields_round_trip_and_old_configs_read_as_before(tmp_path):
    config = _config()
    head = create_head(config, seed=3)
    save_head(head, tmp_path / "h")
    loaded = load_head(tmp_path / "h")
    assert loaded.config == config and loaded.config.window_plan == WindowPlan(windows=3, frames=6)
    plain = StreamingHeadConfig(hidden_size=16, embed_dim=12, num_heads=2)
    assert not {"text_memory", "update_gate", "window_plan"} & set(plain.to_dict())


def test_an_encoder_streams_the_clips_the_selection_cut_and_the_query_states(tiny_checkpoint):
    """A candidate whose selection cut its clips (VideoClip.segments) streams one clip per segment,
    in order; a head that reads the query's text gets its states per candidate."""
    from models.backbone import VideoClip, load_backbone
    from models.streaming import StreamingConfig, VideoEncoder

    backbone = load_backbone(tiny_checkpoint, device="cpu", dtype="float32")
    config = _config(hidden_size=backbone.hidden_size, embed_dim=backbone.embed_dim, max_evidence_tokens=256)
    head = create_head(config, seed=4).eval()
    encoder = VideoEncoder(
        backbone, head, config=StreamingConfig(max_frames=32, clip_len=8, max_evidence=256)
    )
    rng = np.random.default_rng(0)
    h, w = backbone.frame_shape(64, 48)[::-1]
    frames = rng.integers(0, 255, size=(7, h, w, 3), dtype=np.uint8)
    segments = [np.array([0, 1, 2]), np.array([3, 4]), np.array([5, 6])]
    clip = VideoClip(frames, list(range(0, 70, 10)), 10.0, segments=segments)
    states = backbone.text_states(["a red square moves to the right"])
    q = backbone.pool(states)
    per_video = [(states.hidden[0], states.mask[0])]
    (emb,) = encoder.encode([clip], queries=q, query_states=per_video)
    assert emb.planned_steps == 3 and emb.steps_used == 3
    assert [c.tolist() for c in emb.clip_frames] == [[0, 10, 20], [30, 40], [50, 60]]
    other = backbone.text_states(["a red square moves to the left"])
    (moved,) = encoder.encode([clip], queries=q, query_states=[(other.hidden[0], other.mask[0])])
    assert not torch.allclose(emb.final, moved.final)  # the head read the other query's words
    banks = encoder.evidence([clip])
    (streamed,) = encoder.stream(banks, queries=q, query_states=(states.hidden, states.mask))
    assert torch.allclose(streamed.final, emb.final, atol=1e-5)  # the cached path equals the online one


def test_a_head_that_reads_the_query_words_tells_two_words_and_two_places_apart():
    """``query_words``: the same token states with another word, or the same words in other places,
    read differently; a call without the words is refused, and the field needs text_memory."""
    head = create_head(_config(query_words=True), seed=5).double().eval()
    g = torch.Generator().manual_seed(1)
    ev = torch.randn(1, 3, 5, 16, generator=g, dtype=torch.float64)
    mask, steps = torch.ones(1, 3, 5, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool)
    q = torch.nn.functional.normalize(torch.randn(1, 12, generator=g, dtype=torch.float64), dim=-1)
    states = torch.randn(1, 6, 16, generator=g, dtype=torch.float64)
    words = torch.randn(1, 6, 16, generator=g, dtype=torch.float64)
    with pytest.raises(ValueError, match="query_words"):
        head(ev, mask, steps, query=q, query_states=states)
    with pytest.raises(ValueError, match="do not match"):
        head(ev, mask, steps, query=q, query_states=states, query_words=words[:, :5])
    a = head(ev, mask, steps, query=q, query_states=states, query_words=words).final
    before_after = words.clone()
    before_after[:, 3] = torch.randn(16, generator=g, dtype=torch.float64)  # "before" -> "after"
    b = head(ev, mask, steps, query=q, query_states=states, query_words=before_after).final
    swapped = words[:, [0, 4, 2, 3, 1, 5]]  # two words trade places, the states as they were
    c = head(ev, mask, steps, query=q, query_states=states[:, [0, 4, 2, 3, 1, 5]], query_words=swapped).final
    plain = create_head(_config(), seed=5).double().eval()
    plain.load_state_dict({k: v for k, v in head.state_dict().items() if not k.startswith("word_")})
    d = plain(ev, mask, steps, query=q, query_states=states[:, [0, 4, 2, 3, 1, 5]]).final
    e = plain(ev, mask, steps, query=q, query_states=states).final
    assert not torch.allclose(a, b) and not torch.allclose(a, c)
    assert torch.allclose(d, e)  # without the words' places, a set of token states reads the same
    with pytest.raises(ValueError, match="text_memory"):
        _config(query_words=True, text_memory=False)


def test_the_backbone_gives_a_query_prompt_s_words_beside_its_states(tiny_checkpoint):
    from models.backbone import load_backbone

    backbone = load_backbone(tiny_checkpoint, device="cpu", dtype="float32")
    texts = [
        "a red square appears before a blue bar appears",
        "a red square appears after a blue bar appears",
    ]
    plain = backbone.text_states(texts)
    states = backbone.text_states(texts, words=True)
    assert plain.words is None and torch.equal(states.hidden, plain.hidden)
    assert states.words.shape == states.hidden.shape
    ids = backbone.processor.tokenizer(backbone.render_prompt(text=texts[0]))["input_ids"]
    table = backbone.model.model.get_input_embeddings().weight
    assert torch.equal(states.words[0, : len(ids)], table[ids])
    differ = (states.words[0] - states.words[1]).abs().sum(-1) > 0
    assert int(differ.sum()) == 1  # "before" and "after": one token apart, the rest the same words


def test_an_encoder_hands_a_words_head_the_query_words_online_and_cached(tiny_checkpoint):
    from models.backbone import VideoClip, load_backbone
    from models.streaming import StreamingConfig, VideoEncoder

    backbone = load_backbone(tiny_checkpoint, device="cpu", dtype="float32")
    config = _config(hidden_size=backbone.hidden_size, embed_dim=backbone.embed_dim, max_evidence_tokens=256,
                     query_words=True)  # fmt: skip
    encoder = VideoEncoder(
        backbone,
        create_head(config, seed=6).eval(),
        config=StreamingConfig(max_frames=32, clip_len=8, max_evidence=256),
    )
    h, w = backbone.frame_shape(64, 48)[::-1]
    frames = np.random.default_rng(1).integers(0, 255, size=(6, h, w, 3), dtype=np.uint8)
    clip = VideoClip(
        frames, list(range(0, 60, 10)), 10.0, segments=[np.array([0, 1, 2]), np.array([3, 4, 5])]
    )
    texts = [
        "a red square appears before a blue bar appears",
        "a red square appears after a blue bar appears",
    ]
    states = backbone.text_states(texts, words=True)
    q = backbone.pool(states)[:1]
    read = [encoder.encode([clip], queries=q, query_states=[(states.hidden[i], states.mask[i], states.words[i])])[0]
            for i in range(2)]  # fmt: skip
    assert not torch.allclose(read[0].final, read[1].final)  # "before" and "after" read apart
    with pytest.raises(ValueError, match="query_words"):
        encoder.encode([clip], queries=q, query_states=[(states.hidden[0], states.mask[0])])
    (cached,) = encoder.stream(
        encoder.evidence([clip]),
        queries=q,
        query_states=(states.hidden[:1], states.mask[:1], states.words[:1]),
    )
    assert torch.allclose(cached.final, read[0].final, atol=1e-5)
