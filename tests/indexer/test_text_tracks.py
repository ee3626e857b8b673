"""Text tracks in the index directory, through the facade: cues stored with the videos by build and
add, kept in step by remove, compact and verify, counted by stats; broken subtitles reported while
their video is indexed; an index written before cues keeps working and gains them on `add`."""

from __future__ import annotations

import json
import sqlite3

import pytest

from core.errors import ConfigurationError
from indexer import BuildOptions, add_to_index, build_index, compact_index, index_stats, remove_from_index
from indexer.maintenance import verify_index
from indexer.store import IndexReader
from indexer.subtitles.embedded import embed_subtitles

SRT_A = "1\r\n00:00:00,500 --> 00:00:01,500\r\nThe lighthouse keeper counts herons\r\n\r\n2\r\n00:00:01,000 --> 00:00:02,000\r\nan overlapping harbour bell\r\n"
VTT_A = "WEBVTT\n\n00:00.200 --> 00:00.900 align:start\n<v Ann>bonjour from the quay</v>\n"


def _opts(ckpt, **kw) -> BuildOptions:
    return BuildOptions(model=str(ckpt), frames=8, clip_len=4, batch_videos=2, **kw)


@pytest.fixture
def talking_videos(tmp_path, video_factory):
    """a.mp4 with two sidecars, b.mkv with an embedded SubRip stream, c.mp4 silent, d.mp4 whose
    sidecar is broken (UTF-16 garbage), e.mp4 whose sidecar is empty."""
    root = tmp_path / "videos"
    for i, name in enumerate(("a.mp4", "plain.mp4", "c.mp4", "d.mp4", "e.mp4")):
        video_factory(root / name, num_frames=12, fps=4, seed=i)
    (root / "a.srt").write_bytes(b"\xef\xbb\xbf" + SRT_A.encode())
    (root / "a.fr.vtt").write_text(VTT_A)
    side = tmp_path / "b.srt"
    side.write_text("1\n00:00:01,000 --> 00:00:02,500\nthe ferry whistle sounds twice\n")
    embed_subtitles(root / "plain.mp4", [(side, "eng")], root / "b.mkv")
    (root / "plain.mp4").unlink()
    (root / "d.srt").write_bytes(b"\x00\xd8\x00\xdc" * 64)
    (root / "e.vtt").write_bytes(b"")
    return root


def _cues(index) -> dict[str, list[tuple[float, float, str]]]:
    with IndexReader(index) as r:
        out: dict[str, list] = {}
        for c in r.match_cues('"the" OR "bonjour" OR "harbour" OR "ferry" OR "heard" OR "new"'):
            out.setdefault(c["video_id"], []).append((c["start_s"], c["end_s"], c["text"]))
    return {k: sorted(v) for k, v in out.items()}


def test_build_stores_the_cues_of_sidecars_and_embedded_streams_and_reports_broken_ones(
    talking_videos, tiny_checkpoint, tmp_path
):
    index = tmp_path / "idx"
    report = build_index(talking_videos, index, _opts(tiny_checkpoint))
    assert report.indexed_total == 5 and report.failed_total == 0  # broken subtitles fail no video
    assert sorted(w.split(":")[0] for w in report.warnings) == ["d.mp4", "e.mp4"]
    assert "empty file" in next(w for w in report.warnings if w.startswith("e.mp4"))
    assert "subtitles: d.mp4: sidecar track 'd.srt'" in report.summary()
    assert str(talking_videos) not in "\n".join(report.warnings)  # no paths in what users see
    with IndexReader(index) as r:
        assert r.has_cues and r.cue_total() == 4
        by_video = {}
        for c in r.match_cues('"harbour" OR "quay" OR "ferry" OR "herons"'):
            by_video.setdefault(c["video_id"], []).append((c["start_s"], c["end_s"], c["text"]))
    assert sorted(by_video["a.mp4"]) == [
        (0.2, 0.9, "bonjour from the quay"),
        (0.5, 1.5, "The lighthouse keeper counts herons"),
        (1.0, 2.0, "an overlapping harbour bell"),
    ]
    assert by_video["b.mkv"] == [(1.0, 2.5, "the ferry whistle sounds twice")]
    text = index_stats(index)["text_tracks"]
    assert text["cues"] == 4 and text["videos_with_cues"] == 2 and text["videos_not_read"] == 0
    assert text["by_kind"]["sidecar"] == {"tracks": 4, "cues": 3, "problems": 2}
    assert text["by_kind"]["embedded"] == {"tracks": 1, "cues": 1, "problems": 0}
    assert text["languages"] == {"unknown": 1, "fr": 1, "eng": 1}
    assert {p["video_id"] for p in text["problems"]} == {"d.mp4", "e.mp4"}
    rep = verify_index(index)
    assert rep.ok, rep.errors


