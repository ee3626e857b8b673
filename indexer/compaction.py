"""`indexer compact`: give back the space that `indexer remove` leaves behind.

`remove` deletes a video's row and its FAISS vector at once, but the video's frame-bank rows stay in
the bank file its batch wrote (other videos of that batch still use the file), and SQLite keeps the
freed pages. Compaction, one step at a time, each step crash-safe:

1. **Frame banks.** For each bank file that holds rows no video references: write a new bank file
   with only the referenced rows (renamed into place), then one SQLite transaction that points those
   videos at it (the commit point), then delete the old file. A crash before the transaction leaves an
   orphan file, after it an unreferenced old file: the next writer deletes either. Run again, it goes
   on with the files still to do.
2. **Frame store.** The same for each frame-store file (``frames/``) that holds rows no video
   references: the surviving videos' stored frames are copied, bytes and CRCs unchanged
   (``indexer.store.frames.copy_rows``), into a new file, one transaction moves their rows, the old
   file is deleted.
3. **FAISS.** Rebuilt from the stored embeddings (exactly the indexed videos) with the index type the
   corpus size calls for (the thresholds of `indexer build`, unless a type was forced), written with
   one rename.
4. **Cues.** The FTS5 index over the cues is rebuilt from them when it lags them (``indexer
   verify`` says so), else its segments are merged (FTS5 ``optimize``), in one transaction.
5. **SQLite.** VACUUM (atomic in SQLite) rewrites ``meta.sqlite`` without free pages.

Embeddings, frame-bank values and ids are unchanged, so search answers are the same. A running API
keeps its index open: reload it afterwards (SIGHUP or ``POST /admin/reload-index``), as after
`remove`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.files import atomic_write
from indexer.store import faiss_index as fx
from indexer.store.format import BANK_DIR, STATUS_INDEXED, bank_file_name, npy_bytes
from indexer.store.frames import FRAMES_DIR, FramesFile, copy_rows, frames_file_name
from indexer.store.writer import IndexWriter

logger = logging.getLogger(__name__)


@dataclass
class CompactReport:
    bytes_before: int = 0
    bytes_after: int = 0
    bank_files_rewritten: int = 0
    bank_files_deleted: int = 0
    bank_rows_dropped: int = 0
    frames_files_rewritten: int = 0
    frames_files_deleted: int = 0
    frames_rows_dropped: int = 0
    previews_deleted: int = 0
    faiss_factory: str = ""
    faiss_switched_from: str | None = None
    cue_index: str = ""  # what was done to the cues' FTS5 index: "optimize" or "rebuild"
    details: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"frame bank: {self.bank_files_rewritten} file(s) rewritten, {self.bank_files_deleted} deleted, "
            f"{self.bank_rows_dropped} unreferenced frame(s) dropped",
            f"frame store: {self.frames_files_rewritten} file(s) rewritten, {self.frames_files_deleted} deleted, "
            f"{self.frames_rows_dropped} unreferenced frame(s) dropped",
            f"browser previews: {self.previews_deleted} unreferenced deleted",
            f"FAISS: {self.faiss_factory}"
            + (f" (switched from {self.faiss_switched_from})" if self.faiss_switched_from else " (rebuilt)"),
            f"cue index: {self.cue_index or 'none'}",
            f"size: {self.bytes_before / 1e6:.2f} MB -> {self.bytes_after / 1e6:.2f} MB",
        ]
        return "\n".join(lines)


def directory_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in Path(directory).rglob("*") if f.is_file())


def compact(writer: IndexWriter, *, exact_max: int = fx.EXACT_MAX_VECTORS) -> CompactReport:
    """Compact the index ``writer`` holds (see the module docstring)."""
    directory = writer.directory
    report = CompactReport(bytes_before=directory_bytes(directory))
    _compact_banks(writer, report)
    _compact_frames(writer, report)
    # files no row references at all (every video of their batch removed), if any are left
    deleted = writer.collect_unreferenced_files()
    report.bank_files_deleted, report.frames_files_deleted = deleted[BANK_DIR], deleted[FRAMES_DIR]
    report.previews_deleted = deleted.get("previews", 0)
    n = writer.counts()[STATUS_INDEXED]
    current = writer.manifest.faiss_factory
    switch = fx.automatic_switch(current, n, exact_max)
    if switch:
        logger.info("%d videos: switching FAISS from %s to %s", n, current, switch)
        report.faiss_switched_from = current
    writer.finalize(factory=switch or current, rebuild=True)
    report.faiss_factory = writer.manifest.faiss_factory
    report.cue_index = writer.db.maintain_cue_index()
    writer.db.vacuum()
    report.bytes_after = directory_bytes(directory)
    return report


def _compact_banks(writer: IndexWriter, report: CompactReport) -> None:
    def rows(path: Path) -> int:
        return len(np.load(path, mmap_mode="r", allow_pickle=False))

    def rewrite(path: Path, live) -> tuple[bytes, list[int]]:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        parts = [np.asarray(arr[first : first + count]) for _, first, count in live]
        data = np.concatenate(parts) if parts else np.zeros((0, arr.shape[1]), arr.dtype)
        return npy_bytes(data), list(np.cumsum([0] + [c for _, _, c in live])[:-1])

    done = _rewrite_files(writer, writer.db.bank_usage(), rows, rewrite, bank_file_name, writer.db.move_banks)
    report.bank_files_rewritten, report.bank_rows_dropped = done


def _compact_frames(writer: IndexWriter, report: CompactReport) -> None:
    def rows(path: Path) -> int:
        source = FramesFile(path)
        source.close()
        return source.rows

    def rewrite(path: Path, live) -> tuple[bytes, list[int]]:
        source = FramesFile(path)
        try:  # rows copied bytes and CRCs unchanged, nothing decoded
            return copy_rows(source, [(first, count) for _, first, count in live])
        finally:
            source.close()

    done = _rewrite_files(
        writer, writer.db.frames_usage(), rows, rewrite, frames_file_name, writer.db.move_frames
    )
    report.frames_files_rewritten, report.frames_rows_dropped = done


def _rewrite_files(writer: IndexWriter, usage: dict, rows, rewrite, name_for, move) -> tuple[int, int]:
    """For each per-batch file (bank or frame store) holding rows no video references: write a new
    file with only the referenced rows (``rewrite(path, live) -> (bytes, new first rows)``), then
    ``move`` those videos to it in one transaction (the commit point), then delete the old file.
    Returns (files rewritten, rows dropped)."""
    directory, db = writer.directory, writer.db
    rewritten = dropped = 0
    for name in sorted(usage):
        live = usage[name]  # (id, first row, row count), by row
        path = directory / name
        used, total = sum(count for _, _, count in live), rows(path)
        if used == total:
            continue
        data, starts = rewrite(path, live)
        seq = db.state("commit_seq") + 1
        new_name = name_for(seq)
        atomic_write(directory / new_name, data)
        moves = [(vid, new_name, int(start)) for (vid, _, _), start in zip(live, starts, strict=True)]
        move(moves, {"commit_seq": seq})  # the commit point of this step
        path.unlink(missing_ok=True)
        rewritten += 1
        dropped += total - used
    return rewritten, dropped
