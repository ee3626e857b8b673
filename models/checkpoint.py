"""Random, Qwen3-VL-Embedding-shaped checkpoint directories.

``make_checkpoint(directory, preset="tiny", seed=0)`` writes everything the production loader
(:func:`models.backbone.load_backbone`) reads from a public checkpoint:

    config.json                 Qwen3VLConfig (text + vision), architectures ["Qwen3VLForEmbedding"]
    model.safetensors           weights with the public naming (``model.visual.*``, ``model.language_model.*``)
    tokenizer.json + tokenizer_config.json
                                byte-level BPE trained offline, with the Qwen special tokens
    chat_template.jinja         a Qwen3-VL style chat template (system turn, image/video/text parts)
    preprocessor_config.json    Qwen2-VL image processor (patch 16, merge 2, temporal patch 2)
    video_preprocessor_config.json
                                Qwen3-VL video processor
    qaslr_backbone.json         our own hints: working frame resolution and the preset name

Presets: ``tiny`` (seconds to build, a few MB; tests, CI, the offline demo) and ``2b`` / ``8b`` with
the public architectures (random weights; GPU latency and memory at real scale). The weights are
random: rankings computed with them mean nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# The essentials of Qwen3-VL's chat template: system turn (string or text parts), user parts in
# the order given (video, image, text), generation prompt. Vision parts expand to
# <|vision_start|><|X_pad|><|vision_end|>, which the processor replaces with the real placeholders.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'video' %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' %}{{- part['text'] }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class Preset:
    name: str
    text: dict
    vision: dict
    vocab_size: int | None  # None: the trained tokenizer's size (tiny); else the public vocabulary size
    frame_size: int  # working resolution (square side, multiple of 32)
    dtype: torch.dtype


_QWEN_MROPE = {
    "rope_type": "default",
    "rope_theta": 5_000_000.0,
    "mrope_section": [24, 20, 20],
    "mrope_interleaved": True,
}

PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        text=dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=4096,
            # mrope_section must sum to head_dim / 2
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            },
        ),
        vision=dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=64,
            num_position_embeddings=16,
            deepstack_visual_indexes=[0],
        ),
        vocab_size=None,
        frame_size=64,
        dtype=torch.float32,
    ),
    # The shapes-world backbone: small enough to train on a CPU, big enough to learn 8 colours x 4
    # shapes (training/backbone.py trains it; the trained weights ship in training/tiny_world/).
    "tiny-world": Preset(
        name="tiny-world",
        text=dict(
            hidden_size=128,
            intermediate_size=384,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            max_position_embeddings=8192,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [4, 6, 6],
                "mrope_interleaved": True,
            },
        ),
        vision=dict(
            depth=4,
            hidden_size=128,
            intermediate_size=256,
            num_heads=4,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=128,
            num_position_embeddings=64,
            deepstack_visual_indexes=[1, 3],
        ),
        vocab_size=None,
        frame_size=128,
        dtype=torch.float32,
    ),
    # Public Qwen3-VL-2B architecture (the Qwen3-VL-Embedding-2B backbone).
    "2b": Preset(
        name="2b",
        text=dict(
            hidden_size=2048,
            intermediate_size=6144,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            max_position_embeddings=262144,
            rope_parameters=_QWEN_MROPE,
            tie_word_embeddings=True,
        ),
        vision=dict(
            depth=24,
            hidden_size=1024,
            intermediate_size=4096,
            num_heads=16,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=2048,
            num_position_embeddings=2304,
            deepstack_visual_indexes=[5, 11, 17],
        ),
        vocab_size=151936,
        frame_size=448,
        dtype=torch.bfloat16,
    ),
    # Public Qwen3-VL-8B architecture (the Qwen3-VL-Embedding-8B backbone).
    "8b": Preset(
        name="8b",
        text=dict(
            hidden_size=4096,
            intermediate_size=12288,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            max_position_embeddings=262144,
            rope_parameters=_QWEN_MROPE,
        ),
        vision=dict(
            depth=27,
            hidden_size=1152,
            intermediate_size=4304,
            num_heads=16,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=4096,
            num_position_embeddings=2304,
            deepstack_visual_indexes=[8, 16, 24],
        ),
        vocab_size=151936,
        frame_size=448,
        dtype=torch.bfloat16,
    ),
}

_CORPUS_WORDS = (
    "a the person man woman child dog cat car bus bicycle ball kitchen street park beach room table door window "
    "opens closes walks runs jumps sits stands picks puts cooks drinks reads writes plays throws catches rides "
    "red green blue yellow black white small large bright dark fast slow left right before after during while "
    "video clip frame moment scene event lecture talk slide board screen camera hand face water fire tree sky "
    "what when where who which how is are was were does did find show me the part in of to and with on at by"
).split()


def train_tokenizer(sentences, *, vocab_size: int = 600, lowercase: bool = False):
    """Byte-level BPE trained offline on ``sentences``, with the Qwen special tokens."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(sentences, trainer=trainer)
    return tok


