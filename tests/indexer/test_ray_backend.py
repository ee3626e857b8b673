"""`indexer build --backend ray` on a real Ray cluster, compared with the local backend.

The cluster is two Ray nodes (a head and a second node process, one CPU each) on 127.0.0.1, inside a
network namespace that holds only loopback (``unshare -n``): Ray advertises the machine's own
address otherwise, and tests talk to loopback only. Everything Ray runs (head, node, the `indexer`
driver) lives in that namespace; this test process watches from outside (it shares the process and
file views) and kills the embedding actor's process after the first commit, so the build must
survive a worker dying mid-build without losing or duplicating a video.

Ray is an optional extra: without it the test skips, unless ``QASLR_REQUIRE_RAY=1``
(``scripts/test.sh``, hence CI) makes it required, as is a namespace that cannot be made.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from indexer import BuildOptions, build_index
from indexer.maintenance import verify_index
from indexer.store import IndexReader
from qaslr.commands.indexer import main
from tests.indexer.test_build import BAD, GOOD, _snapshot, write_corpus

REQUIRED = os.environ.get("QASLR_REQUIRE_RAY") == "1"
ARGS = ["--frames", "8", "--clip-len", "4", "--batch-videos", "1", "--no-progress"]
FACADE_CHILD = Path(__file__).with_name("facade_child.py")
ACTOR = "EmbedBatches"  # the embedding actor's class: Ray names its worker process after it


def _unavailable(reason: str):
    if REQUIRED:
        pytest.fail(f"{reason} (QASLR_REQUIRE_RAY=1: the Ray backend test must run)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def ray_bin() -> Path:
    try:
        import ray.data  # noqa: F401
    except ImportError:
        _unavailable("ray[data] is not installed (pip install .[ray])")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        _unavailable(f"cannot make a loopback-only network namespace: {probe.stderr.strip()}")
    return Path(sys.executable).parent / "ray"


def _actor_pids() -> set[int]:
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(b"ray::") and ACTOR.encode() in cmdline:
            pids.add(int(proc.name))
    return pids


def _cluster_script(ray: Path, port: int, temp: str, builds: list[list[str]]) -> str:
    """bash: start a head and a second node (each with --block, so stopping them by pid stops what
    they started), wait for both, run each build (tests/indexer/facade_child.py arguments), stop both
    nodes; exit with the first build's status."""
    q = lambda args: " ".join(f"'{a}'" for a in args)  # noqa: E731 - test paths have no quotes
    py = sys.executable
    wait_nodes = (
        "import ray, time\n"
        f"ray.init(address='127.0.0.1:{port}', logging_level='ERROR')\n"
        "deadline = time.monotonic() + 120\n"
        "while sum(n['Alive'] for n in ray.nodes()) < 2 and time.monotonic() < deadline: time.sleep(0.5)\n"
    )
    common = "--num-cpus 1 --disable-usage-stats --block"
    lines = [
        "set -u",
        "ip link set lo up",
        f"'{ray}' start --head --port {port} --include-dashboard false --temp-dir '{temp}' {common} "
        f">'{temp}/head.log' 2>&1 & head=$!",
        "trap 'kill $node $head 2>/dev/null; wait' EXIT",
        f"sleep 2; '{ray}' start --address 127.0.0.1:{port} {common} >'{temp}/node.log' 2>&1 & node=$!",
        f'{py} -c "{wait_nodes}" || exit 90',
    ]
    for i, cmd in enumerate(builds):
        lines.append(f"{py} '{FACADE_CHILD}' {q(cmd)}; rc{i}=$?")
    lines.append("exit $rc0")
    return "\n".join(lines)


def _records(directory: Path) -> dict:
    """test_build's snapshot, with embeddings and frame banks as arrays (compared within tolerance)."""
    videos, manifest, _ = _snapshot(directory)
    for item in videos.values():
        if item["status"] == "indexed":
            item["embedding"] = np.frombuffer(item["embedding"], dtype=np.float32)
            item["bank"] = np.frombuffer(item["bank"], dtype=np.float16).astype(np.float32)
    return {"videos": videos, "manifest": manifest}


