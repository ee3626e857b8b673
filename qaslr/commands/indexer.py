"""The `indexer` command: build, extend, shrink, inspect and check a video index.

An index is a directory (docs/architecture.md describes every file in it) holding the FAISS index of
query-independent video embeddings, a SQLite metadata store (including videos that failed and why)
and the frame bank used by the search service's second stage.

Examples:
  indexer build videos/ --index idx/ --embedder oneshot        # zero-shot, public backbone
  indexer build corpus.jsonl --index idx/ --head head_ckpt/    # QASLR streaming head
  indexer add more_videos/ --index idx/ --head head_ckpt/
  indexer remove clip_001.mp4 clip_002.mp4 --index idx/ ; indexer compact --index idx/
  indexer build videos/ --index idx/ --backend ray --address 10.0.0.5:6379   # on a Ray cluster
  indexer stats --index idx/ ; indexer verify --index idx/

A build that is interrupted (Ctrl-C, kill -9, power loss) resumes where it stopped when the same
command is run again: finished videos are skipped and the result equals an uninterrupted build.

A build stopped by SIGTERM (or Ctrl-C) finishes the batch in hand, leaves a consistent index and
resumes the same way.

Exit status: 0 success (videos that could not be indexed are recorded, see `indexer stats`); 1 with
--fail-on-error when any video failed, when `verify` finds problems, or when `remove` is given unknown
ids; 2 usage errors (bad SOURCE, model not found, settings that do not match the index); 3 the index
could not be written (disk full, permissions): committed videos are kept; 4 the Ray job failed
(--backend ray): committed videos are kept; 130 interrupted (Ctrl-C); 143 stopped by SIGTERM:
committed videos are kept, run the same command again to resume.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sqlite3
import sys
import threading
import time

from core.config import (
    BANK_MAX_FRAMES,
    BANK_PER_SECOND,
    DEFAULT_CLIP_LEN,
    DEFAULT_FRAME_STORE,
    DEFAULT_MAX_EVIDENCE,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MODEL_ID,
    FAISS_EXACT_MAX_VECTORS,
    FRAME_STORE_JPEG_QUALITY,
    Embedder,
    FrameStore,
    candidate_policy,
)
from core.logs import configure_logging

logger = logging.getLogger("indexer")

EXIT_OK, EXIT_FAILURES, EXIT_USAGE, EXIT_IO = 0, 1, 2, 3
EXIT_BACKEND = 4
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


def _env(name: str, default=None):
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _index_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--index",
        default=_env("QASLR_INDEX"),
        required=_env("QASLR_INDEX") is None,
        metavar="DIR",
        help="index directory (default: $QASLR_INDEX)",
    )


def _model_args(p: argparse.ArgumentParser, *, build: bool) -> None:
    from_index = "" if build else " (default: the model recorded in the index manifest)"
    g = p.add_argument_group("model")
    g.add_argument(
        "--model",
        default=_env("QASLR_MODEL"),
        metavar="ID_OR_DIR",
        help="backbone: a Hugging Face hub id or a local Qwen3-VL-Embedding checkpoint directory "
        f"(default: $QASLR_MODEL, else {DEFAULT_MODEL_ID})" + from_index,
    )
    g.add_argument(
        "--head",
        default=_env("QASLR_HEAD"),
        metavar="DIR",
        help="streaming head checkpoint directory (head_config.json + head.safetensors) for the QASLR "
        "embedder (default: $QASLR_HEAD)",
    )
    if build:
        g.add_argument(
            "--embedder",
            choices=tuple(Embedder),
            default=None,
            help="qaslr: clips of L frames -> evidence tokens -> streaming head (needs --head); oneshot: the "
            "backbone embeds the K frames in one context (zero-shot, the paper's single-round baseline). "
            "Default: qaslr when a head is given, else oneshot",
        )
    g.add_argument(
        "--device", default=_env("QASLR_DEVICE"), help="cpu, cuda, cuda:1, ... (default: cuda if available)"
    )
    g.add_argument(
        "--dtype", default=None, help="model dtype: float32, bfloat16, float16 (default: by device)"
    )
    if build:
        g.add_argument(
            "--embed-dim",
            type=int,
            default=None,
            metavar="d",
            help="Matryoshka-truncate embeddings to d dimensions (default: the backbone's full size)",
        )
        g.add_argument("--instruction", default=None, help="embedding instruction (system prompt) for videos")
        g.add_argument(
            "--frames",
            "-K",
            dest="frames",
            type=int,
            default=DEFAULT_MAX_FRAMES,
            metavar="K",
            help=f"K: frames selected uniformly per video (default {DEFAULT_MAX_FRAMES}, paper §3.2); shorter "
            "videos use all their frames",
        )
        g.add_argument(
            "--clip-len",
            "-L",
            dest="clip_len",
            type=int,
            default=DEFAULT_CLIP_LEN,
            metavar="L",
            help=f"L: frames per clip at the full budget K (default {DEFAULT_CLIP_LEN}); fewer for videos with "
            "fewer frames",
        )
        g.add_argument(
            "--max-evidence",
            type=int,
            default=None,
            metavar="M",
            help=f"M: evidence tokens kept per clip after compression (default: the head's, else {DEFAULT_MAX_EVIDENCE})",
        )
        g.add_argument(
            "--bank-frames",
            type=int,
            default=BANK_MAX_FRAMES,
            metavar="C",
            help=f"frame bank: at most C candidate frames per video (default {BANK_MAX_FRAMES})",
        )
        g.add_argument(
            "--bank-per-second",
            type=float,
            default=BANK_PER_SECOND,
            help=f"frame bank: candidate frames per second of video (default {BANK_PER_SECOND})",
        )
        g.add_argument(
            "--frame-store",
            choices=tuple(FrameStore),
            default=None,
            help="keep the frame-bank frames' pixels in the index, so that search stage 2 never decodes the "
            f"source video: {FrameStore.JPEG} (quality {FRAME_STORE_JPEG_QUALITY}, small, scores within a "
            f"tolerance), {FrameStore.PNG} or {FrameStore.LZ4} (lossless, larger), or {FrameStore.NONE} "
            f"(decode from the source at search time). Default: the index's, else {DEFAULT_FRAME_STORE}; "
            "`indexer stats` reports the cost per video",
        )
        g.add_argument(
            "--faiss-factory",
            default=None,
            metavar="STRING",
            help="FAISS index_factory string, e.g. Flat, HNSW32,Flat, IVF1024,Flat (wrapped in IDMap2; inner "
            "product). Default: exact Flat up to 50k videos, HNSW32 beyond",
        )


def _run_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("throughput and behaviour")
    g.add_argument(
        "--batch-videos",
        type=int,
        default=4,
        help="videos per model batch; their clips share backbone calls (default 4)",
    )
    g.add_argument("--clip-batch", type=int, default=8, help="clips per backbone forward pass (default 8)")
    g.add_argument(
        "--image-batch", type=int, default=32, help="frame-bank frames per backbone image call (default 32)"
    )
    g.add_argument(
        "--workers", type=int, default=2, help="decode threads running ahead of the model (default 2)"
    )
    g.add_argument("--seed", type=int, default=0, help="random seed (the build is deterministic; default 0)")
    g.add_argument("--retry-failed", action="store_true", help="try again videos recorded as failed")
    g.add_argument(
        "--fail-on-error",
        action="store_true",
        help="exit with status 1 when any video failed (default: failures are recorded and the exit status is 0)",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    _exact_max_arg(g)
    _previews_flag(g)
    g = p.add_argument_group(
        "backend",
        "Where decoding and embedding run. Both backends write the same index through the same writer; "
        "the Ray backend needs `pip install .[ray]`, the project and the model on every node, and the "
        "videos at the same paths everywhere (docs/architecture.md, 'Building on a Ray cluster')",
    )
    g.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="local: decode threads and the model in this process (default); ray: Ray Data, decoding as "
        "CPU tasks and embedding in a pool of model actors, results committed here",
    )
    g.add_argument(
        "--address",
        default=None,
        metavar="HOST:PORT",
        help="with --backend ray: the Ray cluster to join (e.g. 10.0.0.5:6379, or 'auto'); default: start a "
        "Ray runtime on this machine for this build",
    )
    g.add_argument(
        "--ray-embedders",
        type=int,
        default=None,
        metavar="N",
        help="with --backend ray: embedding actors, each loading the model once (default: one per GPU of the "
        "cluster, else 1)",
    )
    g.add_argument(
        "--ray-gpus-per-embedder",
        type=float,
        default=None,
        metavar="G",
        help="with --backend ray: GPUs each embedding actor reserves (default: 1 when the cluster has GPUs, "
        "else 0)",
    )


def _previews_flag(g) -> None:
    from indexer.previews import add_previews_flag

    add_previews_flag(g)


def _exact_max_arg(g) -> None:
    g.add_argument(
        "--faiss-exact-max",
        type=int,
        default=FAISS_EXACT_MAX_VECTORS,
        metavar="N",
        help=f"exact (Flat) FAISS search up to N videos, HNSW beyond (default {FAISS_EXACT_MAX_VECTORS}, chosen by "
        "benchmarks/bench_faiss_types.py). build chooses by the source's size; add and compact switch an index "
        "whose type was chosen this way when its corpus crosses N (a type forced with --faiss-factory stays)",
    )


def add_build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "source",
        help="a folder (searched recursively for .mp4 .mkv .avi .mov .webm ...; ids are paths relative to it) "
        'or a JSONL manifest with one {"id", "path", "metadata"} object per line',
    )
    _index_arg(p)
    p.add_argument(
        "--publish",
        metavar="LINK",
        default=None,
        help="after a successful build, point the symlink LINK (the path the API reads, e.g. "
        "/data/index/current) at this index (`indexer publish`)",
    )
    _model_args(p, build=True)
    _run_args(p)


def add_add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "source", help="folder or JSONL manifest of videos to add (existing ids are skipped unless changed)"
    )
    _index_arg(p)
    _model_args(p, build=False)
    _run_args(p)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="indexer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (DEBUG, INFO, WARNING, ...)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", default=argparse.SUPPRESS, help="logging level (default INFO)")
    sub_add = sub.add_parser

    def add_parser(name, **kw):
        return sub_add(name, parents=[common], **kw)

    sub.add_parser = add_parser
    p = sub.add_parser(
        "build",
        help="index a folder or JSONL manifest into DIR (creates it, or resumes an interrupted build)",
        description="Embed every video query-independently and write the index directory. Re-running the same "
        "command resumes an interrupted build and indexes videos added to SOURCE since.",
    )
    add_build_arguments(p)
    p.set_defaults(_run=run_build)
    p = sub.add_parser(
        "add",
        help="add new (or changed) videos to an existing index with its recorded settings",
        description="Index videos into an existing index, with the K, L, M, embedder and frame-bank policy recorded "
        "in its manifest. The model (and head) must be the ones the index was built with.",
    )
    add_add_arguments(p)
    p.set_defaults(_run=run_add)
    p = sub.add_parser(
        "remove", help="remove videos by id", description="Remove videos (indexed or failed) by id."
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="video ids as shown by `indexer stats --list`")
    _index_arg(p)
    p.set_defaults(_run=run_remove)
    p = sub.add_parser(
        "compact",
        help="reclaim the frame-bank, FAISS and metadata space that `remove` left behind",
        description="Rewrite the frame-bank files that hold frames of removed videos (keeping only the "
        "referenced ones), rebuild FAISS (switching its type when the corpus has crossed the thresholds) and "
        "VACUUM the metadata store. Each step is crash-safe: an interrupted compaction leaves a valid index, "
        "and running it again finishes the work. Search answers stay the same; reload a running API after "
        "it (SIGHUP or POST /admin/reload-index).",
    )
    _index_arg(p)
    _exact_max_arg(p)
    p.set_defaults(_run=run_compact)
    p = sub.add_parser("stats", help="counts, sizes, settings and failure reasons of an index")
    _index_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--list", action="store_true", help="also list every video with its status")
    p.set_defaults(_run=run_stats)
    p = sub.add_parser(
        "verify",
        help="check an index for consistency (exit status 1 on problems)",
        description="Check the manifest, counts, that every id resolves in FAISS, and that the frame bank files are "
        "intact. Needs no model.",
    )
    _index_arg(p)
    p.add_argument("--check-sources", action="store_true", help="also re-fingerprint the source video files")
    p.set_defaults(_run=run_verify)
    _add_previews_command(sub)
    p = sub.add_parser(
        "publish",
        help="point a stable path (e.g. current) at a finished index, atomically",
        description="Check that INDEX opens as an index, then replace the symlink LINK with one pointing at it "
        "(one rename: readers see the old index or the new one, never a mix). Then send SIGHUP to the API or "
        "POST /admin/reload-index to switch it without downtime (deploy/README.md).",
    )
    p.add_argument("index_dir", metavar="INDEX", help="the finished index directory to publish")
    p.add_argument(
        "--link", required=True, help="the symlink the API reads (QASLR_INDEX), e.g. /data/index/current"
    )
    p.set_defaults(_run=run_publish)
    return parser


def _add_previews_command(sub) -> None:
    from indexer.previews import add_previews_arguments, run_previews

    p = sub.add_parser(
        "previews",
        help="make the browser previews (H.264/MP4) of videos browsers cannot play, ahead of first plays",
        description="For every indexed video whose source browsers cannot play (anything but H.264 in MP4 "
        "and VP8/VP9 in WebM), write its preview into the index (previews/), as the API does on a first "
        "request; delete previews no video references. Exit status 1 when some could not be made.",
    )
    _index_arg(p)
    add_previews_arguments(p)
    p.set_defaults(_run=run_previews)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print(
            "\ninterrupted: committed videos are kept; run the same command again to resume", file=sys.stderr
        )
        return EXIT_INTERRUPTED


# -- commands --------------------------------------------------------------------------------------


def run_publish(args) -> int:
    from indexer.publish import PublishError, publish
    from indexer.store import IndexFormatError

    try:
        target = publish(args.index_dir, args.link)
    except (PublishError, IndexFormatError) as exc:
        return _usage(str(exc))
    print(f"{args.link} -> {target}")
    return 0


def _load(args, *, model: str, head_dir: str | None, embed_dim: int | None = None):
    """The backbone (+ head) through :mod:`indexer.assembly`, seeded like every build."""
    import torch

    from indexer.assembly import load_model

    torch.manual_seed(args.seed)
    return load_model(model, head_dir=head_dir, device=args.device, dtype=args.dtype, embed_dim=embed_dim)


def run_build(args) -> int:
    from indexer.pipeline import SourceError, discover
    from indexer.store import IndexFormatError, IndexMismatchError, IndexWriter, Manifest, default_factory
    from models.backbone import BackboneNotFoundError

    embedder = Embedder(args.embedder or (Embedder.QASLR if args.head else Embedder.ONESHOT))
    if embedder == Embedder.QASLR and not args.head:
        return _usage("--embedder qaslr needs a streaming head: pass --head DIR (or use --embedder oneshot)")
    problem = _check_numbers(args, build=True)
    if problem:
        return _usage(problem)
    try:
        items = discover(args.source)
    except SourceError as exc:
        return _usage(str(exc))
    if not items:
        logger.warning("no videos found in %s", args.source)
    model = args.model or DEFAULT_MODEL_ID
    try:
        loaded = _load(
            args,
            model=model,
            head_dir=args.head if embedder == Embedder.QASLR else None,
            embed_dim=args.embed_dim,
        )
    except (BackboneNotFoundError, FileNotFoundError, ValueError) as exc:
        return _usage(str(exc))
    backbone, head = loaded.backbone, loaded.head
    max_evidence = args.max_evidence or (
        head.config.max_evidence_tokens if head is not None else DEFAULT_MAX_EVIDENCE
    )
    manifest = Manifest(
        format_version=1,
        backbone_id=str(model),
        backbone_fingerprint=backbone.fingerprint,
        head_fingerprint=loaded.head_fingerprint,
        embedder=embedder,
        embed_dim=backbone.embed_dim,
        hidden_size=backbone.hidden_size,
        frame_size=backbone.frame_size,
        max_frames=args.frames,
        clip_len=args.clip_len,
        num_think_tokens=head.config.num_think_tokens if head is not None else None,
        max_evidence=max_evidence,
        candidate_policy=candidate_policy(args.bank_per_second, args.bank_frames),
        faiss_factory=args.faiss_factory or default_factory(len(items), args.faiss_exact_max),
        instruction=args.instruction,
        frame_store=args.frame_store or _existing_frame_store(args.index) or DEFAULT_FRAME_STORE,
    )
    try:
        writer = IndexWriter.create(args.index, manifest)
    except (IndexMismatchError, IndexFormatError) as exc:
        return _usage(str(exc))
    code = _run_builder(
        args, writer, loaded, items, factory=args.faiss_factory, model=str(model), head_dir=args.head
    )
    if code == 0 and args.publish:
        args.index_dir, args.link = args.index, args.publish
        return run_publish(args)
    return code


def _existing_frame_store(index_dir) -> str | None:
    """The frame store of the index being resumed or extended (None for a new directory)."""
    from indexer.store import IndexFormatError, read_manifest

    try:
        return read_manifest(index_dir).frame_store
    except IndexFormatError:
        return None


def run_add(args) -> int:
    from core.errors import ConfigurationError
    from indexer.assembly import load_model_for_index
    from indexer.pipeline import SourceError, discover
    from indexer.store import IndexFormatError, IndexMismatchError, IndexWriter, read_manifest
    from models.backbone import BackboneNotFoundError

    problem = _check_numbers(args, build=False)  # the same checks as build, for the flags add has
    if problem:
        return _usage(problem)
    try:
        manifest = read_manifest(args.index)
    except IndexFormatError as exc:
        return _usage(f"{exc} (use `indexer build` to create an index)")
    if manifest.uses_head and not args.head:
        return _usage("this index uses the QASLR embedder: pass the head it was built with (--head DIR)")
    try:
        items = discover(args.source)
    except SourceError as exc:
        return _usage(str(exc))
    import torch

    torch.manual_seed(args.seed)
    try:
        loaded = load_model_for_index(
            manifest,
            args.model or manifest.backbone_id,
            head_dir=args.head if manifest.uses_head else None,
            device=args.device,
            dtype=args.dtype,
        )
    except (
        BackboneNotFoundError,
        FileNotFoundError,
        ValueError,
        ConfigurationError,
        IndexMismatchError,
    ) as exc:
        return _usage(str(exc))
    writer = IndexWriter.open(args.index)
    return _run_builder(
        args,
        writer,
        loaded,
        items,
        factory=None,
        model=str(args.model or manifest.backbone_id),
        head_dir=args.head if manifest.uses_head else None,
    )


class _StopOnSignal:
    """While active, SIGTERM asks the build to stop after the batch in hand (a clean stop)."""

    def __init__(self):
        self.event = threading.Event()
        self.signal: int | None = None
        self._previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.signal = signum
        self.event.set()

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def _ray_source(args, builder, *, model: str, head_dir: str | None):
    """The Ray batch source for this build (a context manager), from the command's flags."""
    from indexer.distributed import ModelSpec, RayBatchSource, RayOptions

    spec = ModelSpec(
        model=model,
        head_dir=head_dir,
        device=args.device,
        dtype=args.dtype,
        seed=args.seed,
        clip_batch=args.clip_batch,
        image_batch=args.image_batch,
    )
    options = RayOptions(
        address=args.address, embedders=args.ray_embedders, gpus_per_embedder=args.ray_gpus_per_embedder
    )
    return RayBatchSource(builder, spec, options)


