"""Subtitle tracks at index time (indexer.subtitles): real SRT and WebVTT files as people save them,
bad files, sidecar matching, embedded Matroska streams read with PyAV, and the ASR hook's stand-in."""

from __future__ import annotations

import json
import pickle

import pytest

from core.errors import ConfigurationError
from indexer.sources import SourceError, SourceItem, discover
from indexer.subtitles import (
    Cue,
    CueFileAsr,
    SubtitleError,
    SubtitleFile,
    TrackOptions,
    decode_text,
    find_sidecars,
    load_asr_hook,
    parse_srt,
    parse_vtt,
    read_subtitle_file,
    read_text_tracks,
    sidecar_signature,
)
from indexer.subtitles.embedded import _packet_text, embed_subtitles, read_embedded

SRT = (
    "1\n00:00:01,000 --> 00:00:02,500\n<i>The lighthouse</i> keeper &amp; his {\\an8}dog\n\n"
    '2\n00:00:02,000 --> 00:00:04,000 X1:100 X2:200 Y1:10 Y2:20\n<font color="#ff0000">Two lines,</font>\nsecond line\n\n'
    "3\n00:01:05,5 --> 00:01:06,25\nshort millis\n"
)
VTT = (
    "WEBVTT - a title\nKind: captions\n\n"
    "NOTE a comment\nthat spans lines --> not a cue\n\n"
    "STYLE\n::cue { color: yellow }\n\n"
    "intro\n00:01.000 --> 00:02.000 align:start position:10% line:0\n<v Ann>Hello <c.yellow>harbour</c></v>\n\n"
    "00:00:01.500 --> 00:00:03.000 size:50%\n<b>overlapping</b> speaker <00:00:02.000>karaoke\n\n"
    "01:00:00.000 --> 01:00:01.000\nan hour in\n"
)


def test_srt_with_bom_and_crlf_gives_clean_cues_in_time_order():
    cues = parse_srt("\ufeff" + SRT.replace("\n", "\r\n"))
    assert cues == [
        Cue(1.0, 2.5, "The lighthouse keeper & his dog"),
        Cue(2.0, 4.0, "Two lines, second line"),
        Cue(65.5, 66.25, "short millis"),
    ]


def test_srt_file_bytes_with_utf8_bom_and_crlf_read_as_utf8(tmp_path):
    path = tmp_path / "a.srt"
    path.write_bytes(b"\xef\xbb\xbf" + SRT.replace("\n", "\r\n").encode())
    cues, encoding = read_subtitle_file(path)
    assert encoding == "utf-8" and cues[0].text == "The lighthouse keeper & his dog" and len(cues) == 3


def test_srt_that_lost_its_blank_lines_keeps_cues_apart():
    text = "1\n00:00:01,000 --> 00:00:02,000\nfirst\n2\n00:00:03,000 --> 00:00:04,000\nsecond\n"
    assert [c.text for c in parse_srt(text)] == ["first", "second"]


def test_vtt_cue_settings_identifiers_notes_styles_and_inline_tags():
    cues = parse_vtt(VTT.replace("\n", "\r\n"))
    assert cues == [
        Cue(1.0, 2.0, "Hello harbour"),
        Cue(1.5, 3.0, "overlapping speaker karaoke"),
        Cue(3600.0, 3601.0, "an hour in"),
    ]


def test_overlapping_cues_are_kept_and_exact_duplicates_dropped():
    text = (
        "1\n00:00:01,000 --> 00:00:05,000\nA speaks\n\n2\n00:00:02,000 --> 00:00:03,000\nB interrupts\n\n"
        "3\n00:00:01,000 --> 00:00:05,000\nA speaks\n"
    )
    assert parse_srt(text) == [Cue(1.0, 5.0, "A speaks"), Cue(2.0, 3.0, "B interrupts")]


def test_cues_that_end_before_they_start_or_say_nothing_are_skipped():
    text = "1\n00:00:05,000 --> 00:00:01,000\nbackwards\n\n2\n00:00:06,000 --> 00:00:07,000\n<i></i>\n\n3\n00:00:08,000 --> 00:00:09,000\nok\n"
    assert parse_srt(text) == [Cue(8.0, 9.0, "ok")]


