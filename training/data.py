"""One JSONL format for every task through the query-positive interface (QASLR §3.1, §4.1, §A.1).

Every line is one query-positive pair (A_i, B_i):

    {"id": "ret-0001",                      # unique within the file
     "task": "retrieval",                   # retrieval | moment | classification | qa
     "query":    {"text": "a red square appears"},
     "positive": {"video": {"path": "videos/v0003.mp4"}},
     "candidates": [{"video": {"path": "videos/v0003.mp4"}}, {"video": {"path": "videos/v0007.mp4"}}],
     "group": "v0003"}                      # source video: co-positives of one group are masked (Eq. 11)

A side is ``{"text": str}``, ``{"video": VIDEO}`` or both (video + question for QA; the text then
conditions the backbone's clip encoding). ``VIDEO`` is ``{"path": str, "start_s": float?,
"end_s": float?, "frames": [int]?}``: a whole video, a temporal window of it (moment retrieval), and
optionally the already selected frame indices. Frames are *referenced* by index into the source video
and decoded on demand; nothing is copied (§A.2). Relative paths resolve against the JSONL file's folder.

``candidates`` is the bounded candidate set used for Hit@k (it must contain the positive, as QA
options contain the answer; §A.3). Per task:

    retrieval       query text            -> positive video           candidates: videos
    moment          query text            -> positive video window    candidates: windows
    classification  query video           -> positive label text      candidates: label texts
    qa              query video + question -> positive answer text     candidates: option texts
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.files import atomic_open

logger = logging.getLogger(__name__)

__all__ = [
    "TASKS",
    "DataError",
    "Pair",
    "Side",
    "VideoRef",
    "combine_pair_sets",
    "load_pairs",
    "pair_from_dict",
    "write_pairs",
]

TASKS = ("retrieval", "moment", "classification", "qa")
# Which side must carry a video, which a text (the query-positive interface of §3.1).
_TASK_SHAPES = {
    "retrieval": ("text", "video"),
    "moment": ("text", "video"),
    "classification": ("video", "text"),
    "qa": ("video+text", "text"),
}


class DataError(ValueError):
    """A malformed pair file; the message names the file, line and field."""


@dataclass(frozen=True)
class VideoRef:
    """A video, optionally a [start_s, end_s] window of it, optionally with preselected frames."""

    path: str
    start_s: float | None = None
    end_s: float | None = None
    frames: tuple[int, ...] | None = None

    def key(self) -> str:
        """Stable identity of this reference (the feature-cache key's video part)."""
        window = "" if self.start_s is None and self.end_s is None else f"@{self.start_s}-{self.end_s}"
        frames = "" if self.frames is None else "#" + ",".join(map(str, self.frames))
        return f"{self.path}{window}{frames}"

    def to_dict(self) -> dict:
        out: dict = {"path": self.path}
        if self.start_s is not None:
            out["start_s"] = self.start_s
        if self.end_s is not None:
            out["end_s"] = self.end_s
        if self.frames is not None:
            out["frames"] = list(self.frames)
        return out


@dataclass(frozen=True)
class Side:
    """One side of a pair or one candidate: text, video, or video conditioned on a text (QA)."""

    text: str | None = None
    video: VideoRef | None = None

    @property
    def kind(self) -> str:
        if self.video is not None and self.text is not None:
            return "video+text"
        return "video" if self.video is not None else "text"

    def key(self) -> str:
        if self.video is None:
            return f"text:{self.text}"
        cond = "" if self.text is None else f"|{self.text}"
        return f"video:{self.video.key()}{cond}"

    def to_dict(self) -> dict:
        out: dict = {}
        if self.text is not None:
            out["text"] = self.text
        if self.video is not None:
            out["video"] = self.video.to_dict()
        return out


@dataclass(frozen=True)
class Pair:
    id: str
    task: str
    query: Side
    positive: Side
    candidates: tuple[Side, ...] = ()
    group: str | None = None
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def input_format(self) -> str:
        """Sub-batch key (§3.4, interleaved sub-batching): task and input format."""
        return f"{self.task}:{self.query.kind}->{self.positive.kind}"

    @property
    def target_index(self) -> int:
        """Position of the positive within ``candidates`` (-1 when there are none)."""
        key = self.positive.key()
        for i, c in enumerate(self.candidates):
            if c.key() == key:
                return i
        return -1

    def to_dict(self) -> dict:
        out = {
            "id": self.id,
            "task": self.task,
            "query": self.query.to_dict(),
            "positive": self.positive.to_dict(),
        }
        if self.candidates:
            out["candidates"] = [c.to_dict() for c in self.candidates]
        if self.group is not None:
            out["group"] = self.group
        if self.meta:
            out["meta"] = self.meta
        return out


def _video_ref(raw, base: Path | None, where: str) -> VideoRef:
    if isinstance(raw, str):
        raw = {"path": raw}
    if not isinstance(raw, dict) or not isinstance(raw.get("path"), str) or not raw["path"]:
        raise DataError(f"{where}: 'video' must be a path string or an object with a non-empty 'path'")
    unknown = set(raw) - {"path", "start_s", "end_s", "frames"}
    if unknown:
        raise DataError(f"{where}: unknown video fields {sorted(unknown)}")
    path = Path(raw["path"]).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    start, end = raw.get("start_s"), raw.get("end_s")
    for name, value in (("start_s", start), ("end_s", end)):
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or value < 0):
            raise DataError(f"{where}: {name} must be a non-negative number, got {value!r}")
    if start is not None and end is not None and not end > start:
        raise DataError(f"{where}: end_s ({end}) must be greater than start_s ({start})")
    frames = raw.get("frames")
    if frames is not None:
        if (
            not isinstance(frames, list)
            or not frames
            or not all(isinstance(f, int) and not isinstance(f, bool) and f >= 0 for f in frames)
        ):
            raise DataError(f"{where}: 'frames' must be a non-empty list of non-negative frame indices")
        if any(b <= a for a, b in zip(frames, frames[1:], strict=False)):
            raise DataError(f"{where}: 'frames' must be strictly increasing (chronological order, Eq. 2)")
        frames = tuple(frames)
    return VideoRef(
        path=os.path.normpath(str(path)),
        start_s=None if start is None else float(start),
        end_s=None if end is None else float(end),
        frames=frames,
    )


