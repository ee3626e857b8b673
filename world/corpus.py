"""World corpora: folders of world videos with their ground truth, for demos, tests and benchmarks.

``make_corpus(out_dir, CorpusConfig(...))`` writes

    videos/<id>.<ext>     the videos (random size and aspect ratio, fps, codec and container)
    videos.jsonl          an ``indexer build`` manifest: id, path, metadata (title, duration)
    truth.json            per video: its events (name, start_s, end_s) and the queries that must
                          find it; plus the config

Two kinds of video:
- ``single``: a long haystack with one brief event; every single video's event is distinct
  (at most 32 per corpus), so each query has exactly one right answer;
- ``order``: mirror pairs, the same two events as "A then B" in one video and "B then A" in the
  other, queried with ordered phrasings ("a red square appears, then a blue circle appears");
- ``count``: count pairs, one event kind shown once in one video and twice in the other (the two
  showings at least :data:`~world.vocab.COUNT_GAP_S` apart, haystack between), queried with count
  phrasings ("a red square appears once" / "a red square appears twice"). Both videos share the
  haystack (seed, size, fps, codec, duration) and the once video's showing is one of the twice
  video's two, drawn alike: the frames differ only during the other showing. Every pair's event is
  distinct (at most 32 pairs).

The manifest gives the videos of order and count pairs a ``group`` metadata field (the pair), so a
search can be restricted to one pair.

A corpus is deterministic from its config (count pairs draw from a stream of their own, so adding
them leaves the other videos as they were); ``make_corpus`` skips the work when ``truth.json``
already records the same config, so benchmarks and tests render each corpus once per machine.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from world.media import write_video
from world.render import Event, Renderer, VideoSpec, random_haystack
from world.vocab import (
    COUNT_GAP_S,
    COUNT_PHRASINGS,
    EVENTS,
    ORDER_PHRASINGS,
    PHRASINGS,
    count_text,
    order_text,
)

logger = logging.getLogger(__name__)

# (codec, container) pairs the world allows; a corpus cycles through them.
FORMATS = (("h264", ".mp4"), ("mpeg4", ".avi"), ("vp9", ".webm"), ("h264", ".mkv"), ("mpeg4", ".mp4"))
ASPECTS = ((4, 3), (16, 9), (1, 1), (9, 16), (3, 2), (3, 4))


@dataclass(frozen=True)
class CorpusConfig:
    videos: int = 32  # single-event videos (distinct events: at most 32)
    order_pairs: int = 0  # mirror pairs (2 videos each)
    count_pairs: int = 0  # once / twice pairs (2 videos each; distinct events: at most 32)
    min_duration_s: float = 120.0
    max_duration_s: float = 300.0
    event_s: tuple[float, float] = (2.0, 3.0)
    fps: tuple[float, ...] = (4.0, 6.0, 8.0)
    short_side: tuple[int, int] = (96, 200)  # source frame's short side, pixels
    formats: tuple[tuple[str, str], ...] = FORMATS
    prefix: str = "w"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.videos > len(EVENTS) or self.videos < 0:
            raise ValueError(f"at most {len(EVENTS)} single-event videos (their events are distinct)")
        if not 0 <= self.count_pairs <= len(EVENTS):
            raise ValueError(f"at most {len(EVENTS)} count pairs (their events are distinct)")
        if self.videos + self.order_pairs + self.count_pairs == 0:
            raise ValueError("a corpus needs at least one video")
        if not 0 < self.min_duration_s <= self.max_duration_s:
            raise ValueError("need 0 < min_duration_s <= max_duration_s")
        if not 1.0 <= self.event_s[0] <= self.event_s[1]:
            raise ValueError("events last at least 1 s")
        if self.max_duration_s < 2 * self.event_s[1] + 10:
            raise ValueError("videos must be long enough for two events and some haystack")
        if self.count_pairs and self.max_duration_s < count_min_duration(self):
            raise ValueError(
                f"count pairs need videos of at least {count_min_duration(self):g} s (two showings "
                f"{COUNT_GAP_S:g} s apart, 5 s from either end); max_duration_s is {self.max_duration_s:g}"
            )


def count_min_duration(config: CorpusConfig) -> float:
    """The shortest video that fits a twice-shown event: 5 s of haystack at either end, two showings
    of the longest event length, and :data:`~world.vocab.COUNT_GAP_S` between them."""
    return 2 * 5.0 + 2 * config.event_s[1] + COUNT_GAP_S


@dataclass(frozen=True)
class TruthVideo:
    id: str
    path: str  # relative to the corpus folder
    kind: str  # "single" | "order" | "count"
    duration_s: float
    fps: float
    width: int
    height: int
    codec: str
    events: tuple[tuple[str, float, float], ...]  # (event name, start_s, end_s), chronological
    queries: tuple[str, ...]  # texts for which this video is the one right answer
    group: str = ""  # the mirror pair, for order videos; the once / twice pair, for count videos


@dataclass
class Corpus:
    root: Path
    manifest: Path
    videos: list[TruthVideo]

    def by_id(self) -> dict[str, TruthVideo]:
        return {v.id: v for v in self.videos}

    def queries(self, kind: str | None = None) -> list[tuple[str, str]]:
        """(query text, the right video id) for every query, optionally of one kind of video."""
        return [(q, v.id) for v in self.videos if kind in (None, v.kind) for q in v.queries]


def _geometry(config: CorpusConfig, rng: np.random.Generator, i: int, min_duration_s: float | None = None):
    aw, ah = ASPECTS[rng.integers(len(ASPECTS))]
    short = int(rng.integers(config.short_side[0], config.short_side[1] + 1))
    w, h = (short * aw // ah, short) if aw >= ah else (short, short * ah // aw)
    fps = float(rng.choice(config.fps))
    codec, ext = config.formats[i % len(config.formats)]
    lo = config.min_duration_s if min_duration_s is None else max(config.min_duration_s, min_duration_s)
    duration = float(np.round(rng.uniform(lo, config.max_duration_s), 1))
    return w - w % 2, h - h % 2, fps, codec, ext, duration


def _plan(config: CorpusConfig) -> list[tuple[TruthVideo, VideoSpec]]:
    rng = np.random.default_rng(config.seed)
    plans = []

    def geometry(i: int):
        return _geometry(config, rng, i)

    def event_at(kind, lo: float, hi: float) -> Event:
        length = float(np.round(rng.uniform(*config.event_s), 2))
        start = float(np.round(rng.uniform(lo, hi - length), 2))
        return Event(kind, start, start + length)

    kinds = [EVENTS[int(k)] for k in rng.permutation(len(EVENTS))[: config.videos]]
    for i, kind in enumerate(kinds):
        w, h, fps, codec, ext, duration = geometry(i)
        event = event_at(kind, 5.0, duration - 5.0)
        vid = f"{config.prefix}{i:03d}"
        phrasing = int(rng.integers(len(PHRASINGS)))
        truth = TruthVideo(
            vid, f"videos/{vid}{ext}", "single", duration, fps, w, h, codec,
            ((kind.name, event.start_s, event.end_s),), (kind.text(phrasing),),
        )  # fmt: skip
        spec = VideoSpec(w, h, fps, duration, (event,), random_haystack(rng), seed=int(rng.integers(2**31)))
        plans.append((truth, spec))
    for p in range(config.order_pairs):
        a, b = (EVENTS[int(k)] for k in rng.choice(len(EVENTS), size=2, replace=False))
        for m, (first, second) in enumerate(((a, b), (b, a))):
            w, h, fps, codec, ext, duration = geometry(config.videos + 2 * p + m)
            half = duration / 2
            e1, e2 = event_at(first, 5.0, half - 2.0), event_at(second, half + 2.0, duration - 5.0)
            vid = f"{config.prefix}o{p:02d}{'ab'[m]}"
            phrasing = int(rng.integers(len(ORDER_PHRASINGS)))
            truth = TruthVideo(
                vid, f"videos/{vid}{ext}", "order", duration, fps, w, h, codec,
                ((first.name, e1.start_s, e1.end_s), (second.name, e2.start_s, e2.end_s)),
                (order_text(first, second, phrasing),), group=f"{config.prefix}o{p:02d}",
            )  # fmt: skip
            spec = VideoSpec(
                w, h, fps, duration, (e1, e2), random_haystack(rng), seed=int(rng.integers(2**31))
            )
            plans.append((truth, spec))
    return plans + _plan_counts(config)


def _plan_counts(config: CorpusConfig) -> list[tuple[TruthVideo, VideoSpec]]:
    """Count pairs, from their own random stream (the other videos' draws stay as they were)."""
    if not config.count_pairs:
        return []
    rng = np.random.default_rng([config.seed, 0xC0])
    need = count_min_duration(config)
    plans = []
    kinds = [EVENTS[int(k)] for k in rng.permutation(len(EVENTS))[: config.count_pairs]]
    for p, kind in enumerate(kinds):
        i = config.videos + 2 * config.order_pairs + p
        w, h, fps, codec, ext, duration = _geometry(config, rng, i, need)
        duration = max(duration, need)  # rounding to 0.1 s may fall just short
        l1, l2 = (float(np.round(rng.uniform(*config.event_s), 2)) for _ in range(2))
        s1 = float(np.round(rng.uniform(5.0, duration - 5.0 - l2 - COUNT_GAP_S - l1), 2))
        e1 = float(np.round(s1 + l1, 2))
        s2 = max(float(np.round(rng.uniform(e1 + COUNT_GAP_S, duration - 5.0 - l2), 2)), e1 + COUNT_GAP_S)
        showings = (Event(kind, s1, e1), Event(kind, s2, float(np.round(s2 + l2, 2))))
        kept = int(rng.integers(2))  # the once video's showing
        haystack, seed = random_haystack(rng), int(rng.integers(2**31))
        group = f"{config.prefix}c{p:02d}"
        for times in (1, 2):
            # The kept showing comes first in both specs, so the renderer places and colours it alike.
            events = (showings[kept],) if times == 1 else (showings[kept], showings[1 - kept])
            vid = f"{group}{'ot'[times - 1]}"
            phrasing = int(rng.integers(len(COUNT_PHRASINGS[times])))
            truth = TruthVideo(
                vid, f"videos/{vid}{ext}", "count", duration, fps, w, h, codec,
                tuple((kind.name, e.start_s, e.end_s) for e in sorted(events, key=lambda e: e.start_s)),
                (count_text(kind, times, phrasing),), group=group,
            )  # fmt: skip
            plans.append((truth, VideoSpec(w, h, fps, duration, events, haystack, seed=seed)))
    return plans


def _recorded(config: CorpusConfig) -> dict:
    """The config as truth.json records it (without count_pairs when there are none, so corpora made
    before count pairs existed keep their truth.json and cache)."""
    data = json.loads(json.dumps(asdict(config)))
    if not config.count_pairs:
        del data["count_pairs"]
    return data


def make_corpus(
    out_dir: str | Path, config: CorpusConfig = CorpusConfig(), *, progress: bool = False
) -> Corpus:
    """Render (or reuse) the corpus of ``config`` under ``out_dir``."""
    root = Path(out_dir).resolve()
    truth_file = root / "truth.json"
    wanted = _recorded(config)
    if truth_file.exists():
        data = json.loads(truth_file.read_text())
        if data.get("config") == wanted and all((root / v["path"]).exists() for v in data["videos"]):
            return load_corpus(root)
    plans = _plan(config)
    (root / "videos").mkdir(parents=True, exist_ok=True)
    iterator = plans
    if progress:
        from tqdm import tqdm

        iterator = tqdm(plans, desc="render world videos", unit="video")
    for truth, spec in iterator:
        write_video(root / truth.path, Renderer(spec).frames(), fps=spec.fps, codec=truth.codec)
    lines = []
    for truth, _ in plans:
        title = " then ".join(name for name, _, _ in truth.events)
        if truth.kind == "count":
            title = f"{truth.events[0][0]}, {('once', 'twice')[len(truth.events) - 1]}"
        meta = {"title": title, "kind": truth.kind, "duration_s": truth.duration_s}
        if truth.group:  # order and count pairs: a search restricted to the pair filters on it
            meta["group"] = truth.group
        lines.append(json.dumps({"id": truth.id, "path": truth.path, "metadata": meta}))
    (root / "videos.jsonl").write_text("\n".join(lines) + "\n")
    truth_file.write_text(
        json.dumps({"config": wanted, "videos": [asdict(t) for t, _ in plans]}, indent=1) + "\n"
    )
    logger.info("rendered %d world videos under %s", len(plans), root)
    return load_corpus(root)


def load_corpus(root: str | Path) -> Corpus:
    root = Path(root).resolve()
    data = json.loads((root / "truth.json").read_text())
    videos = []
    for v in data["videos"]:
        v = dict(v)
        v["events"] = tuple(tuple(e) for e in v["events"])
        v["queries"] = tuple(v["queries"])
        videos.append(TruthVideo(**v))
    return Corpus(root=root, manifest=root / "videos.jsonl", videos=videos)
