"""The engine's runtime: what runs a search, beside what it computes.

    Engine.search -> Admission (bounded queue, search threads, light lane, CPU slots)
                  -> the search's stages on a search thread
                  -> EncodeBatcher (shared backbone calls, BatchPolicy) -> model processes

:mod:`engine.runtime.admission` admits a search (429 when full), runs it on a search thread under
its deadline (a stage-1-only search on a light lane of its own) and bounds how many run their cheap
stages at once; :mod:`engine.runtime.batching` merges the backbone work of concurrent searches into
shared calls, by :mod:`engine.runtime.policy`; :mod:`engine.runtime.model_process` runs a batcher
worker's calls in a process of its own (on a CPU). :class:`Runtime` builds them from an
:class:`engine.config.EngineConfig` and wires them together: a batch starts once every running
search is in the batcher.
"""

from __future__ import annotations

import logging

from core.config import LIGHT_LANE_THREADS
from engine.runtime.admission import Admission, auto_cpu_slots

__all__ = ["Runtime", "make_batcher"]

logger = logging.getLogger(__name__)


class Runtime:
    """Admission and the batcher of one engine (``batcher`` None: every search encodes its own)."""

    def __init__(self, config, batcher=None):
        batching = config.batching
        threads = (config.search_threads or config.queue_size + 1) if batching else 1
        self.admission = Admission(
            config.queue_size,
            threads=threads,
            light_threads=LIGHT_LANE_THREADS if batching else 0,  # 0: the old single thread
            cpu_slots=(config.cpu_slots or auto_cpu_slots()) if batching else 0,
            search_nice=config.search_nice if batching else 0,
        )
        self.batcher = batcher
        if batcher is not None and self.admission.threads > 1 and batcher.peers is None:
            # a batch starts once every running search is in it (engine.runtime.batching)
            batcher.peers = lambda: self.admission.running
            self.admission.on_search_done = batcher.wake

    @property
    def backends(self) -> list:
        """The model processes (engine.runtime.model_process) the batcher's workers own."""
        return [] if self.batcher is None else list(self.batcher.backends)

    def close(self) -> None:
        self.admission.shutdown()
        if self.batcher is not None:
            self.batcher.close()


def make_batcher(config, clip_len: int, device="cpu", backbone=None):
    """The stage-2 batcher ``config`` asks for (None with ``batching`` off): at most
    ``batch_max_frames`` frames per call (0: ``clip_batch_size`` clips of the index's ``clip_len``),
    on ``batch_workers`` threads (0: :func:`engine.runtime.batching.auto_workers` for ``device``), or on
    one thread per model process (``model_processes``, engine.runtime.model_process) when there are any."""
    if not config.batching:
        return None
    from engine.runtime.batching import EncodeBatcher, auto_workers

    clips = config.clip_batch_size
    if not isinstance(clips, int):  # "auto": sized by the device (models.streaming.auto_clip_batch_size)
        from models.streaming import CPU_CLIP_BATCH, auto_clip_batch_size

        clips = auto_clip_batch_size(backbone, int(clip_len)) if backbone is not None else CPU_CLIP_BATCH
    frames = config.batch_max_frames or clips * int(clip_len)
    workers = config.batch_workers or auto_workers(device)
    backends = []
    if backbone is not None and config.model_processes:
        from engine.runtime.model_process import auto_model_processes, start_model_processes, weights_bytes

        count = config.model_processes
        if count < 0:
            count = auto_model_processes(device, weights_bytes=weights_bytes(backbone))
        elif str(device).startswith("cuda"):
            logger.warning(
                "model processes run on the CPU only: the backbone on %s serves every call itself", device
            )
            count = 0
        if count:
            backends = start_model_processes(backbone, str(config.model), count, nice=config.batch_nice)
    return EncodeBatcher(
        max_wait_s=config.batch_max_wait_ms / 1e3, max_frames=frames, workers=workers, nice=config.batch_nice,
        backends=backends,
    )  # fmt: skip
