"""Run the search API (FastAPI under uvicorn). Settings come from QASLR_* environment variables
(and REDIS_URL); these flags override them. The flags are declared with the settings they set
(engine.config.SETTINGS, service.settings.HTTP_SETTINGS)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    from service.settings import serve_flags

    serve_flags(p)  # the settings declared with a flag (engine.config, service.settings)


def settings_from_args(args: argparse.Namespace):
    """Settings from the environment, with the flags given on top (the layers: engine.config)."""
    from service.settings import ALL_SETTINGS, Settings

    flags = [s.name for s in ALL_SETTINGS if s.flag]
    overrides = {name: getattr(args, name) for name in flags if getattr(args, name, None) is not None}
    return Settings(**overrides)


def run(args: argparse.Namespace) -> int:
    import logging

    from pydantic import ValidationError

    from service.app import redact_logs, serve
    from service.auth import unprotected_problem

    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        for err in exc.errors():
            print(f"qaslr serve: {'.'.join(str(p) for p in err['loc'])}: {err['msg']}")
        return 2
    problem = unprotected_problem(settings)  # before anything loads: refused in a second
    if problem:
        print(f"qaslr serve: {problem}")
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
    one the index records (as `indexer add` does): the lowest layer (EngineConfig.over_manifest)."""
    from indexer.store.format import IndexFormatError, read_manifest

    try:
        manifest = read_manifest(settings.index)
    except (IndexFormatError, OSError, ValueError):
        return settings, None  # the engine reports an unreadable index as before
    if settings.model is None:
        settings = settings.model_copy(
            update={"model": settings.engine_config().over_manifest(manifest).model}
        )
    return settings, manifest


def _backbone_problem(settings, manifest) -> str | None:
    """Why the backbone cannot be loaded here, found in seconds (a hub id that is neither cached nor
    reachable fails at once instead of after the hub client's retries); None when it can be tried."""
    from core.config import DEFAULT_MODEL_ID
    from models.backbone import BackboneNotFoundError, locate_backbone

    try:
        locate_backbone(settings.model or DEFAULT_MODEL_ID)
    except BackboneNotFoundError as exc:
        if manifest is None:
            return str(exc)
        return (
            f"{exc} The index was built with backbone {manifest.backbone_id!r} "
            f"(embed_dim {manifest.embed_dim}, frame size {manifest.frame_size}); pass that backbone "
            "(--model ID_OR_DIR)."
        )
    return None
