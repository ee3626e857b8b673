"""The frame store (``indexer build --frame-store``): its file format and codecs, what a build keeps,
stats, verify, add/remove, settings kept across runs, and indexes written before it existed.
Real tiny checkpoint, decord and FAISS."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from indexer import BuildOptions, add_to_index, build_index, remove_from_index
from indexer.maintenance import index_stats, verify_index
from indexer.store import IndexMismatchError, IndexReader
from indexer.store.frames import (
    FramesFile,
    StoredFrameError,
    copy_rows,
    decode_frame,
    encode_frame,
    encode_frames,
    frames_file_bytes,
)
from indexer.video import decode_frames
from qaslr.commands.indexer import main

COMMON = ["--frames", "8", "--clip-len", "4", "--no-progress", "--log-level", "WARNING"]


def _frame(seed=0, shape=(32, 64)):
    """A smooth picture (gradients and a block), like a video frame rather than noise."""
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w]
    f = np.stack([xx * 255 // w, yy * 255 // h, (xx + yy + 40 * seed) % 256], -1).astype(np.uint8)
    f[h // 4 : h // 2, w // 4 : w // 2] = (200, 30 + seed, 30)
    return f


@pytest.mark.parametrize("codec", ["jpeg", "png", "lz4"])
def test_codecs_round_trip_deterministically(codec):
    frame = _frame()
    blob = encode_frame(frame, codec)
    assert encode_frame(frame, codec) == blob  # a resumed build writes the same bytes
    back = decode_frame(blob, codec, frame.shape[:2])
    assert back.shape == frame.shape and back.dtype == np.uint8
    err = int(np.abs(back.astype(int) - frame).max())
    assert err == 0 if codec in ("png", "lz4") else 0 < err <= 16
    with pytest.raises(StoredFrameError):
        decode_frame(blob, codec, (frame.shape[0] + 32, frame.shape[1]))  # not the expected size
    with pytest.raises(StoredFrameError):
        decode_frame(b"not a frame at all", codec, frame.shape[:2])


def test_unknown_codec_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown frame store 'gif'"):
        encode_frame(_frame(), "gif")


def test_frames_file_rows_and_damage(tmp_path):
    videos = [encode_frames([_frame(0), _frame(1)], "png"), encode_frames([_frame(2, (64, 32))], "png")]
    path = tmp_path / "frames-00000001.bin"
    path.write_bytes(frames_file_bytes(videos, "png"))
    f = FramesFile(path)
    assert (f.codec, f.rows) == ("png", 3) and f.shape(2) == (64, 32)
    for row, expected in enumerate([_frame(0), _frame(1), _frame(2, (64, 32))]):
        assert np.array_equal(f.read(row), expected)
    with pytest.raises(StoredFrameError, match="no row 3"):
        f.read(3)
    f.close()

    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # one flipped byte in the last frame
    path.write_bytes(bytes(data))
    f = FramesFile(path)
    assert np.array_equal(f.read(0), _frame(0))  # the other rows still read
    with pytest.raises(StoredFrameError, match="CRC"):
        f.read(2)
    f.close()
    path.write_bytes(bytes(data[:40]))  # the table runs past the end
    with pytest.raises(StoredFrameError, match="truncated"):
        FramesFile(path)
    path.write_bytes(b"PK\x03\x04" + bytes(40))
    with pytest.raises(StoredFrameError, match="not a frame-store file"):
        FramesFile(path)
    with pytest.raises(ValueError, match="lz4"):
        frames_file_bytes(videos, "lz4")  # rows of another codec


def test_copy_rows_keeps_the_chosen_rows_bytes_for_bytes(tmp_path):
    frames = [_frame(i) for i in range(5)]
    src = tmp_path / "frames-00000001.bin"
    src.write_bytes(frames_file_bytes([encode_frames(frames, "jpeg")], "jpeg"))
    old = FramesFile(src)
    data, starts = copy_rows(old, [(3, 2), (0, 1)])  # two surviving videos of the batch
    new_path = tmp_path / "frames-00000002.bin"
    new_path.write_bytes(data)
    new = FramesFile(new_path)
    assert (new.codec, new.rows, starts) == ("jpeg", 3, [0, 2])
    for new_row, old_row in enumerate([3, 4, 0]):
        assert bytes(new.blob(new_row)) == bytes(old.blob(old_row))
        assert np.array_equal(new.read(new_row), old.read(old_row))
    old.close()
    new.close()


def test_decode_frames_in_any_order_gives_the_requested_frames(tmp_path, video_factory):
    path = video_factory(tmp_path / "v.mp4", num_frames=40, fps=10, seed=3)
    wanted = [30, 2, 17, 2, 39, 0]
    got = decode_frames(path, wanted, size=(64, 32))
    singles = np.stack([decode_frames(path, [i], size=(64, 32))[0] for i in wanted])
    assert np.array_equal(got, singles)


@pytest.fixture
def corpus(tmp_path, video_factory):
    src = tmp_path / "src"
    video_factory(src / "a.mp4", num_frames=48, fps=12, size=(96, 64), seed=1)
    video_factory(src / "b.mp4", num_frames=30, fps=10, size=(64, 64), seed=2)
    video_factory(src / "c.mp4", num_frames=36, fps=12, size=(128, 48), seed=3)
    return src


def _build(corpus, index, ckpt, **kw):
    report = build_index(corpus, index, BuildOptions(model=str(ckpt), frames=8, clip_len=4, **kw))
    assert not report.stopped
    return report


def test_a_build_keeps_the_bank_frames_at_the_working_size(corpus, tiny_checkpoint, tmp_path):
    from models.backbone import working_size

    index = tmp_path / "idx"
    assert "frame store" in _build(corpus, index, tiny_checkpoint, frame_store="lz4").summary()
    with IndexReader(index) as r:
        assert r.frame_store == "lz4"
        for v in r.videos():
            bank = r.frame_bank(v.id)
            size = working_size(v.width, v.height, r.manifest.frame_size)
            expected = decode_frames(v.path, bank.frame_indices, size=size)
            rows = r.stored_rows(v.id, bank.frame_indices)
            assert rows.tolist() == list(range(len(bank.frame_indices)))
            stored = np.stack([r.read_stored_frame(v.id, int(row)) for row in rows])
            assert np.array_equal(stored, expected)  # lossless: the very pixels the bank embedded
            assert r.stored_rows(v.id, [bank.frame_indices[0] + 1, -5]).tolist() == [
                -1,
                -1,
            ]  # not bank frames

    stats = index_stats(index)
    fs = stats["frame_store"]
    assert fs["codec"] == "lz4" and fs["videos"] == 3 and fs["frames"] == stats["bank_frames"]
    assert fs["bytes"] == stats["bytes"]["frame_store"] > 0
    assert fs["bytes_per_video"] == pytest.approx(fs["bytes"] / 3)
    rep = verify_index(index)
    assert (
        rep.ok and rep.checked["stored_frames"] == stats["bank_frames"] and rep.checked["frames_files"] == 1
    )


def test_the_store_setting_is_kept_by_resume_and_add(corpus, tiny_checkpoint, tmp_path, video_factory):
    index = tmp_path / "idx"
    _build(corpus, index, tiny_checkpoint, frame_store="png")
    with pytest.raises(IndexMismatchError) as exc:
        _build(corpus, index, tiny_checkpoint, frame_store="jpeg")
    assert "frame_store: index has 'png', this build has 'jpeg'" in str(exc.value)
    _build(corpus, index, tiny_checkpoint)  # no frame store asked for: the index's own

    more = tmp_path / "more"
    video_factory(more / "d.mp4", num_frames=24, fps=12, seed=9)
    assert not add_to_index(more, index).stopped
    with IndexReader(index) as r:
        assert r.frame_store == "png"
        bank = r.frame_bank("d.mp4")
        assert (r.stored_rows("d.mp4", bank.frame_indices) >= 0).all()
    assert verify_index(index).ok


def test_remove_deletes_frames_files_no_video_needs(corpus, tiny_checkpoint, tmp_path):
    index = tmp_path / "idx"
    _build(corpus, index, tiny_checkpoint, batch_videos=1)  # the default store
    assert len(list((index / "frames").glob("frames-*.bin"))) == 3
    assert remove_from_index(index, ["b.mp4"]).unknown == []
    assert len(list((index / "frames").glob("frames-*.bin"))) == 2
    rep = verify_index(index)
    assert rep.ok and rep.checked["frames_files"] == 2

    orphan = index / "frames" / "frames-00000099.bin"
    orphan.write_bytes(b"left by a crash")
    assert any("frames-00000099.bin is not referenced" in w for w in verify_index(index).warnings)
    assert remove_from_index(index, ["a.mp4"]).unknown == []  # the next writer collects it
    assert not orphan.exists()


def test_verify_names_a_frames_file_of_the_wrong_codec(corpus, tiny_checkpoint, tmp_path):
    index = tmp_path / "idx"
    _build(corpus, index, tiny_checkpoint, frame_store="lz4")
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["frame_store"] = "jpeg"
    (index / "manifest.json").write_text(json.dumps(manifest))
    rep = verify_index(index)
    assert not rep.ok and any("holds lz4, the manifest says jpeg" in e for e in rep.errors)


def test_an_index_from_before_the_frame_store_still_opens_and_extends(
    corpus, tiny_checkpoint, tmp_path, video_factory
):
    index = tmp_path / "idx"
    _build(corpus, index, tiny_checkpoint, frame_store="none")
    # what an index written before the frame store looked like: no columns, no manifest field
    with sqlite3.connect(index / "meta.sqlite") as db:
        db.execute("ALTER TABLE videos DROP COLUMN frames_file")
        db.execute("ALTER TABLE videos DROP COLUMN frames_offset")
    db.close()
    manifest = json.loads((index / "manifest.json").read_text())
    del manifest["frame_store"]
    (index / "manifest.json").write_text(json.dumps(manifest))
    (index / "frames").rmdir()

    with IndexReader(index) as r:
        assert r.frame_store == "none" and len(r) == 3
        assert r.stored_rows("a.mp4", r.frame_bank("a.mp4").frame_indices).max() == -1
    assert index_stats(index)["frame_store"]["videos"] == 0
    assert verify_index(index).ok
    more = tmp_path / "more"
    video_factory(more / "d.mp4", num_frames=24, fps=12, seed=9)
    assert not add_to_index(more, index).stopped
    with IndexReader(index) as r:
        assert len(r) == 4 and r.frame_store == "none"
    assert verify_index(index).ok


# -- the `indexer` command itself ------------------------------------------------------------------


def test_cli_frame_store_flag_and_stats(corpus, tiny_checkpoint, tmp_path, capsys):
    index = tmp_path / "idx"
    args = ["build", str(corpus), "--index", str(index), "--model", str(tiny_checkpoint), *COMMON]
    assert main([*args, "--frame-store", "lz4"]) == 0
    assert "frame store" in capsys.readouterr().out
    assert main(["stats", "--index", str(index)]) == 0
    assert "frame store: lz4, 3 video(s)" in capsys.readouterr().out
    assert main([*args, "--frame-store", "png"]) == 2
    assert "frame_store: index has 'lz4', this build has 'png'" in capsys.readouterr().err
