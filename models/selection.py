"""Frame selection and clip partitioning (QASLR §3.2, Eq. 2-3).

The selector returns an ordered sequence of at most K_max frame indices

    I(V, c) = (k_1, ..., k_{K_V}),  k_1 < ... < k_{K_V},  K_V <= K_max          # Eq. 2

which are then split into T = ceil(K_V / L) clips of L frames each, the last clip padded and
masked                                                                         # Eq. 3

Two selectors are provided:

- ``uniform_indices``: query-independent, the centres of K_V equal temporal segments (the
  indexable setting, and the first stage of the service).
- ``query_aware_positions``: Q-Frame style; softmax of frame-query similarities, standardised
  to their own spread, over a temperature, then Gumbel-max top-k sampling without replacement,
  seeded per (request seed, query, candidate) (``selection_seed``), with chronological order
  restored (the query-conditioned setting).

``ClipPlan`` is how a streaming head's input is cut (K' frames, Eq. 3's clips, M tokens per clip): a
trained head records its plan, and serving refuses a plan that cuts clips otherwise.

Everything here is pure numpy (torch tensors are accepted as score input) and has no model
dependency.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.config import QFRAME_TEMPERATURE  # in units of the scores' own spread

logger = logging.getLogger(__name__)

__all__ = [
    "ClipPlan",
    "frames_per_clip",
    "partition_clips",
    "query_aware_positions",
    "query_key",
    "selection_seed",
    "uniform_indices",
]


def uniform_indices(num_frames: int, k: int) -> np.ndarray:
    """Query-independent selection: the centres of K_V = min(k, num_frames) equal segments.

    Segment i covers [i * F / K_V, (i + 1) * F / K_V); its centre frame is
    floor((i + 0.5) * F / K_V). Because every segment is at least one frame long the result is
    strictly increasing (sorted and unique) and lies in [0, num_frames).

    Returns an int64 array of shape [K_V].
    """
    if num_frames <= 0:
        raise ValueError(f"num_frames must be positive, got {num_frames}")
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    k_v = min(k, num_frames)
    # Integer arithmetic: floor(((2i + 1) * F) / (2 K_V)) avoids float rounding at large F.
    i = np.arange(k_v, dtype=np.int64)
    return ((2 * i + 1) * num_frames) // (2 * k_v)


def _to_numpy_1d(scores: Any) -> np.ndarray:
    if hasattr(scores, "detach"):  # torch.Tensor, without importing torch here
        scores = scores.detach().to("cpu").double().numpy()
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError("scores contain NaN")
    return arr


def query_aware_positions(
    scores: Any,
    k: int,
    *,
    temperature: float = QFRAME_TEMPERATURE,
    seed: int | None = None,
) -> np.ndarray:
    """Q-Frame style query-aware selection of ``k`` of C candidate frames.

    ``scores`` holds each candidate frame's similarity to the query (1-D numpy array, list or torch
    tensor): cosines, which differ by fractions of a unit. The reference Q-Frame divides
    unnormalised CLIP logits by 0.8; on cosines that temperature makes the choice nearly uniform
    (a needle 10 standard deviations above the rest was picked 18 % of the time). So the scores are
    first put on their own scale,

        z = (scores - median(scores)) / spread,   spread = 1.4826 * MAD (a robust std; the
                                                   plain std when the MAD is 0)

    and the selection distribution is p = softmax(z / temperature), ``temperature`` in units of
    that spread (default 0.25: a frame 3 spreads above the median outweighs a typical one by
    e^12). min(k, C) candidates are drawn *without replacement* by the Gumbel-max trick (the
    top-k of ``log p + g``, g ~ Gumbel(0, 1) from ``numpy.random.default_rng(seed)``): an exact
    sample of sequential sampling without replacement from p. Frames that clearly match the query
    are taken first; the rest of the budget falls on near-random frames, which keeps temporal
    coverage. Derive ``seed`` per (request seed, query, candidate) (:func:`selection_seed`), so
    unrelated queries and videos do not share one fixed pseudo-random subset.

    Returns the chosen candidate positions (int64, into ``scores``) sorted ascending, so that
    chronological order is restored (Eq. 2). Candidates with score ``-inf`` are picked last.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    s = _to_numpy_1d(scores)
    num_candidates = s.shape[0]
    k_v = min(k, num_candidates)
    if k_v == 0:
        return np.zeros(0, dtype=np.int64)
    finite = np.isfinite(s)
    if not finite.any():
        raise ValueError("scores must contain at least one finite value")
    if k_v == num_candidates:
        return np.arange(num_candidates, dtype=np.int64)
    values = s[finite]
    centre = float(np.median(values))
    spread = 1.4826 * float(np.median(np.abs(values - centre)))
    if not spread > 1e-12:
        spread = float(values.std())
    z = (s - centre) / spread if spread > 1e-12 else np.zeros_like(s)
    logits = np.where(finite, z / temperature, -np.inf)
    rng = np.random.default_rng(seed)
    perturbed = logits + rng.gumbel(size=num_candidates)  # log-softmax shift does not change the order
    # The k_v largest keys: a partial partition (linear in C, where a full sort of an hour-long bank
    # cost more than the rest together); -inf keys (ties) come last, by position.
    keys = np.flatnonzero(finite)
    if keys.size >= k_v:
        top = keys[np.argpartition(-perturbed[keys], k_v - 1)[:k_v]]
    else:
        top = np.concatenate([keys, np.flatnonzero(~finite)[: k_v - keys.size]])
    return np.sort(top).astype(np.int64)


