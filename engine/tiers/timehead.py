"""The time tier: the time head (models.time_head) ranks the shortlist for a query about order or count.

A query that names an order ("a red square appears, then a blue circle appears") or a count ("a red
square appears twice") is parsed into its events (models.time_query); each event phrase is embedded
on its own, and the head reads every candidate's frame bank in time order against them. Every
candidate of the shortlist is scored by the head under the same condition (one ranking, one score
space), so the tier replaces the heavy tier for such a query; the frame tier's and one-shot's scores
cannot tell a video from its mirror, or one showing from two.

A query the head was not trained to answer (three events, "three times", another language) is not
the tier's: :meth:`TimeTier.plan` returns None and the cascade goes on as for any description.
"""

from __future__ import annotations

import numpy as np

from engine.moments import duration_of, relevance_runs, relevance_scores, run_span
from engine.relevance import relevance
from engine.results import Hit, ordered
from engine.tiers.base import Tier, TierRequest, register
from models.time_head import TimeHead, centred
from models.time_query import TimeQuery, parse_time_query

EVENTS_MOMENT = "time"  # a moment source (service.schemas.Moment): from the first event's showing to the last


@register
class TimeTier(Tier):
    name = "time"
    heavy = True  # the cascade's heavy tier for a time query (its backbone calls: one per event text)

    def __init__(self, index, encoder, head: TimeHead):
        self.index = index
        self.encoder = encoder  # embeds the event phrases as queries are embedded
        self.head = head

    def plan(self, query: str | None) -> TimeQuery | None:
        """The order or count ``query`` asks for, when this head answers it; else None."""
        return self.answers(parse_time_query(query))

    def answers(self, parsed: TimeQuery | None) -> TimeQuery | None:
        """``parsed`` (models.time_query) when this head answers that order or count; else None."""
        if parsed is None or not self.head.config.supports(parsed.condition, len(parsed.events)):
            return None
        return parsed

    def run(self, request: TierRequest, hits: list[Hit], plan: TimeQuery | None = None) -> list[Hit]:
        plan = plan or self.plan(request.query)
        if plan is None or not hits:
            return hits
        if request.events is not None and tuple(request.events[0]) == tuple(plan.events):
            events = request.events[1]  # embedded for stage 1 (engine.search.cascade.Cascade.read_query)
        else:
            with request.clock.stage("query_embed"):
                events = self.encoder.embed_queries(list(plan.events)).float().numpy()
        with request.clock.stage("head"):
            banks = [self.index.frame_bank(h.video_id) for h in hits]
            raw = [event_scores(b, events) for b in banks]
            relevance = [centred(r) for r in raw]
            scored = self.head.score(relevance, plan.condition)
            for hit, (score, _steps), x, r, bank in zip(hits, scored, relevance, raw, banks, strict=True):
                hit.score = score
                hit.reranked = True
                hit.tier = self.name
                # its relevance is its weakest event's (engine.search.evidence: each event's best frame)
                # times the head's confidence that they show in the order or number asked
                hit.events = events
                hit.event_peaks = r.max(axis=0) if len(r) else None
                hit.time_confidence = self.head.confidence(score, plan.condition)
                hit.moment = time_moment(bank, x, plan, hit.record)
                hit.moment_source = None if hit.moment is None else EVENTS_MOMENT
        ranked = ordered(hits)
        if request.on_update is not None:
            request.on_update(ranked)
        return ranked


def event_scores(bank, events: np.ndarray) -> np.ndarray:
    """Each event's score on each bank frame, p_k · f_t [C, E], read from the float16 bank in place
    (engine.moments.relevance_scores), once."""
    return np.stack([relevance_scores(bank.embeddings, e) for e in events], axis=1)


def time_moment(bank, x: np.ndarray, plan: TimeQuery, record) -> tuple[float, float] | None:
    """The moment a query about time is answered by: for an order, from the first event's showing to
    the last one's (the pair of frames i < j that shows them best, each widened to its run of
    relevance, engine.moments); for a count of n, from the first to the last of the n best showings.
    None where the bank is too short to hold it (the searcher's own rule then applies)."""
    if len(x) < 2:
        return None
    fps = float(record.fps) if record is not None and record.fps else 1.0
    duration = duration_of(record)

    def run_of(values: np.ndarray, row: int):
        return next((r for r in relevance_runs(values) if r.first <= row <= r.last), None)

    if plan.kind == "order":
        first, last = x[:, 0], x[:, len(plan.events) - 1]
        best_before = np.maximum.accumulate(first)[:-1]  # the best first-event frame before each row
        j = 1 + int(np.argmax(np.minimum(best_before, last[1:])))
        i = int(np.argmax(first[:j]))
        runs = [run_of(first, i), run_of(last, j)]
    else:
        runs = relevance_runs(x[:, 0], limit=plan.count)
    if not runs or any(r is None for r in runs):
        return None
    spans = [run_span(r, bank.timestamps, 1.0 / fps, duration) for r in runs]
    return min(a for a, _ in spans), max(b for _, b in spans)


def time_relevance(weakest: float | None, hit: Hit) -> float | None:
    """A time-tier hit's relevance (engine.relevance) from its weakest event's (whether it shows every
    event, each event's best bank frame against that event's own null: :func:`weakest_event_relevance`)
    and, for the order or number asked, the time head's calibrated confidence
    (models.time_head.TimeHead.confidence):

        relevance = min_k relevance(max_t p_k · f_t, null(p_k)) · sigmoid(a_c · y_T + b_c)

    (the confidence left out where the head has none). Without the confidence a video that shows the
    events in the other order, or once where twice is asked, would read as fully relevant."""
    if weakest is None or hit.time_confidence is None:
        return weakest
    return weakest * hit.time_confidence


def weakest_event_relevance(hit: Hit, null_of) -> float | None:
    """Whether a time-tier hit shows every event (engine.relevance): its weakest event's relevance, each
    event's best bank frame against that event's own null (``null_of(p_k)``); None for an empty bank.
    The hit's relevance is this times the head's confidence (:func:`time_relevance`); the cascade's
    keep check reads this alone (engine.search.searcher)."""
    if hit.event_peaks is None:
        return None
    return min(
        relevance(float(peak), null_of(e)) for e, peak in zip(hit.events, hit.event_peaks, strict=True)
    )
