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
