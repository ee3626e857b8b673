"""Browser-safe previews: a small H.264/MP4 copy of each indexed video a browser cannot play.

Browsers play H.264 (with AAC or no audio) in MP4 and VP8/VP9 in WebM; users' archives also hold
MPEG-4 Part 2, MJPEG, HEVC, ... in mkv/avi/mov. For those, ``GET /videos/{id}/media`` serves a
preview instead of the source: H.264 (libx264, yuv420p, ``moov`` first so playback starts before
the whole file arrives), at most :data:`MAX_HEIGHT` lines (aspect kept, even sizes), the source's
frame rate and timestamps, no audio (world videos have none; the moment and thumbnails are what the
page is for).

**When they are made.** On first request (lazily, by the API) and ahead of time by
``indexer previews INDEX``. Lazily, because previews are derived data that most videos of a large
archive never need, and making them at build time would double a build's decoding work; the
maintenance command is there for a deployment that does not want the first play of each video to
wait for its transcode. Either way one function, :func:`ensure_preview`, makes them: one transcode
per video at a time (a per-fingerprint thread lock, and an ``flock`` on a lock file for other
processes), written to a temporary file in ``previews/`` and renamed into place, so a reader never
sees half a preview.

**Where.** ``previews/<fingerprint>.mp4`` in the index directory: keyed by the source's content
fingerprint, so a re-indexed (changed) file gets a new preview and the old one becomes unreferenced.
A preview that could not be made leaves ``previews/<fingerprint>.failed`` holding the reason (so a
bad file is not re-decoded on every request; ``indexer previews --retry`` tries again).
:func:`collect_unreferenced_previews` deletes previews no indexed video references (``remove`` and
``compact`` call it); :func:`verify_previews` reports a missing reference or a corrupt preview as a
warning (previews are derived data, never fatal).
"""

from __future__ import annotations

import contextlib
import fcntl
import fractions
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from core.files import TMP_SUFFIX, atomic_path, atomic_write

logger = logging.getLogger(__name__)

PREVIEWS_DIR = "previews"
PREVIEW_SUFFIX = ".mp4"
FAILED_SUFFIX = ".failed"
PREVIEW_MEDIA_TYPE = "video/mp4"
MAX_HEIGHT = 480
CRF = 28  # x264 quality: small files, fine for finding a moment
MAXRATE = "600k"  # and a cap for noisy sources: at most ~4.5 MB per minute
STALE_TMP_S = 3600.0

_BROWSER_PLAYABLE = {
    # container extension -> (video codecs, audio codecs) Chromium, Firefox and Safari all play
    ".mp4": ({"h264"}, {"aac"}),
    ".m4v": ({"h264"}, {"aac"}),
    ".webm": ({"vp8", "vp9"}, {"opus", "vorbis"}),
}
_CODEC_NAMES = {
    "mpeg4": "MPEG-4 Part 2",
    "h264": "H.264",
    "hevc": "H.265",
    "vp8": "VP8",
    "vp9": "VP9",
    "av1": "AV1",
    "mjpeg": "Motion JPEG",
    "msmpeg4v3": "MS MPEG-4 v3",
}


class PreviewError(RuntimeError):
    """No preview could be made for this video (the message is safe to show: no paths)."""


@dataclass(frozen=True)
class Playability:
    playable: bool
    format: str  # e.g. "MPEG-4 Part 2 in AVI"
    reason: str = ""  # why not (empty when playable)


def describe_codec(name: str) -> str:
    return _CODEC_NAMES.get(name, name)


