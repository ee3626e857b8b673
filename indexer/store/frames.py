"""The frame store: the pixels of the frame-bank frames, kept in the index so that stage 2 need not
decode the source video (docs/architecture.md, "The frame store").

One file per committed batch, beside that batch's bank file and written by the same commit:

    frames/frames-NNNNNNNN.bin
        header   magic b"QFS1", codec id (u8), 3 zero bytes, rows (u32)           12 bytes
        table    rows x (offset u64, length u32, crc32 u32, height u16, width u16)  20 bytes a row
        payload  the encoded frames, one after another (offsets count from the start of the file)

Row r of a video's stored frames is its frame-bank row r (the same order as the bank's frame
indices), at the backbone's working size for the video. Every row carries the CRC-32 of its bytes, so
a damaged frame is found before it is decoded (readers then decode that frame from the source).
Writers encode deterministically, so a resumed build writes the same bytes as an uninterrupted one.
"""

from __future__ import annotations

import io
import mmap
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.config import FRAME_STORE_JPEG_QUALITY, FrameStore

FRAMES_DIR = "frames"
_MAGIC = b"QFS1"
_HEADER = struct.Struct("<4sB3xI")
_ROW = struct.Struct("<QIIHH")
_CODEC_IDS = {FrameStore.JPEG: 1, FrameStore.PNG: 2, FrameStore.LZ4: 3}
_CODECS_BY_ID = {v: k for k, v in _CODEC_IDS.items()}
# exact: decoding gives back the very pixels that were stored (frames decoded from the source)
EXACT_CODECS = frozenset({FrameStore.PNG, FrameStore.LZ4})
_FRAMES_NAME = re.compile(rf"^{FRAMES_DIR}/frames-\d{{8}}\.bin$")


class StoredFrameError(ValueError):
    """A stored frame (or its file) is missing, damaged or not what the index says it is."""


@dataclass
class EncodedFrames:
    """One video's frame-bank frames, encoded for the frame store (bank order)."""

    codec: str
    blobs: list[bytes]
    shapes: list[tuple[int, int]]  # (height, width) of each frame

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.blobs)


def frames_file_name(commit_seq: int) -> str:
    return f"{FRAMES_DIR}/frames-{commit_seq:08d}.bin"


def is_frames_file_name(name: object) -> bool:
    """True for the only form a frame-store reference may take (``frames/frames-NNNNNNNN.bin``)."""
    return isinstance(name, str) and _FRAMES_NAME.match(name) is not None


def check_codec(codec: str) -> FrameStore:
    try:
        return FrameStore(codec)
    except ValueError:
        raise ValueError(
            f"unknown frame store {codec!r}; choose one of {', '.join(c.value for c in FrameStore)}"
        ) from None


# -- codecs -----------------------------------------------------------------------------------------
def encode_frame(frame: np.ndarray, codec: str) -> bytes:
    """[H, W, 3] uint8 -> bytes in ``codec`` (deterministic: the same pixels give the same bytes)."""
    frame = np.ascontiguousarray(frame, dtype=np.uint8)
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"a stored frame must be [H, W, 3], got {frame.shape}")
    codec = check_codec(codec)
    if codec == FrameStore.LZ4:
        import lz4.frame

        return lz4.frame.compress(frame.tobytes())
    from PIL import Image

    buf = io.BytesIO()
    image = Image.fromarray(frame, mode="RGB")
    if codec == FrameStore.JPEG:
        image.save(buf, "JPEG", quality=FRAME_STORE_JPEG_QUALITY, subsampling=0)
    elif codec == FrameStore.PNG:
        image.save(buf, "PNG", compress_level=1)
    else:
        raise ValueError(f"frame store {codec.value!r} keeps no pixels")
    return buf.getvalue()


def decode_frame(blob: bytes | memoryview, codec: str, shape: tuple[int, int]) -> np.ndarray:
    """Inverse of :func:`encode_frame` -> [H, W, 3] uint8; StoredFrameError on anything malformed."""
    h, w = shape
    try:
        if codec == FrameStore.LZ4:
            import lz4.frame

            raw = lz4.frame.decompress(blob)
            if len(raw) != h * w * 3:
                raise StoredFrameError("stored frame has the wrong size")
            return np.frombuffer(raw, dtype=np.uint8).reshape(h, w, 3)
        from PIL import Image

        with Image.open(io.BytesIO(bytes(blob))) as image:
            image.load()
            if image.mode != "RGB" or image.size != (w, h):
                raise StoredFrameError(f"stored frame is {image.mode} {image.size}, expected RGB {(w, h)}")
            return np.asarray(image, dtype=np.uint8)
    except StoredFrameError:
        raise
    except Exception as exc:  # PIL's OSError/SyntaxError, lz4's RuntimeError on bad input
        raise StoredFrameError(f"stored frame does not decode ({type(exc).__name__})") from exc


