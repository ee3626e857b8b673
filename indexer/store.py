"""The index directory: format, atomic writer, read API (DESIGN.md, "The index directory").

Files of one index directory (format version 1); every file is written to a temporary name in the
same directory and then ``os.replace``d, so a reader never sees half a file:

    manifest.json       :class:`Manifest` as JSON: format version, backbone id + fingerprint, head
                        fingerprint (or "oneshot"), embedder, dims, K, L, N, M, the candidate-frame
                        policy, the FAISS factory, counts, build time. Rewritten after every commit.
    meta.sqlite         SQLite, the journal and the source of truth. Table ``videos``: one row per
                        source video (indexed *and* failed, with the failure reason): stable id,
                        FAISS id, path, content fingerprint, fps, frame count, duration, size, user
                        metadata (JSON), status, error, the final embedding v_j (float32 bytes),
                        the frame bank location (file, row offset, row count), the candidate frame
                        indices (int64 bytes) and the source file's size:mtime (to notice edits
                        without re-reading files). Table ``state``: key/value (next FAISS id, commit
                        sequence). A batch of videos becomes part of the index in one SQLite
                        transaction; anything written before that commit and not referenced by it is
                        an orphan that the next writer deletes.
    index.faiss         the FAISS index of final video embeddings (inner product over L2-normalised
                        vectors) wrapped in ``IDMap2``, so ids are stable integers (``faiss_id``). It is
                        derived from the embeddings in ``meta.sqlite``: written at checkpoints and at
                        the end of a build; a reader adds any committed embedding the file lacks and
                        ignores ids that are no longer in the metadata store, so a crash between the
                        SQLite commit and the FAISS checkpoint loses nothing.
    bank/bank-NNNNNNNN.npy
                        the frame bank of one committed batch: float16 [rows, d] image embeddings of
                        the candidate frames (about one per second, at most 256 per video) of every
                        video in the batch, concatenated; memory-mapped by readers. Frames are stored
                        as indices into the source video, never as images (paper §A.2); timestamps
                        are ``index / fps``.

Crash safety: the bank file is renamed into place before the SQLite transaction that references it;
so the commit point of a batch is the SQLite commit, and a crash loses at most the batch in flight.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
METADATA = "meta.sqlite"
FAISS_FILE = "index.faiss"
BANK_DIR = "bank"
BUILTIN_FILTER_FIELDS = ("duration_s", "fps", "num_frames", "width", "height")

# Default FAISS choice by corpus size: exact search while it is cheap, HNSW beyond (no training, so
# incremental adds keep working). Any factory string can be forced with --faiss-factory.
EXACT_MAX_VECTORS = 50_000


class IndexFormatError(Exception):
    """The index directory is missing files, is corrupt, or has an unknown format version."""


class IndexMismatchError(Exception):
    """The index was built with a different backbone or head than the one loaded."""


@dataclass
class Manifest:
    format_version: int
    backbone_id: str
    backbone_fingerprint: str
    head_fingerprint: str  # "oneshot" for one-shot indexes
    embedder: str  # "qaslr" | "oneshot"
    embed_dim: int
    hidden_size: int
    frame_size: int
    max_frames: int  # K
    clip_len: int  # L
    num_think_tokens: int | None  # N
    max_evidence: int  # M
    candidate_policy: dict = field(default_factory=lambda: {"per_second": 1.0, "max_frames": 256})
    faiss_factory: str = "IDMap2,Flat"
    counts: dict = field(default_factory=lambda: {"indexed": 0, "failed": 0})
    built_at: str = ""
    instruction: str | None = None

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
        missing = names - set(data) - {"instruction", "built_at"}
        if missing:
            raise IndexFormatError(f"manifest.json lacks {sorted(missing)}")
        return cls(**{k: v for k, v in data.items() if k in names})

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
    status: str  # "indexed" | "failed"
    error: str | None


@dataclass
class FrameBank:
    frame_indices: np.ndarray  # [C] int64, increasing
    timestamps: np.ndarray  # [C] float64 seconds
    embeddings: np.ndarray  # [C, d] float16 (memory-mapped, read-only)


@dataclass
class Entry:
    """One video ready to be committed by :class:`IndexWriter` (indexed or failed)."""

    record: VideoRecord
    embedding: np.ndarray | None = None  # [d] float32, L2-normalised (None when failed)
    bank_indices: np.ndarray | None = None  # [C] int64
    bank_embeddings: np.ndarray | None = None  # [C, d] float16
    source_stat: str | None = None  # "size:mtime_ns" of the source file when it was read


# -- small helpers --------------------------------------------------------------------------------


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory, fsync, then rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _npy_bytes(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def normalize_factory(factory: str) -> str:
    factory = factory.strip()
    return factory if factory.upper().startswith("IDMAP") else f"IDMap2,{factory}"


def default_factory(num_vectors: int) -> str:
    return "IDMap2,Flat" if num_vectors <= EXACT_MAX_VECTORS else "IDMap2,HNSW32,Flat"


def make_faiss_index(factory: str, dim: int, embeddings: np.ndarray, ids: np.ndarray):
    """Build a FAISS index from scratch (training first when the factory needs it). When there are
    too few vectors to train (e.g. IVF with few videos) it falls back to exact search and says so."""
    import faiss

    factory = normalize_factory(factory)
    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        nlist = _ivf_nlist(index)
        if len(embeddings) < max(nlist, 1) * 39:
            logger.warning(
                "FAISS factory %r needs at least %d vectors to train; the index has %d: using exact search",
                factory,
                max(nlist, 1) * 39,
                len(embeddings),
            )
            factory = "IDMap2,Flat"
            index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        else:
            train = np.ascontiguousarray(embeddings, dtype=np.float32)
            if len(train) > nlist * 256:  # FAISS's own cap on useful training points; fixed seed
                pick = np.sort(np.random.default_rng(0).choice(len(train), nlist * 256, replace=False))
                train = train[pick]
            index.train(train)
    if len(embeddings):
        index.add_with_ids(np.ascontiguousarray(embeddings, dtype=np.float32), ids.astype(np.int64))
    return index, factory


def _ivf_nlist(index) -> int:
    import faiss

    with contextlib.suppress(Exception):
        inner = faiss.downcast_index(index.index if hasattr(index, "index") else index)
        return int(faiss.extract_index_ivf(inner).nlist)
    return 0


def faiss_ids(index) -> np.ndarray:
    import faiss

    return faiss.vector_to_array(index.id_map).astype(np.int64)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS videos (
    id TEXT PRIMARY KEY,
    faiss_id INTEGER NOT NULL,
    path TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    fps REAL NOT NULL,
    num_frames INTEGER NOT NULL,
    duration_s REAL NOT NULL,
    width INTEGER NOT NULL,
    height INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    embedding BLOB,
    bank_file TEXT,
    bank_offset INTEGER,
    bank_count INTEGER,
    frame_indices BLOB,
    commit_seq INTEGER NOT NULL,
    indexed_at TEXT NOT NULL,
    source_stat TEXT
);
CREATE INDEX IF NOT EXISTS videos_faiss ON videos(faiss_id);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_RECORD_COLUMNS = (
    "id, faiss_id, path, fingerprint, fps, num_frames, duration_s, width, height, metadata, status, error"
)


def _record(row) -> VideoRecord:
    return VideoRecord(
        id=row[0],
        faiss_id=int(row[1]),
        path=row[2],
        fingerprint=row[3],
        fps=float(row[4]),
        num_frames=int(row[5]),
        duration_s=float(row[6]),
        width=int(row[7]),
        height=int(row[8]),
        metadata=json.loads(row[9]),
        status=row[10],
        error=row[11],
    )


def read_manifest(directory: str | os.PathLike) -> Manifest:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise IndexFormatError(f"{directory} is not an index directory: {MANIFEST} not found")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise IndexFormatError(f"{path} is unreadable or not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise IndexFormatError(f"{path} is not a JSON object")
    try:
        return Manifest.from_dict(data)
    except TypeError as exc:
        raise IndexFormatError(f"{path}: {exc}") from exc


# -- writer ---------------------------------------------------------------------------------------


class IndexWriter:
    """Creates or reopens an index directory and commits batches of videos atomically.

    Use :meth:`create` for a new directory (or to resume one built with the same settings) and
    :meth:`open` for ``add``/``remove`` on an existing index. Not thread-safe: one writer per index.
    """

    def __init__(self, directory: Path, manifest: Manifest, conn: sqlite3.Connection):
        self.directory = directory
        self.manifest = manifest
        self.conn = conn
        (directory / BANK_DIR).mkdir(exist_ok=True)
        self._cleanup_orphans()
        self._dirty = False
        self._index = self._load_or_rebuild_faiss()
        self.checkpoint()  # the directory is a complete, readable index from the start

    # construction -------------------------------------------------------------------------------
    @classmethod
    def create(cls, directory: str | os.PathLike, manifest: Manifest) -> IndexWriter:
        """Open ``directory`` for building. A new or empty directory is initialised; an existing index
        is reopened (resume) when its build settings equal ``manifest``'s, else IndexMismatchError."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if (directory / MANIFEST).exists():
            existing = read_manifest(directory)
            _require_same_settings(existing, manifest)
            return cls.open(directory)
        if not _only_leftovers_of_a_new_index(directory):
            raise IndexFormatError(
                f"{directory} is not empty and has no {MANIFEST}; refusing to write an index into it"
            )
        manifest.format_version = FORMAT_VERSION
        manifest.faiss_factory = normalize_factory(manifest.faiss_factory)
        manifest.built_at = manifest.built_at or _now()
        conn = _connect_rw(directory / METADATA)
        with conn:
            conn.executescript(_SCHEMA)
        atomic_write_bytes(directory / MANIFEST, manifest.to_json().encode())
        return cls(directory, manifest, conn)

    @classmethod
    def open(cls, directory: str | os.PathLike) -> IndexWriter:
        directory = Path(directory)
        manifest = read_manifest(directory)
        if not (directory / METADATA).is_file():
            raise IndexFormatError(f"{directory}: {METADATA} not found")
        conn = _connect_rw(directory / METADATA)
        with conn:
            conn.executescript(_SCHEMA)
        return cls(directory, manifest, conn)

    # queries ------------------------------------------------------------------------------------
    def finished(self) -> dict[str, tuple[str, str, str | None]]:
        """Every video already in the store: id -> (fingerprint, status, source stat)."""
        return {
            r[0]: (r[1], r[2], r[3])
            for r in self.conn.execute("SELECT id, fingerprint, status, source_stat FROM videos")
        }

    def counts(self) -> dict[str, int]:
        out = {"indexed": 0, "failed": 0}
        for status, n in self.conn.execute("SELECT status, COUNT(*) FROM videos GROUP BY status"):
            out[status] = int(n)
        return out

    def _state(self, key: str, default: int = 0) -> int:
        row = self.conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else default

    # writes -------------------------------------------------------------------------------------
    def commit(self, entries: Sequence[Entry]) -> None:
        """Make a batch part of the index: bank file first (renamed into place), then one SQLite
        transaction (the commit point), then the manifest counts. FAISS follows in memory and is
        checkpointed by :meth:`checkpoint`."""
        if not entries:
            return
        d = self.manifest.embed_dim
        seq = self._state("commit_seq") + 1
        next_id = self._state("next_faiss_id")
        bank_name = f"{BANK_DIR}/bank-{seq:08d}.npy"
        banks = [e.bank_embeddings for e in entries if e.record.status == "indexed"]
        rows, offset, new_vectors, new_ids = [], 0, [], []
        now = _now()
        for e in entries:
            r = e.record
            emb = bank_file = bank_off = bank_cnt = idx_blob = None
            faiss_id = -1
            if r.status == "indexed":
                if e.embedding is None or e.bank_embeddings is None or e.bank_indices is None:
                    raise ValueError(f"indexed video {r.id!r} needs an embedding and a frame bank")
                vec = np.asarray(e.embedding, dtype=np.float32).reshape(d)
                if e.bank_embeddings.shape[1:] != (d,) or len(e.bank_embeddings) != len(e.bank_indices):
                    raise ValueError(f"frame bank of {r.id!r} has shape {e.bank_embeddings.shape}")
                faiss_id = next_id
                next_id += 1
                emb = vec.tobytes()
                bank_file, bank_off, bank_cnt = bank_name, offset, len(e.bank_indices)
                idx_blob = np.asarray(e.bank_indices, dtype=np.int64).tobytes()
                offset += bank_cnt
                new_vectors.append(vec)
                new_ids.append(faiss_id)
            r.faiss_id = faiss_id
            rows.append(
                (
                    r.id,
                    faiss_id,
                    r.path,
                    r.fingerprint,
                    float(r.fps),
                    int(r.num_frames),
                    float(r.duration_s),
                    int(r.width),
                    int(r.height),
                    json.dumps(r.metadata, sort_keys=True),
                    r.status,
                    r.error,
                    emb,
                    bank_file,
                    bank_off,
                    bank_cnt,
                    idx_blob,
                    seq,
                    now,
                    e.source_stat,
                )
            )
        if banks:
            data = np.concatenate([np.asarray(b, dtype=np.float16) for b in banks])
            atomic_write_bytes(self.directory / bank_name, _npy_bytes(data))
        with self.conn:
            # a re-indexed id (changed content) replaces its old row; its old vector leaves FAISS
            ids = [r[0] for r in rows]
            old = [
                int(fid)
                for (fid,) in self.conn.execute(
                    f"SELECT faiss_id FROM videos WHERE id IN ({','.join('?' * len(ids))}) AND faiss_id >= 0",
                    ids,
                )
            ]
            self.conn.executemany(f"INSERT OR REPLACE INTO videos VALUES ({','.join('?' * 20)})", rows)
            self.conn.executemany(
                "INSERT OR REPLACE INTO state VALUES (?, ?)",
                [("commit_seq", str(seq)), ("next_faiss_id", str(next_id))],
            )
        if old:
            self._remove_from_faiss(np.asarray(old, dtype=np.int64))
        if new_vectors:
            self._index.add_with_ids(np.stack(new_vectors), np.asarray(new_ids, dtype=np.int64))
            self._dirty = True
        self._write_manifest()

    def remove(self, ids: Iterable[str]) -> list[str]:
        """Delete videos by id; returns the ids that were not in the index."""
        ids = list(dict.fromkeys(ids))
        found = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            query = f"SELECT id, faiss_id FROM videos WHERE id IN ({','.join('?' * len(chunk))})"
            found.update({r[0]: int(r[1]) for r in self.conn.execute(query, chunk)})
        with self.conn:
            self.conn.executemany("DELETE FROM videos WHERE id = ?", [(i,) for i in found])
        fids = np.asarray([f for f in found.values() if f >= 0], dtype=np.int64)
        if len(fids):
            self._remove_from_faiss(fids)
        self._write_manifest()
        self.checkpoint()
        self._collect_unreferenced_banks()
        return [i for i in ids if i not in found]

    def checkpoint(self) -> None:
        """Write the in-memory FAISS index to ``index.faiss`` (temp file + rename)."""
        import faiss

        if self._dirty or not (self.directory / FAISS_FILE).exists():
            atomic_write_bytes(self.directory / FAISS_FILE, faiss.serialize_index(self._index).tobytes())
            self._dirty = False

    def finalize(self, *, factory: str | None = None) -> None:
        """End of a build: (re)build FAISS with the final factory (training if needed) from the stored
        embeddings, write it, and the manifest."""
        wanted = normalize_factory(factory or self.manifest.faiss_factory)
        current = normalize_factory(self._built_factory)
        if wanted != current:
            ids, vectors = self._stored_embeddings()
            self._index, actual = make_faiss_index(wanted, self.manifest.embed_dim, vectors, ids)
            self._built_factory = actual
            self._dirty = True
        self.manifest.faiss_factory = self._built_factory
        self.checkpoint()
        self._write_manifest()

    def close(self) -> None:
        """Leave a consistent directory: FAISS synced with the metadata store and written, manifest counts."""
        try:
            self._sync_faiss()
            self.checkpoint()
            self._write_manifest()
        except Exception:  # noqa: BLE001 - the SQLite journal is intact; the next writer repairs the rest
            logger.exception("could not write the FAISS checkpoint or manifest on close")
        finally:
            self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # internals ----------------------------------------------------------------------------------
    def _write_manifest(self) -> None:
        self.manifest.counts = self.counts()
        atomic_write_bytes(self.directory / MANIFEST, self.manifest.to_json().encode())

    def _stored_embeddings(self) -> tuple[np.ndarray, np.ndarray]:
        ids, vectors = [], []
        for fid, blob in self.conn.execute(
            "SELECT faiss_id, embedding FROM videos WHERE status = 'indexed' ORDER BY faiss_id"
        ):
            ids.append(int(fid))
            vectors.append(np.frombuffer(blob, dtype=np.float32))
        d = self.manifest.embed_dim
        return np.asarray(ids, dtype=np.int64), (
            np.stack(vectors) if vectors else np.zeros((0, d), np.float32)
        )

    def _load_or_rebuild_faiss(self):
        import faiss

        path = self.directory / FAISS_FILE
        index = None
        if path.exists():
            try:
                index = faiss.read_index(str(path))
            except Exception as exc:  # corrupt file: it is derived data, rebuild it
                logger.warning("%s unreadable (%s); rebuilding it from %s", path, exc, METADATA)
        if index is not None and index.d != self.manifest.embed_dim:
            logger.warning(
                "%s has dimension %d, expected %d; rebuilding it", path, index.d, self.manifest.embed_dim
            )
            index = None
        if index is not None:
            self._index = index
            self._built_factory = self.manifest.faiss_factory
            self._sync_faiss()
            return self._index
        # interim index while building: exact search unless the factory needs no training;
        # finalize() applies a trained factory
        factory = self.manifest.faiss_factory
        probe = faiss.index_factory(
            self.manifest.embed_dim, normalize_factory(factory), faiss.METRIC_INNER_PRODUCT
        )
        if not probe.is_trained:
            factory = "IDMap2,Flat"
        ids, vectors = self._stored_embeddings()
        index, self._built_factory = make_faiss_index(factory, self.manifest.embed_dim, vectors, ids)
        self._dirty = True
        return index

    def _sync_faiss(self) -> None:
        """Make the in-memory FAISS index hold exactly the committed embeddings (after a crash or an
        interrupt between the SQLite commit and the FAISS update): add the missing, drop the extra."""
        stored = np.asarray(
            [r[0] for r in self.conn.execute("SELECT faiss_id FROM videos WHERE status = 'indexed'")],
            dtype=np.int64,
        )
        present = faiss_ids(self._index)
        extra = np.setdiff1d(present, stored)
        if len(extra):
            logger.info("dropping %d FAISS vectors of videos no longer in %s", len(extra), METADATA)
            self._remove_from_faiss(extra)
            present = faiss_ids(self._index)
        missing = np.setdiff1d(stored, present)
        if len(missing):
            logger.info("adding %d committed embeddings missing from %s", len(missing), FAISS_FILE)
            self._index.add_with_ids(self._embeddings_for(missing), missing)
            self._dirty = True

    def _embeddings_for(self, fids: np.ndarray) -> np.ndarray:
        rows = {}
        for start in range(0, len(fids), 500):
            chunk = [int(f) for f in fids[start : start + 500]]
            query = f"SELECT faiss_id, embedding FROM videos WHERE faiss_id IN ({','.join('?' * len(chunk))})"
            rows.update(
                {int(f): np.frombuffer(b, dtype=np.float32) for f, b in self.conn.execute(query, chunk)}
            )
        return np.stack([rows[int(f)] for f in fids])

    def _remove_from_faiss(self, fids: np.ndarray) -> None:
        import faiss

        try:
            self._index.remove_ids(faiss.IDSelectorBatch(fids))
        except RuntimeError:  # e.g. HNSW cannot remove: rebuild from the stored embeddings
            ids, vectors = self._stored_embeddings()
            self._index, self._built_factory = make_faiss_index(
                self._built_factory, self.manifest.embed_dim, vectors, ids
            )
        self._dirty = True

    def _cleanup_orphans(self) -> None:
        for tmp in self.directory.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
        for tmp in (self.directory / BANK_DIR).glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
        self._collect_unreferenced_banks()

    def _collect_unreferenced_banks(self) -> None:
        used = {
            r[0]
            for r in self.conn.execute("SELECT DISTINCT bank_file FROM videos WHERE bank_file IS NOT NULL")
        }
        for f in (self.directory / BANK_DIR).glob("bank-*.npy"):
            if f"{BANK_DIR}/{f.name}" not in used:
                f.unlink(missing_ok=True)


