"""Faults during builds: the disk fills, SIGTERM, and corrupted files.

- The disk fills (a real ENOSPC: a small tmpfs in a private mount namespace, filled to the last
  byte mid-build by tests/indexer/disk_full.py): exit status 3 with a one-line reason and no
  traceback, every committed video kept, and the same command resumes to the same index as an
  uninterrupted build.
- SIGTERM mid-build: the batch in hand is committed, exit status 143, and the same command resumes.
- A corrupted FAISS file or SQLite page: `indexer verify` names the file (the API side is in
  tests/service/test_faults.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from indexer import BuildOptions, build_index
from indexer.maintenance import verify_index
from indexer.store import IndexReader
from qaslr.commands.indexer import main
from tests.indexer.test_build import BAD, GOOD, _snapshot, write_corpus

ROOT = Path(__file__).resolve().parents[2]
COMMON = ["--frames", "8", "--clip-len", "4", "--no-progress", "--log-level", "WARNING"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, video_factory):
    """The same good and broken videos as tests/indexer/test_build.py."""
    return write_corpus(tmp_path_factory.mktemp("corpus"), video_factory)


@pytest.fixture(scope="module")
def clean(tmp_path_factory, corpus, tiny_checkpoint):
    """An uninterrupted build of the corpus, one video per batch."""
    index = tmp_path_factory.mktemp("clean") / "idx"
    assert not build_index(corpus, index, _options(tiny_checkpoint)).stopped
    return index


def _options(ckpt) -> BuildOptions:
    """What COMMON and --batch-videos 1 say, as the facade's options."""
    return BuildOptions(model=str(ckpt), frames=8, clip_len=4, batch_videos=1)


def _corrupt_sqlite_page(path: Path, page: int) -> None:
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[16:18], "big") or 65536
    start = (page - 1) * size
    assert start + size <= len(data), "the database has fewer pages"
    data[start : start + size] = bytes([0xA5]) * size
    path.write_bytes(bytes(data))


def test_verify_names_a_corrupted_faiss_file_and_sqlite_page(clean, tmp_path, capsys):
    faiss_broken = shutil.copytree(clean, tmp_path / "faiss")
    data = (faiss_broken / "index.faiss").read_bytes()
    (faiss_broken / "index.faiss").write_bytes(data[: len(data) // 2])  # torn write
    report = verify_index(faiss_broken)
    assert not report.ok and any("index.faiss" in e for e in report.errors), report.errors
    capsys.readouterr()
    assert main(["verify", "--index", str(faiss_broken)]) == 1
    assert "index.faiss" in capsys.readouterr().out

    sqlite_broken = shutil.copytree(clean, tmp_path / "sqlite")
    _corrupt_sqlite_page(sqlite_broken / "meta.sqlite", page=2)
    report = verify_index(sqlite_broken)
    assert not report.ok and any("meta.sqlite" in e for e in report.errors), report.errors
    assert main(["verify", "--index", str(sqlite_broken)]) == 1
    assert "meta.sqlite" in capsys.readouterr().out
    # the reader refuses both with an IndexFormatError naming the file, never a crash
    from indexer.store import IndexFormatError

    for broken, name in ((faiss_broken, "index.faiss"), (sqlite_broken, "meta.sqlite")):
        with pytest.raises(IndexFormatError, match=name.replace(".", r"\.")):
            IndexReader(broken)


# -- the `indexer` command's process: exit statuses 3 and 143, one-line reasons, then resume --------


def _can_mount_tmpfs(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe}"],
        capture_output=True,
        timeout=30,
    )
    return done.returncode == 0


@pytest.mark.slow
@pytest.mark.root
def test_disk_full_mid_build_exits_3_keeps_commits_and_resumes(corpus, clean, tiny_checkpoint, tmp_path):
    if shutil.which("unshare") is None or not _can_mount_tmpfs(tmp_path):
        pytest.skip("needs `unshare -m` and tmpfs mounts (root); the simulated ENOSPC test still runs")
    mount, out = tmp_path / "mnt", tmp_path / "out"
    mount.mkdir()
    build = ["build", str(corpus), "--model", str(tiny_checkpoint), "--batch-videos", "1", *COMMON]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    script = ROOT / "tests" / "indexer" / "disk_full.py"
    done = subprocess.run(
        ["unshare", "-m", sys.executable, str(script), str(mount), str(out), *build],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    print(json.dumps({k: v for k, v in report.items() if not k.endswith(("out", "stderr", "stdout"))}))
    # a clean stop with status 3 and a one-line reason
    assert report["first_status"] == 3, report
    assert "No space left on device" in report["first_stderr"] or "disk is full" in report["first_stderr"]
    assert "Traceback" not in report["first_stderr"], report["first_stderr"]
    assert report["ballast_bytes"] > 0
    # what was committed before the disk filled is a consistent index, and it is all still there
    assert report["verify_after_full"] == 0, report["verify_after_full_out"]
    with IndexReader(out / "after_full") as r:
        kept = {v.id for v in r.videos(status=None)}
    assert len(kept) >= report["committed_batches_before_full"] >= 2
    # the next run resumes to exactly the index an uninterrupted build writes
    assert report["resume_status"] == 0, report["resume_stderr"]
    assert report["verify_after_resume"] == 0, report["verify_after_resume_out"]
    assert f"{len(kept)} skipped" in report["resume_stdout"]
    resumed = _snapshot(out / "resumed")
    assert set(resumed[0]) == GOOD | BAD
    assert resumed == _snapshot(clean)


@pytest.mark.slow
def test_sigterm_mid_build_stops_cleanly_and_resumes(corpus, clean, tiny_checkpoint, tmp_path):
    index = tmp_path / "idx"
    cmd = [
        "build",
        str(corpus),
        "--index",
        str(index),
        "--model",
        str(tiny_checkpoint),
        "--batch-videos",
        "1",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "qaslr.commands.indexer", *cmd, *COMMON],
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    sent = False
    while proc.poll() is None and time.monotonic() < deadline:
        if len(list((index / "bank").glob("bank-*.npy"))) >= 2:
            proc.send_signal(signal.SIGTERM)
            sent = True
            break
        time.sleep(0.005)
    stdout, stderr = proc.communicate(timeout=120)
    if not sent:
        pytest.skip(f"the build ended (status {proc.returncode}) before SIGTERM could be sent")
    assert proc.returncode == 143, stderr[-2000:]
    assert "run the same command again to resume" in stderr and "Traceback" not in stderr
    report = verify_index(index)
    assert report.ok and report.warnings == [], (
        report.errors,
        report.warnings,
    )  # a clean stop: nothing to repair
    with IndexReader(index) as r:
        stopped_with = len(r.videos(status=None))
    assert 2 <= stopped_with < len(GOOD | BAD)
    assert not build_index(corpus, index, _options(tiny_checkpoint)).stopped  # resume
    assert _snapshot(index) == _snapshot(clean)
