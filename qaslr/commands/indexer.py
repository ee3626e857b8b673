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

import json
import logging
import signal
import sqlite3
import sys
import threading
import time

from core.config import FrameStore
from core.logs import configure_logging
from qaslr.commands.indexer_args import (  # noqa: F401 - add_*_arguments: the parsers' public pieces
    add_add_arguments,
    add_build_arguments,
    options_from_args,
)
from qaslr.commands.indexer_args import build_parser as _build_parser

logger = logging.getLogger("indexer")

EXIT_OK, EXIT_FAILURES, EXIT_USAGE, EXIT_IO = 0, 1, 2, 3
EXIT_BACKEND = 4
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


def build_parser():
    return _build_parser(
        __doc__,
        {
            "build": run_build,
            "add": run_add,
            "remove": run_remove,
            "compact": run_compact,
            "stats": run_stats,
            "verify": run_verify,
            "previews": run_previews,
            "publish": run_publish,
        },
    )


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
    from indexer import publish_index
    from indexer.publish import PublishError
    from indexer.store import IndexFormatError

    try:
        target = publish_index(args.index_dir, args.link)
    except (PublishError, IndexFormatError) as exc:
        return _usage(str(exc))
    print(f"{args.link} -> {target}")
    return 0


def setup_errors() -> tuple[type[BaseException], ...]:
    """What `prepare_build`/`prepare_add` raise for a bad source, model, options or index: usage errors."""
    from core.errors import ConfigurationError
    from indexer.pipeline import SourceError
    from indexer.store import IndexFormatError, IndexMismatchError
    from models.backbone import BackboneNotFoundError

    return (
        SourceError,
        BackboneNotFoundError,
        FileNotFoundError,
        ValueError,  # OptionsError, bad head files, head and backbone sizes that disagree
        ConfigurationError,
        IndexMismatchError,
        IndexFormatError,
    )


def run_build(args) -> int:
    from indexer import prepare_build

    try:
        job = prepare_build(args.source, args.index, options_from_args(args))
    except setup_errors() as exc:
        return _usage(str(exc))
    code = _run_job(args, job)
    if code == 0 and args.publish:
        args.index_dir, args.link = args.index, args.publish
        return run_publish(args)
    return code


def run_add(args) -> int:
    from indexer import OptionsError, prepare_add
    from indexer.store import IndexFormatError

    try:
        job = prepare_add(args.source, args.index, options_from_args(args))
    except OptionsError as exc:
        return _usage(str(exc))
    except IndexFormatError as exc:
        return _usage(f"{exc} (use `indexer build` to create an index)")
    except setup_errors() as exc:
        return _usage(str(exc))
    return _run_job(args, job)


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


