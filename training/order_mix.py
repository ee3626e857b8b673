"""Composed order queries for the rerank head: more (A, B) pairs than a rendered split holds.

A split holds ten mirror pairs, so the head trains on 30 orders of two events in all, and it learns
them without learning order: on the development split its order within the pair stays near chance
while it fits the training splits' orders (training/tiny_world/README.md). What it must learn is to
bind an event it sees in a clip to the event the query names first or second, for any two of the
world's 32 events; these items give it many such pairs from clips the splits already encoded.

Every encoded window of a split is labelled by the events its frames overlap (world truth: an event's
span, the window's bank frames' times): a window on one still event (a single-event, order or count
video's; not a change, whose frames do not show its event as its text names it) is that event's
clip, a window on none is a haystack clip. A composed query "A, then B" (any phrasing of
world.vocab.order_text) reads, per candidate, a few clips in a row:

    target      A's clip, B's clip, with haystack clips among them, A before B
    mirror      the same clips, A's and B's places swapped (only the order tells them apart)
    other first the target with A's clip replaced by another event's (B alone shows)
    other last  the target with B's clip replaced by another event's
    mirror'     B's and A's clips from other windows, B first (other pixels, the other order)

so the contrast is Eq. 11's over the candidates, as for a rendered query. A candidate's windows are
(video key, first, last) triples: the clips of a composed candidate come from several videos
(training.moment_head.make_batch reads either form).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from training.moment_data import QueryItem, Split

STILL_KINDS = ("single", "order", "count")  # world.corpus video kinds whose events show as named
HAYSTACK = ""


def window_labels(work: Path, model: Path, corpus: dict, split: Split) -> dict[tuple[str, int, int], str]:
    """Per encoded window of ``split`` (rendered and indexed under ``work`` with ``corpus`` and ``model``,
    training.moment_data): the still event its frames overlap (its name), HAYSTACK for none; windows on
    a change, or on two events, are left out."""
    from indexer.store import IndexReader
    from training.moment_data import index_split, render_split

    rendered = render_split(work, split.seed, corpus)
    truth = rendered.by_id()
    reader = IndexReader(index_split(rendered, work, model))
    labels = {}
    try:
        times = {}
        for key in split.evidence:
            video, a, z = key
            vid = video.split("/", 1)[1]
            if vid not in times:
                bank = reader.frame_bank(vid)
                times[vid] = np.asarray(bank.frame_indices, dtype=np.float64) / float(reader.video(vid).fps)
            t = times[vid]
            start, end = t[a], t[z]
            shown = [name for name, e0, e1 in truth[vid].events if start <= e1 + 0.5 and end >= e0 - 0.5]
            if not shown:
                labels[key] = HAYSTACK
            elif len(shown) == 1 and truth[vid].kind in STILL_KINDS:
                labels[key] = shown[0]
    finally:
        reader.close()
    return labels


def composed_orders(
    labels: dict[tuple[str, int, int], str], embed, count: int, *, seed: int = 0, clips: int = 4,
    same_colour: float = 0.0,
) -> list[QueryItem]:  # fmt: skip
    """``count`` composed order queries (module docstring) from the labelled windows; ``embed`` maps
    texts to (q [n, d], the backbone's ClipStates of their prompts), as training.moment_data embeds a
    split's queries. A ``same_colour`` share of them draws its four events (A, B and the two others) from
    one colour's shapes, so only the shapes tell the candidates apart: the served head's order misses
    on development seeds were mirrors of one colour ("a green bar ... a green triangle") its score set
    0.01-0.03 apart (training/tiny_world/README.md)."""
    from world.vocab import ORDER_PHRASINGS, order_text, parse_event

    rng = np.random.default_rng(seed)
    by_event: dict[str, list] = {}
    for key, name in sorted(labels.items()):
        by_event.setdefault(name, []).append(key)
    haystack = by_event.pop(HAYSTACK, [])
    events = sorted(by_event)
    if len(events) < 4 or len(haystack) < clips:
        raise ValueError(
            f"too few labelled windows to compose orders ({len(events)} events, {len(haystack)} haystack)"
        )

    def pick(name):
        options = by_event[name]
        return options[rng.integers(len(options))]

    by_colour: dict[str, list[str]] = {}
    for name in events:
        by_colour.setdefault(parse_event(name).colour, []).append(name)
    one_colour = [names for _, names in sorted(by_colour.items()) if len(names) >= 4]
    if same_colour and not one_colour:
        raise ValueError("no colour has four labelled events to compose same-colour orders from")

    plans = []
    for _ in range(count):
        pool = events
        if same_colour and rng.random() < same_colour:
            pool = one_colour[rng.integers(len(one_colour))]
        a, b, c, d = (pool[i] for i in rng.choice(len(pool), size=4, replace=False))
        slots = sorted(rng.choice(clips, size=2, replace=False))
        fill = [haystack[i] for i in rng.choice(len(haystack), size=clips, replace=False)]

        def row(first, second, s=slots, f=fill):
            out = list(f)
            out[s[0]], out[s[1]] = first, second
            return out

        wa, wb = pick(a), pick(b)
        candidates = [
            row(wa, wb),  # target
            row(wb, wa),  # mirror: the same clips the other way round
            row(pick(c), wb),  # another event first
            row(wa, pick(d)),  # another event last
            row(pick(b), pick(a)),  # the mirror from other clips
        ]
        text = order_text(parse_event(a), parse_event(b), int(rng.integers(len(ORDER_PHRASINGS))))
        plans.append((text, candidates))
    items = []
    for start in range(0, len(plans), 256):
        part = plans[start : start + 256]
        q, states = embed([text for text, _ in part])
        for i, (text, candidates) in enumerate(part):
            n = int(states.mask[i].sum())
            items.append(
                QueryItem(
                    text=text,
                    kind="order",
                    q=q[i].float(),
                    states=states.hidden[i, :n].half(),
                    candidates=[f"composed/{k}" for k in range(len(candidates))],
                    target=0,
                    true_of=[True, False, False, False, False],
                    windows=candidates,
                    partner=1,
                    frame_scores=[0.0] * len(candidates),
                    query_frame_scores=[0.0] * len(candidates),
                )  # fmt: skip
            )
    return items


def composed_split(work: Path, model: Path, recipe, train: list[Split]) -> list[Split]:
    """``recipe.composed_orders`` composed order queries (training.moment_head.MomentRecipe) from the
    windows of the training splits ``train``, as one more split (seed 0, its evidence theirs); none
    for 0."""
    from training.moment_data import query_states

    if not recipe.composed_orders:
        return []
    labels = {}
    for split in train:
        labels.update(window_labels(work, model, recipe.corpus, split))
    embed = query_states(work, train[0].seed, model, recipe.corpus)
    items = composed_orders(
        labels, embed, recipe.composed_orders, seed=recipe.seed, same_colour=recipe.composed_same_colour
    )
    return [Split(0, items, {})]
