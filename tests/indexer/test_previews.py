"""Browser previews (indexer/previews.py): which sources need one, the H.264/MP4 they get, one
transcode per video at a time, and their upkeep by `indexer previews`, `add`, `remove`, `compact` and
`verify`. Real PyAV encodes and decodes; the index is built with the real tiny checkpoint."""

from __future__ import annotations

import threading

import av
import numpy as np
import pytest

from indexer import BuildOptions, build_index, previews
from indexer.maintenance import verify_index
from qaslr.commands.indexer import main
from world.media import write_video

COMMON = ["--frames", "8", "--clip-len", "4", "--no-progress", "--log-level", "WARNING"]


def _frames(n, w, h, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8)
    return [np.roll(base, 3 * i, axis=1) for i in range(n)]


@pytest.mark.parametrize(
    ("name", "codec", "playable"),
    [
        ("a.mp4", "h264", True),
        ("b.webm", "vp9", True),
        ("c.avi", "mpeg4", False),
        ("d.mkv", "mpeg4", False),
        ("e.mkv", "h264", False),  # browsers do not take the mkv container
        ("f.mp4", "mpeg4", False),  # MPEG-4 Part 2 in MP4
    ],
)
def test_probe_tells_which_sources_browsers_play(tmp_path, name, codec, playable):
    path = write_video(tmp_path / name, _frames(6, 64, 48), fps=8, codec=codec)
    got = previews.probe(path)
    assert got.playable is playable
    assert got.playable or got.reason and str(tmp_path) not in got.reason


def test_a_preview_is_h264_mp4_faststart_at_most_480p_with_the_source_frame_rate(tmp_path):
    source = write_video(tmp_path / "big.avi", _frames(30, 960, 720), fps=7.5, codec="mpeg4")
    dest = tmp_path / "p.mp4"
    previews.transcode(source, dest)
    data = dest.read_bytes()
    assert data.index(b"moov") < data.index(b"mdat")  # playback starts before the whole file arrives
    with av.open(str(dest)) as c:
        s = c.streams.video[0]
        assert s.codec_context.name == "h264" and s.codec_context.pix_fmt == "yuv420p"
        assert (s.width, s.height) == (640, 480) and float(s.average_rate) == pytest.approx(7.5)
        times = [f.time for f in c.decode(s)]
    assert len(times) == 30 and times[-1] == pytest.approx(29 / 7.5, abs=1e-3)
    assert previews.output_size(182, 122) == (182, 122) and previews.output_size(1920, 1080) == (854, 480)


def test_one_transcode_per_video_at_a_time(tmp_path, monkeypatch):
    source = write_video(tmp_path / "s.avi", _frames(12, 64, 48), fps=8, codec="mpeg4")
    calls = []
    real = previews.transcode

    def counted(src, dest, **kw):
        calls.append(dest)
        real(src, dest, **kw)

    monkeypatch.setattr(previews, "transcode", counted)
    index_dir = tmp_path / "index"
    got, barrier = [], threading.Barrier(4)

    def request():
        barrier.wait()
        got.append(previews.ensure_preview(index_dir, source, "abc123"))

    threads = [threading.Thread(target=request) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(calls) == 1 and len(got) == 4 and len(set(got)) == 1
    assert got[0] == index_dir / "previews" / "abc123.mp4" and got[0].stat().st_size > 0
    assert [p.name for p in (index_dir / "previews").iterdir() if p.name.endswith(".tmp")] == []


def test_a_source_that_cannot_be_decoded_records_why_without_a_path(tmp_path):
    bad = tmp_path / "secret-folder" / "bad.avi"
    bad.parent.mkdir()
    bad.write_bytes(b"RIFF" + b"\0" * 2000)
    with pytest.raises(previews.PreviewError) as first:
        previews.ensure_preview(tmp_path / "index", bad, "dead01")
    assert "secret-folder" not in str(first.value)
    assert previews.failure_of(tmp_path / "index", "dead01") == str(first.value)
    with pytest.raises(previews.PreviewError):  # remembered: not decoded again
        previews.ensure_preview(tmp_path / "index", bad, "dead01")


def test_previews_are_made_verified_and_swept_with_the_index(tmp_path, tiny_checkpoint, capsys):
    src, more = tmp_path / "src", tmp_path / "more"
    write_video(src / "plays.mp4", _frames(24, 96, 64, 1), fps=12, codec="h264")
    write_video(src / "old.avi", _frames(24, 96, 64, 2), fps=12, codec="mpeg4")
    write_video(more / "new.mkv", _frames(24, 96, 64, 3), fps=12, codec="mpeg4")
    index = tmp_path / "index"
    assert not build_index(src, index, BuildOptions(model=str(tiny_checkpoint), frames=8, clip_len=4)).stopped
    folder = index / "previews"
    assert not folder.exists()  # made lazily unless asked for
    rep = verify_index(index)
    assert rep.ok and rep.checked["previews_not_made"] == 1 and not rep.warnings

    capsys.readouterr()
    assert main(["previews", "--index", str(index)]) == 0
    assert "1 made" in capsys.readouterr().out
    assert len(list(folder.glob("*.mp4"))) == 1
    assert main(["previews", "--index", str(index)]) == 0
    assert "0 made, 1 already there, 1 not needed" in capsys.readouterr().out

    # add --previews makes the new video's preview
    assert main(["add", str(more), "--index", str(index), "--previews", *COMMON[4:]]) == 0
    assert len(list(folder.glob("*.mp4"))) == 2
    rep = verify_index(index)
    assert rep.ok and rep.checked["previews"] == 2 and rep.checked["previews_not_made"] == 0
    assert not [w for w in rep.warnings if "preview" in w]

    # a corrupt preview is reported, not fatal
    victim = sorted(folder.glob("*.mp4"))[0]
    victim.write_bytes(b"not a video")
    rep = verify_index(index)
    assert rep.ok and any("corrupt" in w for w in rep.warnings)

    # remove sweeps the removed video's preview; an unreferenced one left behind goes at compact
    assert main(["remove", "old.avi", "--index", str(index)]) == 0
    assert len(list(folder.glob("*.mp4"))) == 1
    stray = folder / "0123456789abcdef01234567.mp4"
    stray.write_bytes(b"x")
    assert any("belongs to no indexed video" in w for w in verify_index(index).warnings)
    capsys.readouterr()
    assert main(["compact", "--index", str(index)]) == 0
    assert "browser previews:" in capsys.readouterr().out  # (the writer's open already swept it)
    assert not stray.exists() and len(list(folder.glob("*.mp4"))) == 1


def test_an_index_that_cannot_be_written_gets_a_reason_not_a_crash(tmp_path):
    source = write_video(tmp_path / "s.avi", _frames(6, 64, 48), fps=8, codec="mpeg4")
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    (index_dir / "previews").write_text("a file where the folder should be")
    with pytest.raises(previews.PreviewError, match="could not be written"):
        previews.ensure_preview(index_dir, source, "abc999")
