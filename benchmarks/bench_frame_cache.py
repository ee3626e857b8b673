"""Which value encoding should the frame cache use? Measures candidate encodings on real decoded,
resized frames: stored bytes per frame, encode + decode time, and whether the round trip is exact.

    .venv/bin/python benchmarks/bench_frame_cache.py [--video PATH ...] [--size 448 64] [--frames 32]

Without ``--video`` it writes a synthetic 8 s clip (moving shapes over a textured background; real
footage compresses differently, so pass real videos when you have them). Candidates: raw bytes;
raw + zlib (levels 1 and 6); raw + lz4 (if the ``lz4`` package is installed); PNG (lossless,
compress levels 1 and 6); JPEG (lossy, quality 90 and 95). Prints one table per (video, size).
The choice and its reasons are recorded in ``service/cache.py``'s docstring.
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np


def _codecs() -> dict[str, tuple[Callable[[np.ndarray], bytes], Callable[[bytes, tuple], np.ndarray]]]:
    from PIL import Image

    def raw_dec(b, shape):
        return np.frombuffer(b, dtype=np.uint8).reshape(shape)

    def pil_enc(fmt, **kw):
        def enc(a):
            buf = io.BytesIO()
            Image.fromarray(a).save(buf, format=fmt, **kw)
            return buf.getvalue()

        return enc

    def pil_dec(b, shape):
        return np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))

    codecs = {
        "raw": (lambda a: a.tobytes(), raw_dec),
        "raw+zlib1": (lambda a: zlib.compress(a.tobytes(), 1), lambda b, s: raw_dec(zlib.decompress(b), s)),
        "raw+zlib6": (lambda a: zlib.compress(a.tobytes(), 6), lambda b, s: raw_dec(zlib.decompress(b), s)),
    }
    try:
        import lz4.frame as lz4f

        codecs["raw+lz4"] = (
            lambda a: lz4f.compress(a.tobytes()),
            lambda b, s: raw_dec(lz4f.decompress(b), s),
        )
    except ImportError:
        pass
    codecs["png1"] = (pil_enc("PNG", compress_level=1), pil_dec)
    codecs["png6"] = (pil_enc("PNG", compress_level=6), pil_dec)
    codecs["jpeg95"] = (pil_enc("JPEG", quality=95), pil_dec)
    codecs["jpeg90"] = (pil_enc("JPEG", quality=90), pil_dec)
    return codecs


def _synthetic_video(directory: Path) -> Path:
    from world.media import write_video

    rng = np.random.default_rng(0)
    h, w, n = 240, 320, 192
    yy, xx = np.mgrid[0:h, 0:w]
    background = (rng.integers(0, 40, (h, w, 3)) + np.stack([xx * 0.5, yy * 0.6, (xx + yy) * 0.3], -1)) % 256
    frames = []
    for t in range(n):
        f = background.copy()
        cx, cy = int(40 + 2 * t) % w, int(120 + 60 * np.sin(t / 10))
        f[max(0, cy - 25) : cy + 25, max(0, cx - 25) : cx + 25] = (220, 40 + t % 200, 60)
        frames.append(f.astype(np.uint8))
    return write_video(directory / "synthetic.mp4", np.stack(frames), fps=24)


def measure(frames: np.ndarray, codecs) -> list[tuple[str, float, float, float, float, bool, int]]:
    rows = []
    raw_bytes = frames[0].nbytes
    for name, (enc, dec) in codecs.items():
        t0 = time.perf_counter()
        blobs = [enc(f) for f in frames]
        t1 = time.perf_counter()
        back = [dec(b, f.shape) for b, f in zip(blobs, frames, strict=True)]
        t2 = time.perf_counter()
        exact = all(np.array_equal(a, b) for a, b in zip(frames, back, strict=True))
        max_err = max(
            int(np.abs(a.astype(int) - b.astype(int)).max()) for a, b in zip(frames, back, strict=True)
        )
        size = float(np.mean([len(b) for b in blobs]))
        n = len(frames)
        rows.append(
            (name, size / 1024, raw_bytes / size, (t1 - t0) / n * 1e3, (t2 - t1) / n * 1e3, exact, max_err)
        )
    return rows


def main() -> None:
    from indexer.video import decode_frames, probe_video
    from models.backbone import working_size

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--video", action="append", default=[], help="video file(s) to sample frames from")
    parser.add_argument("--size", type=int, nargs="+", default=[448, 64], help="working resolutions")
    parser.add_argument("--frames", type=int, default=32, help="frames per video")
    args = parser.parse_args()
    codecs = _codecs()
    with tempfile.TemporaryDirectory() as tmp:
        videos = [Path(v) for v in args.video] or [_synthetic_video(Path(tmp))]
        for video in videos:
            info = probe_video(video)
            indices = np.linspace(0, info.num_frames - 1, args.frames).astype(np.int64)
            for size in args.size:
                frames = decode_frames(video, indices, size=working_size(info.width, info.height, size))
                h, w = frames.shape[1:3]
                print(f"\n{video.name} ({info.width}x{info.height}), {len(frames)} frames at {w}x{h}:")
                print("| encoding | KiB/frame | ratio vs raw | encode ms | decode ms | exact | max abs err |")
                print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
                for name, kib, ratio, enc_ms, dec_ms, exact, err in measure(frames, codecs):
                    print(
                        f"| {name} | {kib:.1f} | {ratio:.2f} | {enc_ms:.2f} | {dec_ms:.2f} | {exact} | {err} |"
                    )


if __name__ == "__main__":
    main()
