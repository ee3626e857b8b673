"""Defects a review found, each pinned by a test that failed before its fix."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from indexer import BuildOptions, build_index
from indexer.maintenance import verify_index
from indexer.store import IndexReader
from qaslr.commands.indexer import main

ROOT = Path(__file__).resolve().parents[2]
COMMON = ["--frames", "8", "--clip-len", "4", "--no-progress", "--log-level", "WARNING"]


def _build(source, index, ckpt, **kw) -> None:
    assert not build_index(source, index, BuildOptions(model=str(ckpt), frames=8, clip_len=4, **kw)).stopped


class _Silent(RuntimeError):
    """An exception whose message is empty, as some decoders and FAISS raise."""

    def __str__(self) -> str:
        return ""


def test_summarize_handles_empty_and_noisy_messages():
    from core.errors import describe, summarize

    assert summarize(RuntimeError("")) == "RuntimeError"
    assert summarize(RuntimeError("\n  \n")) == "RuntimeError"
    assert summarize(_Silent()) == "_Silent"
    assert summarize(ValueError("\nsecond line\nthird")) == "second line"
    assert summarize(RuntimeError("[07:32:08] /src/video/video_reader.cc:151: bad frame")) == "bad frame"
    assert describe(RuntimeError("")) == "RuntimeError" and describe(OSError("x")) == "OSError: x"


def test_no_unguarded_first_line_of_a_message_anywhere():
    """`str(exc).splitlines()[0]` raises IndexError on an empty message: core.errors.summarize is the
    one helper that summarises exceptions."""
    pattern = re.compile(r"splitlines\(\)\[0\]")
    offenders = []
    for path in ROOT.rglob("*.py"):
        if ".venv" in path.parts or "tests" in path.parts:
            continue
        if pattern.search(path.read_text(encoding="utf-8")):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


@pytest.fixture
def small_index(tmp_path, sample_videos, tiny_checkpoint):
    index = tmp_path / "idx"
    _build(sample_videos, index, tiny_checkpoint)
    return index


def test_verify_survives_a_faiss_error_without_a_message(small_index, monkeypatch, capsys):
    import faiss

    def broken(*args, **kwargs):
        raise _Silent()

    monkeypatch.setattr(faiss, "read_index", broken)
    report = verify_index(small_index)
    assert not report.ok and any("index.faiss" in e for e in report.errors), report.errors
    capsys.readouterr()
    assert main(["verify", "--index", str(small_index)]) == 1
    assert "index.faiss" in capsys.readouterr().out


def test_build_records_decoder_errors_without_a_message(
    sample_videos, tiny_checkpoint, tmp_path, monkeypatch
):
    import decord

    def broken(*args, **kwargs):
        raise _Silent()

    monkeypatch.setattr(decord, "VideoReader", broken)
    index = tmp_path / "idx"
    _build(sample_videos, index, tiny_checkpoint)
    with IndexReader(index) as r:
        failed = r.videos(status="failed")
        assert len(failed) == 4 and {v.error for v in failed} == {"cannot open as video: _Silent"}


def test_docs_stand_on_their_own():
    """No reference to documents outside the repository; docs/architecture.md is the reference."""
    out = subprocess.run(
        ["git", "grep", "-n", "-I", "-E", r"DESIGN\.md|NOTES\.md|\.\./shared|shared NOTES"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    hits = [line for line in out.stdout.splitlines() if not line.startswith("tests/indexer/test_defects.py")]
    assert hits == []
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for heading in (
        "The index directory",
        "Building an index",
        "Searching",
        "Settings",
        "Module map",
        "Errors and exit codes",
    ):
        assert f"## {heading}" in doc, heading


def test_atomic_write_replaces_durably(tmp_path, monkeypatch):
    import os

    from core import files

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(files.os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    target = tmp_path / "f.json"
    target.write_text("old")
    files.atomic_write(target, "new")
    assert target.read_text() == "new" and len(synced) == 2  # the file, then its directory
    with pytest.raises(RuntimeError), files.atomic_open(target, "w") as f:
        f.write("half")
        raise RuntimeError("crash mid-write")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["f.json"]


# -- the `indexer` command itself: argument validation ---------------------------------------------


def test_add_checks_numbers_like_build(
    sample_videos, tiny_checkpoint, tiny_head, tmp_path, video_factory, capsys
):
    """`indexer add --clip-batch 0` on a QASLR index used to record every new video as failed."""
    index = tmp_path / "idx"
    first = tmp_path / "first"
    video_factory(first / "first.mp4", num_frames=24, fps=12, seed=1)
    _build(first, index, tiny_checkpoint, head_dir=str(tiny_head))
    for flag in ("--clip-batch", "--batch-videos", "--image-batch", "--workers"):
        add = ["add", str(sample_videos), "--index", str(index), "--head", str(tiny_head), flag, "0"]
        assert main([*add, "--no-progress"]) == 2, flag
        assert f"{flag} must be at least 1" in capsys.readouterr().err
    with IndexReader(index) as r:
        assert {v.id for v in r.videos(status=None)} == {"first.mp4"}  # nothing recorded as failed
    assert (
        main(["add", str(sample_videos), "--index", str(index), "--head", str(tiny_head), "--no-progress"])
        == 0
    )
    with IndexReader(index) as r:
        assert len(r) == 5 and r.videos(status="failed") == []
