"""The build's SOURCE: a folder of videos or a JSONL manifest, as a stable list of items."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from indexer.subtitles.tracks import SubtitleFile
from indexer.video import find_videos


class SourceError(ValueError):
    """The SOURCE argument (folder or JSONL manifest) cannot be read; nothing was written."""


@dataclass(frozen=True)
class SourceItem:
    id: str  # stable user-facing id
    path: Path
    metadata: dict = field(default_factory=dict)
    # the subtitle files a manifest line names (None: sidecars are matched by file name)
    subtitles: tuple[SubtitleFile, ...] | None = None


def discover(source: str | os.PathLike) -> list[SourceItem]:
    """A folder (recursive, by extension; id = path relative to the folder) or a JSONL manifest
    (one object per line with ``path``, optional ``id`` (default: the path as written),
    ``metadata`` and ``subtitles``: a path, or a list of paths or ``{"path", "language",
    "encoding"}`` objects, read instead of the sidecars found by name; relative paths are relative
    to the manifest's folder). Order is stable."""
    # stored paths are absolute: the search service decodes stage-2 frames from them
    source = Path(os.path.abspath(Path(source).expanduser()))
    if source.is_dir():
        return [SourceItem(p.relative_to(source).as_posix(), p, {}) for p in find_videos(source)]
    if not source.is_file():
        raise SourceError(f"source {str(source)!r} is neither a folder nor a JSONL manifest file")
    items, problems, seen = [], [], {}
    with open(source, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(f"line {lineno}: not JSON ({exc.msg})")
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get("path"), str) or not obj["path"]:
                problems.append(f"line {lineno}: needs an object with a non-empty string 'path'")
                continue
            vid = obj.get("id", obj["path"])
            if not isinstance(vid, str | int) or isinstance(vid, bool) or str(vid) == "":
                problems.append(f"line {lineno}: 'id' must be a non-empty string")
                continue
            vid = str(vid)
            meta = obj.get("metadata", {})
            if not isinstance(meta, dict):
                problems.append(f"line {lineno}: 'metadata' must be an object")
                continue
            if vid in seen:
                problems.append(f"line {lineno}: duplicate id {vid!r} (first on line {seen[vid]})")
                continue
            subtitles, problem = _subtitles(obj.get("subtitles"), source.parent)
            if problem:
                problems.append(f"line {lineno}: {problem}")
                continue
            seen[vid] = lineno
            path = Path(obj["path"]).expanduser()
            items.append(
                SourceItem(vid, path if path.is_absolute() else source.parent / path, meta, subtitles)
            )
    if problems:
        shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise SourceError(f"{source}: {len(problems)} malformed manifest line(s): {shown}")
    return items


def _subtitles(value, folder: Path) -> tuple[tuple[SubtitleFile, ...] | None, str | None]:
    """A manifest line's ``subtitles``: (the files, None) or (None, what is wrong)."""
    if value is None:
        return None, None
    entries = [value] if isinstance(value, str | dict) else value
    if not isinstance(entries, list):
        return None, '\'subtitles\' must be a path, or a list of paths or {"path", "language", "encoding"}'
    files = []
    for entry in entries:
        if isinstance(entry, str):
            entry = {"path": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or not entry["path"]:
            return None, "each 'subtitles' entry needs a non-empty string 'path'"
        extra = set(entry) - {"path", "language", "encoding"}
        if extra:
            return None, f"unknown 'subtitles' keys {sorted(extra)} (known: path, language, encoding)"
        for key in ("language", "encoding"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                return None, f"'subtitles' {key} must be a string"
        if entry.get("encoding"):
            import codecs

            try:
                codecs.lookup(entry["encoding"])
            except LookupError:
                return None, f"'subtitles' encoding {entry['encoding']!r} is not an encoding Python knows"
        path = Path(entry["path"]).expanduser()
        files.append(
            SubtitleFile(
                path if path.is_absolute() else folder / path, entry.get("language"), entry.get("encoding")
            )
        )
    return tuple(files), None


def source_stat(path: Path) -> str | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return f"{st.st_size}:{st.st_mtime_ns}"
