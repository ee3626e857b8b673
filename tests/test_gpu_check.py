"""benchmarks/gpu_check.sh, the GPU machine's check, run the CI way: tiny (GPU_CHECK_TINY=1) on the CPU.
The helper runs in this process (the interpreter's imports are most of a fresh run's time here); the
shell wrapper is checked for what it hands the helper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # renders, indexes and searches in every mode (about 20 s)

ROOT = Path(__file__).resolve().parents[1]
MODES = ("indexed", "frames", "oneshot_all_r", "streaming_all_r", "cascade")


def test_the_tiny_gpu_check_runs_every_mode_on_the_cpu_and_writes_one_report(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    out = tmp_path / "report" / "gpu_check.json"
    assert gpu_check.main(["--tiny", "--out", str(out), "--workdir", str(tmp_path / "work")]) == 0
    report = json.loads(out.read_text())
    env = report["environment"]
    for key in ("python", "torch", "transformers", "faiss", "device", "device_name", "attn_implementation"):
        assert env[key] not in (None, ""), key
    assert env["device"] == "cpu" and env["attn_implementation"] == "sdpa" and env["faiss_gpus"] == 0
    assert report["settings"]["preset"] == "tiny"
    indexing = report["indexing"]
    assert indexing["videos"] == 6 and indexing["videos_per_s"] > 0 and indexing["frames_per_s"] > 0
    assert list(report["latency"]) == list(MODES)
    shortlist = report["settings"]["shortlist"]
    for name, row in report["latency"].items():
        assert row["queries"] == 1 and row["latency_s_median"] > 0, name
        assert row["hits"] == shortlist, name
        assert row["paper_h100_s"] == gpu_check.PAPER_H100_S[name]
        assert row["timings_ms_median"]["total"] > 0
        assert row["peak_gpu_gib"] is None  # no GPU here
    assert report["latency"]["indexed"]["request"]["mode"] == "indexed"
    assert report["latency"]["oneshot_all_r"]["request"]["heavy"] == shortlist
    # stage 2 ran its heavy tier: one-shot, then the streaming rerank head
    assert (
        report["latency"]["oneshot_all_r"]["rerank_embedder"]
        != report["latency"]["streaming_all_r"]["rerank_embedder"]
    )
    assert report["latency"]["oneshot_all_r"]["timings_ms_median"].get("encode", 0) > 0
    assert report["latency"]["indexed"]["timings_ms_median"].get("encode", 0) == 0
    assert report["engine"]["oneshot"]["clip_batch_size"] == 8  # "auto" on the CPU
    assert report["total_s"] > 0 and report["complete"] is True


def test_the_shell_wrapper_hands_the_helper_tiny_out_and_workdir(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(
        '#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$ARGS_OUT"\necho "PYTHONPATH=$PYTHONPATH" >> "$ARGS_OUT"\n'
    )
    fake.chmod(0o755)
    env = {
        **os.environ, "PYTHON": str(fake), "ARGS_OUT": str(tmp_path / "args"), "GPU_CHECK_TINY": "1",
        "GPU_CHECK_WORKDIR": str(tmp_path / "w"),
    }  # fmt: skip
    subprocess.run(["bash", str(ROOT / "benchmarks/gpu_check.sh"), "r.json"], env=env, check=True, timeout=30)
    lines = (tmp_path / "args").read_text().splitlines()
    assert lines[:3] == ["benchmarks/gpu_check.py", "--out", "r.json"]
    assert "--tiny" in lines and lines[lines.index("--workdir") + 1] == str(tmp_path / "w")
    assert lines[-1].startswith(f"PYTHONPATH={ROOT}")
    env.pop("GPU_CHECK_TINY")
    subprocess.run(["bash", str(ROOT / "benchmarks/gpu_check.sh")], env=env, check=True, timeout=30)
    lines = (tmp_path / "args").read_text().splitlines()
    assert "--tiny" not in lines and lines[1:3] == ["--out", "gpu_check.json"]
