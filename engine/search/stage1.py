"""Stage 1: the query embedded, the filter applied, and this page's window of the FAISS ranking.

    q = the backbone's embedding of the query (text, image, or both)       (query_embed)
    allowed = the ids a metadata filter selects (optional)                 (filter)
    the FAISS top offset + R + 1 by q·v_j within the filter, cut to R      (faiss)

A query the rerank head's router calls about time (engine.search.cascade.Cascade.read_query) is
shortlisted by q and by its selection query q_sel (where its events show: models.router) together:
the first R distinct videos of its rankings taken in turn (q's first, q_sel's first, q's second,
...): q's and q_sel's FAISS rankings and, for a query the streaming head reads (not an order or a
count the time head reads: ``select_frames``), every video ranked by its best bank frame under
q_sel, max_c q_sel · f_c; for an order or a count the time head reads, every video ranked by its
weakest event's best bank frame, min_e max_c e · f_c over the events its parse read (``event_q``:
whether it shows every event at all; indexer.store.frame_scan; both where the banks fit
core.config.FRAME_SCAN_MAX_BYTES in memory). A motion text's embedding lies far from its
event's stills, so its own video is often outside q's first R; and the event is a few seconds of a
2-5 min video, which one vector per video blurs. On development seeds 0, 4 and 5 of
benchmarks/bench_quality.py (36 motion queries, R = 10), the right video was in the shortlist of
q's and q_sel's FAISS rankings 28 times (first result right: 16), with q_sel's best frames too 33
(17), q's and the best frames alone 33 (16): what stage 2 does with the shortlist decides more than
its recall now. Of their 30 order queries, the weakest event's best frames shortlisted the right
video 28 times (24 by q and q_sel alone; first result right 20 against 18), of 36 counts 36 (35). Every hit's ``stage1_score`` is q·v_j.

A search that goes on to stage 2 embeds its text query in a backbone call shared with other
searches' queries (the batcher, when there is one: its wait is booked as ``query_queue``); a
stage-1-only search (the light lane) or an image query embeds its own.
"""

from __future__ import annotations

import threading
from itertools import zip_longest

from core.config import SearchMode
from engine.errors import InvalidRequest
from engine.results import Hit
from engine.runtime.batching import QUERIES
from engine.search.request import unknown_filter_keys
from engine.search.state import SearchState

__all__ = ["STAGE2_MODES", "Stage1"]

STAGE2_MODES = (SearchMode.FRAMES, SearchMode.RERANK)


class Stage1:
    def __init__(self, encoder, index, *, batcher=None, frame_scan: bool = False):
        self.encoder = encoder
        self.index = index
        self.batcher = batcher
        self.frame_scan = frame_scan  # rank the frame banks by q_sel (module docstring)
        self._faiss_lock = threading.Lock()  # a GPU FAISS index is not safe to search from two threads

    def embed_query(self, state: SearchState) -> None:
        """``state.q`` [1, d] (and ``q_np``) for ``state.seen_text`` and the request's image."""
        p, clock = state.params, state.clock
        if self.batcher is None or p.image is not None or p.mode not in STAGE2_MODES:
            with clock.stage("query_embed"):
                images = None if p.image is None else [p.image]
                q = self.encoder.embed_queries([state.seen_text], images=images).float()
        else:
            (q,) = self.batcher.run(
                clock,
                self.encoder,
                [state.seen_text],
                kind=QUERIES,
                queue="query_queue",
                compute="query_embed",
            )
            q = q.float()[None]
        state.q = q
        state.q_np = q.numpy().astype("float32")

    def apply_filter(self, state: SearchState) -> bool:
        """The ids the request's filter allows (``state.allowed``); False when it allows none."""
        p = state.params
        if not p.filter:
            return True
        with state.clock.stage("filter"):
            try:
                state.allowed = self.index.filter_ids(p.filter)
            except (ValueError, TypeError, KeyError) as exc:
                raise InvalidRequest("filter", str(exc) or "malformed filter") from exc
            state.outcome.warnings += unknown_filter_keys(self.index, p.filter)
        return bool(state.allowed)

    def shortlist(self, state: SearchState) -> None:
        """This page's window of the stage-1 ranking as ``state.hits`` (and whether more follow)."""
        p = state.params
        with state.clock.stage("faiss"):
            # this page's window of the ranking, and one more to know whether another page follows
            k = p.offset + p.shortlist + 1
            with self._faiss_lock:
                found = self.index.search(state.q_np, k, allowed_ids=state.allowed)[0]
                if state.select_q is not None:
                    state.plain_hits = self._window(state, found)
                    found = self._in_turn(state, found, k)
        state.outcome.more = len(found) > p.offset + p.shortlist
        state.shown = [v for v, _ in found[: p.offset]]
        state.hits = self._window(state, found)

    def _window(self, state: SearchState, found: list) -> list[Hit]:
        """This page's window of the ranking ``found`` ((video, score under q) pairs) as hits."""
        p = state.params
        window = list(enumerate(found, start=1))[p.offset : p.offset + p.shortlist]
        return [
            Hit(
                video_id=v,
                score=float(s),
                stage1_score=float(s),
                stage1_rank=rank,
                record=self.index.video(v),
            )
            for rank, (v, s) in window
        ]

    def _in_turn(self, state: SearchState, found: list, k: int) -> list:
        """The first ``k`` distinct videos of q's ranking ``found``, q_sel's, and (``select_frames``)
        q_sel's over the frame banks, taken in turn (module docstring), each with its score under q."""
        sel = state.select_q.numpy().astype("float32")
        rankings = [found, self.index.search(sel[None], k, allowed_ids=state.allowed)[0]]
        state.select_frames = state.select_frames and self.frame_scan  # what ran: the route says so
        if state.select_frames:
            rankings.append(self.index.frame_search(sel, k, allowed_ids=state.allowed))
        state.event_frames = state.events is not None and self.frame_scan
        if state.event_frames:  # an order or a count: by its weakest event's best frame
            rankings.append(self.index.frame_search(state.events[1], k, allowed_ids=state.allowed))
        turns = (item[0] for turn in zip_longest(*rankings) for item in turn if item is not None)
        order = list(dict.fromkeys(turns))[:k]  # distinct, in turn
        score = dict(found)
        missing = [v for v in order if v not in score]
        if missing:  # q_sel's finds, scored by q (one score space for stage 1)
            score.update(self.index.search(state.q_np, len(missing), allowed_ids=set(missing))[0])
        return [(v, score.get(v, float("-inf"))) for v in order]  # -inf: an approximate index missed it
