"""The speech-recognition hook: what a build calls to get cues for a video that has no subtitles.

Nothing here downloads anything. A hook is any object with a ``name`` and

    transcribe(path: Path, *, video_id: str, duration_s: float | None) -> Iterable[Cue | (start, end, text)]

(:class:`AsrHook`). The build calls it from its decode threads (several at once: a hook that is
not thread-safe holds a lock, as :class:`FasterWhisperAsr` does) and, with ``--backend ray``, in Ray
tasks (the hook is pickled). Whatever it returns is cleaned like subtitle cues; an exception or an
empty answer is reported as that video's track problem, never a failed video.

Shipped hooks, chosen with ``indexer build --asr KIND:ARG`` (:func:`load_asr_hook`):

    cues:FILE                 :class:`CueFileAsr`, the stand-in: cues for each video id from a JSON
                              file (tests, and transcripts made elsewhere)
    faster-whisper:MODEL_DIR  :class:`FasterWhisperAsr`: a local faster-whisper (CTranslate2) model
                              directory, loaded with ``local_files_only``; needs ``pip install
                              faster-whisper`` (not a dependency of this project)
    module:ATTRIBUTE          any importable factory or class, called with no arguments, that
                              returns a hook (your own model)
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, runtime_checkable

from core.errors import ConfigurationError
from indexer.subtitles.formats import Cue


@runtime_checkable
class AsrHook(Protocol):
    """Speech recognition for the build (module docstring)."""

    name: str

    def transcribe(self, path: Path, *, video_id: str, duration_s: float | None) -> Iterable[Cue]: ...


class CueFileAsr:
    """A stand-in recogniser that "hears" what a JSON file says: ``{video id: [[start_s, end_s,
    text], ...] or [{"start_s", "end_s", "text"}, ...]}``. A video the file does not name gets no cues."""

    def __init__(self, path: str | Path, *, language: str | None = None):
        self.path = Path(path)
        self.name = f"cues:{self.path.name}"
        self.language = language
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigurationError(f"--asr cues: {self.path.name} not found") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigurationError(f"--asr cues: {self.path.name} is not a JSON file ({exc})") from None
        if not isinstance(data, dict):
            raise ConfigurationError(f"--asr cues: {self.path.name} must hold an object of video ids")
        self._cues = data

    def transcribe(self, path: Path, *, video_id: str, duration_s: float | None = None) -> list[Cue]:
        out = []
        for entry in self._cues.get(video_id, []):
            if isinstance(entry, dict):
                out.append(Cue(float(entry["start_s"]), float(entry["end_s"]), str(entry["text"])))
            else:
                start, end, text = entry
                out.append(Cue(float(start), float(end), str(text)))
        return out


class FasterWhisperAsr:
    """faster-whisper over a local model directory (a converted CTranslate2 Whisper model). Not
    exercised by the test suite (no weights are fetched); its contract is :class:`AsrHook`'s."""

    def __init__(self, model_dir: str | Path, *, device: str = "auto", compute_type: str = "default",
                 language: str | None = None, beam_size: int = 5):  # fmt: skip
        self.model_dir = Path(model_dir)
        self.name = f"faster-whisper:{self.model_dir.name}"
        self.language = language
        self.device, self.compute_type, self.beam_size = device, compute_type, beam_size
        if not (self.model_dir / "model.bin").is_file():
            raise ConfigurationError(
                f"--asr faster-whisper: {self.model_dir.name} is not a local faster-whisper model directory "
                "(it needs model.bin; nothing is downloaded)"
            )
        self._model = None
        self._lock = threading.Lock()

    def __getstate__(self):  # a Ray task loads its own copy
        state = dict(self.__dict__)
        state["_model"], state["_lock"] = None, None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _load(self):
        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise ConfigurationError("--asr faster-whisper needs `pip install faster-whisper`") from None
        return WhisperModel(
            str(self.model_dir), device=self.device, compute_type=self.compute_type, local_files_only=True
        )

    def transcribe(self, path: Path, *, video_id: str, duration_s: float | None = None) -> list[Cue]:
        with self._lock:  # one model, one transcription at a time
            if self._model is None:
                self._model = self._load()
            segments, _info = self._model.transcribe(
                str(path), language=self.language, beam_size=self.beam_size
            )
            return [Cue(float(s.start), float(s.end), s.text) for s in segments]


def load_asr_hook(spec: str) -> AsrHook:
    """A hook from ``KIND:ARG`` (module docstring); ConfigurationError naming what is wrong."""
    kind, sep, arg = spec.partition(":")
    if not sep or not arg:
        raise ConfigurationError(
            f"--asr takes KIND:ARG (cues:FILE, faster-whisper:DIR, module:attr), not {spec!r}"
        )
    if kind == "cues":
        return CueFileAsr(arg)
    if kind == "faster-whisper":
        return FasterWhisperAsr(arg)
    try:
        factory = getattr(importlib.import_module(kind), arg)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"--asr {spec}: cannot import it ({exc})") from None
    hook = factory()
    if not isinstance(hook, AsrHook):
        raise ConfigurationError(f"--asr {spec}: {type(hook).__name__} has no name and transcribe()")
    return hook
