"""The main job in one command: generate sample videos, index them, serve search.

Steps (each is skipped when its output already exists, so a second run starts in seconds):
  1. backbone: QASLR_MODEL / --model (default Qwen/Qwen3-VL-Embedding-2B) when it can be loaded
     from a local directory or the Hugging Face cache/hub; otherwise a tiny random checkpoint is
     generated under the work directory and every log line says the rankings are meaningless;
  2. sample videos: short generated videos with brief coloured-shape events ("a red square appears")
     and a JSONL manifest with metadata (title, category, year) for filters;
  3. `indexer build` over the manifest (one-shot embeddings, or QASLR with --head/QASLR_HEAD);
  4. `qaslr serve` on --host/--port (default 127.0.0.1:8000); docs at /docs.
No Redis and no GPU needed (REDIS_URL unset = in-process frame cache)."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

SAMPLE_EVENTS = [
    ("red", "square", "sports"),
    ("blue", "circle", "nature"),
    ("green", "triangle", "lecture"),
    ("yellow", "bar", "sports"),
    ("magenta", "circle", "nature"),
    ("cyan", "square", "lecture"),
    ("orange", "triangle", "sports"),
    ("white", "bar", "nature"),
]


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
    p.add_argument("--videos", type=int, default=8, help="number of sample videos (default 8)")
    p.add_argument("--host", default=None, help="bind address (QASLR_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (QASLR_PORT, default 8000)")
    p.add_argument("--no-serve", action="store_true", help="stop after building the index")


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connect, so that an offline machine falls back at once instead of waiting for
    the hub client's retries."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def resolve_backbone(model: str, workdir: Path) -> tuple[str, bool]:
    """(model to use, is_random). Looks for the requested backbone's config in a local directory,
    the Hugging Face cache, then the hub; falls back to a generated tiny checkpoint."""
    from transformers import AutoConfig

    from models.backbone import BackboneNotFoundError, resolve_model_source

    try:
        source, local = resolve_model_source(model)
        try:
            AutoConfig.from_pretrained(source, local_files_only=True)
            return model, False
        except OSError:
            if local is not None or not _hub_reachable():
                raise
        AutoConfig.from_pretrained(source)
        return model, False
    except (BackboneNotFoundError, OSError, ValueError) as exc:
        logger.warning("backbone %r is not available here (%s)", model, str(exc).splitlines()[0][:200])
    from models.checkpoint import make_checkpoint

    tiny = workdir / "tiny-checkpoint"
    if not (tiny / "config.json").exists():
        make_checkpoint(tiny, preset="tiny", seed=0)
    logger.warning(
        "USING A GENERATED TINY RANDOM CHECKPOINT (%s): everything runs end to end, but its RANKINGS ARE "
        "MEANINGLESS. Point QASLR_MODEL at the real Qwen3-VL-Embedding weights for real results.",
        tiny,
    )
    return str(tiny), True


def make_sample_videos(directory: Path, count: int, *, seed: int = 0) -> Path:
    """Generated sample videos (20-45 s, 128 px, 8 fps) with one event each, plus videos.jsonl."""
    import numpy as np

    from indexer.video import write_video
    from training.synthetic import Needle, VideoSpec, render_video

    manifest = directory / "videos.jsonl"
    if manifest.exists():
        return manifest
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        colour, shape, category = SAMPLE_EVENTS[i % len(SAMPLE_EVENTS)]
        duration = float(rng.uniform(20, 45))
        start = float(rng.uniform(2, duration - 5))
        # VideoSpec holds two needles; the demo has one event per video, drawn twice at the same time
        needle = Needle(colour, shape, start, start + 2.5, 0)
        spec = VideoSpec(f"sample-{i:02d}", "", duration, (needle, needle), f"g{i}")
        frames = render_video(spec, size=128, fps=8.0, seed=seed + i)
        path = write_video(directory / f"sample-{i:02d}.mp4", frames, fps=8.0)
        lines.append(
            {
                "id": spec.id,
                "path": path.name,
                "metadata": {
                    "title": f"a {colour} {shape} appears",
                    "category": category,
                    "year": 2020 + i % 5,
                    "event_start_s": round(start, 2),
                },
            }
        )
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    logger.info("wrote %d sample videos and %s", count, manifest)
    return manifest


def run(args: argparse.Namespace) -> int:
    from indexer.cli import main as indexer_main

    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    requested = args.model or os.environ.get("QASLR_MODEL") or "Qwen/Qwen3-VL-Embedding-2B"
    model, random_weights = resolve_backbone(requested, workdir)
    head = args.head or os.environ.get("QASLR_HEAD") or None
    manifest = make_sample_videos(workdir / "videos", args.videos)

    index = workdir / ("index-qaslr" if head else "index-oneshot") / Path(model).name
    build = ["build", str(manifest), "--index", str(index), "--model", model]
    build += ["--head", head] if head else ["--embedder", "oneshot"]
    code = indexer_main(build)
    if code not in (0, None):
        logger.error("indexer build exited with status %s", code)
        return int(code)
    if args.no_serve:
        print(f"index ready at {index}")
        return 0

    from service.app import serve
    from service.settings import Settings

    overrides: dict = {"index": index, "model": model, "head": head}
    if args.host:
        overrides["host"] = args.host
    if args.port:
        overrides["port"] = args.port
    if random_weights and "QASLR_DEFAULT_FRAMES" not in os.environ:
        overrides["default_frames"] = 16  # keep the CPU demo snappy
    settings = Settings(**overrides)
    print(
        f"\nserving {index} on http://{settings.host}:{settings.port}  (docs: /docs)\n"
        f"try: curl -s http://{settings.host}:{settings.port}/search -H 'content-type: application/json' "
        '-d \'{"query": "a red square appears", "top_k": 3}\'\n'
        + ("RANDOM TINY CHECKPOINT: the rankings are meaningless.\n" if random_weights else "")
    )
    serve(settings)
    return 0
