"""The QASLR rerank head's training data: world queries about time, their candidates, and the
evidence of each candidate's moments, read exactly as serving reads them.

One split is one seed of the shapes world (world.corpus), rendered and indexed by the indexer (the
frame bank, about one frame a second, and the frame store: the bank frames' pixels at the
backbone's working size). For every video of the split, every phrasing of what its query means
(world.meaning: an event, an order, a count, a change) is a training query, and for each query:

    q, its token states        the backbone's text embedding and the final hidden states of its
                               prompt (what a head that reads the query's text reads)
    candidates                 the ``candidates`` videos of the split the frame tier ranks first
                               (max_c q · f_c over each bank, engine.tiers.frame's score), the
                               query's own video and its pair partner always among them: the head
                               reranks what serving hands it
    target, co-positives       its own video; the other candidates the query is also true of are
                               co-positives (Eq. 11's mask), the partner a hard negative
    windows                    per candidate, its moments for q (models.windows.moment_windows over
                               q · f_c): T clips of consecutive bank frames, in time order

Each window is one clip: its frames are read from the index's frame store, as serving reads them,
and encoded by the backbone (Eq. 4, no text in the prompt) into the hidden states U_t, compressed to
at most M evidence tokens (Eq. 5); a window's evidence does not depend on the query, so it is
encoded once (``EvidenceCache``). Everything a split computes is cached under the work folder by
the backbone's fingerprint.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from models.windows import WindowPlan, moment_windows

logger = logging.getLogger(__name__)


@dataclass
class QueryItem:
    """One training query and what the head is handed for it."""

    text: str
    kind: str  # world.meaning.Meaning.kind
    q: torch.Tensor  # [d]
    states: torch.Tensor  # [S, D] the query prompt's final hidden states
    candidates: list[str]  # video keys ("<split>/<video id>")
    target: int  # the query's own video among ``candidates``
    true_of: list[bool]  # per candidate: the query is true of it (the target included)
    # per candidate: its moments, (first, last) bank positions (a composed candidate: (video, first, last),
    # training.order_mix)
    windows: list[list[tuple]]
    partner: int | None = None  # the pair partner among ``candidates`` (a hard negative)
    # per candidate: the frame tier's score (by q_sel where a selection query chose the candidates)
    frame_scores: list[float] = field(default_factory=list)
    # per candidate: its best bank frame by q itself (max_c q · f_c, the served score's last term)
    query_frame_scores: list[float] = field(default_factory=list)
    # the query prompt's tokens' input embeddings [S, D], for a head that reads the query's words
    # (models.head ``query_words``; ``attach_words``); None until attached (items cached before them)
    words: torch.Tensor | None = None


@dataclass
class Split:
    """A rendered, indexed split's queries, and the evidence of every window they name."""

    seed: int
    items: list[QueryItem]
    evidence: dict[tuple[str, int, int], tuple]  # window -> (tokens, mask, positions)


def render_split(work: Path, seed: int, corpus: dict):
    """The split's corpus, rendered once under ``work``."""
    from world.corpus import CorpusConfig, make_corpus

    config = CorpusConfig(seed=seed, prefix=f"s{seed}-", **corpus)
    return make_corpus(work / f"moment-corpus-{seed}", config, progress=True)


def index_split(corpus, work: Path, model: Path) -> Path:
    """The split indexed as serving's indexes are (the default frame bank and frame store)."""
    from indexer import BuildOptions, build_index

    index = work / f"moment-index-{corpus.root.name}-{model.name}"
    build_index(corpus.manifest, index, BuildOptions(model=str(model), embedder="oneshot"))
    return index


def query_encoder(work: Path, seed: int, model: Path, corpus: dict):
    """The stage-2 encoder serving builds over split ``seed``'s index (its backbone and instruction):
    how serving embeds a query there."""
    from indexer.assembly import encoder_for, load_model_for_index
    from indexer.store import IndexReader

    index = index_split(render_split(work, seed, corpus), work, model)
    reader = IndexReader(index)
    try:
        loaded = load_model_for_index(reader.manifest, model, head_dir=None)
        return encoder_for(reader.manifest, loaded.backbone, None, clip_batch_size=8)
    finally:
        reader.close()


def query_embedder(work: Path, seed: int, model: Path, corpus: dict):
    """texts -> their query embeddings [n, d] as serving embeds queries over split ``seed``'s index:
    what the selection query trains on (training.selection_query)."""
    encoder = query_encoder(work, seed, model, corpus)
    return lambda texts: encoder.backbone.embed_texts(list(texts), instruction=encoder.instruction)


