"""What compact frame banks would cost in score error, and what a bank and frame store take per hour.

    PYTHONPATH=. python benchmarks/bench_bank_storage.py [--out DIR] [--json FILE]

Builds a small shapes-world index with the shipped tiny-world backbone (d = 128, 128 px frames,
JPEG frame store), embeds the corpus's queries, and compares the relevance q·f_c of every query
against every bank frame as stored (float16) with:

    int8       per-vector scale: f ~ round(f / s) * s, s = max|f| / 127 (d + 4 bytes a frame)
    d' < d     Matryoshka truncation: the first d' dimensions of f and q, each renormalised

reporting max |Δ q·f| and how often the best frame of each (query, video) stays the same (or moves
to a neighbouring bank frame) and the best video of each query (by its best frame) stays the same. Then the frame store's bytes per frame at the index's
size (128 px) and, re-encoded from the sources at 448 px, what a 2B-sized backbone's frames take;
and the bytes per hour of video of the bank (d = 128, 512, 1024, 2048; float16 and int8) and of the
frame store at one bank frame per second.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np


def _build(out: Path):
    from indexer import BuildOptions, build_index
    from training.backbone import tiny_world_checkpoint
    from world.corpus import CorpusConfig, make_corpus

    corpus = make_corpus(
        out / "corpus", CorpusConfig(videos=6, seed=4242, min_duration_s=40.0, max_duration_s=60.0)
    )
    ckpt = tiny_world_checkpoint(out / "tiny-world")
    index = out / "index"
    if not (index / "manifest.json").exists():
        build_index(corpus.manifest, index, BuildOptions(model=str(ckpt), embedder="oneshot", workers=1))
    return corpus, ckpt, index


def _queries(index: Path, ckpt: Path, texts: list[str]) -> np.ndarray:
    from indexer.assembly import encoder_for, load_model_for_index
    from indexer.store import read_manifest

    m = read_manifest(index)
    loaded = load_model_for_index(m, str(ckpt), head_dir=None, device="cpu")
    encoder = encoder_for(m, loaded.backbone, loaded.head, clip_batch_size=8)
    q = encoder.embed_queries(texts).float().numpy()
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def int8_per_vector(f: np.ndarray) -> np.ndarray:
    """f -> its int8 per-vector-scale reconstruction (what an int8 bank would score with)."""
    scale = np.abs(f).max(axis=1, keepdims=True) / 127.0
    scale[scale == 0] = 1.0
    return np.clip(np.round(f / scale), -127, 127) * scale


def compare(banks: dict[str, np.ndarray], q: np.ndarray, transform) -> dict:
    """max |Δ q·f|, best-frame agreement per (query, video), best-video agreement per query."""
    max_err, same_frame, near_frame, pairs = 0.0, 0, 0, 0
    best_ref, best_new = [], []
    for f in banks.values():
        ref = q @ f.T  # [Q, C]
        fq, qq = transform(f, q)
        new = qq @ fq.T
        max_err = max(max_err, float(np.abs(new - ref).max()))
        same_frame += int((ref.argmax(1) == new.argmax(1)).sum())
        near_frame += int((np.abs(ref.argmax(1) - new.argmax(1)) <= 1).sum())  # a neighbouring frame
        pairs += len(q)
        best_ref.append(ref.max(1))
        best_new.append(new.max(1))
    top_ref, top_new = np.stack(best_ref, 1).argmax(1), np.stack(best_new, 1).argmax(1)
    return {
        "max_abs_delta": round(max_err, 5),
        "best_frame_agreement": round(same_frame / pairs, 4),
        "best_frame_within_one": round(near_frame / pairs, 4),
        "best_video_agreement": round(float((top_ref == top_new).mean()), 4),
    }


def _truncate(dim: int):
    def t(f, q):
        f, q = f[:, :dim], q[:, :dim]
        return f / np.linalg.norm(f, axis=1, keepdims=True), q / np.linalg.norm(q, axis=1, keepdims=True)

    return t


def _frame_bytes_at(corpus, side: int, per_video: int = 8) -> float:
    """Mean JPEG (the frame store's codec) bytes of bank-like frames decoded from the sources at
    ``side`` px (the long side; aspect ratio kept, multiples of 32)."""
    from core.config import FrameStore
    from indexer.store.frames import encode_frame
    from indexer.video import decode_frames, probe_video
    from models.backbone import working_size

    sizes = []
    for v in corpus.videos:
        path = corpus.root / v.path
        info = probe_video(path)
        idx = np.linspace(0, info.num_frames - 1, per_video).astype(int)
        for frame in decode_frames(path, idx, size=working_size(info.width, info.height, frame_size=side)):
            sizes.append(len(encode_frame(frame, FrameStore.JPEG)))
    return float(np.mean(sizes)) if sizes else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="work folder (kept; default: a temporary one)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="bank_storage_"))
    corpus, ckpt, index = _build(out)

    from indexer import index_stats
    from indexer.store import IndexReader

    texts = [t for t, _ in corpus.queries()]
    q = _queries(index, ckpt, texts)
    with IndexReader(index) as r:
        banks = {vid: np.asarray(r.frame_bank(vid).embeddings, dtype=np.float32) for vid in r.bank_ids()}
        d = r.manifest.embed_dim
    result = {
        "videos": len(banks),
        "queries": len(texts),
        "bank_frames": sum(len(b) for b in banks.values()),
        "d": d,
    }
    result["int8_per_vector"] = compare(banks, q, lambda f, qq: (int8_per_vector(f), qq))
    for dim in (d // 2, d // 4):
        result[f"matryoshka_{dim}"] = compare(banks, q, _truncate(dim))
        result[f"matryoshka_{dim}_int8"] = compare(
            banks, q, lambda f, qq, t=_truncate(dim): (lambda a, b: (int8_per_vector(a), b))(*t(f, qq))
        )

    stats = index_stats(index)
    per_frame_128 = stats["frame_store"]["bytes_per_frame"]
    per_frame_448 = _frame_bytes_at(corpus, 448)
    result["frame_store_bytes_per_frame"] = {"128px": round(per_frame_128), "448px": round(per_frame_448)}
    result["bank_bytes_per_frame_measured"] = round(stats["frame_bank"]["bytes_per_frame"], 2)
    hour = 3600  # bank frames per hour at 1 fps
    result["per_hour_bytes"] = {
        **{f"bank_f16_d{k}": hour * 2 * k for k in (128, 512, 1024, 2048)},
        **{f"bank_int8_d{k}": hour * (k + 4) for k in (128, 512, 1024, 2048)},
        "frame_store_128px": round(hour * per_frame_128),
        "frame_store_448px": round(hour * per_frame_448),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
