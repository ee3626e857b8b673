"""``IndexWriter``: creates or reopens an index directory and commits batches of videos atomically
(each video's text tracks and cues in the same SQLite transaction as its row).

Crash safety: a batch's bank file (and its frame-store file, when the index keeps frames) is
renamed into place before the SQLite transaction that references it, so the commit point is the
SQLite commit and a crash loses at most the batch in flight; anything written before that commit and not referenced by it is an orphan that the next
writer deletes. FAISS follows the metadata store in memory and is checkpointed now and then: it is
derived data, repaired from the stored embeddings whenever it lags.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from core.config import FrameStore
from core.errors import describe
from core.files import TMP_SUFFIX, atomic_write
from indexer.store import faiss_index as fx
from indexer.store.db import MetadataStore, connect_readonly
from indexer.store.format import (
    BANK_DIR,
    FAISS_FILE,
    FORMAT_VERSION,
    MANIFEST,
    METADATA,
    STATUS_INDEXED,
    Entry,
    IndexFormatError,
    Manifest,
    bank_file_name,
    now,
    npy_bytes,
    read_manifest,
    require_same_settings,
    write_manifest,
)
from indexer.store.frames import FRAMES_DIR, check_codec, frames_file_bytes, frames_file_name

logger = logging.getLogger(__name__)


class IndexWriter:
    """Use :meth:`create` for a new directory (or to resume one built with the same settings) and
    :meth:`open` for ``add``/``remove`` on an existing index. Not thread-safe: one writer per index."""

    def __init__(self, directory: Path, manifest: Manifest, db: MetadataStore):
        self.directory = directory
        self.manifest = manifest
        self.db = db
        (directory / BANK_DIR).mkdir(exist_ok=True)
        (directory / FRAMES_DIR).mkdir(exist_ok=True)
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
            require_same_settings(read_manifest(directory), manifest)
            return cls.open(directory)
        if not _only_leftovers_of_a_new_index(directory):
            raise IndexFormatError(
                f"{directory} is not empty and has no {MANIFEST}; refusing to write an index into it"
            )
        manifest.format_version = FORMAT_VERSION
        manifest.frame_store = str(check_codec(manifest.frame_store))
        manifest.faiss_factory = fx.normalize_factory(manifest.faiss_factory)
        manifest.built_at = manifest.built_at or now()
        db = MetadataStore.open_rw(directory / METADATA)
        write_manifest(directory, manifest)
        return cls(directory, manifest, db)

    @classmethod
    def open(cls, directory: str | os.PathLike) -> IndexWriter:
        directory = Path(directory)
        manifest = read_manifest(directory)
        if not (directory / METADATA).is_file():
            raise IndexFormatError(f"{directory}: {METADATA} not found")
        return cls(directory, manifest, MetadataStore.open_rw(directory / METADATA))

    # queries ------------------------------------------------------------------------------------
    def finished(self) -> dict[str, tuple[str, str, str | None]]:
        """Every video already in the store: id -> (fingerprint, status, source stat)."""
        return self.db.finished()

    def counts(self) -> dict[str, int]:
        return self.db.counts()

    # writes -------------------------------------------------------------------------------------
    def commit(self, entries: Sequence[Entry]) -> None:
        """Make a batch part of the index: bank file and frame-store file first (renamed into place),
        then one SQLite transaction (the commit point), then the manifest counts. FAISS follows in memory and is
        checkpointed by :meth:`checkpoint`."""
        if not entries:
            return
        d = self.manifest.embed_dim
        seq = self.db.state("commit_seq") + 1
        next_id = self.db.state("next_faiss_id")
        bank_name = bank_file_name(seq)
        banks = [e.bank_embeddings for e in entries if e.record.status == STATUS_INDEXED]
        store = self.manifest.frame_store
        frames_name, stored, frames_off = frames_file_name(seq), [], 0
        rows, offset, new_vectors, new_ids, tracks = [], 0, [], [], {}
        stamp = now()
        for e in entries:
            r = e.record
            emb = bank_file = bank_off = bank_cnt = idx_blob = frames_file = frames_row = None
            edge_idx = edge_emb = None
            faiss_id = -1
            if r.status == STATUS_INDEXED:
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
                if e.stored_frames is not None and store != FrameStore.NONE:
                    if len(e.stored_frames.blobs) != bank_cnt:
                        raise ValueError(f"stored frames of {r.id!r} do not match its frame bank")
                    stored.append(e.stored_frames)
                    frames_file, frames_row = frames_name, frames_off
                    frames_off += bank_cnt
                if e.edge_indices is not None and e.edge_embeddings is not None:
                    edge_idx, edge_emb = _edge_blobs(r.id, e.edge_indices, e.edge_embeddings, d)
                new_vectors.append(vec)
                new_ids.append(faiss_id)
                if e.tracks is not None:
                    tracks[r.id] = e.tracks
            r.faiss_id = faiss_id
            rows.append(
                {
                    "id": r.id,
                    "faiss_id": faiss_id,
                    "path": r.path,
                    "fingerprint": r.fingerprint,
                    "fps": float(r.fps),
                    "num_frames": int(r.num_frames),
                    "duration_s": float(r.duration_s),
                    "width": int(r.width),
                    "height": int(r.height),
                    "metadata": json.dumps(r.metadata, sort_keys=True),
                    "status": r.status,
                    "error": r.error,
                    "embedding": emb,
                    "bank_file": bank_file,
                    "bank_offset": bank_off,
                    "bank_count": bank_cnt,
                    "frame_indices": idx_blob,
                    "commit_seq": seq,
                    "indexed_at": stamp,
                    "source_stat": e.source_stat,
                    "frames_file": frames_file,
                    "frames_offset": frames_row,
                    "edge_indices": edge_idx,
                    "edge_embeddings": edge_emb,
                    "tracks_stat": e.tracks_stat
                    if r.status == STATUS_INDEXED and e.tracks is not None
                    else None,
                }
            )
        if banks:
            data = np.concatenate([np.asarray(b, dtype=np.float16) for b in banks])
            atomic_write(self.directory / bank_name, npy_bytes(data))
        if stored:
            atomic_write(self.directory / frames_name, frames_file_bytes(stored, store))
        # a re-indexed id (changed content) replaces its old row; its old vector leaves FAISS
        old = self.db.commit_rows(rows, {"commit_seq": seq, "next_faiss_id": next_id}, tracks)
        if old:
            self._remove_from_faiss(np.asarray(old, dtype=np.int64))
        if new_vectors:
            self._index.add_with_ids(np.stack(new_vectors), np.asarray(new_ids, dtype=np.int64))
            self._dirty = True
        self._write_manifest()

    def remove(self, ids: Iterable[str]) -> list[str]:
        """Delete videos by id; returns the ids that were not in the index."""
        ids = list(dict.fromkeys(ids))
        found = self.db.delete(ids)
        fids = np.asarray([f for f in found.values() if f >= 0], dtype=np.int64)
        if len(fids):
            self._remove_from_faiss(fids)
        self._write_manifest()
        self.checkpoint()
        self.collect_unreferenced_files()
        return [i for i in ids if i not in found]

    def replace_tracks(self, video_id: str, tracks, *, kinds=None, tracks_stat: str | None) -> None:
        """Replace an indexed video's text tracks of ``kinds`` (None: all) with ``tracks`` in one
        transaction (``indexer add`` when only its sidecar files changed; nothing else moves)."""
        self.db.replace_tracks(video_id, tracks, kinds=kinds, tracks_stat=tracks_stat)

    def tracks_stats(self) -> dict[str, tuple[str | None, float]]:
        """Indexed video id -> (the sidecar signature its text tracks were read with, None: never;
        its duration)."""
        return self.db.tracks_stats()

    def checkpoint(self) -> None:
        """Write the in-memory FAISS index to ``index.faiss`` (temp file + rename)."""
        if self._dirty or not (self.directory / FAISS_FILE).exists():
            atomic_write(self.directory / FAISS_FILE, fx.serialize(self._index))
            self._dirty = False

    def finalize(self, *, factory: str | None = None, rebuild: bool = False) -> None:
        """End of a build: (re)build FAISS with the final factory (training if needed) from the stored
        embeddings, write it, and the manifest. The new index is built in memory beside the one in
        ``index.faiss``, which is replaced by one rename. ``rebuild``: even when the factory stays."""
        wanted = fx.normalize_factory(factory or self.manifest.faiss_factory)
        current = fx.normalize_factory(self._built_factory)
        if wanted != current or rebuild:
            ids, vectors = self._stored_embeddings()
            self._index, actual = fx.make_faiss_index(wanted, self.manifest.embed_dim, vectors, ids)
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
        except Exception as exc:  # noqa: BLE001 - the SQLite journal is intact; the next writer repairs the rest
            logger.warning(
                "could not write the FAISS checkpoint or manifest on close (%s); the next run repairs them",
                describe(exc),
            )
        finally:
            self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # internals ----------------------------------------------------------------------------------
    def _write_manifest(self) -> None:
        self.manifest.counts = self.db.counts()
        write_manifest(self.directory, self.manifest)

    def _stored_embeddings(self) -> tuple[np.ndarray, np.ndarray]:
        ids, vectors = [], []
        for fid, blob in self.db.indexed_embeddings():
            ids.append(fid)
            vectors.append(np.frombuffer(blob, dtype=np.float32))
        d = self.manifest.embed_dim
        return np.asarray(ids, dtype=np.int64), (
            np.stack(vectors) if vectors else np.zeros((0, d), np.float32)
        )

    def _load_or_rebuild_faiss(self):
        path = self.directory / FAISS_FILE
        index = None
        if path.exists():
            try:
                index = fx.read_faiss(path)
            except IndexFormatError as exc:  # corrupt file: it is derived data, rebuild it
                logger.warning("%s; rebuilding it from %s", exc, METADATA)
        if index is not None and index.d != self.manifest.embed_dim:
            logger.warning(
                "%s has dimension %d, expected %d; rebuilding it",
                FAISS_FILE,
                index.d,
                self.manifest.embed_dim,
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
        if fx.needs_training(factory, self.manifest.embed_dim):
            factory = fx.EXACT_FACTORY
        ids, vectors = self._stored_embeddings()
        index, self._built_factory = fx.make_faiss_index(factory, self.manifest.embed_dim, vectors, ids)
        self._dirty = True
        return index

    def _sync_faiss(self) -> None:
        """Make the in-memory FAISS index hold exactly the committed embeddings (after a crash or an
        interrupt between the SQLite commit and the FAISS update): add the missing, drop the extra."""
        stored = np.asarray(self.db.indexed_faiss_ids(), dtype=np.int64)
        present = fx.faiss_ids(self._index)
        extra = np.setdiff1d(present, stored)
        if len(extra):
            logger.info("dropping %d FAISS vectors of videos no longer in %s", len(extra), METADATA)
            self._remove_from_faiss(extra)
            present = fx.faiss_ids(self._index)
        missing = np.setdiff1d(stored, present)
        if len(missing):
            logger.info("adding %d committed embeddings missing from %s", len(missing), FAISS_FILE)
            self._index.add_with_ids(self._embeddings_for(missing), missing)
            self._dirty = True

    def _embeddings_for(self, fids: np.ndarray) -> np.ndarray:
        rows = self.db.embeddings_by_faiss_id(fids)
        return np.stack([np.frombuffer(rows[int(f)], dtype=np.float32) for f in fids])

    def _remove_from_faiss(self, fids: np.ndarray) -> None:
        try:
            fx.remove_ids(self._index, fids)
        except RuntimeError:  # e.g. HNSW cannot remove: rebuild from the stored embeddings
            ids, vectors = self._stored_embeddings()
            self._index, self._built_factory = fx.make_faiss_index(
                self._built_factory, self.manifest.embed_dim, vectors, ids
            )
        self._dirty = True

    def _cleanup_orphans(self) -> None:
        for tmp in self.directory.glob(f".*{TMP_SUFFIX}"):
            tmp.unlink(missing_ok=True)
        for folder in (BANK_DIR, FRAMES_DIR):
            for tmp in (self.directory / folder).glob(f".*{TMP_SUFFIX}"):
                tmp.unlink(missing_ok=True)
        self.collect_unreferenced_files()

    def collect_unreferenced_files(self) -> dict[str, int]:
        """Delete bank and frame-store files that no row references (orphans of an interrupted
        commit, or files whose every video was removed); returns how many per folder."""
        deleted = {}
        for folder, pattern, used in (
            (BANK_DIR, "bank-*.npy", self.db.bank_files()),
            (FRAMES_DIR, "frames-*.bin", self.db.frames_files()),
        ):
            deleted[folder] = 0
            for f in (self.directory / folder).glob(pattern):
                if f"{folder}/{f.name}" not in used:
                    f.unlink(missing_ok=True)
                    deleted[folder] += 1
        deleted.update(self._collect_unreferenced_previews())
        return deleted

    def _collect_unreferenced_previews(self) -> dict[str, int]:
        """Browser previews (``indexer.previews``) whose video was removed or re-indexed."""
        from indexer.previews import PREVIEWS_DIR, collect_unreferenced_previews

        indexed = {fp for fp, status, _ in self.db.finished().values() if status == STATUS_INDEXED}
        return {PREVIEWS_DIR: collect_unreferenced_previews(self.directory, indexed)}


def _edge_blobs(video_id: str, indices, embeddings, d: int) -> tuple[bytes, bytes]:
    """A video's edge frames (indexer.edges) as the metadata store keeps them."""
    idx = np.asarray(indices, dtype=np.int64)
    emb = np.asarray(embeddings, dtype=np.float16)
    if emb.shape != (len(idx), d) or np.any(np.diff(idx) <= 0):
        raise ValueError(f"edge frames of {video_id!r} have shape {emb.shape} for {len(idx)} frames")
    return idx.tobytes(), np.ascontiguousarray(emb).tobytes()


def _only_leftovers_of_a_new_index(directory: Path) -> bool:
    """True for an empty directory, or one left by a crash inside :meth:`IndexWriter.create` before
    its manifest was written (only our own files, and a metadata store without videos)."""
    names = {p.name for p in directory.iterdir() if not p.name.startswith(".")}
    if not names <= {BANK_DIR, FRAMES_DIR, METADATA, FAISS_FILE}:
        return False
    if METADATA in names:
        try:
            db = MetadataStore(connect_readonly(directory / METADATA))
            try:
                n = db.count_videos()
            finally:
                db.close()
        except (sqlite3.DatabaseError, IndexFormatError):
            return False
        if n:
            return False
    return True
