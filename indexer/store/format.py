"""The index directory's format: file names, the manifest, records, and the errors readers raise.

Files of one index directory (format version 1; docs/architecture.md describes each in full):

    manifest.json        :class:`Manifest` as JSON (settings the index was built with, counts)
    meta.sqlite          the metadata store and journal (``indexer.store.db``): one row per source
                         video, indexed or failed, and a small key/value state table; the videos'
                         text tracks and cues, with an FTS5 index over the cues' text
    index.faiss          FAISS (inner product, ``IDMap2``) over the final video embeddings; derived
                         from the embeddings in ``meta.sqlite``
    bank/bank-NNNNNNNN.npy
                         float16 [rows, d] frame-bank embeddings of one committed batch
    frames/frames-NNNNNNNN.bin
                         the frame store (``indexer.store.frames``): the pixels of that batch's
                         frame-bank frames, when the index keeps them (manifest ``frame_store``)

Edge frames (``indexer.edges``: source frames inside the bank's largest changes, embedded at build
time) live in ``meta.sqlite`` beside each video's row; an index written before them has none.

Every file is replaced atomically (``core.files``); the commit point of a batch is the SQLite
transaction that references its bank file.
"""

from __future__ import annotations

import io
import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from core.config import BANK_LEGACY_MAX_FRAMES, BANK_PER_SECOND, Embedder, FrameStore, candidate_policy
from core.files import atomic_write

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
METADATA = "meta.sqlite"
FAISS_FILE = "index.faiss"
BANK_DIR = "bank"
BUILTIN_FILTER_FIELDS = ("duration_s", "fps", "num_frames", "width", "height")
STATUS_INDEXED, STATUS_FAILED = "indexed", "failed"

# A frame-bank file as recorded in the metadata store: nothing else is ever opened by a reader, so
# a damaged or hostile store cannot point a reader at a file outside the index directory.
_BANK_NAME = re.compile(rf"^{BANK_DIR}/bank-\d{{8}}\.npy$")


class IndexFormatError(Exception):
    """The index directory is missing files, is corrupt, or has an unknown format version."""


class IndexMismatchError(Exception):
    """The index was built with a different backbone or head than the one loaded."""


@dataclass
class Manifest:
    backbone_id: str
    backbone_fingerprint: str
    head_fingerprint: str  # Embedder.ONESHOT ("oneshot") for one-shot indexes
    embedder: str  # an Embedder value
    embed_dim: int
    hidden_size: int
    frame_size: int
    max_frames: int  # K
    clip_len: int  # L
    num_think_tokens: int | None  # N
    max_evidence: int  # M
    candidate_policy: dict = field(default_factory=candidate_policy)
    faiss_factory: str = "IDMap2,Flat"
    counts: dict = field(default_factory=lambda: {STATUS_INDEXED: 0, STATUS_FAILED: 0})
    built_at: str = ""
    instruction: str | None = None
    # a core.config.FrameStore value; indexes written before the frame store existed have "none"
    frame_store: str = FrameStore.NONE
    # the format this code writes (IndexWriter.create stamps it on every new index)
    format_version: int = field(default=FORMAT_VERSION, kw_only=True)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> Manifest:
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise IndexFormatError(
                f"unknown index format version {version!r} (this code reads version {FORMAT_VERSION}); "
                "rebuild the index with this version of `indexer build`"
            )
        names = {f.name for f in fields(cls)}
        missing = names - set(data) - {"instruction", "built_at", "frame_store"}
        if missing:
            raise IndexFormatError(f"manifest.json lacks {sorted(missing)}")
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def bank_per_second(self) -> float:
        return float(self.candidate_policy.get("per_second", BANK_PER_SECOND))

    @property
    def bank_max_frames(self) -> int:
        # a policy that records no cap predates the per-hour bound: its videos were capped at 256
        return int(self.candidate_policy.get("max_frames", BANK_LEGACY_MAX_FRAMES))

    @property
    def uses_head(self) -> bool:
        return self.embedder == Embedder.QASLR

    def streaming_config(self, *, clip_batch_size: int = 8):
        """The K, L, M this index was built with, as the encoder's config (queries and stage 2 must
        encode exactly as the build did); ``clip_batch_size`` is a throughput knob, not recorded."""
        from models.streaming import StreamingConfig

        return StreamingConfig(
            max_frames=self.max_frames,
            clip_len=self.clip_len,
            max_evidence=self.max_evidence,
            clip_batch_size=clip_batch_size,
        )

    def build_settings(self) -> dict:
        """The fields that must agree for two builds to write into the same index."""
        keys = (
            "backbone_fingerprint",
            "head_fingerprint",
            "embedder",
            "embed_dim",
            "frame_size",
            "max_frames",
            "clip_len",
            "max_evidence",
            "candidate_policy",
            "instruction",
            "frame_store",
        )
        return {k: getattr(self, k) for k in keys}


