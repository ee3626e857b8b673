"""Subtitle text formats: SubRip (``.srt``) and WebVTT (``.vtt``) into :class:`Cue` s.

What real files hold, and what is done with it:

- a byte-order mark (UTF-8, UTF-16 or UTF-32) names the encoding and is dropped; without one the
  bytes are read as UTF-8, then as UTF-16 when every other byte is NUL (a UTF-16 file saved without
  its mark), then as Windows-1252 (old SubRip files); anything else is a :class:`SubtitleError`
  that names the encodings tried. An explicit encoding (a manifest's ``encoding``) is used as given.
- CRLF, CR and LF line ends alike; blank lines with spaces in them end a cue as empty ones do.
- SubRip: a cue is an optional counter line, ``HH:MM:SS,mmm --> HH:MM:SS,mmm`` (a ``.`` for the
  comma, 1-3 millisecond digits, and trailing position coordinates accepted) and text lines up to a
  blank line (or up to the next timing line, for files whose blank lines were lost).
- WebVTT: the ``WEBVTT`` header is required; ``NOTE``, ``STYLE`` and ``REGION`` blocks are skipped;
  cue identifiers and cue settings (``align:start position:10%``) are accepted and ignored; hours are
  optional in timestamps.
- Payload markup is stripped to the words: HTML-ish tags (``<i>``, ``<font color=..>``, ``<c.x>``,
  ``<v Speaker>``, inline ``<00:00:01.000>`` timestamps), ASS override blocks (``{\\an8}``) and
  entities (``&amp;``); lines are joined with spaces.
- Overlapping cues are kept as they are (two speakers at once); exact duplicates are dropped; cues
  are returned by start time. A cue whose end is before its start, or that has no words, is skipped.

A file that decodes but holds no cue at all is a :class:`SubtitleError` ("no cues"): a track that
says nothing is reported rather than silently indexed as empty.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

MAX_SUBTITLE_BYTES = 64 * 1024 * 1024  # a subtitle file larger than this is not read
MAX_CUE_CHARS = 2000  # a cue's text is cut here (a malformed file can run a cue on and on)


class SubtitleError(ValueError):
    """A subtitle file or stream cannot be read as cues (the message says why, without paths)."""


@dataclass(frozen=True, order=True)
class Cue:
    """One timed line of what is said: ``[start_s, end_s]`` seconds from the start of the video."""

    start_s: float
    end_s: float
    text: str


# -- decoding bytes ---------------------------------------------------------------------------------
_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def decode_text(data: bytes, encoding: str | None = None) -> tuple[str, str]:
    """``(text, encoding used)`` of a subtitle file's bytes (see the module docstring for the
    order); SubtitleError when no encoding fits or the result is not text."""
    if encoding is not None:
        try:
            text = data.decode(encoding)
        except LookupError:
            raise SubtitleError(f"unknown encoding {encoding!r}") from None
        except UnicodeDecodeError as exc:
            raise SubtitleError(f"not valid {encoding} text (byte {exc.start})") from None
        return _checked(text.lstrip("\ufeff"), encoding), encoding
    for bom, name in _BOMS:
        if data.startswith(bom):
            try:
                return _checked(data[len(bom) :].decode(name), name), name
            except UnicodeDecodeError as exc:
                raise SubtitleError(
                    f"starts with a {name} byte-order mark but is not {name} (byte {exc.start})"
                ) from None
    nul_even, nul_odd = data[0::2].count(0), data[1::2].count(0)
    half = max(1, len(data) // 2)
    if nul_odd > 0.3 * half:  # ASCII-heavy UTF-16 without its mark: a NUL in every other byte
        tried = ("utf-16-le",)
    elif nul_even > 0.3 * half:
        tried = ("utf-16-be",)
    else:
        tried = ("utf-8", "cp1252")
    for name in tried:
        try:
            return _checked(data.decode(name), name), name
        except (UnicodeDecodeError, SubtitleError):
            continue
    names = {"utf-8": "UTF-8", "cp1252": "Windows-1252", "utf-16-le": "UTF-16 LE", "utf-16-be": "UTF-16 BE"}
    raise SubtitleError(
        f"not text in {' or '.join(names[t] for t in tried)} (the encodings its bytes allow); give the "
        'file\'s encoding (a manifest line\'s subtitles entry takes {"path", "encoding"})'
    )


def _checked(text: str, encoding: str) -> str:
    """``text`` unless it is mostly control characters (binary data that happened to decode)."""
    if text and len(_CONTROL.findall(text)) > max(2, len(text) // 100):
        raise SubtitleError(f"binary data, not subtitle text (read as {encoding})")
    return text


# -- cleaning a cue's payload --------------------------------------------------------------------
_TAG = re.compile(r"<[^<>\n]{0,400}>")
_ASS_OVERRIDE = re.compile(r"\{\\[^{}]{0,400}\}")
_SPACE = re.compile(r"\s+")


def clean_text(payload: str) -> str:
    """A cue's payload as plain words: markup and entities removed, whitespace collapsed."""
    text = _ASS_OVERRIDE.sub("", payload.replace("\\N", " ").replace("\\n", " "))
    text = _TAG.sub("", text)
    text = html.unescape(text).replace("\u200e", "").replace("\u200f", "")
    return _SPACE.sub(" ", text).strip()[:MAX_CUE_CHARS]