def _side(raw, base: Path | None, where: str) -> Side:
    if isinstance(raw, str):
        raw = {"text": raw}
    if not isinstance(raw, dict):
        raise DataError(f"{where}: must be an object with 'text' and/or 'video'")
    unknown = set(raw) - {"text", "video"}
    if unknown:
        raise DataError(f"{where}: unknown fields {sorted(unknown)} (allowed: text, video)")
    text = raw.get("text")
    if text is not None and (not isinstance(text, str) or not text.strip()):
        raise DataError(f"{where}: 'text' must be a non-empty string")
    video = _video_ref(raw["video"], base, f"{where}.video") if raw.get("video") is not None else None
    if text is None and video is None:
        raise DataError(f"{where}: needs 'text' and/or 'video'")
    return Side(text=text, video=video)


def pair_from_dict(raw: dict, *, base: str | os.PathLike | None = None, where: str = "pair") -> Pair:
    """Validate one decoded JSONL object; raises :class:`DataError` naming the offending field."""
    if not isinstance(raw, dict):
        raise DataError(f"{where}: each line must be a JSON object")
    base_path = Path(base) if base is not None else None
    unknown = set(raw) - {"id", "task", "query", "positive", "candidates", "group", "meta", "split"}
    if unknown:
        raise DataError(f"{where}: unknown fields {sorted(unknown)}")
    pid = raw.get("id")
    if not isinstance(pid, str | int) or isinstance(pid, bool) or str(pid) == "":
        raise DataError(f"{where}: 'id' must be a non-empty string or integer")
    task = raw.get("task")
    if task not in TASKS:
        raise DataError(f"{where}: 'task' must be one of {TASKS}, got {task!r}")
    for name in ("query", "positive"):
        if name not in raw:
            raise DataError(f"{where}: missing '{name}'")
    query = _side(raw["query"], base_path, f"{where}.query")
    positive = _side(raw["positive"], base_path, f"{where}.positive")
    want_q, want_p = _TASK_SHAPES[task]
    if query.kind != want_q and not (want_q == "video" and query.kind == "video+text"):
        raise DataError(f"{where}: a {task} query must be {want_q}, got {query.kind}")
    if positive.kind != want_p:
        raise DataError(f"{where}: a {task} positive must be {want_p}, got {positive.kind}")
    raw_cands = raw.get("candidates") or []
    if not isinstance(raw_cands, list):
        raise DataError(f"{where}: 'candidates' must be a list")
    cands = tuple(_side(c, base_path, f"{where}.candidates[{i}]") for i, c in enumerate(raw_cands))
    for i, c in enumerate(cands):
        if c.kind != positive.kind:
            raise DataError(
                f"{where}.candidates[{i}]: must be {positive.kind} like the positive, got {c.kind}"
            )
    keys = [c.key() for c in cands]
    if len(set(keys)) != len(keys):
        raise DataError(f"{where}: 'candidates' contains duplicates")
    if cands and positive.key() not in keys:
        raise DataError(f"{where}: 'candidates' must contain the positive (the bounded candidate set, §A.3)")
    group = raw.get("group")
    if group is not None and not isinstance(group, str | int):
        raise DataError(f"{where}: 'group' must be a string or integer")
    meta = raw.get("meta") or {}
    if not isinstance(meta, dict):
        raise DataError(f"{where}: 'meta' must be an object")
    return Pair(
        id=str(pid),
        task=task,
        query=query,
        positive=positive,
        candidates=cands,
        group=None if group is None else str(group),
        meta=meta,
    )


