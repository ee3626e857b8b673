"""Subtitle streams inside a video file (mkv, mp4, ...), read with PyAV; and the reverse, a video
remuxed with subtitle files as streams (for test corpora and benchmarks).

Only the container is read (packets are demuxed, never decoded as video), and only when the file
has subtitle streams. Each packet of a text stream is one cue: its ``pts`` and ``duration`` (in the
stream's time base) are the times; its bytes are the text, by codec:

    subrip / srt, webvtt, text     the cue's text (HTML-ish markup stripped)
    ass / ssa                      Matroska's dialogue fields; the text is the ninth field onwards
    mov_text (mp4 tx3g)            a 16-bit length, then that many bytes of UTF-8 text

A packet without a duration ends at the next packet's start (at most ``MAX_OPEN_CUE_S`` later).
Bitmap streams (PGS, DVD, DVB subtitles) carry pictures, not text: such a track is reported as
skipped (OCR is out of scope). A damaged stream is reported with its reason; neither stops the
video from being indexed.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import describe, strip_paths
from indexer.subtitles.formats import Cue, SubtitleError, clean_text, decode_text

TEXT_CODECS = {"subrip", "srt", "webvtt", "text", "ass", "ssa", "mov_text"}
BITMAP_CODECS = {"hdmv_pgs_subtitle", "dvd_subtitle", "dvb_subtitle", "xsub", "dvb_teletext"}
MAX_OPEN_CUE_S = 10.0


def has_subtitle_streams(path: str | Path) -> bool:
    """Whether the container lists any subtitle stream (opens it, reads no packets)."""
    import av

    try:
        with av.open(str(path)) as container:
            return bool(container.streams.subtitles)
    except Exception:  # noqa: BLE001 - not a container PyAV reads: no streams to read
        return False


def read_embedded(path: str | Path) -> list[tuple[dict, list[Cue] | None, str | None]]:
    """Every subtitle stream of a video: ``(info, cues, problem)`` with ``info`` = {index, codec,
    language, title}; ``cues`` is None when the stream could not be read (``problem`` says why) or
    carries bitmaps. Raises SubtitleError only when the container cannot be opened at all."""
    import av

    try:
        container = av.open(str(path))
    except Exception as exc:  # noqa: BLE001 - av.error.* and OSError alike
        raise SubtitleError(f"cannot open the container: {strip_paths(describe(exc))}") from None
    out = []
    with container:
        streams = list(container.streams.subtitles)
        if not streams:
            return []
        infos = {}
        for s in streams:
            meta = dict(s.metadata or {})
            infos[s.index] = {
                "index": int(s.index),
                "codec": s.codec_context.name if s.codec_context is not None else "unknown",
                "language": meta.get("language") or meta.get("LANGUAGE") or None,
                "title": meta.get("title") or meta.get("handler_name") or None,
            }
        readable = [s for s in streams if infos[s.index]["codec"] in TEXT_CODECS]
        packets: dict[int, list[tuple[float, float | None, bytes]]] = {s.index: [] for s in readable}
        problem = None
        if readable:
            try:
                for packet in container.demux(readable):
                    if packet.pts is None or packet.size == 0:
                        continue
                    tb = packet.time_base or packet.stream.time_base
                    start = float(packet.pts * tb)
                    dur = float(packet.duration * tb) if packet.duration else None
                    packets[packet.stream.index].append((start, dur, bytes(packet)))
            except Exception as exc:  # noqa: BLE001 - a damaged file: keep what was read, say so
                problem = f"the stream could not be read to its end: {strip_paths(describe(exc))}"
        for s in streams:
            info = infos[s.index]
            if info["codec"] in BITMAP_CODECS:
                out.append((info, None, f"bitmap subtitles ({info['codec']}) carry no text; skipped"))
                continue
            if s.index not in packets:
                out.append((info, None, f"subtitle codec {info['codec']!r} is not a text format; skipped"))
                continue
            cues = _cues(packets[s.index], info["codec"])
            if not cues:
                out.append((info, None, problem or "no cues: the stream holds no text"))
            else:
                out.append((info, cues, problem))
    return out


def _cues(packets: list[tuple[float, float | None, bytes]], codec: str) -> list[Cue]:
    packets = sorted(packets, key=lambda p: p[0])
    cues = []
    for k, (start, dur, data) in enumerate(packets):
        text = _packet_text(data, codec)
        if not text:
            continue
        if dur is None:
            following = packets[k + 1][0] if k + 1 < len(packets) else start + MAX_OPEN_CUE_S
            dur = min(max(0.0, following - start), MAX_OPEN_CUE_S)
        start = max(0.0, start)
        cues.append(Cue(start, start + dur, text))
    return sorted(set(cues))


def _packet_text(data: bytes, codec: str) -> str:
    if codec == "mov_text":
        if len(data) < 2:
            return ""
        n = int.from_bytes(data[:2], "big")
        data = data[2 : 2 + n]
    try:
        text, _ = decode_text(data, "utf-8")
    except SubtitleError:
        try:
            text, _ = decode_text(data)
        except SubtitleError:
            return ""
    if codec in ("ass", "ssa"):
        # Matroska: ReadOrder, Layer, Style, Name, MarginL, MarginR, MarginV, Effect, Text
        parts = text.split(",", 8)
        text = parts[8] if len(parts) == 9 else parts[-1]
    return clean_text(text)


def embed_subtitles(
    video: str | Path, subtitles: list[tuple[str | Path, str | None]], out: str | Path
) -> Path:
    """Remux ``video`` into the Matroska file ``out`` with each ``(subtitle file, language)`` as a
    subtitle stream (no re-encoding: packets are copied, as ``ffmpeg -c copy`` would). The files are
    read by FFmpeg's own SubRip/WebVTT demuxers."""
    import av

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    inputs = [av.open(str(video))]
    try:
        sources = [(inputs[0], s) for s in inputs[0].streams if s.type in ("video", "audio")]
        for path, _ in subtitles:
            c = av.open(str(path))
            inputs.append(c)
            if not c.streams.subtitles:
                raise SubtitleError(f"{Path(path).name}: FFmpeg finds no subtitle stream in it")
            sources.append((c, c.streams.subtitles[0]))
        with av.open(str(out), mode="w", format="matroska") as target:
            mapping = {}
            languages = iter([lang for _, lang in subtitles])
            for c, s in sources:
                t = target.add_stream_from_template(s)
                if s.type == "subtitle":
                    lang = next(languages)
                    if lang:
                        t.metadata["language"] = lang
                mapping[(id(c), s.index)] = t
            # subtitle packets are few: read them first, then interleave them with the video's by time
            subs = []
            for c in inputs[1:]:
                for packet in c.demux(c.streams.subtitles[0]):
                    if packet.pts is not None:
                        subs.append(
                            (float(packet.pts * packet.time_base), packet, (id(c), packet.stream.index))
                        )
            subs.sort(key=lambda x: x[0])
            k = 0
            main = inputs[0]
            for packet in main.demux([s for cc, s in sources if cc is main]):
                if packet.dts is None and packet.pts is None:
                    continue  # the demuxer's flush packet
                when = float((packet.dts if packet.dts is not None else packet.pts) * packet.time_base)
                while k < len(subs) and subs[k][0] <= when:
                    _, sp, key = subs[k]
                    sp.stream = mapping[key]
                    target.mux(sp)
                    k += 1
                packet.stream = mapping[(id(main), packet.stream.index)]
                target.mux(packet)
            for _, sp, key in subs[k:]:
                sp.stream = mapping[key]
                target.mux(sp)
    finally:
        for c in inputs:
            c.close()
    return out