def encode_frames(frames, codec: str) -> EncodedFrames:
    """A video's bank frames ([C, H, W, 3] or a list of [H, W, 3]) for the frame store."""
    blobs = [encode_frame(f, codec) for f in frames]
    return EncodedFrames(codec=str(check_codec(codec)), blobs=blobs, shapes=[f.shape[:2] for f in frames])


# -- files --------------------------------------------------------------------------------------------
def frames_file_bytes(videos: list[EncodedFrames], codec: str) -> bytes:
    """One batch's frame-store file: the rows of ``videos`` in order."""
    codec = check_codec(codec)
    rows = sum(len(v.blobs) for v in videos)
    offset = _HEADER.size + rows * _ROW.size
    table, payload = [], []
    for v in videos:
        if v.codec != codec:
            raise ValueError(f"frames encoded as {v.codec} in a {codec.value} frame store")
        for blob, (h, w) in zip(v.blobs, v.shapes, strict=True):
            table.append(_ROW.pack(offset, len(blob), zlib.crc32(blob), int(h), int(w)))
            payload.append(blob)
            offset += len(blob)
    return b"".join([_HEADER.pack(_MAGIC, _CODEC_IDS[codec], rows), *table, *payload])


def copy_rows(source: FramesFile, spans: list[tuple[int, int]]) -> tuple[bytes, list[int]]:
    """A new frame-store file holding rows ``[first, first + count)`` of ``source`` for each span, in
    order, their bytes and CRCs unchanged (nothing is decoded); and the new first row of each span.
    What a compaction writes for the surviving videos of a batch (docs/architecture.md)."""
    rows = [r for first, count in spans for r in range(first, first + count)]
    starts = list(np.cumsum([0] + [count for _, count in spans])[:-1].astype(int))
    offset = _HEADER.size + len(rows) * _ROW.size
    table, payload = [], []
    for r in rows:
        blob = source.blob(r)  # checks the CRC: a damaged row is not copied silently
        h, w = source.shape(r)
        table.append(_ROW.pack(offset, len(blob), int(source.table["crc"][r]), h, w))
        payload.append(bytes(blob))
        offset += len(blob)
    header = _HEADER.pack(_MAGIC, _CODEC_IDS[FrameStore(source.codec)], len(rows))
    return b"".join([header, *table, *payload]), starts


class FramesFile:
    """A frame-store file opened for reading (memory-mapped). Opening checks the header and that
    every row lies inside the file; :meth:`read` checks a row's CRC before decoding it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                if size < _HEADER.size:
                    raise StoredFrameError(f"{self.path.name} is truncated")
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise StoredFrameError(f"{self.path.name} cannot be read ({type(exc).__name__})") from exc
        magic, codec_id, rows = _HEADER.unpack_from(self._map, 0)
        if magic != _MAGIC or codec_id not in _CODECS_BY_ID:
            raise StoredFrameError(f"{self.path.name} is not a frame-store file")
        end = _HEADER.size + rows * _ROW.size
        if end > size:
            raise StoredFrameError(f"{self.path.name} is truncated (its table runs past the end)")
        self.codec = _CODECS_BY_ID[codec_id]
        self.rows = int(rows)
        table = np.frombuffer(
            self._map,
            dtype=np.dtype(
                [("offset", "<u8"), ("length", "<u4"), ("crc", "<u4"), ("h", "<u2"), ("w", "<u2")]
            ),
            count=rows,
            offset=_HEADER.size,
        )
        self.table = table.copy()
        if rows and int((self.table["offset"].astype(np.int64) + self.table["length"]).max()) > size:
            raise StoredFrameError(f"{self.path.name} is truncated (rows run past the end)")
        self.nbytes = size

    def shape(self, row: int) -> tuple[int, int]:
        return int(self.table["h"][row]), int(self.table["w"][row])

    def blob(self, row: int) -> memoryview:
        """The bytes of ``row`` after checking their CRC-32."""
        if not 0 <= row < self.rows:
            raise StoredFrameError(f"{self.path.name} has no row {row}")
        off, length, crc = (int(self.table[k][row]) for k in ("offset", "length", "crc"))
        data = memoryview(self._map)[off : off + length]
        if zlib.crc32(data) != crc:
            raise StoredFrameError(f"{self.path.name}: stored frame {row} is damaged (CRC mismatch)")
        return data

    def read(self, row: int) -> np.ndarray:
        return decode_frame(self.blob(row), self.codec, self.shape(row))

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:  # a frame view still alive: the map closes when it is collected
            pass
