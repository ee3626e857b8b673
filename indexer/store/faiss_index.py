"""FAISS helpers: the factory choice, building (and training) an index, reading ids, (de)serialising."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import numpy as np

from indexer.store.format import IndexFormatError

logger = logging.getLogger(__name__)

# Default FAISS choice by corpus size: exact search while it is cheap, HNSW beyond (no training, so
# incremental adds keep working). Any factory string can be forced with --faiss-factory.
EXACT_MAX_VECTORS = 50_000
EXACT_FACTORY = "IDMap2,Flat"


def normalize_factory(factory: str) -> str:
    factory = factory.strip()
    return factory if factory.upper().startswith("IDMAP") else f"IDMap2,{factory}"


def default_factory(num_vectors: int) -> str:
    return EXACT_FACTORY if num_vectors <= EXACT_MAX_VECTORS else "IDMap2,HNSW32,Flat"


def needs_training(factory: str, dim: int) -> bool:
    import faiss

    probe = faiss.index_factory(dim, normalize_factory(factory), faiss.METRIC_INNER_PRODUCT)
    return not probe.is_trained


def make_faiss_index(factory: str, dim: int, embeddings: np.ndarray, ids: np.ndarray):
    """Build a FAISS index from scratch (training first when the factory needs it). When there are
    too few vectors to train (e.g. IVF with few videos) it falls back to exact search and says so."""
    import faiss

    factory = normalize_factory(factory)
    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        nlist = ivf_nlist(index)
        if len(embeddings) < max(nlist, 1) * 39:
            logger.warning(
                "FAISS factory %r needs at least %d vectors to train; the index has %d: using exact search",
                factory,
                max(nlist, 1) * 39,
                len(embeddings),
            )
            factory = EXACT_FACTORY
            index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        else:
            train = np.ascontiguousarray(embeddings, dtype=np.float32)
            if len(train) > nlist * 256:  # FAISS's own cap on useful training points; fixed seed
                pick = np.sort(np.random.default_rng(0).choice(len(train), nlist * 256, replace=False))
                train = train[pick]
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


def search_params(*, allowed_fids: np.ndarray | None, nlist: int):
    """(parameters, selector) for one FAISS search: an id selector for filtered search, nprobe for IVF
    indexes. The caller keeps the selector referenced until the search returns."""
    import faiss

    nprobe = max(1, min(64, nlist // 8))
    sel = faiss.IDSelectorBatch(allowed_fids) if allowed_fids is not None else None
    if nlist > 0:
        params = (
            faiss.SearchParametersIVF(nprobe=nprobe)
            if sel is None
            else faiss.SearchParametersIVF(sel=sel, nprobe=nprobe)
        )
    else:
        params = None if sel is None else faiss.SearchParameters(sel=sel)
    return params, sel
