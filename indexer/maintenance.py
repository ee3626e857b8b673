"""`indexer stats` and `indexer verify`: read-only inspection of an index directory.

``verify`` checks, without a model: the manifest (parses, known format version, counts equal to
the metadata store's), SQLite's own integrity check, that every indexed id resolves to exactly one
FAISS vector and every FAISS id to an indexed video, that the FAISS dimension matches, that each
frame-bank file exists, loads as float16 [rows, d] and covers its videos' rows, that frame indices lie
inside their videos, that stored embeddings are finite and unit-norm, that each frame-store file parses,
covers its videos' rows at their working size and that every stored frame has its CRC-32 (the first
frame of each file is decoded), that every cue belongs to an indexed video and one of its text
tracks, lies inside it and is in the cue index (FTS5), and (optionally) that source files still have
the fingerprint they were indexed with. Nothing is modified.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.config import FrameStore
from core.errors import summarize
from indexer.store.db import MetadataStore
from indexer.store.faiss_index import faiss_ids, read_faiss
from indexer.store.format import (
    BANK_DIR,
    FAISS_FILE,
    METADATA,
    STATUS_FAILED,
    STATUS_INDEXED,
    IndexFormatError,
    is_bank_file_name,
    read_manifest,
)
from indexer.store.frames import FRAMES_DIR, FramesFile, StoredFrameError, is_frames_file_name


@dataclass
class VerifyReport:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    checked: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


def index_stats(directory: str | Path) -> dict:
    """Counts, sizes, settings and failure reasons of an index (JSON-serialisable)."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    db = _open_db(directory)
    try:
        by_status = db.status_summary()
        reasons = Counter(_reason_class(e) for e in db.failure_reasons())
        text_tracks = db.text_track_summary()
    except sqlite3.DatabaseError as exc:
        raise IndexFormatError(f"{METADATA} is not a readable SQLite database: {summarize(exc)}") from exc
    finally:
        db.close()
    files = {
        p.relative_to(directory).as_posix(): p.stat().st_size
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }
    indexed = by_status.get(STATUS_INDEXED, {})
    store_bytes = sum(v for k, v in files.items() if k.startswith(f"{FRAMES_DIR}/"))
    stored_videos, stored_frames = indexed.get("stored_videos", 0), indexed.get("stored_frames", 0)
    hours = indexed.get("duration_s", 0.0) / 3600.0
    bank_frames = indexed.get("bank_frames", 0)
    bank_bytes = sum(v for k, v in files.items() if k.startswith(f"{BANK_DIR}/"))
    # file bytes include the rows of removed videos until their batch's files are rewritten

    def per_hour(n: float) -> float:
        return n / hours if hours > 0 else 0.0

    return {
        "directory": str(directory),
        "manifest": json.loads(manifest.to_json()),
        STATUS_INDEXED: indexed.get("videos", 0),
        STATUS_FAILED: by_status.get(STATUS_FAILED, {}).get("videos", 0),
        "indexed_hours": hours,
        "bank_frames": bank_frames,
        # the frame bank's embeddings ([C, d] float16 per video) and the frame store's pixels, with
        # what they take per frame and per hour of indexed video
        "frame_bank": {
            "policy": dict(manifest.candidate_policy),
            "frames": bank_frames,
            "bytes": bank_bytes,
            "bytes_per_frame": bank_bytes / bank_frames if bank_frames else 0.0,
            "frames_per_hour": per_hour(bank_frames),
            "bytes_per_hour": per_hour(bank_bytes),
        },
        "frame_store": {
            "codec": manifest.frame_store,
            "videos": stored_videos,
            "frames": stored_frames,
            "bytes": store_bytes,
            "bytes_per_video": store_bytes / stored_videos if stored_videos else 0.0,
            "bytes_per_frame": store_bytes / stored_frames if stored_frames else 0.0,
            "bytes_per_hour": per_hour(store_bytes),
        },
        "failure_reasons": dict(reasons.most_common()),
        # what is said: cues per track kind, languages, the tracks that could not be read (None: an
        # index written before text tracks)
        "text_tracks": text_tracks,
        "bytes": {
            "total": sum(files.values()),
            "faiss": files.get(FAISS_FILE, 0),
            "metadata": files.get(METADATA, 0),
            "frame_bank": bank_bytes,
            "frame_store": store_bytes,
        },
    }


def _reason_class(error: str | None) -> str:
    return (error or "unknown").split(":")[0][:80]