def probe(path: str | os.PathLike) -> Playability:
    """Whether browsers play ``path`` as it is (container and codecs), without decoding it."""
    import av

    ext = Path(path).suffix.lower()
    container_name = ext.lstrip(".").upper() or "an unknown container"
    try:
        with av.open(str(path)) as c:
            videos = [s.codec_context.name for s in c.streams.video]
            audios = [s.codec_context.name for s in c.streams.audio]
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise PreviewError(f"the source could not be opened ({type(exc).__name__})") from exc
    if not videos:
        raise PreviewError("the source has no video stream")
    fmt = f"{describe_codec(videos[0])} in {container_name}"
    allowed = _BROWSER_PLAYABLE.get(ext)
    if allowed is None:
        return Playability(False, fmt, f"browsers do not play the {container_name} container")
    vcodecs, acodecs = allowed
    if videos[0] not in vcodecs:
        return Playability(False, fmt, f"browsers do not play {describe_codec(videos[0])} video")
    bad_audio = [a for a in audios if a not in acodecs]
    if bad_audio:
        return Playability(False, fmt, f"browsers do not play {describe_codec(bad_audio[0])} audio in it")
    return Playability(True, fmt)


def preview_name(fingerprint: str) -> str:
    """The preview's path relative to the index directory (fingerprints are hex, never a path)."""
    if not fingerprint or not all(ch in "0123456789abcdef" for ch in fingerprint):
        raise PreviewError("the video has no usable fingerprint")
    return f"{PREVIEWS_DIR}/{fingerprint}{PREVIEW_SUFFIX}"


def preview_path(index_dir: str | os.PathLike, fingerprint: str) -> Path:
    return Path(index_dir) / preview_name(fingerprint)


def failure_of(index_dir: str | os.PathLike, fingerprint: str) -> str | None:
    """The recorded reason a preview could not be made, or None."""
    marker = preview_path(index_dir, fingerprint).with_suffix(FAILED_SUFFIX)
    try:
        return marker.read_text(encoding="utf-8").strip() or "the preview could not be made"
    except OSError:
        return None


def output_size(width: int, height: int, max_height: int = MAX_HEIGHT) -> tuple[int, int]:
    """(width, height) at most ``max_height`` lines, aspect kept, both even (yuv420p), never enlarged."""
    scale = min(1.0, max_height / max(1, height))
    w = max(2, int(round(width * scale / 2)) * 2)
    h = max(2, int(round(height * scale / 2)) * 2)
    return w, h


