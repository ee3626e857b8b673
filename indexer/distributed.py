"""`indexer build --backend ray`: the build's decoding and embedding spread over a Ray cluster.

The driver (the `indexer` process) plans the batches exactly as a local build does
(:meth:`indexer.pipeline.Builder.plan`) and stays the only writer of the index. Ray Data runs the
rest as one streaming dataset, one row per planned batch:

    from_items(batches)        one block per batch, so batches decode in parallel
    .map(decode, num_cpus=1)   Ray tasks on any node's CPUs: probe + decode every video of the batch
                               (indexer.pipeline.decode_video, the local build's function)
    .map(EmbedBatches, ...)    an actor pool: each actor loads the model once (a GPU per actor when
                               the cluster has GPUs) and embeds whole batches with
                               indexer.pipeline.BatchEncoder, the local build's code
    iter_rows() on the driver  batches come back in plan order and are committed through the same
                               IndexWriter, so FAISS ids, commit numbers and bank files are the ones
                               a local build writes

Because a batch is embedded by the same code on the same videos, a Ray build equals a local build
of the same source and settings (ids, statuses, frame-bank frames; embeddings within floating-point
tolerance when the hardware differs). Resume is the local build's: what is committed is skipped.

Fault tolerance: Ray retries a decode task whose worker died, and Ray Data restarts a dead embedding
actor and retries its batch. A batch can therefore be computed twice; the driver commits each
planned batch once (a duplicate row is dropped) and commits nothing out of order, so a retry can
neither lose nor duplicate a video. A failed *video* is not an error: it is recorded with its reason
as in a local build.

Every node needs the project installed (``pip install .[ray]``, same version) and must see the
video files and the model at the paths the driver uses (shared storage, or a hub id each node can
download). Ray is imported only here, and only when this backend is chosen.
"""

from __future__ import annotations

import logging
import pickle
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from core.errors import ConfigurationError, summarize
from indexer.pipeline import BatchResult, Builder, BuildStats, SourceItem, decode_video
from indexer.store.format import Manifest

logger = logging.getLogger(__name__)

DECODE_RETRIES = 3  # runs of a decode task after its worker process died
INSTALL_HINT = "the Ray backend needs Ray Data: pip install 'qaslr-search[ray]' (or .[ray] from a checkout)"


@dataclass(frozen=True)
class ModelSpec:
    """What an embedding actor needs to load the index's model on its own node."""

    model: str
    head_dir: str | None
    device: str | None
    dtype: str | None
    seed: int
    clip_batch: int
    image_batch: int


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # None: start a local Ray runtime in this process
    embedders: int | None = None  # actor pool size (None: one per GPU, else 1)
    gpus_per_embedder: float | None = None  # None: 1 when the cluster has GPUs, else 0
    show_progress: bool = False  # Ray Data's own progress bars (the command shows its own)


class RayConnectError(RuntimeError):
    """Ray cannot be started or the cluster at ``--address`` cannot be joined."""


class RayBuildError(RuntimeError):
    """The Ray job failed as a whole (not a video: those are recorded); committed batches are kept."""


