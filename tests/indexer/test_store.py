"""The index directory format: writer commits, reader API, crash leftovers, filters, mismatch."""

import json
import sqlite3

import numpy as np
import pytest

from indexer.maintenance import verify_index
from indexer.store import (
    FAISS_FILE,
    MANIFEST,
    Entry,
    IndexFormatError,
    IndexMismatchError,
    IndexReader,
    IndexWriter,
    Manifest,
    VideoRecord,
)

D = 8


def _manifest(**kw):
    base = dict(
        format_version=1,
        backbone_id="tiny",
        backbone_fingerprint="bb01",
        head_fingerprint="oneshot",
        embedder="oneshot",
        embed_dim=D,
        hidden_size=D,
        frame_size=64,
        max_frames=8,
        clip_len=4,
        num_think_tokens=None,
        max_evidence=32,
    )
    base.update(kw)
    return Manifest(**base)


def _entry(i, *, status="indexed", rng=None, meta=None):
    rng = rng or np.random.default_rng(i)
    v = rng.normal(size=D).astype(np.float32)
    v /= np.linalg.norm(v)
    c = 3 + i % 4
    rec = VideoRecord(
        id=f"v{i}",
        faiss_id=-1,
        path=f"/videos/{i}.mp4",
        fingerprint=f"fp{i}",
        fps=10.0,
        num_frames=10 * (i + 1),
        duration_s=float(i + 1),
        width=64,
        height=48,
        metadata=meta if meta is not None else {"cat": "a" if i % 2 else "b", "n": i},
        status=status,
        error=None if status == "indexed" else "cannot open as video",
    )
    if status != "indexed":
        return Entry(rec)
    return Entry(rec, v, np.arange(c, dtype=np.int64) * 3, rng.normal(size=(c, D)).astype(np.float16))


@pytest.fixture
def built(tmp_path):
    entries = [_entry(i) for i in range(6)] + [_entry(6, status="failed")]
    with IndexWriter.create(tmp_path / "idx", _manifest()) as w:
        w.commit(entries[:3])
        w.commit(entries[3:])
        w.finalize()
    return tmp_path / "idx", entries


def test_round_trip(built):
    directory, entries = built
    with IndexReader(directory) as r:
        assert len(r) == 6
        assert r.manifest.counts == {"indexed": 6, "failed": 1}
        assert {v.id for v in r.videos()} == {f"v{i}" for i in range(6)}
        assert [v.id for v in r.videos(status="failed")] == ["v6"]
        assert r.video("v6").error == "cannot open as video" and r.video("v6").faiss_id == -1
        assert len({r.video(f"v{i}").faiss_id for i in range(6)}) == 6
        assert r.video("nope") is None
        for e in entries[:6]:
            np.testing.assert_array_equal(r.embedding(e.record.id), e.embedding)
            bank = r.frame_bank(e.record.id)
            np.testing.assert_array_equal(bank.frame_indices, e.bank_indices)
            np.testing.assert_allclose(bank.timestamps, e.bank_indices / 10.0)
            np.testing.assert_array_equal(bank.embeddings, e.bank_embeddings)
            assert bank.embeddings.dtype == np.float16 and isinstance(bank.embeddings, np.memmap)
        # exact search: each stored vector is its own best hit, scores are inner products
        queries = np.stack([e.embedding for e in entries[:6]])
        hits = r.search(queries, 3)
        for e, row in zip(entries, hits, strict=False):
            assert row[0][0] == e.record.id and row[0][1] == pytest.approx(1.0, abs=1e-5)
            assert [s for _, s in row] == sorted((s for _, s in row), reverse=True)
        # allowed_ids restricts the candidates (unknown and failed ids are ignored)
        allowed = {"v1", "v4", "v6", "zzz"}
        row = r.search(queries[:1], 5, allowed_ids=allowed)[0]
        assert {vid for vid, _ in row} == {"v1", "v4"}
        assert r.search(queries[:1], 5, allowed_ids=set()) == [[]]
        assert len(r.search(queries[:1], 100)[0]) == 6


