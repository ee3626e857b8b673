"""Training and measuring the time head (models.time_head) on rendered order and count pairs.

    qaslr train-time-head OUT [--workdir W] [--train-seeds 0 1] [--val-seed 100] [--order-pairs 24]
        [--count-pairs 24] [--singles 16] [--min-s 40] [--max-s 180] [--steps 1500] [--seed 0]

The data is what serving hands the head, computed by the production path: world videos rendered by
``world.corpus`` (mirror pairs A-then-B / B-then-A, once / twice pairs over one haystack, and
single-event videos as further negatives), indexed by ``indexer.build_index`` with the backbone (its
frame bank: about one embedding per second), and each query's events embedded by the same
``VideoEncoder.embed_queries`` the search engine calls. A query's candidates are every video of its
split; its partner (the mirror, the other count) is always among the ones a step samples.

The loss is listwise: softmax cross-entropy of the right video's final readout y_T against the
sampled candidates' (the contrastive form of Eq. 11, with the head's score in place of q·z). With
``step_weight`` > 0 the readouts after 25, 50 and 75 % of each candidate's frames are trained the
same way (the step-wise term of Eq. 14; a partial readout may not have seen the evidence yet, as
§A.8 says, so it is weighted low). With ``distill_weight`` > 0 those partial readouts are also drawn
toward the final one (the self-distillation of Eq. 13, weighted by lambda_distill in Eq. 14, whose
teacher is the detached final-step embedding of the same trajectory): the head's readout is a score,
not an embedding, so what is distilled is the listwise distribution the final readouts give over a
query's candidates, KL(softmax(sg(y_T)) || softmax(y_t)).

Calibrated on a render the head never trained on (``calibrate``): y_T ranks one query's candidates,
and a result's relevance must also say whether the one read holds what is asked. The right video of
each pair is a positive and its partner (the same events, in the other order or another number of
times) a negative; a_c and b_c of sigmoid(a_c · y_T + b_c) are fitted for each condition c (order,
once, twice, three times: training fixes no score's level, only its order among one query's
candidates, and the levels differ by condition) by Platt's method (logistic regression on y_T with
the targets (N+ + 1) / (N+ + 2) and 1 / (N- + 2), which keeps a finite slope where the scores
separate the pairs), and the head serves it (models.time_head.TimeHead.confidence).

Measured on a held-out render (another seed): pair accuracy (the right video above its partner;
chance 0.5), Hit@1 over the whole split, and the Table 5 controls of §A.6 applied at inference:
shuffled and reversed frames, reset memory (the memory restarts from H_0 before every frame and
the best of those one-frame readouts is the score: every frame is still used) and last frame only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from models.time_head import TimeHead, TimeHeadConfig, calibrated, event_relevance, pad, save_time_head
from models.time_query import parse_time_query

logger = logging.getLogger(__name__)

__all__ = [
    "TimeQueryItem",
    "TimeSplit",
    "calibrate",
    "dimmed",
    "evaluate",
    "hold_out",
    "load_pairs",
    "load_split",
    "merge",
    "rule_score",
    "save",
    "train_time_head",
]

CONTROLS = ("full", "shuffled", "reversed", "reset memory", "last frame only")
STEP_SHARES = (0.25, 0.5, 0.75)  # the partial readouts the step and distillation terms train (§A.8)
CHECKPOINTS = {f"after {round(100 * f)} %": f for f in STEP_SHARES}  # and Table 6 measures
RULE = "rule, no learning"  # the free baseline on the same inputs (rule_score)
DIM_LOW = 0.35  # the faintest a dimmed event is drawn (dimmed): a white shape peaks near half a coloured one


@dataclass
class TimeQueryItem:
    text: str
    condition: str
    right: str  # video key
    partner: str | None  # its pair partner's key (a rendered pair's mirror; a user's query may have none)
    relevance: dict[str, np.ndarray]  # video key -> event relevance [T, S]


@dataclass
class TimeSplit:
    """One rendered, indexed split: its queries (each with every video's event relevance)."""

    queries: list[TimeQueryItem] = field(default_factory=list)
    videos: list[str] = field(default_factory=list)


def render_split(work: Path, seed: int, *, order_pairs: int, count_pairs: int, singles: int, min_s: float,
                 max_s: float, count3_pairs: int = 0) -> list:  # fmt: skip
    """The split's corpora (order pairs, once / twice and twice / three-times pairs, single events),
    rendered once under ``work``."""
    from world.corpus import CorpusConfig, make_corpus

    lengths = {"min_duration_s": min_s, "max_duration_s": max_s}
    out = []
    if order_pairs:
        config = CorpusConfig(videos=0, order_pairs=order_pairs, seed=7000 + seed, prefix="o", **lengths)
        out.append(make_corpus(work / f"time-order-{seed}", config, progress=True))
    if count_pairs:
        config = CorpusConfig(videos=0, count_pairs=count_pairs, seed=8000 + seed, prefix="c", **lengths)
        out.append(make_corpus(work / f"time-count-{seed}", config, progress=True))
    if count3_pairs:  # a "twice" query's partner shows its event three times: what a count reads past two
        config = CorpusConfig(videos=0, count3_pairs=count3_pairs, seed=8500 + seed, prefix="r", **lengths)
        out.append(make_corpus(work / f"time-count3-{seed}", config, progress=True))
    if singles:
        config = CorpusConfig(videos=singles, seed=9000 + seed, prefix="s", **lengths)
        out.append(make_corpus(work / f"time-single-{seed}", config, progress=True))
    return out


def load_split(work: Path, seed: int, model: Path, **render) -> TimeSplit:
    """Render, index and read one split (module docstring)."""
    from indexer import BuildOptions, build_index
    from indexer.assembly import encoder_for, load_model_for_index
    from indexer.store import IndexReader
    from models.backbone import checkpoint_fingerprint

    corpora = render_split(work, seed, **render)
    banks: dict[str, np.ndarray] = {}
    encoder = None
    texts: list[tuple[str, str, str]] = []  # (query, right key, partner key)
    backbone_id = checkpoint_fingerprint(model)[:8]  # indexes named by it: one per backbone, never stale
    for corpus in corpora:
        index_dir = work / f"index-{corpus.root.name}-{model.name}-{backbone_id}"
        build_index(corpus.manifest, index_dir, BuildOptions(model=str(model), embedder="oneshot"))
        reader = IndexReader(index_dir)
        try:
            if encoder is None:
                loaded = load_model_for_index(reader.manifest, model, head_dir=None)
                encoder = encoder_for(reader.manifest, loaded.backbone, None, clip_batch_size=8)
            for video in corpus.videos:
                key = f"{corpus.root.name}/{video.id}"
                banks[key] = np.asarray(reader.frame_bank(video.id).embeddings, dtype=np.float32)
        finally:
            reader.close()
        by_group: dict[str, list[str]] = {}
        for video in corpus.videos:
            if video.group:
                by_group.setdefault(video.group, []).append(video.id)
        for video in corpus.videos:
            if video.kind not in ("order", "count"):
                continue
            partner = next(v for v in by_group[video.group] if v != video.id)
            for text in video.queries:
                texts.append((text, f"{corpus.root.name}/{video.id}", f"{corpus.root.name}/{partner}"))
    split = TimeSplit(videos=sorted(banks))
    for text, right, partner in texts:
        parsed = parse_time_query(text)
        if parsed is None:
            raise ValueError(f"the world's query {text!r} does not parse as an order or a count")
        events = encoder.embed_queries(list(parsed.events)).float().numpy()
        relevance = {key: event_relevance(bank, events) for key, bank in banks.items()}
        split.queries.append(TimeQueryItem(text, parsed.condition, right, partner, relevance))
    return split


def load_pairs(index_dir: Path, pairs_file: Path, model: Path, *, candidates: int = 64, seed: int = 0,
               head_dir: Path | None = None) -> TimeSplit:  # fmt: skip
    """A split from a user's own labelled queries over an index they built (``indexer build``), for
    backbones other than the shapes world's, whose order and count pairs cannot be rendered.

    ``pairs_file`` holds one JSON object per line::

        {"query": "a man opens the door, then a dog runs in", "video": "cam-0412"}
        {"query": "the bell rings twice", "video": "lecture-07", "partner": "lecture-08"}

    ``query`` must read as an order or a count (models.time_query), ``video`` is the id of the video
    it describes and ``partner`` (optional) one that shows the same events otherwise (the mirror of
    an order, the other count): it is always among a query's candidates and gives the pair accuracy.
    The other candidates are up to ``candidates`` videos of the index drawn with ``seed``. Event
    embeddings and frame banks come from the index and its backbone exactly as serving reads them.
    Raises ValueError naming the line of a query that does not parse or a video the index lacks."""
    from indexer.assembly import encoder_for, load_model_for_index
    from indexer.store import IndexReader

    rows = []
    for number, line in enumerate(Path(pairs_file).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{Path(pairs_file).name} line {number}: not JSON ({exc.msg})") from None
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("query"), str)
            or not isinstance(row.get("video"), str)
        ):
            raise ValueError(
                f'{Path(pairs_file).name} line {number}: needs a "query" and a "video" (strings)'
            )
        parsed = parse_time_query(row["query"])
        if parsed is None:
            raise ValueError(
                f"{Path(pairs_file).name} line {number}: {row['query']!r} does not read as an order "
                '("A, then B", "A before B", ...) or a count ("A once", "A twice", ...)'
            )
        rows.append((number, row, parsed))
    if not rows:
        raise ValueError(f"{Path(pairs_file).name} holds no queries")
    rng = np.random.default_rng(seed)
    reader = IndexReader(index_dir)
    try:
        known = set(reader.bank_ids())
        for number, row, _ in rows:
            for key in ("video", "partner"):
                if row.get(key) is not None and row[key] not in known:
                    raise ValueError(
                        f"{Path(pairs_file).name} line {number}: {key} {row[key]!r} has no frame bank in the index"
                    )
        loaded = load_model_for_index(reader.manifest, model, head_dir=head_dir)
        encoder = encoder_for(reader.manifest, loaded.backbone, loaded.head, clip_batch_size=8)
        banks: dict[str, np.ndarray] = {}

        def bank(video_id: str) -> np.ndarray:
            if video_id not in banks:
                banks[video_id] = np.asarray(reader.frame_bank(video_id).embeddings, dtype=np.float32)
            return banks[video_id]

        pool = sorted(known)
        split = TimeSplit()
        for _, row, parsed in rows:
            first = [row["video"]] + ([row["partner"]] if row.get("partner") else [])
            others = [v for v in pool if v not in first]
            picked = rng.choice(
                len(others), size=min(max(0, candidates - len(first)), len(others)), replace=False
            )
            keys = first + [others[i] for i in sorted(picked)]
            events = encoder.embed_queries(list(parsed.events)).float().numpy()
            relevance = {key: event_relevance(bank(key), events) for key in keys}
            split.queries.append(
                TimeQueryItem(row["query"], parsed.condition, row["video"], row.get("partner"), relevance)
            )
        split.videos = sorted(banks)
        return split
    finally:
        reader.close()