def load_pairs(path: str | os.PathLike, *, check_files: bool = True) -> list[Pair]:
    """Read and validate a JSONL pair file. Blank lines are skipped; ids must be unique."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such pair file")
    pairs: list[Pair] = []
    seen: set[str] = set()
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{p}:{lineno}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: invalid JSON ({exc.msg})") from exc
            pair = pair_from_dict(raw, base=p.parent, where=where)
            if pair.id in seen:
                raise DataError(f"{where}: duplicate id {pair.id!r}")
            seen.add(pair.id)
            pairs.append(pair)
    if not pairs:
        raise DataError(f"{p}: no pairs")
    if check_files:
        missing = sorted({v.path for v in _videos(pairs) if not Path(v.path).is_file()})
        if missing:
            more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
            raise DataError(f"{p}: referenced videos not found: {missing[:3]}{more}")
    logger.info("loaded %d pairs from %s", len(pairs), p)
    return pairs


def combine_pair_sets(sets: Sequence[Sequence[Pair]]) -> list[Pair]:
    """Pairs of several files as one training set. With more than one set, every id and group is
    prefixed with the set's position ("1:tr0-007-ret"): files written by separate runs reuse the same
    ids and group names for different videos, and two groups that only share a name must not mask
    each other's positives as co-positives (Eq. 11)."""
    if len(sets) == 1:
        return list(sets[0])
    return [
        dataclasses.replace(p, id=f"{n}:{p.id}", group=None if p.group is None else f"{n}:{p.group}")
        for n, pairs in enumerate(sets)
        for p in pairs
    ]


def _videos(pairs: Iterable[Pair]) -> Iterable[VideoRef]:
    for pair in pairs:
        for side in (pair.query, pair.positive, *pair.candidates):
            if side.video is not None:
                yield side.video


def write_pairs(path: str | os.PathLike, pairs: Iterable[Pair], *, relative: bool = True) -> Path:
    """Write pairs as JSONL, atomically; with ``relative`` the video paths are written relative to
    the file's own folder (how ``load_pairs`` resolves them), so the folder can be moved."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    root = p.parent.resolve() if relative else None
    with atomic_open(p, "w") as f:
        for pair in pairs:
            d = pair.to_dict()
            if root is not None:
                for side in [d["query"], d["positive"], *d.get("candidates", [])]:
                    if "video" in side:
                        side["video"]["path"] = os.path.relpath(side["video"]["path"], root)
            f.write(json.dumps(d, sort_keys=False) + "\n")
    return p