def test_the_cue_index_stems_folds_diacritics_and_ranks_by_bm25(talking_videos, tiny_checkpoint, tmp_path):
    index = tmp_path / "idx"
    build_index(talking_videos, index, _opts(tiny_checkpoint))
    with IndexReader(index) as r:
        assert [c["text"] for c in r.match_cues('"heron"')] == ["The lighthouse keeper counts herons"]
        assert [c["video_id"] for c in r.match_cues('"QUÄY"')] == ["a.mp4"]
        ranked = r.match_cues('"ferry" OR "the"')
        assert ranked[0]["video_id"] == "b.mkv" and ranked[0]["bm25"] < ranked[-1]["bm25"]
        assert [c["text"] for c in r.match_cues('"keeper counts"')] == ["The lighthouse keeper counts herons"]
        assert r.match_cues('"counts keeper"') == []  # a phrase keeps its order
        snip = r.cue_snippets(
            '"herons"', [ranked[0]["id"]] + [c["id"] for c in r.match_cues('"herons"')], marks=("[", "]")
        )
        assert "[herons]" in "".join(snip.values())
        with pytest.raises(ValueError, match="not a cue query"):
            r.match_cues('"unbalanced')


def test_remove_compact_and_verify_keep_the_cues_in_step(talking_videos, tiny_checkpoint, tmp_path):
    index = tmp_path / "idx"
    build_index(talking_videos, index, _opts(tiny_checkpoint))
    remove_from_index(index, ["a.mp4"])
    assert set(_cues(index)) == {"b.mkv"}
    assert index_stats(index)["text_tracks"]["cues"] == 1 and verify_index(index).ok
    # damage the cue index behind the store's back: verify says so, compact rebuilds it
    conn = sqlite3.connect(index / "meta.sqlite")
    with conn:
        conn.execute("INSERT INTO cues_fts(cues_fts) VALUES ('delete-all')")
    conn.close()
    rep = verify_index(index)
    assert not rep.ok and any("cue index (FTS5) is out of step" in e for e in rep.errors)
    assert compact_index(index).cue_index == "rebuild"
    assert verify_index(index).ok and set(_cues(index)) == {"b.mkv"}
    assert compact_index(index).cue_index == "optimize"


def test_add_reads_changed_sidecars_again_without_reindexing_the_video(
    talking_videos, tiny_checkpoint, tmp_path
):
    index = tmp_path / "idx"
    build_index(talking_videos, index, _opts(tiny_checkpoint))
    (talking_videos / "a.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\na new line was heard\n")
    (talking_videos / "c.srt").write_text("1\n00:00:00,000 --> 00:00:01,000\nc heard something new\n")
    report = add_to_index(talking_videos, index, _opts(tiny_checkpoint))
    assert report.stats.indexed == 0 and report.stats.skipped == 5 and report.stats.retracked == 2
    cues = _cues(index)
    assert (1.0, 2.0, "a new line was heard") in cues["a.mp4"]
    assert (0.2, 0.9, "bonjour from the quay") in cues["a.mp4"]  # the untouched sidecar stays
    assert "The lighthouse keeper counts herons" not in {t for _, _, t in cues["a.mp4"]}
    assert cues["c.mp4"] == [(0.0, 1.0, "c heard something new")]
    assert cues["b.mkv"] == [(1.0, 2.5, "the ferry whistle sounds twice")]  # embedded: not re-read
    assert verify_index(index).ok
    again = add_to_index(talking_videos, index, _opts(tiny_checkpoint))
    assert again.stats.retracked == 0  # nothing changed