def test_filters(built):
    directory, _ = built
    with IndexReader(directory) as r:
        assert r.filter_ids({"cat": "a"}) == {"v1", "v3", "v5"}
        assert r.filter_ids({"cat": {"in": ["a", "b"]}, "n": {"gte": 2, "lt": 4}}) == {"v2", "v3"}
        assert r.filter_ids({"duration_s": {"gt": 4.5}}) == {"v4", "v5"}
        assert r.filter_ids({"num_frames": 30}) == {"v2"}
        assert r.filter_ids({"missing_field": 1}) == set()
        assert r.filter_ids({"cat": {"gte": 1}}) == set()  # type mismatch matches nothing
        for bad in (
            {"n": {"foo": 1}},
            {"n": [1, 2]},
            {"n": {"in": 3}},
            {"n": {}},
            ["n"],
            {"n": {"gte": [1]}},
        ):
            with pytest.raises(ValueError, match="filter"):
                r.filter_ids(bad)


def test_remove_and_stable_ids(built):
    directory, entries = built
    with IndexReader(directory) as r:
        before = {v.id: v.faiss_id for v in r.videos()}
    with IndexWriter.open(directory) as w:
        assert w.remove(["v2", "unknown"]) == ["unknown"]
        w.commit([_entry(7)])
    with IndexReader(directory) as r:
        assert len(r) == 6 and r.video("v2") is None
        assert {v.id: v.faiss_id for v in r.videos() if v.id != "v7"} == {
            k: f for k, f in before.items() if k != "v2"
        }
        assert r.video("v7").faiss_id not in before.values()  # FAISS ids are never reused
        hits = r.search(entries[2].embedding[None], 10)[0]
        assert "v2" not in {vid for vid, _ in hits}


def test_reader_catches_up_with_commits_after_the_faiss_checkpoint(tmp_path):
    w = IndexWriter.create(tmp_path / "idx", _manifest())
    w.commit([_entry(0), _entry(1)])
    w.checkpoint()
    w.commit([_entry(2)])  # committed to SQLite; index.faiss not rewritten (simulated crash)
    w.db.close()
    with IndexReader(tmp_path / "idx") as r:
        assert len(r) == 3
        assert r.search(r.embedding("v2")[None], 1)[0][0][0] == "v2"
    # a writer reopening the directory repairs the FAISS file and removes leftovers
    (tmp_path / "idx" / "bank" / "bank-00000099.npy").write_bytes(b"orphan")
    (tmp_path / "idx" / ".manifest.json.x.tmp").write_bytes(b"partial")
    with IndexWriter.open(tmp_path / "idx"):
        pass
    assert not (tmp_path / "idx" / "bank" / "bank-00000099.npy").exists()
    assert not list((tmp_path / "idx").glob(".*.tmp"))


def test_resume_requires_same_settings(tmp_path):
    with IndexWriter.create(tmp_path / "idx", _manifest()) as w:
        w.commit([_entry(0)])
    with IndexWriter.create(tmp_path / "idx", _manifest()) as w:  # same settings: resume
        assert set(w.finished()) == {"v0"}
    with pytest.raises(
        IndexMismatchError, match="backbone_fingerprint: index has 'bb01', this build has 'other'"
    ):
        IndexWriter.create(tmp_path / "idx", _manifest(backbone_fingerprint="other"))
    # a crash inside create() before the manifest was written leaves only our own empty files
    with IndexWriter.create(tmp_path / "early", _manifest()):
        pass
    (tmp_path / "early" / "manifest.json").unlink()
    with IndexWriter.create(tmp_path / "early", _manifest()) as w:
        assert w.finished() == {}
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file.txt").write_text("x")
    with pytest.raises(IndexFormatError, match="not empty"):
        IndexWriter.create(tmp_path / "junk", _manifest())