def hold_out(split: TimeSplit, share: float, seed: int = 0) -> tuple[TimeSplit, TimeSplit]:
    """(train, held out): ``share`` of the queries (at least one) kept apart for measuring."""
    if not 0 < share < 1 or len(split.queries) < 2:
        raise ValueError("holding queries out needs a share in (0, 1) and two queries at least")
    order = np.random.default_rng(seed).permutation(len(split.queries))
    n = max(1, round(share * len(split.queries)))
    held = [split.queries[i] for i in sorted(order[:n])]
    kept = [split.queries[i] for i in sorted(order[n:])]
    return TimeSplit(kept, split.videos), TimeSplit(held, split.videos)


def quiet_frames(x: np.ndarray) -> np.ndarray:
    """Indices of ``x``'s background frames: every event relevance under a third of the video's peak."""
    return np.flatnonzero(np.abs(x).max(axis=1) < max(float(np.abs(x).max()), 1e-6) / 3)


def stretch(x: np.ndarray, rng: np.random.Generator, *, most: float = 3.0, cap: int = 720) -> np.ndarray:
    """``x`` with more haystack: up to ``most`` times as many frames (at most ``cap``), the added
    ones copies of its own background frames (every event relevance under a third of the video's
    peak) put in at random places between frames. What is shown, in what order, is unchanged: a
    head trained on short renders meets hour-long banks in serving."""
    n = len(x)
    quiet = quiet_frames(x)
    target = min(cap, int(n * rng.uniform(1.0, most)))
    if n < 2 or len(quiet) == 0 or target <= n:
        return x
    extra = x[rng.choice(quiet, size=target - n)]
    where = rng.integers(0, n + 1, size=target - n)  # insert before row ``where``
    order = np.argsort(np.concatenate([np.arange(n) * 2 + 1, where * 2]), kind="stable")
    return np.concatenate([x, extra])[order]


