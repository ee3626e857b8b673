"""Feature cache: the frozen backbone's outputs, computed once and reused every epoch (§3.4, §A.1).

Only the streaming head trains, so everything upstream of it is a fixed function of the data:

    stream item (video ref [+ window] [+ conditioning text]) -> evidence banks E_1..E_T  (Eq. 2-5)
    text (query, label, answer)                                -> q, L2-normalised     (Eq. 1)

Items are keyed by ``Side.key()`` (plus ``|cond:<query>`` for query-conditioned candidates, Eq. 1
second case: each candidate encoded under each query of its bounded set). The cache lives in
``CACHE_DIR/<fingerprint>/`` where the fingerprint hashes the backbone fingerprint and every
selection/streaming setting, so a different backbone or budget never reads stale features. Evidence
is stored in shards (``torch.save``, float16 tokens) listed by ``manifest.json``; a later build adds
only the missing items in new shards. Frames are decoded from the source videos on demand by index
(§A.2) and never written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from core.config import DEFAULT_TEXT_CONDITIONING, QFRAME_TEMPERATURE, TextConditioning
from core.files import atomic_path, atomic_write
from training.data import Pair, Side, VideoRef

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
SCORINGS = ("indexable", "conditioned")


@dataclass(frozen=True)
class FeatureSettings:
    """Everything besides the backbone that determines the cached features."""

    max_frames: int = 32  # K_max (paper: 128; small for CPU work)
    clip_len: int = 4  # L at the full budget (paper: 16) -> T = 8 steps like the paper
    max_evidence: int = 64  # M evidence tokens per clip (paper: 256)
    selection: str = "uniform"  # uniform | query-aware (Q-Frame, used for conditioned items, §A.4)
    candidate_per_second: float = 1.0  # frame-bank candidates for query-aware selection
    candidate_max: int = 256
    qframe_temperature: float = QFRAME_TEMPERATURE  # in units of the bank scores' spread
    selection_seed: int = 0  # combined with each item's query and video (models.selection.selection_seed)
    text_conditioning: str = DEFAULT_TEXT_CONDITIONING  # where a conditioned item's query text goes
    instruction: str | None = None
    clip_batch_size: int = 16

    def __post_init__(self) -> None:
        if self.selection not in ("uniform", "query-aware"):
            raise ValueError(f"selection must be 'uniform' or 'query-aware', got {self.selection!r}")
        for name in ("max_frames", "clip_len", "max_evidence", "candidate_max", "clip_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")

    def fingerprint_fields(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("clip_batch_size")  # batching does not change the features
        return d

    def clip_plan(self):
        """The clip plan these features cut (models.selection.ClipPlan): K' = K_max = ``max_frames``
        selected frames per item, clips by frames_per_clip(K_max, L), M tokens per clip."""
        from models.selection import ClipPlan

        return ClipPlan(self.max_frames, self.max_frames, self.clip_len, self.max_evidence)


def conditioned_key(candidate: Side, query_text: str) -> str:
    return f"{candidate.key()}|cond:{query_text}"


@dataclass(frozen=True)
class StreamItem:
    key: str
    video: VideoRef
    text: str | None  # conditioning text for the backbone (QA question, or the query when conditioned)
    select_query: str | None  # text that drives query-aware selection (None: uniform)


def required_items(
    pairs: Iterable[Pair], *, scoring: str = "indexable"
) -> tuple[list[StreamItem], list[str]]:
    """The stream items and texts a set of pairs needs under a scoring mode (Eq. 1)."""
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}")
    items: dict[str, StreamItem] = {}
    texts: dict[str, None] = {}

    def add(side: Side, *, cond: str | None = None) -> None:
        if side.video is None:
            texts[side.text] = None
            return
        if cond is None:
            items.setdefault(side.key(), StreamItem(side.key(), side.video, side.text, side.text))
        else:
            key = conditioned_key(side, cond)
            items.setdefault(key, StreamItem(key, side.video, cond, cond))

    for pair in pairs:
        add(pair.query)
        add(pair.positive)
        for cand in pair.candidates:
            add(cand)
        if scoring == "conditioned" and pair.query.video is None and pair.positive.video is not None:
            if not pair.candidates:
                raise ValueError(
                    f"pair {pair.id!r}: query-conditioned scoring needs a bounded candidate set (Eq. 1)"
                )
            for cand in pair.candidates:
                add(cand, cond=pair.query.text)
            add(pair.positive, cond=pair.query.text)
    return list(items.values()), list(texts)


class FeatureStore:
    """Read side of the cache: evidence banks by item key, text embeddings by text."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        manifest_path = self.directory / "manifest.json"
        if not manifest_path.is_file():
            raise FileNotFoundError(f"{self.directory} is not a feature cache (no manifest.json)")
        self.manifest = json.loads(manifest_path.read_text())
        if self.manifest.get("version") != FORMAT_VERSION:
            raise ValueError(f"feature cache format {self.manifest.get('version')} != {FORMAT_VERSION}")
        self.evidence: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for shard in self.manifest["shards"]:
            for key, (tokens, mask) in torch.load(self.directory / shard, weights_only=True).items():
                self.evidence[key] = (tokens, mask)
        self.texts: dict[str, torch.Tensor] = {}
        for shard in self.manifest["text_shards"]:
            data = torch.load(self.directory / shard, weights_only=True)
            for text, row in zip(data["texts"], data["embeddings"], strict=True):
                self.texts[text] = row
        self.hidden_size = int(self.manifest["hidden_size"])
        self.embed_dim = int(self.manifest["embed_dim"])

    @property
    def fingerprint(self) -> str:
        return self.manifest["fingerprint"]

    @property
    def clip_plan(self):
        """The clip plan of the cached features (:meth:`FeatureSettings.clip_plan`), which a head
        trained on them records (training.trainer)."""
        settings = self.manifest["settings"]
        keys = ("max_frames", "clip_len", "max_evidence")
        return FeatureSettings(**{k: settings[k] for k in keys}).clip_plan()

    def banks(self, key: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Evidence of one item: tokens [T, M', D] float32, mask [T, M'] bool."""
        try:
            tokens, mask = self.evidence[key]
        except KeyError:
            raise KeyError(f"item not in the feature cache {self.directory}: {key!r} (rebuild it)") from None
        return tokens.float(), mask

    def text(self, text: str) -> torch.Tensor:
        try:
            return self.texts[text]
        except KeyError:
            raise KeyError(f"text not in the feature cache {self.directory}: {text!r}") from None


def cache_fingerprint(backbone_fingerprint: str, settings: FeatureSettings) -> str:
    fields = {"backbone": backbone_fingerprint, **settings.fingerprint_fields()}
    if settings.selection == "query-aware":  # seeded per (seed, query, video): caches drawn with
        # the older per-item-key seeds select other frames and are not reused
        fields["selection_seeds"] = "seed,query,candidate"
    blob = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _window_indices(video: VideoRef, num_frames: int, fps: float) -> np.ndarray:
    first = 0 if video.start_s is None else int(np.ceil(video.start_s * fps - 1e-6))
    stop = num_frames if video.end_s is None else min(num_frames, int(np.ceil(video.end_s * fps - 1e-6)))
    if stop <= first:
        raise ValueError(f"window [{video.start_s}, {video.end_s}] s of {video.path} contains no frame")
    return np.arange(first, stop)


class _Selector:
    """Eq. 2: uniform or query-aware (Q-Frame) frame indices for a stream item."""

    def __init__(self, backbone, settings: FeatureSettings, frames_of=None):
        self.backbone = backbone
        self.settings = settings
        self.frames_of = frames_of or _FrameCache(backbone)
        self._bank: dict[str, tuple[np.ndarray, torch.Tensor]] = {}  # path -> candidate frames, embeddings

    def select(self, item: StreamItem, info) -> np.ndarray:
        from models.selection import query_aware_positions, uniform_indices

        video, s = item.video, self.settings
        if video.frames is not None:
            if max(video.frames) >= info.num_frames:
                raise ValueError(f"{video.path}: frame index {max(video.frames)} >= {info.num_frames} frames")
            return np.asarray(video.frames, dtype=np.int64)
        window = _window_indices(video, info.num_frames, info.fps)
        if s.selection == "uniform" or item.select_query is None:
            return window[uniform_indices(len(window), s.max_frames)]
        cands = self._bank[video.path][0] if video.path in self._bank else self._candidates(info)
        inside = (cands >= window[0]) & (cands <= window[-1])
        if inside.sum() <= s.max_frames:  # nothing to choose: every bank frame, as stage 2 does
            return cands[inside] if inside.any() else window[uniform_indices(len(window), s.max_frames)]
        cands, emb = self._frame_bank(video.path, info)  # embedded only where there is a choice
        q = self.backbone.embed_texts([item.select_query], instruction=s.instruction)[0].float().cpu()
        scores = emb[torch.from_numpy(inside)] @ q  # frame-query similarity
        pos = query_aware_positions(
            scores, s.max_frames, temperature=s.qframe_temperature, seed=self.seed_for(item)
        )
        return cands[inside][pos]

    def seed_for(self, item: StreamItem) -> int:
        """The selection seed of a query-aware item: (training seed, the query that selects, the
        candidate's video), by the one derivation serving uses too (models.selection.selection_seed:
        engine.tiers.encoded passes the request seed, the query and the candidate's video id)."""
        from models.selection import query_key, selection_seed

        return selection_seed(self.settings.selection_seed, query_key(item.select_query), item.video.key())

    def _candidates(self, info) -> np.ndarray:
        from indexer.video import candidate_frame_indices

        s = self.settings
        return candidate_frame_indices(info, max_frames=s.candidate_max, per_second=s.candidate_per_second)

    def _frame_bank(self, path: str, info) -> tuple[np.ndarray, torch.Tensor]:
        if path not in self._bank:
            s = self.settings
            cands = self._candidates(info)
            frames = self.frames_of(path, info, cands)
            emb = self.backbone.embed_images(frames, instruction=s.instruction).float().cpu()
            self._bank[path] = (cands, emb)
        return self._bank[path]


def build_cache(
    cache_root: str | os.PathLike,
    *,
    backbone,
    pairs: Sequence[Pair],
    settings: FeatureSettings = FeatureSettings(),
    scoring: str = "indexable",
    videos_per_call: int = 8,
    shard_size: int = 512,
    progress: bool = True,
) -> Path:
    """Encode (once) every item and text ``pairs`` need and return the cache directory."""
    from tqdm import tqdm

    from indexer.video import probe_video
    from models.backbone import VideoClip
    from models.streaming import StreamingConfig, VideoEncoder

    fingerprint = cache_fingerprint(backbone.fingerprint, settings)
    directory = Path(cache_root) / fingerprint
    directory.mkdir(parents=True, exist_ok=True)
    manifest_path = directory / "manifest.json"
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
    else:
        manifest = {
            "version": FORMAT_VERSION,
            "fingerprint": fingerprint,
            "backbone": backbone.model_id,
            "backbone_fingerprint": backbone.fingerprint,
            "hidden_size": backbone.hidden_size,
            "embed_dim": backbone.embed_dim,
            "settings": settings.fingerprint_fields(),
            "shards": [],
            "text_shards": [],
            "keys": [],
            "text_keys": [],
        }
    have_items, have_texts = set(manifest["keys"]), set(manifest["text_keys"])
    items, texts = required_items(pairs, scoring=scoring)
    todo = [it for it in items if it.key not in have_items]
    todo_texts = [t for t in texts if t not in have_texts]
    logger.info(
        "feature cache %s: %d items (%d new), %d texts (%d new)",
        directory,
        len(items),
        len(todo),
        len(texts),
        len(todo_texts),
    )
    config = StreamingConfig(
        max_frames=settings.max_frames,
        clip_len=settings.clip_len,
        max_evidence=settings.max_evidence,
        clip_batch_size=settings.clip_batch_size,
    )
    # an item's own text (a QA question) goes after the video, the reference order; a query that
    # conditions a candidate goes where settings.text_conditioning says (as stage 2 will put it)
    encoder = VideoEncoder(
        backbone, config=config, instruction=settings.instruction, text_conditioning=TextConditioning.AFTER
    )
    conditioned = VideoEncoder(
        backbone,
        config=config,
        instruction=settings.instruction,
        text_conditioning=settings.text_conditioning,
    )
    if todo_texts:
        embs = torch.cat(
            [encoder.embed_queries(todo_texts[i : i + 64]) for i in range(0, len(todo_texts), 64)]
        )
        name = f"texts-{len(manifest['text_shards']):04d}.pt"
        _atomic_save({"texts": todo_texts, "embeddings": embs.float()}, directory / name)
        manifest["text_shards"].append(name)
        manifest["text_keys"].extend(todo_texts)
        _write_manifest(manifest, manifest_path)

    frames_of = _FrameCache(backbone)
    selector = _Selector(backbone, settings, frames_of)
    memo: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # evidence by (frames, text used)
    infos: dict[str, object] = {}
    shard: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def flush() -> None:
        if not shard:
            return
        name = f"evidence-{len(manifest['shards']):04d}.pt"
        _atomic_save(dict(shard), directory / name)
        manifest["shards"].append(name)
        manifest["keys"].extend(shard)
        _write_manifest(manifest, manifest_path)
        shard.clear()

    bar = tqdm(total=len(todo), desc="encoding evidence", unit="item", disable=not progress)
    # conditioned and plain items are encoded in separate batches (they differ in text placement)
    todo.sort(key=lambda it: "|cond:" in it.key)
    for start in range(0, len(todo), videos_per_call):
        chunk = todo[start : start + videos_per_call]
        for kind in (False, True):
            part = [it for it in chunk if ("|cond:" in it.key) == kind]
            if not part:
                continue
            coder = conditioned if kind else encoder
            keys, todo_sets = [], {}  # each item's memo key; the new keys' (item, frames) to encode
            for item in part:
                if item.video.path not in infos:
                    infos[item.video.path] = probe_video(item.video.path)
                info = infos[item.video.path]
                indices = selector.select(item, info)
                # the evidence is a function of the frames (and of the text where the prompt holds
                # it): an item whose frames were already encoded reuses them (e.g. one candidate
                # under each query of its set, selection keeping every frame, no text in the prompt)
                text = None if coder.text_conditioning == TextConditioning.NONE else item.text
                key = (
                    item.video.path,
                    tuple(int(i) for i in indices),
                    text and str(coder.text_conditioning),
                    text,
                )
                keys.append(key)
                if key not in memo and key not in todo_sets:
                    frames = frames_of(item.video.path, info, indices)  # decoded on demand, §A.2
                    todo_sets[key] = (item, VideoClip(frames=frames, frame_indices=indices, fps=info.fps))
            if todo_sets:
                new = list(todo_sets.values())
                banks = coder.evidence([f for _, f in new], texts=[it.text for it, _ in new])
                for key, bank in zip(todo_sets, banks, strict=True):
                    memo[key] = (bank.tokens.to(torch.float16).cpu(), bank.mask.cpu())
            for item, key in zip(part, keys, strict=True):
                shard[item.key] = memo[key]
        bar.update(len(chunk))
        if len(shard) >= shard_size:
            flush()
    flush()
    bar.close()
    return directory


class _FrameCache:
    """Decoded frames of the last few videos, by frame index: query-conditioned items select
    overlapping frames of the same video many times (once per query), each decoded once."""

    def __init__(self, backbone, videos: int = 16):
        self.backbone = backbone
        self.videos = videos
        self._frames: dict[str, dict[int, np.ndarray]] = {}

    def __call__(self, path: str, info, indices: np.ndarray) -> np.ndarray:
        from indexer.video import decode_frames

        have = self._frames.pop(path, {})
        self._frames[path] = have  # most recently used last
        while len(self._frames) > self.videos:
            self._frames.pop(next(iter(self._frames)))
        missing = sorted({int(i) for i in indices} - set(have))
        if missing:
            shape = self.backbone.frame_shape(info.width, info.height)
            for i, frame in zip(missing, decode_frames(path, missing, size=shape), strict=True):
                have[i] = frame
        return np.stack([have[int(i)] for i in indices])


def _atomic_save(obj, path: Path) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _write_manifest(manifest: dict, path: Path) -> None:
    atomic_write(path, json.dumps(manifest, indent=1) + "\n")