@dataclass
class VideoRecord:
    id: str
    faiss_id: int  # -1 for failed videos (not in FAISS)
    path: str
    fingerprint: str
    fps: float
    num_frames: int
    duration_s: float
    width: int
    height: int
    metadata: dict
    status: str  # STATUS_INDEXED | STATUS_FAILED
    error: str | None


@dataclass
class FrameBank:
    frame_indices: np.ndarray  # [C] int64, increasing
    timestamps: np.ndarray  # [C] float64 seconds
    embeddings: np.ndarray  # [C, d] float16 (memory-mapped, read-only)


@dataclass
class Entry:
    """One video ready to be committed by ``IndexWriter`` (indexed or failed)."""

    record: VideoRecord
    embedding: np.ndarray | None = None  # [d] float32, L2-normalised (None when failed)
    bank_indices: np.ndarray | None = None  # [C] int64
    bank_embeddings: np.ndarray | None = None  # [C, d] float16
    source_stat: str | None = None  # "size:mtime_ns" of the source file when it was read
    stored_frames: object = None  # indexer.store.frames.EncodedFrames: the bank frames' pixels
    tracks: list | None = None  # indexer.subtitles.TextTrack s (None: text tracks were not read)
    tracks_stat: str | None = None  # the sidecar signature they were read with (tracks.sidecar_signature)
    edge_indices: np.ndarray | None = None  # [E] int64 edge frames (indexer.edges; None: none kept)
    edge_embeddings: np.ndarray | None = None  # [E, d] float16


def read_manifest(directory: str | os.PathLike) -> Manifest:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise IndexFormatError(f"{directory} is not an index directory: {MANIFEST} not found")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexFormatError(f"{path} is unreadable or not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise IndexFormatError(f"{path} is not a JSON object")
    try:
        return Manifest.from_dict(data)
    except TypeError as exc:
        raise IndexFormatError(f"{path}: {exc}") from exc


def write_manifest(directory: Path, manifest: Manifest) -> None:
    atomic_write(Path(directory) / MANIFEST, manifest.to_json().encode())


def require_same_settings(existing: Manifest, wanted: Manifest) -> None:
    """Refuse to resume or extend an index with settings other than the ones it was built with."""
    a, b = existing.build_settings(), wanted.build_settings()
    diff = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
    if diff:
        detail = "; ".join(f"{k}: index has {x!r}, this build has {y!r}" for k, (x, y) in diff.items())
        raise IndexMismatchError(
            f"the existing index was built with different settings ({detail}); use a new --index "
            "directory or the same model, head and options"
        )


def bank_file_name(commit_seq: int) -> str:
    return f"{BANK_DIR}/bank-{commit_seq:08d}.npy"


def is_bank_file_name(name: object) -> bool:
    """True for the only form a frame-bank reference may take (``bank/bank-NNNNNNNN.npy``)."""
    return isinstance(name, str) and _BANK_NAME.match(name) is not None


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