def _only_leftovers_of_a_new_index(directory: Path) -> bool:
    """True for an empty directory, or one left by a crash inside :meth:`IndexWriter.create` before
    its manifest was written (only our own files, and a metadata store without videos)."""
    names = {p.name for p in directory.iterdir() if not p.name.startswith(".")}
    if not names <= {BANK_DIR, METADATA, FAISS_FILE}:
        return False
    if METADATA in names:
        try:
            conn = connect_readonly(directory / METADATA)
            try:
                (n,) = conn.execute("SELECT COUNT(*) FROM videos").fetchone()
            finally:
                conn.close()
        except (sqlite3.DatabaseError, IndexFormatError):
            return False
        if n:
            return False
    return True


def _require_same_settings(existing: Manifest, wanted: Manifest) -> None:
    a, b = existing.build_settings(), wanted.build_settings()
    diff = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
    if diff:
        detail = "; ".join(f"{k}: index has {x!r}, this build has {y!r}" for k, (x, y) in diff.items())
        raise IndexMismatchError(
            f"the existing index was built with different settings ({detail}); use a new --index "
            "directory or the same model, head and options"
        )


def connect_readonly(path: Path, **kwargs) -> sqlite3.Connection:
    """Read-only connection to the metadata store. A crash during an SQLite commit leaves a "hot"
    rollback journal that read-only connections cannot apply; when the directory is writable it is
    rolled back here first (restoring the last committed state), else the error says what to do."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, **kwargs)
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        journal = Path(f"{path}-journal")
        if not journal.exists():
            raise
        logger.warning("%s: rolling back a transaction interrupted by a crash (%s)", path, exc)
        try:
            rw = sqlite3.connect(str(path))
            try:
                rw.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            finally:
                rw.close()
        except sqlite3.OperationalError as exc2:
            raise IndexFormatError(
                f"{path} has an interrupted transaction ({journal.name}) that needs write access to roll back: "
                f"run `indexer verify` once where the index is writable ({exc2})"
            ) from exc2
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, **kwargs)


def _connect_rw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level="DEFERRED")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- reader ---------------------------------------------------------------------------------------


class IndexReader:
    """Read-only view of an index directory (the search service's entry point). Thread-safe."""

    def __init__(self, directory: str | os.PathLike):
        import faiss

        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        meta = self.directory / METADATA
        if not meta.is_file():
            raise IndexFormatError(f"{self.directory}: {METADATA} not found")
        self._lock = threading.Lock()
        try:
            self._conn = connect_readonly(meta, check_same_thread=False)
            rows = self._conn.execute(
                f"SELECT {_RECORD_COLUMNS}, bank_file, bank_offset, bank_count FROM videos"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise IndexFormatError(f"{meta} is not a readable index metadata store: {exc}") from exc
        self._records: dict[str, VideoRecord] = {}
        self._banks: dict[str, tuple[str, int, int]] = {}
        for row in rows:
            rec = _record(row)
            self._records[rec.id] = rec
            if rec.status == "indexed":
                self._banks[rec.id] = (row[12], int(row[13]), int(row[14]))
        self._by_faiss = {r.faiss_id: r.id for r in self._records.values() if r.status == "indexed"}
        # the metadata store is authoritative (the manifest may lag it by one interrupted commit)
        self.manifest.counts = {
            "indexed": len(self._by_faiss),
            "failed": sum(r.status == "failed" for r in self._records.values()),
        }
        self._memmaps: dict[str, np.ndarray] = {}

        path = self.directory / FAISS_FILE
        if not path.is_file():
            raise IndexFormatError(f"{self.directory}: {FAISS_FILE} not found")
        try:
            self._index = faiss.read_index(str(path))
        except Exception as exc:
            raise IndexFormatError(f"{path} is corrupt: {exc}") from exc
        if self._index.d != self.manifest.embed_dim:
            raise IndexFormatError(
                f"{FAISS_FILE} has dimension {self._index.d}, manifest says {self.manifest.embed_dim}"
            )
        present = set(faiss_ids(self._index).tolist())
        missing = sorted(set(self._by_faiss) - present)
        if missing:  # committed after the last FAISS checkpoint (an interrupted build): add them
            logger.warning(
                "%d committed videos are missing from %s; adding them in memory", len(missing), FAISS_FILE
            )
            vecs = np.stack([self.embedding(self._by_faiss[f]) for f in missing])
            self._index.add_with_ids(vecs, np.asarray(missing, dtype=np.int64))
        self._nlist = _ivf_nlist(self._index)
        self._ivf = self._nlist > 0

    def __len__(self) -> int:
        return len(self._by_faiss)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def check_compatible(self, *, backbone_fingerprint: str, head_fingerprint: str) -> None:
        m = self.manifest
        problems = []
        if m.backbone_fingerprint != backbone_fingerprint:
            problems.append(
                f"backbone: index built with {m.backbone_id!r} (fingerprint {m.backbone_fingerprint}), "
                f"loaded backbone has fingerprint {backbone_fingerprint}"
            )
        if m.head_fingerprint != head_fingerprint:
            problems.append(
                f"head: index built with {m.head_fingerprint!r}, loaded head is {head_fingerprint!r}"
            )
        if problems:
            raise IndexMismatchError(
                f"index {self.directory} does not match the loaded model: "
                + "; ".join(problems)
                + ". Rebuild the index with this model (indexer build) or load the model it was built with."
            )

    def search(
        self, queries: np.ndarray, k: int, *, allowed_ids: Collection[str] | None = None
    ) -> list[list[tuple[str, float]]]:
        """Top-k videos per query by inner product: [B, d] float32 -> B lists of (video_id, score)."""
        import faiss

        q = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if q.shape[1] != self.manifest.embed_dim:
            raise ValueError(f"queries have dimension {q.shape[1]}, index has {self.manifest.embed_dim}")
        if k <= 0 or len(self) == 0:
            return [[] for _ in q]
        params = None
        if allowed_ids is not None:
            fids = np.asarray(
                sorted(
                    self._records[i].faiss_id for i in allowed_ids if i in self._records and i in self._banks
                ),
                dtype=np.int64,
            )
            if len(fids) == 0:
                return [[] for _ in q]
            sel = faiss.IDSelectorBatch(fids)
            params = (
                faiss.SearchParametersIVF(sel=sel, nprobe=self._nprobe())
                if self._ivf
                else faiss.SearchParameters(sel=sel)
            )
        elif self._ivf:
            params = faiss.SearchParametersIVF(nprobe=self._nprobe())
        fetch = min(k + 8, self._index.ntotal)  # a few spare slots for ids removed since the checkpoint
        scores, labels = self._index.search(q, fetch, params=params)
        results = []
        for srow, lrow in zip(scores, labels, strict=True):
            hits = [
                (self._by_faiss[int(f)], float(s))
                for s, f in zip(srow, lrow, strict=True)
                if int(f) in self._by_faiss
            ]
            results.append(hits[:k])
        return results

    def _nprobe(self) -> int:
        return max(1, min(64, self._nlist // 8))

    def video(self, video_id: str) -> VideoRecord | None:
        return self._records.get(video_id)

    def videos(self, *, status: str | None = "indexed") -> list[VideoRecord]:
        return [r for r in self._records.values() if status is None or r.status == status]

    def filter_ids(self, flt: dict) -> set[str]:
        """Ids of indexed videos whose metadata match every condition of ``flt``."""
        conditions = _parse_filter(flt)
        out = set()
        for vid in self._by_faiss.values():
            rec = self._records[vid]
            if all(cond(_field(rec, name)) for name, cond in conditions):
                out.add(vid)
        return out

    def frame_bank(self, video_id: str) -> FrameBank:
        if video_id not in self._banks:
            raise KeyError(f"no indexed video with id {video_id!r}")
        name, offset, count = self._banks[video_id]
        with self._lock:
            arr = self._memmaps.get(name)
            if arr is None:
                try:
                    arr = np.load(self.directory / name, mmap_mode="r", allow_pickle=False)
                except (OSError, ValueError) as exc:
                    raise IndexFormatError(f"frame bank file {name} is missing or corrupt: {exc}") from exc
                self._memmaps[name] = arr
            (blob,) = self._conn.execute(
                "SELECT frame_indices FROM videos WHERE id = ?", (video_id,)
            ).fetchone()
        if offset + count > len(arr):
            raise IndexFormatError(f"frame bank file {name} is shorter than the metadata says")
        indices = np.frombuffer(blob, dtype=np.int64).copy()
        return FrameBank(
            frame_indices=indices,
            timestamps=indices.astype(np.float64) / self._records[video_id].fps,
            embeddings=arr[offset : offset + count],
        )

    def embedding(self, video_id: str) -> np.ndarray:
        """The stored final embedding v_j [d] float32 (exactly what FAISS was given)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT embedding FROM videos WHERE id = ? AND status = 'indexed'", (video_id,)
            ).fetchone()
        if row is None:
            raise KeyError(f"no indexed video with id {video_id!r}")
        return np.frombuffer(row[0], dtype=np.float32).copy()

    def close(self) -> None:
        with self._lock:
            self._memmaps.clear()
            self._conn.close()


# -- metadata filters -----------------------------------------------------------------------------

_MISSING = object()
_RANGE_OPS = {
    "gte": lambda a, b: a >= b,
    "lte": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "lt": lambda a, b: a < b,
}


def _field(rec: VideoRecord, name: str):
    if name in rec.metadata:
        return rec.metadata[name]
    if name in BUILTIN_FILTER_FIELDS:
        return getattr(rec, name)
    return _MISSING


def _parse_filter(flt) -> list[tuple[str, Callable]]:
    """``{"field": value}`` (equality), ``{"field": {"in": [...]}}``, ``{"field": {"gte": x, "lt": y}}``."""
    if not isinstance(flt, dict):
        raise ValueError(
            f"a filter must be an object mapping field names to conditions, got {type(flt).__name__}"
        )
    conditions = []
    for name, cond in flt.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"filter field names must be non-empty strings, got {name!r}")
        if isinstance(cond, dict):
            unknown = set(cond) - {"in", *_RANGE_OPS}
            if unknown or not cond:
                raise ValueError(
                    f"filter on {name!r}: unknown operator(s) {sorted(unknown) or '(none given)'}; "
                    'use a plain value for equality, {"in": [...]}, or gte/lte/gt/lt'
                )
            if "in" in cond:
                if len(cond) > 1:
                    raise ValueError(f"filter on {name!r}: 'in' cannot be combined with range operators")
                values = cond["in"]
                if not isinstance(values, list):
                    raise ValueError(f"filter on {name!r}: 'in' needs a list of values")
                conditions.append((name, _in_cond(values)))
            else:
                for op, bound in cond.items():
                    if isinstance(bound, bool) or not isinstance(bound, int | float | str):
                        raise ValueError(f"filter on {name!r}: {op} needs a number or string, got {bound!r}")
                conditions.append((name, _range_cond(cond)))
        elif isinstance(cond, list):
            raise ValueError(f'filter on {name!r}: use {{"in": [...]}} to match one of several values')
        else:
            conditions.append((name, lambda v, c=cond: v is not _MISSING and type(v) is not dict and v == c))
    return conditions


def _in_cond(values: list):
    def check(v):
        return v is not _MISSING and not isinstance(v, dict | list) and v in values

    return check


def _range_cond(cond: dict):
    def check(v):
        if v is _MISSING or isinstance(v, bool):
            return False
        for op, bound in cond.items():
            numeric = isinstance(bound, int | float)
            if numeric != isinstance(v, int | float):
                return False
            if not _RANGE_OPS[op](v, bound):
                return False
        return True

    return check
