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
  other, queried with ordered phrasings ("a red square appears, then a blue circle appears").

A corpus is deterministic from its config; ``make_corpus`` skips the work when ``truth.json``
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
from world.vocab import EVENTS, ORDER_PHRASINGS, PHRASINGS, order_text

logger = logging.getLogger(__name__)

# (codec, container) pairs the world allows; a corpus cycles through them.
FORMATS = (("h264", ".mp4"), ("mpeg4", ".avi"), ("vp9", ".webm"), ("h264", ".mkv"), ("mpeg4", ".mp4"))
ASPECTS = ((4, 3), (16, 9), (1, 1), (9, 16), (3, 2), (3, 4))


@dataclass(frozen=True)
class CorpusConfig:
    videos: int = 32  # single-event videos (distinct events: at most 32)
    order_pairs: int = 0  # mirror pairs (2 videos each)
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
        if self.videos + self.order_pairs == 0:
            raise ValueError("a corpus needs at least one video")
        if not 0 < self.min_duration_s <= self.max_duration_s:
            raise ValueError("need 0 < min_duration_s <= max_duration_s")
        if not 1.0 <= self.event_s[0] <= self.event_s[1]:
            raise ValueError("events last at least 1 s")
        if self.max_duration_s < 2 * self.event_s[1] + 10:
            raise ValueError("videos must be long enough for two events and some haystack")


@dataclass(frozen=True)
class TruthVideo:
    id: str
    path: str  # relative to the corpus folder
    kind: str  # "single" | "order"
    duration_s: float
    fps: float
    width: int
    height: int
    codec: str
    events: tuple[tuple[str, float, float], ...]  # (event name, start_s, end_s), chronological
    queries: tuple[str, ...]  # texts for which this video is the one right answer
    group: str = ""  # the mirror pair, for order videos


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


def _plan(config: CorpusConfig) -> list[tuple[TruthVideo, VideoSpec]]:
    rng = np.random.default_rng(config.seed)
    plans = []

    def geometry(i: int):
        aw, ah = ASPECTS[rng.integers(len(ASPECTS))]
        short = int(rng.integers(config.short_side[0], config.short_side[1] + 1))
        w, h = (short * aw // ah, short) if aw >= ah else (short, short * ah // aw)
        fps = float(rng.choice(config.fps))
        codec, ext = config.formats[i % len(config.formats)]
        duration = float(np.round(rng.uniform(config.min_duration_s, config.max_duration_s), 1))
        return w - w % 2, h - h % 2, fps, codec, ext, duration

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
    return plans


def make_corpus(
    out_dir: str | Path, config: CorpusConfig = CorpusConfig(), *, progress: bool = False
) -> Corpus:
    """Render (or reuse) the corpus of ``config`` under ``out_dir``."""
    root = Path(out_dir).resolve()
    truth_file = root / "truth.json"
    wanted = json.loads(json.dumps(asdict(config)))
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
        meta = {
            "title": " then ".join(name for name, _, _ in truth.events),
            "kind": truth.kind,
            "duration_s": truth.duration_s,
        }
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