def _run_builder(args, writer, loaded, items, *, factory, model: str, head_dir: str | None) -> int:
    from tqdm import tqdm

    from indexer.assembly import encoder_for
    from indexer.distributed import RayBuildError, RayConnectError
    from indexer.pipeline import Builder, BuildOptions

    m = writer.manifest
    try:
        encoder = encoder_for(m, loaded.backbone, loaded.head, clip_batch_size=args.clip_batch)
    except ValueError as exc:  # head and backbone sizes disagree
        writer.close()
        return _usage(str(exc))
    options = BuildOptions(
        batch_videos=args.batch_videos,
        workers=args.workers,
        image_batch=args.image_batch,
        bank_per_second=m.bank_per_second,
        bank_max_frames=m.bank_max_frames,
        retry_failed=args.retry_failed,
        faiss_factory=factory,
        faiss_exact_max=args.faiss_exact_max if args.command == "add" else None,
    )
    bar = None
    frames = 0
    started = time.perf_counter()

    def on_plan(n):
        nonlocal bar
        bar = tqdm(total=n, unit="video", dynamic_ncols=True, disable=args.no_progress, desc="indexing")

    def progress(videos, new_frames):
        nonlocal frames
        frames += new_frames
        if bar is not None:
            bar.update(videos)
            bar.set_postfix_str(f"{frames / max(time.perf_counter() - started, 1e-9):.1f} frames/s")

    builder = Builder(writer, encoder, options=options)
    source = None
    if args.backend == "ray":
        from core.errors import ConfigurationError

        source = _ray_source(args, builder, model=model, head_dir=head_dir)
        try:
            source.connect()
        except (ConfigurationError, RayConnectError) as exc:
            writer.close()
            return _usage(str(exc))
    try:
        with _StopOnSignal() as stop:
            stats = builder.run(
                items,
                progress=progress,
                on_plan=on_plan,
                should_stop=stop.event.is_set,
                batch_source=source,
            )
        if source is not None:
            stats.seconds["workers"] = source.cluster.get("cpus", 1)  # decode tasks run on the cluster's CPUs
    except (OSError, sqlite3.DatabaseError) as exc:
        from core.errors import summarize

        return _fail(EXIT_IO, f"could not write the index: {summarize(exc)}. {_RESUME}")
    except RayBuildError as exc:
        return _fail(EXIT_BACKEND, f"the Ray job failed: {exc}. {_RESUME}")
    finally:
        if source is not None:
            source.disconnect()
        if bar is not None:
            bar.close()
        with contextlib.suppress(OSError, sqlite3.DatabaseError):
            writer.close()
    print(stats.summary())
    print(
        f"index: {writer.directory} ({writer.manifest.counts['indexed']} indexed, {writer.manifest.counts['failed']} failed in total; FAISS {writer.manifest.faiss_factory})"
    )
    if getattr(args, "previews", False) and not stats.stopped:
        _make_previews(writer.directory)
    if stats.stopped:
        print(
            "stopped (SIGTERM): committed videos are kept; run the same command again to resume",
            file=sys.stderr,
        )
        return EXIT_TERMINATED
    return EXIT_FAILURES if args.fail_on_error and (stats.failed or stats.failed_before) else EXIT_OK