def _random_corpus(seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(_CORPUS_WORDS) for _ in range(12)) for _ in range(2000)]


def _build_processor(directory: Path, raw_tokenizer, vision: dict):
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2VLImageProcessor,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw_tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        padding_side="right",
    )
    vision_kwargs = dict(
        patch_size=vision["patch_size"],
        merge_size=vision["spatial_merge_size"],
        temporal_patch_size=vision["temporal_patch_size"],
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": 32 * 32, "longest_edge": 1280 * 32 * 32}, **vision_kwargs
    )
    video_processor = Qwen3VLVideoProcessor(
        size={"shortest_edge": 32 * 32, "longest_edge": 768 * 32 * 32}, **vision_kwargs
    )
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(str(directory))
    return tokenizer


def preset_config(preset: str, *, ids: dict[str, int] | None = None, vocab_size: int | None = None):
    """The Qwen3VLConfig of a preset. ``ids`` are the special-token ids of the tokenizer that goes
    with it (default: the public Qwen ids)."""
    from transformers import Qwen3VLConfig

    spec = PRESETS[preset]
    ids = ids or dict(
        zip(SPECIAL_TOKENS, (151643, 151644, 151645, 151652, 151653, 151655, 151656), strict=True)
    )
    text = dict(
        spec.text, vocab_size=vocab_size or spec.vocab_size or 151936, pad_token_id=ids["<|endoftext|>"]
    )
    tie = text.pop("tie_word_embeddings", False)
    config = Qwen3VLConfig(
        text_config=text,
        vision_config=spec.vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=tie,
    )
    config.architectures = ["Qwen3VLForEmbedding"]
    config.dtype = spec.dtype
    return config


def make_checkpoint(
    directory: str | Path,
    *,
    preset: str = "tiny",
    seed: int = 0,
    weights: str | Path | None = None,
    tokenizer: str | Path | None = None,
    info: dict | None = None,
) -> Path:
    """Write a Qwen3-VL-Embedding-shaped checkpoint directory of ``preset``.

    Without ``weights`` the weights are random (deterministic from ``seed``) and the tokenizer is a
    byte-level BPE trained on a small generated corpus. ``weights`` (a safetensors file of
    :class:`~models.backbone.Qwen3VLForEmbedding`'s state dict) and ``tokenizer`` (a
    ``tokenizer.json``) write a trained checkpoint instead; ``info`` goes into
    ``qaslr_backbone.json`` beside the preset, the seed and the working frame size."""
    from tokenizers import Tokenizer

    from models.backbone import Qwen3VLForEmbedding

    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    spec = PRESETS[preset]
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)

    raw = Tokenizer.from_file(str(tokenizer)) if tokenizer else train_tokenizer(_random_corpus(seed))
    tok = _build_processor(directory, raw, spec.vision)
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = preset_config(preset, ids=ids, vocab_size=spec.vocab_size or len(tok))

    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = Qwen3VLForEmbedding(config).to(spec.dtype)
    if weights is not None:
        from safetensors.torch import load_file

        state = load_file(str(weights))
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(
                f"{weights} does not fit the {preset} preset: missing {sorted(missing)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}"
            )
    model.save_pretrained(str(directory), safe_serialization=True)
    hints = {"preset": preset, "seed": seed, "frame_size": spec.frame_size, "random_weights": weights is None}
    hints.update(info or {})
    (directory / "qaslr_backbone.json").write_text(json.dumps(hints, indent=2) + "\n")
    logger.info(
        "wrote %s checkpoint (%s, %d parameters) to %s",
        preset,
        "trained weights" if weights is not None else f"random, seed {seed}",
        model.num_parameters(),
        directory,
    )
    return directory
