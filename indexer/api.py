"""The indexer as a library: build, extend, shrink, inspect and check an index without a command line.

    from indexer import BuildOptions, build_index

    report = build_index("videos/", "idx/", BuildOptions(model=ckpt, frames=8, clip_len=4))
    print(report.summary())

Everything `indexer build|add|remove|compact|stats|verify|publish` does goes through here; the command
(:mod:`qaslr.commands.indexer`) only parses its flags into :class:`BuildOptions`, calls these functions,
prints and maps their exceptions to exit statuses. Errors keep their precise types:

    OptionsError (a ValueError)      an option out of range (the message names the `indexer` flag)
    pipeline.SourceError             the source folder / JSONL manifest cannot be read
    BackboneNotFoundError, FileNotFoundError, ValueError, ConfigurationError
                                     the model (or head) cannot be loaded or does not fit
    IndexMismatchError, IndexFormatError
                                     the directory holds another index or no index
    distributed.RayConnectError      --backend ray: Ray cannot be started or joined
    OSError, sqlite3.DatabaseError   the index cannot be written (committed videos are kept)
    distributed.RayBuildError        the Ray job failed (committed videos are kept)

A build runs in two steps, :func:`prepare_build` (or :func:`prepare_add`) and :meth:`BuildJob.run`, so
that a caller can tell errors of the setup (nothing embedded yet) from those of the run;
:func:`build_index` and :func:`add_to_index` do both. The model is loaded and checked against the
index by :mod:`indexer.assembly` only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from core.config import (
    BANK_MAX_FRAMES,
    BANK_PER_SECOND,
    DEFAULT_CLIP_LEN,
    DEFAULT_FRAME_STORE,
    DEFAULT_MAX_EVIDENCE,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MODEL_ID,
    EDGE_GAPS,
    FAISS_EXACT_MAX_VECTORS,
    INDEX_BANK_CHUNK,
    INDEX_BATCH_VIDEOS,
    INDEX_CLIP_BATCH,
    INDEX_DECODE_WORKERS,
    INDEX_IMAGE_BATCH,
    Embedder,
    candidate_policy,
)

if TYPE_CHECKING:
    from indexer.assembly import LoadedModel
    from indexer.compaction import CompactReport
    from indexer.maintenance import VerifyReport
    from indexer.pipeline import Builder, BuildStats, SourceItem
    from indexer.store import IndexWriter, Manifest

logger = logging.getLogger("indexer")

BACKENDS = ("local", "ray")

Source = str | os.PathLike | Sequence["SourceItem"]


class OptionsError(ValueError):
    """An option is out of range or does not go with the others; nothing was written."""


@dataclass(frozen=True)
class BuildOptions:
    """What `indexer build` and `indexer add` take, with the same defaults. ``add`` uses only the model
    (``model``, ``head_dir``, ``device``, ``dtype``), throughput, backend and ``faiss_exact_max``
    options: K, L, M, the embedder, the frame bank and the frame store are the index's own."""

    # the model
    # a hub id or a checkpoint directory; None: DEFAULT_MODEL_ID (add: the one the index records)
    model: str | os.PathLike | None = None
    head_dir: str | os.PathLike | None = None  # streaming head checkpoint (the QASLR embedder)
    embedder: Embedder | str | None = None  # None: qaslr when a head is given, else oneshot
    device: str | None = None  # None: cuda if available
    dtype: str | None = None  # None: by device
    embed_dim: int | None = None  # Matryoshka truncation (None: the backbone's full size)
    instruction: str | None = None  # embedding instruction for videos
    # how a video is embedded (paper §3.2) and what the index keeps
    frames: int = DEFAULT_MAX_FRAMES  # K
    clip_len: int = DEFAULT_CLIP_LEN  # L
    max_evidence: int | None = None  # M (None: the head's, else DEFAULT_MAX_EVIDENCE)
    bank_frames: int = BANK_MAX_FRAMES  # frame bank: at most C candidate frames per video
    bank_per_second: float = BANK_PER_SECOND
    frame_store: str | None = None  # a FrameStore value; None: the index's, else DEFAULT_FRAME_STORE
    faiss_factory: str | None = None  # None: by corpus size (faiss_exact_max)
    faiss_exact_max: int = FAISS_EXACT_MAX_VECTORS
    # throughput and behaviour
    batch_videos: int = INDEX_BATCH_VIDEOS
    clip_batch: int = INDEX_CLIP_BATCH
    image_batch: int = INDEX_IMAGE_BATCH
    bank_chunk: int = INDEX_BANK_CHUNK  # a longer bank is decoded and embedded this many frames at a time
    edge_gaps: int = EDGE_GAPS  # edge frames (indexer.edges): bank gaps per video embedded at the source rate
    workers: int = INDEX_DECODE_WORKERS
    seed: int = 0
    retry_failed: bool = False
    # what is said (indexer.subtitles): sidecar .srt/.vtt files and embedded subtitle streams
    subtitles: bool = True
    # speech recognition for videos without subtitles: an indexer.subtitles.AsrHook, or its spec
    # ("cues:FILE", "faster-whisper:MODEL_DIR", "module:attr"); None: none
    asr: object = None
    asr_always: bool = False  # run the hook for videos that have subtitles too
    # where decoding and embedding run
    backend: str = "local"  # local | ray
    ray_address: str | None = None  # None: start a Ray runtime for this build
    ray_embedders: int | None = None  # None: one per GPU of the cluster, else 1
    ray_gpus_per_embedder: float | None = None  # None: 1 when the cluster has GPUs, else 0

    def check(self, *, build: bool = True) -> None:
        """Raise OptionsError for the first option out of range (``build=False``: only those `add`
        takes). Messages name the `indexer` flags."""
        names = ["batch_videos", "clip_batch", "image_batch", "bank_chunk", "workers", "faiss_exact_max"]
        if build:
            names = ["frames", "clip_len", "bank_frames", *names]
        for name in names:
            if getattr(self, name) < 1:
                raise OptionsError(f"--{name.replace('_', '-')} must be at least 1")
        if self.backend not in BACKENDS:
            raise OptionsError(f"backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}")
        if self.backend != "ray" and (
            self.ray_address or self.ray_embedders or self.ray_gpus_per_embedder is not None
        ):
            raise OptionsError("--address, --ray-embedders and --ray-gpus-per-embedder need --backend ray")
        if self.asr_always and self.asr is None:
            raise OptionsError("--asr-always needs --asr")
        if self.ray_embedders is not None and self.ray_embedders < 1:
            raise OptionsError("--ray-embedders must be at least 1")
        if self.ray_gpus_per_embedder is not None and not self.ray_gpus_per_embedder >= 0:
            raise OptionsError("--ray-gpus-per-embedder must be 0 or more")
        if build:
            if self.max_evidence is not None and self.max_evidence < 1:
                raise OptionsError("--max-evidence must be at least 1")
            if self.embed_dim is not None and self.embed_dim < 1:
                raise OptionsError("--embed-dim must be at least 1")
            if not self.bank_per_second > 0:
                raise OptionsError("--bank-per-second must be positive")

    def resolved_embedder(self) -> Embedder:
        return Embedder(self.embedder or (Embedder.QASLR if self.head_dir else Embedder.ONESHOT))

    def track_options(self):
        """What the build reads as text tracks (None: nothing; ConfigurationError for an ASR spec
        that cannot load)."""
        from indexer.subtitles import TrackOptions, load_asr_hook

        hook = load_asr_hook(self.asr) if isinstance(self.asr, str) else self.asr
        if not self.subtitles and hook is None:
            return None
        return TrackOptions(
            sidecars=self.subtitles, embedded=self.subtitles, asr=hook, asr_always=self.asr_always
        )


