"""What the search page shows besides JSON: frame thumbnails, the indexed video files (with HTTP
range requests), and the short-lived media tokens that let ``<img>`` and ``<video>`` elements,
which cannot send headers, pass the API-key check.

- Thumbnails come from the same :class:`engine.frames.FrameSource` as stage 2's frames (frame
  cache first, decoded from the source video on a miss), so an evidence frame a search just used is
  a cache hit. They are the working-size frame, shrunk to fit ``size`` (never enlarged), as JPEG.
- A video file is only ever found through its id in the index; nothing a client sends becomes a
  path.
- ``GET /videos/{id}/media`` serves the source when browsers play it (H.264 in MP4, VP8/VP9 in
  WebM) and otherwise its browser-safe preview (``indexer.previews``: H.264/MP4 in the index
  directory, made on the first request and cached). :func:`playable_file` chooses; a source whose
  preview cannot be made raises :class:`NoPreview` with a reason that names no path.
- A media token is ``<expiry>.<signature>``: an HMAC-SHA256, keyed by the configured API keys, of
  the expiry time. It is valid for every video until it expires, and for nothing but the media
  routes; rotating the API keys invalidates every token.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import mimetypes
import os
import re
import threading
import time
from dataclasses import dataclass

import numpy as np

from engine.frames import FrameSource, FrameStats

MIN_THUMB_SIZE = 16
MAX_THUMB_SIZE = 512
DEFAULT_THUMB_SIZE = 256
JPEG_QUALITY = 85
MEDIA_TOKEN_TTL_S = 15 * 60
CHUNK_BYTES = 256 * 1024

_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)


class NotServable(LookupError):
    """The id names no indexed video, or the frame is outside it (mapped to HTTP 404)."""


class FrameUnreadable(OSError):
    """The source video could not be decoded at that frame (mapped to HTTP 404 with the reason)."""


class NoPreview(RuntimeError):
    """Browsers cannot play the source and no preview could be made (the message names no path)."""


class RangeNotSatisfiable(ValueError):
    """A ``Range`` header that selects no byte of the file (mapped to HTTP 416)."""


@dataclass(frozen=True)
class ByteRange:
    start: int
    end: int  # inclusive
    size: int  # the whole file's size

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    @property
    def content_range(self) -> str:
        return f"bytes {self.start}-{self.end}/{self.size}"


def servable_record(index, video_id: str):
    """The indexed video ``video_id`` names (failed videos and unknown ids are not servable)."""
    record = index.video(video_id)
    if record is None or record.status != "indexed":
        raise NotServable(video_id)
    return record


def thumbnail_jpeg(frames: FrameSource, record, frame_index: int, size: int) -> bytes:
    """Frame ``frame_index`` of ``record`` as a JPEG whose longer side is at most ``size``."""
    if not 0 <= frame_index < int(record.num_frames):
        raise NotServable(f"frame {frame_index}")
    got = frames.get([(record, np.asarray([frame_index], dtype=np.int64))], FrameStats())[0]
    if isinstance(got, Exception):
        raise FrameUnreadable(str(got)) from got
    from PIL import Image

    image = Image.fromarray(np.ascontiguousarray(got[0]))
    # stored frames are at the working size (multiples of 32, e.g. 182x122 -> 160x96): give the
    # thumbnail the source's aspect ratio again, its longer side that of the stored frame
    target = thumbnail_size(int(record.width), int(record.height), max(image.size), size)
    if target != image.size:
        image = image.resize(target, Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def thumbnail_size(width: int, height: int, longest: int, size: int) -> tuple[int, int]:
    """(w, h) with the aspect of ``width`` x ``height``, the longer side min(``longest``, ``size``)."""
    side = max(1, min(longest, size))
    if width <= 0 or height <= 0:
        return side, side
    if width >= height:
        return side, max(1, round(side * height / width))
    return max(1, round(side * width / height)), side


@dataclass(frozen=True)
class ServedFile:
    path: str
    media_type: str
    etag: str
    last_modified: float  # unix time
    size: int
    preview: bool


_PREVIEWS_AT_ONCE = threading.BoundedSemaphore(2)  # transcodes must not starve the model worker's CPU
_PLAYABLE: dict[tuple[str, str], bool] = {}  # (fingerprint, path) -> browsers play the source


def playable_file(index_dir, record) -> ServedFile:
    """The file ``GET /videos/{id}/media`` sends for ``record``: the source when browsers play it,
    else its preview (made now if missing: blocking, run it in a thread). Raises
    :class:`FrameUnreadable` when the source is gone, :class:`NoPreview` when no preview can be made."""
    from indexer import previews

    file_size(record.path)  # the source must still be there (its fingerprint names the preview)
    key = (record.fingerprint, record.path)
    try:
        if key not in _PLAYABLE:
            _PLAYABLE[key] = previews.probe(record.path).playable
        if _PLAYABLE[key]:
            path, kind, preview = record.path, media_type(record.path), False
        else:
            path = previews.preview_path(index_dir, record.fingerprint)
            if not path.is_file():
                with _PREVIEWS_AT_ONCE:
                    previews.ensure_preview(index_dir, record.path, record.fingerprint)
            path = str(path)
            kind, preview = previews.PREVIEW_MEDIA_TYPE, True
    except previews.PreviewError as exc:
        raise NoPreview(
            f"browsers cannot play this video's format and no playable copy could be made: {exc}"
        ) from None
    try:
        st = os.stat(path)
    except OSError as exc:
        raise FrameUnreadable("the video file is no longer readable") from exc
    etag = f'"{record.fingerprint}-{"p" if preview else "s"}-{st.st_size:x}-{st.st_mtime_ns:x}"'
    return ServedFile(path, kind, etag, st.st_mtime, st.st_size, preview)


def media_type(path: str) -> str:
    guessed, _ = mimetypes.guess_type(path)
    return guessed if guessed and guessed.startswith("video/") else "application/octet-stream"


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """The one byte range a ``Range`` header asks for, or None to send the whole file (no header,
    a unit other than bytes, or several ranges, which HTTP lets a server ignore). Raises
    :class:`RangeNotSatisfiable` for a range that selects no byte of a ``size``-byte file."""
    if header is None or not header.strip().lower().startswith("bytes") or "," in header:
        return None
    m = _RANGE.match(header)
    if m is None:
        raise RangeNotSatisfiable(f"malformed Range header {header[:60]!r}")
    first, last = m.groups()
    if first == "" and last == "":
        raise RangeNotSatisfiable("a byte range needs a start or a suffix length")
    if first == "":  # suffix: the last N bytes
        n = int(last)
        if n == 0 or size == 0:
            raise RangeNotSatisfiable("an empty suffix range selects nothing")
        return ByteRange(max(0, size - n), size - 1, size)
    start = int(first)
    end = size - 1 if last == "" else min(int(last), size - 1)
    if start >= size or (last != "" and int(last) < start):
        raise RangeNotSatisfiable(f"bytes {start}-{last} is outside a {size}-byte file")
    return ByteRange(start, end, size)


def read_chunks(path: str, start: int, length: int):
    """The file's bytes [start, start + length), in chunks (a generator for a streaming response)."""
    with open(path, "rb") as f:
        f.seek(start)
        left = length
        while left > 0:
            chunk = f.read(min(CHUNK_BYTES, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk


def file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError as exc:
        raise FrameUnreadable("the source video is no longer readable") from exc


# -- media tokens ------------------------------------------------------------------------------------
def _token_key(api_keys: list[str]) -> bytes:
    return hashlib.sha256(b"qaslr-media-token\0" + "\0".join(sorted(api_keys)).encode()).digest()


def issue_media_token(api_keys: list[str], *, ttl_s: int = MEDIA_TOKEN_TTL_S, now: float | None = None):
    """(token, expiry unix time) for the media routes."""
    expiry = int((time.time() if now is None else now) + ttl_s)
    signature = hmac.new(_token_key(api_keys), f"media:{expiry}".encode(), hashlib.sha256).hexdigest()
    return f"{expiry}.{signature}", expiry


def media_token_valid(token: str, api_keys: list[str], *, now: float | None = None) -> bool:
    expiry, _, signature = token.partition(".")
    if not expiry.isdigit() or len(expiry) > 12 or not signature:
        return False
    if int(expiry) < (time.time() if now is None else now):
        return False
    expected = hmac.new(_token_key(api_keys), f"media:{expiry}".encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(signature.encode(), expected.encode())
