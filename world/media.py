"""Encoding frames to video files with PyAV (world videos, test corpora, benchmarks).

Codecs are the world's three: H.264 (``h264``), MPEG-4 Part 2 (``mpeg4``) and VP9 (``vp9``), in
mp4, mkv, webm or avi containers (chosen by the file's extension). Frames are encoded as yuv420p,
so odd sizes are cropped to even ones.
"""

from __future__ import annotations

import fractions
from collections.abc import Iterable
from pathlib import Path

import numpy as np

CODECS = {"h264": "libx264", "mpeg4": "mpeg4", "vp9": "libvpx-vp9"}
CONTAINERS = {
    ".mp4": ("h264", "mpeg4"),
    ".mkv": ("h264", "mpeg4", "vp9"),
    ".webm": ("vp9",),
    ".avi": ("mpeg4", "h264"),
}


def write_video(
    path: str | Path,
    frames: Iterable[np.ndarray],
    *,
    fps: float = 24.0,
    codec: str = "mpeg4",
    gop_s: float | None = None,
    quality: int | None = None,
) -> Path:
    """Encode frames ([n, H, W, 3] uint8 or an iterable of [H, W, 3]) to ``path``.

    ``gop_s`` sets the keyframe interval in seconds (default: the encoder's); ``quality`` is the
    codec's own scale (mpeg4 qscale 2-31, h264 crf 0-51, vp9 crf 4-63; lower is better)."""
    import av

    path = Path(path)
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {sorted(CODECS)}, got {codec!r}")
    allowed = CONTAINERS.get(path.suffix.lower())
    if allowed is None:
        raise ValueError(f"container must be one of {sorted(CONTAINERS)}, got {path.suffix!r}")
    if codec not in allowed:
        raise ValueError(f"{path.suffix} does not carry {codec}; it carries {list(allowed)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    rate = fractions.Fraction(fps).limit_denominator(1000)
    with av.open(str(path), mode="w") as container:
        stream = None
        for frame in frames:
            frame = np.ascontiguousarray(frame, dtype=np.uint8)
            if stream is None:
                stream = container.add_stream(CODECS[codec], rate=rate)
                h, w = frame.shape[:2]
                stream.height, stream.width = h - h % 2, w - w % 2
                stream.pix_fmt = "yuv420p"
                options = {
                    "mpeg4": {"qscale": str(quality or 3)},
                    "h264": {"crf": str(quality or 20), "preset": "veryfast"},
                    "vp9": {"crf": str(quality or 32), "b": "0", "deadline": "realtime", "cpu-used": "8"},
                }[codec]
                if gop_s is not None:
                    gop = max(1, int(round(gop_s * fps)))
                    stream.codec_context.gop_size = gop
                    if codec == "h264":
                        options.update({"x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0"})
                stream.options = options
            frame = frame[: stream.height, : stream.width]
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        if stream is None:
            raise ValueError("no frames to encode")
        for packet in stream.encode():
            container.mux(packet)
    return path
