"""``IndexReader``: the read-only view of an index directory (the search service's entry point)."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Collection
from pathlib import Path

import numpy as np

from indexer.edges import EdgeFrames
from indexer.store import faiss_index as fx
from indexer.store.db import BankLocation, MetadataStore
from indexer.store.filters import matches, parse_filter
from indexer.store.format import (
    BUILTIN_FILTER_FIELDS,
    FAISS_FILE,
    METADATA,
    STATUS_FAILED,
    STATUS_INDEXED,
    FrameBank,
    IndexFormatError,
    VideoRecord,
    is_bank_file_name,
    read_manifest,
)
from indexer.store.frame_scan import FrameScan
from indexer.store.frames import FramesFile, StoredFrameError, is_frames_file_name

logger = logging.getLogger(__name__)


class IndexReader:
    """Opens and checks an index directory: the manifest, every page of the metadata store
    (``verify_pages``; SQLite's quick check), and the FAISS file. Anything unusable raises
    :class:`IndexFormatError` naming the file. Thread-safe."""

    def __init__(self, directory: str | os.PathLike, *, verify_pages: bool = True, faiss_device: str = "cpu"):
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        meta = self.directory / METADATA
        if not meta.is_file():
            raise IndexFormatError(f"{self.directory}: {METADATA} not found")
        self._lock = threading.Lock()
        self._records: dict[str, VideoRecord] = {}
        self._banks: dict[str, BankLocation] = {}
        self._metadata_keys: tuple[str, ...] | None = None
        self._cue_total: int | None = None
        try:
            self._db = MetadataStore.open_readonly(meta, check_same_thread=False)
            try:
                if verify_pages:
                    problem = self._db.quick_check()
                    if problem != "ok":
                        raise IndexFormatError(f"{METADATA} is damaged: {problem}")
                for rec, bank in self._db.records():
                    self._records[rec.id] = rec
                    if bank is not None:
                        if not is_bank_file_name(bank.file):
                            raise IndexFormatError(
                                f"{METADATA}: video {rec.id!r} names an invalid frame-bank file"
                            )
                        if bank.frames_file is not None and not is_frames_file_name(bank.frames_file):
                            raise IndexFormatError(
                                f"{METADATA}: video {rec.id!r} names an invalid frame-store file"
                            )
                        self._banks[rec.id] = bank
            except BaseException:
                self._db.close()
                raise
        except sqlite3.DatabaseError as exc:
            raise IndexFormatError(f"{METADATA} is not a readable index metadata store: {exc}") from exc
        self._by_faiss = {r.faiss_id: r.id for r in self._records.values() if r.status == STATUS_INDEXED}
        # the metadata store is authoritative (the manifest may lag it by one interrupted commit)
        self.manifest.counts = {
            STATUS_INDEXED: len(self._by_faiss),
            STATUS_FAILED: sum(r.status == STATUS_FAILED for r in self._records.values()),
        }
        self._memmaps: dict[str, np.ndarray] = {}
        self._frames_files: dict[str, FramesFile | StoredFrameError] = {}
        self._frame_scan: FrameScan | None = None
        self._frame_scan_lock = threading.Lock()  # frame_bank takes self._lock: built outside it
        try:
            self._index = fx.read_faiss(self.directory / FAISS_FILE)
            if self._index.d != self.manifest.embed_dim:
                raise IndexFormatError(
                    f"{FAISS_FILE} has dimension {self._index.d}, manifest says {self.manifest.embed_dim}"
                )
            present = set(fx.faiss_ids(self._index).tolist())
            missing = sorted(set(self._by_faiss) - present)
            if missing:  # committed after the last FAISS checkpoint (an interrupted build): add them
                logger.warning(
                    "%d committed videos are missing from %s; adding them in memory", len(missing), FAISS_FILE
                )
                vecs = np.stack([self.embedding(self._by_faiss[f]) for f in missing])
                self._index.add_with_ids(vecs, np.asarray(missing, dtype=np.int64))
        except BaseException:
            self._db.close()
            raise
        self._nlist = fx.ivf_nlist(self._index)
        self._hnsw = fx.is_hnsw(self._index)
        # stage 1 on a GPU copy when asked for and possible (faiss_device: auto, cpu, gpu)
        self._gpu, self._faiss_device = fx.gpu_search_for(self._index, faiss_device)

    def faiss_info(self) -> dict:
        """The FAISS type, its size and the device that serves unfiltered stage-1 searches (and why)."""
        return {
            "factory": self.manifest.faiss_factory,
            "vectors": int(self._index.ntotal),
            "device": self._faiss_device,
        }

    def __len__(self) -> int:
        return len(self._by_faiss)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def search(
        self, queries: np.ndarray, k: int, *, allowed_ids: Collection[str] | None = None
    ) -> list[list[tuple[str, float]]]:
        """Top-k videos per query by inner product: [B, d] float32 -> B lists of (video_id, score)."""
        q = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if q.shape[1] != self.manifest.embed_dim:
            raise ValueError(f"queries have dimension {q.shape[1]}, index has {self.manifest.embed_dim}")
        if k <= 0 or len(self) == 0:
            return [[] for _ in q]
        allowed_fids = None
        if allowed_ids is not None:
            allowed_fids = np.asarray(
                sorted(
                    self._records[i].faiss_id for i in allowed_ids if i in self._records and i in self._banks
                ),
                dtype=np.int64,
            )
            if len(allowed_fids) == 0:
                return [[] for _ in q]
        fetch = min(k + 8, self._index.ntotal)  # a few spare slots for ids removed since the checkpoint
        params, selector = fx.search_params(
            allowed_fids=allowed_fids, nlist=self._nlist, hnsw=self._hnsw, k=fetch, ntotal=self._index.ntotal
        )
        if self._gpu is not None and allowed_fids is None:
            scores, labels = self._gpu.search(q, fetch)
        else:
            scores, labels = self._index.search(q, fetch, params=params)
        del selector  # referenced until the search returned
        results = []
        for srow, lrow in zip(scores, labels, strict=True):
            hits = [
                (self._by_faiss[int(f)], float(s))
                for s, f in zip(srow, lrow, strict=True)
                if int(f) in self._by_faiss
            ]
            results.append(hits[:k])
        return results

    def frame_search(
        self, query: np.ndarray, k: int, *, allowed_ids: Collection[str] | None = None
    ) -> list[tuple[str, float]]:
        """The first ``k`` indexed videos by their best bank frame, max_c query · f_c, as (video_id,
        score); several queries [E, d]: by the weakest one's, min_e max_c e · f_c (indexer.store.frame_scan;
        every bank read into memory on first use)."""
        return self.frame_scan().search(query, k, allowed_ids=allowed_ids)

    def frame_scan_bytes(self) -> int:
        """What :meth:`frame_scan` holds in memory: every indexed video's bank frames x d x 4 bytes."""
        frames = sum(self._banks[v].count for v in self._by_faiss.values() if v in self._banks)
        return frames * self.manifest.embed_dim * 4

    def frame_scan(self) -> FrameScan:
        """The index's banks as one matrix (:class:`FrameScan`), built on the first call."""
        with self._frame_scan_lock:
            if self._frame_scan is None:
                self._frame_scan = FrameScan.build(self)
            return self._frame_scan

    def video(self, video_id: str) -> VideoRecord | None:
        return self._records.get(video_id)

    def videos(self, *, status: str | None = STATUS_INDEXED) -> list[VideoRecord]:
        return [r for r in self._records.values() if status is None or r.status == status]

    def bank_ids(self) -> list[str]:
        """The ids of the videos that have a frame bank (every indexed video)."""
        return list(self._banks)

    def metadata_keys(self, *, builtin: bool = False) -> list[str]:
        """The metadata keys the index's indexed videos carry, sorted (what a filter can name besides
        the built-in fields); with ``builtin``, :data:`BUILTIN_FILTER_FIELDS` too. Computed from the
        metadata store once, then cached (a reader never sees new videos; a reload opens a new one)."""
        with self._lock:
            if self._metadata_keys is None:
                self._metadata_keys = tuple(self._db.metadata_keys())
            keys = self._metadata_keys
        if builtin:
            return sorted(set(keys) | set(BUILTIN_FILTER_FIELDS))
        return list(keys)

    def filter_ids(self, flt: dict) -> set[str]:
        """Ids of indexed videos whose metadata match every condition of ``flt``."""
        conditions = parse_filter(flt)
        return {vid for vid in self._by_faiss.values() if matches(self._records[vid], conditions)}

    def frame_bank(self, video_id: str) -> FrameBank:
        if video_id not in self._banks:
            raise KeyError(f"no indexed video with id {video_id!r}")
        loc = self._banks[video_id]
        with self._lock:
            arr = self._memmaps.get(loc.file)
            if arr is None:
                try:
                    arr = np.load(self.directory / loc.file, mmap_mode="r", allow_pickle=False)
                except (OSError, ValueError) as exc:
                    raise IndexFormatError(
                        f"frame bank file {loc.file} is missing or corrupt: {exc}"
                    ) from exc
                self._memmaps[loc.file] = arr
            blob = self._db.frame_indices(video_id)
        if loc.offset + loc.count > len(arr):
            raise IndexFormatError(f"frame bank file {loc.file} is shorter than the metadata says")
        indices = np.frombuffer(blob or b"", dtype=np.int64).copy()
        return FrameBank(
            frame_indices=indices,
            timestamps=indices.astype(np.float64) / self._records[video_id].fps,
            embeddings=arr[loc.offset : loc.offset + loc.count],
        )

    def edge_frames(self, video_id: str):
        """The video's edge frames (``indexer.edges.EdgeFrames``: source frames inside its bank's
        largest changes, embedded at build time), or None: it has none (an index built before them)."""
        with self._lock:
            blobs = self._db.edge_frames(video_id)
        if blobs is None:
            return None
        indices = np.frombuffer(blobs[0], dtype=np.int64)
        embeddings = np.frombuffer(blobs[1], dtype=np.float16)
        d = self.manifest.embed_dim
        if embeddings.size != len(indices) * d:
            raise IndexFormatError(f"{METADATA}: the edge frames of {video_id!r} do not match their count")
        return EdgeFrames(indices, embeddings.reshape(len(indices), d))

    # -- the frame store ---------------------------------------------------------------------------
    @property
    def frame_store(self) -> str:
        """The codec this index keeps its frame-bank pixels in (``none``: it keeps none)."""
        return self.manifest.frame_store

    def stored_rows(self, video_id: str, frame_indices) -> np.ndarray:
        """For each frame index: its row in the video's frame store, or -1 where the store has no
        pixels for it (a frame outside the bank, a video or index without a store)."""
        wanted = np.asarray(frame_indices, dtype=np.int64)
        loc = self._banks.get(video_id)
        if loc is None or loc.frames_file is None or wanted.size == 0:
            return np.full(wanted.shape, -1, dtype=np.int64)
        with self._lock:
            blob = self._db.frame_indices(video_id)
        bank = np.frombuffer(blob or b"", dtype=np.int64)
        pos = np.clip(np.searchsorted(bank, wanted), 0, max(len(bank) - 1, 0))
        found = (pos < len(bank)) & (bank[pos] == wanted) if len(bank) else np.zeros(wanted.shape, bool)
        return np.where(found, pos, -1)

    def read_stored_frame(self, video_id: str, row: int) -> np.ndarray:
        """The stored pixels [h, w, 3] of frame-bank row ``row`` of a video; StoredFrameError when
        the frame store cannot give them (missing or damaged file, CRC mismatch, undecodable)."""
        loc = self._banks.get(video_id)
        if loc is None or loc.frames_file is None or not 0 <= row < loc.count:
            raise StoredFrameError(f"no stored frame {row} for video {video_id!r}")
        with self._lock:
            f = self._frames_files.get(loc.frames_file)
            if f is None:
                try:
                    f = FramesFile(self.directory / loc.frames_file)
                    if f.codec != self.manifest.frame_store:
                        raise StoredFrameError(
                            f"{loc.frames_file} holds {f.codec}, the manifest says "
                            f"{self.manifest.frame_store}"
                        )
                except StoredFrameError as exc:
                    f = exc  # remembered: a damaged file is not reopened for every frame
                self._frames_files[loc.frames_file] = f
        if isinstance(f, StoredFrameError):
            raise StoredFrameError(str(f))
        return f.read(loc.frames_offset + int(row))

    # -- what is said (text tracks) ---------------------------------------------------------------
    @property
    def has_cues(self) -> bool:
        """Whether any video of this index has a cue (an index built before text tracks has none)."""
        return self.cue_total() > 0

    def cue_total(self) -> int:
        """The index's number of cues (read once: a reader never sees new ones)."""
        if self._cue_total is None:
            with self._lock:
                self._cue_total = self._db.fts_lag()["cues"]
        return self._cue_total

    def match_cues(self, expression: str, limit: int | None = None) -> list[dict]:
        """Cues of indexed videos matching an FTS5 ``expression``, best first: dicts of id, video_id,
        start_s, end_s, text and ``bm25`` (FTS5's, lower is better). ValueError for an expression
        FTS5 cannot parse (``engine.spoken`` builds only valid ones)."""
        if not self.has_cues:
            return []
        try:
            with self._lock:
                rows = self._db.match_cues(expression, *(() if limit is None else (limit,)))
        except sqlite3.OperationalError as exc:
            raise ValueError(f"not a cue query: {exc}") from None
        return [
            {"id": int(r["id"]), "video_id": r["video_id"], "start_s": float(r["start_s"]),
             "end_s": float(r["end_s"]), "text": r["text"], "bm25": float(r["score"])}
            for r in rows
            if r["video_id"] in self._banks
        ]  # fmt: skip

    def cue_snippets(
        self, expression: str, cue_ids, *, marks: tuple[str, str], tokens: int = 16
    ) -> dict[int, str]:
        with self._lock:
            return self._db.cue_snippets(expression, list(cue_ids), marks=marks, tokens=tokens)

    def cues_matching(self, expression: str, cue_ids) -> set[int]:
        with self._lock:
            return self._db.cues_matching(expression, list(cue_ids))

    def count_cue_matches(self, expression: str) -> int:
        with self._lock:
            return self._db.count_cue_matches(expression)

    def embedding(self, video_id: str) -> np.ndarray:
        """The stored final embedding v_j [d] float32 (exactly what FAISS was given)."""
        with self._lock:
            blob = self._db.embedding(video_id)
        if blob is None:
            raise KeyError(f"no indexed video with id {video_id!r}")
        return np.frombuffer(blob, dtype=np.float32).copy()

    def close(self) -> None:
        with self._lock:
            self._memmaps.clear()
            for f in self._frames_files.values():
                if isinstance(f, FramesFile):
                    f.close()
            self._frames_files.clear()
            self._db.close()
