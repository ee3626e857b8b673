"""Qwen3-VL-Embedding backbone through transformers' native Qwen3-VL classes.

Conventions of the reference embedder (Qwen3-VL-Embedding):
- the instruction is the system message (default "Represent the user's input."; a full stop is added
  when it ends without punctuation);
- the user content is ordered video, then image, then text;
- the chat template is applied with the generation prompt;
- the embedding is the final hidden state of the last non-padding token (right padding), L2-normalised,
  optionally truncated first (Matryoshka);
- public checkpoints wrap ``Qwen3VLModel`` as the attribute ``model`` (weight names ``model.*``),
  which :class:`Qwen3VLForEmbedding` mirrors, so public and generated checkpoints load identically.

Frames arrive already decoded at their working size (:func:`working_size`: the video's aspect ratio
kept, sides multiples of 32, within a ``frame_size``² pixel budget), so the processor is called with
``do_resize=False`` and ``do_sample_frames=False``; frames of different sizes batch together (the
vision tower packs variable grids). The frame indices and fps travel as ``video_metadata`` so that
the prompt's timestamps are the real ones.

On a CUDA device the frames go to the device first, as uint8 (a quarter of the fp32 bytes): pinned,
copied with ``non_blocking``, and the processor's rescale, normalisation and patchify run there (its
``device`` argument), so the fp32 pixel values (~300 MB per call at K' = 128, L = 16 and 448²) are
never built on the CPU. On the CPU nothing changes: the same processor calls on the same tensors.

On CUDA a text-only prompt is also right-padded to a multiple of :data:`TEXT_PAD_MULTIPLE` tokens:
queries take a few shapes, not one per length (a new shape's first call there took 77-86 ms against
9-10 again on an H200), and :meth:`Backbone.shape_texts` gives a warm-up one text per shape. Padding
changes no embedding: attention is causal, and the pooled token is the last real one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoProcessor, Qwen3VLConfig, Qwen3VLModel
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLPreTrainedModel
from transformers.video_utils import VideoMetadata

from core.config import DEFAULT_MODEL_ID

logger = logging.getLogger(__name__)

DEFAULT_INSTRUCTION = "Represent the user's input."
DEFAULT_FRAME_SIZE = 448
TEXT_PAD_MULTIPLE = 32  # on CUDA, text-only prompts pad to a multiple of this many tokens (see above)


class BackboneNotFoundError(RuntimeError):
    """The backbone weights could not be found locally or on the hub."""


class BackboneOfflineError(BackboneNotFoundError):
    """A hub id that is not in the Hugging Face cache, on a machine that cannot reach the hub."""


class EmbedDimError(ValueError):
    """The requested (Matryoshka) embedding dimension does not fit the backbone's hidden size."""

    def __init__(self, embed_dim: int, hidden_size: int):
        super().__init__(f"embed_dim must be in 1..{hidden_size}, got {embed_dim}")
        self.embed_dim, self.hidden_size = embed_dim, hidden_size


HUB_PROBE_TIMEOUT_S = 3.0
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


class Qwen3VLForEmbedding(Qwen3VLPreTrainedModel):
    """``Qwen3VLModel`` under the attribute ``model``, as in the public embedding checkpoints."""

    def __init__(self, config: Qwen3VLConfig):
        super().__init__(config)
        self.model = Qwen3VLModel(config)
        self.post_init()

    def forward(self, **inputs) -> torch.Tensor:
        """Returns the final hidden states [B, S, D]."""
        return self.model(**inputs, use_cache=False).last_hidden_state


@dataclass
class ClipStates:
    """Valid final hidden states of a batch of clips (U_t of Eq. 4) and their mask."""

    hidden: torch.Tensor  # [B, S, D]
    mask: torch.Tensor  # [B, S] bool, True where the token is real (not padding)
    # where each token is: (is a video token, its temporal pair, row, column), the last three as
    # fractions of the clip's extent in [0, 1]; zeros for text tokens (video inputs only, else None)
    positions: torch.Tensor | None = None  # [B, S, 4]
    words: torch.Tensor | None = None  # [B, S, D] a text prompt's input embeddings (text_states(words=True))


