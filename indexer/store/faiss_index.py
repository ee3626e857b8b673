"""FAISS helpers: the factory choice, building (and training) an index, reading ids, (de)serialising."""

from __future__ import annotations

import contextlib
import logging
import math
import re
from pathlib import Path

import numpy as np

from core.config import (
    FAISS_ANN_FACTORY,
    FAISS_EXACT_FACTORY,
    FAISS_EXACT_MAX_VECTORS,
    FAISS_HNSW_EF_SEARCH,
    FAISS_IVF_LISTS_PER_SQRT,
    FAISS_IVF_MIN_TRAIN_PER_LIST,
    FAISS_IVF_NPROBE,
    FAISS_IVF_TRAIN_PER_LIST,
    FAISS_LEGACY_ANN_FACTORIES,
)
from indexer.store.format import IndexFormatError

logger = logging.getLogger(__name__)

# Default FAISS choice by corpus size (core.config): exact search while it is cheap, IVF beyond (trained
# when the corpus crosses the threshold, re-trained as it grows). Any factory string can be forced with
# --faiss-factory; a forced one is never switched.
EXACT_MAX_VECTORS = FAISS_EXACT_MAX_VECTORS
EXACT_FACTORY = FAISS_EXACT_FACTORY
_AUTOMATIC_IVF = re.compile(re.escape(FAISS_ANN_FACTORY).replace(re.escape("{nlist}"), r"(\d+)") + "$")


def normalize_factory(factory: str) -> str:
    factory = factory.strip()
    return factory if factory.upper().startswith("IDMAP") else f"IDMap2,{factory}"