def test_check_compatible(built):
    from indexer.assembly import check_compatible

    directory, _ = built
    with IndexReader(directory) as r:
        check_compatible(r.manifest, backbone_fingerprint="bb01", head_fingerprint="oneshot")
        with pytest.raises(IndexMismatchError) as exc:
            check_compatible(r.manifest, backbone_fingerprint="bb02", head_fingerprint="abcd")
        msg = str(exc.value)
        assert "bb01" in msg and "bb02" in msg and "oneshot" in msg and "abcd" in msg


def test_format_errors(built, tmp_path):
    directory, _ = built
    with pytest.raises(IndexFormatError, match="manifest.json not found"):
        IndexReader(tmp_path / "nothing")
    data = json.loads((directory / MANIFEST).read_text())
    (directory / MANIFEST).write_text(json.dumps(dict(data, format_version=99)))
    with pytest.raises(IndexFormatError, match="version 99"):
        IndexReader(directory)
    (directory / MANIFEST).write_text("{not json")
    with pytest.raises(IndexFormatError, match="not JSON"):
        IndexReader(directory)
    (directory / MANIFEST).write_text(json.dumps(data))
    (directory / FAISS_FILE).write_bytes(b"garbage")
    with pytest.raises(IndexFormatError, match="corrupt"):
        IndexReader(directory)


def test_trained_factory_and_fallback(tmp_path):
    rng = np.random.default_rng(0)
    entries = [_entry(i, rng=rng) for i in range(200)]
    with IndexWriter.create(tmp_path / "ivf", _manifest(faiss_factory="IVF4,Flat")) as w:
        w.commit(entries)
        w.finalize()
    with IndexReader(tmp_path / "ivf") as r:
        assert r.manifest.faiss_factory == "IDMap2,IVF4,Flat"
        hit = r.search(entries[5].embedding[None], 1, allowed_ids={"v5", "v6"})[0]
        assert hit[0][0] == "v5"
    with IndexWriter.create(tmp_path / "small", _manifest(faiss_factory="IVF64,Flat")) as w:
        w.commit(entries[:10])
        w.finalize()  # too few vectors to train 64 lists: exact search, recorded in the manifest
    assert IndexReader(tmp_path / "small").manifest.faiss_factory == "IDMap2,Flat"


class _FailingConnection:
    """Delegates to a real SQLite connection but fails the videos insert, like a crash at the commit."""

    def __init__(self, conn):
        self._conn = conn

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def __enter__(self):
        return self._conn.__enter__()

    def __exit__(self, *exc):
        return self._conn.__exit__(*exc)

    def executemany(self, sql, rows):
        if "INTO videos" in sql:
            raise sqlite3.OperationalError("disk I/O error (simulated)")
        return self._conn.executemany(sql, rows)


def test_failed_commit_leaves_previous_state(tmp_path):
    directory = tmp_path / "idx"
    w = IndexWriter.create(directory, _manifest())
    w.commit([_entry(0), _entry(1)])
    w.db.conn = _FailingConnection(w.db.conn)
    with pytest.raises(sqlite3.OperationalError):
        w.commit([_entry(2), _entry(3)])
    assert len(list((directory / "bank").glob("*.npy"))) == 2  # the second bank file is an orphan
    w.db.conn = w.db.conn._conn
    w.db.close()
    with IndexReader(directory) as r:
        assert {v.id for v in r.videos()} == {"v0", "v1"} and r.manifest.counts["indexed"] == 2
    with IndexWriter.open(directory) as w2:  # the orphan is collected; the batch can be redone
        assert len(list((directory / "bank").glob("*.npy"))) == 1
        w2.commit([_entry(2), _entry(3)])
    with IndexReader(directory) as r:
        assert len(r) == 4
        np.testing.assert_array_equal(r.frame_bank("v3").embeddings, _entry(3).bank_embeddings)


