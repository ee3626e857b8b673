"""The `indexer` command's flags: argparse parsers for every subcommand, and the flags of `build` and
`add` turned into :class:`indexer.BuildOptions` (the command itself is :mod:`qaslr.commands.indexer`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

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
    INDEX_BATCH_VIDEOS,
    INDEX_CLIP_BATCH,
    INDEX_DECODE_WORKERS,
    INDEX_IMAGE_BATCH,
    Embedder,
    FrameStore,
)

if TYPE_CHECKING:
    from indexer import BuildOptions


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
            "product). Default: exact Flat up to 50k videos, IVF (4·sqrt(N) lists, nprobe 32, retrained as the index doubles) beyond",
        )


def _run_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("throughput and behaviour")
    g.add_argument(
        "--batch-videos",
        type=int,
        default=INDEX_BATCH_VIDEOS,
        help=f"videos per model batch; their clips share backbone calls (default {INDEX_BATCH_VIDEOS})",
    )
    g.add_argument(
        "--clip-batch",
        type=int,
        default=INDEX_CLIP_BATCH,
        help=f"clips per backbone forward pass (default {INDEX_CLIP_BATCH})",
    )
    g.add_argument(
        "--image-batch",
        type=int,
        default=INDEX_IMAGE_BATCH,
        help=f"frame-bank frames per backbone image call (default {INDEX_IMAGE_BATCH})",
    )
    g.add_argument(
        "--workers",
        type=int,
        default=INDEX_DECODE_WORKERS,
        help=f"decode threads running ahead of the model (default {INDEX_DECODE_WORKERS})",
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
        "what is said",
        "Subtitles are indexed for search by what is said (docs/architecture.md, 'What is said'): sidecar "
        ".srt/.vtt files named like the video (talk.srt, talk.en.vtt) or named by a manifest line's "
        "'subtitles', and subtitle streams inside the video. A track that cannot be read is reported; "
        "its video is indexed all the same",
    )
    g.add_argument(
        "--no-subtitles",
        dest="subtitles",
        action="store_false",
        help="read no sidecar files and no embedded subtitle streams",
    )
    g.add_argument(
        "--asr",
        default=None,
        metavar="KIND:ARG",
        help="speech recognition for videos without subtitles: cues:FILE (cues per video id from a JSON "
        "file), faster-whisper:MODEL_DIR (a local model; needs `pip install faster-whisper`; nothing is "
        "downloaded) or module:attr (a factory returning your own hook)",
    )
    g.add_argument("--asr-always", action="store_true", help="run --asr for videos that have subtitles too")
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


def _add_previews_command(sub, run) -> None:
    from indexer.previews import add_previews_arguments

    p = sub.add_parser(
        "previews",
        help="make the browser previews (H.264/MP4) of videos browsers cannot play, ahead of first plays",
        description="For every indexed video whose source browsers cannot play (anything but H.264 in MP4 "
        "and VP8/VP9 in WebM), write its preview into the index (previews/), as the API does on a first "
        "request; delete previews no video references. Exit status 1 when some could not be made.",
    )
    _index_arg(p)
    add_previews_arguments(p)
    p.set_defaults(_run=run)


def _exact_max_arg(g) -> None:
    g.add_argument(
        "--faiss-exact-max",
        type=int,
        default=FAISS_EXACT_MAX_VECTORS,
        metavar="N",
        help=f"exact (Flat) FAISS search up to N videos, IVF beyond (default {FAISS_EXACT_MAX_VECTORS}, chosen by "
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


def build_parser(description: str, runners: dict[str, Callable]) -> argparse.ArgumentParser:
    """The `indexer` parser; ``runners`` maps each subcommand to the function its args are run by."""
    parser = argparse.ArgumentParser(
        prog="indexer", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
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
    p.set_defaults(_run=runners["build"])
    p = sub.add_parser(
        "add",
        help="add new (or changed) videos to an existing index with its recorded settings",
        description="Index videos into an existing index, with the K, L, M, embedder and frame-bank policy recorded "
        "in its manifest. The model (and head) must be the ones the index was built with.",
    )
    add_add_arguments(p)
    p.set_defaults(_run=runners["add"])
    p = sub.add_parser(
        "remove", help="remove videos by id", description="Remove videos (indexed or failed) by id."
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="video ids as shown by `indexer stats --list`")
    _index_arg(p)
    p.set_defaults(_run=runners["remove"])
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
    p.set_defaults(_run=runners["compact"])
    p = sub.add_parser("stats", help="counts, sizes, settings and failure reasons of an index")
    _index_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--list", action="store_true", help="also list every video with its status")
    p.set_defaults(_run=runners["stats"])
    p = sub.add_parser(
        "verify",
        help="check an index for consistency (exit status 1 on problems)",
        description="Check the manifest, counts, that every id resolves in FAISS, and that the frame bank files are "
        "intact. Needs no model.",
    )
    _index_arg(p)
    p.add_argument("--check-sources", action="store_true", help="also re-fingerprint the source video files")
    p.set_defaults(_run=runners["verify"])
    _add_previews_command(sub, runners["previews"])
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
    p.set_defaults(_run=runners["publish"])
    return parser


def options_from_args(args: argparse.Namespace) -> BuildOptions:
    """The flags of `indexer build` or `indexer add` as the facade's options (``add`` has only the
    model, throughput and backend flags; the rest keep their defaults, the index's settings rule)."""
    from indexer import BuildOptions

    names = {f.name for f in dataclasses.fields(BuildOptions)}
    values = {k: v for k, v in vars(args).items() if k in names}
    values.update(head_dir=args.head, ray_address=args.address)
    return BuildOptions(**values)