class Progress(Protocol):
    """What a build reports while it runs (the `indexer` command draws a progress bar from it)."""

    def start(self, total: int) -> None:
        """Once the work is known: ``total`` videos to process in this run."""

    def advance(self, videos: int, frames: int, seconds: float = 0.0) -> None:
        """After each committed batch: its videos, the frames decoded for them and their seconds of
        video (a Progress whose ``advance`` takes no ``seconds`` is still called with two)."""


def _advance_of(progress: Progress) -> Callable[[int, int, float], None]:
    """``progress.advance`` as a three-argument call, for implementations written before ``seconds``."""
    import inspect

    advance = progress.advance
    try:
        params = inspect.signature(advance).parameters
    except (TypeError, ValueError):  # no signature to read: call it as the protocol says
        return advance
    if "seconds" in params or any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return lambda videos, frames, seconds: advance(videos, frames, seconds=seconds)
    return lambda videos, frames, seconds: advance(videos, frames)


@dataclass
class BuildReport:
    """What a build or add did (``stats``) and the index it left."""

    stats: BuildStats
    directory: Path
    indexed_total: int  # videos indexed in the whole index
    failed_total: int  # videos recorded as failed in the whole index
    faiss_factory: str

    @property
    def stopped(self) -> bool:
        """``stop`` ended the run before every batch was done (committed videos are kept)."""
        return self.stats.stopped

    @property
    def warnings(self) -> list[str]:
        """What the run read but could not use: text tracks with a problem (the videos were indexed)."""
        return list(self.stats.track_warnings)

    @property
    def has_failures(self) -> bool:
        """A video failed in this run, or a failed one was skipped (recorded by an earlier run)."""
        return bool(self.stats.failed or self.stats.failed_before)

    def summary(self) -> str:
        return self.stats.summary()


