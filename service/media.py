"""What the search page shows besides JSON: frame thumbnails, the indexed video files (with HTTP
range requests), and the short-lived media tokens that let ``<img>`` and ``<video>`` elements,
which cannot send headers, pass the API-key check.

- Thumbnails come from the same :class:`engine.frames.FrameSource` as stage 2's frames (frame
  cache first, decoded from the source video on a miss), so an evidence frame a search just used is
  a cache hit. They are the working-size frame, shrunk to fit ``size`` (never enlarged), as JPEG.
- A video file is only ever found through its id in the index; nothing a client sends becomes a
  path.
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
    if max(image.size) > size:
        image.thumbnail((size, size), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


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
