"""Where stage 1 runs: the CPU unless faiss-gpu is installed and sees a GPU. The machines that run
these tests have no GPU, so they check the CPU fallback and what the index reports; the GPU path
itself is checked by benchmarks/bench_faiss_gpu.py on a GPU machine."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from indexer import BuildOptions, build_index
from indexer.store import IndexReader
from indexer.store import faiss_index as fx


@pytest.fixture(scope="module")
def index(tmp_path_factory, sample_videos, tiny_checkpoint):
    directory = tmp_path_factory.mktemp("faiss_device") / "idx"
    options = BuildOptions(model=str(tiny_checkpoint), frames=8, clip_len=4)
    assert not build_index(sample_videos, directory, options).stopped
    return directory


def test_no_gpu_means_the_cpu_path_and_says_why(index, caplog):
    assert fx.gpu_count() == 0  # faiss-cpu here
    with IndexReader(index, faiss_device="auto") as r:
        info = r.faiss_info()
        assert info["factory"] == "IDMap2,Flat" and info["vectors"] == len(r)
        assert info["device"].startswith("cpu (no GPU visible")
        e = r.embedding(sorted(v.id for v in r.videos())[0])
        auto_hits = r.search(e[None], 3)
    with caplog.at_level(logging.WARNING), IndexReader(index, faiss_device="gpu") as r:
        assert r.faiss_info()["device"].startswith("cpu (no GPU visible")
        assert r.search(e[None], 3) == auto_hits  # unchanged answers
    assert "FAISS on the GPU was asked for" in caplog.text
    with IndexReader(index, faiss_device="cpu") as r:
        assert r.faiss_info()["device"] == "cpu (configured)"


def test_an_unknown_faiss_device_is_refused(index):
    with pytest.raises(ValueError, match="auto, cpu, gpu"):
        IndexReader(index, faiss_device="tpu")


def test_readyz_reports_the_faiss_device(index, tiny_checkpoint):
    from service.app import create_app
    from service.settings import Settings
    from tests.service.conftest import live_server

    app = create_app(Settings(index=index, model=str(tiny_checkpoint), redis_url=None, faiss_device="auto"))
    with live_server(app) as client:
        faiss_info = client.get("/readyz").json()["faiss"]
    assert faiss_info["device"].startswith("cpu") and faiss_info["factory"] == "IDMap2,Flat"
    assert np.isfinite(faiss_info["vectors"])


class _FakeGpuIndex:
    """What faiss.index_cpu_to_gpu returns, on the CPU: the same answers, and GPU FAISS's k limit."""

    def __init__(self, inner):
        import faiss

        self.inner, self.nprobe, self.calls = faiss.clone_index(inner), None, []

    def search(self, q, k):
        self.calls.append(k)
        if k > fx.GPU_MAX_K:
            raise RuntimeError(f"Error: 'k <= GPU_MAX_SELECTION_K' failed: k {k} is too large")
        if self.nprobe is not None:
            self.inner.nprobe = self.nprobe
        return self.inner.search(q, k)


@pytest.fixture
def fake_gpu(monkeypatch):
    import faiss

    made = []

    def to_gpu(resources, device, inner):
        made.append(_FakeGpuIndex(inner))
        return made[-1]

    monkeypatch.setattr(faiss, "StandardGpuResources", object, raising=False)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", to_gpu, raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1, raising=False)
    return made


@pytest.mark.parametrize("factory", ["Flat", "IVF16,Flat"])
def test_a_deep_page_on_a_gpu_index_searches_the_cpu_copy(fake_gpu, factory):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = np.arange(10_000, 13_000)
    index, _ = fx.make_faiss_index(factory, 32, x, ids)
    gpu, device = fx.gpu_search_for(index, "auto")
    assert isinstance(gpu, fx.GpuSearch) and device == "gpu (1 visible)"
    q = x[:2]
    params, _ = fx.search_params(allowed_fids=None, nlist=fx.ivf_nlist(index), k=2500, ntotal=3000)
    for k in (10, fx.GPU_MAX_K, fx.GPU_MAX_K + 1, 2500):
        scores, labels = gpu.search(q, k)
        cpu_scores, cpu_labels = index.search(q, k, params=params)
        assert labels.shape == (2, k) and np.array_equal(labels, cpu_labels)
        np.testing.assert_allclose(scores, cpu_scores, rtol=1e-6)
    assert fake_gpu[-1].calls == [10, fx.GPU_MAX_K]  # beyond the limit the GPU was not asked


def test_the_reader_on_a_fake_gpu_answers_as_on_the_cpu(index, fake_gpu):
    with IndexReader(index, faiss_device="cpu") as r:
        e = r.embedding(sorted(v.id for v in r.videos())[0])
        cpu_hits = r.search(e[None], 3)
    with IndexReader(index, faiss_device="auto") as r:
        assert r.faiss_info()["device"] == "gpu (1 visible)"
        assert r.search(e[None], 3) == cpu_hits
    assert fake_gpu and fake_gpu[0].calls