@dataclass
class RemoveReport:
    removed: int
    unknown: list[str] = field(default_factory=list)  # ids not in the index


class BuildJob:
    """A prepared build: the source read, the model loaded and checked, the index open for writing.
    :meth:`run` it once (it closes the index); :meth:`close` a job that is not run."""

    def __init__(
        self,
        writer: IndexWriter,
        loaded: LoadedModel,
        items: list[SourceItem],
        options: BuildOptions,
        *,
        model: str,
        head_dir: str | os.PathLike | None,
        add: bool,
    ):
        from core.errors import ConfigurationError
        from indexer.assembly import encoder_for
        from indexer.pipeline import Builder, BuilderOptions

        self.writer, self.items, self.options = writer, items, options
        self._model, self._head_dir = model, head_dir
        m = writer.manifest
        try:
            track_options = options.track_options()
            encoder = encoder_for(m, loaded.backbone, loaded.head, clip_batch_size=options.clip_batch)
            self.builder: Builder = Builder(
                writer,
                encoder,
                options=BuilderOptions(
                    batch_videos=options.batch_videos,
                    workers=options.workers,
                    image_batch=options.image_batch,
                    bank_chunk=options.bank_chunk,
                    edge_gaps=options.edge_gaps,
                    bank_per_second=m.bank_per_second,
                    bank_max_frames=m.bank_max_frames,
                    retry_failed=options.retry_failed,
                    faiss_factory=None if add else options.faiss_factory,
                    faiss_exact_max=options.faiss_exact_max if add else None,
                    text_tracks=track_options,
                ),
            )
        except (ValueError, ConfigurationError):  # head and backbone sizes disagree; an ASR spec
            writer.close()
            raise

    @property
    def directory(self) -> Path:
        return self.writer.directory

    @property
    def manifest(self) -> Manifest:
        return self.writer.manifest

    def run(
        self,
        *,
        progress: Progress | None = None,
        stop: Callable[[], bool] | None = None,
        on_commit: Callable[[int], None] | None = None,
    ) -> BuildReport:
        """Index every source video not yet in the index. ``stop()`` is asked before each batch: a true
        answer ends the run cleanly (``report.stopped``). ``on_commit(n)`` after each batch's commit."""
        source = self._ray_source() if self.options.backend == "ray" else None
        writer = self.writer
        try:
            stats = self.builder.run(
                self.items,
                progress=_advance_of(progress) if progress is not None else None,
                on_plan=progress.start if progress is not None else None,
                on_commit=on_commit,
                should_stop=stop,
                batch_source=source,
            )
            if source is not None:  # decode tasks run on the cluster's CPUs
                stats.seconds["workers"] = source.cluster.get("cpus", 1)
        finally:
            if source is not None:
                source.disconnect()
            self.close()
        from indexer.store.format import STATUS_FAILED, STATUS_INDEXED

        m = writer.manifest
        return BuildReport(
            stats=stats,
            directory=writer.directory,
            indexed_total=m.counts[STATUS_INDEXED],
            failed_total=m.counts[STATUS_FAILED],
            faiss_factory=m.faiss_factory,
        )

    def close(self) -> None:
        with contextlib.suppress(OSError, sqlite3.DatabaseError):
            self.writer.close()

    def _ray_source(self):
        """The Ray batch source, connected (the index is closed when it cannot connect)."""
        from indexer.distributed import ModelSpec, RayBatchSource, RayOptions

        o = self.options
        spec = ModelSpec(
            model=self._model,
            head_dir=None if self._head_dir is None else str(self._head_dir),
            device=o.device,
            dtype=o.dtype,
            seed=o.seed,
            clip_batch=o.clip_batch,
            image_batch=o.image_batch,
        )
        ray = RayOptions(
            address=o.ray_address, embedders=o.ray_embedders, gpus_per_embedder=o.ray_gpus_per_embedder
        )
        source = RayBatchSource(self.builder, spec, ray)
        try:
            source.connect()
        except BaseException:  # ConfigurationError (no Ray installed), RayConnectError
            self.close()
            raise
        return source


def _items(source: Source) -> list[SourceItem]:
    from indexer.pipeline import discover

    if isinstance(source, str | os.PathLike):
        return discover(source)
    return list(source)


