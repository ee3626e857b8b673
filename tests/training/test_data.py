import json
from pathlib import Path

import numpy as np
import pytest

from training.data import (
    DataError,
    Pair,
    Side,
    VideoRef,
    combine_pair_sets,
    load_pairs,
    pair_from_dict,
    write_pairs,
)


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _video(tmp_path, name="v.mp4"):
    (tmp_path / name).write_bytes(b"x")  # existence is all load_pairs checks
    return name


def test_every_task_round_trips(tmp_path):
    v = _video(tmp_path)
    rows = [
        {
            "id": 1,
            "task": "retrieval",
            "query": {"text": "a red square"},
            "positive": {"video": {"path": v}},
            "group": "g",
        },
        {
            "id": "m",
            "task": "moment",
            "query": "a red square",
            "positive": {"video": {"path": v, "start_s": 2, "end_s": 4.5}},
            "candidates": [
                {"video": {"path": v, "start_s": 0, "end_s": 2}},
                {"video": {"path": v, "start_s": 2, "end_s": 4.5}},
            ],
        },
        {
            "id": "c",
            "task": "classification",
            "query": {"video": v},
            "positive": {"text": "cat"},
            "candidates": ["dog", "cat"],
        },
        {
            "id": "q",
            "task": "qa",
            "query": {"video": {"path": v, "frames": [0, 5, 9]}, "text": "What colour?"},
            "positive": {"text": "red"},
            "candidates": [{"text": "red"}, {"text": "blue"}],
        },
    ]
    pairs = load_pairs(_write(tmp_path / "p.jsonl", rows))
    assert [p.task for p in pairs] == ["retrieval", "moment", "classification", "qa"]
    assert pairs[0].query.kind == "text" and pairs[0].positive.kind == "video"
    assert pairs[0].positive.video.path == str(tmp_path / v)  # relative to the JSONL file
    assert pairs[1].positive.video.start_s == 2.0 and pairs[1].target_index == 1
    assert pairs[3].query.kind == "video+text" and pairs[3].query.video.frames == (0, 5, 9)
    assert pairs[3].input_format == "qa:video+text->text"
    out = write_pairs(tmp_path / "sub" / "again.jsonl", pairs)
    assert load_pairs(out) == pairs


@pytest.mark.parametrize(
    "row, message",
    [
        ({"id": 1, "task": "search", "query": "q", "positive": "p"}, "'task' must be one of"),
        ({"id": 1, "task": "retrieval", "query": "q"}, "missing 'positive'"),
        ({"id": 1, "task": "retrieval", "query": "q", "positive": "p"}, "positive must be video"),
        (
            {
                "id": 1,
                "task": "classification",
                "query": {"video": "v.mp4"},
                "positive": "a",
                "candidates": ["b", "c"],
            },
            "must contain the positive",
        ),
        (
            {
                "id": 1,
                "task": "retrieval",
                "query": "q",
                "positive": {"video": {"path": "v.mp4", "start_s": 5, "end_s": 3}},
            },
            "end_s",
        ),
        (
            {"id": 1, "task": "qa", "query": {"video": {"path": "v.mp4", "frames": [3, 1]}}, "positive": "a"},
            "strictly increasing",
        ),
        (
            {"id": 1, "task": "retrieval", "query": {"txt": "q"}, "positive": {"video": "v.mp4"}},
            "unknown fields",
        ),
    ],
)
def test_bad_rows_name_the_problem(tmp_path, row, message):
    _video(tmp_path)
    path = _write(tmp_path / "p.jsonl", [row])
    with pytest.raises(DataError, match=message) as info:
        load_pairs(path)
    assert "p.jsonl:1" in str(info.value)


def test_duplicate_ids_bad_json_and_missing_videos(tmp_path):
    v = _video(tmp_path)
    row = {"id": "a", "task": "retrieval", "query": "q", "positive": {"video": v}}
    with pytest.raises(DataError, match="duplicate id"):
        load_pairs(_write(tmp_path / "d.jsonl", [row, row]))
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(DataError, match="bad.jsonl:1: invalid JSON"):
        load_pairs(tmp_path / "bad.jsonl")
    missing = dict(row, positive={"video": "nope.mp4"})
    with pytest.raises(DataError, match="not found"):
        load_pairs(_write(tmp_path / "m.jsonl", [missing]))
    assert load_pairs(tmp_path / "m.jsonl", check_files=False)[0].positive.video.path.endswith("nope.mp4")


