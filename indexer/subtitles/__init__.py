"""Text tracks for search by what is said: subtitle formats (SRT, WebVTT), embedded subtitle
streams (PyAV), sidecar matching and the speech-recognition hook (docs/architecture.md, "What is
said: subtitles").

    formats   Cue, SubtitleError, decode_text, parse_srt, parse_vtt, read_subtitle_file
    embedded  subtitle streams of a video file; embed_subtitles (a video remuxed with subtitle files)
    tracks    SubtitleFile, TextTrack, TrackOptions, find_sidecars, read_text_tracks
    asr       AsrHook, CueFileAsr (the stand-in), FasterWhisperAsr, load_asr_hook
"""

from indexer.subtitles.asr import AsrHook, CueFileAsr, FasterWhisperAsr, load_asr_hook
from indexer.subtitles.formats import (
    Cue,
    SubtitleError,
    clean_text,
    decode_text,
    parse_srt,
    parse_subtitles,
    parse_vtt,
    read_subtitle_file,
)
from indexer.subtitles.tracks import (
    KIND_ASR,
    KIND_EMBEDDED,
    KIND_SIDECAR,
    SubtitleFile,
    TextTrack,
    TrackOptions,
    find_sidecars,
    read_text_tracks,
    sidecar_signature,
    sidecars_of,
    track_warnings,
)

__all__ = [
    "KIND_ASR",
    "KIND_EMBEDDED",
    "KIND_SIDECAR",
    "AsrHook",
    "Cue",
    "CueFileAsr",
    "FasterWhisperAsr",
    "SubtitleError",
    "SubtitleFile",
    "TextTrack",
    "TrackOptions",
    "clean_text",
    "decode_text",
    "find_sidecars",
    "load_asr_hook",
    "parse_srt",
    "parse_subtitles",
    "parse_vtt",
    "read_subtitle_file",
    "read_text_tracks",
    "sidecar_signature",
    "sidecars_of",
    "track_warnings",
]