def _make_previews(index_dir) -> None:
    from indexer.previews import make_previews

    print(make_previews(index_dir).summary())


def run_remove(args) -> int:
    from indexer.store import IndexFormatError, IndexWriter

    try:
        writer = IndexWriter.open(args.index)
    except IndexFormatError as exc:
        return _usage(str(exc))
    with writer:
        unknown = writer.remove(args.ids)
    removed = len(set(args.ids)) - len(unknown)
    print(f"removed {removed} video(s)")
    if unknown:
        print(f"not in the index: {', '.join(unknown)}", file=sys.stderr)
        return EXIT_FAILURES
    return EXIT_OK


def run_compact(args) -> int:
    from indexer.compaction import compact
    from indexer.store import IndexFormatError, IndexWriter

    if args.faiss_exact_max < 1:
        return _usage("--faiss-exact-max must be at least 1")
    try:
        writer = IndexWriter.open(args.index)
    except IndexFormatError as exc:
        return _usage(str(exc))
    try:
        with writer:
            report = compact(writer, exact_max=args.faiss_exact_max)
    except (OSError, sqlite3.DatabaseError) as exc:
        from core.errors import summarize

        return _fail(
            EXIT_IO,
            f"could not compact the index: {summarize(exc)}. The index is valid; fix the cause and run the "
            "same command again to finish.",
        )
    print(report.summary())
    return EXIT_OK


