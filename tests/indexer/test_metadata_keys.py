"""``IndexReader.metadata_keys()``: the metadata keys an index knows (of its indexed videos), from the
metadata store, sorted and cached; the built-in filter fields on request."""

from __future__ import annotations

from indexer.store import IndexReader, IndexWriter
from indexer.store.format import BUILTIN_FILTER_FIELDS
from tests.indexer.test_store import _entry, _manifest


def test_metadata_keys_of_the_indexed_videos(tmp_path):
    entries = [
        _entry(0, meta={"kind": "single", "title": "a red square"}),
        _entry(1, meta={"kind": "order", "duration_s": 90.0, "tags": {"nested": 1}}),
        _entry(2, meta={}),
        _entry(3, status="failed", meta={"only_failed": True}),  # never searchable: not a known key
    ]
    with IndexWriter.create(tmp_path / "idx", _manifest()) as w:
        w.commit(entries[:2])
        w.commit(entries[2:])
        w.finalize()
    with IndexReader(tmp_path / "idx") as r:
        assert r.metadata_keys() == ["duration_s", "kind", "tags", "title"]
        assert r.metadata_keys() is not r.metadata_keys()  # a copy: callers cannot change the cache
        with_builtin = r.metadata_keys(builtin=True)
        assert with_builtin == sorted(set(with_builtin)) and set(BUILTIN_FILTER_FIELDS) <= set(with_builtin)
        assert "only_failed" not in with_builtin and "kind" in with_builtin
        r._db.close()  # cached: a second call does not go back to the store
        assert r.metadata_keys() == ["duration_s", "kind", "tags", "title"]


def test_an_index_without_metadata_knows_no_keys(tmp_path):
    with IndexWriter.create(tmp_path / "idx", _manifest()) as w:
        w.commit([_entry(0, meta={}), _entry(1, meta={})])
        w.finalize()
    with IndexReader(tmp_path / "idx") as r:
        assert r.metadata_keys() == []
        assert r.metadata_keys(builtin=True) == sorted(BUILTIN_FILTER_FIELDS)