def test_an_index_written_before_cues_is_served_and_gains_them_on_add(
    talking_videos, tiny_checkpoint, tmp_path
):
    index = tmp_path / "idx"
    build_index(talking_videos, index, _opts(tiny_checkpoint))
    conn = sqlite3.connect(index / "meta.sqlite")  # what an index of the previous version holds
    with conn:
        for name in ("cues_fts", "cues", "text_tracks"):
            conn.execute(f"DROP TABLE {name}")
        conn.execute("ALTER TABLE videos DROP COLUMN tracks_stat")
    conn.close()
    with IndexReader(index) as r:
        assert not r.has_cues and r.match_cues('"harbour"') == [] and len(r) == 5
    assert index_stats(index)["text_tracks"] is None and verify_index(index).ok
    report = add_to_index(talking_videos, index, _opts(tiny_checkpoint))
    assert report.stats.indexed == 0 and report.stats.retracked == 5
    assert set(_cues(index)) == {"a.mp4", "b.mkv"} and verify_index(index).ok


def test_speech_recognition_stand_in_and_a_manifest_naming_its_subtitles(
    tmp_path, video_factory, tiny_checkpoint
):
    root = tmp_path / "v"
    for i, name in enumerate(("quiet.mp4", "named.mp4")):
        video_factory(root / name, num_frames=12, fps=4, seed=i)
    (root / "named.srt").write_text("1\n00:00:00,000 --> 00:00:01,000\nfound by name, not read\n")
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "subs.vtt").write_bytes(
        "WEBVTT\n\n00:01.000 --> 00:02.000\nnamed explicitly\n".encode("utf-16")
    )
    heard = tmp_path / "heard.json"
    heard.write_text(
        json.dumps({"quiet": [[0.5, 1.5, "what the recogniser heard"]], "named": [[0, 1, "not used"]]})
    )
    manifest = root / "videos.jsonl"
    manifest.write_text(
        json.dumps({"id": "quiet", "path": "quiet.mp4"}) + "\n"
        + json.dumps({"id": "named", "path": "named.mp4", "subtitles": [{"path": "elsewhere/subs.vtt", "language": "en"}]}) + "\n"
    )  # fmt: skip
    index = tmp_path / "idx"
    build_index(manifest, index, _opts(tiny_checkpoint, asr=f"cues:{heard}"))
    with IndexReader(index) as r:
        cues = {(c["video_id"], c["text"]) for c in r.match_cues('"heard" OR "named" OR "found" OR "used"')}
    assert cues == {("quiet", "what the recogniser heard"), ("named", "named explicitly")}
    assert index_stats(index)["text_tracks"]["by_kind"]["asr"] == {"tracks": 1, "cues": 1, "problems": 0}


def test_a_bad_asr_spec_is_refused_before_anything_is_written(sample_videos, tiny_checkpoint, tmp_path):
    with pytest.raises(ConfigurationError, match="not found"):
        build_index(
            sample_videos, tmp_path / "idx", _opts(tiny_checkpoint, asr=f"cues:{tmp_path / 'no.json'}")
        )
    assert not (tmp_path / "idx").exists()


def test_subtitles_off_reads_none_and_a_later_add_reads_them(talking_videos, tiny_checkpoint, tmp_path):
    index = tmp_path / "idx"
    report = build_index(talking_videos, index, _opts(tiny_checkpoint, subtitles=False))
    assert report.warnings == [] and index_stats(index)["text_tracks"]["videos_not_read"] == 5
    with IndexReader(index) as r:
        assert not r.has_cues
    assert add_to_index(talking_videos, index, _opts(tiny_checkpoint)).stats.retracked == 5
    assert set(_cues(index)) == {"a.mp4", "b.mkv"}


def test_the_indexer_command_reads_subtitles_and_reports_them(
    talking_videos, tiny_checkpoint, tmp_path, capsys
):
    from qaslr.commands.indexer import main

    index = tmp_path / "idx"
    model = ["--model", str(tiny_checkpoint), "--frames", "8", "--clip-len", "4", "--no-progress"]
    assert main(["build", str(talking_videos), "--index", str(index), *model]) == 0
    out = capsys.readouterr().out
    assert (
        "text tracks: 4 cues from 5 tracks of 2 videos" in out
        and "subtitles: d.mp4: sidecar track 'd.srt'" in out
    )
    assert main(["stats", "--index", str(index)]) == 0
    out = capsys.readouterr().out
    assert "text tracks: 4 cues in 2 video(s); embedded 1 (1 cues), sidecar 4 (3 cues)" in out
    assert (
        main(["build", str(talking_videos), "--index", str(tmp_path / "other"), *model, "--asr", "cues"]) == 2
    )
    assert "--asr takes KIND:ARG" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()
    assert (
        main(["build", str(talking_videos), "--index", str(tmp_path / "other"), *model, "--asr-always"]) == 2
    )