@dataclass
class VideoClip:
    """Decoded frames of one clip plus where they came from (for the prompt's timestamps)."""

    frames: np.ndarray  # [L, H, W, 3] uint8
    frame_indices: Sequence[int]  # indices into the source video, chronological
    fps: float
    # positions (into ``frames``) of each streamed clip when the selection cut them (models.windows:
    # one moment a clip); None: Eq. 3 cuts them (models.selection.partition_clips)
    segments: Sequence[np.ndarray] | None = None


def video_token_positions(inputs) -> torch.Tensor:
    """[B, S, 4] (video token, temporal pair, row, column) of every prompt token (ClipStates.positions):
    each row's video tokens in the processor's order, temporal pair by pair, merged tokens row-major."""
    types = inputs["mm_token_type_ids"]
    grids = inputs["video_grid_thw"]
    merge = 2  # spatial merge of Qwen3-VL: a merged token is 2 x 2 patches
    out = torch.zeros(*types.shape, 4, dtype=torch.float32, device=types.device)
    for b in range(types.shape[0]):
        t, gh, gw = (int(x) for x in grids[b])
        h, w = gh // merge, gw // merge
        where = (types[b] == 2).nonzero().squeeze(1)[: t * h * w]
        k = torch.arange(len(where), device=types.device)
        out[b, where, 0] = 1.0
        out[b, where, 1] = (k // (h * w)).float() / max(1, t - 1)
        out[b, where, 2] = ((k % (h * w)) // w).float() / max(1, h - 1)
        out[b, where, 3] = (k % w).float() / max(1, w - 1)
    return out


PATCH_FACTOR = 32  # patch 16 x spatial merge 2: frame sides are multiples of this


def working_size(width: int, height: int, frame_size: int) -> tuple[int, int]:
    """(w, h) at which a ``width`` x ``height`` video reaches the backbone: both sides multiples of
    32 (patch 16 x merge 2), at most ``frame_size``² pixels and as close to it as the rounding
    allows, with the aspect ratio kept as well as that rounding can. Small videos are scaled up and
    large ones down, so an event covers the same share of the vision tokens in any video, and a
    circle reaches the backbone as a circle in portrait and landscape videos alike."""
    if width <= 0 or height <= 0:
        raise ValueError(f"frame size must be positive, got {width}x{height}")
    f = PATCH_FACTOR
    budget = frame_size * frame_size
    scale = math.sqrt(budget / (width * height))
    fw, fh = max(f, int(width * scale) // f * f), max(f, int(height * scale) // f * f)
    aspect = math.log(width / height)
    best = None
    for w in (fw, fw + f):
        for h in (fh, fh + f):
            if w * h > budget and (w, h) != (fw, fh):
                continue
            key = (round(abs(math.log(w / h) - aspect), 6), -w * h)
            if best is None or key < best[0]:
                best = (key, (w, h))
    return best[1]


def normalize_instruction(instruction: str | None) -> str:
    text = (instruction or DEFAULT_INSTRUCTION).strip()
    if text and text[-1] not in ".!?。！？:;":
        text += "."
    return text


def pick_device(device: str | torch.device | None = None) -> torch.device:
    if device is not None and str(device) != "auto":
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pick_dtype(device: torch.device, dtype: str | torch.dtype | None = None) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in (None, "auto"):
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[str(dtype)]
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def pick_attn_implementation(device: torch.device, dtype: torch.dtype) -> str:
    """The attention kernel the backbone loads with: FlashAttention-2 on CUDA in bf16/fp16 when
    ``flash_attn`` is importable, else PyTorch's scaled-dot-product attention (``sdpa``, also the CPU's)."""
    if (
        device.type == "cuda"
        and dtype in (torch.bfloat16, torch.float16)
        and importlib.util.find_spec("flash_attn") is not None
    ):
        return "flash_attention_2"
    return "sdpa"


def resolve_model_source(model: str | os.PathLike) -> tuple[str, Path | None]:
    """A local directory if one exists, else the hub id (resolved through the Hugging Face cache)."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise BackboneNotFoundError(
                f"{path} exists but has no config.json; a Qwen3-VL-Embedding checkpoint directory needs "
                "config.json, *.safetensors, the tokenizer and processor files "
                "(or create a random one with `qaslr make-checkpoint DIR --preset tiny`)."
            )
        return str(path), path
    if path.is_absolute() or str(model).startswith((".", "~")) or str(model).count("/") != 1:
        raise BackboneNotFoundError(
            f"backbone {model!r} is neither an existing directory nor a hub id of the form 'org/name'."
        )
    return str(model), None


def hub_offline() -> bool:
    """HF_HUB_OFFLINE is set: the hub client will not go online."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """One quick TCP connect to the hub endpoint (HF_ENDPOINT, default https://huggingface.co), so
    that an offline machine fails (or falls back) at once instead of waiting out the hub client's
    retries. False under HF_HUB_OFFLINE; True when an HTTPS proxy is configured (a direct connect
    says nothing about the proxy's reach)."""
    import socket
    from urllib.parse import urlparse

    if hub_offline():
        return False
    if any(os.environ.get(name) for name in _PROXY_VARS):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def in_hub_cache(repo_id: str, revision: str | None = None) -> bool:
    """The hub id's config.json is in the local Hugging Face cache (no network access)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)


def locate_backbone(
    model: str | os.PathLike, *, revision: str | None = None
) -> tuple[str, Path | None, bool]:
    """``(source, local directory or None, offline)`` for ``model``: a checkpoint directory, or a hub
    id from the Hugging Face cache or the hub. ``offline`` means load from local files only. Raises
    BackboneNotFoundError (BackboneOfflineError for a hub id that is neither cached nor reachable)
    within :data:`HUB_PROBE_TIMEOUT_S` seconds, with the fix in the message."""
    source, local = resolve_model_source(model)
    if local is not None:
        return source, local, True
    online = hub_reachable()
    if not online and not in_hub_cache(source, revision):
        why = "HF_HUB_OFFLINE is set" if hub_offline() else "the hub cannot be reached from this machine"
        raise BackboneOfflineError(
            f"could not load backbone weights for {source!r} offline: they are not in the Hugging Face "
            f"cache and {why}. Fix: pass a local checkpoint directory (--model DIR, or QASLR_MODEL); for "
            "the shapes-world sample videos, the backbone that ships with the project "
            "(`qaslr make-checkpoint DIR --preset tiny-world`, then --model DIR); or download the weights "
            f"where the hub is reachable (`huggingface-cli download {source}`) into this machine's "
            "Hugging Face cache (HF_HOME)."
        )
    return source, None, not online


def checkpoint_fingerprint(directory: Path) -> str:
    """Identity of a checkpoint without reading its weights: a hash of config.json, every safetensors
    header (names, shapes, dtypes, offsets) and file size. Headers do not change when only the weight
    values do, so generated checkpoints also hash qaslr_backbone.json, which records their seed."""
    h = hashlib.sha256()
    for name in ("config.json", "qaslr_backbone.json"):
        if (directory / name).exists():
            h.update((directory / name).read_bytes())
    for weights in sorted(directory.glob("*.safetensors")):
        with open(weights, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            h.update(f.read(n))
        h.update(str(weights.stat().st_size).encode())
    return h.hexdigest()[:16]


class Backbone:
    """Frozen Qwen3-VL-Embedding backbone: text, image, clip and one-shot video encodings."""

    def __init__(
        self,
        model: Qwen3VLForEmbedding,
        processor,
        *,
        model_id: str,
        fingerprint: str,
        frame_size: int,
        embed_dim: int | None = None,
        random_weights: bool = False,
    ):
        self.model = model.eval().requires_grad_(False)
        self.processor = processor
        self.model_id = model_id
        self.fingerprint = fingerprint
        self.frame_size = frame_size
        self.hidden_size: int = model.config.text_config.hidden_size
        self.embed_dim = embed_dim or self.hidden_size
        if not 0 < self.embed_dim <= self.hidden_size:
            raise EmbedDimError(self.embed_dim, self.hidden_size)
        self.random_weights = random_weights
        self.temporal_patch: int = processor.video_processor.temporal_patch_size
        # text-only prompts padded to a multiple of this many tokens (0: to the batch's longest)
        self.text_pad_multiple: int = TEXT_PAD_MULTIPLE if self._on_device() else 0

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    # -- prompt construction ---------------------------------------------------------------------
    def conversation(
        self,
        *,
        text: str | None = None,
        image: bool = False,
        video: bool = False,
        instruction: str | None = None,
        text_first: bool = False,
    ) -> list[dict]:
        """System turn = instruction; user content ordered video, image, text (reference order), or
        with ``text_first`` the text before the video, so that (the text model being causal) every
        visual hidden state is computed in the text's light (a conditioning choice, Eq. 4)."""
        content: list[dict] = []
        if text is not None and text_first:
            content.append({"type": "text", "text": text})
        if video:
            content.append({"type": "video"})
        if image:
            content.append({"type": "image"})
        if text is not None and not text_first:
            content.append({"type": "text", "text": text})
        if not content:
            content.append({"type": "text", "text": "NULL"})
        return [
            {"role": "system", "content": [{"type": "text", "text": normalize_instruction(instruction)}]},
            {"role": "user", "content": content},
        ]

    def render_prompt(self, **kwargs) -> str:
        return self.processor.apply_chat_template(
            self.conversation(**kwargs), tokenize=False, add_generation_prompt=True
        )

    # -- forward ---------------------------------------------------------------------------------
    def _on_device(self) -> bool:
        """True when pixels are processed on the model's (CUDA) device rather than the CPU."""
        return self.device.type == "cuda"

    def to_device_uint8(self, pixels: torch.Tensor) -> torch.Tensor:
        """``pixels`` (uint8, CPU) for the processor: on CUDA pinned and copied ahead with
        ``non_blocking`` (the copy overlaps the prompt's tokenisation); on the CPU unchanged."""
        if not self._on_device():
            return pixels
        return pixels.contiguous().pin_memory().to(self.device, non_blocking=True)

    def prepare(self, prompts: list[str], *, images=None, videos=None, metadata=None):
        """Processor call shared by every encoding (tokens, pixel values, grids, mm_token_type_ids).
        On CUDA the processor rescales, normalises and patchifies on the device (``device``)."""
        kwargs: dict = {}
        where = {"device": str(self.device)} if self._on_device() else {}
        if images is not None:
            kwargs.update(images=images, images_kwargs={"do_resize": False, **where})
        if videos is not None:
            kwargs.update(
                videos=videos,
                videos_kwargs={
                    "do_resize": False,
                    "do_sample_frames": False,
                    "video_metadata": metadata,
                    "cap_pixels_per_frame": False,
                    **where,
                },
            )
        if images is None and videos is None and self.text_pad_multiple:
            kwargs["pad_to_multiple_of"] = self.text_pad_multiple
        return self.processor(text=prompts, padding=True, return_tensors="pt", **kwargs)

    @torch.inference_mode()
    def _forward(self, prompts: list[str], *, words: bool = False, **kwargs) -> ClipStates:
        inputs = self.prepare(prompts, **kwargs)
        inputs = {
            k: v.to(self.device, non_blocking=True) if torch.is_tensor(v) else v for k, v in inputs.items()
        }
        for key in inputs.keys() & {"pixel_values", "pixel_values_videos"}:
            inputs[key] = inputs[key].to(self.dtype)
        hidden = self.model(**inputs)
        positions = video_token_positions(inputs) if "video_grid_thw" in inputs else None
        embedded = self.model.model.get_input_embeddings()(inputs["input_ids"]) if words else None
        return ClipStates(hidden, inputs["attention_mask"].bool(), positions=positions, words=embedded)

    def pool(self, states: ClipStates) -> torch.Tensor:
        """Last non-padding token's final hidden state, Matryoshka-truncated, L2-normalised -> [B, d]."""
        lengths = states.mask.long().sum(dim=1)  # right padding: last valid index = length - 1
        rows = torch.arange(states.hidden.shape[0], device=states.hidden.device)
        last = states.hidden[rows, lengths - 1, : self.embed_dim]
        return F.normalize(last.float(), p=2, dim=-1)

    def _prepare_clip(self, clip: VideoClip):
        frames = np.asarray(clip.frames)
        indices = list(int(i) for i in clip.frame_indices)
        if frames.ndim != 4 or frames.shape[-1] != 3 or len(frames) != len(indices) or len(frames) == 0:
            raise ValueError(f"a clip needs frames [L, H, W, 3] with one index per frame; got {frames.shape}")
        if len(frames) % self.temporal_patch:
            # Qwen3-VL groups frames in temporal pairs; repeat the last frame as the processor would.
            pad = self.temporal_patch - len(frames) % self.temporal_patch
            frames = np.concatenate([frames, np.repeat(frames[-1:], pad, axis=0)])
            indices = indices + [indices[-1]] * pad
        video = torch.from_numpy(np.ascontiguousarray(frames))  # [L, H, W, 3] uint8
        video = self.to_device_uint8(video).permute(0, 3, 1, 2)  # [L, 3, H, W], on CUDA already there
        meta = VideoMetadata(total_num_frames=max(indices) + 1, fps=clip.fps, frames_indices=indices)
        return video, meta

    def clip_inputs(
        self,
        clips: Sequence[VideoClip],
        *,
        texts: Sequence[str | None] | None = None,
        instruction: str | None = None,
        text_first: bool = False,
    ) -> dict:
        """Prompts and processed frames for a batch of clips (what :meth:`encode_clips` feeds the model)."""
        if texts is not None and len(texts) != len(clips):
            raise ValueError("texts must have one entry (or None) per clip")
        videos, metadata, prompts = [], [], []
        for i, clip in enumerate(clips):
            video, meta = self._prepare_clip(clip)
            videos.append(video)
            metadata.append(meta)
            text = texts[i] if texts is not None else None
            prompts.append(
                self.render_prompt(text=text, video=True, instruction=instruction, text_first=text_first)
            )
        return {"prompts": prompts, "videos": videos, "metadata": metadata}

    def encode_clips(
        self,
        clips: Sequence[VideoClip],
        *,
        texts: Sequence[str | None] | None = None,
        instruction: str | None = None,
        text_first: bool = False,
    ) -> ClipStates:
        """Eq. 4: U_t = F_theta(C_t, c). Clips of different videos share one padded batch; ``texts``
        (one per clip, or None) is the optional conditioning input, placed after the video (the
        reference order) or, with ``text_first``, before it."""
        parts = self.clip_inputs(clips, texts=texts, instruction=instruction, text_first=text_first)
        return self._forward(parts["prompts"], videos=parts["videos"], metadata=parts["metadata"])

    def embed_texts(self, texts: Sequence[str], *, instruction: str | None = None) -> torch.Tensor:
        """[B, d] L2-normalised text embeddings."""
        return self.pool(self.text_states(texts, instruction=instruction))

    def text_states(self, texts: Sequence[str], *, instruction: str | None = None, words=False) -> ClipStates:
        """The final hidden states of each text's prompt ([B, S, D], mask [B, S]) that :meth:`embed_texts`
        pools, for a head that reads the query's text (models.head); ``words``: their input embeddings too."""
        prompts = [self.render_prompt(text=t, instruction=instruction) for t in texts]
        return self._forward(prompts, words=words)

    def shape_texts(self, shapes: int = 4, *, instruction: str | None = None) -> list[str]:
        """One text for each of the first ``shapes`` padded lengths a query's prompt takes (none
        when text prompts are not padded, ``text_pad_multiple`` 0): a warm-up that embeds each once,
        one at a time, has run every shape a query of up to about ``shapes`` x ``text_pad_multiple``
        tokens meets alone."""
        multiple = self.text_pad_multiple
        if not multiple:
            return []
        tokenizer = self.processor.tokenizer
        out: list[str] = []
        seen: set[int] = set()
        for words in range(1, 1 + shapes * multiple):
            text = " ".join(["shape"] * words)
            length = len(tokenizer(self.render_prompt(text=text, instruction=instruction))["input_ids"])
            bucket = -(-length // multiple)
            if bucket not in seen:
                seen.add(bucket)
                out.append(text)
                if len(out) == shapes:
                    break
        return out

    def frame_shape(self, width: int, height: int) -> tuple[int, int]:
        """(w, h) at which frames of a ``width`` x ``height`` video are decoded for this backbone."""
        return working_size(width, height, self.frame_size)

    def embed_images(
        self,
        frames: Sequence[np.ndarray],
        *,
        instruction: str | None = None,
        texts: Sequence[str | None] | None = None,
    ) -> torch.Tensor:
        """Each frame [H, W, 3] uint8 (sizes may differ) embedded as an image -> [B, d]; with
        ``texts`` (one per frame, or None), image and text together in one prompt (an image query
        with words, as Qwen3-VL-Embedding embeds mixed inputs)."""
        if texts is not None and len(texts) != len(frames):
            raise ValueError("texts must have one entry (or None) per image")
        images = [
            self.to_device_uint8(torch.from_numpy(np.ascontiguousarray(f))).permute(2, 0, 1) for f in frames
        ]
        prompts = [
            self.render_prompt(
                image=True, text=texts[i] if texts is not None else None, instruction=instruction
            )
            for i in range(len(images))
        ]
        return self.pool(self._forward(prompts, images=images))

    def embed_videos(
        self,
        videos: Sequence[VideoClip],
        *,
        texts: Sequence[str | None] | None = None,
        instruction: str | None = None,
        text_first: bool = False,
    ) -> torch.Tensor:
        """One-shot embedding: all selected frames of each video in one context (the paper's
        single-round baseline) -> [B, d]."""
        return self.pool(
            self.encode_clips(videos, texts=texts, instruction=instruction, text_first=text_first)
        )


def load_backbone(
    model: str | os.PathLike = DEFAULT_MODEL_ID,
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    frame_size: int | None = None,
    embed_dim: int | None = None,
    revision: str | None = None,
) -> Backbone:
    """Load Qwen3-VL-Embedding from a hub id (default ``Qwen/Qwen3-VL-Embedding-2B``) or a local directory."""
    source, local, offline = locate_backbone(model, revision=revision)
    device = pick_device(device)
    dtype = pick_dtype(device, dtype)
    attn_implementation = pick_attn_implementation(device, dtype)
    files = {"revision": revision, "local_files_only": offline}
    try:
        processor = AutoProcessor.from_pretrained(source, padding_side="right", **files)
        net = Qwen3VLForEmbedding.from_pretrained(
            source, dtype=dtype, attn_implementation=attn_implementation, **files
        )
    except (OSError, ValueError) as exc:
        if local is not None:
            raise BackboneNotFoundError(f"could not load the backbone from directory {local}: {exc}") from exc
        raise BackboneNotFoundError(
            f"could not find backbone weights for {source!r} (looked for a local directory of that name and for "
            f"the hub id in the Hugging Face cache{'' if offline else ' and online'}). "
            "Fix: download it where the hub is reachable (`huggingface-cli download "
            f"{source}`), or pass a local checkpoint directory (--model DIR / QASLR_MODEL), or generate a "
            "random one for testing with `qaslr make-checkpoint DIR --preset tiny` (its rankings are meaningless)."
        ) from exc
    processor.tokenizer.padding_side = "right"
    net.to(device)
    directory = local or Path(_snapshot_dir(source, revision))
    hints = {}
    if (directory / "qaslr_backbone.json").exists():
        hints = json.loads((directory / "qaslr_backbone.json").read_text())
    size = frame_size or hints.get("frame_size") or DEFAULT_FRAME_SIZE
    if size % 32:
        raise ValueError(f"frame_size must be a multiple of 32 (patch 16 x merge 2), got {size}")
    backbone = Backbone(
        net,
        processor,
        model_id=str(model),
        fingerprint=checkpoint_fingerprint(directory),
        frame_size=int(size),
        embed_dim=embed_dim,
        random_weights=bool(hints.get("random_weights", False)),
    )
    logger.info(
        "backbone loaded: %s on %s/%s (%s attention), hidden %d, embed %d, frame size %d%s",
        model,
        device,
        str(dtype).removeprefix("torch."),
        attn_implementation,
        backbone.hidden_size,
        backbone.embed_dim,
        size,
        " (RANDOM WEIGHTS: rankings are meaningless)" if backbone.random_weights else "",
    )
    return backbone


def _snapshot_dir(repo_id: str, revision: str | None) -> str:
    from huggingface_hub import snapshot_download

    return snapshot_download(repo_id, revision=revision, local_files_only=True)