def run_stats(args) -> int:
    from indexer.maintenance import index_stats
    from indexer.store import IndexFormatError, IndexReader

    try:
        stats = index_stats(args.index)
    except IndexFormatError as exc:
        return _usage(str(exc))
    if args.list:
        with IndexReader(args.index) as r:
            stats["videos"] = [
                {"id": v.id, "status": v.status, "duration_s": round(v.duration_s, 3), "error": v.error}
                for v in r.videos(status=None)
            ]
    if args.json:
        print(json.dumps(stats, indent=2))
        return EXIT_OK
    m = stats["manifest"]
    print(f"index {stats['directory']} (format {m['format_version']}, built {m['built_at']})")
    print(
        f"  backbone {m['backbone_id']} [{m['backbone_fingerprint']}], embedder {m['embedder']}, head {m['head_fingerprint']}"
    )
    print(
        f"  d={m['embed_dim']} D={m['hidden_size']} frame {m['frame_size']}px K={m['max_frames']} L={m['clip_len']} "
        f"N={m['num_think_tokens']} M={m['max_evidence']} bank {m['candidate_policy']} FAISS {m['faiss_factory']}"
    )
    print(f"  videos: {stats['indexed']} indexed ({stats['indexed_hours']:.2f} h), {stats['failed']} failed")
    print(f"  frame bank: {stats['bank_frames']} frames")
    fs = stats["frame_store"]
    if fs["codec"] == FrameStore.NONE:
        print("  frame store: none (stage 2 decodes frames from the source videos)")
    else:
        print(
            f"  frame store: {fs['codec']}, {fs['videos']} video(s), {fs['bytes'] / 1e6:.2f} MB: "
            f"{fs['bytes_per_video'] / 1e6:.2f} MB per video, {fs['bytes_per_frame'] / 1e3:.1f} kB per frame"
        )
    b = stats["bytes"]
    print(
        f"  size: {b['total'] / 1e6:.2f} MB (FAISS {b['faiss'] / 1e6:.2f}, metadata {b['metadata'] / 1e6:.2f}, "
        f"frame bank {b['frame_bank'] / 1e6:.2f}, frame store {b['frame_store'] / 1e6:.2f})"
    )
    for reason, n in stats["failure_reasons"].items():
        print(f"  failed ({n}): {reason}")
    for v in stats.get("videos", []):
        print(f"  {v['status']:8s} {v['id']}" + (f"  ({v['error']})" if v["error"] else ""))
    return EXIT_OK


