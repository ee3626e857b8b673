"""Order and count training data for a rerank head: what stage 2 hands the head, rendered directly.

Stage 2 gives a rerank head the K' frames that query-aware selection picked from a candidate, in
chronological order, cut into clips (Eq. 2-3). For an ordered query ("a red square appears, then a
blue circle appears") those frames hold a run of each event among haystack frames; for a count query
("... appears twice") one run or two runs of one event with haystack between. Long world videos
(`training/synthetic.py`, `--kind retrieval`) teach this slowly: each is minutes long, most of its
frames are never selected, and it yields one or two ordered queries.

A *sequence video* here is those K' frames and nothing else: ``frames`` frames spread over 1-5 min
(so their timestamps are a long video's), events on runs of 1-4 consecutive frames, everything else
a shapes-world haystack (`world.render`). Query-aware selection of a video with at most K' bank
frames keeps every frame (`training.features`), so training sees exactly these frames.

Families share one haystack and differ only in time structure, so the hard negative of each query
is its family's other videos:

    order family   A-then-B, B-then-A, A alone, B alone   "A then B" -> A-then-B (and the mirror)
    count family   A once, A twice (two runs, haystack between)   "A twice" / "A once"
    single         one event                                 "a red square appears"

Run lengths overlap between counts (a single showing of 1-4 frames, two showings of 1-3 each), so
counting event frames does not separate "once" from "twice": only seeing two separate showings does.
Every query's candidates are its family (less the positive) and random other videos that do not show
the query's events in a way that would also match it. Writes ``{split}.jsonl`` (the `qaslr train`
format, meta kinds ``single``, ``ordered``, ``counted``), ``{split}_truth.jsonl`` (each video's runs:
event, first frame, length) and the videos under ``videos/``.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.data import Pair, Side, VideoRef, write_pairs
from world.render import Event, VideoSpec, random_haystack
from world.vocab import EVENTS, PHRASINGS, EventKind, count_text, order_text

logger = logging.getLogger(__name__)

__all__ = ["TimeSetConfig", "make_time_set"]


@dataclass(frozen=True)
class TimeSetConfig:
    """Families per split (train, val) and the shape of a sequence video."""

    order_families: tuple[int, int] = (160, 16)
    count_families: tuple[int, int] = (160, 16)
    singles: tuple[int, int] = (160, 16)
    frames: int = 32  # K': the frames stage 2 selects per candidate (QASLR_DEFAULT_FRAMES)
    span_s: tuple[float, float] = (60.0, 300.0)  # the time those frames spread over
    candidates: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        if self.frames < 12:
            raise ValueError("frames must be >= 12 (two runs with haystack around them)")
        if self.candidates < 2:
            raise ValueError("candidates must be >= 2")
        for name in ("order_families", "count_families", "singles"):
            if min(getattr(self, name)) < 0:
                raise ValueError(f"{name} must be >= 0")


@dataclass(frozen=True)
class _Video:
    id: str
    path: str
    runs: tuple[tuple[EventKind, int, int], ...]  # (event, first frame, run length), in time order
    family: str

    def shows(self, kind: EventKind) -> bool:
        return any(k == kind for k, _, _ in self.runs)


class _Maker:
    def __init__(self, config: TimeSetConfig, out: Path, split: str, rng: np.random.Generator):
        self.cfg, self.out, self.split, self.rng = config, out, split, rng
        self.videos: list[_Video] = []
        self.queries: list[tuple[str, str, str, list[str]]] = []  # (kind, text, positive id, family ids)

    def _kind(self) -> EventKind:
        return EVENTS[int(self.rng.integers(len(EVENTS)))]

    def _two_kinds(self) -> tuple[EventKind, EventKind]:
        a, b = self.rng.choice(len(EVENTS), size=2, replace=False)
        return EVENTS[int(a)], EVENTS[int(b)]

    def _render(self, vid: str, family: str, runs, look) -> _Video:
        from world.media import write_video
        from world.render import Renderer

        fps, w, h, haystack, seed, codec = look
        n = self.cfg.frames
        events = []
        for kind, first, length in runs:
            start = max(0.0, (first - 0.3) / fps)
            end = (first + length - 1 + 0.3) / fps
            events.append(Event(kind, start, end, size=None))
        spec = VideoSpec(w, h, fps, n / fps, tuple(events), haystack, seed=seed)
        renderer = Renderer(spec)
        rel = f"videos/{self.split}/{vid}.mp4"
        path = self.out / rel
        if not path.is_file():
            write_video(path, [renderer.frame(i) for i in range(n)], fps=fps, codec=codec)
        video = _Video(vid, str(path), tuple(runs), family)
        self.videos.append(video)
        return video

    def _look(self):
        """One family's haystack, geometry and timing (shared by its videos)."""
        rng = self.rng
        span = float(rng.uniform(*self.cfg.span_s))
        fps = self.cfg.frames / span
        short = int(rng.integers(96, 201)) // 2 * 2
        aspect = float(rng.choice([1.0, 4 / 3, 16 / 9, 3 / 4]))
        w, h = (int(short * aspect) // 2 * 2, short) if aspect >= 1 else (short, int(short / aspect) // 2 * 2)
        codec = str(rng.choice(["h264", "mpeg4"]))
        return fps, w, h, random_haystack(rng), int(rng.integers(2**31)), codec

    def _run(self, lo: int, hi: int, lengths) -> tuple[int, int]:
        """A run of a length from ``lengths`` starting in [lo, hi - length]."""
        length = int(self.rng.choice(lengths))
        return int(self.rng.integers(lo, max(lo, hi - length) + 1)), length

    def order_family(self, f: int) -> None:
        n, look, fam = self.cfg.frames, self._look(), f"{self.split[:2]}o{f:03d}"
        a, b = self._two_kinds()
        p1, r1 = self._run(0, n - 6, (1, 2, 2, 3, 3, 4))
        p2, r2 = self._run(p1 + r1 + 1, n, (1, 2, 2, 3, 3, 4))
        ab = self._render(f"{fam}ab", fam, ((a, p1, r1), (b, p2, r2)), look)
        ba = self._render(f"{fam}ba", fam, ((b, p1, r1), (a, p2, r2)), look)
        only_a = self._render(f"{fam}a", fam, ((a, p1, r1),), look)
        only_b = self._render(f"{fam}b", fam, ((b, p2, r2),), look)
        family = [ab.id, ba.id, only_a.id, only_b.id]
        for first, second, video in ((a, b, ab), (b, a, ba)):
            text = order_text(first, second, int(self.rng.integers(2)))
            self.queries.append(("ordered", text, video.id, family))

    def count_family(self, f: int) -> None:
        n, look, fam = self.cfg.frames, self._look(), f"{self.split[:2]}c{f:03d}"
        a = self._kind()
        p1, r1 = self._run(0, n - 8, (1, 2, 2, 3))
        gap = int(self.rng.choice([1, 2, 3, 4, 6, 8]))
        p2, r2 = self._run(min(p1 + r1 + gap, n - 3), n, (1, 2, 2, 3))
        twice = self._render(f"{fam}t", fam, ((a, p1, r1), (a, p2, r2)), look)
        # the single showing: one of the two runs, or one run as long as both together (up to 4)
        keep = int(self.rng.integers(3))
        runs = [(a, p1, r1), (a, p2, r2), (a, p1, min(4, r1 + r2))][keep]
        once = self._render(f"{fam}o", fam, (runs,), look)
        family = [twice.id, once.id]
        self.queries.append(("counted", count_text(a, 2, int(self.rng.integers(2))), twice.id, family))
        self.queries.append(("counted", count_text(a, 1, int(self.rng.integers(2))), once.id, family))

    def single(self, i: int) -> None:
        n, look, fam = self.cfg.frames, self._look(), f"{self.split[:2]}s{i:03d}"
        a = self._kind()
        p, r = self._run(0, n, (1, 2, 2, 3, 3, 4))
        video = self._render(fam, fam, ((a, p, r),), look)
        text = a.text(int(self.rng.integers(len(PHRASINGS))))
        self.queries.append(("single", text, video.id, [video.id]))

    def pairs(self) -> list[Pair]:
        by_id = {v.id: v for v in self.videos}
        out = []
        for q, (kind, text, pos_id, family) in enumerate(self.queries):
            pos = by_id[pos_id]
            kinds = {k for k, _, _ in pos.runs}
            negatives = [by_id[i] for i in family if i != pos_id]
            # other videos: for a single-event query none that show its event (they would match too)
            pool = [
                v for v in self.videos
                if v.family != pos.family and not (kind == "single" and any(v.shows(k) for k in kinds))
                and not (kind == "counted" and v.shows(pos.runs[0][0]))
            ]  # fmt: skip
            need = max(0, self.cfg.candidates - 1 - len(negatives))
            negatives += [pool[j] for j in self.rng.choice(len(pool), min(need, len(pool)), replace=False)]
            cands = [Side(video=VideoRef(v.path)) for v in [pos, *negatives]]
            self.rng.shuffle(cands)
            out.append(
                Pair(
                    id=f"{pos.family}-{q}",
                    task="retrieval",
                    query=Side(text=text),
                    positive=Side(video=VideoRef(pos.path)),
                    candidates=tuple(cands),
                    group=f"time/{self.split}/{pos.family}",
                    meta={"kind": kind},
                )
            )
        return out


def make_time_set(
    out_dir: str | os.PathLike, config: TimeSetConfig = TimeSetConfig(), *, progress: bool = True
) -> dict[str, Path]:
    """Render (or reuse) the sequence videos and write ``train.jsonl`` and ``val.jsonl``."""
    from tqdm import tqdm

    out = Path(out_dir).resolve()
    written = {}
    for s, split in enumerate(("train", "val")):
        rng = np.random.default_rng([config.seed, 0x7153, s])
        maker = _Maker(config, out, split, rng)
        jobs = (
            [(maker.order_family, i) for i in range(config.order_families[s])]
            + [(maker.count_family, i) for i in range(config.count_families[s])]
            + [(maker.single, i) for i in range(config.singles[s])]
        )
        for job, i in tqdm(jobs, desc=f"rendering {split}", unit="family", disable=not progress):
            job(i)
        pairs = maker.pairs()
        if pairs:
            written[split] = write_pairs(out / f"{split}.jsonl", pairs)
            truth = [
                {
                    "id": v.id,
                    "path": v.path,
                    "family": v.family,
                    "runs": [[k.name, p, n] for k, p, n in v.runs],
                }
                for v in maker.videos
            ]
            (out / f"{split}_truth.jsonl").write_text("".join(json.dumps(t) + "\n" for t in truth))
        logger.info("%s: %d videos, %d pairs", split, len(maker.videos), len(pairs))
    return written
