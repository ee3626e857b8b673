"""Stage 2 as a cascade: which tier runs on which candidates, given what the search measured.

The frame tier (no backbone call) ranks every candidate of the shortlist first. What runs after it
is one decision, :meth:`CascadePolicy.route`, over a few measured :class:`Signals`; the first rule
that applies wins:

    rule                                                                   route
    mode ``frames``, or no heavy budget (``heavy`` 0)                      the frame tier's order stands
    the heavy tier is a streaming head that reads the query's words
        (models.head ``query_words``) and the query asks for an order of
        two events                                                         the order route: the head on the
                                                                           ``head_candidates`` that show
                                                                           both events best (:meth:`Cascade._order`)
    the time head parses the query as an order or a count (where it reads
        a query it measurably wins: docs/results.md)                      the time tier, on all R
    the heavy tier is a streaming head that reads moments (models.windows),
        its router says the query is about time (motion or change, an
        order or a count the time head does not read: p >= its threshold)
        and the frame tier cannot tell its first few apart (two or more
        within ``tie_margin`` of its best; scored by the router's selection
        query where it ships one)                                          the heavy tier, on those few
                                                                           and the frame tier's first
                                                                           (``head_reversal_weight`` > 0:
                                                                           q_sel's first ``head_candidates``)
    the frame tier's lead (its first score less its second) reaches
        ``heavy_margin``                                                   the frame tier's order stands
    otherwise (too close to call, or asked for by ``heavy``)              the heavy tier, on the top ``heavy``

Where the router ships a selection query (models.router.SelectionQuery: q_sel, where a query about
time's events show), a query it calls about time is read by q_sel (:meth:`Cascade.read_query`, once,
before stage 1): stage 1 shortlists by q and q_sel in turn, a motion query by q_sel's best bank
frames too (engine.search.stage1); the tie is measured on q_sel's frame scores; the head reads the
candidates q_sel scores highest and the frame tier's first, and each one's moments are cut from
q_sel · f_c; the head scores with q and the query's text, and each candidate it read ranks by

    s = q · z_T + head_selection_weight · max_c q_sel · f_c + head_frame_weight · max_c q · f_c
          + head_reversal_weight · (q · z_T - q · z_T backwards)

(its reading of how the moments change, plus whether the frames show the events the query names at
all, by its selection query and by itself: alone, the head put a moving yellow triangle first for "a
cyan circle moves down" on development seed 0; weighed by q_sel's frames alone, a sentence the router
misreads, "after some grey frames an orange square shows up", found an orange circle; q_sel's term weighs
most: across videos the head often puts another shape or colour first, core.config). The last term is the
head's own reading of the change: each moment played backwards (models.windows.played_backwards) reads as
its opposite change, while a shape shown still reads the same either way, so it tells the moving shape from
a still showing of it whose crisper frames the frame bank's terms favour (a count video's orange circles
above the one moving left); one more pass of the backbone and the head per candidate read, over frames
already decoded. The router is learned (a
logistic regression on q, trained with the head: training.moment_head). The time head's parse
(models.time_head, a template) routes the order and count queries it reads, and its ranking stands
only where its evidence is stronger: where its first differs from the frame tier's, the time
head's first must show every event the parse read (each event's relevance reaches MIN_RELEVANCE), or
the head's calibrated confidence must say that its first shows them as asked and the frame tier's
first does not, with a relevance (weakest event x confidence) no lower than that one's
(:meth:`Cascade.time_first_stands`); else the frame tier's order stands and the answer says so. A sentence the parser misreads ("a red
square appears, then it is gone", "after the intro, a yellow triangle appears") so keeps the frame
tier's answer. A tie rule
(the parse routing only a frame-tier tie) was measured first and dropped: mirror pairs of 2-5 min
videos lie up to 0.12 apart on the frame tier's score, ordinary sentences from 0.003. The head may only reorder what the frame tier
could not tell apart, and a reordering stands only when the head's evidence is stronger: its best
candidate beats the frame tier's first by at least ``keep_margin`` on the head's own score, else the
frame tier's order stands (and the answer says so). Every answer records its route (``route``).

The heavy tier is the streaming head's when one serves stage 2, else one-shot; a request of
K' <= L goes one-shot as a whole (§3.1: short inputs keep the backbone's own pathway), and says
so. What the heavy tier scored is ordered by its own score above the rest, which keep the frame
tier's order: one score space per ranked group, and every hit says which tier ranked it. A new
tier is a module of :mod:`engine.tiers` and, to be routed to, one rule here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from core.config import MIN_RELEVANCE, SearchMode
from engine.results import Hit
from engine.search.state import SearchState
from engine.tiers import RerankStats, TierRequest
from engine.tiers.timehead import EVENTS_MOMENT, event_scores, time_moment, time_relevance
from models.router import frame_evidence
from models.selection import query_key
from models.time_head import centred
from models.time_query import parse_time_query

__all__ = ["ORDER_READER", "TIME_READER", "Cascade", "CascadePolicy", "EventReader", "Route", "Signals"]

HEAVY, TIME, ORDER = "heavy", "time", "order"  # the routes past the frame tier
# what an answer the streaming head ranked for a query about time (the router's route) says of its relevance:
# the head has no per-video confidence that a change shows as asked (neither its q · z_T nor Eq. 11's share
# among the candidates it read separates the right video from a static or absent one: docs/architecture.md,
# Relevance), and q's own best frame lies far from a motion's stills
RELEVANCE_OF_STILLS = (
    "the streaming head ranked the candidates it read by how their moments change; `relevance` is each one's "
    "best still frame under the query and does not measure the change, so a right video may read low "
    "(min_score filters on it)"
)


@dataclass(frozen=True)
class EventReader:
    """Who ranked a query's events (an order or a count), as the answer names it, and whether its confidence
    is a per-video calibrated probability (:meth:`Cascade.time_first_stands`' second rule needs one)."""

    name: str
    calibrated: bool


TIME_READER = EventReader("the time head", calibrated=True)  # models.time_head.TimeHead.confidence
# the streaming head on the order route: its confidence a share among the candidates it read (head_confidence)
ORDER_READER = EventReader("the streaming head", calibrated=False)


@dataclass(frozen=True)
class Signals:
    """What the cascade knows once the frame tier has ranked the shortlist."""

    mode: str  # core.config.SearchMode
    budget: int  # candidates the heavy tier may re-encode: min(heavy, R)
    heavy_margin: float
    lead: float | None  # the frame tier's first score less its second (None: one candidate)
    time_plan: object = None  # the order or count the time head answers (None: not such a query)
    order_plan: object = None  # an order the streaming head reads (it reads the query's words), else None
    streaming: bool = False  # the heavy tier is a streaming head
    moments: bool = False  # ... one that reads moments and answers queries about time
    about_time: float | None = None  # the router's probability that the query is about time
    router_threshold: float = 0.5
    ties: int = 1  # the frame tier's first candidates within ``tie_margin`` of its best (at most the cap)
    # per hit, in the frame tier's order: its frame score under the router's selection query (None: q's)
    selection: tuple[float, ...] | None = None
    # the head reads each moment played backwards too (``head_reversal_weight`` > 0 and a selection query):
    # then it reads every one of the first ``candidates`` by q_sel, not only the near-ties
    backwards: bool = False
    candidates: int = 1  # the frame tier's first ``head_candidates`` (at most the shortlist)

    @property
    def called_about_time(self) -> bool:
        """Whether the router calls the query about time (its probability reaches its threshold)."""
        return self.about_time is not None and self.about_time >= self.router_threshold


@dataclass(frozen=True)
class Route:
    tier: str | None  # HEAVY, TIME, ORDER, or None: the frame tier's order stands
    candidates: int = 0  # how many of the frame tier's top the tier scores
    why: str = ""
    backwards: bool = False  # the head reads each moment played backwards too (Hit.change)


@dataclass(frozen=True)
class CascadePolicy:
    """The rules of the module docstring, as one function of the measured signals."""

    def route(self, s: Signals, shortlist: int) -> Route:
        if s.mode != SearchMode.RERANK or s.budget == 0:
            return Route(None, why="no heavy budget")
        if s.order_plan is not None:  # the streaming head reads the query's words: it answers order
            why = (
                "an order: the streaming head reads the moments of the candidates that show both events best"
            )
            return Route(ORDER, shortlist, why=why)
        if s.time_plan is not None:  # where it reads a query, the time head measurably wins
            return Route(TIME, shortlist, why="a query about order or count (the time head's reading)")
        if s.moments and s.called_about_time and s.ties >= 2:
            if s.backwards:
                why = (f"about time (router p={s.about_time:.2f}): the streaming head reads the moments of the "
                       f"{s.candidates} candidates whose frames show the query's selection query best, and the "
                       "frame tier's first, each forwards and played backwards")  # fmt: skip
                return Route(HEAVY, s.candidates, why=why, backwards=True)
            read = (f"{s.ties} candidates whose frames under the query's selection query it could not tell apart, "
                    "and the frame tier's first" if s.selection is not None
                    else f"frame tier's first {s.ties}, which it could not tell apart")  # fmt: skip
            why = f"about time (router p={s.about_time:.2f}): the streaming head reads the moments of the {read}"
            return Route(HEAVY, s.ties, why=why)
        if s.lead is not None and s.lead >= s.heavy_margin:
            return Route(None, why="the frame tier's lead settles it")
        return Route(HEAVY, s.budget, why="too close to call, or asked for")


class Cascade:
    """The tiers of stage 2 over one index and the policy that routes between them."""

    def __init__(
        self, frame_tier, reranker, *, short_reranker=None, time_tier=None, policy=None, router=None,
        tie_margin: float = 0.0, head_candidates: int = 6, keep_margin: float = 0.0, selection_weight: float = 0.0,
        frame_weight: float = 0.0, weakest_event=None, order_event_weight: float = 0.0, embed_queries=None,
        order_windows: str = "query", reversal_weight: float = 0.0,
    ):  # fmt: skip
        self.frame_tier = frame_tier
        self.reranker = reranker  # the heavy tier: the streaming head's, or one-shot
        self.short_reranker = short_reranker  # one-shot, for a streaming stage 2's requests of K' <= L
        self.time_tier = time_tier
        self.policy = policy or CascadePolicy()
        self.router = router  # models.router.Router: is a query about time (the moment head's)
        self.tie_margin, self.head_candidates, self.keep_margin = tie_margin, head_candidates, keep_margin
        # the frame bank's weights in the head's score, under q_sel and under q (_with_frame_evidence)
        self.selection_weight, self.frame_weight = selection_weight, frame_weight
        # ... and the head's reading of each moment played backwards: + reversal_weight · Hit.change
        self.reversal_weight = reversal_weight
        # hit -> its weakest event's relevance: whether a time-tier hit shows every event its plan read
        # (module docstring)
        self.weakest_event = weakest_event
        # the order route's score: q · z_T + order_event_weight · min_k max_t p_k · f_t (:meth:`_order`); an
        # order's or a count's event phrases embedded by ``embed_queries`` (texts -> [E, d] numpy)
        self.order_event_weight, self.embed_queries = order_event_weight, embed_queries
        # where the order route cuts its moments: "query" by q_sel · f_c, "events" where each event shows best
        self.order_windows = order_windows

    @property
    def moments(self) -> bool:
        """Whether the heavy tier is a streaming head that reads moments (and answers time queries); a
        one-shot tier that reads moments (``oneshot_moments``) answers none: order and count queries
        still go to the time head beside it."""
        return self.reranker.streaming and self.reranker.window_plan is not None

    @property
    def reads_order(self) -> bool:
        """Whether the heavy tier's head answers order: a streaming head that reads moments and the
        query's words (models.head ``query_words``: the backbone's final states all but drop "before" and
        "after", training/tiny_world/README.md)."""
        return self.moments and self.reranker.encoder.head.config.query_words

    @property
    def selects(self) -> bool:
        """Whether a query about time gets a selection query (q_sel) here: stage 1 then shortlists by
        it too (engine.search.stage1)."""
        return self.moments and self.router is not None and self.router.selection is not None

    def heavy_tier(self, frames: int):
        """The heavy tier for a request of ``frames`` = K': the streaming head's, unless K' <= L
        (§3.1: short inputs keep the backbone's own pathway), which goes one-shot for every candidate;
        a head that reads moments cuts its own clips (models.windows), whatever K'."""
        if self.short_reranker is not None and not self.moments and self.reranker.encoder.is_short(frames):
            return self.short_reranker
        return self.reranker

    def run(self, state: SearchState) -> None:
        """Stage 2 over ``state.hits`` (mode frames or rerank); the frames' counters and warnings
        go to the answer even when a tier fails."""
        p, outcome = state.params, state.outcome
        stats = RerankStats()
        try:
            request = TierRequest(
                query=state.seen_text if p.image is None else None, q=state.q[0], frames=p.frames, seed=p.seed,
                stats=stats, clock=state.clock, exit_threshold=p.exit_threshold, on_update=state.on_update,
                chunk=p.update_chunk, query_key=query_key(state.seen_text, p.image),
            )  # fmt: skip
            state.hits = self._route(state, request, state.hits)
        finally:
            f = stats.frames
            outcome.cache_hits, outcome.cache_misses = f.cache_hits, f.cache_misses
            outcome.decoded_frames, outcome.cache_errors = f.decoded_frames, f.cache_errors
            outcome.store_frames, outcome.store_errors = f.store_frames, f.store_errors
            outcome.warnings += stats.warnings

    def read_query(self, state: SearchState) -> None:
        """Whether the query is about time, measured once before stage 1 (it shortlists such a query
        by its selection query too: engine.search.stage1): the router's probability
        (``state.about_time``) where a head that reads moments serves a text query in rerank mode with
        a heavy budget, and, where the router calls it about time and ships a selection query, q_sel
        (``state.select_q``), and whether stage 1 ranks the frame banks by it too
        (``state.select_frames``): not for a query the time head reads (an order or a count: its route
        comes first), where a shortlist widened by q_sel's best frames let the frame tier put a video
        of grey haystack first for "a white triangle appears before the screen goes grey"
        (tests/engine/test_time_routing.py); such a query's events instead (``state.events``, embedded
        once: stage 1 ranks the frame banks by its weakest event's best frame, the time tier reads them)."""
        p = state.params
        if (p.mode != SearchMode.RERANK or not p.heavy or not self.moments or self.router is None
                or p.image is not None or state.seen_text is None):  # fmt: skip
            return
        state.about_time = self.router.probability(state.q[0])
        order = self.order_plan(state)  # read by the head whatever the router says (its windows by q_sel)
        about = state.about_time >= self.router.threshold or order is not None
        if about and self.router.selection is not None:
            state.select_q = self.router.selection(state.q[0])
            plan = order or self.time_plan(state)
            state.select_frames = plan is None
            if plan is not None:  # stage 1 ranks the frame banks by its weakest event instead
                state.events = self._embed_events(state, plan)

    def time_asked(self, state: SearchState):
        """What the query's words ask about time (models.time_query: an order or a count, answered here
        or not; None for none or an image query), parsed once a search: the route asks before stage 1
        and after the frame tier (:meth:`time_plan`), the searcher when it says what was ignored."""
        if not state.time_asked_read:
            state.time_asked = parse_time_query(state.seen_text if state.params.image is None else None)
            state.time_asked_read = True
        return state.time_asked

    def order_plan(self, state: SearchState):
        """The order of two events the streaming head reads (:attr:`reads_order`), else None: its route
        comes before the time head's."""
        if not self.reads_order or state.params.mode != SearchMode.RERANK or not state.params.heavy:
            return None
        asked = self.time_asked(state)
        return asked if asked is not None and asked.kind == "order" and len(asked.events) == 2 else None

    def time_plan(self, state: SearchState):
        """The order or count the time head reads in the query (None: not such a query, one it does not
        answer, or no time head)."""
        return None if self.time_tier is None else self.time_tier.answers(self.time_asked(state))

    def signals(self, state: SearchState, request: TierRequest, hits: list[Hit]) -> Signals:
        p = state.params
        budget = min(p.heavy, len(hits)) if p.mode == SearchMode.RERANK else 0
        order = self.order_plan(state) if budget else None
        plan = self.time_plan(state) if budget and order is None else None
        lead = None
        if len(hits) > 1:
            lead = (hits[0].frame_score or 0.0) - (hits[1].frame_score or 0.0)
        about = state.about_time if budget else None
        selection = None
        scores = [h.frame_score or 0.0 for h in hits]
        if about is not None and state.select_q is not None:
            # a query about time: selection (which candidates the head reads, and their moments)
            # looks where its selection query points (models.router), and the tie is measured there (not
            # for an order the head reads: the order route picks its candidates by their events)
            request.select_q = state.select_q
            if order is None:
                selection = tuple(self.frame_tier.scores(hits, request.select_vec))
                scores = sorted(selection, reverse=True)
        best = scores[0] if scores else None
        ties = sum(
            1 for v in scores[: self.head_candidates] if best is not None and v >= best - self.tie_margin
        )
        return Signals(
            mode=p.mode, budget=budget, heavy_margin=p.heavy_margin, lead=lead, time_plan=plan, order_plan=order,
            streaming=self.reranker.streaming,
            moments=self.moments, about_time=about,
            router_threshold=self.router.threshold if self.router is not None else 0.5, ties=ties,
            selection=selection, backwards=selection is not None and self.reversal_weight > 0,
            candidates=min(self.head_candidates, len(hits)),
        )  # fmt: skip

    def _route(self, state: SearchState, request: TierRequest, hits: list[Hit]) -> list[Hit]:
        hits = self.frame_tier.run(request, hits)
        signals = self.signals(state, request, hits)
        route = self.policy.route(signals, len(hits))
        state.outcome.route = route.why
        if state.select_q is not None:
            state.outcome.route += (
                "; stage 1 shortlisted by the query and its selection query"
                + ("'s videos and best frames" if state.select_frames else "")
                + (", and every event's best frames," if state.event_frames else "")
                + " in turn"
            )
        if route.tier == TIME:  # order or count: the time head reads every candidate (engine.tiers.timehead)
            state.outcome.rerank_embedder = self.time_tier.name
            request.events = state.events  # embedded before stage 1 (None: the time tier embeds them)
            frame = list(hits)
            return self._keep_time_unless_shown(
                state, frame, self.time_tier.run(request, hits, signals.time_plan), request=request
            )
        if route.tier == ORDER:
            return self._order(state, request, hits, signals.order_plan)
        if route.tier == HEAVY:
            m = route.candidates
            if signals.selection is not None:
                shows = {h.video_id: v for h, v in zip(hits, signals.selection, strict=True)}
                hits, m = selection_order(hits, signals.selection, m)
            request.backwards = route.backwards
            ranked = self._heavy(state, request, hits, m)
            if signals.selection is not None and (
                self.selection_weight or self.frame_weight or route.backwards
            ):
                ranked = self._with_frame_evidence(ranked, shows)
            if not signals.about_time:
                return ranked
            ranked = self._keep_unless_stronger(state, hits, ranked, m)
            # the router called it about time and the head's order stood: say what relevance reads
            if signals.called_about_time and ranked and ranked[0].tier == self.reranker.name:
                state.outcome.warnings.append(RELEVANCE_OF_STILLS)
            return ranked
        return hits

    def _embed_events(self, state: SearchState, plan) -> tuple[tuple[str, ...], object]:
        """``plan``'s event phrases and their embeddings [E, d], each phrase embedded as a query is."""
        with state.clock.stage("query_embed"):
            return tuple(plan.events), self.embed_queries(list(plan.events))

    def _order(self, state: SearchState, request: TierRequest, hits: list[Hit], plan) -> list[Hit]:
        """An order of two events, read by the streaming head that reads the query's words: every
        candidate's events are found in its frame bank (each event's best frame, p_k · f_t: whether it shows
        them at all, the time tier's evidence without its head), the head reads the moments of the
        ``head_candidates`` that show their weaker event best (cut from q_sel · f_c as for any query about
        time, or, ``order_windows`` "events", where each event shows best: :func:`event_relevance`; in time
        order) and each scores

            s = q · z_T + order_event_weight · min_k max_t p_k · f_t

        (its reading of which event shows first, plus whether both show at all: a mirror video shows the same
        events, a count or single-event video not both), above the rest in that order. Its confidence that a
        read candidate shows them as asked is the head's probability for it among those it read, Eq. 11's
        softmax over their q · z_T / tau (:func:`head_confidence`; 0 for a candidate it did not read), so that
        each hit's relevance is its weakest event's times that (engine.tiers.timehead.time_relevance, as for
        the time head: a mirror that shows both events the other way round is not fully relevant); its moment
        spans the two events (engine.tiers.timehead.time_moment). Its first stands where it shows every event
        plainly or is the frame tier's first (:meth:`_keep_time_unless_shown`'s first rule; not the time head's
        second, which needs a per-video calibrated confidence)."""
        if state.events is None or tuple(state.events[0]) != tuple(plan.events):
            state.events = self._embed_events(state, plan)
        embedded = state.events[1]
        frame = list(hits)
        shows, windows = {}, {}
        with state.clock.stage("head"):
            for hit in hits:
                bank = self.frame_tier.index.frame_bank(hit.video_id)
                raw = event_scores(bank, embedded)
                hit.events, hit.event_peaks = embedded, (raw.max(axis=0) if len(raw) else None)
                shows[hit.video_id] = float(hit.event_peaks.min()) if hit.event_peaks is not None else -1.0
                hit.moment = time_moment(bank, centred(raw), plan, hit.record)
                hit.moment_source = None if hit.moment is None else EVENTS_MOMENT
                if self.order_windows == "events" and len(raw):
                    windows[hit.video_id] = event_relevance(raw)
        request.select_relevance = windows or None
        read = sorted(hits, key=lambda h: (-shows[h.video_id], h.stage1_rank))
        ranked = self._heavy(state, request, read, min(self.head_candidates, len(read)))
        name = self.reranker.name
        by_head = [h for h in ranked if h.tier == name]
        tau = float(self.reranker.encoder.head.temperature.detach())
        confidence = head_confidence([h.score for h in by_head], tau)
        for hit in ranked:
            hit.time_confidence = 0.0
        for hit, p in zip(by_head, confidence, strict=True):
            hit.time_confidence = p
            hit.score += self.order_event_weight * shows[hit.video_id]
        scored = sorted(by_head, key=lambda h: (-h.score, h.stage1_rank))
        ranked = scored + [h for h in ranked if h.tier != name]
        return self._keep_time_unless_shown(state, frame, ranked, ORDER_READER, request=request)

    def _with_frame_evidence(self, ranked: list[Hit], shows: dict[str, float]) -> list[Hit]:
        """Each candidate the head read scores s = q · z_T + ``selection_weight`` · max_c q_sel · f_c +
        ``frame_weight`` · max_c q · f_c (+ ``reversal_weight`` · (q · z_T - q · z_T backwards) where it
        read its moments backwards too): the head reads how its moments change, the frame bank whether
        they show the events the query names at all (module docstring); one score space for the
        candidates the head read."""
        name = self.reranker.name
        for hit in ranked:
            if hit.tier == name:
                hit.score += frame_evidence(
                    shows[hit.video_id], hit.frame_score or 0.0, self.selection_weight, self.frame_weight
                )
                if hit.change is not None:
                    hit.score += self.reversal_weight * hit.change
        return heavy_first(ranked, name)

    def _keep_unless_stronger(
        self, state: SearchState, frame: list[Hit], ranked: list[Hit], m: int
    ) -> list[Hit]:
        """A head routed to by the router reorders the frame tier's near-ties only where its evidence is
        stronger: its best beats the frame tier's first by ``keep_margin`` on its own score; else the
        frame tier's order stands, and the answer says so."""
        first = frame[0]
        if not ranked or ranked[0] is first or first.tier != self.reranker.name:
            return ranked
        if ranked[0].score - first.score >= self.keep_margin:
            return ranked
        state.outcome.route += "; the head's evidence was not stronger: the frame tier's order stands"
        group = sorted(ranked[:m], key=lambda h: (-(h.frame_score or 0.0), h.stage1_rank))
        for hit in group:
            self._back_to_frame_tier(hit)
        return group + ranked[m:]

    def _keep_time_unless_shown(
        self, state: SearchState, frame: list[Hit], ranked: list[Hit], reader: EventReader = TIME_READER, *,
        request: TierRequest | None = None,
    ) -> list[Hit]:  # fmt: skip
        """The ranking of a query's events (``reader`` read them: the time head, or the streaming head for an
        order) stands where its first is the frame tier's, or shows what the parse read
        (:meth:`time_first_stands`, its second rule only for a calibrated reader); else the frame tier's order
        stands (the parse may have misread the sentence), and the answer says so. That order is the frame
        tier's over q's own shortlist where stage 1 took the events' rankings in turn (``state.plain_hits``,
        scored with ``request``): the answer the query gets were it not read as about time. Over the widened
        shortlist a video only the misread events brought in could come first ("a white triangle appears
        following the intro": a blue bar's video, 0.530 against the white triangle's 0.522), and q's own
        first be missing ("a cyan bar, and then nothing else happens": q's sixth by stage 1)."""
        state.time_read_by = reader
        if not ranked or ranked[0] is frame[0] or self.weakest_event is None:
            return ranked
        why = self.time_first_stands(ranked[0], frame[0], reader.calibrated)
        if why is not None:
            state.outcome.route += why
            return ranked
        state.outcome.route += (
            f"; {reader.name}'s first does not show every event it read: the frame tier's order stands"
        )
        if request is not None and state.plain_hits is not None:
            frame = self.frame_tier.run(request, state.plain_hits)
            state.outcome.route += " (over the query's own shortlist)"
        state.outcome.rerank_embedder = None
        state.time_reverted = True
        for hit in frame:
            self._back_to_frame_tier(hit)
            hit.reranked = False
            hit.events = hit.event_peaks = hit.time_confidence = None  # relevance: the query's best frame's
            hit.moment = hit.moment_source = None  # the moment rule's again
            hit.step_scores = hit.step_spans = hit.evidence = (
                None  # the streaming head's, if it read an order
            )
        return frame

    def time_first_stands(self, first: Hit, frame_first: Hit, calibrated: bool = True) -> str | None:
        """Whether the time head's first stands over the frame tier's (another video): where it shows every
        event its parse read (its weakest event's relevance reaches MIN_RELEVANCE), or where the head's
        calibrated confidence (engine.tiers.timehead.time_relevance) says its first shows them as asked
        (at least 0.5) and the frame tier's first does not (below 0.5), and its relevance (weakest event x
        confidence) is no lower than that one's: the frame bank shows mirror videos' events at different
        strengths (0.67 against 0.88) and white shapes low, and the head's reading of their order or number
        is then the stronger evidence, while a misread sentence's events leave the head unsure (its best
        of the frame tier's ten at most 0.18 on 19 of the 20 ordinary sentences of
        tests/engine/test_time_routing.py its parse reads, 0.53 on one). What the route adds ("" for the
        first rule), or None: the frame tier's order stands. A head without a confidence for the condition
        has the first rule alone, and so has the streaming head where it reads an order (``calibrated`` False):
        its confidence is a share among the candidates it read (:func:`head_confidence`), which always puts
        much of it somewhere, and with the second rule it took over 1 of the 30 ordinary sentences of
        tests/engine/test_time_routing.py ("at some point an orange square appears, then the grey returns":
        0.50 against the frame tier's first's 0.09; training/tiny_world/README.md)."""
        weakest = self.weakest_event(first)
        if weakest is None:
            return None
        if weakest >= MIN_RELEVANCE:
            return ""
        other = self.weakest_event(frame_first)
        ours, theirs = first.time_confidence, frame_first.time_confidence
        if not calibrated or other is None or ours is None or theirs is None or not ours >= 0.5 > theirs:
            return None
        if time_relevance(weakest, first) < time_relevance(other, frame_first):  # its relevance is lower
            return None
        return (f"; its first shows every event less plainly ({weakest:.2f} against {other:.2f}), but the time "
                f"head's confidence that it shows them as asked ({ours:.2f}, the frame tier's first "
                f"{theirs:.2f}) is the stronger evidence: its order stands")  # fmt: skip

    def _back_to_frame_tier(self, hit: Hit) -> None:
        """A hit whose later tier's order did not stand is ranked by the frame tier: its score and name."""
        hit.score, hit.tier = hit.frame_score, self.frame_tier.name

    def _heavy(self, state: SearchState, request: TierRequest, hits: list[Hit], m: int) -> list[Hit]:
        """The heavy tier over the frame tier's top ``m``, above the rest (module docstring)."""
        outcome = state.outcome
        tier = self.heavy_tier(request.frames)
        if tier is not self.reranker:  # K' <= L: the whole request one-shot (§3.1), and it says so
            outcome.warnings.append(
                f"frames = {request.frames} is at most L = {self.reranker.encoder.config.short_video_frames}: "
                "stage 2 re-encoded every candidate one-shot (short inputs keep the backbone's own "
                "pathway), not with the streaming head"
            )
            if request.exit_threshold is not None:
                outcome.warnings.append("exit_threshold ignored: one-shot encoding has no early exit")
                request = dataclasses.replace(request, exit_threshold=None)
        outcome.rerank_embedder = tier.encoder.mode
        top, rest = hits[:m], hits[m:]
        outer = request.on_update
        if outer is not None:
            request.on_update = lambda sub: outer(heavy_first(sub, tier.name) + rest)
        top = tier.run(request, top)
        return heavy_first(top, tier.name) + rest


def head_confidence(scores, temperature: float) -> list[float]:
    """The streaming head's probability for each candidate it read, from their scores s_i = q · z_T,i:
    Eq. 11's softmax, exp(s_i / tau) / sum_j exp(s_j / tau), with the head's learned temperature tau (what
    the head was trained to put on the video the query describes, among those it reads)."""
    if not len(scores):
        return []
    z = np.asarray(scores, dtype=np.float64) / temperature
    e = np.exp(z - z.max())
    return [float(v) for v in e / e.sum()]


def event_relevance(raw):
    """Where an order's events show, for cutting its moments (models.windows): each event's p_k · f_t
    [C, E] on its own scale (0 at its median over the video, 1 at its best frame), the best event per
    frame, so that each event's best showing leads a window whatever its raw cosine."""
    median, peak = np.median(raw, axis=0), raw.max(axis=0)
    return ((raw - median) / np.maximum(peak - median, 1e-6)).max(axis=1)


def selection_order(hits: list[Hit], scores, m: int) -> tuple[list[Hit], int]:
    """The hits the head reads first and how many: the ``m`` best by ``scores`` (per hit, in the frame
    tier's order: its frame score under the selection query) and the frame tier's first (q's) where
    it is not among them, so that its evidence is weighed against the head's; then the rest by
    ``scores``."""
    best = sorted(range(len(hits)), key=lambda k: (-scores[k], hits[k].stage1_rank))
    read = best[:m]
    if hits and 0 not in read:
        read = [0] + read
    rest = [k for k in best if k not in read]
    return [hits[k] for k in read + rest], len(read)


def heavy_first(hits: list[Hit], name: str) -> list[Hit]:
    """The heavy tier's hits by its score, then those it could not score in frame-tier order."""
    heavy = sorted((h for h in hits if h.tier == name), key=lambda h: (-h.score, h.stage1_rank))
    light = sorted(
        (h for h in hits if h.tier != name), key=lambda h: (-(h.frame_score or 0.0), h.stage1_rank)
    )
    return heavy + light
