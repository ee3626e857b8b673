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
4. **SQLite.** VACUUM (atomic in SQLite) rewrites ``meta.sqlite`` without free pages.

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
from indexer.store.format import BANK_DIR, bank_file_name, npy_bytes
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
    faiss_factory: str = ""
    faiss_switched_from: str | None = None
    details: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"frame bank: {self.bank_files_rewritten} file(s) rewritten, {self.bank_files_deleted} deleted, "
            f"{self.bank_rows_dropped} unreferenced frame(s) dropped",
            f"frame store: {self.frames_files_rewritten} file(s) rewritten, {self.frames_files_deleted} deleted, "
            f"{self.frames_rows_dropped} unreferenced frame(s) dropped",
            f"FAISS: {self.faiss_factory}"
            + (f" (switched from {self.faiss_switched_from})" if self.faiss_switched_from else " (rebuilt)"),
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
    n = writer.counts()["indexed"]
    current = writer.manifest.faiss_factory
    switch = fx.automatic_switch(current, n, exact_max)
    if switch:
        logger.info("%d videos: switching FAISS from %s to %s", n, current, switch)
        report.faiss_switched_from = current
    writer.finalize(factory=switch or current, rebuild=True)
    report.faiss_factory = writer.manifest.faiss_factory
    writer.db.vacuum()
    report.bytes_after = directory_bytes(directory)
    return report


def _compact_banks(writer: IndexWriter, report: CompactReport) -> None:
    directory, db = writer.directory, writer.db
    usage = db.bank_usage()
    for name in sorted(usage):
        live = usage[name]
        path = directory / name
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        used, total = sum(count for _, _, count in live), len(arr)
        if used == total:
            continue
        seq = db.state("commit_seq") + 1
        new_name = bank_file_name(seq)
        moves, parts, offset = [], [], 0
        for vid, first, count in live:
            parts.append(np.asarray(arr[first : first + count]))
            moves.append((vid, new_name, offset))
            offset += count
        data = np.concatenate(parts) if parts else np.zeros((0, arr.shape[1]), arr.dtype)
        del arr  # the memory map of the old file
        atomic_write(directory / new_name, npy_bytes(data))
        db.move_banks(moves, {"commit_seq": seq})  # the commit point of this step
        path.unlink(missing_ok=True)
        report.bank_files_rewritten += 1
        report.bank_rows_dropped += total - used
    # files no row references at all (every video of their batch removed), if any are left
    used_files = db.bank_files()
    for f in (directory / BANK_DIR).glob("bank-*.npy"):
        if f"{BANK_DIR}/{f.name}" not in used_files:
            f.unlink(missing_ok=True)
            report.bank_files_deleted += 1


def _compact_frames(writer: IndexWriter, report: CompactReport) -> None:
    directory, db = writer.directory, writer.db
    usage = db.frames_usage()
    for name in sorted(usage):
        live = usage[name]
        path = directory / name
        source = FramesFile(path)
        try:
            used, total = sum(count for _, _, count in live), source.rows
            if used == total:
                continue
            data, starts = copy_rows(source, [(first, count) for _, first, count in live])
        finally:
            source.close()
        seq = db.state("commit_seq") + 1
        new_name = frames_file_name(seq)
        atomic_write(directory / new_name, data)
        db.move_frames(
            [(vid, new_name, int(start)) for (vid, _, _), start in zip(live, starts, strict=True)],
            {"commit_seq": seq},
        )  # the commit point of this step
        path.unlink(missing_ok=True)
        report.frames_files_rewritten += 1
        report.frames_rows_dropped += total - used
    used_files = db.frames_files()
    for f in (directory / FRAMES_DIR).glob("frames-*.bin"):
        if f"{FRAMES_DIR}/{f.name}" not in used_files:
            f.unlink(missing_ok=True)
            report.frames_files_deleted += 1