# -- SubRip ----------------------------------------------------------------------------------------
_SRT_TIME = r"(\d{1,3}):(\d{1,2}):(\d{1,2})(?:[,.](\d{1,3}))?"
_SRT_TIMING = re.compile(rf"^\s*{_SRT_TIME}\s*-+>\s*{_SRT_TIME}(?:\s.*)?$")
_COUNTER = re.compile(r"^\s*\d+\s*$")


def _seconds(h: str | None, m: str, s: str, frac: str | None) -> float:
    value = int(h or 0) * 3600 + int(m) * 60 + int(s)
    if frac:
        value += int(frac) / 10 ** len(frac)
    return float(value)


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff").split("\n")


def parse_srt(text: str) -> list[Cue]:
    """SubRip text -> cues (SubtitleError when it holds none)."""
    lines = _lines(text)
    cues, i = [], 0
    while i < len(lines):
        m = _SRT_TIMING.match(lines[i])
        if m is None:
            i += 1
            continue
        g = m.groups()
        start, end = _seconds(*g[0:4]), _seconds(*g[4:8])
        i += 1
        payload = []
        while i < len(lines) and lines[i].strip() and not _SRT_TIMING.match(lines[i]):
            payload.append(lines[i])
            i += 1
        # a file without blank lines: the next cue's counter is not this cue's text
        if i < len(lines) and _SRT_TIMING.match(lines[i]) and payload and _COUNTER.match(payload[-1]):
            payload.pop()
        _add(cues, start, end, "\n".join(payload))
    return _finished(cues, "SubRip")


# -- WebVTT ----------------------------------------------------------------------------------------
_VTT_TIME = r"(?:(\d{1,3}):)?(\d{2}):(\d{2})\.(\d{3})"
_VTT_TIMING = re.compile(rf"^\s*{_VTT_TIME}\s+-->\s+{_VTT_TIME}(?:[ \t].*)?$")


def parse_vtt(text: str) -> list[Cue]:
    """WebVTT text -> cues (SubtitleError when it is not WebVTT or holds no cue)."""
    lines = _lines(text)
    if not lines or not re.match(r"^WEBVTT(?:[ \t].*)?$", lines[0].rstrip()):
        raise SubtitleError("not WebVTT: the first line is not 'WEBVTT'")
    blocks, current = [], []
    for line in lines[1:]:
        if line.strip():
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    cues = []
    for block in blocks:
        head = block[0].strip()
        if head.startswith(("NOTE", "STYLE", "REGION")) and "-->" not in head:
            continue
        timing = next((k for k, line in enumerate(block[:2]) if _VTT_TIMING.match(line)), None)
        if timing is None:
            continue  # a block that is no cue (or a malformed timing line): skipped
        g = _VTT_TIMING.match(block[timing]).groups()
        _add(cues, _seconds(*g[0:4]), _seconds(*g[4:8]), "\n".join(block[timing + 1 :]))
    return _finished(cues, "WebVTT")


def _add(cues: list[Cue], start: float, end: float, payload: str) -> None:
    text = clean_text(payload)
    if text and end >= start:
        cues.append(Cue(start, end, text))


def _finished(cues: list[Cue], kind: str) -> list[Cue]:
    if not cues:
        raise SubtitleError(f"no cues: nothing in it reads as {kind} timings with text")
    return sorted(set(cues))


# -- files -----------------------------------------------------------------------------------------
FORMATS = {".srt": parse_srt, ".vtt": parse_vtt}


def parse_subtitles(text: str, kind: str) -> list[Cue]:
    """``kind`` is ``srt`` or ``vtt`` (a file's suffix, with or without its dot)."""
    parse = FORMATS.get("." + kind.lower().lstrip("."))
    if parse is None:
        raise SubtitleError(f"unknown subtitle format {kind!r} (known: srt, vtt)")
    return parse(text)


def read_subtitle_file(path: str | Path, *, encoding: str | None = None) -> tuple[list[Cue], str]:
    """``(cues, encoding used)`` of an ``.srt`` or ``.vtt`` file; SubtitleError for a file that is
    missing, empty, too large, of an unknown kind, in no encoding that fits, or without cues."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise SubtitleError(f"unknown subtitle format {suffix or '(no suffix)'!r} (known: .srt, .vtt)")
    try:
        size = path.stat().st_size
        if size > MAX_SUBTITLE_BYTES:
            raise SubtitleError(f"larger than {MAX_SUBTITLE_BYTES // (1024 * 1024)} MiB")
        data = path.read_bytes()
    except FileNotFoundError:
        raise SubtitleError("file not found") from None
    except IsADirectoryError:
        raise SubtitleError("is a directory, not a file") from None
    except OSError as exc:
        raise SubtitleError(f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    if not data.strip():
        raise SubtitleError("empty file")
    text, used = decode_text(data, encoding)
    return FORMATS[suffix](text), used
