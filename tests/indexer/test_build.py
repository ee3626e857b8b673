"""Build, add, remove, stats and verify end to end through the library facade (:mod:`indexer.api`),
and the `indexer` command's own flags, messages and exit statuses (the last section): real tiny
checkpoint, real decord, real FAISS.

The crash test runs a build in a subprocess that dies abruptly (os._exit, like kill -9) after two
committed batches (injected by tests/indexer/crash_build.py through the Builder's on_commit
callback), resumes it, and compares everything on disk with an uninterrupted build.
"""

import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from indexer import BuildOptions, add_to_index, build_index, index_stats, pipeline, remove_from_index
from indexer.assembly import check_compatible
from indexer.maintenance import verify_index
from indexer.pipeline import SourceError
from indexer.store import IndexMismatchError, IndexReader
from qaslr.commands.indexer import main

K, L = 8, 4
COMMON = ["--frames", str(K), "--clip-len", str(L), "--no-progress", "--log-level", "WARNING"]
FACADE_CHILD = Path(__file__).with_name("facade_child.py")


def _opts(ckpt, **kw) -> BuildOptions:
    """The tests' build options: the tiny checkpoint, K and L small."""
    return BuildOptions(model=str(ckpt), frames=K, clip_len=L, **kw)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, video_factory):
    """Good videos of several lengths, rates and sizes, plus broken ones."""
    return write_corpus(tmp_path_factory.mktemp("corpus"), video_factory)


