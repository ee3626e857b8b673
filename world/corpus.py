"""World corpora: folders of world videos with their ground truth, for demos, tests and benchmarks.

``make_corpus(out_dir, CorpusConfig(...))`` writes

    videos/<id>.<ext>     the videos (random size and aspect ratio, fps, codec and container)
    videos.jsonl          an ``indexer build`` manifest: id, path, metadata (title, kind, duration, group)
    truth.json            per video: its events (name, start_s, end_s), its change (motion videos) and
                          the queries that must find it; plus the config

Kinds of video:
- ``single``: a long haystack with one brief event; every single video's event is distinct
  (at most 32 per corpus), so each query has exactly one right answer among the single videos;
- ``order``: mirror pairs, the same two events as "A then B" in one video and "B then A" in the
  other, anywhere in the video with :data:`~world.vocab.ORDER_GAP_S` (3-60 s) of haystack between
  them, over the same haystack at the same times (only which event shows when differs), queried
  with ordered phrasings ("a red square appears, then a blue circle appears", "... after ...",
  "... before ...");
- ``count``: count pairs over the same haystack, one event kind shown once / twice
  (``count_pairs``) or twice / three times (``count3_pairs``), the showings at least
  :data:`~world.vocab.COUNT_GAP_S` apart with haystack between, queried with count phrasings ("a
  red square appears once" / "... twice" / "... three times"). The fewer showings are some of the
  more's, drawn alike: the frames differ only during the extra showing;
- ``motion``: reversal pairs over the same haystack, one changing event (world.vocab.CHANGES: moves
  across, grows or shrinks, turns colour; 3-6 s) played forwards in one video and backwards in the
  other, so the two hold the same frames (world.render, ``Event.backwards``); each is queried with
  the change it shows ("a red square moves from left to right" / "... from right to left").
Every pair's event (and change) is its own, and pairs prefer events no single video shows, so a
query of a pair has one right answer over the whole collection too.

The manifest gives the videos of a pair a ``group`` metadata field, so a search can be restricted
to one pair (within-pair accuracy, chance 0.5) or run over the whole collection.

A corpus is deterministic from its config: single videos draw from the main random stream and each
kind of pair from a stream of its own, so adding pairs of one kind leaves every other video as it
was; ``make_corpus`` skips the work when ``truth.json`` already records the same config, so
benchmarks and tests render each corpus once per machine.
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
    CHANGE_PHRASINGS,
    CHANGE_S,
    CHANGES,
    COLOURS,
    COUNT_GAP_S,
    COUNT_PHRASINGS,
    EVENTS,
    ORDER_GAP_S,
    ORDER_PHRASINGS,
    PHRASINGS,
    Change,
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
    count3_pairs: int = 0  # twice / three times pairs (likewise)
    motion_pairs: int = 0  # reversal pairs (2 videos each; distinct events: at most 32)
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
        if not 0 <= self.count_pairs + self.count3_pairs <= len(EVENTS):
            raise ValueError(f"at most {len(EVENTS)} count pairs (their events are distinct)")
        if not 0 <= self.motion_pairs <= len(EVENTS):
            raise ValueError(f"at most {len(EVENTS)} motion pairs (their events are distinct)")
        if self.videos + self.order_pairs + self.count_pairs + self.count3_pairs + self.motion_pairs == 0:
            raise ValueError("a corpus needs at least one video")
        if not 0 < self.min_duration_s <= self.max_duration_s:
            raise ValueError("need 0 < min_duration_s <= max_duration_s")
        if not 1.0 <= self.event_s[0] <= self.event_s[1]:
            raise ValueError("events last at least 1 s")
        if self.max_duration_s < 2 * self.event_s[1] + 10:
            raise ValueError("videos must be long enough for two events and some haystack")
        for pairs, times in ((self.count_pairs, 2), (self.count3_pairs, 3)):
            need = count_min_duration(self, times)
            if pairs and self.max_duration_s < need:
                raise ValueError(
                    f"count pairs need videos of at least {need:g} s ({times} showings {COUNT_GAP_S:g} s "
                    f"apart, 5 s from either end); max_duration_s is {self.max_duration_s:g}"
                )
        if self.motion_pairs and self.max_duration_s < CHANGE_S[1] + 10:
            raise ValueError(f"motion pairs need videos of at least {CHANGE_S[1] + 10:g} s")


def count_min_duration(config: CorpusConfig, times: int = 2) -> float:
    """The shortest video that fits an event shown ``times`` times: 5 s of haystack at either end,
    the showings at the longest event length, and :data:`~world.vocab.COUNT_GAP_S` between each two."""
    return 2 * 5.0 + times * config.event_s[1] + (times - 1) * COUNT_GAP_S


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
    group: str = ""  # the pair (order, count and motion videos)
    change: str = ""  # motion videos: the change it shows (world.vocab.Change.name)


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
    return plans + _plan_orders(config, kinds) + _plan_counts(config, kinds) + _plan_motions(config, kinds)


def _pair_kinds(rng: np.random.Generator, n: int, singles) -> list:
    """``n`` distinct event kinds for pairs, those no single video shows first."""
    order = [EVENTS[int(k)] for k in rng.permutation(len(EVENTS))]
    taken = set(singles)
    return ([k for k in order if k not in taken] + [k for k in order if k in taken])[:n]


def _plan_orders(config: CorpusConfig, singles) -> list[tuple[TruthVideo, VideoSpec]]:
    """Mirror pairs, from their own random stream: the same haystack, geometry and times, the two
    events swapped."""
    if not config.order_pairs:
        return []
    rng = np.random.default_rng([config.seed, 0x0D])
    plans = []
    firsts = _pair_kinds(rng, config.order_pairs, singles)
    for p, a in enumerate(firsts):
        b = EVENTS[int(rng.choice([k for k in range(len(EVENTS)) if EVENTS[k] != a]))]
        i = config.videos + 2 * p
        lengths = [float(np.round(rng.uniform(*config.event_s), 2)) for _ in range(2)]
        need = 10.0 + sum(lengths) + ORDER_GAP_S[0]
        w, h, fps, codec, ext, duration = _geometry(config, rng, i, need)
        duration = max(duration, need)
        gap = float(
            np.round(rng.uniform(ORDER_GAP_S[0], min(ORDER_GAP_S[1], duration - 10.0 - sum(lengths))), 2)
        )
        s1 = float(np.round(rng.uniform(5.0, duration - 5.0 - sum(lengths) - gap), 2))
        s2 = float(np.round(s1 + lengths[0] + gap, 2))
        haystack, seed = random_haystack(rng), int(rng.integers(2**31))
        group = f"{config.prefix}o{p:02d}"
        for m, (first, second) in enumerate(((a, b), (b, a))):
            e1, e2 = Event(first, s1, s1 + lengths[0]), Event(second, s2, float(np.round(s2 + lengths[1], 2)))
            vid = f"{group}{'ab'[m]}"
            phrasing = int(rng.integers(len(ORDER_PHRASINGS)))
            truth = TruthVideo(
                vid, f"videos/{vid}{ext}", "order", duration, fps, w, h, codec,
                ((first.name, e1.start_s, e1.end_s), (second.name, e2.start_s, e2.end_s)),
                (order_text(first, second, phrasing),), group=group,
            )  # fmt: skip
            plans.append((truth, VideoSpec(w, h, fps, duration, (e1, e2), haystack, seed=seed)))
    return plans


def _plan_counts(config: CorpusConfig, singles) -> list[tuple[TruthVideo, VideoSpec]]:
    """Count pairs (once / twice, then twice / three times), each kind from its own random stream
    (the other videos' draws stay as they were)."""
    plans = []
    used = set()
    for pairs, times, tag, first in (
        (config.count_pairs, 2, 0xC0, 0),
        (config.count3_pairs, 3, 0xC3, config.count_pairs),
    ):
        if not pairs:
            continue
        rng = np.random.default_rng([config.seed, tag])
        kinds = [k for k in _pair_kinds(rng, pairs + len(used), singles) if k not in used][:pairs]
        used.update(kinds)
        for p, kind in enumerate(kinds):
            plans += _count_pair(config, rng, kind, times, first + p)
    return plans


def _count_pair(config: CorpusConfig, rng, kind, times: int, p: int) -> list[tuple[TruthVideo, VideoSpec]]:
    """One count pair: ``kind`` shown ``times - 1`` and ``times`` times over the same haystack."""
    need = count_min_duration(config, times)
    i = config.videos + 2 * config.order_pairs + p
    w, h, fps, codec, ext, duration = _geometry(config, rng, i, need)
    duration = max(duration, need)  # rounding to 0.1 s may fall just short
    lengths = [float(np.round(rng.uniform(*config.event_s), 2)) for _ in range(times)]
    # the slack beyond the shortest layout, shared out at random before, between and after showings
    slack = duration - 10.0 - sum(lengths) - (times - 1) * COUNT_GAP_S
    cuts = np.sort(rng.uniform(0, max(0.0, slack), size=times))
    showings, at = [], 5.0
    for k, length in enumerate(lengths):  # rounded up to 0.01 s: never closer than the gap
        start = float(np.ceil((at + cuts[k] - (cuts[k - 1] if k else 0.0)) * 100) / 100)
        showings.append(Event(kind, start, float(np.round(start + length, 2))))
        at = showings[-1].end_s + COUNT_GAP_S
    dropped = int(rng.integers(times))  # the fewer video lacks this showing
    kept = [e for k, e in enumerate(showings) if k != dropped]
    haystack, seed = random_haystack(rng), int(rng.integers(2**31))
    group = f"{config.prefix}c{p:02d}"
    plans = []
    for n in (times - 1, times):
        # The kept showings come first in both specs, so the renderer places and colours them alike.
        events = tuple(kept) if n < times else (*kept, showings[dropped])
        vid = f"{group}{'otr'[n - 1]}"
        phrasing = int(rng.integers(len(COUNT_PHRASINGS[n])))
        truth = TruthVideo(
            vid, f"videos/{vid}{ext}", "count", duration, fps, w, h, codec,
            tuple((kind.name, e.start_s, e.end_s) for e in sorted(events, key=lambda e: e.start_s)),
            (count_text(kind, n, phrasing),), group=group,
        )  # fmt: skip
        plans.append((truth, VideoSpec(w, h, fps, duration, events, haystack, seed=seed)))
    return plans


def _plan_motions(config: CorpusConfig, singles) -> list[tuple[TruthVideo, VideoSpec]]:
    """Reversal pairs, from their own random stream: one changing event, forwards and backwards,
    over the same haystack."""
    if not config.motion_pairs:
        return []
    rng = np.random.default_rng([config.seed, 0x30])
    plans = []
    for p, kind in enumerate(_pair_kinds(rng, config.motion_pairs, singles)):
        change = str(rng.choice(CHANGES))
        to = None
        if change == "recolour":
            to = str(rng.choice([c for c in COLOURS if c != kind.colour]))
        Change(kind, change, to)  # refuses a change the world does not have
        i = config.videos + 2 * (config.order_pairs + config.count_pairs + config.count3_pairs + p)
        w, h, fps, codec, ext, duration = _geometry(config, rng, i)
        length = float(np.round(rng.uniform(*CHANGE_S), 2))
        start = float(np.round(rng.uniform(5.0, duration - 5.0 - length), 2))
        haystack, seed = random_haystack(rng), int(rng.integers(2**31))
        group = f"{config.prefix}m{p:02d}"
        for backwards in (False, True):
            event = Event(kind, start, float(np.round(start + length, 2)), change=change, to_colour=to,
                          backwards=backwards)  # fmt: skip
            seen = event.seen_change
            vid = f"{group}{'fb'[backwards]}"
            phrasing = int(rng.integers(len(CHANGE_PHRASINGS[seen.change])))
            truth = TruthVideo(
                vid, f"videos/{vid}{ext}", "motion", duration, fps, w, h, codec,
                ((seen.kind.name, event.start_s, event.end_s),), (seen.text(phrasing),), group=group,
                change=seen.name,
            )  # fmt: skip
            plans.append((truth, VideoSpec(w, h, fps, duration, (event,), haystack, seed=seed)))
    return plans


WORLD_VERSION = 2  # 2: order anywhere, count to three, motion and change, static drift capped


def _recorded(config: CorpusConfig) -> dict:
    """The config as truth.json records it, with the world's version (a corpus rendered by an older
    renderer is rendered again); kinds of pair a corpus has none of are left out."""
    data = json.loads(json.dumps(asdict(config)))
    for name in ("count_pairs", "count3_pairs", "motion_pairs"):
        if not data[name]:
            del data[name]
    data["world"] = WORLD_VERSION
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
            title = f"{truth.events[0][0]}, {('once', 'twice', 'three times')[len(truth.events) - 1]}"
        elif truth.kind == "motion":
            title = truth.change
        meta = {"title": title, "kind": truth.kind, "duration_s": truth.duration_s}
        if truth.group:  # pairs: a search restricted to the pair filters on it
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