def verify_index(directory: str | Path, *, check_sources: bool = False) -> VerifyReport:
    from indexer.video import file_fingerprint

    directory = Path(directory)
    rep = VerifyReport()
    try:
        manifest = read_manifest(directory)
    except IndexFormatError as exc:
        rep.errors.append(str(exc))
        return rep
    d = manifest.embed_dim
    if not (directory / METADATA).is_file():
        rep.errors.append(f"{METADATA} not found")
        return rep
    integrity, rows, cue_problems = "ok", [], {}
    try:
        db = _open_db(directory)
        try:
            integrity = db.integrity_check()
            rows = db.verify_rows()
            cue_problems = db.cue_problems()
        finally:
            db.close()
    except (sqlite3.DatabaseError, IndexFormatError) as exc:
        rep.errors.append(f"{METADATA} is damaged or not a readable SQLite database: {summarize(exc)}")
        if integrity == "ok":
            return rep
    if integrity != "ok":
        rep.errors.append(f"{METADATA} integrity check: {integrity}")
        if not rows:
            return rep
    indexed = [r for r in rows if r["status"] == STATUS_INDEXED]
    failed = [r for r in rows if r["status"] == STATUS_FAILED]
    other = [r for r in rows if r["status"] not in (STATUS_INDEXED, STATUS_FAILED)]
    if other:
        rep.errors.append(
            f"{len(other)} rows have an unknown status (e.g. {other[0]['id']!r}: {other[0]['status']!r})"
        )
    counts = manifest.counts
    if counts.get(STATUS_INDEXED) != len(indexed) or counts.get(STATUS_FAILED) != len(failed):
        rep.warnings.append(
            f"manifest counts {manifest.counts} lag the metadata store (indexed {len(indexed)}, failed "
            f"{len(failed)}; an interrupted write); the store is authoritative and the next build/add rewrites them"
        )

    # FAISS: every indexed id resolves, nothing else is there
    fids = [int(r["faiss_id"]) for r in indexed]
    if len(set(fids)) != len(fids) or any(f < 0 for f in fids):
        rep.errors.append("FAISS ids in the metadata store are not unique non-negative integers")
    try:
        index = read_faiss(directory / FAISS_FILE)
    except IndexFormatError as exc:
        rep.errors.append(summarize(exc))  # names the file: "index.faiss is corrupt or unreadable: ..."
        index = None
    if index is not None:
        if index.d != d:
            rep.errors.append(f"{FAISS_FILE} has dimension {index.d}, manifest says {d}")
        present = set(faiss_ids(index).tolist())
        missing, extra = set(fids) - present, present - set(fids)
        if missing:
            rep.warnings.append(
                f"{len(missing)} committed videos are not yet in {FAISS_FILE} (an interrupted build); "
                "readers add them from the metadata store, and the next `indexer build`/`add` rewrites the file"
            )
        if extra:
            rep.errors.append(f"{FAISS_FILE} holds {len(extra)} ids that belong to no indexed video")
        if index.ntotal != len(present):
            rep.errors.append(f"{FAISS_FILE} holds duplicate ids")
        rep.checked["faiss_vectors"] = int(index.ntotal)

    # embeddings and frame banks
    banks: dict[str, np.ndarray | None] = {}
    for row in indexed:
        vid, num_frames, emb, idx_blob = row["id"], row["num_frames"], row["embedding"], row["frame_indices"]
        bank_file, off, cnt = row["bank_file"], row["bank_offset"], row["bank_count"]
        if emb is None or len(emb) != 4 * d:
            rep.errors.append(f"{vid}: stored embedding missing or of the wrong size")
        else:
            v = np.frombuffer(emb, dtype=np.float32)
            if not np.all(np.isfinite(v)) or abs(float(np.linalg.norm(v)) - 1.0) > 1e-3:
                rep.errors.append(f"{vid}: stored embedding is not finite and unit-norm")
        if bank_file not in banks:
            banks[bank_file] = _load_bank(directory, bank_file, d, rep)
        arr = banks[bank_file]
        if arr is not None and (off is None or cnt is None or off + cnt > len(arr)):
            rep.errors.append(f"{vid}: frame bank rows {off}..{(off or 0) + (cnt or 0)} beyond {bank_file}")
        indices = np.frombuffer(idx_blob or b"", dtype=np.int64)
        if len(indices) != (cnt or 0) or (
            len(indices) and (indices.min() < 0 or indices.max() >= num_frames)
        ):
            rep.errors.append(f"{vid}: frame bank indices do not match its {num_frames} frames")
        elif len(indices) > 1 and not np.all(np.diff(indices) > 0):
            rep.errors.append(f"{vid}: frame bank indices are not increasing")
    stored = _verify_frame_store(directory, manifest, indexed, rep)
    referenced = {b for b in banks} | stored
    for folder, pattern in ((BANK_DIR, "*.npy"), (FRAMES_DIR, "*.bin")):
        for f in (directory / folder).glob(pattern) if (directory / folder).is_dir() else []:
            if f"{folder}/{f.name}" not in referenced:
                rep.warnings.append(f"{folder}/{f.name} is not referenced (left by an interrupted write)")

    _check_cues(cue_problems, rep)
    _check_previews(directory, indexed, rep)
    if check_sources:
        changed = []
        for row in rows:
            try:
                if row["fingerprint"] and file_fingerprint(row["path"]) != row["fingerprint"]:
                    changed.append(row["id"])
            except OSError:
                changed.append(row["id"])
        if changed:
            rep.warnings.append(
                f"{len(changed)} source files changed or are gone since indexing (e.g. {changed[:3]}); "
                "`indexer add` re-indexes changed files"
            )
        rep.checked["sources"] = len(rows)
    rep.checked.update(
        videos=len(rows),
        indexed=len(indexed),
        failed=len(failed),
        bank_files=len(banks),
        frames_files=len(stored),
    )
    return rep


