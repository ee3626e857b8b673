"""Turning exceptions into the one-line reasons users see (in logs, index records, API answers)."""

from __future__ import annotations

import re

# An absolute POSIX path with at least one directory: "/a/b", "/a/b/c.txt" (not "/search", not the
# "//host" of a URL, not a path inside a word such as "km/h").
ABS_PATH = re.compile(r"(?<![\w:/.~-])/(?:[^\s/'\"(),;:<>\[\]{}|]+/)+([^\s/'\"(),;:<>\[\]{}|]*)")

_DECORD_NOISE = re.compile(r"\[\d\d:\d\d:\d\d\] \S+:\d+: ")  # "[07:32:08] /src/video/video_reader.cc:151: "


def summarize(exc: BaseException, *, limit: int = 200) -> str:
    """The first non-empty line of ``exc``'s message, at most ``limit`` characters, without
    decord's clock time and source location (reasons are stored and compared across runs); the
    exception's type name when the message is empty."""
    for line in str(exc).splitlines():
        line = _DECORD_NOISE.sub("", line).strip()
        if line:
            return line[:limit]
    return type(exc).__name__


def strip_paths(text: str) -> str:
    """``text`` with every absolute filesystem path cut to its last component (``.../name``): for
    reasons that are stored in an index or shown to API clients."""
    return ABS_PATH.sub(lambda m: f".../{m.group(1)}", text)


def describe(exc: BaseException, *, limit: int = 200) -> str:
    """``"TypeName: first line"`` (or just ``"TypeName"`` when the message is empty): for reasons
    where the kind of error matters (an unexpected exception from a decoder or the model)."""
    summary = summarize(exc, limit=limit)
    name = type(exc).__name__
    return name if summary == name else f"{name}: {summary}"


class ConfigurationError(RuntimeError):
    """The settings cannot work (no index, a head is missing, sizes disagree, ...). The message says
    how to fix it and names settings, never filesystem paths, so it may be shown to API clients."""