def query_states(work: Path, seed: int, model: Path, corpus: dict):
    """texts -> (q [n, d], the final hidden states of their prompts): what a split's query items hold
    (``build_split``), for queries composed from its windows (training.order_mix)."""
    encoder = query_encoder(work, seed, model, corpus)

    def embed(texts):
        states = encoder.backbone.text_states(list(texts), instruction=encoder.instruction)
        return encoder.backbone.pool(states), states

    return embed


def attach_words(work: Path, seed: int, model: Path, corpus: dict, splits: list[Split]) -> None:
    """Give every query item of ``splits`` that has none its prompt's word embeddings (``QueryItem.words``,
    as serving reads them for a head with ``query_words``: the backbone's input embeddings of the same
    prompt whose final states the item holds), embedded as serving embeds a query over split ``seed``'s
    index."""
    missing = [i for s in splits for i in s.items if i.words is None]
    if not missing:
        return
    encoder = query_encoder(work, seed, model, corpus)
    texts = sorted({i.text for i in missing})
    found = {}
    for start in range(
        0, len(texts), 64
    ):  # the text pass serving makes (Backbone.text_states, inference mode)
        chunk = texts[start : start + 64]
        states = encoder.backbone.text_states(chunk, instruction=encoder.instruction, words=True)
        for k, text in enumerate(chunk):
            found[text] = states.words[k, : int(states.mask[k].sum())].half().cpu()
    for item in missing:
        words = found[item.text]
        if words.shape[0] != item.states.shape[0]:
            raise ValueError(
                f"{item.text!r}: {words.shape[0]} words against {item.states.shape[0]} token states"
            )
        item.words = words


def build_split(
    work: Path, seed: int, model: Path, *, corpus: dict, candidates: int, plan: WindowPlan, selection=None
) -> Split:
    """Render, index and read one split; its queries and their windows' evidence (module docstring).
    With ``selection`` (models.router.SelectionQuery) candidates and windows are chosen by q_sel, as
    serving chooses them for a query about time."""
    from indexer.assembly import encoder_for, load_model_for_index
    from indexer.store import IndexReader
    from world.meaning import meaning_of

    rendered = render_split(work, seed, corpus)
    index = index_split(rendered, work, model)
    reader = IndexReader(index)
    try:
        loaded = load_model_for_index(reader.manifest, model, head_dir=None)
        encoder = encoder_for(reader.manifest, loaded.backbone, None, clip_batch_size=8)
        cache_file = (
            work
            / f"moment-items-v2-{seed}-{loaded.backbone.fingerprint}-{_plan_key(plan, candidates)}{_selection_key(selection)}.pt"
        )
        if cache_file.exists():
            data = torch.load(cache_file, weights_only=False)
            return Split(seed, data["items"], data["evidence"])
        videos = rendered.videos
        banks = {v.id: reader.frame_bank(v.id) for v in videos}
        bank_embeddings = {k: np.asarray(b.embeddings, dtype=np.float32) for k, b in banks.items()}
        partners = _partners(videos)
        items = []
        for video in videos:
            meaning = meaning_of(video)
            texts = list(meaning.texts())
            states = encoder.backbone.text_states(texts, instruction=encoder.instruction)
            q = encoder.backbone.pool(states)
            for i, text in enumerate(texts):
                n = int(states.mask[i].sum())
                items.append(
                    _item(
                        text,
                        meaning,
                        video,
                        videos,
                        partners.get(video.id),
                        q[i],
                        q[i] if selection is None else selection(q[i]),
                        states.hidden[i, :n].half(),
                        bank_embeddings,
                        candidates,
                        plan,
                    )  # fmt: skip
                )
        evidence = _encode_windows(items, reader, banks, encoder, plan)
        for item in items:  # keys of the split's own videos
            item.candidates = [f"{seed}/{c}" for c in item.candidates]
        evidence = {(f"{seed}/{v}", a, b): e for (v, a, b), e in evidence.items()}
        torch.save({"items": items, "evidence": evidence}, cache_file)
        logger.info("split %d: %d queries, %d windows encoded", seed, len(items), len(evidence))
        return Split(seed, items, evidence)
    finally:
        reader.close()


def _plan_key(plan: WindowPlan, candidates: int) -> str:
    reads = f"r{plan.reads}" if plan.reads else ""  # a key from before ``reads`` still names its windows
    return f"w{plan.windows}f{plan.frames}l{plan.level:g}m{plan.margin}p{plan.pair_s:g}{reads}c{candidates}"


def _selection_key(selection) -> str:
    return "" if selection is None else f"-s{selection.fingerprint}"


def _partners(videos) -> dict[str, str]:
    groups: dict[str, list[str]] = {}
    for v in videos:
        if v.group:
            groups.setdefault(v.group, []).append(v.id)
    return {a: b for ids in groups.values() if len(ids) == 2 for a, b in (ids, ids[::-1])}