def query_key(text: str | None = None, image: Any = None) -> str:
    """A stable key of a query for :func:`selection_seed`: ``text:<text>`` for a text query; an image
    query (optionally with text) adds ``image:<digest>``, a blake2b digest of the image's shape and
    pixel bytes (the decoded [h, w, 3] uint8 frame the query was embedded from). Pixels rather than
    the query embedding, whose bytes may differ in the last bits between devices and dtypes."""
    parts = []
    if image is not None:
        pixels = np.ascontiguousarray(image)
        digest = hashlib.blake2b(digest_size=16)
        digest.update(f"{pixels.dtype}{pixels.shape}".encode())
        digest.update(pixels.tobytes())
        parts.append(f"image:{digest.hexdigest()}")
    if text is not None:
        parts.append(f"text:{text}")
    if not parts:
        raise ValueError("a query key needs the query's text or image")
    return "|".join(parts)


def selection_seed(seed: int, query: str, candidate: str) -> int:
    """The selection seed of one (request seed, query, candidate), stable across runs and machines:
    the one derivation training (``training.features``: the training seed, the conditioning query,
    the candidate's video) and serving (``engine.tiers.encoded``: the request seed, the request's
    query, the candidate's video id) share, so a candidate is drawn by the same rule in both.
    ``query`` is a :func:`query_key`; the same candidate under two queries gets two seeds."""
    blob = json.dumps([int(seed), str(query), str(candidate)], ensure_ascii=False)
    return int.from_bytes(hashlib.blake2b(blob.encode(), digest_size=8).digest(), "little")


def frames_per_clip(
    num_selected: int,
    *,
    k_max: int = 128,
    l_max: int = 16,
    temporal_patch: int = 2,
) -> int:
    """Frames per clip L for ``num_selected`` selected frames.

    §3.2 / §A.7: L = 16 at the full budget K = 128 (T_max = 8 streaming updates), and fewer frames
    per clip for shorter inputs. The rule keeps the number of steps at T_max where possible:

        T_max = ceil(k_max / l_max)
        L     = min(l_max, ceil(num_selected / T_max)), rounded UP to a multiple of temporal_patch,
                and at least temporal_patch

    The rounding exists because Qwen3-VL groups video frames in temporal pairs
    (temporal_patch_size = 2), so an odd clip would be padded by the processor anyway.
    Examples with the defaults: 128 -> 16, 64 -> 8, 20 -> 4, 10 -> 2, 1 -> 2, 500 -> 16.
    ``num_selected == 0`` returns ``temporal_patch`` (there are no clips to fill).
    """
    if num_selected < 0:
        raise ValueError(f"num_selected must be >= 0, got {num_selected}")
    if temporal_patch < 1:
        raise ValueError(f"temporal_patch must be >= 1, got {temporal_patch}")
    if l_max < temporal_patch or l_max % temporal_patch != 0:
        raise ValueError(f"l_max ({l_max}) must be a positive multiple of temporal_patch ({temporal_patch})")
    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")
    # §3.2 / §A.7: fewer frames per clip for shorter inputs, keeping T = T_max steps where possible.
    t_max = math.ceil(k_max / l_max)
    clip = min(l_max, math.ceil(num_selected / t_max))
    clip = math.ceil(clip / temporal_patch) * temporal_patch  # whole temporal patches
    return max(clip, temporal_patch)


