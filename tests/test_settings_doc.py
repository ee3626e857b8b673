"""Configuration declared once: EngineConfig, the service's Settings, the `qaslr serve` flags,
`.env.example` and the settings table of docs/architecture.md all come from the settings'
declarations (engine.config.SETTINGS, service.settings.HTTP_SETTINGS)."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest


def test_env_example_and_the_docs_table_are_generated_from_the_declaration():
    """Regenerate both and compare: after changing a declaration, run
    `python -m service.settings_doc --write`."""
    from service.settings_doc import ARCHITECTURE, ENV_EXAMPLE, env_example, with_table

    assert ENV_EXAMPLE.read_text(encoding="utf-8") == env_example()
    document = ARCHITECTURE.read_text(encoding="utf-8")
    assert document == with_table(document)


def test_every_setting_is_declared_once_and_everything_is_made_from_it():
    from engine.config import SETTINGS, EngineConfig
    from service.settings import ALL_SETTINGS, HTTP_SETTINGS, Settings

    names = [s.name for s in ALL_SETTINGS]
    assert len(names) == len(set(names))  # once
    assert [f.name for f in fields(EngineConfig)] == [s.name for s in SETTINGS]
    assert all(f.default == s.default for f, s in zip(fields(EngineConfig), SETTINGS, strict=True))
    assert set(Settings.model_fields) == set(names)  # the engine's fields plus the HTTP ones, nothing else
    assert not {s.name for s in HTTP_SETTINGS} & set(EngineConfig.field_names())
    defaults = Settings(_env_file=None)
    for s in SETTINGS:
        assert getattr(defaults, s.name) == s.default, s.name


def test_the_serve_flags_come_from_the_declaration():
    from service.settings import ALL_SETTINGS, serve_flags

    parser = argparse.ArgumentParser()
    assert serve_flags(parser) == [s.name for s in ALL_SETTINGS if s.flag]
    args = parser.parse_args(
        ["--queue-size", "3", "--request-timeout", "2.5", "--api-key", "a", "--api-key", "b"]
    )
    assert (args.queue_size, args.request_timeout_s, args.api_keys) == (3, 2.5, ["a", "b"])


def test_clip_batch_size_auto_is_accepted_by_the_engine_and_the_service_alike():
    """One declaration, one set of accepted values (the copies once disagreed)."""
    from engine.config import EngineConfig
    from service.settings import Settings

    assert Settings(clip_batch_size="auto").engine_config().clip_batch_size == "auto"
    assert EngineConfig(clip_batch_size="auto").clip_batch_size == "auto"
    assert Settings(clip_batch_size=4).clip_batch_size == 4
    for bad in (0, "many"):
        with pytest.raises(ValueError):
            Settings(clip_batch_size=bad)


def test_layers_index_manifest_then_defaults_then_environment_then_flags(monkeypatch):
    from types import SimpleNamespace

    from engine.config import EngineConfig
    from service.settings import Settings

    manifest = SimpleNamespace(backbone_id="recorded/backbone")
    assert EngineConfig().over_manifest(manifest).model == "recorded/backbone"  # unset: the index's
    assert EngineConfig(model="mine").over_manifest(manifest).model == "mine"
    monkeypatch.setenv("QASLR_QUEUE_SIZE", "3")
    assert Settings().queue_size == 3  # the environment over the default
    assert Settings(queue_size=5).queue_size == 5  # a flag over the environment