def write_corpus(root, video_factory):
    """The corpus: GOOD videos of several lengths, rates and sizes, and BAD ones (under ``root``)."""
    video_factory(root / "long.mp4", num_frames=120, fps=24, size=(128, 96), seed=1)
    video_factory(root / "slow.mp4", num_frames=30, fps=6, size=(64, 64), seed=2)
    video_factory(root / "nested" / "wide.avi", num_frames=60, fps=30, size=(160, 48), seed=3)
    video_factory(root / "short.mp4", num_frames=5, fps=25, size=(96, 64), seed=4)  # fewer than K frames
    video_factory(root / "tiny16.mp4", num_frames=12, fps=12, size=(16, 16), seed=5)  # absurdly small
    full = video_factory(root.parent / "full.avi", num_frames=96, fps=24, size=(64, 48), seed=6)
    data = full.read_bytes()
    (root / "truncated.avi").write_bytes(
        data[: len(data) // 2]
    )  # decodable prefix: indexed with fewer frames
    mp4 = (root / "long.mp4").read_bytes()
    (root / "truncated.mp4").write_bytes(mp4[: len(mp4) // 2])  # no moov atom: cannot be opened
    (root / "notes.mp4").write_text("this is not a video\n" * 50)
    mkv = video_factory(root.parent / "x.mkv", num_frames=24, fps=24, seed=7).read_bytes()
    assert b"V_MPEG4/ISO/ASP" in mkv
    (root / "unknown_codec.mkv").write_bytes(mkv.replace(b"V_MPEG4/ISO/ASP", b"V_QQQQQ/ISO/ASP"))
    (root / "empty.mkv").write_bytes(b"")
    (root / "readme.txt").write_text("ignored: not a video extension")
    return root


GOOD = {"long.mp4", "slow.mp4", "nested/wide.avi", "short.mp4", "tiny16.mp4", "truncated.avi"}
BAD = {"truncated.mp4", "notes.mp4", "empty.mkv", "unknown_codec.mkv"}


def _snapshot(directory):
    """Everything a resumed build must reproduce: records, embeddings, banks, stored frames, manifest
    settings."""
    with IndexReader(directory) as r:
        out = {}
        for v in r.videos(status=None):
            item = {"faiss_id": v.faiss_id, "status": v.status, "error": v.error, "num_frames": v.num_frames}
            if v.status == "indexed":
                bank = r.frame_bank(v.id)
                item.update(
                    embedding=r.embedding(v.id).tobytes(),
                    bank_indices=bank.frame_indices.tolist(),
                    bank=np.asarray(bank.embeddings).tobytes(),
                    stored=[  # the frame store (the default build keeps one): the same pixels
                        r.read_stored_frame(v.id, int(row)).tobytes()
                        for row in r.stored_rows(v.id, bank.frame_indices)
                    ],
                )
            out[v.id] = item
        manifest = {k: v for k, v in vars(r.manifest).items() if k != "built_at"}
        queries = np.stack([r.embedding(i) for i in sorted(r.filter_ids({}))])
        return out, manifest, r.search(queries, 3)


def test_build_stats_verify_oneshot(corpus, tiny_checkpoint, tmp_path):
    index = tmp_path / "idx"
    report = build_index(corpus, index, _opts(tiny_checkpoint))
    assert not report.stopped
    out = report.summary()
    assert "6 indexed" in out and "4 failed" in out and "time: wall" in out

    with IndexReader(index) as r:
        assert {v.id for v in r.videos()} == GOOD
        failed = {v.id: v.error for v in r.videos(status="failed")}
        assert set(failed) == BAD
        assert failed["empty.mkv"] == "empty file (0 bytes)"
        assert "cannot open as video" in failed["notes.mp4"]
        assert (
            "cannot open as video" in failed["unknown_codec.mkv"]
            and ".cc:" not in failed["unknown_codec.mkv"]
        )
        m = r.manifest
        assert (m.embedder, m.head_fingerprint, m.max_frames, m.clip_len, m.embed_dim) == (
            "oneshot",
            "oneshot",
            K,
            L,
            64,
        )
        assert m.counts == {"indexed": 6, "failed": 4} and m.faiss_factory == "IDMap2,Flat"
        for vid in GOOD:
            v = r.video(vid)
            bank = r.frame_bank(vid)
            # about one candidate frame per second, at least one, inside the video, increasing
            assert len(bank.frame_indices) == max(1, round(v.duration_s))
            assert 0 <= bank.frame_indices.min() and bank.frame_indices.max() < v.num_frames
            np.testing.assert_allclose(bank.timestamps, bank.frame_indices / v.fps)
            assert bank.embeddings.shape == (len(bank.frame_indices), 64)
            assert bank.embeddings.dtype == np.float16
            e = r.embedding(vid)
            assert np.linalg.norm(e) == pytest.approx(1.0, abs=1e-5)
            assert r.search(e[None], 1)[0][0][0] == vid
        assert r.video("short.mp4").num_frames == 5  # shorter than K: indexed with its 5 frames
        assert 0 < r.video("truncated.avi").num_frames < 96

    stats = json.loads(json.dumps(index_stats(index)))
    assert stats["indexed"] == 6 and stats["failed"] == 4 and stats["bank_frames"] > 0
    verified = verify_index(index, check_sources=True)
    assert verified.ok, verified.errors

    # a second run skips everything; the report says the recorded failures are there
    again = build_index(corpus, index, _opts(tiny_checkpoint))
    assert again.has_failures
    assert "0 indexed, 10 skipped" in again.summary()

    # verify notices damage
    bank_file = next((index / "bank").glob("*.npy"))
    bank_file.write_bytes(bank_file.read_bytes()[:100])
    damaged = verify_index(index)
    assert not damaged.ok
    assert any("frame bank" in e for e in damaged.errors)


def test_every_frame_decoded_once(corpus, tiny_checkpoint, tmp_path, monkeypatch):
    from indexer import decoding

    calls = []
    real = decoding.decode_frames

    def counting(path, indices, *, size):
        calls.append((str(path), list(indices)))
        return real(path, indices, size=size)

    monkeypatch.setattr(decoding, "decode_frames", counting)
    assert not build_index(corpus, tmp_path / "i", _opts(tiny_checkpoint)).stopped
    paths = [p for p, _ in calls]
    assert len(paths) == len(set(paths)) == len(GOOD)  # one decode call per video
    for _, indices in calls:
        assert indices == sorted(set(indices))  # the union of uniform and candidate frames, no repeats


def _head_opts(ckpt, head) -> BuildOptions:
    return _opts(ckpt, head_dir=str(head), batch_videos=2)


def _options_json(options: BuildOptions) -> str:
    """``options`` for tests/indexer/facade_child.py (and crash_build.py)."""
    from dataclasses import asdict

    return json.dumps({k: v for k, v in asdict(options).items() if v != getattr(BuildOptions(), k)})


CRASH_SCRIPT = Path(__file__).with_name("crash_build.py")


def test_build_code_has_no_crash_hook():
    """Faults are injected from tests (callbacks, monkeypatching, wrapper scripts), never by an
    environment variable that production code reads."""
    source = inspect.getsource(pipeline)
    assert "os._exit" not in source and "os.environ" not in source
    assert not hasattr(pipeline, "CRASH_ENV")
    assert "on_commit" in inspect.signature(pipeline.Builder.run).parameters


@pytest.mark.slow
def test_resume_after_crash_equals_uninterrupted(corpus, tiny_checkpoint, tiny_head, tmp_path):
    crashed = tmp_path / "crashed"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    options = _head_opts(tiny_checkpoint, tiny_head)
    proc = subprocess.run(
        [sys.executable, str(CRASH_SCRIPT), "2", "build", str(corpus), str(crashed), _options_json(options)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 99, proc.stderr[-2000:]
    # the crashed directory is a consistent, readable index of the two committed batches
    assert verify_index(crashed).ok
    with IndexReader(crashed) as r:
        partial = {v.id for v in r.videos(status=None)}
        assert len(partial) == 4 and r.manifest.counts["indexed"] + r.manifest.counts["failed"] == 4
    assert not build_index(corpus, crashed, options).stopped  # resume

    clean = tmp_path / "clean"
    assert not build_index(corpus, clean, options).stopped
    resumed_snap, clean_snap = _snapshot(crashed), _snapshot(clean)
    assert resumed_snap[1]["embedder"] == "qaslr" and resumed_snap[1]["num_think_tokens"] == 8
    assert set(resumed_snap[0]) == GOOD | BAD
    assert resumed_snap == clean_snap
    assert verify_index(crashed).ok


def test_add_remove_stable_ids_and_changes(tmp_path, video_factory, tiny_checkpoint):
    src = tmp_path / "src"
    video_factory(src / "a.mp4", num_frames=24, fps=12, seed=10)
    video_factory(src / "b.mp4", num_frames=36, fps=12, seed=11)
    index = tmp_path / "idx"
    assert not build_index(src, index, _opts(tiny_checkpoint)).stopped
    with IndexReader(index) as r:
        before = {v.id: (v.faiss_id, r.embedding(v.id).tobytes()) for v in r.videos()}

    more = tmp_path / "more"
    video_factory(more / "c.mp4", num_frames=30, fps=10, seed=12)
    shutil.copy(src / "a.mp4", more / "a.mp4")  # same id, same content: skipped
    added = add_to_index(more, index)
    assert not added.stopped
    assert "1 indexed, 1 skipped" in added.summary()
    with IndexReader(index) as r:
        assert set(before) <= {v.id for v in r.videos()} and r.video("c.mp4") is not None
        for vid, (fid, emb) in before.items():
            assert (r.video(vid).faiss_id, r.embedding(vid).tobytes()) == (fid, emb)
        assert r.video("c.mp4").faiss_id not in {f for f, _ in before.values()}

    # a changed file under the same id is re-indexed
    video_factory(more / "a.mp4", num_frames=40, fps=10, seed=99)
    assert not add_to_index(more, index).stopped
    with IndexReader(index) as r:
        assert r.video("a.mp4").num_frames == 40 and r.embedding("a.mp4").tobytes() != before["a.mp4"][1]
        assert len(r) == 3

    assert remove_from_index(index, ["b.mp4"]).unknown == []
    assert remove_from_index(index, ["nope"]).unknown == ["nope"]
    with IndexReader(index) as r:
        assert r.video("b.mp4") is None and len(r) == 2
        assert all(
            vid != "b.mp4" for vid, _ in r.search(np.frombuffer(before["b.mp4"][1], np.float32)[None], 5)[0]
        )
    assert verify_index(index).ok

    # ids and FAISS ids are stable across rebuilds from scratch
    rebuilt = tmp_path / "rebuilt"
    assert not build_index(src, rebuilt, _opts(tiny_checkpoint)).stopped
    with IndexReader(rebuilt) as r2:
        assert {v.id: v.faiss_id for v in r2.videos()} == {k: f for k, (f, _) in before.items()}


def test_mismatch_refused(sample_videos, tiny_checkpoint, tiny_head, tmp_path):
    from models.checkpoint import make_checkpoint

    index = tmp_path / "idx"
    assert not build_index(sample_videos, index, _opts(tiny_checkpoint)).stopped
    # resuming with other settings is refused, naming both sides
    with pytest.raises(IndexMismatchError) as exc:
        build_index(sample_videos, index, BuildOptions(model=str(tiny_checkpoint), frames=6, clip_len=L))
    assert "max_frames: index has 8, this build has 6" in str(exc.value)
    with pytest.raises(IndexMismatchError, match="head_fingerprint"):
        build_index(sample_videos, index, _opts(tiny_checkpoint, head_dir=str(tiny_head)))
    # adding with another backbone is refused
    other = make_checkpoint(tmp_path / "other", seed=1)
    with pytest.raises(IndexMismatchError, match="fingerprint"):
        add_to_index(sample_videos, index, BuildOptions(model=str(other)))
    with IndexReader(index) as r:
        with pytest.raises(IndexMismatchError):
            check_compatible(r.manifest, backbone_fingerprint="0" * 16, head_fingerprint="oneshot")
        assert len(r) == 4


def test_jsonl_manifest_source(tmp_path, video_factory, tiny_checkpoint, monkeypatch):
    video_factory(tmp_path / "media" / "x.mp4", num_frames=24, fps=12, seed=20)
    video_factory(tmp_path / "media" / "y.mp4", num_frames=24, fps=8, seed=21)
    lines = [
        {"id": "vid-x", "path": "media/x.mp4", "metadata": {"lang": "en", "year": 2020}},
        {"id": "vid-y", "path": str(tmp_path / "media" / "y.mp4"), "metadata": {"lang": "fr", "year": 2023}},
        {"id": "vid-z", "path": "media/missing.mp4"},
    ]
    manifest = tmp_path / "corpus.jsonl"
    manifest.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    monkeypatch.chdir(tmp_path)  # a relative manifest path: video paths resolve against its folder
    manifest = manifest.relative_to(tmp_path)
    index = tmp_path / "idx"
    assert not build_index(manifest, index, _opts(tiny_checkpoint)).stopped
    with IndexReader(index) as r:
        assert {v.id for v in r.videos()} == {"vid-x", "vid-y"}
        assert r.video("vid-z").status == "failed" and r.video("vid-z").error == "file not found"
        assert r.video("vid-x").metadata == {"lang": "en", "year": 2020}
        assert r.video("vid-x").path == str(tmp_path / "media" / "x.mp4")  # absolute, for stage 2
        assert r.filter_ids({"lang": "fr"}) == {"vid-y"}
        assert r.filter_ids({"year": {"gte": 2021}}) == {"vid-y"}

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "path": "x.mp4"}\nnot json\n{"id": "a", "path": "y.mp4"}\n{"path": 3}\n')
    with pytest.raises(SourceError) as exc:
        build_index(bad, tmp_path / "i2", _opts(tiny_checkpoint))
    err = str(exc.value)
    assert "line 2: not JSON" in err and "line 3: duplicate id 'a'" in err and "line 4" in err
    assert not (tmp_path / "i2").exists()


def test_matryoshka_embed_dim(sample_videos, tiny_checkpoint, tiny_head, tmp_path):
    index = tmp_path / "idx"
    assert not build_index(sample_videos, index, _opts(tiny_checkpoint, embed_dim=32)).stopped
    with IndexReader(index) as r:
        assert r.manifest.embed_dim == 32 and r.frame_bank("a.mp4").embeddings.shape[1] == 32
        assert np.linalg.norm(r.embedding("a.mp4")) == pytest.approx(1.0, abs=1e-5)
    # a 64-d head cannot serve a 32-d index
    with pytest.raises(ValueError) as exc:
        build_index(
            sample_videos, tmp_path / "j", _opts(tiny_checkpoint, head_dir=str(tiny_head), embed_dim=32)
        )
    assert "embeds to d=64" in str(exc.value)


@pytest.mark.slow
def test_kill_9_mid_build_then_resume(corpus, tiny_checkpoint, tmp_path):
    """A real SIGKILL at whatever point the build has reached after its second commit."""
    import signal
    import time

    killed = tmp_path / "killed"
    options = _opts(tiny_checkpoint, batch_videos=1)
    proc = subprocess.Popen(
        [sys.executable, str(FACADE_CHILD), "build", str(corpus), str(killed), _options_json(options)],
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if len(list((killed / "bank").glob("bank-*.npy"))) >= 2:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait(timeout=60)
    if proc.returncode != -signal.SIGKILL:
        pytest.skip(f"the build ended (status {proc.returncode}) before it could be killed")
    report = verify_index(killed)
    assert report.ok, report.errors
    assert not build_index(corpus, killed, options).stopped  # resume
    clean = tmp_path / "clean"
    assert not build_index(corpus, clean, options).stopped
    assert _snapshot(killed) == _snapshot(clean)
    assert verify_index(killed).ok


# -- the `indexer` command itself: its flags, output, messages and exit statuses --------------------


def test_cli_build_stats_verify_and_exit_statuses(corpus, tiny_checkpoint, tmp_path, capsys):
    index = tmp_path / "idx"
    assert main(["build", str(corpus), "--index", str(index), "--model", str(tiny_checkpoint), *COMMON]) == 0
    out = capsys.readouterr().out
    assert "6 indexed" in out and "4 failed" in out and "time: wall" in out
    assert main(["stats", "--index", str(index), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["indexed"] == 6 and stats["failed"] == 4 and stats["bank_frames"] > 0
    assert main(["verify", "--index", str(index), "--check-sources"]) == 0
    assert capsys.readouterr().out.startswith("OK")

    # a second run skips everything; --fail-on-error reflects the recorded failures
    args = ["build", str(corpus), "--index", str(index), "--model", str(tiny_checkpoint), *COMMON]
    assert main([*args, "--fail-on-error"]) == 1
    assert "0 indexed, 10 skipped" in capsys.readouterr().out
    # other settings than the index's: a usage error naming both sides
    assert main([*args[:6], "--frames", "6", "--clip-len", str(L), "--no-progress"]) == 2
    assert "max_frames: index has 8, this build has 6" in capsys.readouterr().err

    # verify notices damage
    bank_file = next((index / "bank").glob("*.npy"))
    bank_file.write_bytes(bank_file.read_bytes()[:100])
    assert main(["verify", "--index", str(index)]) == 1
    assert "frame bank" in capsys.readouterr().out


def test_usage_errors(tmp_path, tiny_checkpoint, sample_videos, capsys):
    assert (
        main(
            [
                "build",
                str(tmp_path / "nowhere"),
                "--index",
                str(tmp_path / "i"),
                "--model",
                str(tiny_checkpoint),
            ]
        )
        == 2
    )
    assert "neither a folder nor a JSONL manifest" in capsys.readouterr().err
    assert main(["build", str(sample_videos), "--index", str(tmp_path / "i"), "--embedder", "qaslr"]) == 2
    assert "--head" in capsys.readouterr().err
    assert main(["build", str(sample_videos), "--index", str(tmp_path / "i"), "--model", str(tmp_path)]) == 2
    assert "config.json" in capsys.readouterr().err
    assert main(["stats", "--index", str(tmp_path / "none")]) == 2
    assert main(["verify", "--index", str(tmp_path / "none")]) == 1
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    help_text = capsys.readouterr().out
    for flag in (
        "--frames",
        "--clip-len",
        "--head",
        "--embedder",
        "--workers",
        "--batch-videos",
        "--fail-on-error",
        "--faiss-factory",
    ):
        assert flag in help_text


def test_write_failure_keeps_committed_videos(sample_videos, tiny_checkpoint, tmp_path, monkeypatch, capsys):
    from indexer.store import IndexWriter

    real, calls = IndexWriter.commit, []

    def commit(self, entries):
        calls.append(len(entries))
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(self, entries)

    monkeypatch.setattr(IndexWriter, "commit", commit)
    index = tmp_path / "idx"
    args = [
        "build",
        str(sample_videos),
        "--index",
        str(index),
        "--model",
        str(tiny_checkpoint),
        "--batch-videos",
        "1",
    ]
    assert main([*args, *COMMON]) == 3
    assert "No space left on device" in capsys.readouterr().err
    with IndexReader(index) as r:
        assert len(r) == 2
    monkeypatch.setattr(IndexWriter, "commit", real)
    assert main([*args, *COMMON]) == 0
    assert "2 indexed, 2 skipped" in capsys.readouterr().out
    assert verify_index(index).ok


def test_a_head_that_cannot_embed_the_index_as_trained_is_refused_before_any_embedding(
    tiny_checkpoint, sample_videos, tmp_path
):
    """`indexer build --head` checks the head against the index's K, L and M (the clip plan it was
    trained with) and refuses a query-conditioned rerank head, naming the fix."""
    from core.errors import ConfigurationError
    from indexer.assembly import check_index_head
    from models.head import StreamingHeadConfig, create_head, save_head
    from models.selection import ClipPlan

    def head(name, **kw):
        config = StreamingHeadConfig(
            hidden_size=64, embed_dim=64, num_heads=4, num_think_tokens=8, max_evidence_tokens=32, **kw
        )
        return save_head(create_head(config, seed=0), tmp_path / name)

    other = head("other", clip_plan=ClipPlan(K, K, L * 2, 32))  # clips twice as long as this index's
    with pytest.raises(ConfigurationError, match=f"--clip-len {L * 2}") as refused:
        build_index(sample_videos, tmp_path / "a", _opts(tiny_checkpoint, head_dir=str(other)))
    assert "trained with the clip plan" in str(refused.value)
    assert not (tmp_path / "a" / "manifest.json").exists()  # nothing was written
    rerank = head("rerank", query_conditioning=True, clip_plan=ClipPlan(K, K, L, 32))
    with pytest.raises(ConfigurationError, match="QASLR_RERANK_HEAD"):
        build_index(sample_videos, tmp_path / "b", _opts(tiny_checkpoint, head_dir=str(rerank)))
    from models.head import load_head

    matching = load_head(head("matching", clip_plan=ClipPlan(K, K, L, 32)))
    check_index_head(matching, _opts(tiny_checkpoint, head_dir="x", max_evidence=32), temporal_patch=2)


def test_decoders_open_one_at_a_time(sample_videos):
    """decord's FFmpeg 4.1 fills a decoder's static tables unlocked the first time one opens (two
    threads at once can abort the process): an opening waits while another holds the lock, and
    decoding goes on as usual once it is free."""
    import threading

    from indexer import video

    path = sample_videos / "c.avi"
    opened = threading.Event()
    reader = threading.Thread(target=lambda: (video.probe_video(path), opened.set()))
    with video.DECODER_OPEN_LOCK:
        reader.start()
        assert not opened.wait(0.5)  # held here: the other thread cannot open a decoder
    assert opened.wait(30)
    reader.join()
    frames = video.decode_frames(path, [0, 5, 5], size=(64, 64))
    assert frames.shape == (3, 64, 64, 3) and (frames[1] == frames[2]).all()
