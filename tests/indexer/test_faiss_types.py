"""The automatic FAISS type above the exact threshold: IVF with nlist from the corpus size, trained when
the corpus crosses the threshold, re-trained when N enters a new octave and at every compact; adds,
removes and filtered search on it; its recall@10 against exact search. Store level, no model (the
thresholds are lowered through the exact_max parameters `indexer add`/`compact` take)."""

from __future__ import annotations

import numpy as np
import pytest

from indexer.compaction import compact
from indexer.maintenance import verify_index
from indexer.store import Entry, IndexReader, IndexWriter, Manifest, VideoRecord
from indexer.store import faiss_index as fx

D = 16
EXACT_MAX = 500  # lowered threshold for these tests


def _manifest(factory: str) -> Manifest:
    return Manifest(
        format_version=1,
        backbone_id="tiny",
        backbone_fingerprint="bb01",
        head_fingerprint="oneshot",
        embedder="oneshot",
        embed_dim=D,
        hidden_size=D,
        frame_size=64,
        max_frames=8,
        clip_len=4,
        num_think_tokens=None,
        max_evidence=32,
        faiss_factory=factory,
    )


def clustered(n: int, d: int, *, seed: int = 0, centres: int | None = None) -> np.ndarray:
    """Unit vectors from a mixture of Gaussians on the sphere (as benchmarks/bench_faiss_types.py)."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres or max(16, n // 100), d)).astype(np.float32)
    x = c[rng.integers(0, len(c), n)] + 0.6 * rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _entries(first: int, vectors: np.ndarray) -> list[Entry]:
    out = []
    for i, v in enumerate(vectors, start=first):
        rec = VideoRecord(
            id=f"v{i}",
            faiss_id=-1,
            path=f"/videos/{i}.mp4",
            fingerprint=f"fp{i}",
            fps=10.0,
            num_frames=10,
            duration_s=1.0,
            width=64,
            height=48,
            metadata={"cat": "a" if i % 2 else "b"},
            status="indexed",
            error=None,
        )
        out.append(Entry(rec, v, np.arange(2, dtype=np.int64), np.zeros((2, D), np.float16)))
    return out


def _grow(directory, vectors: np.ndarray, first: int) -> str | None:
    """What `indexer add` does: commit, then finalize with the automatic switch; returns the switch."""
    with IndexWriter.open(directory) as w:
        w.commit(_entries(first, vectors))
        switch = fx.automatic_switch(w.manifest.faiss_factory, w.counts()["indexed"], EXACT_MAX)
        w.finalize(factory=switch)
    return switch


def _centroids(directory) -> np.ndarray:
    import faiss

    with IndexReader(directory) as r:
        ivf = faiss.extract_index_ivf(faiss.downcast_index(r._index.index))
        return ivf.quantizer.reconstruct_n(0, ivf.nlist)


def test_ivf_lists_follow_octaves_of_the_corpus_size():
    assert fx.ivf_lists(1_000_000) == 2896  # 4 * sqrt(2^19)
    assert fx.ivf_lists(50_001) == fx.ivf_lists(65_535) == 724 < fx.ivf_lists(65_536) == 1024
    for n in (1, 5, 77, 78, 1000, 20_000, 10**7):
        nlist = fx.ivf_lists(n)
        assert nlist >= 1 and fx.min_training_points(nlist) <= n  # always trainable
        assert fx.ivf_lists(2 * n) >= nlist
    assert fx.default_factory(EXACT_MAX, EXACT_MAX) == fx.EXACT_FACTORY
    assert fx.default_factory(2000, EXACT_MAX) == "IDMap2,IVF26(Flat),Flat"  # 1024 // 39 lists
    # the automatic types (and the earlier HNSW32) switch; a forced one stays
    assert fx.automatic_switch("IDMap2,HNSW32,Flat", 2000, EXACT_MAX) == "IDMap2,IVF26(Flat),Flat"
    assert fx.automatic_switch("IDMap2,IVF26(Flat),Flat", 200, EXACT_MAX) == fx.EXACT_FACTORY
    assert fx.automatic_switch("IDMap2,IVF26(Flat),Flat", 2047, EXACT_MAX) is None
    for forced in ("IVF1024,Flat", "HNSW16,Flat", "IVF64,SQ8"):
        assert fx.automatic_switch(forced, 2000, EXACT_MAX) is None


def test_crossing_the_threshold_trains_ivf_and_adds_removes_filters_work(tmp_path):
    x = clustered(1500, D, seed=1)
    directory = tmp_path / "idx"
    with IndexWriter.create(directory, _manifest(fx.default_factory(400, EXACT_MAX))) as w:
        w.commit(_entries(0, x[:400]))
        w.finalize()
    assert IndexReader(directory).manifest.faiss_factory == fx.EXACT_FACTORY

    assert _grow(directory, x[400:1100], 400) == "IDMap2,IVF26(Flat),Flat"  # switched and trained
    with IndexReader(directory) as r:
        assert r.manifest.faiss_factory == "IDMap2,IVF26(Flat),Flat" and fx.ivf_nlist(r._index) == 26
        assert r._index.is_trained and r._index.ntotal == 1100

    # an add within the octave keeps the trained lists and goes into them; each new video finds itself
    centroids = _centroids(directory)
    assert _grow(directory, x[1100:1500], 1100) is None
    assert np.array_equal(_centroids(directory), centroids)
    with IndexReader(directory) as r:
        assert r._index.ntotal == 1500
        hits = r.search(x[1100:1500], 1)
        assert [h[0][0] for h in hits] == [f"v{i}" for i in range(1100, 1500)]
        # filtered search (an IDSelector on the IVF index): only allowed ids, the target among them
        allowed = {"v1200", "v7", "v8", "v9"}
        hits = r.search(x[1200][None], 3, allowed_ids=allowed)[0]
        assert hits[0][0] == "v1200" and {h[0] for h in hits} <= allowed
        # a selective filter far from the query: every allowed video is still found (more lists probed)
        far = [f"v{i}" for i in np.argsort(x[:1100] @ x[1300])[:3]]
        assert sorted(h[0] for h in r.search(x[1300][None], 10, allowed_ids=set(far))[0]) == sorted(far)
        allowed = {v.id for v in r.videos() if v.metadata["cat"] == "a"}
        for row in r.search(x[:50], 10, allowed_ids=allowed):
            assert row and {h[0] for h in row} <= allowed

    # IVF removes in place (no rebuild: the lists stay)
    with IndexWriter.open(directory) as w:
        assert w.remove(["v1200", "v3"]) == []
    assert np.array_equal(_centroids(directory), centroids)
    with IndexReader(directory) as r:
        assert r._index.ntotal == 1498
        assert "v1200" not in {h[0] for h in r.search(x[1200][None], 10)[0]}
    assert verify_index(directory).ok


def test_retrained_when_the_corpus_enters_a_new_octave_and_at_compact(tmp_path):
    x = clustered(4200, D, seed=2)
    directory = tmp_path / "idx"
    with IndexWriter.create(directory, _manifest(fx.default_factory(1100, EXACT_MAX))) as w:
        w.commit(_entries(0, x[:1100]))
        w.finalize()
    assert IndexReader(directory).manifest.faiss_factory == "IDMap2,IVF26(Flat),Flat"
    # 1100 -> 2100: N crossed 2048 (it doubled since the 1024 octave): re-trained with more lists
    assert _grow(directory, x[1100:2100], 1100) == "IDMap2,IVF52(Flat),Flat"
    with IndexReader(directory) as r:
        assert fx.ivf_nlist(r._index) == 52 and r._index.ntotal == 2100
        assert [h[0][0] for h in r.search(x[:2100:50], 1)] == [f"v{i}" for i in range(0, 2100, 50)]
    assert _grow(directory, x[2100:4000], 2100) is None  # 4000 < 4096: same octave, no re-training

    # compact re-trains on what is stored now, even within the octave
    before = _centroids(directory)
    with IndexWriter.open(directory) as w:
        w.remove([f"v{i}" for i in range(0, 4000, 3)])
        compact(w, exact_max=EXACT_MAX)
        assert w.manifest.faiss_factory == "IDMap2,IVF52(Flat),Flat"  # 2666 left: the 2048 octave
    after = _centroids(directory)
    assert after.shape == before.shape and not np.array_equal(after, before)
    # shrinking to another octave and compacting: fewer lists
    with IndexWriter.open(directory) as w:
        w.remove([f"v{i}" for i in range(1, 4000, 3)])
        report = compact(w, exact_max=EXACT_MAX)
    assert report.faiss_switched_from == "IDMap2,IVF52(Flat),Flat"
    assert report.faiss_factory == "IDMap2,IVF26(Flat),Flat"
    assert verify_index(directory).ok


@pytest.mark.parametrize("d", [128, 256])
def test_automatic_ivf_keeps_recall_at_10_against_exact(d):
    """recall@10 of the automatic type vs Flat on 20k clustered vectors (threshold lowered to 5k)."""
    import faiss

    n = 20_000
    x = clustered(n, d, seed=3)
    rng = np.random.default_rng(4)
    q = x[rng.choice(n, 200, replace=False)] + 0.05 * rng.standard_normal((200, d)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    ids = np.arange(n, dtype=np.int64)
    factory = fx.default_factory(n, exact_max=5_000)
    assert factory != fx.EXACT_FACTORY
    ivf, built = fx.make_faiss_index(factory, d, x, ids)
    assert built == factory and fx.ivf_nlist(ivf) == fx.ivf_lists(n)
    exact, _ = fx.make_faiss_index(fx.EXACT_FACTORY, d, x, ids)
    params, _sel = fx.search_params(allowed_fids=None, nlist=fx.ivf_nlist(ivf), k=10)
    assert isinstance(params, faiss.SearchParametersIVF) and params.nprobe == fx.ivf_nprobe(fx.ivf_lists(n))
    _, got = ivf.search(q, 10, params=params)
    _, truth = exact.search(q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth, strict=True)])
    assert recall >= 0.95, recall
