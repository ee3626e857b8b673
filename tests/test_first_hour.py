"""The first hour on a fresh machine: the demo script's help needs no install, an offline machine
gets a fast, specific answer instead of minutes of hub retries, a model that does not fit an index
says which backbone the index needs, and benchmark JSON records where its numbers came from."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import pytest

from tests.helpers import ServerProcess, free_port

pytestmark = (
    pytest.mark.slow
)  # starts the indexer and the server in fresh processes, offline (about a minute)

ROOT = Path(__file__).resolve().parents[1]
HUB_ID = "Qwen/Qwen3-VL-Embedding-2B"


def _offline_env(tmp_path: Path, *, how: str) -> dict[str, str]:
    """No hub: HF_HUB_OFFLINE=1, or a hub endpoint on a loopback port nothing listens on."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("QASLR_", "HF_")) and "proxy" not in k.lower()
    }
    env.update(OMP_NUM_THREADS="1", HF_HOME=str(tmp_path / "hf"))  # an empty cache
    if how == "flag":
        env["HF_HUB_OFFLINE"] = "1"
    else:
        env["HF_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"
    return env


@pytest.fixture(scope="module")
def import_s() -> float:
    """Seconds a fresh interpreter takes to import torch, transformers and the backbone module here:
    the time bounds below are on top of it (on 2 loaded cores the imports alone can take a minute)."""
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", "import models.backbone, indexer.assembly"], check=True, timeout=300
    )
    return time.monotonic() - start


def _qaslr(*args: str) -> list[str]:
    return [sys.executable, "-m", "qaslr.cli", *args]


