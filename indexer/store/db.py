"""The metadata store (``meta.sqlite``): every SQL statement of the project lives in this module.

Rows are read by column name (``sqlite3.Row``), never by position. Table ``videos`` holds one row
per source video, indexed *and* failed: stable id, FAISS id, path, content fingerprint, fps, frame
count, duration, size, user metadata (JSON), status, error, the final embedding (float32 bytes),
the frame-bank location (file, row offset, row count), the candidate frame indices (int64 bytes),
the commit sequence, the time it was indexed, the source file's ``size:mtime_ns``, the frame-store
location of the bank frames' pixels (file and first row; NULL when not kept), the signature of the
sidecar subtitle files its text tracks were read from (``tracks_stat``; NULL: never read), its edge
frames (indexer.edges; NULL: none, as in stores written before them). Table ``state``
holds counters (``next_faiss_id``, ``commit_seq``). A batch becomes part of the index in one
transaction (:meth:`MetadataStore.commit_rows`), its text tracks with it: tables ``text_tracks`` (per
track of a video), ``cues`` (per cue) and ``cues_fts`` (FTS5 over the cues' text, external content
kept in step by triggers); see docs/architecture.md, "What is said".
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from indexer.store.format import STATUS_FAILED, STATUS_INDEXED, IndexFormatError, VideoRecord

logger = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS videos (
    id TEXT PRIMARY KEY,
    faiss_id INTEGER NOT NULL,
    path TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    fps REAL NOT NULL,
    num_frames INTEGER NOT NULL,
    duration_s REAL NOT NULL,
    width INTEGER NOT NULL,
    height INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    embedding BLOB,
    bank_file TEXT,
    bank_offset INTEGER,
    bank_count INTEGER,
    frame_indices BLOB,
    commit_seq INTEGER NOT NULL,
    indexed_at TEXT NOT NULL,
    source_stat TEXT,
    frames_file TEXT,
    frames_offset INTEGER
);
CREATE INDEX IF NOT EXISTS videos_faiss ON videos(faiss_id);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
# Tokens: Unicode words, diacritics folded, English endings stemmed (Porter): "harbours" finds "harbour".
CUES_SCHEMA = """
CREATE TABLE IF NOT EXISTS text_tracks (
    video_id TEXT NOT NULL,
    track INTEGER NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    language TEXT,
    encoding TEXT,
    cues INTEGER NOT NULL,
    problem TEXT,
    PRIMARY KEY (video_id, track)
);
CREATE TABLE IF NOT EXISTS cues (
    id INTEGER PRIMARY KEY,
    video_id TEXT NOT NULL,
    track INTEGER NOT NULL,
    start_s REAL NOT NULL,
    end_s REAL NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS cues_video ON cues(video_id);
CREATE VIRTUAL TABLE IF NOT EXISTS cues_fts USING fts5(
    text, content='cues', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS cues_fts_insert AFTER INSERT ON cues BEGIN
    INSERT INTO cues_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS cues_fts_delete AFTER DELETE ON cues BEGIN
    INSERT INTO cues_fts(cues_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
"""

COLUMNS = (
    "id", "faiss_id", "path", "fingerprint", "fps", "num_frames", "duration_s", "width", "height",
    "metadata", "status", "error", "embedding", "bank_file", "bank_offset", "bank_count",
    "frame_indices", "commit_seq", "indexed_at", "source_stat", "frames_file", "frames_offset",
    "tracks_stat", "edge_indices", "edge_embeddings",
)  # fmt: skip
# columns added after format version 1 was first written (an older store gains them when a writer
# opens it; readers of an older store see NULL)
_ADDED_COLUMNS = {"frames_file": "TEXT", "frames_offset": "INTEGER"}
_TRACK_COLUMNS = {"tracks_stat": "TEXT"}  # added with the text tracks
_EDGE_COLUMNS = {"edge_indices": "BLOB", "edge_embeddings": "BLOB"}  # added with the edge frames
MAX_CUE_MATCHES = 20_000  # cues a spoken search ranks at most (best BM25 first)
_RECORD_COLUMNS = ", ".join(COLUMNS[:12])
_INSERT = (
    f"INSERT OR REPLACE INTO videos ({', '.join(COLUMNS)}) VALUES ({', '.join(':' + c for c in COLUMNS)})"
)
_CHUNK = 500  # ids per "IN (...)" query, under SQLite's variable limit


def record_from_row(r: sqlite3.Row) -> VideoRecord:
    return VideoRecord(
        id=r["id"], faiss_id=int(r["faiss_id"]), path=r["path"], fingerprint=r["fingerprint"],
        fps=float(r["fps"]), num_frames=int(r["num_frames"]), duration_s=float(r["duration_s"]),
        width=int(r["width"]), height=int(r["height"]), metadata=json.loads(r["metadata"]),
        status=r["status"], error=r["error"],
    )  # fmt: skip


@dataclass(frozen=True)
class BankLocation:
    file: str
    offset: int
    count: int
    frames_file: str | None = None  # the frame store's file of the same rows (None: pixels not kept)
    frames_offset: int = 0


def connect_readonly(path: Path, **kwargs) -> sqlite3.Connection:
    """Read-only connection to the metadata store. A crash during an SQLite commit leaves a "hot"
    rollback journal that read-only connections cannot apply; when the directory is writable it is
    rolled back here first (restoring the last committed state), else the error says what to do."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, **kwargs)
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        conn.row_factory = sqlite3.Row
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        journal = Path(f"{path}-journal")
        if not journal.exists():
            raise
        logger.warning("%s: rolling back a transaction interrupted by a crash (%s)", path.name, exc)
        try:
            rw = sqlite3.connect(str(path))
            try:
                rw.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            finally:
                rw.close()
        except sqlite3.OperationalError as exc2:
            raise IndexFormatError(
                f"{path} has an interrupted transaction ({journal.name}) that needs write access to roll back: "
                f"run `indexer verify` once where the index is writable ({exc2})"
            ) from exc2
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, **kwargs)
    conn.row_factory = sqlite3.Row
    return conn


def connect_rw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level="DEFERRED")
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


class MetadataStore:
    """The queries of the writer, the reader and the maintenance commands over one connection.
    Not thread-safe by itself: the reader serialises its calls with a lock."""

    def __init__(self, conn: sqlite3.Connection):
        conn.row_factory = sqlite3.Row
        self.conn = conn

    @classmethod
    def open_readonly(cls, path: Path, **kwargs) -> MetadataStore:
        return cls(connect_readonly(path, **kwargs))

    @classmethod
    def open_rw(cls, path: Path, *, create: bool = True) -> MetadataStore:
        store = cls(connect_rw(path))
        if create:
            store.create_schema()
        return store

    def close(self) -> None:
        self.conn.close()

    def create_schema(self) -> None:
        with self.conn:
            self.conn.executescript(SCHEMA)
            have = self._columns()
            for name, kind in {**_ADDED_COLUMNS, **_TRACK_COLUMNS, **_EDGE_COLUMNS}.items():
                if name not in have:
                    self.conn.execute(f"ALTER TABLE videos ADD COLUMN {name} {kind}")
        with self.conn:
            self.conn.executescript(CUES_SCHEMA)

    def _columns(self) -> set[str]:
        return {r["name"] for r in self.conn.execute("PRAGMA table_info(videos)")}

    def _frames_columns(self) -> str:
        """The frame-store columns to select (NULLs for a store written before they existed)."""
        if set(_ADDED_COLUMNS) <= self._columns():
            return "frames_file, frames_offset"
        return "NULL AS frames_file, NULL AS frames_offset"

    # -- checks ----------------------------------------------------------------------------------
    def integrity_check(self) -> str:
        """SQLite's full integrity check: "ok", or the first problem it reports."""
        return str(self.conn.execute("PRAGMA integrity_check").fetchone()[0])

    def quick_check(self) -> str:
        """SQLite's quick check (every page read, indexes not cross-checked): "ok" or a problem."""
        return str(self.conn.execute("PRAGMA quick_check").fetchone()[0])

    # -- counts and state ------------------------------------------------------------------------
    def count_videos(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) AS n FROM videos").fetchone()["n"])

    def counts(self) -> dict[str, int]:
        out = {STATUS_INDEXED: 0, STATUS_FAILED: 0}
        for row in self.conn.execute("SELECT status, COUNT(*) AS n FROM videos GROUP BY status"):
            out[row["status"]] = int(row["n"])
        return out

    def state(self, key: str, default: int = 0) -> int:
        row = self.conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return int(row["value"]) if row else default

    # -- the writer ------------------------------------------------------------------------------
    def finished(self) -> dict[str, tuple[str, str, str | None]]:
        """Every video in the store: id -> (fingerprint, status, source stat)."""
        rows = self.conn.execute("SELECT id, fingerprint, status, source_stat FROM videos")
        return {r["id"]: (r["fingerprint"], r["status"], r["source_stat"]) for r in rows}

    def commit_rows(
        self, rows: Sequence[dict], state: dict[str, int], tracks: dict[str, Sequence] | None = None
    ) -> list[int]:
        """One transaction: insert (or replace) ``rows`` (dicts keyed by :data:`COLUMNS`), their text
        tracks (``tracks``: video id -> ``indexer.subtitles.TextTrack`` s, replacing any the ids had)
        and set the ``state`` counters. Returns the FAISS ids the replaced rows had (they leave FAISS)."""
        ids = [r["id"] for r in rows]
        with self.conn:
            old = [fid for fid in self._faiss_ids_of(ids).values() if fid >= 0]
            self._delete_tracks(ids)  # a replaced row's text tracks leave with it
            self.conn.executemany(_INSERT, rows)
            self._insert_tracks(tracks or {})
            self.conn.executemany(
                "INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)",
                [(k, str(v)) for k, v in state.items()],
            )
        return old

    def _faiss_ids_of(self, ids: Sequence[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = list(ids[start : start + _CHUNK])
            query = f"SELECT id, faiss_id FROM videos WHERE id IN ({','.join('?' * len(chunk))})"
            found.update({r["id"]: int(r["faiss_id"]) for r in self.conn.execute(query, chunk)})
        return found

    def delete(self, ids: Sequence[str]) -> dict[str, int]:
        """Delete videos by id in one transaction; returns id -> FAISS id of those that existed."""
        found = self._faiss_ids_of(ids)
        with self.conn:
            self._delete_tracks(list(found))
            self.conn.executemany("DELETE FROM videos WHERE id = ?", [(i,) for i in found])
        return found

    # -- text tracks and cues (the writer) -------------------------------------------------------
    def _delete_tracks(self, ids: Sequence[str], kinds: Sequence[str] | None = None) -> None:
        """Inside a transaction: the text tracks (of ``kinds``, default all) and cues of ``ids``."""
        if kinds is None:
            self.conn.executemany("DELETE FROM cues WHERE video_id = ?", [(i,) for i in ids])
            self.conn.executemany("DELETE FROM text_tracks WHERE video_id = ?", [(i,) for i in ids])
            return
        marks = ",".join("?" * len(kinds))
        for vid in ids:
            self.conn.execute(
                f"DELETE FROM cues WHERE video_id = ? AND track IN "
                f"(SELECT track FROM text_tracks WHERE video_id = ? AND kind IN ({marks}))",
                (vid, vid, *kinds),
            )
            self.conn.execute(
                f"DELETE FROM text_tracks WHERE video_id = ? AND kind IN ({marks})", (vid, *kinds)
            )

    def _insert_tracks(self, tracks: dict[str, Sequence]) -> None:
        """Inside a transaction: each video's tracks, numbered after the ones it keeps, and their cues."""
        for vid, found in tracks.items():
            row = self.conn.execute(
                "SELECT COALESCE(MAX(track), -1) AS n FROM text_tracks WHERE video_id = ?", (vid,)
            ).fetchone()
            first = int(row["n"]) + 1
            for k, t in enumerate(found, start=first):
                self.conn.execute(
                    "INSERT INTO text_tracks (video_id, track, kind, name, language, encoding, cues, problem) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (vid, k, t.kind, t.name, t.language, t.encoding, len(t.cues), t.problem),
                )
                self.conn.executemany(
                    "INSERT INTO cues (video_id, track, start_s, end_s, text) VALUES (?, ?, ?, ?, ?)",
                    [(vid, k, float(c.start_s), float(c.end_s), c.text) for c in t.cues],
                )

    def replace_tracks(
        self, video_id: str, tracks: Sequence, *, kinds: Sequence[str] | None, tracks_stat: str | None
    ) -> None:
        """One transaction: a video's text tracks of ``kinds`` (None: all) replaced by ``tracks``, and
        its ``tracks_stat`` set (``indexer add`` when only its sidecar files changed)."""
        with self.conn:
            self._delete_tracks([video_id], kinds)
            self._insert_tracks({video_id: tracks})
            self.conn.execute("UPDATE videos SET tracks_stat = ? WHERE id = ?", (tracks_stat, video_id))

    def tracks_stats(self) -> dict[str, tuple[str | None, float]]:
        """Indexed video id -> (the sidecar signature its text tracks were read with, None: never
        read; its duration)."""
        rows = self.conn.execute(
            f"SELECT id, duration_s, {self._tracks_column()} FROM videos WHERE status = ?", (STATUS_INDEXED,)
        )
        return {r["id"]: (r["tracks_stat"], float(r["duration_s"])) for r in rows}

    def _tracks_column(self) -> str:
        return "tracks_stat" if "tracks_stat" in self._columns() else "NULL AS tracks_stat"

    def fts_lag(self) -> dict[str, int]:
        """How far the cue index is from the cues: cues, indexed documents, cues it does not hold."""
        if not self.has_cues():
            return {"cues": 0, "indexed": 0, "missing": 0}
        row = self.conn.execute(
            "SELECT (SELECT COUNT(*) FROM cues) AS cues, (SELECT COUNT(*) FROM cues_fts_docsize) AS indexed, "
            "(SELECT COUNT(*) FROM cues WHERE id NOT IN (SELECT id FROM cues_fts_docsize)) AS missing"
        ).fetchone()
        return {k: int(row[k]) for k in ("cues", "indexed", "missing")}

    def maintain_cue_index(self) -> str:
        """Compaction of the cue index: rebuilt from the cues when it lags them, else its segments
        merged (FTS5 'optimize'); returns which."""
        lag = self.fts_lag()
        action = "rebuild" if lag["missing"] or lag["indexed"] != lag["cues"] else "optimize"
        with self.conn:
            self.conn.execute("INSERT INTO cues_fts(cues_fts) VALUES (?)", (action,))
        return action

    # -- text tracks and cues (the reader) -------------------------------------------------------
    def has_cues(self) -> bool:
        """Whether this store has the cue tables (a store written before them has none)."""
        row = self.conn.execute(
            "SELECT COUNT(*) AS n FROM sqlite_master WHERE name IN ('cues', 'cues_fts', 'text_tracks')"
        ).fetchone()
        return int(row["n"]) == 3

    def match_cues(self, expression: str, limit: int = MAX_CUE_MATCHES) -> list[sqlite3.Row]:
        """The cues matching an FTS5 ``expression``, best BM25 first (``score``: FTS5's bm25, lower is
        better): id, video_id, track, start_s, end_s, text, score. sqlite3.OperationalError for an
        expression FTS5 cannot parse."""
        return self.conn.execute(
            "SELECT c.id AS id, c.video_id AS video_id, c.track AS track, c.start_s AS start_s, "
            "c.end_s AS end_s, c.text AS text, bm25(cues_fts) AS score "
            "FROM cues_fts JOIN cues AS c ON c.id = cues_fts.rowid "
            "WHERE cues_fts MATCH ? ORDER BY bm25(cues_fts) LIMIT ?",
            (expression, int(limit)),
        ).fetchall()

    def cue_snippets(
        self, expression: str, cue_ids: Sequence[int], *, marks: tuple[str, str], tokens: int
    ) -> dict[int, str]:
        """FTS5's snippet of each cue (by id) for ``expression``: at most ``tokens`` tokens around the
        matches, each match between ``marks``, an ellipsis where the text was cut."""
        sql = "SELECT rowid AS id, snippet(cues_fts, 0, ?, ?, '…', ?) AS snippet FROM cues_fts "
        rows = self._in_chunks(
            sql + "WHERE cues_fts MATCH ? AND rowid IN ({})", (*marks, int(tokens), expression), cue_ids
        )
        return {int(r["id"]): r["snippet"] for r in rows}

    def cues_matching(self, expression: str, cue_ids: Sequence[int]) -> set[int]:
        """Which of ``cue_ids`` match ``expression``."""
        sql = "SELECT rowid AS id FROM cues_fts WHERE cues_fts MATCH ? AND rowid IN ({})"
        return {int(r["id"]) for r in self._in_chunks(sql, (expression,), cue_ids)}

    def _in_chunks(self, sql: str, params: tuple, ids: Sequence[int]) -> list[sqlite3.Row]:
        """``sql`` (its ``{}`` the placeholders of an IN list) over ``ids``, a chunk at a time."""
        out: list[sqlite3.Row] = []
        for start in range(0, len(ids), _CHUNK):
            chunk = [int(i) for i in ids[start : start + _CHUNK]]
            out += self.conn.execute(sql.format(",".join("?" * len(chunk))), (*params, *chunk)).fetchall()
        return out

    def count_cue_matches(self, expression: str) -> int:
        """How many cues match ``expression`` (a term's document frequency)."""
        row = self.conn.execute("SELECT COUNT(*) AS n FROM cues_fts WHERE cues_fts MATCH ?", (expression,))
        return int(row.fetchone()["n"])

    def text_track_summary(self) -> dict | None:
        """What ``indexer stats`` reports of the text tracks (None: a store without cue tables)."""
        if not self.has_cues():
            return None
        q = self.conn.execute
        n = f"SELECT COUNT(*) AS n FROM (SELECT status, {self._tracks_column()} FROM videos) WHERE status = ? "
        kinds = "SELECT kind, COUNT(*) AS n, SUM(cues) AS cues, COUNT(problem) AS problems FROM text_tracks "
        langs = (
            "SELECT language, COUNT(*) AS n FROM text_tracks WHERE cues > 0 GROUP BY language ORDER BY n DESC"
        )
        problems = "SELECT video_id, kind, name, problem FROM text_tracks WHERE problem IS NOT NULL "
        return {
            "cues": int(q("SELECT COUNT(*) AS n FROM cues").fetchone()["n"]),
            "videos_with_cues": int(q("SELECT COUNT(DISTINCT video_id) AS n FROM cues").fetchone()["n"]),
            "videos_not_read": int(q(n + "AND tracks_stat IS NULL", (STATUS_INDEXED,)).fetchone()["n"]),
            "by_kind": {
                r["kind"]: {"tracks": r["n"], "cues": int(r["cues"] or 0), "problems": r["problems"]}
                for r in q(kinds + "GROUP BY kind ORDER BY kind")
            },
            "languages": {(r["language"] or "unknown"): r["n"] for r in q(langs)},
            "problems": [dict(r) for r in q(problems + "ORDER BY video_id, track LIMIT 20")],
        }

    def cue_problems(self) -> dict[str, int]:
        """What ``indexer verify`` counts as broken in the cue tables (0 everywhere when sound)."""
        if not self.has_cues():
            return {}
        indexed = "(SELECT id FROM videos WHERE status = 'indexed')"
        q = {
            "orphan_cues": f"FROM cues WHERE video_id NOT IN {indexed}",
            "orphan_tracks": f"FROM text_tracks WHERE video_id NOT IN {indexed}",
            "bad_times": "FROM cues WHERE NOT (start_s >= 0 AND end_s >= start_s)",
            "past_the_end": "FROM cues AS c JOIN videos AS v ON v.id = c.video_id "
            "WHERE v.duration_s > 0 AND c.end_s > v.duration_s + 1",
            "track_counts": "FROM text_tracks AS t WHERE t.cues != "
            "(SELECT COUNT(*) FROM cues AS c WHERE c.video_id = t.video_id AND c.track = t.track)",
            "cues_without_track": "FROM cues AS c WHERE NOT EXISTS "
            "(SELECT 1 FROM text_tracks AS t WHERE t.video_id = c.video_id AND t.track = c.track)",
        }
        out = {
            k: int(self.conn.execute("SELECT COUNT(*) AS n " + sql).fetchone()["n"]) for k, sql in q.items()
        }
        lag = self.fts_lag()
        out["fts_missing"] = lag["missing"]
        out["fts_extra"] = max(0, lag["indexed"] - (lag["cues"] - lag["missing"]))
        return out

    def indexed_faiss_ids(self) -> list[int]:
        rows = self.conn.execute("SELECT faiss_id FROM videos WHERE status = ?", (STATUS_INDEXED,))
        return [int(r["faiss_id"]) for r in rows]

    def indexed_embeddings(self) -> Iterator[tuple[int, bytes]]:
        """(FAISS id, float32 embedding bytes) of every indexed video, by FAISS id."""
        rows = self.conn.execute(
            "SELECT faiss_id, embedding FROM videos WHERE status = ? ORDER BY faiss_id", (STATUS_INDEXED,)
        )
        for r in rows:
            yield int(r["faiss_id"]), r["embedding"]

    def embeddings_by_faiss_id(self, fids: Iterable[int]) -> dict[int, bytes]:
        fids = [int(f) for f in fids]
        out: dict[int, bytes] = {}
        for start in range(0, len(fids), _CHUNK):
            chunk = fids[start : start + _CHUNK]
            query = f"SELECT faiss_id, embedding FROM videos WHERE faiss_id IN ({','.join('?' * len(chunk))})"
            out.update({int(r["faiss_id"]): r["embedding"] for r in self.conn.execute(query, chunk)})
        return out

    def bank_files(self) -> set[str]:
        rows = self.conn.execute("SELECT DISTINCT bank_file FROM videos WHERE bank_file IS NOT NULL")
        return {r["bank_file"] for r in rows}

    def frames_files(self) -> set[str]:
        rows = self.conn.execute(
            f"SELECT DISTINCT frames_file FROM (SELECT {self._frames_columns()} FROM videos) "
            "WHERE frames_file IS NOT NULL"
        )
        return {r["frames_file"] for r in rows}

    # -- the reader ------------------------------------------------------------------------------
    def records(self) -> Iterator[tuple[VideoRecord, BankLocation | None]]:
        """Every video with its frame-bank location (None for failed videos)."""
        rows = self.conn.execute(
            f"SELECT {_RECORD_COLUMNS}, bank_file, bank_offset, bank_count, {self._frames_columns()} FROM videos"
        )
        for r in rows:
            rec = record_from_row(r)
            bank = None
            if rec.status == STATUS_INDEXED:
                bank = BankLocation(
                    r["bank_file"],
                    int(r["bank_offset"] or 0),
                    int(r["bank_count"] or 0),
                    r["frames_file"],
                    int(r["frames_offset"] or 0),
                )
            yield rec, bank

    def metadata_keys(self) -> list[str]:
        """The user-metadata keys of the indexed videos (top-level keys of their metadata JSON), sorted."""
        rows = self.conn.execute(
            "SELECT DISTINCT m.key AS key FROM videos AS v, json_each(v.metadata) AS m "
            "WHERE v.status = ? AND json_type(v.metadata) = 'object' ORDER BY m.key",
            (STATUS_INDEXED,),
        )
        return [r["key"] for r in rows]

    def frame_indices(self, video_id: str) -> bytes | None:
        row = self.conn.execute("SELECT frame_indices FROM videos WHERE id = ?", (video_id,)).fetchone()
        return None if row is None else row["frame_indices"]

    def edge_frames(self, video_id: str) -> tuple[bytes, bytes] | None:
        """A video's (edge_indices, edge_embeddings) blobs; None: it has none (or the store predates them)."""
        sql = "SELECT edge_indices, edge_embeddings FROM videos WHERE id = ?"
        have = set(_EDGE_COLUMNS) <= self._columns()  # a store written before edge frames has none
        row = self.conn.execute(sql, (video_id,)).fetchone() if have else None
        return None if row is None or row["edge_indices"] is None else (row[0], row[1])

    def embedding(self, video_id: str) -> bytes | None:
        sql = "SELECT embedding FROM videos WHERE id = ? AND status = ?"
        row = self.conn.execute(sql, (video_id, STATUS_INDEXED)).fetchone()
        return None if row is None else row["embedding"]

    # -- maintenance -----------------------------------------------------------------------------
    def status_summary(self) -> dict[str, dict]:
        """status -> {videos, duration_s, bank_frames, stored_videos and stored_frames (in the frame store)}."""
        rows = self.conn.execute(
            "SELECT status, COUNT(*) AS n, COALESCE(SUM(duration_s), 0) AS duration, "
            "COALESCE(SUM(bank_count), 0) AS frames, COUNT(frames_file) AS stored, "
            "COALESCE(SUM(CASE WHEN frames_file IS NOT NULL THEN bank_count END), 0) AS stored_frames "
            f"FROM (SELECT status, duration_s, bank_count, {self._frames_columns()} FROM videos) GROUP BY status"
        )
        return {
            r["status"]: {
                "videos": int(r["n"]),
                "duration_s": float(r["duration"]),
                "bank_frames": int(r["frames"]),
                "stored_videos": int(r["stored"]),
                "stored_frames": int(r["stored_frames"]),
            }
            for r in rows
        }

    def failure_reasons(self) -> list[str | None]:
        rows = self.conn.execute("SELECT error FROM videos WHERE status = ?", (STATUS_FAILED,))
        return [r["error"] for r in rows]

    def verify_rows(self) -> list[sqlite3.Row]:
        """Every row with the columns ``indexer verify`` checks (read them by name)."""
        return self.conn.execute(
            "SELECT id, faiss_id, status, num_frames, width, height, embedding, bank_file, bank_offset, "
            f"bank_count, frame_indices, fingerprint, path, {self._frames_columns()} FROM videos"
        ).fetchall()

    # -- compaction ------------------------------------------------------------------------------
    def bank_usage(self) -> dict[str, list[tuple[str, int, int]]]:
        """bank file -> the (id, first row, row count) of every video that references it, by row."""
        out: dict[str, list[tuple[str, int, int]]] = {}
        rows = self.conn.execute(
            "SELECT id, bank_file, bank_offset, bank_count FROM videos WHERE bank_file IS NOT NULL "
            "ORDER BY bank_file, bank_offset"
        )
        for r in rows:
            out.setdefault(r["bank_file"], []).append((r["id"], int(r["bank_offset"]), int(r["bank_count"])))
        return out

    def move_banks(self, moves: Sequence[tuple[str, str, int]], state: dict[str, int]) -> None:
        """One transaction: point each (id, bank file, first row) at its new frame-bank location and
        set the ``state`` counters (the commit point of a compaction step)."""
        self._move_rows("bank_file", "bank_offset", moves, state)

    def frames_usage(self) -> dict[str, list[tuple[str, int, int]]]:
        """frame-store file -> the (id, first row, row count) of every video that references it, by
        row (a video's stored frames are its frame-bank rows, so the count is its bank count)."""
        out: dict[str, list[tuple[str, int, int]]] = {}
        rows = self.conn.execute(
            f"SELECT id, bank_count, {self._frames_columns()} FROM videos ORDER BY frames_file, frames_offset"
        )
        for r in rows:
            if r["frames_file"] is not None:
                out.setdefault(r["frames_file"], []).append(
                    (r["id"], int(r["frames_offset"]), int(r["bank_count"] or 0))
                )
        return out

    def move_frames(self, moves: Sequence[tuple[str, str, int]], state: dict[str, int]) -> None:
        """One transaction: point each (id, frame-store file, first row) at its new location and set
        the ``state`` counters (the commit point of a frame-store compaction step)."""
        self._move_rows("frames_file", "frames_offset", moves, state)

    def _move_rows(self, file_col: str, offset_col: str, moves, state: dict[str, int]) -> None:
        with self.conn:
            self.conn.executemany(
                f"UPDATE videos SET {file_col} = ?, {offset_col} = ? WHERE id = ?",  # our column names
                [(file, offset, vid) for vid, file, offset in moves],
            )
            self.conn.executemany(
                "INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)",
                [(k, str(v)) for k, v in state.items()],
            )

    def vacuum(self) -> None:
        """Rewrite the database file without its free pages (SQLite's VACUUM is atomic)."""
        self.conn.execute("VACUUM")
