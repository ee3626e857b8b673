"""The backbone on a tiny generated checkpoint, loaded through the production loader."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors import safe_open

from models.backbone import (
    DEFAULT_INSTRUCTION,
    BackboneNotFoundError,
    VideoClip,
    load_backbone,
    normalize_instruction,
)
from models.checkpoint import make_checkpoint
from models.head import StreamingHeadConfig, create_head
from models.streaming import StreamingConfig, VideoEncoder


@pytest.fixture(scope="module")
def backbone(tiny_checkpoint):
    return load_backbone(tiny_checkpoint, device="cpu")


def _frames(n: int, seed: int, size: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def test_checkpoint_uses_public_weight_names(tiny_checkpoint):
    with safe_open(str(tiny_checkpoint / "model.safetensors"), "pt") as f:
        names = list(f.keys())
    assert names and all(n.startswith("model.") for n in names)
    assert any(n.startswith("model.visual.") for n in names)
    assert any(n.startswith("model.language_model.") for n in names)
    for required in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (tiny_checkpoint / required).exists(), required


def test_checkpoint_is_deterministic_from_seed(tmp_path):
    a = make_checkpoint(tmp_path / "a", seed=7)
    b = make_checkpoint(tmp_path / "b", seed=7)
    c = make_checkpoint(tmp_path / "c", seed=8)
    read = lambda d: (d / "model.safetensors").read_bytes()  # noqa: E731
    assert read(a) == read(b)
    assert read(a) != read(c)


def test_missing_weights_error_says_what_and_how(tmp_path):
    with pytest.raises(BackboneNotFoundError, match="make-checkpoint"):
        load_backbone(tmp_path)  # a directory without config.json
    with pytest.raises(BackboneNotFoundError, match="neither an existing directory nor a hub id"):
        load_backbone(tmp_path / "no" / "such" / "dir")


def test_instruction_gets_a_full_stop():
    assert normalize_instruction("Find the clip") == "Find the clip."
    assert normalize_instruction("Find the clip?") == "Find the clip?"
    assert normalize_instruction(None) == DEFAULT_INSTRUCTION


def test_prompt_has_instruction_in_system_turn_and_visuals_before_text(backbone):
    prompt = backbone.render_prompt(text="a red car", video=True, image=True, instruction="Retrieve videos")
    system, user = prompt.split("<|im_start|>user\n")
    assert system == "<|im_start|>system\nRetrieve videos.<|im_end|>\n"
    assert user.index("<|video_pad|>") < user.index("<|image_pad|>") < user.index("a red car")
    assert prompt.endswith("<|im_start|>assistant\n")  # generation prompt


def test_pooled_vector_is_last_valid_tokens_hidden_state(backbone):
    texts = ["a dog runs on the beach", "hi"]  # different lengths -> right padding on the short one
    prompts = [backbone.render_prompt(text=t) for t in texts]
    inputs = backbone.processor(text=prompts, padding=True, return_tensors="pt")
    assert (inputs["attention_mask"][1] == 0).any(), "the test needs a padded row"
    with torch.no_grad():
        hidden = backbone.model.model(**inputs).last_hidden_state
    expected = []
    for row in range(2):
        last = int(inputs["attention_mask"][row].nonzero().max())
        expected.append(torch.nn.functional.normalize(hidden[row, last], dim=-1))
    got = backbone.embed_texts(texts)
    torch.testing.assert_close(got, torch.stack(expected), rtol=1e-5, atol=1e-6)
    # batching does not change a row
    torch.testing.assert_close(backbone.embed_texts(texts[1:]), got[1:], rtol=1e-5, atol=1e-6)


def test_conditioning_text_changes_only_text_positions(backbone):
    clip = VideoClip(frames=_frames(4, 0), frame_indices=[0, 8, 16, 24], fps=8.0)
    plain = backbone.encode_clips([clip])
    cond = backbone.encode_clips([clip], texts=["a red square appears"])
    parts = backbone.clip_inputs([clip])
    ids = backbone.prepare(parts["prompts"], videos=parts["videos"], metadata=parts["metadata"])["input_ids"][
        0
    ]
    tok = backbone.processor.tokenizer.convert_tokens_to_ids
    visual = (ids == tok("<|video_pad|>")).nonzero().flatten()
    prefix = int((ids == tok("<|vision_end|>")).nonzero().max()) + 1  # the text starts right after this
    assert visual.numel() > 0 and int(visual.max()) < prefix
    assert int(cond.mask.sum()) > int(plain.mask.sum())
    # Everything before the text (system turn, timestamps, visual tokens) is identical: the text
    # follows the video in the user turn and attention is causal.
    torch.testing.assert_close(cond.hidden[0, :prefix], plain.hidden[0, :prefix], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(cond.hidden[0, prefix], plain.hidden[0, prefix], atol=1e-3)
    # ... and the final pooled embeddings differ
    assert not torch.allclose(backbone.pool(plain), backbone.pool(cond))


def test_clip_batch_equals_clips_alone(backbone):
    clips = [
        VideoClip(_frames(4, 1), [0, 1, 2, 3], 4.0),
        VideoClip(_frames(2, 2), [10, 20], 4.0),
        VideoClip(_frames(3, 3), [5, 6, 7], 4.0),  # odd: last frame repeated to a temporal pair
    ]
    batch = backbone.encode_clips(clips, texts=["x", None, "a longer conditioning text"])
    for i, clip in enumerate(clips):
        alone = backbone.encode_clips([clip], texts=[["x", None, "a longer conditioning text"][i]])
        n = int(alone.mask.sum())
        assert int(batch.mask[i].sum()) == n
        torch.testing.assert_close(batch.hidden[i, :n], alone.hidden[0, :n], rtol=1e-4, atol=1e-5)


def test_image_embeddings_are_normalised(backbone):
    z = backbone.embed_images(_frames(3, 4))
    assert z.shape == (3, backbone.embed_dim)
    torch.testing.assert_close(z.norm(dim=-1), torch.ones(3))


def test_matryoshka_truncation(tiny_checkpoint):
    small = load_backbone(tiny_checkpoint, embed_dim=16)
    full = load_backbone(tiny_checkpoint)
    z_small, z_full = small.embed_texts(["a cat"]), full.embed_texts(["a cat"])
    assert z_small.shape == (1, 16)
    torch.testing.assert_close(
        z_small, torch.nn.functional.normalize(z_full[:, :16] * 1.0, dim=-1), rtol=1e-4, atol=1e-5
    )


def test_video_encoder_batches_videos_without_mixing_state(backbone):
    head = create_head(
        StreamingHeadConfig(hidden_size=64, embed_dim=64, num_heads=4, num_think_tokens=8), seed=0
    )
    encoder = VideoEncoder(backbone, head, config=StreamingConfig(max_frames=32, clip_len=8, max_evidence=16))
    videos = [VideoClip(_frames(n, 10 + n), np.arange(n) * 3, 6.0) for n in (32, 5, 12)]
    together = encoder.encode(videos, texts=["q one", None, "q three"])
    for i, video in enumerate(videos):
        alone = encoder.encode([video], texts=[["q one", None, "q three"][i]])[0]
        torch.testing.assert_close(together[i].final, alone.final, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(together[i].steps, alone.steps, rtol=1e-4, atol=1e-5)
    # T = ceil(K_V / L), L from frames_per_clip; the 5-frame video fits one clip (<= L = 8) and
    # streams too (one call, one pathway): 3 clips of 2
    assert [len(v.steps) for v in together] == [4, 3, 3]
    # one-shot path: same interface, one readout per video
    oneshot = VideoEncoder(backbone).encode(videos)
    assert all(v.steps.shape == (1, 64) for v in oneshot)
    torch.testing.assert_close(
        oneshot[1].final, VideoEncoder(backbone).encode(videos[1:2])[0].final, rtol=1e-4, atol=1e-5
    )


def test_one_call_streams_every_video_and_only_the_index_rule_keeps_short_ones_one_shot(backbone):
    """One encode call, one pathway: with a head, a video whose frames fit one clip streams too,
    exactly as the training features stream it (the clips Eq. 3 gives it, through the head), so it
    is scored in the head's space; only ``short_oneshot`` (the indexer's §3.1 rule, a property of
    the index) embeds it with the backbone itself."""
    head = create_head(
        StreamingHeadConfig(hidden_size=64, embed_dim=64, num_heads=4, num_think_tokens=8), seed=2
    )
    config = StreamingConfig(max_frames=32, clip_len=8, max_evidence=16)
    qaslr, oneshot = VideoEncoder(backbone, head, config=config), VideoEncoder(backbone, config=config)
    short, long = VideoClip(_frames(8, 3), np.arange(8), 4.0), VideoClip(_frames(9, 4), np.arange(9), 4.0)
    a, b = qaslr.encode([short, long])
    assert a.streamed and b.streamed
    assert a.steps_used == 4 and b.steps_used == 3  # 8 frames: clips of 2; 9: clips of 4 (T_max = 4)
    trained = qaslr.stream(qaslr.evidence([short]))[0]  # the training features' path
    torch.testing.assert_close(a.final, trained.final, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(a.final, oneshot.encode([short])[0].final, atol=1e-3)
    c, d = qaslr.encode([short, long], short_oneshot=True)
    torch.testing.assert_close(c.final, oneshot.encode([short])[0].final, rtol=1e-4, atol=1e-5)
    assert not c.streamed and c.steps_used == 1 and d.streamed and d.steps_used == 3


def test_early_exit_stops_encoding_and_reports_the_clips_used(backbone):
    """An exit policy whose gate always says stop ends every long video at t_min; the readout at
    that step equals the full stream's step-t_min readout, and fewer clips are encoded."""
    from models.gate import EarlyExitGate
    from models.streaming import ExitPolicy

    head = create_head(
        StreamingHeadConfig(hidden_size=64, embed_dim=64, num_heads=4, num_think_tokens=8), seed=3
    )
    encoder = VideoEncoder(backbone, head, config=StreamingConfig(max_frames=16, clip_len=4, max_evidence=8))
    videos = [VideoClip(_frames(16, 50 + i), np.arange(16), 4.0) for i in range(2)]
    gate = EarlyExitGate(64, hidden_dim=8)
    torch.nn.init.zeros_(gate.mlp[2].weight)
    torch.nn.init.constant_(gate.mlp[2].bias, 10.0)  # p ~ 1 everywhere
    full = encoder.encode(videos)
    calls = []
    real = backbone.encode_clips
    backbone.encode_clips = lambda clips, **kw: calls.append(len(clips)) or real(clips, **kw)
    try:
        early = encoder.encode(videos, exit_policy=ExitPolicy(gate, eta=0.5, t_min=2))
    finally:
        backbone.encode_clips = real
    assert [e.steps_used for e in early] == [2, 2] and [e.planned_steps for e in early] == [4, 4]
    assert sum(calls) == 4  # 2 clips of each video, not 4
    for f, e in zip(full, early, strict=True):
        torch.testing.assert_close(e.final, f.steps[1], rtol=1e-4, atol=1e-5)
    never = EarlyExitGate(64, hidden_dim=8)
    torch.nn.init.zeros_(never.mlp[2].weight)
    torch.nn.init.constant_(never.mlp[2].bias, -10.0)
    assert [e.steps_used for e in encoder.encode(videos, exit_policy=ExitPolicy(never, eta=0.5))] == [4, 4]


