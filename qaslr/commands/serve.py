"""Run the search API (FastAPI under uvicorn). Settings come from QASLR_* environment variables
(and REDIS_URL); these flags override them."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index", help="index directory built by `indexer build` (QASLR_INDEX)")
    p.add_argument(
        "--model",
        help="backbone hub id or checkpoint directory (QASLR_MODEL; default: the backbone the index was built with)",
    )
    p.add_argument("--head", help="streaming head directory, for indexes built with one (QASLR_HEAD)")
    p.add_argument("--device", help="auto, cpu, cuda, cuda:N (QASLR_DEVICE)")
    p.add_argument(
        "--dtype", choices=["auto", "float32", "bfloat16", "float16"], help="backbone dtype (QASLR_DTYPE)"
    )
    p.add_argument("--host", help="bind address (QASLR_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (QASLR_PORT, default 8000)")
    p.add_argument("--redis-url", help="frame cache in Redis (REDIS_URL); default: in-process LRU")
    p.add_argument(
        "--api-key", action="append", dest="api_keys", help="accepted API key (repeatable; QASLR_API_KEYS)"
    )
    p.add_argument("--queue-size", type=int, help="searches that may wait for the model (QASLR_QUEUE_SIZE)")
    p.add_argument("--request-timeout", type=float, dest="request_timeout_s", help="per-request deadline, s")
    p.add_argument("--max-frames", type=int, help="upper bound on a request's K' (QASLR_MAX_FRAMES)")
    p.add_argument("--default-frames", type=int, help="K' when a request gives none (QASLR_DEFAULT_FRAMES)")


_FLAGS = (
    "index", "model", "head", "device", "dtype", "host", "port", "redis_url", "api_keys",
    "queue_size", "request_timeout_s", "max_frames", "default_frames",
)  # fmt: skip


def settings_from_args(args: argparse.Namespace):
    from service.settings import Settings

    overrides = {name: getattr(args, name) for name in _FLAGS if getattr(args, name, None) is not None}
    return Settings(**overrides)


def run(args: argparse.Namespace) -> int:
    import logging

    from pydantic import ValidationError

    from service.app import redact_logs, serve

    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        for err in exc.errors():
            print(f"qaslr serve: {'.'.join(str(p) for p in err['loc'])}: {err['msg']}")
        return 2
    if settings.index is None:
        print(
            "qaslr serve: no index given: pass --index DIR or set QASLR_INDEX (build one with `indexer build`)"
        )
        return 2
    settings, recorded = _default_model_from_index(settings)
    problem = _backbone_problem(settings, recorded)
    if problem:
        print(f"qaslr serve: {problem}")
        return 2
    redact_logs(settings)  # from here on the log names no path and no key
    log = logging.getLogger(__name__)
    if recorded is not None and settings.model == recorded.backbone_id:
        log.info("no --model given: using the backbone the index was built with (%s)", recorded.backbone_id)
    log.info("settings: %r", settings)
    serve(settings)
    return 0


def _default_model_from_index(settings):
    """(settings, the index's manifest or None). Without --model / QASLR_MODEL the backbone is the
    one the index records (as `indexer add` does), not the 2B hub id."""
    from indexer.store.format import IndexFormatError, read_manifest

    try:
        manifest = read_manifest(settings.index)
    except (IndexFormatError, OSError, ValueError):
        return settings, None  # the engine reports an unreadable index as before
    if "model" not in settings.model_fields_set:
        settings = settings.model_copy(update={"model": manifest.backbone_id})
    return settings, manifest


def _backbone_problem(settings, manifest) -> str | None:
    """Why the backbone cannot be loaded here, found in seconds (a hub id that is neither cached nor
    reachable fails at once instead of after the hub client's retries); None when it can be tried."""
    from models.backbone import BackboneNotFoundError, locate_backbone

    try:
        locate_backbone(settings.model)
    except BackboneNotFoundError as exc:
        if manifest is None:
            return str(exc)
        return (
            f"{exc} The index was built with backbone {manifest.backbone_id!r} "
            f"(embed_dim {manifest.embed_dim}, frame size {manifest.frame_size}); pass that backbone "
            "(--model ID_OR_DIR)."
        )
    return None
