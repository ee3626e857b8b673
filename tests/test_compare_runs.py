"""benchmarks/compare_runs.py: two benchmark runs agree when every computed value is identical,
whatever their timings."""

import json

from benchmarks.compare_runs import main


def _run(tmp_path, name, hit, latency):
    data = {
        "per_seed": {"0": {"frame tier": {"hit@1": hit, "miou": float("nan"), "latency_ms": latency,
                                           "stages_ms": {"frame": latency}}}},
        "environment": {"packages": {"torch": "2.14.1"}, "git": {"commit": "abc", "dirty": False}},
    }  # fmt: skip
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_runs_that_differ_only_in_timings_agree(tmp_path, capsys):
    assert main([_run(tmp_path, "a.json", 0.9, 10.0), _run(tmp_path, "b.json", 0.9, 99.0)]) == 0
    assert "2 of 2 values identical" in capsys.readouterr().out


def test_a_differing_quality_value_is_named_and_fails(tmp_path, capsys):
    assert main([_run(tmp_path, "a.json", 0.9, 10.0), _run(tmp_path, "b.json", 0.8, 10.0)]) == 1
    assert "0/frame tier/hit@1: 0.9 vs 0.8" in capsys.readouterr().out


def test_a_benchmark_records_no_local_paths_in_its_arguments():
    import argparse

    from benchmarks.provenance import recorded_args

    args = argparse.Namespace(
        workdir="/data/bench", json="/tmp/out.json", model="/models/tiny-world", seeds=[0, 1],
        rerank_head=["c30=/home/me/runs/c30", "plain"], conditioning=["none"],
    )  # fmt: skip
    assert recorded_args(args) == {
        "model": "tiny-world", "seeds": [0, 1], "rerank_head": ["c30=c30", "plain"], "conditioning": ["none"],
    }  # fmt: skip