_CUE_PROBLEMS = {
    "orphan_cues": "cues belong to no indexed video",
    "orphan_tracks": "text tracks belong to no indexed video",
    "bad_times": "cues have a negative start or end before their start",
    "past_the_end": "cues end more than 1 s after their video",
    "track_counts": "text tracks record another number of cues than they have",
    "cues_without_track": "cues belong to no text track of their video",
}


def _check_cues(problems: dict[str, int], rep: VerifyReport) -> None:
    """The cue tables (empty ``problems``: an index written before them, nothing to check)."""
    for key, what in _CUE_PROBLEMS.items():
        if problems.get(key):
            rep.errors.append(f"{METADATA}: {problems[key]} {what}")
    lag = problems.get("fts_missing", 0) + problems.get("fts_extra", 0)
    if lag:
        rep.errors.append(
            f"{METADATA}: the cue index (FTS5) is out of step with the cues ({problems.get('fts_missing', 0)} "
            f"missing, {problems.get('fts_extra', 0)} extra); `indexer compact` rebuilds it"
        )
    if problems:
        rep.checked["cue_index"] = "checked"


def _check_previews(directory: Path, indexed: list, rep: VerifyReport) -> None:
    """Browser previews (``indexer.previews``): a corrupt or unreferenced one, or a recorded failure,
    is a warning (derived data, remade on request), never an error; previews not made yet are
    counted (``previews_not_made``)."""
    from indexer.previews import verify_previews

    warnings, counts = verify_previews(directory, indexed)
    rep.warnings.extend(warnings)
    rep.checked.update(counts)


def _verify_frame_store(directory: Path, manifest, indexed: list, rep: VerifyReport) -> set[str]:
    """Check every frame-store file the indexed rows reference; returns the names referenced."""
    from models.backbone import working_size

    files: dict[str, FramesFile | None] = {}
    without = [r["id"] for r in indexed if r["frames_file"] is None]
    if manifest.frame_store != FrameStore.NONE and without:
        rep.warnings.append(
            f"{len(without)} indexed videos have no stored frames (e.g. {without[:3]}); stage 2 decodes "
            "theirs from the source"
        )
    frames_checked = 0
    for row in indexed:
        name = row["frames_file"]
        if name is None:
            continue
        vid = row["id"]
        if name not in files:
            files[name] = None
            if not is_frames_file_name(name):
                rep.errors.append(f"{vid} names an invalid frame-store file {name!r} (outside {FRAMES_DIR}/)")
                continue
            try:
                f = FramesFile(directory / name)
                if f.codec != manifest.frame_store:
                    raise StoredFrameError(
                        f"{name} holds {f.codec}, the manifest says {manifest.frame_store}"
                    )
                if f.rows:
                    f.read(0)  # the codec really decodes
                files[name] = f
            except StoredFrameError as exc:
                rep.errors.append(f"frame store {name} missing or corrupt: {exc}")
        f = files[name]
        if f is None:
            continue
        off, cnt = int(row["frames_offset"] or 0), int(row["bank_count"] or 0)
        if off + cnt > f.rows:
            rep.errors.append(f"{vid}: frame-store rows {off}..{off + cnt} beyond {name}")
            continue
        w, h = working_size(int(row["width"]), int(row["height"]), manifest.frame_size)
        bad = []
        for r in range(off, off + cnt):
            try:
                if f.shape(r) != (h, w):
                    raise StoredFrameError(f"frame {r} is {f.shape(r)}, expected {(h, w)}")
                f.blob(r)
            except StoredFrameError as exc:
                bad.append(str(exc))
        frames_checked += cnt
        if bad:
            rep.errors.append(f"{vid}: {len(bad)} stored frames are damaged ({bad[0]})")
    for f in files.values():
        if f is not None:
            f.close()
    rep.checked["stored_frames"] = frames_checked
    return set(files)


def _load_bank(directory: Path, name: str | None, d: int, rep: VerifyReport) -> np.ndarray | None:
    if name is None:
        rep.errors.append("an indexed video has no frame bank file")
        return None
    if not is_bank_file_name(name):
        rep.errors.append(f"a video names an invalid frame bank file {name!r} (outside {BANK_DIR}/)")
        return None
    try:
        arr = np.load(directory / name, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        rep.errors.append(f"frame bank {name} missing or corrupt: {summarize(exc)}")
        return None
    if arr.dtype != np.float16 or arr.ndim != 2 or arr.shape[1] != d:
        rep.errors.append(f"frame bank {name} is {arr.dtype} {arr.shape}, expected float16 [rows, {d}]")
        return None
    return arr


def _open_db(directory: Path) -> MetadataStore:
    path = directory / METADATA
    if not path.is_file():
        raise IndexFormatError(f"{directory}: {METADATA} not found")
    return MetadataStore.open_readonly(path)