def transcode(source: str | os.PathLike, dest: str | os.PathLike, *, max_height: int = MAX_HEIGHT) -> None:
    """Decode ``source`` and write an H.264 MP4 (yuv420p, faststart, no audio) to ``dest``, keeping
    the frame rate and frame times. Raises :class:`PreviewError` when nothing could be decoded."""
    import av

    try:
        with av.open(str(source)) as src:
            vs = src.streams.video[0]
            vs.thread_type = "AUTO"
            rate = vs.average_rate or vs.guessed_rate or fractions.Fraction(25)
            rate = fractions.Fraction(rate).limit_denominator(1000)
            with av.open(str(dest), mode="w", format="mp4", options={"movflags": "+faststart"}) as out:
                stream = None
                last_pts = -1
                start = None
                for frame in src.decode(vs):
                    if stream is None:
                        w, h = output_size(frame.width, frame.height, max_height)
                        stream = out.add_stream("libx264", rate=rate)
                        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
                        stream.codec_context.time_base = 1 / rate
                        stream.options = {
                            "crf": str(CRF),
                            "maxrate": MAXRATE,
                            "bufsize": "1200k",
                            "preset": "veryfast",
                            "tune": "fastdecode",
                        }
                    t = frame.time if frame.time is not None else (last_pts + 1) / rate
                    start = t if start is None else start
                    pts = max(last_pts + 1, int(round((t - start) * rate)))
                    last_pts = pts
                    small = frame.reformat(width=stream.width, height=stream.height, format="yuv420p")
                    small.pts, small.time_base = pts, 1 / rate
                    for packet in stream.encode(small):
                        out.mux(packet)
                if stream is None:
                    raise PreviewError("the source has no decodable frames")
                for packet in stream.encode():
                    out.mux(packet)
    except PreviewError:
        raise
    except (av.FFmpegError, OSError, ValueError, IndexError) as exc:
        raise PreviewError(f"the source could not be decoded ({type(exc).__name__})") from exc


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _thread_lock(key: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(key, threading.Lock())


@contextlib.contextmanager
def _exclusive(folder: Path, fingerprint: str):
    """One transcode of ``fingerprint`` at a time, in this process and across processes."""
    with _thread_lock(fingerprint):
        lock_file = folder / f".{fingerprint}.lock"
        fd = os.open(lock_file, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock; the lock file stays (unlinking it would race)


def ensure_preview(
    index_dir: str | os.PathLike, source: str | os.PathLike, fingerprint: str, *, retry: bool = False
) -> Path:
    """The preview of ``source`` in ``index_dir``, made first if it is not there (see the module
    docstring). Raises :class:`PreviewError` (with a recorded reason) when it cannot be made."""
    dest = preview_path(index_dir, fingerprint)
    if dest.is_file():
        return dest
    reason = None if retry else failure_of(index_dir, fingerprint)
    if reason is not None:
        raise PreviewError(reason)
    try:
        return _make_preview(dest, source, fingerprint, retry=retry)
    except OSError as exc:  # e.g. an index mounted read-only: nothing recorded, tried again next time
        raise PreviewError(
            f"the preview could not be written into the index ({type(exc).__name__}; is it read-only? "
            "`indexer previews` makes them where it is writable)"
        ) from exc


def _make_preview(dest: Path, source, fingerprint: str, *, retry: bool) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    marker = dest.with_suffix(FAILED_SUFFIX)
    with _exclusive(dest.parent, fingerprint):
        if dest.is_file():  # another request made it while this one waited
            return dest
        reason = None if retry else failure_of(dest.parent.parent, fingerprint)
        if reason is not None:
            raise PreviewError(reason)
        t0 = time.perf_counter()
        try:
            with atomic_path(dest) as tmp:  # a temporary file beside it, fsynced, renamed into place
                transcode(source, tmp)
        except PreviewError as exc:
            atomic_write(marker, str(exc) + "\n")
            logger.warning("no preview for %s: %s", fingerprint, exc)
            raise
        marker.unlink(missing_ok=True)
        logger.info(
            "made preview %s (%.1f kB) in %.2f s",
            dest.name,
            dest.stat().st_size / 1e3,
            time.perf_counter() - t0,
        )
        return dest


# -- maintenance (indexer previews / add / remove / compact / verify) --------------------------------
@dataclass
class PreviewsReport:
    made: int = 0
    present: int = 0
    playable: int = 0
    failed: list[tuple[str, str]] | None = None
    swept: int = 0

    def summary(self) -> str:
        failed = self.failed or []
        lines = [
            f"previews: {self.made} made, {self.present} already there, {self.playable} not needed "
            f"(browsers play the source), {len(failed)} could not be made, {self.swept} unreferenced deleted"
        ]
        lines += [f"  no preview for {vid}: {why}" for vid, why in failed]
        return "\n".join(lines)


def _indexed(index_dir: Path) -> list:
    from indexer.store.db import MetadataStore
    from indexer.store.format import METADATA, STATUS_INDEXED

    db = MetadataStore.open_readonly(index_dir / METADATA)
    try:
        return [r for r, _ in db.records() if r.status == STATUS_INDEXED]
    finally:
        db.close()


def make_previews(
    index_dir: str | os.PathLike, *, ids: set[str] | None = None, retry: bool = False
) -> PreviewsReport:
    """Make the missing previews of the indexed videos (``ids``: only those) that need one."""
    index_dir = Path(index_dir)
    report = PreviewsReport(failed=[])
    for record in _indexed(index_dir):
        if ids is not None and record.id not in ids:
            continue
        try:
            if preview_path(index_dir, record.fingerprint).is_file():
                report.present += 1
                continue
            if probe(record.path).playable:
                report.playable += 1
                continue
            ensure_preview(index_dir, record.path, record.fingerprint, retry=retry)
            report.made += 1
        except PreviewError as exc:
            report.failed.append((record.id, str(exc)))
    return report


def collect_unreferenced_previews(index_dir: str | os.PathLike, fingerprints: set[str]) -> int:
    """Delete previews (and failure markers, stale temporary files) no fingerprint in
    ``fingerprints`` references; returns how many previews were deleted."""
    folder = Path(index_dir) / PREVIEWS_DIR
    if not folder.is_dir():
        return 0
    deleted = 0
    for f in folder.iterdir():
        if f.name.endswith(TMP_SUFFIX) or f.name.endswith(".lock"):
            with contextlib.suppress(OSError):
                if time.time() - f.stat().st_mtime > STALE_TMP_S:  # a live transcode's file is fresh
                    f.unlink()
            continue
        if f.suffix not in (PREVIEW_SUFFIX, FAILED_SUFFIX) or f.stem in fingerprints:
            continue
        f.unlink(missing_ok=True)
        deleted += f.suffix == PREVIEW_SUFFIX
    return deleted


def sweep_index_previews(index_dir: str | os.PathLike) -> int:
    """:func:`collect_unreferenced_previews` against the index's indexed videos."""
    index_dir = Path(index_dir)
    if not (index_dir / PREVIEWS_DIR).is_dir():
        return 0
    return collect_unreferenced_previews(index_dir, {r.fingerprint for r in _indexed(index_dir)})


def verify_previews(index_dir: str | os.PathLike, indexed_rows) -> tuple[list[str], dict[str, int]]:
    """Previews are derived data, remade on request: nothing about them is an error. Warnings: a
    corrupt preview, a recorded failure, an unreferenced file. Counts: previews checked, and videos
    browsers cannot play whose preview is not made yet (normal with lazy previews: reported, not
    warned about). Returns (warnings, counts)."""
    import av

    folder = Path(index_dir) / PREVIEWS_DIR
    warnings, checked = [], 0
    by_fp = {r["fingerprint"]: r["id"] for r in indexed_rows}
    pending = 0
    for row in indexed_rows:
        if (folder / f"{row['fingerprint']}{PREVIEW_SUFFIX}").is_file():
            continue
        if (folder / f"{row['fingerprint']}{FAILED_SUFFIX}").is_file():
            continue  # warned about below
        try:
            pending += not probe(row["path"]).playable
        except PreviewError:
            pass  # the source is unreadable: `--check-sources` reports it
    if not folder.is_dir():
        return warnings, {"previews": 0, "previews_not_made": pending}
    for f in sorted(folder.iterdir()):
        if f.suffix == FAILED_SUFFIX and f.stem in by_fp:
            reason = f.read_text(encoding="utf-8", errors="replace").strip()
            warnings.append(f"{by_fp[f.stem]}: no browser preview could be made ({reason})")
        if f.suffix != PREVIEW_SUFFIX:
            continue
        if f.stem not in by_fp:
            warnings.append(
                f"{PREVIEWS_DIR}/{f.name} belongs to no indexed video (`indexer compact` deletes it)"
            )
            continue
        checked += 1
        try:
            with av.open(str(f)) as c:
                next(c.decode(video=0))
        except (av.FFmpegError, OSError, ValueError, StopIteration, IndexError):
            warnings.append(
                f"{by_fp[f.stem]}: its preview {PREVIEWS_DIR}/{f.name} is corrupt; delete it and it is remade "
                "on the next request (or by `indexer previews`)"
            )
    return warnings, {"previews": checked, "previews_not_made": pending}


# -- command line (`indexer previews`, and `--previews` on build/add) --------------------------------
def add_previews_flag(group) -> None:
    group.add_argument(
        "--previews",
        action="store_true",
        help="after indexing, make the browser previews of new videos browsers cannot play (default: the "
        "API makes each on its first request; `indexer previews` makes them later)",
    )


def add_previews_arguments(p) -> None:
    p.add_argument("--retry", action="store_true", help="try again videos whose preview could not be made")
    p.add_argument("--id", dest="ids", action="append", metavar="ID", help="only this video (repeatable)")


def run_previews(args) -> int:
    """`indexer previews INDEX`: make the missing previews, delete unreferenced ones. Exit status 0,
    or 1 when some could not be made (those videos still show thumbnails and times)."""
    from indexer.store.format import IndexFormatError, read_manifest

    try:
        read_manifest(args.index)
    except IndexFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = make_previews(args.index, ids=set(args.ids) if args.ids else None, retry=args.retry)
    report.swept = sweep_index_previews(args.index)
    print(report.summary())
    return 1 if report.failed else 0
