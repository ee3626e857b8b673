"""A video's text tracks at index time: sidecar files, embedded streams and (optionally) ASR.

Where a video's cues come from, in this order (all of them are kept, each as its own track):

1. **Sidecar files** next to the video, matched by file name: for ``talk.mp4``, ``talk.srt``,
   ``talk.vtt`` and ``talk.<lang>.srt`` / ``talk.<lang>.vtt`` where ``<lang>`` is a language tag
   (``en``, ``eng``, ``pt-BR``, optionally followed by ``.forced``, ``.sdh``, ``.cc`` or ``.hi``),
   suffixes in any case. A manifest line may name its files instead (``"subtitles": "a.srt"`` or a
   list of paths or ``{"path", "language", "encoding"}`` objects); then only those are read, and
   ``"subtitles": []`` reads none.
2. **Embedded streams** of the video file (:mod:`indexer.subtitles.embedded`, PyAV).
3. **Speech recognition** (:mod:`indexer.subtitles.asr`), when a hook is configured: for videos
   that have no cue from 1 or 2 (or for every video, with ``asr_always``).

Cues are kept within the video: one that starts after its end is dropped, an end past it is cut to
it. Nothing here raises for bad input: an unreadable track is a :class:`TextTrack` with ``problem``
set and no cues, and the build reports it while the video is indexed as usual.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import describe, strip_paths
from indexer.subtitles.formats import FORMATS, Cue, SubtitleError, read_subtitle_file

logger = logging.getLogger(__name__)

KIND_SIDECAR, KIND_EMBEDDED, KIND_ASR = "sidecar", "embedded", "asr"
_TAG = re.compile(r"^(?P<lang>[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})?)(?:\.(?:forced|sdh|cc|hi))?$", re.I)
_FLAG_ONLY = re.compile(r"^(?:forced|sdh|cc|hi)$", re.I)
END_SLACK_S = 1.0  # a cue may start this long after the probed duration (durations are estimates)


@dataclass(frozen=True)
class SubtitleFile:
    """A subtitle file named for a video (by a manifest line, or found beside it)."""

    path: Path
    language: str | None = None
    encoding: str | None = None  # None: detected (formats.decode_text)


@dataclass
class TextTrack:
    """One source of cues for one video, as it was read."""

    kind: str  # KIND_SIDECAR | KIND_EMBEDDED | KIND_ASR
    name: str  # the sidecar's file name, "stream N (codec)", or the ASR hook's name
    language: str | None = None
    cues: list[Cue] = field(default_factory=list)
    encoding: str | None = None  # what a sidecar was decoded as
    problem: str | None = None  # why it has no cues, or what was dropped (no paths)


@dataclass(frozen=True)
class TrackOptions:
    """What a build reads (picklable: it travels to Ray decode tasks with its hook)."""

    sidecars: bool = True
    embedded: bool = True
    asr: object = None  # an indexer.subtitles.asr.AsrHook, or None
    asr_always: bool = False  # run the hook even for videos that have subtitles


def _language_of(tag: str) -> str | None:
    m = _TAG.match(tag)
    return m.group("lang") if m else None


@functools.lru_cache(maxsize=256)
def _listing(directory: str, mtime_ns: int) -> tuple[str, ...]:  # mtime_ns: a changed folder is re-listed
    try:
        return tuple(sorted(os.listdir(directory)))
    except OSError:
        return ()


def find_sidecars(video: str | Path) -> list[SubtitleFile]:
    """The subtitle files beside ``video`` that are named for it (module docstring), by name."""
    video = Path(video)
    directory = video.parent
    try:
        names = _listing(str(directory), directory.stat().st_mtime_ns)
    except OSError:
        return []
    stem = video.stem
    found = []
    for name in names:
        suffix = Path(name).suffix
        if suffix.lower() not in FORMATS or not name.startswith(stem + "."):
            continue
        middle = name[len(stem) + 1 : len(name) - len(suffix)]
        if middle == "":
            found.append(SubtitleFile(directory / name))
        elif _FLAG_ONLY.match(middle):  # talk.sdh.srt: a flag, no language
            found.append(SubtitleFile(directory / name))
        elif _TAG.match(middle):
            found.append(SubtitleFile(directory / name, language=_language_of(middle)))
    return found


def sidecars_of(item) -> list[SubtitleFile]:
    """The sidecar files of a source item: those its manifest line names, else those found by name."""
    named = getattr(item, "subtitles", None)
    return list(named) if named is not None else find_sidecars(item.path)


def sidecar_signature(files: list[SubtitleFile]) -> str:
    """What the sidecars of a video are, for telling a changed set (``indexer add``): each file's
    name, size and modification time (a missing file: its name alone)."""
    parts = []
    for f in sorted(files, key=lambda f: str(f.path)):
        try:
            st = f.path.stat()
            parts.append(f"{f.path.name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{f.path.name}:missing")
    return "sidecars/1|" + "|".join(parts)


def read_sidecar(f: SubtitleFile) -> TextTrack:
    track = TextTrack(KIND_SIDECAR, f.path.name, language=f.language)
    try:
        track.cues, track.encoding = read_subtitle_file(f.path, encoding=f.encoding)
    except SubtitleError as exc:
        track.problem = str(exc)
    except Exception as exc:  # noqa: BLE001 - never fatal for the video
        track.problem = strip_paths(describe(exc))
    return track


def read_embedded_tracks(path: str | Path) -> list[TextTrack]:
    from indexer.subtitles.embedded import read_embedded

    try:
        streams = read_embedded(path)
    except SubtitleError as exc:
        return [TextTrack(KIND_EMBEDDED, "streams", problem=str(exc))]
    except Exception as exc:  # noqa: BLE001
        return [TextTrack(KIND_EMBEDDED, "streams", problem=strip_paths(describe(exc)))]
    return [
        TextTrack(
            KIND_EMBEDDED,
            f"stream {info['index']} ({info['codec']})",
            language=info["language"],
            cues=cues or [],
            problem=problem,
        )
        for info, cues, problem in streams
    ]


def run_asr(hook, path: str | Path, *, video_id: str, duration_s: float | None) -> TextTrack:
    name = str(getattr(hook, "name", type(hook).__name__))
    track = TextTrack(KIND_ASR, name, language=getattr(hook, "language", None))
    try:
        cues = hook.transcribe(Path(path), video_id=video_id, duration_s=duration_s)
        track.cues = sorted({c for c in (_as_cue(x) for x in cues or ()) if c is not None})
        if not track.cues:
            track.problem = "the speech recogniser returned no cues"
    except Exception as exc:  # noqa: BLE001 - a failing recogniser never fails the video
        track.problem = strip_paths(f"speech recognition failed: {describe(exc)}")
    return track


def _as_cue(x) -> Cue | None:
    from indexer.subtitles.formats import clean_text

    start, end, text = (x.start_s, x.end_s, x.text) if isinstance(x, Cue) else x
    start, end, text = float(start), float(end), clean_text(str(text))
    if not text or not (start == start and end == end) or end < start or start < 0:  # NaN, reversed
        return None
    return Cue(start, end, text)


def within(track: TextTrack, duration_s: float | None) -> TextTrack:
    """``track`` with its cues kept inside ``[0, duration_s]`` (module docstring); says what it dropped."""
    finite = [c for c in track.cues if math.isfinite(c.start_s) and math.isfinite(c.end_s)]
    if len(finite) != len(track.cues):  # never stored: SQLite keeps NaN as NULL
        track.cues = finite
    if not duration_s or duration_s <= 0 or not track.cues:
        return track
    kept = [
        Cue(c.start_s, min(c.end_s, duration_s), c.text)
        for c in track.cues
        if c.start_s < duration_s + END_SLACK_S
    ]
    kept = [c if c.start_s <= c.end_s else Cue(c.start_s, c.start_s, c.text) for c in kept]
    dropped = len(track.cues) - len(kept)
    if dropped:
        note = f"{dropped} of {len(track.cues)} cues start after the video ends ({duration_s:.1f} s); dropped"
        track.problem = note if track.problem is None else f"{track.problem}; {note}"
    track.cues = kept
    return track


def read_text_tracks(
    item,
    *,
    duration_s: float | None,
    options: TrackOptions | None = None,
    sidecars: bool | None = None,
    embedded: bool | None = None,
) -> list[TextTrack]:
    """Every text track of a source item (module docstring); never raises. ``sidecars`` and
    ``embedded`` override the options' (``indexer add`` re-reads only what changed)."""
    options = options or TrackOptions()
    tracks: list[TextTrack] = []
    if options.sidecars if sidecars is None else sidecars:
        tracks += [read_sidecar(f) for f in sidecars_of(item)]
    if options.embedded if embedded is None else embedded:
        from indexer.subtitles.embedded import has_subtitle_streams

        if has_subtitle_streams(item.path):
            tracks += read_embedded_tracks(item.path)
    if options.asr is not None and (options.asr_always or not any(t.cues for t in tracks)):
        tracks.append(run_asr(options.asr, item.path, video_id=item.id, duration_s=duration_s))
    return [within(t, duration_s) for t in tracks]


def track_warnings(video_id: str, tracks: list[TextTrack]) -> list[str]:
    """One line per track that has a problem: what a build report shows."""
    return [f"{video_id}: {t.kind} track {t.name!r}: {t.problem}" for t in tracks if t.problem]
