import json

import pytest
import torch

from models.head import (
    StreamingHead,
    StreamingHeadConfig,
    create_head,
    head_fingerprint,
    load_head,
    num_trainable_parameters,
    save_head,
)

D, d = 32, 24


def _config(**kw):
    base = dict(hidden_size=D, embed_dim=d, num_think_tokens=4, max_evidence_tokens=16, num_heads=4)
    base.update(kw)
    return StreamingHeadConfig(**base)


def _head(seed=0, **kw):
    return create_head(_config(**kw), seed=seed).double().eval()


def _video(seed, steps, tokens):
    """One video: evidence [T, M, D] with a ragged number of valid tokens per step."""
    g = torch.Generator().manual_seed(seed)
    ev = torch.randn(steps, tokens, D, generator=g, dtype=torch.float64)
    counts = torch.randint(1, tokens + 1, (steps,), generator=g)
    mask = torch.arange(tokens)[None] < counts[:, None]
    return ev, mask


def _pad_batch(videos, steps, tokens, garbage=0.0):
    b = len(videos)
    ev = torch.full((b, steps, tokens, D), garbage, dtype=torch.float64)
    ev_mask = torch.zeros(b, steps, tokens, dtype=torch.bool)
    step_mask = torch.zeros(b, steps, dtype=torch.bool)
    for i, (e, m) in enumerate(videos):
        t, n = m.shape
        ev[i, :t, :n] = e
        ev_mask[i, :t, :n] = m
        step_mask[i, :t] = True
    return ev, ev_mask, step_mask