def test_vtt_without_its_header_is_refused_with_the_reason():
    with pytest.raises(SubtitleError, match="not WebVTT"):
        parse_vtt("00:01.000 --> 00:02.000\nhello\n")


@pytest.mark.parametrize(
    "data, match",
    [
        (b"", "empty file"),
        (b"  \r\n\r\n", "empty file"),
        (b"this is a letter, not subtitles\nno timings anywhere\n", "no cues"),
        (b"1\n00:00:01 --> 00:00:02\nhours:minutes:seconds without millis? fine\n", None),
        (bytes(range(256)) * 8, "not text"),
        (b"\x00\x01\x02\x03\x04\x05" * 50, "binary|not text"),
    ],
)
def test_empty_unparsable_and_binary_srt_files_raise_a_clear_subtitle_error(tmp_path, data, match):
    path = tmp_path / "bad.srt"
    path.write_bytes(data)
    if match is None:
        assert read_subtitle_file(path)[0] == [Cue(1.0, 2.0, "hours:minutes:seconds without millis? fine")]
        return
    with pytest.raises(SubtitleError, match=match) as err:
        read_subtitle_file(path)
    assert str(tmp_path) not in str(err.value)  # reasons are shown to users: no paths


def test_windows_1252_file_falls_back_and_says_which_encoding(tmp_path):
    path = tmp_path / "old.srt"
    path.write_bytes("1\r\n00:00:01,000 --> 00:00:02,000\r\nCafé « crème »\r\n".encode("cp1252"))
    cues, encoding = read_subtitle_file(path)
    assert encoding == "cp1252" and cues[0].text == "Café « crème »"


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_files_with_and_without_a_byte_order_mark(tmp_path, codec):
    path = tmp_path / "u.vtt"
    path.write_bytes("WEBVTT\n\n00:01.000 --> 00:02.000\nÜber den Hafen\n".encode(codec))
    cues, encoding = read_subtitle_file(path)
    assert cues == [Cue(1.0, 2.0, "Über den Hafen")] and encoding.startswith("utf-16")


def test_wrong_encoding_is_named_in_the_error():
    shift_jis = "こんにちは、港です".encode("shift_jis")  # 0x81/0x82 lead bytes: neither UTF-8 nor 1252
    with pytest.raises(SubtitleError, match="not text in UTF-8 or Windows-1252"):
        decode_text(b"1\n00:00:01,000 --> 00:00:02,000\n" + shift_jis)
    with pytest.raises(SubtitleError, match="not valid utf-8"):
        decode_text("Café".encode("cp1252"), "utf-8")  # the manifest says utf-8, the bytes disagree
    with pytest.raises(SubtitleError, match="unknown encoding"):
        decode_text(b"x", "klingon-8")
    text, used = decode_text(shift_jis, "shift_jis")  # named, it reads
    assert used == "shift_jis" and "港" in text


def test_unknown_suffix_missing_file_and_directory_are_subtitle_errors(tmp_path):
    for path, match in (
        (tmp_path / "a.ass", "unknown subtitle format"),
        (tmp_path / "gone.srt", "not found"),
    ):
        with pytest.raises(SubtitleError, match=match):
            read_subtitle_file(path)
    (tmp_path / "dir.srt").mkdir()
    with pytest.raises(SubtitleError, match="directory"):
        read_subtitle_file(tmp_path / "dir.srt")


def test_sidecars_are_matched_by_the_video_file_name(tmp_path):
    for name in ("talk.mp4", "talk.srt", "talk.en.SRT", "talk.pt-BR.forced.vtt", "talk.sdh.vtt",
                 "talkshow.srt", "talk.part2.srt", "other.srt", "talk.txt"):  # fmt: skip
        (tmp_path / name).write_text("x")
    found = {f.path.name: f.language for f in find_sidecars(tmp_path / "talk.mp4")}
    assert found == {
        "talk.srt": None,
        "talk.en.SRT": "en",
        "talk.pt-BR.forced.vtt": "pt-BR",
        "talk.sdh.vtt": None,
    }


