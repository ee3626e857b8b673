"""Search by what is seen, said or both (issue 25), in the shapes world with generated subtitle tracks.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_hybrid.py [--seeds 0 1 2] [--videos 16]
        [--order-pairs 6] [--min-s 30] [--max-s 45] [--frames 32] [--shortlist 10] [--workdir DIR]
        [--json results.json]

Per seed it renders (once per machine, cached under --workdir) a world corpus (world/corpus.py
``make_corpus``): ``--videos`` single-event videos and ``--order-pairs`` mirror pairs (both videos of
a pair show the same two events), 30-45 s each at 4 fps, small. Every video gets a generated track of
what is said, seeded per video: a cue every 3-6 s (some overlapping), filler speech from a vocabulary
of its own, in which colour and shape words also come up now and then ("the red door", "the town
square", "a circle of friends", about one cue in six: speech that shares words with the visual
queries), one *fact* cue per video that no other video says ("the keeper counts seven herons by the
harbour") and, for the two-clue queries, *topic* cues that several videos say. Even videos get
sidecar files found by name (``.srt`` with a byte-order mark and CRLF, or ``.vtt`` with cue settings
and a NOTE, alternating); odd videos are remuxed into Matroska with the track as an embedded SubRip
stream (``indexer.subtitles.embedded.embed_subtitles``). It indexes them with the shipped tiny-world
backbone (one-shot, K = --frames, the default frame bank; subtitles read by the build), loads the
engine and asks three kinds of query:

    said only    one per video: words of its fact cue ("keeper counts herons harbour"); the right
                 answer is that video, its moment the fact cue (pixels know nothing of it)
    seen only    one per single-event video: the world's own query ("a red square appears"), right
                 when the top video shows that event (a mirror pair may show it too); the subtitles
                 never say what is shown, though their words sometimes overlap
    two clues    per mirror pair and member: "<event A> while someone talks about <topic>": event A
                 is seen in both videos of the pair (and in any single video with the same event), the
                 topic is said in the member and in 2-3 other videos; only the member has both
    ... quoted   the same clues with the said one in quotes ('<event A> "<topic>"'): with sources=both
                 the frames are searched with the words outside the quotes, the cues with the phrase

each by ``sources`` = seen (the default cascade), said, and both under each fusion rule
(``core.config.Fusion``: relevance, the default, and rrf, RRF with k = 60). It reports Hit@1 and Hit@5,
for said-only queries the temporal IoU of the top-1's moment with the fact cue (a wrong top-1
counts 0), the median latency per query (after one untimed pass, so that every mode meets a warm
frame cache) and of the spoken stage, mean ± std over the seeds, and
the issue's criteria: said only Hit@1 >= 95 % and moment IoU >= 0.8; seen only no loss against
seen (<= 1 point); two clues: both beats each source alone by >= 20 points. The default rule and its
weight were chosen on seeds 10 and 11 (``--seeds 10 11``); the reported seeds are 0, 1, 2. Nothing is
asserted: a bad number is a result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import environment, recorded_args, world_workdir_and_model  # noqa: E402
from world.vocab import EVENTS  # noqa: E402

# -- what is said ----------------------------------------------------------------------------------
SUBJECTS = ("keeper", "fisherman", "baker", "teacher", "farmer", "sailor", "painter", "miller",
            "gardener", "porter", "weaver", "pilot", "doctor", "carpenter", "singer", "tailor")  # fmt: skip
VERBS = ("counts", "repairs", "paints", "carries", "sells", "watches", "feeds", "polishes", "measures",
         "collects")  # fmt: skip
OBJECTS = ("herons", "lanterns", "barrels", "kites", "violins", "anchors", "apples", "letters", "candles",
           "ropes", "clocks", "bicycles", "baskets", "kettles", "mirrors", "drums")  # fmt: skip
NUMBERS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
PLACES = ("harbour", "market", "orchard", "bakery", "station", "library", "vineyard", "quarry", "meadow",
          "chapel", "bridge", "mill", "pier", "tavern", "school", "forest")  # fmt: skip
TOPICS = ("the old lighthouse", "the winter festival", "the broken windmill", "the night train",
          "the stolen painting", "the flooded cellar", "the village choir", "the missing goat",
          "the copper mine", "the summer regatta", "the glass factory", "the hidden tunnel",
          "the royal wedding", "the comet sighting", "the river ferry", "the chess tournament")  # fmt: skip
FILLER = ("well, I think we should go now", "it was a long day at the {place}", "have you seen the {subject}",
          "nobody told me about that", "we can talk about it tomorrow", "the {subject} was late again",
          "look at the weather today", "I left my {object} at the {place}", "that is what she said",
          "come over here for a minute", "the {place} opens at nine", "do you remember the {object}",
          "my brother works at the {place}", "let us wait a little longer", "they sold {number} {object}")  # fmt: skip
# speech that shares words with the visual queries (colours, shapes): about one cue in six
OVERLAP = ("the {colour} door was open", "meet me at the town square", "we sat in a circle by the fire",
           "she ordered a drink at the bar", "his {colour} coat is still wet", "a triangle of land by the river",
           "the {colour} boat appears at dawn", "the band plays in the square")  # fmt: skip
COLOURS = ("red", "green", "blue", "yellow", "magenta", "cyan", "orange", "white")


@dataclasses.dataclass
class Speech:
    cues: list[tuple[float, float, str]]
    fact: tuple[float, float, str]
    fact_query: str


def _fill(rng, template: str) -> str:
    pick = lambda xs: xs[int(rng.integers(len(xs)))]  # noqa: E731
    return template.format(place=pick(PLACES), subject=pick(SUBJECTS), object=pick(OBJECTS),
                           number=pick(NUMBERS), colour=pick(COLOURS))  # fmt: skip


def speech_for(video, k: int, facts, topics: list[str], rng) -> Speech:
    """What video ``k`` says: filler every 3-6 s, its fact cue, and its topics (module docstring)."""
    dur = float(video.duration_s)
    cues, t = [], float(rng.uniform(0.5, 2.0))
    while t < dur - 2.0:
        length = float(rng.uniform(1.5, 3.5))
        template = (
            OVERLAP[int(rng.integers(len(OVERLAP)))]
            if rng.random() < 1 / 6
            else FILLER[int(rng.integers(len(FILLER)))]
        )
        cues.append((round(t, 2), round(min(t + length, dur), 2), _fill(rng, template)))
        t += float(rng.uniform(3.0, 6.0)) if rng.random() > 0.1 else length / 2  # sometimes they overlap
    subject, verb, obj, number, place = facts[k]
    start = round(float(rng.uniform(2.0, dur - 5.0)), 2)
    fact = (
        start,
        round(start + float(rng.uniform(2.0, 3.5)), 2),
        f"the {subject} {verb} {number} {obj} by the {place}",
    )
    cues.append(fact)
    for topic in topics:
        s = round(float(rng.uniform(1.0, dur - 4.0)), 2)
        cues.append((s, round(s + 2.5, 2), f"did you hear about {topic}"))
    query = f"{subject} {verb} {obj} {place}"
    return Speech(sorted(cues), fact, query)


def _ts(seconds: float, sep: str) -> str:
    ms = int(round(seconds * 1000))
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}{sep}{ms % 1000:03d}"


def write_srt(path: Path, cues) -> Path:
    body = "".join(
        f"{i}\r\n{_ts(a, ',')} --> {_ts(b, ',')}\r\n{t}\r\n\r\n" for i, (a, b, t) in enumerate(cues, 1)
    )
    return _write(
        path, b"\xef\xbb\xbf" + body.encode("utf-8")
    )  # a byte-order mark, CRLF: as Windows tools write


def _write(path: Path, data: bytes) -> Path:
    """Write only what changed: an unchanged track keeps its mtime (so a cached index stays valid)."""
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)
    return path


def write_vtt(path: Path, cues) -> Path:
    body = "WEBVTT\n\nNOTE generated for bench_hybrid\n\n" + "".join(
        f"c{i}\n{_ts(a, '.')} --> {_ts(b, '.')} align:start position:10%\n<v Speaker>{t}</v>\n\n"
        for i, (a, b, t) in enumerate(cues, 1)
    )
    return _write(path, body.encode("utf-8"))


# -- the corpus --------------------------------------------------------------------------------------
def make_hybrid(seed: int, args) -> dict:
    """The world corpus of ``seed`` with its speech, sidecars, embedded streams and the three query sets."""
    from indexer.subtitles.embedded import embed_subtitles
    from world.corpus import CorpusConfig, make_corpus

    work = Path(args.workdir) / f"hybrid-{seed}"
    config = CorpusConfig(
        videos=args.videos, order_pairs=args.order_pairs, seed=seed, min_duration_s=args.min_s,
        max_duration_s=args.max_s, fps=(4.0,), short_side=(96, 128), prefix="h",
    )  # fmt: skip
    corpus = make_corpus(work / "corpus", config, progress=True)
    rng = np.random.default_rng(10_000 + seed)
    videos = corpus.videos
    # each video's fact: a (subject, verb, object, place) no other video's fact has, and a number
    combos = [(s, v, o, p) for s in SUBJECTS for v in VERBS for o in OBJECTS for p in PLACES]
    picks = rng.choice(len(combos), size=len(videos), replace=False)
    facts = [
        (*combos[int(i)][:3], NUMBERS[int(rng.integers(len(NUMBERS)))], combos[int(i)][3]) for i in picks
    ]
    # two clues: for each member of each mirror pair, a topic it says with 2-3 videos outside its pair
    topics: dict[str, list[str]] = {v.id: [] for v in videos}
    two_clue, quoted = [], []
    pairs: dict[str, list] = {}
    for v in videos:
        if v.kind == "order":
            pairs.setdefault(v.group, []).append(v)
    order = [str(t) for t in rng.permutation(TOPICS)]
    for members in pairs.values():
        for member in members:
            topic = order.pop() if order else f"the {rng.integers(1000)} tower"
            others = [v.id for v in videos if v.group != member.group]
            sayers = [member.id, *rng.choice(others, size=int(rng.integers(2, 4)), replace=False)]
            for vid in sayers:
                topics[vid].append(topic)
            seen_text = next(e for e in EVENTS if e.name == member.events[0][0]).text(0)
            two_clue.append((f"{seen_text} while someone talks about {topic}", {member.id}))
            quoted.append((f'{seen_text} "{topic.removeprefix("the ")}"', {member.id}))
    lines, said_only, speech = [], [], {}
    meta = {e["id"]: e["metadata"] for e in map(json.loads, corpus.manifest.read_text().splitlines())}
    for k, v in enumerate(videos):
        sp = speech_for(v, k, facts, topics[v.id], np.random.default_rng([seed, k]))
        speech[v.id] = sp
        said_only.append((sp.fact_query, {v.id}))
        path = corpus.root / v.path
        if k % 2 == 0:  # a sidecar next to the video, found by its name
            sidecar = path.with_suffix(".srt" if k % 4 == 0 else ".vtt")
            for old in path.parent.glob(path.stem + ".*"):
                if old.suffix in (".srt", ".vtt") and old != sidecar:
                    old.unlink()
            (write_srt if k % 4 == 0 else write_vtt)(sidecar, sp.cues)
        else:  # remuxed into Matroska with the track embedded
            (work / "tracks").mkdir(exist_ok=True)
            srt = write_srt(work / "tracks" / f"{v.id}.srt", sp.cues)
            out = work / "embedded" / f"{v.id}.mkv"
            if not out.exists() or out.stat().st_mtime < srt.stat().st_mtime:
                embed_subtitles(path, [(srt, "eng")], out)
            path = out
        lines.append(json.dumps({"id": v.id, "path": str(path), "metadata": meta[v.id]}))
    manifest = work / "hybrid.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    # a seen-only query is answered by any video that shows its event (a mirror pair may show it too)
    shows = {v.id: {e[0] for e in v.events} for v in videos}
    seen_only = [(q, {x for x, es in shows.items() if truth.events[0][0] in es})
                 for q, vid in corpus.queries("single") for truth in [corpus.by_id()[vid]]]  # fmt: skip
    return {"corpus": corpus, "manifest": manifest, "speech": speech, "said": said_only, "seen": seen_only,
            "both": two_clue, "quoted": quoted, "work": work}  # fmt: skip


# -- measuring --------------------------------------------------------------------------------------
def iou(a, b) -> float:
    if a is None:
        return 0.0
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 0 else 0.0


def run(engine, queries, args, *, sources: str, speech=None) -> dict:
    rows = {"hit@1": [], "hit@5": [], "iou": [], "ms": [], "spoken_ms": []}
    for query, rights in queries:
        request = {"query": query, "sources": sources, "top_k": args.shortlist, "shortlist": args.shortlist,
                   "frames": args.frames}  # fmt: skip
        t = time.perf_counter()
        out = engine.search_sync(request)
        rows["ms"].append((time.perf_counter() - t) * 1e3)
        rows["spoken_ms"].append(out.timings_ms.get("spoken", 0.0))
        ids = [h.video_id for h in out.hits]
        right = bool(ids) and ids[0] in rights
        rows["hit@1"].append(float(right))
        rows["hit@5"].append(float(bool(rights & set(ids[:5]))))
        if speech is not None:  # said only: one right video, its fact cue the moment
            rows["iou"].append(iou(out.hits[0].moment, speech[ids[0]].fact[:2]) if right else 0.0)
    out = {k: float(np.mean(v)) for k, v in rows.items() if v and k not in ("ms", "spoken_ms")}
    out["ms"] = float(np.median(rows["ms"]))
    out["spoken_ms"] = float(np.median(rows["spoken_ms"]))
    out["queries"] = len(queries)
    return out


def one_seed(seed: int, args, model: Path) -> dict:
    from core.config import Fusion
    from engine.config import EngineConfig
    from engine.loader import load_engine
    from indexer import BuildOptions, build_index, index_stats

    data = make_hybrid(seed, args)
    index = data["work"] / f"index-{model.name}-k{args.frames}"
    t = time.perf_counter()
    report = build_index(
        data["manifest"],
        index,
        BuildOptions(model=str(model), embedder="oneshot", frames=args.frames, workers=2),
    )
    build_s = time.perf_counter() - t
    print(report.summary())
    tracks = index_stats(index)["text_tracks"]
    engine = load_engine(EngineConfig(index=index, model=str(model), default_frames=args.frames))
    results: dict = {
        "build_s": build_s,
        "text_tracks": tracks,
        "warnings": report.warnings,
        "videos": len(data["corpus"].videos),
    }
    try:
        for kind in KINDS:
            queries = data[kind]
            speech = data["speech"] if kind == "said" else None
            row = results.setdefault(kind, {})
            run(engine, queries, args, sources="seen")  # untimed: every mode then meets a warm frame cache
            row["seen"] = run(engine, queries, args, sources="seen", speech=speech)
            row["said"] = run(engine, queries, args, sources="said", speech=speech)
            for rule in Fusion:
                engine.searcher.config = dataclasses.replace(engine.searcher.config, fusion=rule)
                row[f"both ({rule})"] = run(engine, queries, args, sources="both", speech=speech)
    finally:
        engine.close()
    return results


def fmt(values, pct: bool = True) -> str:
    vals = [v for v in values if v is not None and not np.isnan(v)]
    if not vals:
        return "–"
    scale = 100 if pct else 1
    mean, std = statistics.fmean(vals) * scale, (statistics.pstdev(vals) * scale if len(vals) > 1 else 0.0)
    return f"{mean:.1f} ± {std:.1f}" if pct else f"{mean:.2f} ± {std:.2f}"


KINDS = {"said": "said only (answer in the subtitles)", "seen": "seen only (answer in the pixels)",
         "both": "two clues (one said, one seen)", "quoted": "two clues, the said one quoted"}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--videos", type=int, default=16, help="single-event videos per corpus")
    p.add_argument(
        "--order-pairs", type=int, default=6, help="mirror pairs per corpus (two-clue queries: 2 each)"
    )
    p.add_argument("--min-s", type=float, default=30.0)
    p.add_argument("--max-s", type=float, default=45.0)
    p.add_argument("--frames", type=int, default=32, help="K (index) and K' (stage 2)")
    p.add_argument("--shortlist", type=int, default=10, help="R")
    p.add_argument("--model", default=None, help="backbone directory (default: the shipped tiny-world)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    model = world_workdir_and_model(args, "qaslr-bench-hybrid")
    started = time.perf_counter()
    per_seed = {seed: one_seed(seed, args, model) for seed in args.seeds}
    minutes = (time.perf_counter() - started) / 60
    seeds = args.seeds
    n = per_seed[seeds[0]]["videos"]
    print(f"\nshapes world with subtitles, {n} videos of {args.min_s:.0f}-{args.max_s:.0f} s ({args.videos} single-event, "
          f"{args.order_pairs} mirror pairs), K=K'={args.frames}, R={args.shortlist}, seeds {seeds}; {minutes:.1f} min")  # fmt: skip
    print("| queries | sources | Hit@1 % | Hit@5 % | moment IoU with the cue | p50 ms | spoken p50 ms |")
    print("|---|---|---|---|---|---|---|")
    modes = list(per_seed[seeds[0]]["said"])
    for kind, label in KINDS.items():
        for mode in modes:
            rows = [per_seed[s][kind][mode] for s in seeds]
            iou_cell = fmt([r.get("iou") for r in rows], pct=False) if kind == "said" else "–"
            ms = statistics.fmean(r["ms"] for r in rows)
            sms = statistics.fmean(r["spoken_ms"] for r in rows)
            print(f"| {label} ({rows[0]['queries']}) | {mode} | {fmt([r['hit@1'] for r in rows])} | "
                  f"{fmt([r['hit@5'] for r in rows])} | {iou_cell} | {ms:.0f} | {sms:.1f} |")  # fmt: skip
    criteria = {}
    for mode in (m for m in modes if m.startswith("both")):
        mean = lambda kind, m, key="hit@1": statistics.fmean(per_seed[s][kind][m][key] for s in seeds)  # noqa: E731
        criteria[mode] = {
            "said only: Hit@1 >= 95 %": mean("said", mode) >= 0.95,
            "said only: moment IoU >= 0.8": mean("said", mode, "iou") >= 0.8,
            "seen only: loss vs seen <= 1 point": mean("seen", "seen") - mean("seen", mode) <= 0.01,
            "two clues: beats seen and said by >= 20 points": mean("both", mode)
            - max(mean("both", "seen"), mean("both", "said"))
            >= 0.20,
            "two clues quoted: beats seen and said by >= 20 points": mean("quoted", mode)
            - max(mean("quoted", "seen"), mean("quoted", "said"))
            >= 0.20,
        }
        print(
            f"\ncriteria, {mode}: "
            + "; ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in criteria[mode].items())
        )
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"args": recorded_args(args), "minutes": minutes, "per_seed": per_seed, "criteria": criteria,
             "environment": environment()}, indent=2, default=str) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