def test_config_validation_and_json(tmp_path):
    with pytest.raises(ValueError):
        _config(num_heads=5)
    with pytest.raises(ValueError):
        _config(depth=0)
    cfg = _config(depth=2, learnable_temperature=False)
    path = tmp_path / "c.json"
    cfg.to_json(path)
    assert StreamingHeadConfig.from_json(path) == cfg
    assert json.loads(cfg.to_json())["depth"] == 2
    with pytest.raises(ValueError):
        StreamingHeadConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_outputs_normalised_and_shapes():
    head = _head()
    ev, ev_mask, step_mask = _pad_batch([_video(1, 3, 10), _video(2, 2, 7)], 3, 10)
    out = head(ev, ev_mask, step_mask)
    assert out.step_embeddings.shape == (2, 3, d) and out.final.shape == (2, d)
    norms = out.step_embeddings.norm(dim=-1)
    torch.testing.assert_close(norms[out.step_mask], torch.ones(5, dtype=torch.float64))
    assert torch.all(out.step_embeddings[1, 2] == 0)
    torch.testing.assert_close(out.final.norm(dim=-1), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(out.final[1], out.step_embeddings[1, 1])


def test_batching_matches_single_videos():
    head = _head()
    videos = [_video(1, 4, 12), _video(2, 1, 5), _video(3, 2, 12), _video(4, 3, 9)]
    batch = head(*_pad_batch(videos, 4, 12))
    for i, v in enumerate(videos):
        t = v[1].shape[0]
        alone = head(*_pad_batch([v], t, v[1].shape[1]))
        torch.testing.assert_close(batch.step_embeddings[i, :t], alone.step_embeddings[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(batch.final[i], alone.final[0], rtol=0, atol=1e-12)
        assert batch.step_mask[i].sum() == t


def test_incremental_api_matches_forward():
    head = _head(depth=2)
    ev, ev_mask, step_mask = _pad_batch([_video(5, 3, 8), _video(6, 2, 8)], 3, 8)
    out = head(ev, ev_mask, step_mask)
    state = head.init_state(2)
    for t in range(3):
        state = head.update(state, ev[:, t], ev_mask[:, t], active=step_mask[:, t])
        z = head.readout(state)
        torch.testing.assert_close(z[step_mask[:, t]], out.step_embeddings[:, t][step_mask[:, t]])
    torch.testing.assert_close(head.readout(state), out.final)


def test_padding_tokens_do_not_change_results():
    head = _head()
    videos = [_video(7, 3, 6), _video(8, 2, 4)]
    clean = head(*_pad_batch(videos, 3, 6))
    padded = head(*_pad_batch(videos, 3, 11, garbage=1e3))  # extra masked garbage tokens
    torch.testing.assert_close(clean.step_embeddings, padded.step_embeddings, rtol=0, atol=1e-12)
    torch.testing.assert_close(clean.final, padded.final, rtol=0, atol=1e-12)


def test_absent_and_empty_steps_keep_state():
    head = _head()
    ev, mask = _video(9, 3, 6)
    ref = head(*_pad_batch([(ev, mask)], 3, 6))
    # insert an absent step (step_mask False) and an empty step (evidence all masked) in the middle
    ev2 = torch.cat([ev[:1], torch.randn(2, 6, D, dtype=torch.float64), ev[1:]])
    mask2 = torch.cat([mask[:1], torch.zeros(2, 6, dtype=torch.bool), mask[1:]])
    mask2[1, :3] = True  # step 1 has evidence but is marked absent
    step_mask = torch.tensor([[True, False, True, True, True]])
    out = head(ev2[None], mask2[None], step_mask)
    assert out.step_mask.tolist() == [[True, False, False, True, True]]
    assert torch.isfinite(out.step_embeddings).all()
    torch.testing.assert_close(out.step_embeddings[0, [0, 3, 4]], ref.step_embeddings[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(out.final, ref.final, rtol=0, atol=1e-12)


def test_empty_evidence_rows_have_finite_gradients():
    head = create_head(_config(), seed=0)
    ev = torch.randn(2, 2, 5, D)
    ev_mask = torch.ones(2, 2, 5, dtype=torch.bool)
    ev_mask[1] = False  # a row with no evidence at all
    out = head(ev, ev_mask, torch.ones(2, 2, dtype=torch.bool))
    assert out.step_mask[1].sum() == 0 and torch.isfinite(out.final).all()
    out.final.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in head.parameters() if p.grad is not None)


def test_clip_order_and_reset_memory_matter():
    head = _head()
    ev, ev_mask, step_mask = _pad_batch([_video(10, 3, 8)], 3, 8)
    out = head(ev, ev_mask, step_mask)
    flipped = head(ev.flip(1), ev_mask.flip(1), step_mask)
    assert not torch.allclose(out.final, flipped.final, atol=1e-6)
    reset = head(ev, ev_mask, step_mask, reset_memory=True)
    torch.testing.assert_close(reset.step_embeddings[:, 0], out.step_embeddings[:, 0])  # first step identical
    assert not torch.allclose(reset.final, out.final, atol=1e-6)
    # with reset, the final readout depends on the last clip alone
    last_only = head(ev[:, 2:], ev_mask[:, 2:], step_mask[:, 2:])
    torch.testing.assert_close(reset.final, last_only.final)


def test_create_head_is_seeded():
    a, b, c = create_head(_config(), seed=3), create_head(_config(), seed=3), create_head(_config(), seed=4)
    for (k, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), k
    assert not torch.equal(a.think_tokens, c.think_tokens)


def test_save_load_round_trip(tmp_path):
    head = create_head(_config(depth=2), seed=1)
    with torch.no_grad():
        head.log_temperature.fill_(-2.5)
    save_head(head, tmp_path / "h")
    assert {p.name for p in (tmp_path / "h").iterdir()} == {"head_config.json", "head.safetensors"}
    loaded = load_head(tmp_path / "h")
    assert loaded.config == head.config
    for (k, pa), pb in zip(head.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), k
    torch.testing.assert_close(loaded.temperature, torch.tensor(2.5).neg().exp())
    assert num_trainable_parameters(loaded) == num_trainable_parameters(head)
    assert not loaded.training and not any(m.training for m in loaded.modules())  # loaded to be read
    ev, ev_mask, step_mask = _pad_batch([_video(11, 2, 6)], 2, 6)
    head.eval()
    # the weights are bit-identical (above); the forward pass may differ in the last bits, since CPU
    # kernels can pick another reduction order for differently aligned buffers
    with torch.no_grad():
        torch.testing.assert_close(
            head(ev.float(), ev_mask, step_mask).final,
            loaded(ev.float(), ev_mask, step_mask).final,
            rtol=0,
            atol=1e-6,
        )
    as_double = load_head(tmp_path / "h", dtype=torch.float64)
    assert as_double.think_tokens.dtype == torch.float64
    fp = head_fingerprint(tmp_path / "h")
    assert len(fp) == 16 and fp == head_fingerprint(tmp_path / "h")
    save_head(create_head(_config(depth=2), seed=2), tmp_path / "h2")
    assert head_fingerprint(tmp_path / "h2") != fp


def test_load_head_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="head.safetensors"):
        load_head(tmp_path)
    with pytest.raises(FileNotFoundError, match=str(tmp_path.name)):
        head_fingerprint(tmp_path)


def test_num_trainable_parameters():
    cfg = _config(depth=2)
    head = StreamingHead(cfg)
    n, t, ffn = cfg.num_think_tokens, cfg.hidden_size, cfg.ffn_mult * cfg.hidden_size
    attn = 4 * (t * t + t)
    block = attn + (t * ffn + ffn) + (ffn * t + t) + 4 * 2 * t
    expected = n * t + 2 * block + t + attn + t * d + 1  # tokens, blocks, embed token, readout, W, tau
    assert num_trainable_parameters(head) == expected
    frozen = StreamingHead(_config(depth=2, learnable_temperature=False))
    assert num_trainable_parameters(frozen) == expected - 1
    head.blocks.requires_grad_(False)
    assert num_trainable_parameters(head) == expected - 2 * block


def test_evidence_sink_lets_a_clip_leave_the_memory_alone_and_round_trips(tmp_path):
    """With ``evidence_sink`` every clip's bank gets one learnable extra key/value. When the memory
    attends only to it, the clip's own evidence cannot move the memory: two different clips give the
    same update. The sink is a saved parameter, padding and absent steps behave as before."""
    head = _head(evidence_sink=True)
    assert head.sink_token is not None and _head().sink_token is None
    ev, mask = _video(3, 3, 8)
    ref = head(*_pad_batch([(ev, mask)], 3, 8))
    padded = head(*_pad_batch([(ev, mask)], 3, 12, garbage=7.0))
    torch.testing.assert_close(padded.final, ref.final, rtol=0, atol=1e-12)
    state = head.init_state(1)
    a, b = torch.randn(2, 1, 8, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    full = torch.ones(1, 8, dtype=torch.bool)
    assert not torch.allclose(head.update(state, a, full), head.update(state, b, full))
    # make every think token attend to the sink alone: real tokens get key 0, the sink (the last
    # position of the extended bank) a large one; values still differ between a and b
    with torch.no_grad():
        block = head.blocks[0]
        block.attn.k_proj.weight.zero_()
        block.attn.k_proj.bias.zero_()
        block.attn.q_proj.weight.zero_()
        block.attn.q_proj.bias.fill_(1.0)

    def sink_key(module, inputs, output):
        assert output.shape[1] == 8 + 1  # the clip's 8 tokens, then the sink
        output = output.clone()
        output[:, -1] = 50.0
        return output

    handle = head.blocks[0].attn.k_proj.register_forward_hook(sink_key)
    try:
        torch.testing.assert_close(head.update(state, a, full), head.update(state, b, full))
    finally:
        handle.remove()
    save_head(create_head(_config(evidence_sink=True), seed=4), tmp_path / "s")
    loaded = load_head(tmp_path / "s")
    assert loaded.config.evidence_sink and loaded.sink_token is not None


def test_identity_init_starts_in_the_backbone_space():
    """``identity_init`` carries evidence (and the conditioning query) to the readout unchanged at
    the start: before any clip, a query-conditioned head reads out (nearly) its query, where the
    random initialisation reads out an unrelated direction. D < d cannot be the identity."""
    cfg = dict(hidden_size=32, embed_dim=32, query_conditioning=True)
    q = torch.nn.functional.normalize(torch.randn(3, 32, generator=torch.Generator().manual_seed(0)), dim=-1)
    ident = create_head(_config(identity_init=True, **cfg), seed=0).eval()
    plain = create_head(_config(**cfg), seed=0).eval()
    with torch.no_grad():
        assert ((ident.readout(ident.init_state(3, q)) * q).sum(-1) > 0.9).all()
        assert ((plain.readout(plain.init_state(3, q)) * q).sum(-1).abs() < 0.5).all()
    with pytest.raises(ValueError, match="identity_init needs hidden_size >= embed_dim"):
        _config(hidden_size=16, embed_dim=32, identity_init=True)


def test_query_whitening_spreads_queries_that_differ_little_and_is_saved_with_the_head(tmp_path):
    """Two queries 0.99 apart in cosine (what "once" and "twice" are to the tiny-world backbone) start
    the memory almost alike unwhitened; whitened by the training queries they start it far apart."""
    import torch.nn.functional as F

    from models.head import StreamingHeadConfig, create_head, load_head, save_head

    config = StreamingHeadConfig(
        hidden_size=32, embed_dim=16, num_heads=4, num_think_tokens=4, query_conditioning=True,
        identity_init=True, query_whitening=True,
    )  # fmt: skip
    head = create_head(config, seed=0)
    g = torch.Generator().manual_seed(0)
    events = F.normalize(torch.randn(8, 16, generator=g), dim=-1)
    count = F.normalize(torch.randn(16, generator=g), dim=-1) * 0.06  # the once / twice direction
    train = F.normalize(torch.cat([events + count, events - count]), dim=-1)
    once, twice = train[0], train[8]
    assert float(once @ twice) > 0.99
    before = head.condition(torch.stack([once, twice]))
    assert float(F.cosine_similarity(before[0], before[1], dim=0)) > 0.99  # identity until fitted
    head.set_query_statistics(train)
    after = head.condition(torch.stack([once, twice]))
    gap_before = 1 - float(F.cosine_similarity(before[0], before[1], dim=0))
    gap_after = 1 - float(F.cosine_similarity(after[0], after[1], dim=0))
    assert gap_after > 10 * gap_before and gap_after > 0.1  # whitened, the count direction weighs
    white = head.condition(train)
    assert abs(float(white.norm(dim=-1).mean()) - 1.0) < 0.35  # about q's own norm
    loaded = load_head(save_head(head, tmp_path / "h"))
    assert torch.allclose(loaded.condition(train), white, atol=1e-6)