def dimmed(item: TimeQueryItem, rng: np.random.Generator, low: float = DIM_LOW) -> TimeQueryItem:
    """``item`` with one of its two event slots shown fainter in every candidate: that event's relevance
    scaled by a factor drawn from [``low``, 1) (a slot a count query lacks stays as it is). A white shape
    on grey peaks near half a coloured one's height, and the head's misses on the development seeds were
    such events (training/tiny_world/README.md, "The time head retrained")."""
    factor, slot = np.ones(2), rng.integers(0, 2)
    factor[slot] = rng.uniform(low, 1.0)
    rel = {v: (x * factor[: x.shape[1]]).astype(x.dtype) for v, x in item.relevance.items()}
    return dataclasses.replace(item, relevance=rel)


def showings(col: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of frames at or above half ``col``'s peak: the hand rule's showings."""
    above = np.concatenate([[False], col >= 0.5 * max(float(col.max()), 1e-6), [False]])
    edges = np.flatnonzero(above[1:] != above[:-1])
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def rewritten(x: np.ndarray, condition: str, rng: np.random.Generator) -> np.ndarray | None:
    """The right video's bank ``x`` [T, S] rewritten so that it no longer holds what is asked, over the
    same background: for a count, one showing of the event copied into a quiet stretch (one more) or,
    where it shows twice or more, one replaced by quiet frames (one fewer); for an order, the first
    event's best showing and the second's swapped in time (the mirror). None where it cannot be (no
    showing, no quiet frame, overlapping showings). A negative that differs from the right video only
    in what the query asks: its partner's kind, from every video of the render."""
    pad = 1  # a showing's ramp: the frame before and after it
    if condition == "order":
        runs = [showings(x[:, k]) for k in range(2)]
        best = [
            next((r for r in rs if r[0] <= int(np.argmax(x[:, k])) < r[1]), None) for k, rs in enumerate(runs)
        ]
        if best[0] is None or best[1] is None:
            return None
        (a0, a1), (b0, b1) = (
            (max(0, best[0][0] - pad), best[0][1] + pad),
            (best[1][0] - pad, min(len(x), best[1][1] + pad)),
        )
        if a1 > b0:
            return None
        return np.concatenate([x[:a0], x[b0:b1], x[a1:b0], x[a0:a1], x[b1:]])
    runs, quiet = showings(x[:, 0]), quiet_frames(x)
    if not runs or len(quiet) == 0:
        return None
    s0, s1 = runs[rng.integers(len(runs))]
    s0, s1 = max(0, s0 - pad), min(len(x), s1 + pad)
    if len(runs) >= 2 and rng.random() < 0.5:  # one fewer
        out = x.copy()
        out[s0:s1] = x[rng.choice(quiet, size=s1 - s0)]
        return out
    at = int(rng.choice(quiet))  # one more, inserted before a quiet frame
    return np.concatenate([x[:at], x[s0:s1], x[at:]])


def _batch(items, head: TimeHead, rng: np.random.Generator, negatives: int, augment: float = 0.5,
           dim: float = 0.0, rewrite: float = 0.0):  # fmt: skip
    """Rows for a step: per query its right video (column 0), its partner, and sampled others, the
    last of them replaced by the right video :func:`rewritten` with probability ``rewrite``; each
    query's events dimmed (:func:`dimmed`) with probability ``dim``, each row stretched (:func:`stretch`)
    with probability ``augment``."""
    if dim > 0:
        items = [dimmed(item, rng) if rng.random() < dim else item for item in items]
    rows, conds = [], []
    for item in items:
        first = [item.right] + ([item.partner] if item.partner else [])
        others = [v for v in item.relevance if v not in first]
        picked = list(
            rng.choice(len(others), size=min(negatives + 2 - len(first), len(others)), replace=False)
        )
        keys = first + [others[i] for i in picked]
        bank = [item.relevance[k] for k in keys]
        if rewrite > 0 and len(bank) > len(first) and rng.random() < rewrite:
            negative = rewritten(bank[0], item.condition, rng)
            if negative is not None:
                bank[-1] = negative
        rows.extend(stretch(b, rng) if rng.random() < augment else b for b in bank)
        conds.extend([head.condition_index(item.condition)] * len(keys))
    x, lengths = pad(rows, head.config.max_events)
    return x, lengths, torch.tensor(conds), len(keys)


def train_time_head(train: TimeSplit, *, steps: int = 1500, batch: int = 8, negatives: int = 14,
                    lr: float = 1e-2, step_weight: float = 0.0, distill_weight: float = 0.0,
                    hidden: int = 32, peak_inputs: bool = False, seed: int = 0, augment: float = 0.5,
                    dim: float = 0.0, evidence_inputs: bool = False, rewrite: float = 0.0,
                    val: TimeSplit | None = None,
                    log_every: int = 250) -> TimeHead:  # fmt: skip
    """Fit a head on ``train`` (module docstring); returns it in eval mode."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    conditions = tuple(sorted({q.condition for q in train.queries}))
    config = TimeHeadConfig(hidden=hidden, conditions=conditions, peak_inputs=peak_inputs,
                            evidence_inputs=evidence_inputs)  # fmt: skip
    head = TimeHead(config)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        head.train()
        picked = rng.choice(len(train.queries), size=min(batch, len(train.queries)), replace=False)
        items = [train.queries[i] for i in picked]
        x, lengths, cond, per = _batch(items, head, rng, negatives, augment, dim, rewrite)
        steps_out, final = head(x, lengths, cond)
        target = torch.zeros(len(items), dtype=torch.long)
        loss = F.cross_entropy(final.view(len(items), per), target)
        if step_weight > 0 or distill_weight > 0:
            teacher = F.softmax(final.detach().view(len(items), per), dim=1)
            for frac in STEP_SHARES:
                at = (lengths.float() * frac).ceil().long().clamp(min=1) - 1
                partial = steps_out.gather(1, at[:, None]).squeeze(1).view(len(items), per)
                if step_weight > 0:  # Eq. 14's step-wise contrastive term
                    loss = loss + step_weight / len(STEP_SHARES) * F.cross_entropy(partial, target)
                if distill_weight > 0:  # self-distillation toward the final readout (Eq. 13)
                    kl = F.kl_div(F.log_softmax(partial, dim=1), teacher, reduction="batchmean")
                    loss = loss + distill_weight / len(STEP_SHARES) * kl
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        if log_every and (step % log_every == 0 or step == steps):
            line = f"step {step}/{steps} loss {loss.item():.3f} ({time.perf_counter() - t0:.0f} s)"
            if val is not None:
                m = evaluate(head.eval(), val)["full"]
                line += f"  val pair {m['pair']:.3f} (order {m['order']:.3f}, count {m['count']:.3f})"
            logger.info(line)
            print(line, flush=True)
    return head.eval()


def _control(x: np.ndarray, control: str, rng: np.random.Generator) -> np.ndarray:
    if control == "shuffled":
        return x[rng.permutation(len(x))]
    if control == "reversed":
        return x[::-1].copy()
    if control == "last frame only":
        return x[-1:]
    return x


def rule_score(x: np.ndarray, condition: str) -> float:
    """The free score to beat, on the same event relevance and with no learning: for an order, the
    best min(x_1[i], x_2[j]) over i < j; for a count of n, minus how far the number of runs above
    half the video's peak lies from n (ties broken by the peak)."""
    if len(x) == 0:
        return float("-inf")
    if condition == "order":
        if len(x) < 2:
            return float("-inf")
        before = np.maximum.accumulate(x[:, 0])[:-1]
        return float(np.max(np.minimum(before, x[1:, 1])))
    runs = len(showings(x[:, 0]))
    return -abs(runs - int(condition.split(":")[1])) + 0.01 * float(x[:, 0].max())


@torch.no_grad()
def scores(head: TimeHead, item: TimeQueryItem, keys: list[str], control: str = "full", seed: int = 0):
    rng = np.random.default_rng(seed)
    if control == RULE:
        return [rule_score(item.relevance[k], item.condition) for k in keys]
    if control == "reset memory":  # every frame read from H_0 alone; the best one-frame readout
        out = []
        for k in keys:
            frames = [item.relevance[k][i : i + 1] for i in range(len(item.relevance[k]))]
            out.append(max((s for s, _ in head.score(frames, item.condition)), default=float("-inf")))
        return out
    if control in CHECKPOINTS:  # the readout after that share of each candidate's frames (Table 6)
        share = CHECKPOINTS[control]
        scored = head.score([item.relevance[k] for k in keys], item.condition)
        return [float(y[max(1, math.ceil(share * len(y))) - 1]) if len(y) else s for s, y in scored]
    rel = [_control(item.relevance[k], control, rng) for k in keys]
    return [s for s, _ in head.score(rel, item.condition)]


def evaluate(head: TimeHead, split: TimeSplit, controls=("full",)) -> dict[str, dict[str, float]]:
    """Per control: pair accuracy (all, order, count) and Hit@1 over the whole split."""
    out = {}
    for control in controls:
        pair = {"order": [], "count": []}
        hit = []
        for i, item in enumerate(split.queries):
            keys = list(item.relevance)  # every video of a render; a user's query, its candidates
            s = dict(zip(keys, scores(head, item, keys, control, seed=i), strict=True))
            kind = "order" if item.condition == "order" else "count"
            if item.partner:
                pair[kind].append(float(s[item.right] > s[item.partner]))
            hit.append(float(max(s, key=s.get) == item.right))
        both = pair["order"] + pair["count"]
        out[control] = {
            "pair": float(np.mean(both)) if both else float("nan"),
            "order": float(np.mean(pair["order"])) if pair["order"] else float("nan"),
            "count": float(np.mean(pair["count"])) if pair["count"] else float("nan"),
            "hit@1": float(np.mean(hit)) if hit else float("nan"),
            "queries": len(split.queries),
        }
    return out


def calibrate(head: TimeHead, split: TimeSplit, *, iterations: int = 100) -> dict:
    """Fit ``head.config.calibration``, (a_c, b_c) for each condition c, on ``split``'s pairs (module
    docstring) and return per condition what it was fitted on: the pairs, a and b, the log loss, and
    the share of pairs it separates (the right video's confidence at least 0.5, its partner's below).
    A condition without pairs in ``split``, or whose partners read above its right videos, is left
    uncalibrated (served without a confidence; the record says why); ValueError where none is left."""
    pairs: dict[str, tuple[list[float], list[float]]] = {}
    for item in split.queries:
        if item.partner:
            s = scores(head, item, [item.right, item.partner])
            right, partner = pairs.setdefault(item.condition, ([], []))
            right.append(s[0])
            partner.append(s[1])
    if not pairs:
        raise ValueError(
            "calibrating a time head needs queries with a partner (a video with the same events)"
        )
    fitted, record = {}, {}
    for condition, (right, partner) in sorted(pairs.items()):
        a, b, log_loss = _platt(np.array(right), np.array(partner), iterations)
        if a <= 0:  # this condition's partners read above its right videos: no confidence to give
            record[condition] = {
                "pairs": len(right),
                "skipped": f"partners rank above the right videos (slope {a:.3g})",
            }
            continue
        fitted[condition] = (a, b)
        told = [
            calibrated(r, (a, b)) >= 0.5 > calibrated(q, (a, b)) for r, q in zip(right, partner, strict=True)
        ]
        record[condition] = {"pairs": len(right), "a": a, "b": b, "log_loss": log_loss,
                             "separated": float(np.mean(told))}  # fmt: skip
    if not fitted:
        raise ValueError(f"the head's scores rank partners above the right videos on this render: {record}")
    head.config.calibration = fitted
    return record


def _platt(right: np.ndarray, partner: np.ndarray, iterations: int) -> tuple[float, float, float]:
    """(a, b, log loss) of sigmoid(a y + b) fitted to the right videos' scores (positives) and their
    partners' (negatives) with Platt's targets (N+ + 1) / (N+ + 2) and 1 / (N- + 2)."""
    right, partner = right[np.isfinite(right)], partner[np.isfinite(partner)]
    y = torch.tensor(np.concatenate([right, partner]), dtype=torch.float64)
    n_pos, n_neg = len(right), len(partner)
    target = torch.tensor(
        [(n_pos + 1) / (n_pos + 2)] * n_pos + [1 / (n_neg + 2)] * n_neg, dtype=torch.float64
    )
    spread = float(y.std()) if len(y) > 1 else 1.0
    params = torch.tensor([1.0 / max(spread, 1e-3), 0.0], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([params], max_iter=iterations, line_search_fn="strong_wolfe")

    def loss():
        opt.zero_grad()
        value = F.binary_cross_entropy_with_logits(params[0] * y + params[1], target)
        value.backward()
        return value

    opt.step(loss)
    a, b = (float(v) for v in params.detach())
    return a, b, float(loss().detach())


def merge(splits: list[TimeSplit]) -> TimeSplit:
    """One training set from several rendered splits (a query's candidates stay its own split's)."""
    out = TimeSplit()
    for split in splits:
        out.queries += split.queries
        out.videos += split.videos
    return out


def save(head: TimeHead, out: Path, *, backbone: str, trained: dict) -> Path:
    """Write the head with what it was trained on (``backbone``: the checkpoint fingerprint its
    inputs come from, checked by serving) and ``trained`` (settings, held-out measurements)."""
    head.config.backbone = backbone
    head.config.trained = json.loads(json.dumps(trained))  # only what a JSON file can record
    return save_time_head(head, out)
