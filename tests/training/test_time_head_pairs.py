"""`qaslr train-time-head --index --pairs`: a time head trained on the user's own labelled queries
over an index they built (what a real backbone needs, since its order and count pairs cannot be
rendered), and the clear refusals of labels that cannot be used."""

from __future__ import annotations

import json

import pytest

from models.time_head import load_time_head
from qaslr.cli import main
from world.corpus import CorpusConfig, make_corpus

pytestmark = pytest.mark.slow  # renders and indexes a small world corpus

USER_VIDEOS = CorpusConfig(
    videos=2, order_pairs=3, count_pairs=3, seed=6262, min_duration_s=30.0, max_duration_s=60.0
)


@pytest.fixture(scope="module")
def user_index(tmp_path_factory, tiny_world_checkpoint):
    """A user's collection: indexed by the indexer, with labels written as the user would."""
    from tests.engine.build import build_oneshot_index

    root = tmp_path_factory.mktemp("user_videos")
    corpus = make_corpus(root / "corpus", USER_VIDEOS)
    index = build_oneshot_index(corpus.manifest, root / "index", tiny_world_checkpoint)
    truth = corpus.by_id()
    lines = []
    for kind in ("order", "count"):
        for query, right in corpus.queries(kind):
            partner = next(v.id for v in corpus.videos if v.group == truth[right].group and v.id != right)
            lines.append(json.dumps({"query": query, "video": right, "partner": partner}))
    pairs = root / "pairs.jsonl"
    pairs.write_text("\n".join(lines) + "\n")
    return index, pairs, len(lines)


def test_a_head_trains_on_the_users_labelled_queries_and_measures_the_held_out_share(
    user_index, tiny_world_checkpoint, tmp_path, capsys
):
    index, pairs, n = user_index
    out = tmp_path / "head"
    rc = main([
        "train-time-head", str(out), "--model", str(tiny_world_checkpoint), "--index", str(index),
        "--pairs", str(pairs), "--val-share", "0.25", "--steps", "60", "--candidates", "6",
    ])  # fmt: skip
    assert rc == 0, capsys.readouterr().out
    head = load_time_head(out)
    trained = head.config.trained
    held = trained["held_out"]["full"]["queries"]
    assert held == round(0.25 * n) and trained["train_queries"] == n - held
    assert trained["settings"]["pairs"] == "pairs.jsonl"  # the data's name, not a machine path
    assert set(head.config.conditions) <= {"order", "count:1", "count:2"}
    assert head.config.backbone  # the fingerprint serving checks
    assert "rule, no learning" in trained["held_out"]
    # issue 40: the counts above are bookkeeping; the held-out numbers must be the saved head's own,
    # measured again here on the same held-out queries (a head that was not the one measured fails)
    from pathlib import Path

    from training.time_head import evaluate, hold_out
    from training.time_head import load_pairs as load_user_pairs

    split = load_user_pairs(Path(index), Path(pairs), tiny_world_checkpoint.resolve(), candidates=6, seed=0)
    _, val = hold_out(split, 0.25, seed=0)
    again = evaluate(head, val, ("full",))["full"]
    for key in ("pair", "order", "count", "hit@1"):
        assert again[key] == pytest.approx(trained["held_out"]["full"][key], nan_ok=True), key
    # its confidence is fitted on the same held-out queries' pairs, one (a, b) per condition they hold
    fitted = trained["calibration"]["fitted"]
    assert set(fitted) == set(head.config.calibration) == {q.condition for q in val.queries if q.partner}
    # --calibrate fits it again for the saved head, its weights untouched, and says on what
    again_out = tmp_path / "calibrated"
    rc = main([
        "train-time-head", str(again_out), "--calibrate", str(out), "--model", str(tiny_world_checkpoint),
        "--index", str(index), "--pairs", str(pairs), "--val-share", "0.25", "--candidates", "6",
    ])  # fmt: skip
    assert rc == 0, capsys.readouterr().out
    assert (again_out / "time_head.safetensors").read_bytes() == (out / "time_head.safetensors").read_bytes()
    calibrated = load_time_head(again_out).config
    assert set(calibrated.calibration) == set(head.config.calibration)
    for condition, fit in head.config.calibration.items():
        assert calibrated.calibration[condition] == pytest.approx(fit), condition
    assert calibrated.trained["calibration"]["on"] == "the held-out queries of pairs.jsonl"
    assert calibrated.trained["held_out"] == trained["held_out"]  # what training measured stays


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ({"query": "a red square appears", "video": "x"}, "does not read as an order"),
        ({"query": "a red square appears twice", "video": "no-such-video"}, "has no frame bank"),
        ({"video": "x"}, 'needs a "query"'),
    ],
)
def test_a_label_that_cannot_be_used_is_refused_with_its_line(
    user_index, tiny_world_checkpoint, tmp_path, capsys, line, says
):
    index, pairs, _ = user_index
    bad = tmp_path / "bad.jsonl"
    bad.write_text(pairs.read_text().splitlines()[0] + "\n" + json.dumps(line) + "\n")
    rc = main([
        "train-time-head", str(tmp_path / "head"), "--model", str(tiny_world_checkpoint),
        "--index", str(index), "--pairs", str(bad), "--steps", "5",
    ])  # fmt: skip
    said = capsys.readouterr().out
    assert rc == 2 and "line 2" in said and says in said
    assert not (tmp_path / "head").exists()


def test_calibrate_refuses_a_folder_without_a_time_head(tmp_path, capsys):
    rc = main(["train-time-head", str(tmp_path / "out"), "--calibrate", str(tmp_path)])
    assert rc == 2 and "--calibrate: a time head needs time_head.json" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_pairs_without_an_index_are_refused(tmp_path, capsys):
    rc = main(["train-time-head", str(tmp_path / "head"), "--pairs", str(tmp_path / "p.jsonl")])
    assert rc == 2 and "--index and --pairs go together" in capsys.readouterr().out