def require_ray():
    """Import Ray Data, or raise ConfigurationError saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(INSTALL_HINT) from exc
    return ray


def _decode_batch(row: dict, *, decode_kwargs: dict) -> dict:
    """A Ray task: every video of one planned batch, probed and decoded (never raises for bad video)."""
    items: list[SourceItem] = pickle.loads(row["items"])
    decoded = [decode_video(item, **decode_kwargs) for item in items]
    return {"batch": row["batch"], "decoded": pickle.dumps(decoded, protocol=pickle.HIGHEST_PROTOCOL)}


class EmbedBatches:
    """A Ray actor of the embedding pool: loads the index's model once (refusing one that does not
    match the manifest) and turns decoded batches into index entries."""

    def __init__(self, manifest: Manifest, spec: ModelSpec):
        import torch

        from indexer.assembly import encoder_for, load_model_for_index
        from indexer.pipeline import BatchEncoder

        torch.manual_seed(spec.seed)
        loaded = load_model_for_index(
            manifest, spec.model, head_dir=spec.head_dir, device=spec.device, dtype=spec.dtype
        )
        encoder = encoder_for(manifest, loaded.backbone, loaded.head, clip_batch_size=spec.clip_batch)
        self.batch_encoder = BatchEncoder(encoder, embed_dim=manifest.embed_dim, image_batch=spec.image_batch)

    def __call__(self, row: dict) -> dict:
        decoded = pickle.loads(row["decoded"])
        stats = BuildStats()
        stats.seconds["decode"] += sum(d.seconds - d.store_seconds for d in decoded)
        stats.seconds["store"] += sum(d.store_seconds for d in decoded)
        frames = sum(d.decoded_frames for d in decoded)
        entries = self.batch_encoder.process(decoded, stats)
        result = BatchResult(entries, stats, frames, video_s=stats.video_s)
        return {"batch": row["batch"], "result": pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)}


def cluster_summary(ray) -> dict:
    """Nodes, CPUs and GPUs of the connected cluster."""
    res = ray.cluster_resources()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    return {"nodes": len(alive), "cpus": int(res.get("CPU", 0)), "gpus": int(res.get("GPU", 0))}


class RayBatchSource:
    """A ``batch_source`` for :meth:`indexer.pipeline.Builder.run` backed by Ray Data. Use as a context
    manager: it connects to (or starts) Ray on enter and disconnects on exit."""

    def __init__(self, builder: Builder, spec: ModelSpec, options: RayOptions = RayOptions()):
        self.builder = builder
        self.spec = spec
        self.options = options
        self.cluster: dict = {}
        self._ray = None

    def connect(self) -> RayBatchSource:
        """Join the cluster at the configured address, or start a local Ray runtime."""
        ray = require_ray()
        if not ray.is_initialized():
            try:
                ray.init(
                    address=self.options.address,
                    include_dashboard=False,
                    logging_level=logging.WARNING,
                    log_to_driver=False,  # the driver reports every failure itself
                )
            except Exception as exc:  # noqa: BLE001 - ConnectionError, ValueError, RuntimeError from Ray
                where = (
                    f"join the Ray cluster at {self.options.address}" if self.options.address else "start Ray"
                )
                raise RayConnectError(f"cannot {where}: {summarize(exc)}") from exc
        logging.getLogger("ray.data").setLevel(logging.WARNING)  # its per-dataset INFO lines
        self._ray = ray
        self.cluster = cluster_summary(ray)
        logger.info("Ray cluster: %(nodes)d node(s), %(cpus)d CPU(s), %(gpus)d GPU(s)", self.cluster)
        return self

    def disconnect(self) -> None:
        """Leave the cluster (a local runtime started by :meth:`connect` stops)."""
        if self._ray is not None:
            self._ray.shutdown()
            self._ray = None

    def __enter__(self) -> RayBatchSource:
        return self.connect()

    def __exit__(self, *exc) -> None:
        self.disconnect()

    def pool(self) -> tuple[int, float]:
        """(embedding actors, GPUs per actor) for this cluster and the options."""
        gpus = self.cluster.get("gpus", 0)
        per = self.options.gpus_per_embedder
        if per is None:
            per = 1.0 if gpus else 0.0
        size = self.options.embedders
        if size is None:
            size = max(1, int(gpus // per)) if per > 0 else 1
        return size, per

    def decoded_bytes_bound(self) -> int:
        """The most bytes of pixels one decoded batch holds: K uniform plus the bank's candidate frames
        per video, at the working size (at most frame_size² pixels), RGB. A video with more bank frames
        than ``bank_chunk`` holds only its K frames here: the embedding actor decodes its bank in
        chunks (``pipeline.bank_chunks``, two chunks at a time)."""
        m = self.builder.writer.manifest
        o = self.builder.options
        per_video = (m.max_frames + min(o.bank_max_frames, o.bank_chunk)) * m.frame_size**2 * 3
        return max(1, self.builder.options.batch_videos) * per_video

    def __call__(self, batches: list[list[SourceItem]]) -> Iterator[BatchResult]:
        if not batches:
            return
        ray = self._ray
        if ray is None:
            raise RuntimeError("RayBatchSource is used outside its `with` block")
        from ray.data import ActorPoolStrategy, DataContext

        ctx = DataContext.get_current()
        ctx.enable_progress_bars = self.options.show_progress
        ctx.execution_options.preserve_order = True  # bounded buffering: rows arrive in plan order
        size, per = self.pool()
        rows = [{"batch": i, "items": pickle.dumps(b)} for i, b in enumerate(batches)]
        ds = ray.data.from_items(rows, override_num_blocks=len(rows))
        # each decode task reserves the memory its batch's pixels can take at most, so that Ray does
        # not crowd a node with more decoded batches than it can hold; the reservation also keeps Ray
        # from fusing decoding into the embedding actors (fused ops must ask for the same resources),
        # so decoding stays on every node's CPUs. A task whose worker died runs again, DECODE_RETRIES
        # times at most (Ray Data's default is without end: a video that kills its decoder every time
        # would stall the build); then the job fails, committed batches kept.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # max_retries has no named parameter (2.60)
            ds = ds.map(
                partial(_decode_batch, decode_kwargs=self.builder.decode_kwargs()),
                num_cpus=1,
                memory=self.decoded_bytes_bound(),
                max_retries=DECODE_RETRIES,
            )
        ds = ds.map(
            EmbedBatches,
            fn_constructor_kwargs={"manifest": self.builder.writer.manifest, "spec": self.spec},
            compute=ActorPoolStrategy(size=size),
            num_cpus=1,
            num_gpus=per,
        )
        logger.info("Ray build: %d batch(es), %d embedding actor(s), %g GPU(s) each", len(batches), size, per)
        try:
            yield from in_plan_order(ds.iter_rows(), len(batches))
        except (GeneratorExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - Ray wraps task and actor errors in its own types
            raise RayBuildError(summarize(exc)) from exc


def in_plan_order(rows, total: int) -> Iterator[BatchResult]:
    """Each planned batch exactly once, in plan order, from rows that may arrive out of order or more
    than once (a retried task); raises when the stream ends with a batch missing."""
    waiting: dict[int, BatchResult] = {}
    following = 0
    for row in rows:
        i = int(row["batch"])
        if i < following or i in waiting:
            logger.info("dropping a second result for batch %d (a retried task)", i)
            continue
        waiting[i] = pickle.loads(row["result"])
        while following in waiting:
            yield waiting.pop(following)
            following += 1
    if following < total:
        raise RuntimeError(f"the Ray job ended with batch {following} of {total} missing")