def test_a_manifest_line_names_its_subtitle_files(tmp_path):
    (tmp_path / "v.mp4").write_bytes(b"")
    manifest = tmp_path / "m.jsonl"
    lines = [
        {"id": "a", "path": "v.mp4", "subtitles": "subs/a.srt"},
        {
            "id": "b",
            "path": "v.mp4",
            "subtitles": [{"path": "b.vtt", "language": "de", "encoding": "latin-1"}],
        },
        {"id": "c", "path": "v.mp4", "subtitles": []},
        {"id": "d", "path": "v.mp4"},
    ]
    manifest.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    items = {i.id: i for i in discover(manifest)}
    assert items["a"].subtitles == (SubtitleFile(tmp_path / "subs/a.srt"),)
    assert items["b"].subtitles == (SubtitleFile(tmp_path / "b.vtt", "de", "latin-1"),)
    assert items["c"].subtitles == () and items["d"].subtitles is None


@pytest.mark.parametrize(
    "value, match",
    [
        (7, "must be a path"),
        ([{"language": "en"}], "non-empty string 'path'"),
        ([{"path": "a.srt", "lang": "en"}], "unknown 'subtitles' keys"),
        ([{"path": "a.srt", "encoding": "klingon-8"}], "not an encoding"),
    ],
)
def test_malformed_subtitles_in_a_manifest_line_are_refused(tmp_path, value, match):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "a", "path": "v.mp4", "subtitles": value}) + "\n")
    with pytest.raises(SourceError, match=match):
        discover(manifest)


@pytest.fixture(scope="module")
def small_video(tmp_path_factory, video_factory):
    return video_factory(tmp_path_factory.mktemp("subvideo") / "clip.mp4", num_frames=24, fps=4)


def test_embedded_mkv_streams_are_read_with_pyav(tmp_path, small_video):
    srt, vtt = tmp_path / "en.srt", tmp_path / "fr.vtt"
    srt.write_text(SRT.split("3\n")[0])
    vtt.write_text("WEBVTT\n\n00:00.500 --> 00:01.500 align:start\n<i>bonjour</i> le port\n")
    out = embed_subtitles(small_video, [(srt, "eng"), (vtt, "fre")], tmp_path / "with-subs.mkv")
    streams = read_embedded(out)
    assert [(i["codec"], i["language"]) for i, _, _ in streams] == [("srt", "eng"), ("webvtt", "fre")]
    assert streams[0][1] == [
        Cue(1.0, 2.5, "The lighthouse keeper & his dog"),
        Cue(2.0, 4.0, "Two lines, second line"),
    ]
    assert streams[1][1] == [Cue(0.5, 1.5, "bonjour le port")]
    assert read_embedded(small_video) == []  # no subtitle streams: nothing is demuxed


def test_embedded_packets_of_each_text_codec_become_words():
    assert _packet_text(b"0,0,Default,,0,0,0,,{\\i1}Hi{\\i0}, there\\Nfriend", "ass") == "Hi, there friend"
    text = b"mov text"
    assert (
        _packet_text(len(text).to_bytes(2, "big") + text + b"\x00\x00\x00\x0cstyl", "mov_text") == "mov text"
    )
    assert _packet_text(b"<b>srt</b>", "subrip") == "srt"


def test_an_unreadable_container_is_a_subtitle_error_without_paths(tmp_path):
    bad = tmp_path / "broken.mkv"
    bad.write_bytes(b"\x1a\x45\xdf\xa3 not really matroska")
    with pytest.raises(SubtitleError) as err:
        read_embedded(bad)
    assert str(tmp_path) not in str(err.value)


def test_text_tracks_of_a_video_report_a_broken_sidecar_and_keep_the_others(tmp_path, small_video):
    folder = tmp_path / "v"
    folder.mkdir()
    video = folder / "clip.mp4"
    video.write_bytes(small_video.read_bytes())
    (folder / "clip.en.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nthe harbour\n")
    (folder / "clip.de.srt").write_bytes(b"\x00\xff garbage \x00" * 40)
    (folder / "clip.vtt").write_text("")
    tracks = read_text_tracks(SourceItem("clip", video), duration_s=6.0)
    by_name = {t.name: t for t in tracks}
    assert (
        by_name["clip.en.srt"].cues == [Cue(1.0, 2.0, "the harbour")]
        and by_name["clip.en.srt"].problem is None
    )
    assert by_name["clip.de.srt"].cues == [] and "not text" in by_name["clip.de.srt"].problem
    assert by_name["clip.vtt"].problem == "empty file"