def test_online_streaming_matches_head_over_cached_evidence(backbone):
    """encode() updates memory clip by clip; the training path caches banks and runs the head over
    all steps at once. Both must give the same readouts."""
    head = create_head(
        StreamingHeadConfig(hidden_size=64, embed_dim=64, num_heads=4, num_think_tokens=8), seed=1
    )
    encoder = VideoEncoder(backbone, head, config=StreamingConfig(max_frames=16, clip_len=4, max_evidence=8))
    videos = [VideoClip(_frames(n, 30 + n), np.arange(n), 2.0) for n in (16, 6)]
    online = encoder.encode(videos)
    cached = encoder.stream(encoder.evidence(videos))
    for a, b in zip(online, cached, strict=True):
        torch.testing.assert_close(a.steps, b.steps, rtol=1e-4, atol=1e-5)
        assert [list(x) for x in a.clip_frames] == [list(x) for x in b.clip_frames]


@pytest.mark.parametrize(("preset", "low", "high"), [("2b", 2.0e9, 2.3e9), ("8b", 8.0e9, 9.0e9)])
def test_public_presets_have_the_public_sizes(preset, low, high):
    """The 2b/8b presets build the public Qwen3-VL architectures (counted on the meta device)."""
    from models.backbone import Qwen3VLForEmbedding
    from models.checkpoint import preset_config

    config = preset_config(preset)
    with torch.device("meta"):
        model = Qwen3VLForEmbedding(config)
    n = sum(p.numel() for p in model.parameters())
    assert low < n < high, f"{preset}: {n / 1e9:.2f}B parameters"
    assert config.text_config.hidden_size == {"2b": 2048, "8b": 4096}[preset]


