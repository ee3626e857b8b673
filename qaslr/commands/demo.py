"""The main job in one command: sample videos, index them, serve search.

Steps (each is skipped when its output already exists, so a second run starts in seconds):
  1. backbone: QASLR_MODEL / --model (default Qwen/Qwen3-VL-Embedding-2B) when it can be loaded
     from a local directory or the Hugging Face cache/hub; otherwise the shapes-world backbone
     (``tiny-world``, trained weights that ship with the project) is written under the work
     directory. It sees the shapes world: its rankings of the sample videos are real, but it knows
     nothing of real video;
  2. sample videos: shapes-world videos of 1-2 minutes, each a grey haystack with one brief
     coloured-shape event ("a red square appears"), all events distinct, plus a mirror pair (two
     events, in either order) and a once / twice pair for queries about order and count (the
     shapes-world checkpoint's time head answers them) and a reversal pair (one shape moving, and
     the same played backwards) for a query about motion (its rerank head answers it), and a JSONL
     manifest;
  3. `indexer build` over the manifest (one-shot embeddings, or QASLR with --head/QASLR_HEAD);
  4. `qaslr serve` on --host/--port (default 127.0.0.1:8000); the page at /, docs at /docs.
No Redis and no GPU needed (REDIS_URL unset = in-process frame cache)."""

from __future__ import annotations

import argparse
import logging
import os
import threading
from pathlib import Path

from core.errors import summarize

logger = logging.getLogger(__name__)

# The sample corpus: world videos of 1-2 minutes, each with one brief event, all events distinct.
SAMPLE_CORPUS = dict(
    min_duration_s=60.0, max_duration_s=120.0, fps=(6.0, 8.0), short_side=(96, 160), prefix="sample-", seed=0,
    order_pairs=1, count_pairs=1, motion_pairs=1,
)  # fmt: skip
# example single-event queries printed (then one about order, one about count and one about motion)
SUGGESTIONS = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workdir", default="data/demo", help="where videos, checkpoint and index go (default data/demo)"
    )
    p.add_argument(
        "--model", default=None, help="backbone hub id or directory (QASLR_MODEL; default the 2B hub id)"
    )
    p.add_argument(
        "--head", default=None, help="trained streaming head directory (QASLR_HEAD); default one-shot"
    )
    p.add_argument("--videos", type=int, default=8, help="number of sample videos, 1-32 (default 8)")
    p.add_argument("--host", default=None, help="bind address (QASLR_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (QASLR_PORT, default 8000)")
    p.add_argument("--no-serve", action="store_true", help="stop after building the index")


def resolve_backbone(model: str, workdir: Path) -> tuple[str, bool]:
    """(model to use, is_world_backbone). Looks for the requested backbone's config in a local
    directory, the Hugging Face cache, then the hub; falls back to the shapes-world backbone."""
    from transformers import AutoConfig

    from models.backbone import BackboneNotFoundError, locate_backbone

    try:
        # a hub id that is neither cached nor reachable fails here at once (one quick connect)
        source, _, offline = locate_backbone(model)
        AutoConfig.from_pretrained(source, local_files_only=offline)
        return model, False
    except (BackboneNotFoundError, OSError, ValueError) as exc:
        logger.warning("backbone %r is not available here (%s)", model, summarize(exc))
    from training.backbone import current_tiny_world_checkpoint

    world = current_tiny_world_checkpoint(workdir / "tiny-world")  # again where the shipped files changed
    logger.warning(
        "USING THE SHAPES-WORLD BACKBONE (%s): a tiny model trained to see coloured shapes on grey. Its "
        "rankings of the sample videos are real; it knows nothing of real video. Point QASLR_MODEL at the "
        "real Qwen3-VL-Embedding weights for real video.",
        world,
    )
    return str(world), True


def _build_index(manifest, index: Path, model: str, head: str | None) -> int:
    """Build (or resume) the sample index through the indexer facade, with a progress bar; 0, or the
    exit status `indexer build` gives the error (2 setup, 3 the index cannot be written)."""
    import sqlite3

    from indexer import BuildOptions, prepare_build
    from qaslr.commands.indexer import EXIT_IO, EXIT_USAGE, TqdmProgress, setup_errors

    options = BuildOptions(model=model, head_dir=head, embedder=None if head else "oneshot")
    try:
        job = prepare_build(manifest, index, options)
    except setup_errors() as exc:
        logger.error("indexer build failed: %s", exc)
        return EXIT_USAGE
    bar = TqdmProgress()
    try:
        report = job.run(progress=bar)
    except (OSError, sqlite3.DatabaseError) as exc:
        logger.error("indexer build could not write the index: %s", exc)
        return EXIT_IO
    finally:
        bar.close()
    print(report.summary())
    return 0


