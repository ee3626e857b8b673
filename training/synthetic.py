"""Synthetic long-video "needle in a haystack" data for CPU training and evaluation.

Each video is a shapes-world haystack (:mod:`world.render`) with two brief events (the needles): a
solid shape of a world colour ("a red square", "an orange bar", ...) shown for a couple of seconds
at a known time. Videos come in *mirror pairs*: video B shows the same two needles as
video A in the opposite order, so queries that name the order ("a red square appears, then a blue
circle appears") have a hard negative that only a model using clip order can reject (the clip-order
controls of Table 5).

Every video is split into ``windows`` equal windows and each needle lies entirely inside one window,
so moment retrieval (§4.1) has an unambiguous positive window. The records (training/data.py format):

    retrieval       "a red square appears, then a blue circle appears" -> the video
                    candidates: the video, its mirror, other videos of the split
    retrieval       "a red square appears" -> the video; candidates: videos without a red square
    moment          "a red square appears" -> the window that contains it; candidates: all windows
    classification  the video -> "red square, then blue circle"; candidates: the reversed label + others
    qa              the video + "What colour is the square?" -> "red"; options: both needles' colours + 2
    qa              the video + "Which shape appears first?" -> "square"; options: the shapes

Train / validation / test splits share no video (§A.11). ``group`` is the mirror pair (the source
content both videos are cut from), so in-batch co-positives of one pair are masked in the
contrastive denominator (Eq. 11); a pair's own listed candidates (e.g. the mirror, for an ordered
query) always stay negatives.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from training.data import Pair, Side, VideoRef, write_pairs
from world.render import Event, Renderer, random_haystack
from world.render import VideoSpec as WorldVideo
from world.vocab import COLOURS, SHAPES, EventKind, order_text

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyntheticConfig:
    train_videos: int = 96
    val_videos: int = 16
    test_videos: int = 32
    size: int = 128  # frame side in pixels (even; 128 is the tiny-world backbone's working size)
    fps: float = 4.0
    min_duration_s: float = 10.0
    max_duration_s: float = 40.0
    windows: int = 4  # moment-retrieval windows per video
    candidates: int = 4  # bounded candidate-set size for video retrieval (§A.3: 4 or 8)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.size % 2 or self.size < 32:
            raise ValueError(f"size must be even and >= 32, got {self.size}")
        for name in ("train_videos", "val_videos", "test_videos"):
            n = getattr(self, name)
            if n < 4 or n % 2:
                raise ValueError(f"{name} must be an even number >= 4 (videos come in mirror pairs), got {n}")
        if not 0 < self.min_duration_s <= self.max_duration_s:
            raise ValueError("need 0 < min_duration_s <= max_duration_s")
        if self.windows < 2:
            raise ValueError("windows must be >= 2")
        if self.candidates < 2:
            raise ValueError("candidates must be >= 2")
        if self.fps <= 0:
            raise ValueError("fps must be positive")


@dataclass(frozen=True)
class Needle:
    colour: str
    shape: str
    start_s: float
    end_s: float
    window: int

    @property
    def kind(self) -> EventKind:
        return EventKind(self.colour, self.shape)

    @property
    def name(self) -> str:
        return self.kind.name


@dataclass(frozen=True)
class VideoSpec:
    id: str
    path: str
    duration_s: float
    needles: tuple[Needle, Needle]  # in chronological order
    group: str  # the mirror pair: both videos show the same two needles


def render_video(spec: VideoSpec, *, size: int, fps: float, seed: int) -> np.ndarray:
    """Frames of one synthetic video: a random world haystack with the needles -> [F, size, size, 3]."""
    rng = np.random.default_rng(seed)
    events = tuple(Event(n.kind, n.start_s, n.end_s) for n in spec.needles)
    world = WorldVideo(size, size, fps, spec.duration_s, events, random_haystack(rng), seed=seed)
    return np.stack(list(Renderer(world).frames()))


def _plan_videos(cfg: SyntheticConfig, rng: np.random.Generator, count: int, prefix: str) -> list[VideoSpec]:
    kinds = [(c, s) for c in COLOURS for s in SHAPES]
    specs: list[VideoSpec] = []
    for p in range(count // 2):
        # Two needles with different colours and different shapes (so QA questions are unambiguous).
        while True:
            a, b = rng.choice(len(kinds), size=2, replace=False)
            (ca, sa), (cb, sb) = kinds[a], kinds[b]
            if ca != cb and sa != sb:
                break
        for m, order in enumerate((((ca, sa), (cb, sb)), ((cb, sb), (ca, sa)))):
            duration = float(np.round(rng.uniform(cfg.min_duration_s, cfg.max_duration_s), 1))
            win = duration / cfg.windows
            w1, w2 = sorted(rng.choice(cfg.windows, size=2, replace=False))
            length = min(max(2.0, 0.1 * duration), 0.6 * win)
            needles = []
            for (colour, shape), w in zip(order, (w1, w2), strict=True):
                start = float(np.round(w * win + rng.uniform(0.1 * win, 0.9 * win - length), 2))
                needles.append(Needle(colour, shape, start, float(np.round(start + length, 2)), int(w)))
            vid = f"{prefix}{p:03d}{'ab'[m]}"
            specs.append(
                VideoSpec(vid, f"videos/{vid}.mp4", duration, (needles[0], needles[1]), f"{prefix}{p:03d}")
            )
    return specs


def _pairs_for_split(
    cfg: SyntheticConfig, specs: list[VideoSpec], root: Path, rng: np.random.Generator
) -> list[Pair]:
    def vref(spec: VideoSpec, window: int | None = None) -> Side:
        path = str(root / spec.path)
        if window is None:
            return Side(video=VideoRef(path))
        win = spec.duration_s / cfg.windows
        return Side(video=VideoRef(path, start_s=round(window * win, 3), end_s=round((window + 1) * win, 3)))

    pairs: list[Pair] = []
    by_id = {s.id: s for s in specs}
    names = [f"{c} {s}" for c in COLOURS for s in SHAPES]
    for spec in specs:
        n1, n2 = spec.needles
        mirror = by_id[spec.id[:-1] + ("b" if spec.id.endswith("a") else "a")]
        others = [s for s in specs if s.id not in (spec.id, mirror.id)]
        # Ordered retrieval: the mirror is the hard negative (same needles, opposite order).
        pick = rng.choice(len(others), size=min(cfg.candidates - 2, len(others)), replace=False)
        cands = [vref(spec), vref(mirror)] + [vref(others[i]) for i in pick]
        rng.shuffle(cands)
        pairs.append(
            Pair(
                id=f"{spec.id}-ret-order",
                task="retrieval",
                query=Side(text=order_text(n1.kind, n2.kind)),
                positive=vref(spec),
                candidates=tuple(cands),
                group=spec.group,
                meta={"kind": "ordered"},
            )
        )
        for k, needle in enumerate(spec.needles):
            # Single-needle retrieval: negatives are videos without this needle.
            without = [s for s in specs if all(n.name != needle.name for n in s.needles)]
            pick = rng.choice(len(without), size=min(cfg.candidates - 1, len(without)), replace=False)
            cands = [vref(spec)] + [vref(without[i]) for i in pick]
            rng.shuffle(cands)
            pairs.append(
                Pair(
                    id=f"{spec.id}-ret-{k}",
                    task="retrieval",
                    query=Side(text=needle.kind.text(0)),
                    positive=vref(spec),
                    candidates=tuple(cands),
                    group=spec.group,
                    meta={"kind": "single"},
                )
            )
            pairs.append(
                Pair(
                    id=f"{spec.id}-moment-{k}",
                    task="moment",
                    query=Side(text=needle.kind.text(0)),
                    positive=vref(spec, needle.window),
                    candidates=tuple(vref(spec, w) for w in range(cfg.windows)),
                    group=spec.group,
                    meta={"kind": "window", "start_s": needle.start_s, "end_s": needle.end_s},
                )
            )
        label = f"{n1.name}, then {n2.name}"
        wrong = {f"{n2.name}, then {n1.name}"}
        while len(wrong) < 3:
            a, b = rng.choice(len(names), size=2, replace=False)
            if {names[a], names[b]} != {n1.name, n2.name}:
                wrong.add(f"{names[a]}, then {names[b]}")
        options = [label, *sorted(wrong)]
        rng.shuffle(options)
        pairs.append(
            Pair(
                id=f"{spec.id}-cls",
                task="classification",
                query=vref(spec),
                positive=Side(text=label),
                candidates=tuple(Side(text=o) for o in options),
                group=spec.group,
                meta={"kind": "ordered"},
            )
        )
        question = f"What colour is the {n1.shape}?"
        others = [c for c in COLOURS if c not in (n1.colour, n2.colour)]
        colour_options = [
            n1.colour,
            n2.colour,
            *(others[i] for i in rng.choice(len(others), size=2, replace=False)),
        ]
        rng.shuffle(colour_options)
        pairs.append(
            Pair(
                id=f"{spec.id}-qa-colour",
                task="qa",
                query=Side(text=question, video=vref(spec).video),
                positive=Side(text=n1.colour),
                candidates=tuple(Side(text=c) for c in colour_options),
                group=spec.group,
                meta={"kind": "colour"},
            )
        )
        pairs.append(
            Pair(
                id=f"{spec.id}-qa-first",
                task="qa",
                query=Side(text="Which shape appears first?", video=vref(spec).video),
                positive=Side(text=n1.shape),
                candidates=tuple(Side(text=s) for s in SHAPES),
                group=spec.group,
                meta={"kind": "first"},
            )
        )
    return pairs


def make_synthetic(
    out_dir: str | os.PathLike, config: SyntheticConfig = SyntheticConfig()
) -> dict[str, Path]:
    """Write videos/*.mp4, {train,val,test}.jsonl (pairs), {train,val,test}_videos.jsonl (indexer
    manifests) and synthetic.json (the needles' ground truth)."""
    from world.media import write_video

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(config.seed)
    splits = {
        "train": _plan_videos(config, rng, config.train_videos, "tr"),
        "val": _plan_videos(config, rng, config.val_videos, "va"),
        "test": _plan_videos(config, rng, config.test_videos, "te"),
    }
    written: dict[str, Path] = {}
    truth = {"config": asdict(config), "videos": {}}
    for split, specs in splits.items():
        for i, spec in enumerate(specs):
            seed = int(rng.integers(2**31))
            frames = render_video(spec, size=config.size, fps=config.fps, seed=seed)
            write_video(out / spec.path, frames, fps=config.fps)
            truth["videos"][spec.id] = {
                "split": split,
                "path": spec.path,
                "duration_s": spec.duration_s,
                "needles": [asdict(n) for n in spec.needles],
            }
            logger.debug("wrote %s (%d/%d of %s)", spec.path, i + 1, len(specs), split)
        pairs = _pairs_for_split(config, specs, out, rng)
        written[split] = write_pairs(out / f"{split}.jsonl", pairs)
        # The split's videos as an `indexer build` manifest (for end-to-end search evaluation).
        with open(out / f"{split}_videos.jsonl", "w", encoding="utf-8") as f:
            for spec in specs:
                meta = {"split": split, "group": spec.group}
                f.write(json.dumps({"id": spec.id, "path": spec.path, "metadata": meta}) + "\n")
        logger.info("%s: %d videos, %d pairs", split, len(specs), len(pairs))
    (out / "synthetic.json").write_text(json.dumps(truth, indent=1) + "\n")
    return written


# -- long-video retrieval pairs for the two-stage recipe --------------------------------------------


@dataclass(frozen=True)
class RetrievalSetConfig:
    """Long world videos with brief events (the benchmark's conditions) as retrieval pairs."""

    train_corpora: int = 5  # corpora of ``videos`` single-event videos (all events distinct within one)
    val_corpora: int = 1
    test_corpora: int = 1
    videos: int = 32
    order_pairs: int = 8  # mirror pairs per split ("a then b" / "b then a")
    count_pairs: int = 8  # once / twice pairs per split ("a red square appears once" / "... twice")
    min_duration_s: float = 90.0
    max_duration_s: float = 240.0
    candidates: int = 8  # bounded candidate set per query (the positive + hard and random negatives)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.candidates < 2:
            raise ValueError("candidates must be >= 2")
        if min(self.train_corpora, self.val_corpora, self.test_corpora) < 0:
            raise ValueError("corpora per split must be >= 0")
        if self.train_corpora + self.val_corpora + self.test_corpora == 0:
            raise ValueError("corpora: at least one split needs a corpus (0 0 0 writes nothing)")
        if not 2 <= self.videos <= 32:
            raise ValueError("videos must be between 2 and 32")
        if self.order_pairs < 0:
            raise ValueError("order_pairs must be >= 0")
        if not 0 <= self.count_pairs <= 32:
            raise ValueError("count_pairs must be between 0 and 32 (each pair shows its own event)")
        if self.count_pairs:
            from world.corpus import CorpusConfig, count_min_duration

            need = count_min_duration(CorpusConfig())  # the corpora's default event lengths
            if self.max_duration_s < need:
                raise ValueError(
                    f"count pairs need videos of at least {need:g} s (two showings 20 s apart); "
                    f"max_duration_s is {self.max_duration_s:g} (or set count_pairs to 0)"
                )


def _side(corpus, video) -> Side:
    return Side(video=VideoRef(str(corpus.root / video.path)))


def _partner_pairs(
    corpus, kind: str, meta_kind: str, rng: np.random.Generator, candidates: int
) -> list[Pair]:
    """Each ``kind`` video's query -> the video; candidates: its pair partner (the mirror, or the
    other count: the hard negative only that video's query tells apart) and other pairs' videos."""
    videos = [v for v in corpus.videos if v.kind == kind]
    pairs = []
    for video in videos:
        partner = next(v for v in videos if v.group == video.group and v.id != video.id)
        rest = [v for v in videos if v.group != video.group]
        k = min(len(rest), candidates - 2)
        chosen = [partner] + [rest[i] for i in rng.choice(len(rest), k, replace=False)]
        pairs.append(_retrieval_pair(corpus, video, chosen, rng, suffix=kind, kind=meta_kind))
    return pairs


def _retrieval_pair(corpus, video, negatives, rng: np.random.Generator, *, suffix: str, kind: str) -> Pair:
    """``video``'s first query -> ``video``, among it and ``negatives`` in a shuffled order."""
    cands = [_side(corpus, v) for v in [video, *negatives]]
    rng.shuffle(cands)
    return Pair(
        id=f"{video.id}-{suffix}",
        task="retrieval",
        query=Side(text=video.queries[0]),
        positive=_side(corpus, video),
        candidates=tuple(cands),
        group=f"{corpus.root.name}/{video.id}",
        meta={"kind": kind},
    )


def _retrieval_pairs(corpora, order, rng: np.random.Generator, candidates: int, root: Path) -> list[Pair]:
    from world.vocab import parse_event

    pairs: list[Pair] = []
    for corpus in corpora:
        singles = [v for v in corpus.videos if v.kind == "single"]
        for video in singles:
            kind = parse_event(video.events[0][0])
            others = [v for v in singles if v.id != video.id]
            hard = [v for v in others if parse_event(v.events[0][0]).colour == kind.colour
                    or parse_event(v.events[0][0]).shape == kind.shape]  # fmt: skip
            n_hard = min(len(hard), candidates // 2)
            chosen = [hard[i] for i in rng.choice(len(hard), n_hard, replace=False)] if n_hard else []
            rest = [v for v in others if v not in chosen]
            chosen += [rest[i] for i in rng.choice(len(rest), candidates - 1 - n_hard, replace=False)]
            pairs.append(_retrieval_pair(corpus, video, chosen, rng, suffix="ret", kind="single"))
    if order is not None:
        pairs += _partner_pairs(order, "order", "ordered", rng, candidates)
    return pairs


def make_retrieval_set(
    out_dir: str | os.PathLike, config: RetrievalSetConfig = RetrievalSetConfig()
) -> dict[str, Path]:
    """Render (or reuse) world corpora per split and write ``{split}.jsonl`` retrieval pairs (each
    query with a bounded candidate set of hard and random negatives, as a first stage would hand
    over) and ``{split}_videos.jsonl`` indexer manifests. Per split: ``*_corpora`` single-event
    corpora, an order corpus of ``order_pairs`` mirror pairs (meta kind "ordered", the mirror a
    candidate) and a count corpus of ``count_pairs`` once / twice pairs (meta kind "counted", the
    other count a candidate). The count corpus has a seed and random stream of its own, so adding it
    leaves every other video and pair as it was. Splits share no video; a split with no corpora is
    not written."""
    from world.corpus import CorpusConfig, make_corpus

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(config.seed)
    counts = {"train": config.train_corpora, "val": config.val_corpora, "test": config.test_corpora}
    written: dict[str, Path] = {}
    seed = config.seed * 1000
    for s_index, (split, n) in enumerate(counts.items()):
        if n == 0:  # a split asked for with no corpora is left out whole (no order corpus either)
            continue
        corpora = []
        for c in range(n):
            seed += 1
            corpora.append(
                make_corpus(
                    out / f"{split}-{c}",
                    CorpusConfig(
                        videos=config.videos, seed=seed, prefix=f"{split[:2]}{c}-",
                        min_duration_s=config.min_duration_s, max_duration_s=config.max_duration_s,
                    ),
                    progress=True,
                )
            )  # fmt: skip
        order = None
        if config.order_pairs:
            seed += 1
            order = make_corpus(
                out / f"{split}-order",
                CorpusConfig(
                    videos=0, order_pairs=config.order_pairs, seed=seed, prefix=f"{split[:2]}o",
                    min_duration_s=config.min_duration_s, max_duration_s=config.max_duration_s,
                ),
                progress=True,
            )  # fmt: skip
        count = None
        if config.count_pairs:  # off the other corpora's seed sequence, so theirs stay as they were
            count = make_corpus(
                out / f"{split}-count",
                CorpusConfig(
                    videos=0, count_pairs=config.count_pairs, seed=config.seed * 1000 + 900 + s_index,
                    prefix=f"{split[:2]}", min_duration_s=config.min_duration_s,
                    max_duration_s=config.max_duration_s,
                ),
                progress=True,
            )  # fmt: skip
        pairs = _retrieval_pairs(corpora, order, rng, config.candidates, out)
        if count is not None:
            count_rng = np.random.default_rng([config.seed, 0xC0, s_index])
            pairs += _partner_pairs(count, "count", "counted", count_rng, config.candidates)
        written[split] = write_pairs(out / f"{split}.jsonl", pairs)
        with open(out / f"{split}_videos.jsonl", "w", encoding="utf-8") as f:
            for corpus in [*corpora, *([order] if order else []), *([count] if count else [])]:
                for v in corpus.videos:
                    f.write(
                        json.dumps({"id": f"{corpus.root.name}/{v.id}", "path": str(corpus.root / v.path)})
                        + "\n"
                    )
        logger.info("%s: %d pairs", split, len(pairs))
    return written