class TqdmProgress:
    """The build's progress (:class:`indexer.Progress`) as a tqdm bar with the frames/s decoded and
    the minutes of video indexed (files alone say little when a video may last an hour)."""

    def __init__(self, *, disable: bool = False):
        self.disable = disable
        self.bar = None
        self.frames = 0
        self.seconds = 0.0
        self.started = time.perf_counter()

    def start(self, total: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="video", dynamic_ncols=True, disable=self.disable, desc="indexing")

    def advance(self, videos: int, frames: int, seconds: float = 0.0) -> None:
        self.frames += frames
        self.seconds += seconds
        if self.bar is not None:
            self.bar.update(videos)
            elapsed = max(time.perf_counter() - self.started, 1e-9)
            self.bar.set_postfix_str(self.postfix(elapsed))

    def postfix(self, elapsed: float) -> str:
        minutes = self.seconds / 60.0
        return (
            f"{minutes:.1f} video-minutes ({minutes / elapsed * 60:.1f}/min), "
            f"{self.frames / elapsed:.1f} frames/s"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _run_job(args, job) -> int:
    """Run a prepared build or add with a progress bar and SIGTERM as a clean stop; print the summary."""
    from core.errors import ConfigurationError, summarize
    from indexer.distributed import RayBuildError, RayConnectError

    bar = TqdmProgress(disable=args.no_progress)
    try:
        with _StopOnSignal() as stop:
            report = job.run(progress=bar, stop=stop.event.is_set)
    except (ConfigurationError, RayConnectError) as exc:  # --backend ray: no Ray, or cannot join
        return _usage(str(exc))
    except (OSError, sqlite3.DatabaseError) as exc:
        return _fail(EXIT_IO, f"could not write the index: {summarize(exc)}. {_RESUME}")
    except RayBuildError as exc:
        return _fail(EXIT_BACKEND, f"the Ray job failed: {exc}. {_RESUME}")
    finally:
        bar.close()
    print(report.summary())
    print(
        f"index: {report.directory} ({report.indexed_total} indexed, {report.failed_total} failed in total; FAISS {report.faiss_factory})"
    )
    if getattr(args, "previews", False) and not report.stopped:
        from indexer.previews import make_previews

        print(make_previews(report.directory).summary())
    if report.stopped:
        print(
            "stopped (SIGTERM): committed videos are kept; run the same command again to resume",
            file=sys.stderr,
        )
        return EXIT_TERMINATED
    return EXIT_FAILURES if args.fail_on_error and report.has_failures else EXIT_OK


def run_remove(args) -> int:
    from indexer import remove_from_index
    from indexer.store import IndexFormatError

    try:
        report = remove_from_index(args.index, args.ids)
    except IndexFormatError as exc:
        return _usage(str(exc))
    print(f"removed {report.removed} video(s)")
    if report.unknown:
        print(f"not in the index: {', '.join(report.unknown)}", file=sys.stderr)
        return EXIT_FAILURES
    return EXIT_OK


def run_compact(args) -> int:
    from core.errors import summarize
    from indexer import OptionsError, compact_index
    from indexer.store import IndexFormatError

    try:
        report = compact_index(args.index, exact_max=args.faiss_exact_max)
    except (OptionsError, IndexFormatError) as exc:
        return _usage(str(exc))
    except (OSError, sqlite3.DatabaseError) as exc:
        return _fail(
            EXIT_IO,
            f"could not compact the index: {summarize(exc)}. The index is valid; fix the cause and run the "
            "same command again to finish.",
        )
    print(report.summary())
    return EXIT_OK


def run_stats(args) -> int:
    from indexer import index_stats
    from indexer.store import IndexFormatError

    try:
        stats = index_stats(args.index, videos=args.list)
    except IndexFormatError as exc:
        return _usage(str(exc))
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
    fb = stats["frame_bank"]
    print(
        f"  frame bank: {stats['bank_frames']} frames, {fb['bytes'] / 1e6:.2f} MB "
        f"({fb['bytes_per_frame']:.0f} B per frame; per hour of video: {fb['frames_per_hour']:.0f} frames, "
        f"{fb['bytes_per_hour'] / 1e6:.2f} MB)"
    )
    fs = stats["frame_store"]
    if fs["codec"] == FrameStore.NONE:
        print("  frame store: none (stage 2 decodes frames from the source videos)")
    else:
        print(
            f"  frame store: {fs['codec']}, {fs['videos']} video(s), {fs['bytes'] / 1e6:.2f} MB: "
            f"{fs['bytes_per_video'] / 1e6:.2f} MB per video, {fs['bytes_per_frame'] / 1e3:.1f} kB per frame, "
            f"{fs['bytes_per_hour'] / 1e6:.1f} MB per hour of video"
        )
    b = stats["bytes"]
    print(
        f"  size: {b['total'] / 1e6:.2f} MB (FAISS {b['faiss'] / 1e6:.2f}, metadata {b['metadata'] / 1e6:.2f}, "
        f"frame bank {b['frame_bank'] / 1e6:.2f}, frame store {b['frame_store'] / 1e6:.2f})"
    )
    text = stats.get("text_tracks")
    if text is None:
        print("  text tracks: none (an index written before them; `indexer add` reads them)")
    else:
        kinds = ", ".join(f"{k} {v['tracks']} ({v['cues']} cues)" for k, v in text["by_kind"].items())
        print(
            f"  text tracks: {text['cues']} cues in {text['videos_with_cues']} video(s)"
            + (f"; {kinds}" if kinds else "")
            + (f"; {text['videos_not_read']} video(s) not read" if text["videos_not_read"] else "")
        )
        for p in text["problems"]:
            print(f"  subtitles: {p['video_id']}: {p['kind']} track {p['name']!r}: {p['problem']}")
    for reason, n in stats["failure_reasons"].items():
        print(f"  failed ({n}): {reason}")
    for v in stats.get("videos", []):
        print(f"  {v['status']:8s} {v['id']}" + (f"  ({v['error']})" if v["error"] else ""))
    return EXIT_OK


def run_previews(args) -> int:
    from indexer.previews import run_previews as run

    return run(args)


def run_verify(args) -> int:
    from indexer import verify_index

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


_RESUME = "Committed videos are kept; fix the cause and run the same command again to resume."


def _fail(code: int, message: str) -> int:
    print(f"indexer: error: {message}", file=sys.stderr)
    return code


def _usage(message: str) -> int:
    return _fail(EXIT_USAGE, message)


if __name__ == "__main__":
    sys.exit(main())