def test_the_cpu_load_picks_sdpa_and_embeds_as_eager_attention(tiny_checkpoint, backbone):
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    from models.backbone import Qwen3VLForEmbedding, pick_attn_implementation

    assert pick_attn_implementation(torch.device("cpu"), torch.float32) == "sdpa"
    assert pick_attn_implementation(torch.device("cpu"), torch.bfloat16) == "sdpa"
    assert backbone.model.config._attn_implementation == "sdpa"
    assert backbone.model.config.vision_config._attn_implementation == "sdpa"
    assert isinstance(backbone.model.model, Qwen3VLModel)
    clips = [VideoClip(_frames(4, 11), [0, 2, 4, 6], 2.0), VideoClip(_frames(2, 12), [1, 3], 2.0)]
    sdpa = backbone.embed_videos(clips, texts=["a red ball", None])
    texts = backbone.embed_texts(["a red ball", "a dog"])
    eager_net = Qwen3VLForEmbedding.from_pretrained(
        str(tiny_checkpoint), dtype=torch.float32, attn_implementation="eager"
    )
    net, backbone.model = backbone.model, eager_net.eval()
    try:
        torch.testing.assert_close(
            backbone.embed_videos(clips, texts=["a red ball", None]), sdpa, rtol=1e-4, atol=1e-5
        )
        torch.testing.assert_close(backbone.embed_texts(["a red ball", "a dog"]), texts, rtol=1e-4, atol=1e-5)
    finally:
        backbone.model = net