def ivf_lists(num_vectors: int) -> int:
    """nlist of the automatic IVF type for ``num_vectors``: 4 * sqrt(2^k) for the octave
    2^k <= N < 2^(k+1), so that it changes (and the index is re-trained) at most once per doubling of
    N; at most 2^k / 39 lists so that k-means has enough points, and at least 1."""
    octave = 1 << max(0, int(num_vectors).bit_length() - 1)
    return max(
        1, min(round(FAISS_IVF_LISTS_PER_SQRT * math.sqrt(octave)), octave // FAISS_IVF_MIN_TRAIN_PER_LIST)
    )


def ann_factory(num_vectors: int) -> str:
    """The automatic approximate factory for ``num_vectors`` (above the exact threshold)."""
    return FAISS_ANN_FACTORY.format(nlist=ivf_lists(num_vectors))


def is_automatic(factory: str) -> bool:
    """True for the factories the automatic choice makes (exact, its IVF, or the earlier HNSW32);
    False for one forced with --faiss-factory."""
    factory = normalize_factory(factory)
    return (
        factory == EXACT_FACTORY
        or factory in FAISS_LEGACY_ANN_FACTORIES
        or _AUTOMATIC_IVF.match(factory) is not None
    )


def default_factory(num_vectors: int, exact_max: int = FAISS_EXACT_MAX_VECTORS) -> str:
    return EXACT_FACTORY if num_vectors <= exact_max else ann_factory(num_vectors)


def automatic_switch(current: str, num_vectors: int, exact_max: int = FAISS_EXACT_MAX_VECTORS) -> str | None:
    """The factory an index of ``num_vectors`` should switch to, or None: when it already has it, or when
    its factory is not one of the automatic choices (one forced with --faiss-factory stays). Above the
    threshold this includes a re-training with more IVF lists once N has entered a new octave
    (:func:`ivf_lists`)."""
    current = normalize_factory(current)
    if not is_automatic(current):
        return None
    wanted = default_factory(num_vectors, exact_max)
    return None if wanted == current else wanted


def needs_training(factory: str, dim: int) -> bool:
    import faiss

    probe = faiss.index_factory(dim, normalize_factory(factory), faiss.METRIC_INNER_PRODUCT)
    return not probe.is_trained


def min_training_points(nlist: int) -> int:
    """Vectors needed to train ``nlist`` IVF lists: 39 per list (FAISS's minimum), 1 for a single list."""
    return 1 if nlist <= 1 else nlist * FAISS_IVF_MIN_TRAIN_PER_LIST


def make_faiss_index(factory: str, dim: int, embeddings: np.ndarray, ids: np.ndarray):
    """Build a FAISS index from scratch (training first when the factory needs it). When there are
    too few vectors to train (e.g. IVF with few videos) it falls back to exact search and says so."""
    import faiss

    factory = normalize_factory(factory)
    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        nlist = ivf_nlist(index)
        needed = min_training_points(nlist)
        if len(embeddings) < needed:
            logger.warning(
                "FAISS factory %r needs at least %d vectors to train; the index has %d: using exact search",
                factory,
                needed,
                len(embeddings),
            )
            factory = EXACT_FACTORY
            index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        else:
            train = np.ascontiguousarray(embeddings, dtype=np.float32)
            cap = max(nlist, 1) * FAISS_IVF_TRAIN_PER_LIST
            if len(train) > cap:  # a fixed-seed sample: k-means is the slow part of training
                pick = np.sort(np.random.default_rng(0).choice(len(train), cap, replace=False))
                train = train[pick]
            if not train_on_gpu(index, train):  # GPU k-means when faiss-gpu sees a GPU
                index.train(train)
    if len(embeddings):
        index.add_with_ids(np.ascontiguousarray(embeddings, dtype=np.float32), ids.astype(np.int64))
    return index, factory


def ivf_nlist(index) -> int:
    """The number of IVF lists of ``index`` (0 when it is not an IVF index)."""
    import faiss

    with contextlib.suppress(Exception):
        inner = faiss.downcast_index(index.index if hasattr(index, "index") else index)
        return int(faiss.extract_index_ivf(inner).nlist)
    return 0


def ivf_nprobe(nlist: int) -> int:
    """IVF lists searched per query, on the CPU and the GPU: nlist / 8, at most FAISS_IVF_NPROBE."""
    return max(1, min(FAISS_IVF_NPROBE, nlist // 8))


def faiss_ids(index) -> np.ndarray:
    import faiss

    return faiss.vector_to_array(index.id_map).astype(np.int64)


def read_faiss(path: Path):
    """Read a FAISS file; anything unreadable is an :class:`IndexFormatError` naming the file."""
    import faiss

    if not Path(path).is_file():
        raise IndexFormatError(f"{Path(path).name} not found")
    try:
        return faiss.read_index(str(path))
    except Exception as exc:  # noqa: BLE001 - FAISS raises RuntimeError with its C++ message
        from core.errors import summarize

        raise IndexFormatError(f"{Path(path).name} is corrupt or unreadable: {summarize(exc)}") from exc


def serialize(index) -> bytes:
    import faiss

    return faiss.serialize_index(index).tobytes()


def remove_ids(index, fids: np.ndarray) -> None:
    """Remove ids in place; raises RuntimeError when the index type cannot remove (e.g. HNSW)."""
    import faiss

    index.remove_ids(faiss.IDSelectorBatch(np.asarray(fids, dtype=np.int64)))


def is_hnsw(index) -> bool:
    """True when ``index`` (IDMap2-wrapped or not) is an HNSW graph."""
    import faiss

    inner = faiss.downcast_index(index.index if hasattr(index, "id_map") else index)
    return isinstance(inner, faiss.IndexHNSW)


def search_params(
    *, allowed_fids: np.ndarray | None, nlist: int, hnsw: bool = False, k: int = 0, ntotal: int = 0
):
    """(parameters, selector) for one FAISS search: an id selector for filtered search, nprobe for IVF
    indexes, efSearch for HNSW (at least ``k``; FAISS's default of 16 lost a quarter of the top 10 at
    100k vectors, benchmarks/bench_faiss_types.py). A filtered IVF search probes more lists, in
    proportion to how few of the ``ntotal`` vectors the filter allows (all of them for a selective
    filter), as the selector only sees the vectors of the lists probed. The caller keeps the selector
    referenced until the search returns."""
    import faiss

    nprobe = ivf_nprobe(nlist)
    if allowed_fids is not None and nlist > 0 and ntotal > 0:
        nprobe = min(nlist, max(nprobe, math.ceil(nprobe * ntotal / max(1, len(allowed_fids)))))
    sel = faiss.IDSelectorBatch(allowed_fids) if allowed_fids is not None else None
    extra = {} if sel is None else {"sel": sel}
    if nlist > 0:
        params = faiss.SearchParametersIVF(nprobe=nprobe, **extra)
    elif hnsw:
        params = faiss.SearchParametersHNSW(efSearch=max(FAISS_HNSW_EF_SEARCH, k), **extra)
    else:
        params = None if sel is None else faiss.SearchParameters(sel=sel)
    return params, sel


# -- FAISS on the GPU (faiss-gpu, the [gpu] extra) ---------------------------------------------------
FAISS_DEVICES = ("auto", "cpu", "gpu")


def gpu_count() -> int:
    """GPUs FAISS can use: 0 with faiss-cpu, or when no GPU is visible."""
    import faiss

    if not hasattr(faiss, "StandardGpuResources"):
        return 0
    try:
        return int(faiss.get_num_gpus())
    except Exception:  # noqa: BLE001 - a broken CUDA runtime counts as no GPU
        return 0


# GPU FAISS answers at most this many neighbours per query (k, and nprobe for IVF); deep result pages
# ask for offset + shortlist + 1, up to about 10 000.
GPU_MAX_K = 2048


class GpuSearch:
    """Stage 1 on a GPU: a GPU copy of an ``IDMap2`` index's inner index (Flat or IVF; HNSW has no GPU
    version) with the id map kept here. Only unfiltered searches use it: an id selector (a metadata
    filter) runs on the CPU index, which stays loaded. So does a search for more than
    :data:`GPU_MAX_K` neighbours (a deep page), which GPU FAISS refuses."""

    def __init__(self, index, device: int = 0):
        import faiss

        self.resources = faiss.StandardGpuResources()
        inner = faiss.downcast_index(index.index)
        self.gpu = faiss.index_cpu_to_gpu(self.resources, device, inner)
        self.cpu = index  # the IDMap2 index the copy was made from (deep pages search it)
        self.nlist = ivf_nlist(index)
        if self.nlist:
            self.gpu.nprobe = ivf_nprobe(self.nlist)  # as search_params chooses on the CPU
        self.id_map = faiss.vector_to_array(index.id_map).astype(np.int64)

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if k > GPU_MAX_K:
            params, _ = search_params(allowed_fids=None, nlist=self.nlist, k=k, ntotal=self.cpu.ntotal)
            return self.cpu.search(q, k, params=params)
        scores, positions = self.gpu.search(q, k)
        labels = np.where(positions >= 0, self.id_map[np.clip(positions, 0, None)], -1)
        return scores, labels


def gpu_search_for(index, setting: str) -> tuple[GpuSearch | None, str]:
    """(a GPU searcher or None, a sentence saying which device serves stage 1 and why) for ``setting``
    (auto: the GPU when faiss-gpu sees one; cpu; gpu: the GPU, else the CPU with a warning)."""
    if setting not in FAISS_DEVICES:
        raise ValueError(f"FAISS device must be one of {', '.join(FAISS_DEVICES)}, got {setting!r}")
    if setting == "cpu":
        return None, "cpu (configured)"
    n = gpu_count()
    if n == 0:
        reason = "cpu (no GPU visible to FAISS: faiss-gpu not installed or no CUDA device)"
        if setting == "gpu":
            logger.warning("FAISS on the GPU was asked for, but %s", reason.removeprefix("cpu "))
        return None, reason
    try:
        return GpuSearch(index), f"gpu ({n} visible)"
    except Exception as exc:  # noqa: BLE001 - e.g. HNSW, which FAISS cannot put on a GPU
        from core.errors import summarize

        logger.warning("stage 1 stays on the CPU: this FAISS index cannot go to the GPU (%s)", summarize(exc))
        return None, "cpu (this index type has no GPU version)"


def train_on_gpu(index, train: np.ndarray) -> bool:
    """Train an untrained index's IVF quantizer on a GPU when one is visible (k-means is the slow part
    of building a trained index); returns False (nothing done) otherwise, or on any GPU error."""
    import faiss

    if gpu_count() == 0:
        return False
    try:
        inner = faiss.downcast_index(index.index if hasattr(index, "id_map") else index)
        ivf = faiss.extract_index_ivf(inner)
        clus = faiss.Clustering(ivf.d, ivf.nlist)
        clus.seed = 0
        gpu_quantizer = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, faiss.IndexFlatIP(ivf.d))
        clus.train(np.ascontiguousarray(train, dtype=np.float32), gpu_quantizer)
        centroids = faiss.vector_to_array(clus.centroids).reshape(ivf.nlist, ivf.d)
        ivf.quantizer.reset()
        ivf.quantizer.add(centroids)
        index.train(train)  # the rest (e.g. PQ codebooks) on the CPU; the quantizer is already trained
        return True
    except Exception as exc:  # noqa: BLE001 - fall back to CPU training
        from core.errors import summarize

        logger.warning("GPU training failed (%s); training on the CPU", summarize(exc))
        return False