def assemble_manifest(
    loaded: LoadedModel, options: BuildOptions, *, num_videos: int, existing_frame_store: str | None = None
) -> Manifest:
    """The manifest a new build records: the model's sizes and fingerprints and the build's settings."""
    from indexer.store import Manifest, default_factory

    backbone, head = loaded.backbone, loaded.head
    o = options
    return Manifest(
        backbone_id=str(o.model or DEFAULT_MODEL_ID),
        backbone_fingerprint=backbone.fingerprint,
        head_fingerprint=loaded.head_fingerprint,
        embedder=o.resolved_embedder(),
        embed_dim=backbone.embed_dim,
        hidden_size=backbone.hidden_size,
        frame_size=backbone.frame_size,
        max_frames=o.frames,
        clip_len=o.clip_len,
        num_think_tokens=head.config.num_think_tokens if head is not None else None,
        max_evidence=o.max_evidence
        or (head.config.max_evidence_tokens if head is not None else DEFAULT_MAX_EVIDENCE),
        candidate_policy=candidate_policy(o.bank_per_second, o.bank_frames),
        faiss_factory=o.faiss_factory or default_factory(num_videos, o.faiss_exact_max),
        instruction=o.instruction,
        frame_store=o.frame_store or existing_frame_store or DEFAULT_FRAME_STORE,
    )


def existing_frame_store(index_dir: str | os.PathLike) -> str | None:
    """The frame store of the index being resumed or extended (None for a new directory)."""
    from indexer.store import IndexFormatError, read_manifest

    try:
        return read_manifest(index_dir).frame_store
    except IndexFormatError:
        return None


def _with_asr_hook(options: BuildOptions) -> BuildOptions:
    """``options`` with an ASR spec loaded into its hook (ConfigurationError before anything is written)."""
    if not isinstance(options.asr, str):
        return options
    import dataclasses

    from indexer.subtitles import load_asr_hook

    return dataclasses.replace(options, asr=load_asr_hook(options.asr))


def prepare_build(
    source: Source, index_dir: str | os.PathLike, options: BuildOptions = BuildOptions()
) -> BuildJob:
    """Check the options, read the source, load the model and create (or reopen, to resume) the index
    at ``index_dir`` with the settings of ``options``. Raises before anything is embedded."""
    import torch

    from core.errors import ConfigurationError
    from indexer.assembly import check_index_head, load_model
    from indexer.store import IndexWriter

    embedder = options.resolved_embedder()
    if embedder == Embedder.QASLR and not options.head_dir:
        raise ConfigurationError(
            "--embedder qaslr needs a streaming head: pass --head DIR (or use --embedder oneshot)"
        )
    options.check(build=True)
    options = _with_asr_hook(options)
    items = _items(source)
    if not items:
        logger.warning("no videos found in %s", source)
    model = str(options.model or DEFAULT_MODEL_ID)
    head_dir = options.head_dir if embedder == Embedder.QASLR else None
    torch.manual_seed(options.seed)
    loaded = load_model(
        model, head_dir=head_dir, device=options.device, dtype=options.dtype, embed_dim=options.embed_dim
    )
    if loaded.head is not None:
        check_index_head(loaded.head, options, loaded.backbone.temporal_patch)
    manifest = assemble_manifest(
        loaded, options, num_videos=len(items), existing_frame_store=existing_frame_store(index_dir)
    )
    writer = IndexWriter.create(index_dir, manifest)
    return BuildJob(writer, loaded, items, options, model=model, head_dir=options.head_dir, add=False)


def prepare_add(
    source: Source, index_dir: str | os.PathLike, options: BuildOptions = BuildOptions()
) -> BuildJob:
    """Check the options, read the existing index's manifest and the source, and load the model the
    index was built with (refused unless it is that model). Raises before anything is embedded."""
    import torch

    from core.errors import ConfigurationError
    from indexer.assembly import load_model_for_index
    from indexer.store import IndexWriter, read_manifest

    options.check(build=False)
    options = _with_asr_hook(options)
    manifest = read_manifest(index_dir)
    if manifest.uses_head and not options.head_dir:
        raise ConfigurationError(
            "this index uses the QASLR embedder: pass the head it was built with (--head DIR)"
        )
    items = _items(source)
    torch.manual_seed(options.seed)
    head_dir = options.head_dir if manifest.uses_head else None
    model = str(options.model or manifest.backbone_id)
    loaded = load_model_for_index(
        manifest, model, head_dir=head_dir, device=options.device, dtype=options.dtype
    )
    writer = IndexWriter.open(index_dir)
    return BuildJob(writer, loaded, items, options, model=model, head_dir=head_dir, add=True)