def test_cues_after_the_video_ends_are_dropped_and_said(tmp_path):
    (tmp_path / "v.mp4").write_bytes(b"")
    (tmp_path / "v.srt").write_text(
        "1\n00:00:01,000 --> 00:00:09,000\nruns past the end\n\n2\n00:00:30,000 --> 00:00:31,000\nlong after\n"
    )
    (track,) = read_text_tracks(
        SourceItem("v", tmp_path / "v.mp4"), duration_s=5.0, options=TrackOptions(embedded=False)
    )
    assert track.cues == [Cue(1.0, 5.0, "runs past the end")]
    assert "1 of 2 cues start after the video ends" in track.problem


def test_sidecar_signature_changes_when_a_sidecar_changes(tmp_path):
    f = tmp_path / "v.srt"
    f.write_text("a")
    before = sidecar_signature([SubtitleFile(f)])
    f.write_text("bb")
    assert sidecar_signature([SubtitleFile(f)]) != before
    assert sidecar_signature([]) != before


@pytest.fixture
def cue_file(tmp_path):
    path = tmp_path / "heard.json"
    path.write_text(
        json.dumps(
            {
                "quiet": [[0.5, 2.0, "what the <i>recogniser</i> heard"]],
                "talky": [{"start_s": 1, "end_s": 2, "text": "asr"}],
            }
        )
    )
    return path


def test_the_asr_stand_in_gives_cues_to_videos_without_subtitles_only(tmp_path, cue_file):
    (tmp_path / "quiet.mp4").write_bytes(b"")
    (tmp_path / "talky.mp4").write_bytes(b"")
    (tmp_path / "talky.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nsubtitled\n")
    options = TrackOptions(embedded=False, asr=CueFileAsr(cue_file))
    quiet = read_text_tracks(SourceItem("quiet", tmp_path / "quiet.mp4"), duration_s=10.0, options=options)
    assert [(t.kind, t.name, t.cues) for t in quiet] == [
        ("asr", "cues:heard.json", [Cue(0.5, 2.0, "what the recogniser heard")])
    ]
    talky = read_text_tracks(SourceItem("talky", tmp_path / "talky.mp4"), duration_s=10.0, options=options)
    assert [t.kind for t in talky] == ["sidecar"]
    always = TrackOptions(embedded=False, asr=CueFileAsr(cue_file), asr_always=True)
    talky = read_text_tracks(SourceItem("talky", tmp_path / "talky.mp4"), duration_s=10.0, options=always)
    assert [t.kind for t in talky] == ["sidecar", "asr"]
    assert pickle.loads(pickle.dumps(options)).asr.name == "cues:heard.json"  # travels to Ray tasks


class _Deaf:
    name = "deaf"

    def transcribe(self, path, *, video_id, duration_s):
        raise RuntimeError(f"model crashed reading {path}")


def test_a_failing_asr_hook_is_a_track_problem_not_a_crash(tmp_path):
    (tmp_path / "v.mp4").write_bytes(b"")
    (track,) = read_text_tracks(
        SourceItem("v", tmp_path / "v.mp4"), duration_s=5.0, options=TrackOptions(embedded=False, asr=_Deaf())
    )
    assert track.cues == [] and track.problem.startswith("speech recognition failed: RuntimeError")
    assert str(tmp_path) not in track.problem


def test_asr_hooks_are_loaded_from_their_specs(tmp_path, cue_file):
    assert load_asr_hook(f"cues:{cue_file}").name == "cues:heard.json"
    assert load_asr_hook("tests.indexer.test_subtitles:_Deaf").name == "deaf"
    for spec, match in (
        ("whisper", "KIND:ARG"),
        (f"cues:{tmp_path / 'none.json'}", "not found"),
        (f"faster-whisper:{tmp_path}", "not a local faster-whisper model directory"),
        ("no_such_module_xyz:thing", "cannot import"),
        ("json:JSONDecoder", "has no name and transcribe"),
    ):
        with pytest.raises(ConfigurationError, match=match):
            load_asr_hook(spec)