def test_keys_distinguish_windows_and_conditioning():
    a = Side(video=VideoRef("/x.mp4"))
    b = Side(video=VideoRef("/x.mp4", start_s=0.0, end_s=2.0))
    c = Side(video=VideoRef("/x.mp4"), text="question?")
    assert len({a.key(), b.key(), c.key(), Side(text="/x.mp4").key()}) == 4
    pair = pair_from_dict({"id": 1, "task": "retrieval", "query": "q", "positive": {"video": "/x.mp4"}})
    assert isinstance(pair, Pair) and pair.target_index == -1


def test_sets_from_separate_files_combine_without_clashing_ids_or_groups(tmp_path):
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    sets = []
    for d in (a_dir, b_dir):  # two make-synthetic runs: the same ids and group names, other videos
        d.mkdir()
        v = _video(d)
        row = {"id": "tr0-001-ret", "task": "retrieval", "query": "q", "positive": {"video": v}}
        sets.append(
            load_pairs(_write(d / "train.jsonl", [dict(row, group="train-0/tr0-001"), dict(row, id="x")]))
        )
    combined = combine_pair_sets(sets)
    assert [p.id for p in combined] == ["0:tr0-001-ret", "0:x", "1:tr0-001-ret", "1:x"]
    assert [p.group for p in combined] == ["0:train-0/tr0-001", None, "1:train-0/tr0-001", None]
    assert combined[0].positive.key() != combined[2].positive.key()  # the videos are untouched
    assert combine_pair_sets(sets[:1]) == sets[0]  # one file: ids and groups as written


@pytest.mark.slow
def test_retrieval_set_renders_only_the_splits_given_corpora(tmp_path):
    from training.synthetic import RetrievalSetConfig, make_retrieval_set

    config = RetrievalSetConfig(
        train_corpora=1, val_corpora=0, test_corpora=0, videos=2, order_pairs=1, count_pairs=1,
        min_duration_s=40.0, max_duration_s=40.0, candidates=2, seed=3,
    )  # fmt: skip
    written = make_retrieval_set(tmp_path, config)
    assert sorted(written) == ["train"]
    dirs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert dirs == ["train-0", "train-count", "train-order"]
    assert not (tmp_path / "val.jsonl").exists() and not (tmp_path / "test.jsonl").exists()
    pairs = load_pairs(written["train"])
    assert {p.meta["kind"] for p in pairs} == {"single", "ordered", "counted"}
    counted = [p for p in pairs if p.meta["kind"] == "counted"]
    assert len(counted) == 2 and {len(p.candidates) for p in counted} == {2}  # the video and its partner
    ids = [json.loads(line)["id"] for line in (tmp_path / "train_videos.jsonl").read_text().splitlines()]
    assert sorted(i for i in ids if i.startswith("train-count/")) == [
        "train-count/trc00o",
        "train-count/trc00t",
    ]


def test_counted_queries_have_their_pair_partner_as_a_candidate():
    from training.synthetic import _partner_pairs
    from world.corpus import Corpus, CorpusConfig, _plan

    config = CorpusConfig(videos=0, count_pairs=3, seed=1, min_duration_s=36.0, max_duration_s=40.0)
    videos = [truth for truth, _ in _plan(config)]
    corpus = Corpus(root=Path("/data/count"), manifest=Path("/data/count/videos.jsonl"), videos=videos)
    pairs = _partner_pairs(corpus, "count", "counted", np.random.default_rng(0), candidates=4)
    by_path = {f"/data/count/{v.path}": v for v in videos}
    assert len(pairs) == 6
    for pair in pairs:
        video = by_path[pair.positive.video.path]
        partner = next(v for v in videos if v.group == video.group and v is not video)
        cands = [by_path[c.video.path] for c in pair.candidates]
        assert pair.meta == {"kind": "counted"} and pair.task == "retrieval"
        assert pair.query.text == video.queries[0]
        assert pair.query.text.endswith(("once", "twice", "two times"))
        assert (len(video.events) == 1) == pair.query.text.endswith("once")
        assert video in cands and partner in cands and len(cands) == 4
        # the partner is the one hard negative; the rest come from other pairs (other events)
        assert all(c.group != video.group for c in cands if c not in (video, partner))
        assert pair.group != f"count/{partner.id}"  # the partner stays a negative in the batch too