def build_index(
    source: Source,
    index_dir: str | os.PathLike,
    options: BuildOptions = BuildOptions(),
    *,
    progress: Progress | None = None,
    stop: Callable[[], bool] | None = None,
) -> BuildReport:
    """Build (or resume building) the index at ``index_dir`` from ``source``: a folder of videos, a
    JSONL manifest, or SourceItems. Videos that cannot be indexed are recorded, not raised."""
    return prepare_build(source, index_dir, options).run(progress=progress, stop=stop)


def add_to_index(
    source: Source,
    index_dir: str | os.PathLike,
    options: BuildOptions = BuildOptions(),
    *,
    progress: Progress | None = None,
    stop: Callable[[], bool] | None = None,
) -> BuildReport:
    """Add new (or changed) videos of ``source`` to the existing index at ``index_dir``, with its
    recorded settings; unchanged ones are skipped."""
    return prepare_add(source, index_dir, options).run(progress=progress, stop=stop)


def remove_from_index(index_dir: str | os.PathLike, ids: Sequence[str]) -> RemoveReport:
    """Remove videos (indexed or failed) by id; ids not in the index are reported, not raised."""
    from indexer.store import IndexWriter

    with IndexWriter.open(index_dir) as writer:
        unknown = writer.remove(list(ids))
    return RemoveReport(removed=len(set(ids)) - len(unknown), unknown=list(unknown))


def compact_index(index_dir: str | os.PathLike, *, exact_max: int = FAISS_EXACT_MAX_VECTORS) -> CompactReport:
    """Reclaim what `remove` left behind (:mod:`indexer.compaction`); crash-safe, re-runnable."""
    from indexer.compaction import compact
    from indexer.store import IndexWriter

    if exact_max < 1:
        raise OptionsError("--faiss-exact-max must be at least 1")
    writer = IndexWriter.open(index_dir)
    with writer:
        return compact(writer, exact_max=exact_max)


def index_stats(index_dir: str | os.PathLike, *, videos: bool = False) -> dict:
    """Counts, sizes, settings and failure reasons (JSON-serialisable); ``videos``: also every video
    with its status. Raises IndexFormatError when ``index_dir`` is not a readable index."""
    from indexer.maintenance import index_stats as stats_of
    from indexer.store import IndexReader

    stats = stats_of(index_dir)
    if videos:
        with IndexReader(index_dir) as r:
            stats["videos"] = [
                {"id": v.id, "status": v.status, "duration_s": round(v.duration_s, 3), "error": v.error}
                for v in r.videos(status=None)
            ]
    return stats


def verify_index(index_dir: str | os.PathLike, *, check_sources: bool = False) -> VerifyReport:
    """Check the index for consistency without a model (:func:`indexer.maintenance.verify_index`)."""
    from indexer.maintenance import verify_index as verify

    return verify(index_dir, check_sources=check_sources)


def publish_index(index_dir: str | os.PathLike, link: str | os.PathLike) -> Path:
    """Atomically point the symlink ``link`` at the finished index ``index_dir`` (:mod:`indexer.publish`)."""
    from indexer.publish import publish

    return publish(index_dir, link)


class Indexer:
    """One index directory and the options it is built with (a ColBERT-style handle):

    Indexer("idx/", BuildOptions(model=ckpt)).build("videos/")
    """

    def __init__(self, index_dir: str | os.PathLike, options: BuildOptions = BuildOptions()):
        self.index_dir = Path(index_dir)
        self.options = options

    def build(self, source: Source, *, progress: Progress | None = None, stop=None) -> BuildReport:
        return build_index(source, self.index_dir, self.options, progress=progress, stop=stop)

    def add(self, source: Source, *, progress: Progress | None = None, stop=None) -> BuildReport:
        return add_to_index(source, self.index_dir, self.options, progress=progress, stop=stop)

    def remove(self, ids: Sequence[str]) -> RemoveReport:
        return remove_from_index(self.index_dir, ids)

    def compact(self) -> CompactReport:
        return compact_index(self.index_dir, exact_max=self.options.faiss_exact_max)

    def stats(self, *, videos: bool = False) -> dict:
        return index_stats(self.index_dir, videos=videos)

    def verify(self, *, check_sources: bool = False) -> VerifyReport:
        return verify_index(self.index_dir, check_sources=check_sources)

    def publish(self, link: str | os.PathLike) -> Path:
        return publish_index(self.index_dir, link)
