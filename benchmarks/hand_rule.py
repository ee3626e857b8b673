"""The hand rule: the strongest free baseline over per-frame scores for queries about time, a row of
its own in benchmarks/bench_quality.py.

It reads the query with the time head's template parser (models.time_query: "A, then B", "B after
A", "A before B", "... twice"), and a colour change ("a square turns from red to blue") as the order
of its two colours (the red square's frames, then the blue square's), embeds each event phrase with
the backbone, and scores each candidate from its frame bank alone, with no learning
(training.time_head.rule_score): an order by the best pair of frames i < j showing the events in
turn, a count by how far the number of relevance runs lies from the count asked. Nothing else is
read: a motion (left or right, grow or shrink) leaves single frames no trace, so the rule keeps the
frame tier's ranking there, as it does for a query it cannot parse.
"""

from __future__ import annotations

import re

import numpy as np

_TURNS = re.compile(r"^an? (?P<shape>\w+) (?:turns|changes) from (?P<c1>\w+) to (?P<c2>\w+)$")


def rule_plan(query: str):
    """(condition, event phrases) the rule reads ``query`` as, or None (keep the frame tier's order)."""
    from models.time_query import parse_time_query

    text = query.strip().lower().rstrip(".")
    m = _TURNS.match(text)
    if m:
        return "order", (f"a {m['c1']} {m['shape']} appears", f"a {m['c2']} {m['shape']} appears")
    parsed = parse_time_query(text)
    if parsed is None:
        return None
    return parsed.condition, parsed.events


def rule_rerank(index, encoder, query: str, hits: list) -> tuple[list, bool]:
    """``hits`` (the frame tier's ranking) reordered by the rule's score, ties and unread queries in
    their frame-tier order; and whether the rule read the query."""
    from engine.moments import relevance_scores
    from models.time_head import centred
    from training.time_head import rule_score

    plan = rule_plan(query)
    if plan is None or not hits:
        return hits, False
    condition, events = plan
    e = encoder.embed_queries(list(events)).float().numpy()
    scores = []
    for hit in hits:
        bank = index.frame_bank(hit.video_id)
        x = np.stack([relevance_scores(bank.embeddings, v) for v in e], axis=1)
        scores.append(rule_score(centred(x), condition))
    order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))
    return [hits[i] for i in order], True
