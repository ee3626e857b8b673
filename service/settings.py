"""Service settings: the engine's declared settings (:data:`engine.config.SETTINGS`) plus the HTTP
service's own (:data:`HTTP_SETTINGS`, declared here the same way), as one pydantic-settings class
read from the environment.

Every field reads ``QASLR_<FIELD>`` (e.g. ``QASLR_INDEX``, ``QASLR_API_KEYS``), except the Redis URL,
which reads the conventional ``REDIS_URL`` (``QASLR_REDIS_URL`` also works); flags override the
environment (``qaslr serve``, :func:`serve_flags`). :meth:`Settings.engine_config` hands the
engine's fields to the engine. ``.env.example`` and the settings table of ``docs/architecture.md``
are generated from the same declarations (``python -m service.settings_doc --write``).
"""

from __future__ import annotations

import argparse
import enum
import types
import typing
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, create_model, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engine.config import SETTINGS, EngineConfig, Setting

__all__ = ["ALL_SETTINGS", "HTTP_SETTINGS", "Settings", "serve_flags"]

HTTP, SERVING = "HTTP", "serving"
HTTP_SETTINGS: tuple[Setting, ...] = (
    Setting("host", str, "127.0.0.1", "Address the API binds to.", HTTP, flag=True),
    Setting("port", int, 8000, "Port the API listens on.", HTTP, bounds={"ge": 0, "le": 65535}, flag=True),
    Setting("api_keys", Annotated[list[str], NoDecode], [], "Comma-separated API keys (send `Authorization: "
            "Bearer <key>` or `X-API-Key: <key>`); empty = no authentication.", HTTP, secret=True,
            shown_default="none", flag="--api-key"),
    Setting("admin_keys", Annotated[list[str], NoDecode], [], "Comma-separated keys of the admin routes "
            "(`/admin/*`, e.g. `POST /admin/reload-index`), sent as API keys are; an API key does not open them. "
            "Empty: the admin routes answer only a server bound to loopback (127.0.0.1, ::1, localhost), and are "
            "refused (403) beyond it.", HTTP, secret=True, shown_default="none", flag="--admin-key"),
    Setting("allow_unprotected", bool, False, "Start a server bound beyond loopback without API keys. Refused "
            "by default (as Redis's protected mode): whoever reaches the port could search and watch every "
            "video.", HTTP, flag=True),
    Setting("log_level", str, "info", "Log level of the server (debug, info, warning, error).", HTTP),
    Setting("warm_up", bool, True, "Run one search through every stage before /readyz reports ready, so a "
            "first query costs what later ones do.", SERVING),
)  # fmt: skip
ALL_SETTINGS: tuple[Setting, ...] = SETTINGS + HTTP_SETTINGS


def _is_union(kind) -> bool:
    return typing.get_origin(kind) in (typing.Union, types.UnionType)


def _annotation(s: Setting):
    """The pydantic type of ``s``: its declared type, with its bounds on its numeric part."""
    if not s.bounds:
        return s.type
    parts = typing.get_args(s.type) if _is_union(s.type) else (s.type,)
    bounded = [Annotated[p, Field(**s.bounds)] if p in (int, float) else p for p in parts]
    return bounded[0] if len(bounded) == 1 else typing.Union[tuple(bounded)]  # noqa: UP007


def _field(s: Setting):
    options = dict(description=s.help, repr=not s.secret)
    if s.aliases or s.env:
        options["validation_alias"] = AliasChoices(s.variable, *s.aliases, s.name)
    if isinstance(s.default, list):
        return _annotation(s), Field(default_factory=list, **options)
    return _annotation(s), Field(s.default, **options)


class _Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="QASLR_", extra="ignore", populate_by_name=True, env_ignore_empty=True
    )

    def engine_config(self) -> EngineConfig:
        """What the search engine is built from: these settings' engine fields."""
        return EngineConfig.from_object(self)

    @field_validator("api_keys", "admin_keys", mode="before", check_fields=False)
    @classmethod
    def _split_keys(cls, value):
        if value is None:
            return []
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return [str(k).strip() for k in value if str(k).strip()]

    @field_validator("redis_url", mode="before", check_fields=False)
    @classmethod
    def _empty_is_none(cls, value):
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _bounds(self):
        if self.default_frames > self.max_frames:
            raise ValueError(f"default_frames ({self.default_frames}) exceeds max_frames ({self.max_frames})")
        return self


Settings = create_model(
    "Settings",
    __base__=_Settings,
    __module__=__name__,
    __doc__="The engine's settings and the HTTP service's own, from the environment (module docstring).",
    **{s.name: _field(s) for s in ALL_SETTINGS},
)


def serve_flags(parser: argparse.ArgumentParser) -> list[str]:
    """Add the declared flags (settings with ``flag``) to ``parser``; returns their field names."""
    names = []
    for s in ALL_SETTINGS:
        if not s.flag:
            continue
        flag = s.flag if isinstance(s.flag, str) else "--" + s.name.replace("_", "-")
        options: dict = {"dest": s.name, "help": f"{s.help} ({s.variable})"}
        kind = _scalar(s.type)
        if typing.get_origin(kind) is Literal:
            options["choices"] = list(typing.get_args(kind))
        elif isinstance(kind, type) and issubclass(kind, enum.Enum):
            options["choices"] = [str(m) for m in kind]
        elif kind is bool:  # a switch: given, it turns the setting on
            options.update(action="store_const", const=True)
        elif kind in (int, float):
            options["type"] = kind
        if isinstance(s.default, list):
            options["action"] = "append"
        parser.add_argument(flag, **options)
        names.append(s.name)
    return names


def _scalar(kind):
    """``kind`` without ``None`` (an optional setting's flag takes its value type)."""
    if _is_union(kind):
        parts = [p for p in typing.get_args(kind) if p is not type(None)]
        return parts[0] if len(parts) == 1 else str
    if kind is Path:
        return str
    return kind