def _item(
    text, meaning, video, videos, partner, q, q_sel, states, banks, candidates: int, plan: WindowPlan
) -> QueryItem:
    """One query's candidates (the frame tier's first by ``q_sel``, its own video and partner among
    them), the candidates it is true of, and their windows (by ``q_sel``)."""
    q_np, own = q_sel.float().numpy(), q.float().numpy()
    relevance = {v.id: banks[v.id] @ q_np for v in videos}
    score = {k: float(r.max()) if r.size else float("-inf") for k, r in relevance.items()}
    ranked = sorted(score, key=lambda k: -score[k])
    chosen = ranked[:candidates]
    for must in (video.id, partner):
        if must is not None and must not in chosen:
            chosen[-1 if chosen[-1] not in (video.id, partner) else -2] = must
    chosen = sorted(chosen, key=lambda k: -score[k])
    by_id = {v.id: v for v in videos}
    windows = [[(int(w[0]), int(w[-1])) for w in moment_windows(relevance[c], plan)] for c in chosen]
    return QueryItem(
        text=text,
        kind=meaning.kind,
        q=q.float(),
        states=states,
        candidates=chosen,
        target=chosen.index(video.id),
        true_of=[meaning.true_of(by_id[c]) for c in chosen],
        windows=windows,
        partner=chosen.index(partner) if partner is not None else None,
        frame_scores=[score[c] for c in chosen],
        query_frame_scores=[float((banks[c] @ own).max()) if banks[c].size else 0.0 for c in chosen],
    )


def window_frames(reader, record, bank, window: np.ndarray, plan: WindowPlan, frame_shape) -> tuple:
    """(frames [n, h, w, 3], source frame indices [n]) of one window as serving reads them
    (engine.frames): the frames the index's frame store holds from there (bank frames), the others
    (``plan.reads`` spread over the window, their pair frames ``plan.pair_s`` later) decoded from the
    source at the working size ``frame_shape`` (w, h)."""
    from indexer.video import decode_frames
    from models.windows import window_reads

    read, _ = window_reads([window], bank.frame_indices, float(record.fps), int(record.num_frames), plan)
    rows = reader.stored_rows(record.id, read)
    frames: list = [None] * len(read)
    for j, row in enumerate(rows):
        if row >= 0:
            frames[j] = reader.read_stored_frame(record.id, int(row))
    need = [j for j, f in enumerate(frames) if f is None]
    if need:
        for j, frame in zip(need, decode_frames(record.path, read[need], size=frame_shape), strict=True):
            frames[j] = frame
    return np.stack(frames), read


def _encode_windows(items, reader, banks, encoder, plan: WindowPlan, batch: int = 16) -> dict:
    """The evidence (tokens [M', D], mask [M'], positions [M', 4]) of every distinct window the items name, read
    as serving reads them (``window_frames``) and encoded clip by clip (Eq. 4-5)."""
    from models.backbone import VideoClip

    wanted = sorted({(c, a, b) for item in items for c, ws in zip(item.candidates, item.windows, strict=True)
                     for a, b in ws})  # fmt: skip
    out = {}
    for start in range(0, len(wanted), batch):
        chunk = wanted[start : start + batch]
        clips = []
        for video_id, a, b in chunk:
            record = reader.video(video_id)
            shape = encoder.backbone.frame_shape(int(record.width), int(record.height))
            frames, read = window_frames(reader, record, banks[video_id], np.arange(a, b + 1), plan, shape)
            clips.append(VideoClip(frames, read, float(record.fps), segments=[np.arange(len(read))]))
        for key, bank in zip(chunk, encoder.evidence(clips), strict=True):
            n = int(bank.mask[0].sum())
            out[key] = (
                bank.tokens[0, :n].half().cpu(),
                bank.mask[0, :n].cpu(),
                bank.positions[0, :n].half().cpu(),
            )
        if start // batch % 25 == 0:
            logger.info("encoded %d / %d windows", min(start + batch, len(wanted)), len(wanted))
    return out


def describe(split: Split) -> dict:
    """Counts of a split's queries by kind, and how often the target is among the candidates first."""
    kinds: dict[str, int] = {}
    for item in split.items:
        kinds[item.kind] = kinds.get(item.kind, 0) + 1
    return {"seed": split.seed, "queries": len(split.items), "by_kind": kinds, "windows": len(split.evidence)}


def dump_items(split: Split, path: Path) -> None:
    """A readable listing of a split's queries (for looking at what the head is trained on)."""
    rows = [
        {"text": i.text, "kind": i.kind, "candidates": i.candidates, "target": i.target, "true_of": i.true_of,
         "partner": i.partner, "windows": i.windows, "frame_scores": [round(s, 4) for s in i.frame_scores]}
        for i in split.items
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
