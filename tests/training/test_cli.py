"""`qaslr make-synthetic`, `qaslr train` (with resume and the gate) and `qaslr eval` as users run them."""

import json

import pytest

from qaslr.cli import main

FEATURE_ARGS = ["--max-frames", "8", "--clip-len", "2", "--evidence-tokens", "32"]


@pytest.mark.slow
def test_train_then_eval(synthetic_set, tiny_checkpoint, tmp_path, capsys):
    data = ["--data", str(synthetic_set / "train.jsonl"), "--cache", str(tmp_path / "cache")]
    common = ["--model", str(tiny_checkpoint), *FEATURE_ARGS, "--no-progress"]
    out = tmp_path / "run"
    train = ["train", *data, "--out", str(out), *common, "--think-tokens", "8", "--batch-size", "16"]
    assert main([*train, "--max-steps", "2", "--epochs", "3"]) == 0
    assert main([*train, "--max-steps", "4", "--epochs", "3", "--gate-epochs", "3"]) == 0  # resumes at step 2
    assert "trained 4 steps" in capsys.readouterr().out
    logged = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert logged.count(1) == 1  # the second run resumed at step 2 instead of starting over
    assert (out / "head" / "head.safetensors").is_file()
    assert json.loads((out / "train_args.json").read_text())["device"] == "cpu"  # auto, and no GPU here
    assert (out / "gate" / "gate.safetensors").is_file()
    capsys.readouterr()
    report = tmp_path / "eval.json"
    ev = ["eval", "--data", str(synthetic_set / "test.jsonl"), "--cache", str(tmp_path / "cache"), *common]
    code = main(
        [
            *ev,
            "--head",
            f"qaslr={out / 'head'}",
            "--checkpoints",
            "--controls",
            "--recall",
            "--json",
            str(report),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "| qaslr, reverse |" in text and "| 25% | 50% | 75% | Final | Mean H@1 |" in text
    metrics = json.loads(report.read_text())
    assert set(metrics) == {"qaslr", "qaslr, shuffle", "qaslr, reverse", "qaslr, reset", "qaslr, last"}
    assert 0.0 <= metrics["qaslr"]["metrics"][0]["retrieval"]["hit@1"] <= 1.0


def test_bad_input_is_a_clear_error(tmp_path, tiny_checkpoint, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "task": "retrieval", "query": "q"}\n')
    code = main(["train", "--data", str(bad), "--model", str(tiny_checkpoint), "--out", str(tmp_path / "o")])
    assert code == 2
    assert "bad.jsonl:1: missing 'positive'" in capsys.readouterr().out
    assert not (tmp_path / "o").exists()


def test_clip_teacher_and_corpora_options_refuse_what_cannot_work(
    tmp_path, synthetic_set, tiny_checkpoint, capsys
):
    data = str(synthetic_set / "train.jsonl")
    # L_clip weights clips by the query: it needs query-conditioned scoring
    code = main(["train", "--data", data, "--model", str(tiny_checkpoint), "--out", str(tmp_path / "o"),
                 "--lambda-clip", "1"])  # fmt: skip
    assert code == 2
    assert "--lambda-clip needs --scoring conditioned" in capsys.readouterr().out
    code = main(["make-synthetic", str(tmp_path / "r"), "--kind", "retrieval", "--corpora", "1", "-1", "0"])
    assert code == 2
    assert "corpora per split must be >= 0" in capsys.readouterr().out
    code = main(["make-synthetic", str(tmp_path / "r"), "--kind", "retrieval", "--corpora", "0", "0", "0"])
    assert code == 2
    assert "at least one split needs a corpus" in capsys.readouterr().out
    assert not (tmp_path / "r").exists()


def test_make_synthetic_refuses_count_pairs_that_cannot_fit(tmp_path, capsys):
    code = main(["make-synthetic", str(tmp_path / "r"), "--kind", "retrieval", "--max-duration", "20"])
    assert code == 2
    assert "count pairs need videos of at least 24 s" in capsys.readouterr().out
    code = main(["make-synthetic", str(tmp_path / "r"), "--kind", "retrieval", "--count-pairs", "33"])
    assert code == 2
    assert "count_pairs must be between 0 and 32" in capsys.readouterr().out
    args = ["--kind", "retrieval", "--max-duration", "30", "--count-pairs", "0", "--corpora", "0", "0", "0"]
    code = main(["make-synthetic", str(tmp_path / "r"), *args])
    assert "count pairs" not in capsys.readouterr().out  # 0 count pairs: short videos are fine
    assert not (tmp_path / "r").exists()


def test_train_takes_several_pair_files_and_prepares_their_cache_without_a_run(
    synthetic_set, tiny_checkpoint, tmp_path, capsys
):
    # the same file twice: without per-file id prefixes its ids would clash
    data = str(synthetic_set / "train.jsonl")
    common = ["--model", str(tiny_checkpoint), *FEATURE_ARGS, "--no-progress", "--think-tokens", "8"]
    # the cache first, as before several runs in parallel: no run directory needed for that
    code = main(
        ["train", "--data", data, data, "--cache", str(tmp_path / "cache"), "--prepare-only", *common]
    )
    assert code == 0, capsys.readouterr().out
    assert "feature cache ready" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
    code = main(["train", "--data", data, data, "--cache", str(tmp_path / "cache"), *common])
    assert code == 2
    assert "--out is required" in capsys.readouterr().out
    code = main(["train", "--data", data, data, "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "o"),
                 *common, "--max-steps", "1", "--epochs", "1"])  # fmt: skip
    assert code == 0, capsys.readouterr().out
    assert "trained 1 steps" in capsys.readouterr().out


def test_the_head_trains_on_cuda_when_available_unless_told(monkeypatch):
    import torch

    from qaslr.commands.train import head_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert head_device(None) == torch.device("cuda") and head_device("auto") == torch.device("cuda")
    assert head_device("cpu") == torch.device("cpu") and head_device("cuda:1") == torch.device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert head_device(None) == torch.device("cpu")


def test_make_synthetic_time_writes_order_count_and_single_families(tmp_path, capsys):
    from training.data import load_pairs

    out = tmp_path / "t"
    code = main(["make-synthetic", str(out), "--kind", "time", "--families", "1", "--val-families", "1"])
    assert code == 0, capsys.readouterr()
    for split in ("train", "val"):
        kinds = sorted(p.meta["kind"] for p in load_pairs(out / f"{split}.jsonl"))
        assert kinds == ["counted", "counted", "ordered", "ordered", "single"]
    assert main(["make-synthetic", str(out), "--kind", "time", "--families", "-1"]) == 2
    assert "must be >= 0" in capsys.readouterr().out