def _only_one(corpus, kind: str) -> list[tuple[str, str]]:
    """The first query of ``kind`` that is true of its own video alone, so that "expect it first" holds
    ("a magenta bar appears only once" is also true of an order pair's videos that show it once)."""
    from world.meaning import meaning_of

    truth = corpus.by_id()
    for query, video_id in corpus.queries(kind):
        meaning = meaning_of(truth[video_id])
        if not any(meaning.true_of(v) for v in corpus.videos if v.id != video_id):
            return [(query, video_id)]
    return []


def drop_stale_index(index: Path, model: Path) -> None:
    """The sample index is the demo's own: built with another tiny-world backbone than the one it
    serves now (the shipped weights changed since), it is removed, to be built again."""
    import shutil

    from indexer.store.format import MANIFEST, read_manifest
    from models.backbone import checkpoint_fingerprint

    if not (index / MANIFEST).exists():
        return
    if read_manifest(index).backbone_fingerprint != checkpoint_fingerprint(model):
        logger.warning(
            "the sample index was built with another backbone than the shipped one: building it again"
        )
        shutil.rmtree(index)


def run(args: argparse.Namespace) -> int:
    from world.corpus import CorpusConfig, make_corpus

    if not 1 <= args.videos <= 32:
        logger.error("--videos must be between 1 and 32 (the sample events are distinct)")
        return 2
    from service.settings import Settings

    overrides: dict = {k: v for k, v in (("host", args.host), ("port", args.port)) if v}
    settings = Settings(**overrides)
    if not args.no_serve:  # refused before any work: who may reach the server, and its port
        from service.auth import unprotected_problem

        problem = unprotected_problem(settings)  # as `qaslr serve`: no keyless server beyond loopback
        if problem:
            logger.error("%s", problem)
            return 2
        taken = port_in_use(settings.host, settings.port)
        if taken:
            logger.error(
                "cannot serve on %s:%s (%s): is an earlier demo or server still running? Stop it, or "
                "choose another port with --port", settings.host, settings.port, taken,
            )  # fmt: skip
            return 2
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    requested = args.model or os.environ.get("QASLR_MODEL") or "Qwen/Qwen3-VL-Embedding-2B"
    model, world_backbone = resolve_backbone(requested, workdir)
    head = args.head or os.environ.get("QASLR_HEAD") or None
    corpus = make_corpus(workdir / "videos", CorpusConfig(videos=args.videos, **SAMPLE_CORPUS), progress=True)

    index = workdir / ("index-qaslr" if head else "index-oneshot") / Path(model).name
    if world_backbone:
        drop_stale_index(index, Path(model))
    code = _build_index(corpus.manifest, index, model, head)
    if code:
        return code
    if args.no_serve:
        print(f"index ready at {index}")
        return 0

    from service.app import serve

    settings = Settings(**overrides, index=index, model=model, head=head)
    url = f"http://{settings.host}:{settings.port}"
    print(f"\nstarting the server for {index} on {url} (loading the model) ...", flush=True)
    lines = [f"ready: serving {index} on {url}  (search page: {url}/ , API docs: {url}/docs)", "try:"]
    suggested = corpus.queries("single")[:SUGGESTIONS] + [
        q for kind in ("order", "count", "motion") for q in _only_one(corpus, kind)
    ]
    for query, video_id in suggested:
        lines.append(
            f"  curl -s {url}/search -H 'content-type: application/json' "
            f'-d \'{{"query": "{query}", "top_k": 3}}\'    # expect {video_id} first'
        )
    if world_backbone:
        lines.append(
            "SHAPES-WORLD BACKBONE: real rankings inside the shapes world only; use real weights for real video."
        )
    # the ready line and the queries only once the server answers (/readyz), not while it loads
    threading.Thread(target=announce_when_ready, args=(url, "\n".join(lines) + "\n"), daemon=True).start()
    serve(settings)
    return 0


def port_in_use(host: str, port: int) -> str | None:
    """Why ``host``:``port`` cannot be bound now (None when it can): a second demo on a port that an
    earlier one still holds would otherwise announce the earlier server as ready, then fail to bind."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return exc.strerror or str(exc)
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def announce_when_ready(url: str, text: str, *, timeout_s: float = 3600.0, poll_s: float = 0.5) -> bool:
    """Print ``text`` once ``url``/readyz answers 200 (True); False, printing nothing, when the server
    reports a failed start or ``timeout_s`` passes."""
    import json
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=5) as r:
                if r.status == 200:
                    print(text, flush=True)
                    return True
        except urllib.error.HTTPError as exc:  # 503 while loading; a failed start says so
            try:
                if json.loads(exc.read() or b"{}").get("status") == "failed":
                    return False
            except ValueError:
                pass
        except (OSError, ValueError):  # not listening yet
            pass
        time.sleep(poll_s)
    return False