def test_flash_attention_only_on_cuda_in_half_precision_with_flash_attn(monkeypatch):
    import importlib.util

    from models.backbone import pick_attn_implementation

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: object() if n == "flash_attn" else real(n, *a)
    )
    cuda = torch.device("cuda")
    assert pick_attn_implementation(cuda, torch.bfloat16) == "flash_attention_2"
    assert pick_attn_implementation(cuda, torch.float32) == "sdpa"
    assert pick_attn_implementation(torch.device("cpu"), torch.bfloat16) == "sdpa"
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "flash_attn" else real(n, *a))
    assert pick_attn_implementation(cuda, torch.bfloat16) == "sdpa"


def test_the_device_pixel_path_gives_the_cpu_path_bit_for_bit(backbone, monkeypatch):
    """The CUDA path (frames pinned and moved as uint8, the processor told the device) run on the CPU:
    the same pixel values, grids and tokens as the CPU path, bit for bit."""
    from models.backbone import Backbone

    clips = [VideoClip(_frames(3, 21), [0, 1, 2], 3.0), VideoClip(_frames(4, 22), [4, 5, 6, 7], 3.0)]
    images = list(_frames(2, 23))

    def run():
        parts = backbone.clip_inputs(clips, texts=["x", None])
        videos = backbone.prepare(parts["prompts"], videos=parts["videos"], metadata=parts["metadata"])
        prompts = [backbone.render_prompt(image=True) for _ in images]
        imgs = [backbone.to_device_uint8(torch.from_numpy(f)).permute(2, 0, 1) for f in images]
        return dict(videos), dict(backbone.prepare(prompts, images=imgs)), parts["videos"]

    cpu_videos, cpu_images, cpu_frames = run()
    pinned, calls = [], []
    real_prepare = backbone.processor.__class__.__call__

    def spy(self, *args, **kwargs):
        calls.append({k: v.get("device") for k, v in kwargs.items() if k.endswith("_kwargs")})
        return real_prepare(self, *args, **kwargs)

    monkeypatch.setattr(Backbone, "_on_device", lambda self: True)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: pinned.append(self.dtype) or self.clone())
    monkeypatch.setattr(backbone.processor.__class__, "__call__", spy)
    dev_videos, dev_images, dev_frames = run()
    assert pinned and set(pinned) == {torch.uint8}
    assert all(f.dtype == torch.uint8 for f in dev_frames)
    assert calls == [{"videos_kwargs": "cpu"}, {"images_kwargs": "cpu"}]
    for cpu, dev in ((cpu_videos, dev_videos), (cpu_images, dev_images)):
        assert cpu.keys() == dev.keys()
        for key in cpu:
            assert torch.equal(cpu[key], dev[key]), key
    for a, b in zip(cpu_frames, dev_frames, strict=True):
        assert torch.equal(a, b)