@pytest.mark.slow
def test_ray_cluster_build_equals_local_and_survives_a_killed_worker(
    ray_bin, tmp_path_factory, video_factory, tiny_checkpoint, tmp_path
):
    corpus = write_corpus(tmp_path_factory.mktemp("ray_corpus"), video_factory)
    local, distributed = tmp_path / "local", tmp_path / "ray"
    options = BuildOptions(model=str(tiny_checkpoint), frames=8, clip_len=4, batch_videos=1)
    assert not build_index(corpus, local, options).stopped

    temp = tempfile.mkdtemp(prefix="qray")  # short: Ray's socket paths must fit in 107 bytes
    port = 20000 + os.getpid() % 20000
    ray_options = {"model": str(tiny_checkpoint), "frames": 8, "clip_len": 4, "batch_videos": 1}
    ray_options.update(backend="ray", ray_address=f"127.0.0.1:{port}")
    build = ["build", str(corpus), str(distributed), json.dumps(ray_options)]
    script = _cluster_script(ray_bin, port, temp, [build, build])  # the second run must skip everything
    log = tmp_path / "cluster.log"
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["unshare", "-n", "bash", "-c", script],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, OMP_NUM_THREADS="1", RAY_AUTH_MODE="disabled"),
                start_new_session=True,
            )
            killed, deadline = None, time.monotonic() + 600
            while proc.poll() is None and time.monotonic() < deadline:
                if killed is None and any((distributed / "bank").glob("bank-*.npy")):  # a commit
                    actors = _actor_pids()
                    if actors:
                        killed = min(actors)
                        committed_at_kill = len(list((distributed / "bank").glob("bank-*.npy")))
                        os.kill(killed, signal.SIGKILL)
                time.sleep(0.05)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=120)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    output = log.read_text(errors="replace")
    assert proc.returncode == 0, output[-4000:]
    assert killed is not None, (
        "the build ended before its embedding actor could be killed:\n" + output[-2000:]
    )
    assert committed_at_kill < len(list((local / "bank").glob("bank-*.npy")))  # mid-build
    assert "Ray cluster: 2 node(s), 2 CPU(s)" in output
    # the dead actor was replaced and finished the work; the second run found everything done
    assert "6 indexed, 0 skipped" in output and "4 failed" in output
    assert "0 indexed, 10 skipped" in output

    report = verify_index(distributed)
    assert report.ok, report.errors
    want, got = _records(local), _records(distributed)
    assert got["manifest"] == want["manifest"]
    assert set(got["videos"]) == GOOD | BAD == set(want["videos"])
    for vid, w in want["videos"].items():
        g = got["videos"][vid]
        for key in ("faiss_id", "status", "error", "num_frames", "bank_indices"):
            assert g.get(key) == w.get(key), (vid, key)
        if w["status"] == "indexed":
            np.testing.assert_allclose(g["embedding"], w["embedding"], atol=1e-5)
            np.testing.assert_allclose(g["bank"], w["bank"], atol=2e-3)
    # no video twice: one row per id, one FAISS vector per indexed video, one bank file per commit
    with IndexReader(distributed) as r:
        assert r.manifest.counts == {"indexed": len(GOOD), "failed": len(BAD)}
    assert sorted(p.name for p in (distributed / "bank").iterdir()) == sorted(
        p.name for p in (local / "bank").iterdir()
    )


@pytest.mark.slow
def test_local_build_never_imports_ray(tmp_path, tiny_checkpoint, sample_videos):
    code = (
        "import sys\n"
        "from indexer import BuildOptions, build_index\n"
        f"options = BuildOptions(model={str(tiny_checkpoint)!r}, frames=8, clip_len=4)\n"
        f"assert not build_index({str(sample_videos)!r}, {str(tmp_path / 'idx')!r}, options).stopped\n"
        "assert 'ray' not in sys.modules, 'a local build imported ray'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_batches_reach_the_writer_once_each_in_plan_order():
    """Rows of a Ray job can come out of order, or twice (a retried task whose first result also got
    through): the driver hands each planned batch to the writer once, in plan order; a batch that
    never comes is an error, not a silent gap."""
    import pickle

    from indexer.distributed import in_plan_order
    from indexer.pipeline import BatchResult, BuildStats

    def row(i):
        return {"batch": i, "result": pickle.dumps(BatchResult([], BuildStats(indexed=i), frames=i))}

    arrived = [row(i) for i in (2, 0, 0, 1, 2, 4, 3, 1)]
    assert [r.frames for r in in_plan_order(arrived, 5)] == [0, 1, 2, 3, 4]
    with pytest.raises(RuntimeError, match="batch 1 of 3 missing"):
        list(in_plan_order([row(0), row(2)], 3))


# -- the `indexer` command itself: --backend ray flags, messages and exit statuses -----------------


def test_ray_backend_without_ray_is_a_usage_error(
    tmp_path, tiny_checkpoint, sample_videos, capsys, monkeypatch
):
    """Where Ray is missing, --backend ray says how to install it, exits 2 and writes no video."""
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    index = tmp_path / "idx"
    code = main(["build", str(sample_videos), "--index", str(index), "--model", str(tiny_checkpoint), *ARGS,
                 "--backend", "ray", "--log-level", "WARNING"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "pip install" in err and "[ray]" in err
    with IndexReader(index) as r:
        assert len(r) == 0


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--address", "127.0.0.1:6390"], "need --backend ray"),
        (["--backend", "ray", "--ray-embedders", "0"], "--ray-embedders must be at least 1"),
        (["--backend", "ray", "--ray-gpus-per-embedder", "-1"], "--ray-gpus-per-embedder must be 0 or more"),
    ],
)
def test_ray_flags_are_checked_before_anything_runs(flags, message, tmp_path, sample_videos, capsys):
    index = tmp_path / "idx"
    assert main(["build", str(sample_videos), "--index", str(index), *ARGS, *flags]) == 2
    assert message in capsys.readouterr().err
    assert not index.exists()
