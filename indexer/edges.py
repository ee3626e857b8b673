"""Edge frames: source frames around the frame bank's largest changes, embedded at build time.

The frame bank holds about one frame per second, so a moment found in it knows each edge only to
within the gap between two bank frames; the search refines the top result's edges at the source's
frame rate (engine.refine) from the source frames inside those gaps. Where an event starts or ends
the picture changes, so a bank's largest changes between consecutive frames are where moment edges
are likely to fall. For the ``gaps`` gaps of a video with the largest change (1 - cosine between
consecutive bank frames) the build embeds the very source frames the refiner would read inside
them (:func:`gap_frames`, at most ``per_edge`` per gap) and stores them beside the bank ("edge
frames": their source frame indices and float16 embeddings, in the metadata store). A search whose
moment edges lie in stored gaps then refines without decoding or calling the backbone; other gaps
(and indexes built before edge frames) are decoded and embedded as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.config import EDGE_FRAMES_PER_GAP, EDGE_GAPS


@dataclass
class EdgeFrames:
    frame_indices: np.ndarray  # [E] int64, increasing: source frames inside the stored gaps
    embeddings: np.ndarray  # [E, d] float16, embedded like the bank's frames


def gap_frames(lo: int, hi: int, per_edge: int = EDGE_FRAMES_PER_GAP) -> np.ndarray:
    """Source frame indices strictly between bank frames ``lo`` and ``hi``: all of them, or
    ``per_edge`` spread evenly over the gap (the frames the refiner scores inside an edge's gap)."""
    inside = np.arange(int(lo) + 1, int(hi), dtype=np.int64)
    if len(inside) > per_edge:
        inside = inside[np.linspace(0, len(inside) - 1, per_edge).round().astype(int)]
    return np.unique(inside)


def largest_changes(bank_embeddings: np.ndarray, gaps: int = EDGE_GAPS) -> np.ndarray:
    """Rows g (the gap between bank rows g and g + 1) of the ``gaps`` largest changes, sorted."""
    e = np.asarray(bank_embeddings, dtype=np.float32)
    if len(e) < 2 or gaps <= 0:
        return np.empty(0, dtype=np.int64)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    change = 1.0 - np.einsum("id,id->i", e[:-1], e[1:])
    top = np.argsort(-change, kind="stable")[: int(gaps)]
    return np.sort(top).astype(np.int64)


def edge_frame_indices(
    bank_indices: np.ndarray, bank_embeddings: np.ndarray, *, gaps: int = EDGE_GAPS,
    per_edge: int = EDGE_FRAMES_PER_GAP,
) -> np.ndarray:  # fmt: skip
    """The source frames to embed as edge frames: those inside the largest-change gaps."""
    idx = np.asarray(bank_indices, dtype=np.int64)
    parts = [gap_frames(idx[g], idx[g + 1], per_edge) for g in largest_changes(bank_embeddings, gaps)]
    return np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)


def embed_edge_frames(
    backbone, path, bank_indices: np.ndarray, bank_embeddings: np.ndarray, *, size: tuple[int, int],
    gaps: int = EDGE_GAPS, image_batch: int = 32,
) -> EdgeFrames | None:  # fmt: skip
    """A video's edge frames: decoded from its source at the working ``size`` (as its bank frames
    were) and embedded as images; None when it has no gap with frames inside."""
    from indexer.video import decode_frames

    idx = edge_frame_indices(bank_indices, bank_embeddings, gaps=gaps)
    if len(idx) == 0:
        return None
    frames = decode_frames(path, idx, size=size)
    out = np.empty((len(idx), np.shape(bank_embeddings)[1]), dtype=np.float16)
    step = max(1, int(image_batch))
    for s in range(0, len(idx), step):
        out[s : s + step] = backbone.embed_images(list(frames[s : s + step])).float().cpu().numpy()
    return EdgeFrames(idx, out)


def lookup(edges: EdgeFrames | None, wanted: np.ndarray) -> np.ndarray:
    """For each wanted frame index: its row among the edge frames, or -1 where none is stored."""
    wanted = np.asarray(wanted, dtype=np.int64)
    if edges is None or len(edges.frame_indices) == 0 or wanted.size == 0:
        return np.full(wanted.shape, -1, dtype=np.int64)
    have = edges.frame_indices
    pos = np.clip(np.searchsorted(have, wanted), 0, len(have) - 1)
    return np.where(have[pos] == wanted, pos, -1)
