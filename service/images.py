"""Image queries: a base64 image from a request, checked and decoded to the backbone's working size.

base64 text  ->  at most MAX_IMAGE_BYTES bytes (else ImageTooLarge: 413)
             ->  a JPEG, PNG, WebP, GIF or BMP picture (else NotAnImage: 415)
             ->  at most MAX_IMAGE_PIXELS pixels (else ImageTooLarge: 413; no decompression bombs)
             ->  RGB [h, w, 3] uint8 at the working size for ``frame_size`` (aspect ratio kept),
                 as the frame bank's frames are
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io

import numpy as np

from models.backbone import working_size

MAX_IMAGE_BYTES = 4 * 1024 * 1024
MAX_IMAGE_BASE64_CHARS = (MAX_IMAGE_BYTES + 2) // 3 * 4 + 64  # + a data: URL prefix
MAX_IMAGE_PIXELS = 40_000_000
IMAGE_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP")


class ImageError(ValueError):
    status = 422
    code = "invalid_image"


class ImageTooLarge(ImageError):
    status = 413
    code = "image_too_large"


class NotAnImage(ImageError):
    status = 415
    code = "unsupported_image"


def decode_base64(text: str) -> bytes:
    """The bytes of a base64 image, with or without a ``data:image/...;base64,`` prefix."""
    if text.startswith("data:"):
        header, sep, text = text.partition(",")
        if not sep or not header.endswith(";base64"):
            raise ImageError("image: a data URL must be base64 (data:image/...;base64,...)")
    if len(text) > MAX_IMAGE_BASE64_CHARS:
        raise ImageTooLarge(f"image: larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB")
    try:
        data = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise NotAnImage("image: not valid base64, so not a picture") from None
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageTooLarge(f"image: larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB")
    if not data:
        raise NotAnImage("image: empty, not a picture")
    return data


def decode_image(data: bytes, *, frame_size: int) -> np.ndarray:
    """RGB [h, w, 3] uint8 at the working size for ``frame_size``."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as probe:
            kind, (width, height) = probe.format, probe.size
    except (UnidentifiedImageError, OSError, ValueError):
        raise NotAnImage(f"image: not a picture in a supported format ({', '.join(IMAGE_FORMATS)})") from None
    if kind not in IMAGE_FORMATS:
        raise NotAnImage(f"image: {kind} is not supported; send one of {', '.join(IMAGE_FORMATS)}")
    if width * height > MAX_IMAGE_PIXELS:
        raise ImageTooLarge(f"image: {width}x{height} is more than {MAX_IMAGE_PIXELS} pixels")
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.seek(0)
            rgb = image.convert("RGB")
            w, h = working_size(width, height, frame_size)
            rgb = rgb.resize((w, h), Image.Resampling.BICUBIC)
    except (OSError, ValueError, Image.DecompressionBombError):
        raise NotAnImage("image: the picture is truncated or corrupt") from None
    return np.array(rgb, dtype=np.uint8)  # writable: torch.from_numpy needs that


def query_image(text: str, *, frame_size: int) -> tuple[np.ndarray, str]:
    """(pixels, content hash) of a request's base64 image."""
    data = decode_base64(text)
    return decode_image(data, frame_size=frame_size), hashlib.sha256(data).hexdigest()[:32]