def run_verify(args) -> int:
    from indexer.maintenance import verify_index

    rep = verify_index(args.index, check_sources=args.check_sources)
    for w in rep.warnings:
        print(f"warning: {w}")
    for e in rep.errors:
        print(f"error: {e}")
    checked = ", ".join(f"{k} {v}" for k, v in rep.checked.items())
    print(
        ("OK" if rep.ok else f"FAILED ({len(rep.errors)} problem(s))")
        + (f": checked {checked}" if checked else "")
    )
    return EXIT_OK if rep.ok else EXIT_FAILURES


def _check_numbers(args, *, build: bool) -> str | None:
    """Positive numbers for every count flag the command has (``add`` reads K, L, M and the frame
    bank from the index, so it has only the throughput flags)."""
    names = ["batch_videos", "clip_batch", "image_batch", "workers", "faiss_exact_max"]
    if build:
        names = ["frames", "clip_len", "bank_frames", *names]
    for name in names:
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1"
    if args.backend != "ray" and (
        args.address or args.ray_embedders or args.ray_gpus_per_embedder is not None
    ):
        return "--address, --ray-embedders and --ray-gpus-per-embedder need --backend ray"
    if args.ray_embedders is not None and args.ray_embedders < 1:
        return "--ray-embedders must be at least 1"
    if args.ray_gpus_per_embedder is not None and not args.ray_gpus_per_embedder >= 0:
        return "--ray-gpus-per-embedder must be 0 or more"
    if build:
        if args.max_evidence is not None and args.max_evidence < 1:
            return "--max-evidence must be at least 1"
        if args.embed_dim is not None and args.embed_dim < 1:
            return "--embed-dim must be at least 1"
        if not args.bank_per_second > 0:
            return "--bank-per-second must be positive"
    return None


_RESUME = "Committed videos are kept; fix the cause and run the same command again to resume."


def _fail(code: int, message: str) -> int:
    print(f"indexer: error: {message}", file=sys.stderr)
    return code


def _usage(message: str) -> int:
    return _fail(EXIT_USAGE, message)


if __name__ == "__main__":
    sys.exit(main())