@pytest.mark.parametrize("how", ["flag", "unreachable"])
def test_indexer_build_without_model_fails_fast_offline(tmp_path, sample_videos, how, import_s):
    cmd = [sys.executable, "-m", "qaslr.commands.indexer", "build", str(sample_videos)]
    cmd += ["--index", str(tmp_path / "index"), "--no-progress"]
    start = time.monotonic()
    done = subprocess.run(
        cmd, env=_offline_env(tmp_path, how=how), capture_output=True, text=True, timeout=120
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 2, done.stderr[-2000:]
    assert "could not load backbone weights" in done.stderr and "offline" in done.stderr
    assert "--model DIR" in done.stderr and "tiny-world" in done.stderr
    assert elapsed < import_s + 30, (elapsed, import_s)  # the hub client's retries took minutes
    assert not (tmp_path / "index" / "manifest.json").exists()


@pytest.fixture(scope="module")
def built_index(tmp_path_factory, sample_videos, tiny_checkpoint) -> Path:
    from indexer import BuildOptions, build_index

    index = tmp_path_factory.mktemp("first_hour") / "index"
    options = BuildOptions(model=str(tiny_checkpoint), frames=8, clip_len=4, workers=1, frame_store="none")
    assert not build_index(sample_videos, index, options).stopped
    return index


@pytest.mark.parametrize("how", ["flag", "unreachable"])
def test_serve_offline_names_the_backbone_the_index_needs(tmp_path, built_index, how, import_s):
    index = shutil.copytree(built_index, tmp_path / "index")
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["backbone_id"] = HUB_ID  # built with the hub weights, which are not on this machine
    (index / "manifest.json").write_text(json.dumps(manifest))
    start = time.monotonic()
    done = subprocess.run(
        _qaslr("serve", "--index", str(index), "--port", str(free_port())),
        env=_offline_env(tmp_path, how=how),
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - start
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-2000:]
    assert "offline" in out and f"built with backbone {HUB_ID!r}" in out
    assert f"embed_dim {manifest['embed_dim']}" in out and "--model" in out
    assert elapsed < import_s + 30, (elapsed, import_s)


def test_serve_without_model_uses_the_backbone_the_index_records(tmp_path, built_index, tiny_checkpoint):
    recorded = json.loads((built_index / "manifest.json").read_text())["backbone_id"]
    assert Path(recorded) == Path(tiny_checkpoint)
    port = free_port()
    env = _offline_env(tmp_path, how="flag")
    with ServerProcess(_qaslr("serve", "--index", str(built_index), "--port", str(port)), env=env, port=port,
                       ready_timeout=120) as server:  # fmt: skip
        import httpx

        assert httpx.get(f"{server.url}/readyz", timeout=5).json()["random_weights"] is True
    assert "using the backbone the index was built with" in server.output


def test_model_that_does_not_fit_the_index_names_the_backbone_it_needs(
    built_index, tiny_checkpoint, tmp_path
):
    from indexer.assembly import load_model_for_index
    from indexer.store.format import IndexMismatchError, read_manifest
    from models.checkpoint import make_checkpoint

    manifest = read_manifest(built_index)
    wider = replace(manifest, backbone_id="tiny-world", embed_dim=manifest.hidden_size * 2)
    with pytest.raises(IndexMismatchError) as exc:
        load_model_for_index(wider, tiny_checkpoint, head_dir=None)
    msg = str(exc.value)
    assert "built with backbone 'tiny-world'" in msg and f"embed_dim {wider.embed_dim}" in msg
    assert f"only {manifest.hidden_size}" in msg and "--model tiny-world" in msg
    # another checkpoint of the same shape: the fingerprint differs
    other = make_checkpoint(tmp_path / "other", seed=1)
    with pytest.raises(IndexMismatchError) as exc:
        load_model_for_index(manifest, other, head_dir=None)
    msg = str(exc.value)
    assert manifest.backbone_fingerprint in msg and f"built with backbone {manifest.backbone_id!r}" in msg
    assert f"embed_dim {manifest.embed_dim}" in msg and "indexer build" in msg


def test_hub_probe(monkeypatch):
    from models.backbone import hub_reachable

    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_reachable() is False
    monkeypatch.delenv("HF_HUB_OFFLINE")
    import socket

    with socket.socket() as listener:  # a hub endpoint that answers on loopback
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
        assert hub_reachable() is True
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    assert hub_reachable() is False


def test_demo_script_help_needs_no_install(tmp_path):
    """`bash scripts/demo.sh --help` prints `qaslr demo --help` without creating a venv."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "demo.sh", tmp_path / "scripts" / "demo.sh")
    env = {**os.environ, "COLUMNS": "100"}
    expected = subprocess.run(
        _qaslr("demo", "--help"), env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    for flag in ("--help", "-h"):
        start = time.monotonic()
        done = subprocess.run(["bash", str(tmp_path / "scripts" / "demo.sh"), "--port", "1", flag],
                              env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert time.monotonic() - start < 10
        assert done.stdout == expected, (
            "scripts/demo.sh's help text is out of date: paste `COLUMNS=100 qaslr demo --help`"
        )
    assert not (tmp_path / ".venv").exists()


def test_benchmark_provenance():
    sys.path.insert(0, str(ROOT))
    from benchmarks.provenance import PACKAGES, environment

    env = environment()
    assert set(env) >= {"git", "python", "packages", "threads", "platform", "cpu_count"}
    assert set(env["packages"]) == set(PACKAGES) and {"torch", "transformers", "numpy", "av"} <= set(PACKAGES)
    for name, version in env["packages"].items():
        try:
            assert version == metadata.version(name)
        except metadata.PackageNotFoundError:
            assert version is None
    assert env["packages"]["torch"] is not None
    import torch

    assert env["threads"]["torch_num_threads"] == torch.get_num_threads()
    assert env["threads"]["OMP_NUM_THREADS"] == os.environ.get("OMP_NUM_THREADS")
    assert env["python"] == ".".join(map(str, sys.version_info[:3])) and env["cpu_count"] == os.cpu_count()
    if (ROOT / ".git").exists():
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
        assert env["git"]["commit"] == head.strip() and isinstance(env["git"]["dirty"], bool)
    json.dumps(env)  # it goes into the benchmarks' JSON as is