def partition_clips(indices: Any, clip_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Split selected frame indices into T = ceil(K_V / L) clips of L = clip_len frames (Eq. 3).

    Returns ``(clips, mask)``: ``clips`` is int64 [T, L] padded with -1 in the last clip, ``mask``
    is bool [T, L] (True = real frame). Empty input gives arrays of shape (0, L).
    """
    if clip_len < 1:
        raise ValueError(f"clip_len must be >= 1, got {clip_len}")
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)  # [K_V]
    k_v = idx.shape[0]
    num_clips = math.ceil(k_v / clip_len)  # Eq. 3: T = ceil(K_V / L)
    flat = np.full(num_clips * clip_len, -1, dtype=np.int64)
    flat[:k_v] = idx
    mask = np.zeros(num_clips * clip_len, dtype=bool)
    mask[:k_v] = True
    return flat.reshape(num_clips, clip_len), mask.reshape(num_clips, clip_len)


@dataclass(frozen=True)
class ClipPlan:
    """How a streaming head's input is cut: K' selected frames per video (the frame budget), split
    into clips by :func:`frames_per_clip` with K_max and L (Eq. 3: T = ceil(K_V / L) clips), each
    clip compressed to at most M evidence tokens (Eq. 5).

    Training records its plan in the head's config (``training.features``: K' = K_max = the feature
    cache's ``max_frames``); serving's is the index's K_max, L, M and the engine's default K'. Two
    plans *agree* when they have the same K' and M and cut every frame count up to K' into the same
    clips (``frames_per_clip`` of 1..K'): K_max and L themselves may differ (serving's K_max is the
    index's, e.g. 128, while training's is its K'), the clips the head sees may not."""

    frames: int  # K': frames selected per video
    max_frames: int  # K_max of frames_per_clip (Eq. 3)
    clip_len: int  # L at the full budget
    max_evidence: int  # M evidence tokens per clip

    def __post_init__(self) -> None:
        for name in ("frames", "max_frames", "clip_len", "max_evidence"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"a clip plan's {name} must be >= 1, got {getattr(self, name)}")

    def clip_lengths(self, temporal_patch: int = 2) -> list[int]:
        """Frames per clip for a video of 1, 2, ..., K' selected frames."""
        return [
            frames_per_clip(n, k_max=self.max_frames, l_max=self.clip_len, temporal_patch=temporal_patch)
            for n in range(1, self.frames + 1)
        ]

    def describe(self, temporal_patch: int = 2) -> str:
        length = self.clip_lengths(temporal_patch)[-1]
        clips = math.ceil(self.frames / length)
        return (
            f"K'={self.frames} frames in {clips} clips of {length} (K_max={self.max_frames}, "
            f"L={self.clip_len}), M={self.max_evidence}"
        )

    def differences(self, other: ClipPlan, temporal_patch: int = 2) -> list[str]:
        """What differs between this plan and ``other`` (empty: they agree; see the class)."""
        out = []
        if self.frames != other.frames:
            out.append(f"K' {self.frames} vs {other.frames}")
        if self.max_evidence != other.max_evidence:
            out.append(f"M {self.max_evidence} vs {other.max_evidence}")
        upto = min(self.frames, other.frames)
        mine, theirs = self.clip_lengths(temporal_patch)[:upto], other.clip_lengths(temporal_patch)[:upto]
        cut = [n for n, (a, b) in enumerate(zip(mine, theirs, strict=True), start=1) if a != b]
        if cut:
            n = cut[-1]
            out.append(f"{n} frames cut into clips of {mine[n - 1]} vs {theirs[n - 1]}")
        return out

    def to_dict(self) -> dict:
        return {
            "frames": self.frames,
            "max_frames": self.max_frames,
            "clip_len": self.clip_len,
            "max_evidence": self.max_evidence,
        }

    @classmethod
    def from_dict(cls, data: dict) -> ClipPlan:
        return cls(**{k: int(data[k]) for k in ("frames", "max_frames", "clip_len", "max_evidence")})