def test_auto_clip_batch_is_8_on_the_cpu_and_scales_with_free_gpu_memory(backbone, monkeypatch):
    from models import streaming
    from models.backbone import Backbone

    encoder = VideoEncoder(backbone, config=StreamingConfig(max_frames=8, clip_len=4))
    assert StreamingConfig().clip_batch_size == "auto" and encoder.clip_batch_size == 8
    assert VideoEncoder(backbone, config=StreamingConfig(clip_batch_size=3)).clip_batch_size == 3
    with pytest.raises(ValueError, match="positive integer or 'auto'"):
        StreamingConfig(clip_batch_size=0)
    per_clip = streaming.clip_bytes(backbone, 4)
    assert per_clip > 64 * 64 * 3 * 4 * 4  # at least the fp32 pixels of 4 frames
    monkeypatch.setattr(Backbone, "device", property(lambda self: torch.device("cuda")))
    assert streaming.auto_clip_batch_size(backbone, 4, free_bytes=2 * 10 * per_clip) == 10
    assert streaming.auto_clip_batch_size(backbone, 4, free_bytes=per_clip) == 1
    assert streaming.auto_clip_batch_size(backbone, 4, free_bytes=10**15) == streaming.MAX_AUTO_CLIP_BATCH
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2 * 5 * per_clip, 10**12))
    assert streaming.auto_clip_batch_size(backbone, 4) == 5


def test_the_2b_clip_plan_fits_the_documented_batch_sizes():
    """At the 2B shape (L = 16, 448², bf16) a clip plans about 0.6 GB: 64 clips on an 80 GB GPU."""
    from types import SimpleNamespace

    from models import streaming
    from models.checkpoint import preset_config

    config = preset_config("2b")
    fake = SimpleNamespace(
        model=SimpleNamespace(config=config), dtype=torch.bfloat16, temporal_patch=2, frame_size=448,
        device=torch.device("cuda"),
    )  # fmt: skip
    per_clip = streaming.clip_bytes(fake, 16)
    assert 0.4e9 < per_clip < 0.8e9
    assert streaming.auto_clip_batch_size(fake, 16, free_bytes=76 * 2**30) == 64
    assert 8 <= streaming.auto_clip_batch_size(fake, 16, free_bytes=14 * 2**30) <= 14


def test_padded_text_prompts_give_the_same_embeddings_in_a_few_shapes(tiny_checkpoint):
    """CUDA pads text-only prompts to a multiple of TEXT_PAD_MULTIPLE tokens (so queries take few
    shapes); forced here on the CPU: the same vectors as unpadded, and each length bucket's text
    from shape_texts lands in its own bucket."""
    from models.backbone import TEXT_PAD_MULTIPLE

    plain = load_backbone(tiny_checkpoint, device="cpu")
    assert plain.text_pad_multiple == 0 and plain.shape_texts() == []  # the CPU pads to the longest
    padded = load_backbone(tiny_checkpoint, device="cpu")
    padded.text_pad_multiple = TEXT_PAD_MULTIPLE
    texts = ["a red square", "a blue triangle moves from the left to the right, then stops"]
    lengths = padded.prepare([padded.render_prompt(text=t) for t in texts])["input_ids"].shape[1]
    assert lengths % TEXT_PAD_MULTIPLE == 0
    assert plain.prepare([plain.render_prompt(text=t) for t in texts])["input_ids"].shape[1] < lengths
    for one in ([texts[0]], texts):
        torch.testing.assert_close(padded.embed_texts(one), plain.embed_texts(one), atol=1e-5, rtol=0)
    shapes = padded.shape_texts(3)
    buckets = [
        padded.prepare([padded.render_prompt(text=t)])["input_ids"].shape[1] // TEXT_PAD_MULTIPLE
        for t in shapes
    ]
    assert len(shapes) == 3 and len(set(buckets)) == 3 and buckets == sorted(buckets)
