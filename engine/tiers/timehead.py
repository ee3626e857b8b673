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

from engine.hits import Hit, ordered
from engine.tiers import register
from engine.tiers.base import Tier, TierRequest
from models.time_head import TimeHead, event_relevance
from models.time_query import TimeQuery, parse_time_query


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
        parsed = parse_time_query(query)
        if parsed is None or not self.head.config.supports(parsed.condition, len(parsed.events)):
            return None
        return parsed

    def run(self, request: TierRequest, hits: list[Hit], plan: TimeQuery | None = None) -> list[Hit]:
        plan = plan or self.plan(request.query)
        if plan is None or not hits:
            return hits
        with request.clock.stage("query_embed"):
            events = self.encoder.embed_queries(list(plan.events)).float().numpy()
        with request.clock.stage("head"):
            banks = [np.asarray(self.index.frame_bank(h.video_id).embeddings) for h in hits]
            scored = self.head.score([event_relevance(b, events) for b in banks], plan.condition)
            for hit, (score, _steps) in zip(hits, scored, strict=True):
                hit.score = score
                hit.reranked = True
                hit.tier = self.name
        ranked = ordered(hits)
        if request.on_update is not None:
            request.on_update(ranked)
        return ranked
