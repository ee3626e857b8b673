"""What users get on the first look (issue 41): bench_load and bench_quality measure cold beside warm
and say which. Which requests count as cold, and that each run records both, labelled; nothing timed
is asserted (numbers are results)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.coldness import cold_order, cold_share, touched


def _result(video: str, tier: str | None = "frame", moment: str | None = "relevance") -> dict:
    evidence = None if moment is None else {"moment": {"start_s": 1.0, "end_s": 2.0, "source": moment}}
    return {"video_id": video, "tier": tier, "evidence": evidence}


def test_an_answer_touched_the_videos_it_refined_or_re_encoded():
    answer = {
        "results": [
            _result("a", moment="refined"),  # its source frames read for the moment
            _result("b", tier="oneshot"),  # re-encoded by the heavy tier
            _result("c", tier="head", moment=None),
            _result("d"),  # the frame tier reads stored banks only
            _result("e", tier="time", moment="time"),
            _result("f", tier=None, moment=None),  # stage 1
        ]
    }
    assert touched(answer) == {"a", "b", "c"}
    assert touched(None) == set()  # a failed request read nothing we can see


def test_a_request_is_cold_when_nothing_sent_before_it_touched_its_targets():
    targets = [{"a"}, {"b"}, {"a", "c"}, {"d"}, {"c"}]
    assert cold_share(targets) == pytest.approx(3 / 5)  # the third meets a, the fifth c
    assert cold_share(targets, before={"d"}) == pytest.approx(2 / 5)  # the server's warm-up read d
    assert cold_share([{"x"}, set()]) == 1.0  # a request that read nothing found nothing warm
    assert math.isnan(cold_share([]))


def test_a_cold_level_takes_the_videos_in_turns():
    pairs = [("q1", "a"), ("q2", "a"), ("q3", "b"), ("q4", "c"), ("q5", "c"), ("q6", "c")]
    assert [q for q, _ in cold_order(pairs)] == ["q1", "q3", "q4", "q2", "q5", "q6"]
    assert cold_order([("x", None), ("y", None)]) == [("x", None), ("y", None)]  # no right video: as given


@pytest.mark.slow
def test_bench_load_measures_every_level_cold_and_warm(tmp_path):
    from benchmarks.bench_load import main

    out = tmp_path / "load.json"
    # the server with its backbone in one process: three servers start here, and this test is about the
    # levels, not the model processes (each of which loads torch and the backbone, some 4 s of a core)
    args = "--videos 2 --min-s 20 --max-s 30 --clients 1 2 --workloads cascade --servers batched-one-process".split()
    args += "--cascade-requests 4 --stage1-requests 2 --cap-s 30".split()
    assert main([*args, "--caches", "both", "--workdir", str(tmp_path / "work"), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["args"]["caches"] == "both"
    (res,) = data["results"].values()
    for key, caches in (("cold_levels", "cold"), ("levels", "warm")):
        assert [lv["clients"] for lv in res[key]] == [1, 2]
        for lv in res[key]:
            assert lv["caches"] == caches and 0.0 <= lv["cold_share"] <= 1.0
            assert "targets" not in lv and lv["statuses"] == {"200": 4}
    # warm: every query was sent once before the levels, so none of their requests is cold
    assert all(lv["cold_share"] == 0.0 for lv in res["levels"])
    # cold: 2 + 8 videos for 4 requests, each on a video no earlier one named (the warm-up's may be one)
    assert all(lv["cold_share"] >= 0.5 for lv in res["cold_levels"])
    rows = [(r["caches"], r["load"]) for r in data["rows"]]
    assert rows[:4] == [
        ("cold", "1 clients"),
        ("cold", "2 clients"),
        ("warm", "1 clients"),
        ("warm", "2 clients"),
    ]


@pytest.mark.slow
def test_bench_quality_measures_stage_1_and_the_default_cold_and_warm(tmp_path):
    from benchmarks.bench_quality import main

    out = tmp_path / "quality.json"
    args = "--seeds 0 --videos 2 --min-s 20 --max-s 30 --heavy 0 --shortlist 2 --time-head none".split()
    args += "--motion-pairs 0 --order-pairs 0 --count-pairs 0 --count3-pairs 0 --no-checkpoint-head".split()
    args += ["--model-processes", "0", "--workdir", str(tmp_path / "work")]  # 8 engines: none loads a copy
    assert main([*args, "--json", str(out)]) == 0
    modes = json.loads(out.read_text())["per_seed"]["0"]
    timed = {m for m, row in modes.items() if "cold_p50_ms" in row}
    assert timed == {"stage 1 (uniform single-round)", "cascade, the default"}
    for mode in timed:
        row = modes[mode]
        assert row["warm_p50_ms"] > 0 and row["cold_untouched"] == 1.0
        assert [len(v) for v in row["cold_warm_ms"].values()] == [2, 2]  # one cold and one warm a query
    assert main([*args, "--no-cold", "--json", str(out)]) == 0
    assert not any("cold_p50_ms" in row for row in json.loads(out.read_text())["per_seed"]["0"].values())