def test_close_resyncs_faiss_after_an_interrupted_commit(tmp_path):
    import faiss

    from indexer.store import faiss_ids

    w = IndexWriter.create(tmp_path / "idx", _manifest())
    w.commit([_entry(0), _entry(1)])
    # as if Ctrl-C hit after the SQLite commit but before the in-memory FAISS add
    w._index.remove_ids(faiss.IDSelectorBatch(np.asarray([1], dtype=np.int64)))
    w.close()
    stored = faiss.read_index(str(tmp_path / "idx" / FAISS_FILE))
    assert sorted(faiss_ids(stored).tolist()) == [0, 1]
    assert verify_index(tmp_path / "idx").warnings == []


def test_crash_during_sqlite_commit_is_rolled_back(built, tmp_path):
    """A kill -9 inside SQLite's commit leaves a hot journal; readers roll it back and see the last commit."""
    import shutil

    directory, _ = built
    copy = tmp_path / "copy"
    conn = sqlite3.connect(str(directory / "meta.sqlite"))
    conn.execute("PRAGMA cache_size=1")  # spill the transaction into the journal early
    conn.execute("BEGIN")
    conn.execute("DELETE FROM videos WHERE id = 'v0'")
    conn.execute("UPDATE videos SET metadata = ? WHERE id != 'v0'", (json.dumps({"x": "y" * 5000}),))
    assert (directory / "meta.sqlite-journal").exists()
    shutil.copytree(directory, copy)  # the disk as the crash left it
    conn.rollback()
    conn.close()
    with IndexReader(copy) as r:
        assert len(r) == 6 and r.video("v0") is not None and r.filter_ids({"cat": "b"}) == {"v0", "v2", "v4"}
    assert not (copy / "meta.sqlite-journal").exists()
    assert verify_index(copy).ok


def test_frame_search_ranks_videos_by_their_best_bank_frame(built):
    """Every indexed video (its bank in either commit's file) by max_c q·f_c, exactly; a filter
    keeps its videos only; a failed video has no bank and is never found."""
    directory, entries = built
    q = np.random.default_rng(7).normal(size=D).astype(np.float32)
    best, want = _brute_force(entries, q[None])
    with IndexReader(directory) as r:
        found = r.frame_search(q, 10)
        assert [v for v, _ in found] == want
        np.testing.assert_allclose([s for _, s in found], [best[v] for v in want], rtol=1e-5)
        assert [v for v, _ in r.frame_search(q, 2)] == want[:2]
        allowed = {"v1", "v4", "v6", "nope"}
        assert [v for v, _ in r.frame_search(q, 10, allowed_ids=allowed)] == [v for v in want if v in allowed]
        assert r.frame_search(q, 10, allowed_ids=set()) == []
        assert r.frame_search(q, 0) == []
        assert len(r.frame_scan()) == sum(
            len(e.bank_embeddings) for e in entries if e.bank_embeddings is not None
        )


def test_frame_search_with_several_queries_ranks_videos_by_the_weakest_ones_best_frame(built):
    """The events of an order or a count: every indexed video by min_e max_c e·f_c, exactly (a video
    that shows one event well and the other not at all ranks below one that shows both)."""
    directory, entries = built
    events = np.random.default_rng(11).normal(size=(2, D)).astype(np.float32)
    weakest, want = _brute_force(entries, events)
    with IndexReader(directory) as r:
        found = r.frame_search(events, 10)
        assert [v for v, _ in found] == want
        np.testing.assert_allclose([s for _, s in found], [weakest[v] for v in want], rtol=1e-5)
        assert [v for v, _ in r.frame_search(events[0], 10)] == _brute_force(entries, events[:1])[1]
        assert r.frame_search(events[:1], 10) == r.frame_search(events[0], 10)


def _brute_force(entries, queries: np.ndarray) -> tuple[dict, list]:
    """Every indexed video's min_e max_c e·f_c over ``queries`` [E, d], and the videos in that order
    (equal scores by id)."""
    score = {
        e.record.id: float((e.bank_embeddings.astype(np.float32) @ queries.T).max(axis=0).min())
        for e in entries
        if e.record.status == "indexed"
    }
    return score, sorted(score, key=lambda v: (-score[v], v))
