"""Evidence and moments: what a search shows of each result beside its score.

Every value here comes from the frame bank's relevance q·f_c (engine.moments.bank_relevance,
computed once a search per hit) and one rule for every mode and tier:

- **relevance** (engine.relevance): a result's best frame against the collection's null sample, the
  0..1 value ``min_score`` filters on (a time-tier hit: its weakest event's, times the time head's
  confidence that the events show in the order or number asked, engine.tiers.timehead.time_relevance);
- **evidence**: the frames a heavy tier selected or, for a result none re-encoded, its bank's top
  K' frames by relevance, chronological;
- **moment**: the run of bank frames around the relevance peak above half-way from the video's
  median to its peak (engine.moments), edges half-way to the neighbouring bank frames; the first
  ``refine_moments`` results of a stage-2 search have their edges refined at the source's frame
  rate (engine.refine);
- **timeline**: q·z_t after each streamed clip when the head ranked it, else the bank's relevance
  max-pooled into at most 120 bins;
- **clips** (group_by clip): every candidate's runs above the same threshold, scored like the frame
  tier scores a video but over the run's frames.
"""

from __future__ import annotations

import numpy as np

from engine.frames import FrameStats
from engine.moments import (
    Timeline,
    bank_relevance,
    duration_of,
    relevance_runs,
    relevance_timeline,
    run_span,
)
from engine.relevance import NullSample, relevance
from engine.results import ClipHit, EvidenceItem, Hit, SearchOutcome
from engine.search.request import SearchParams
from engine.search.stage1 import STAGE2_MODES
from engine.spoken import combined_relevance
from engine.tiers.frame import frame_score
from engine.tiers.timehead import time_relevance, weakest_event_relevance

__all__ = ["MAX_CLIPS_PER_VIDEO", "Evidence"]

MAX_CLIPS_PER_VIDEO = 8  # group_by "clip": moments kept per candidate


class Evidence:
    """The evidence, moments, timelines, relevance and clips of one index's results."""

    def __init__(self, index, *, aggregate: str, refiner=None, refine_moments: int = 0):
        self.index = index
        self.aggregate = aggregate  # the frame tier's score (a clip is scored the same way)
        self.refiner = refiner  # engine.refine.MomentRefiner (None: bank-resolution moments)
        self.refine_moments = int(refine_moments)
        self.null_sample: NullSample | None = None

    def null(self, q_vec: np.ndarray) -> float:
        if self.null_sample is None:  # drawn once per index, on first use
            self.null_sample = NullSample(self.index)
        return self.null_sample.median(q_vec)

    def visual_relevance(self, q_vec: np.ndarray, hit: Hit) -> float | None:
        if hit.events is not None:  # a query about time: its weakest event's, times the head's confidence
            hit.events_relevance = weakest_event_relevance(hit, self.null)  # kept apart for the answer
            return time_relevance(hit.events_relevance, hit)
        if hit.peak is None:
            rel = bank_relevance(self.index, hit, q_vec)
            hit.peak = float(rel.max()) if rel.size else None
        return None if hit.peak is None else relevance(hit.peak, self.null(q_vec))

    def relevance(self, q_vec: np.ndarray, hits: list[Hit]) -> None:
        """Each hit's relevance: its bank's peak against the collection's null, or its cue's coverage."""
        for hit in hits:
            hit.visual_relevance = self.visual_relevance(q_vec, hit)
            hit.relevance = combined_relevance(hit.visual_relevance, hit.spoken)

    def bank_evidence(self, p: SearchParams, q_vec: np.ndarray, hit: Hit) -> None:
        """Evidence of a hit no heavy tier re-encoded: the top-K' frames of its bank by relevance,
        chronological."""
        bank = self.index.frame_bank(hit.video_id)
        rel = bank_relevance(self.index, hit, q_vec)
        hit.evidence = _items(bank, rel, np.sort(np.argsort(-rel, kind="stable")[: p.frames]))

    def moment(self, q_vec: np.ndarray, hit: Hit) -> None:
        """The hit's moment by the one rule (module docstring), at bank resolution."""
        bank = self.index.frame_bank(hit.video_id)
        runs = relevance_runs(bank_relevance(self.index, hit, q_vec), limit=1)
        if not runs:
            hit.moment, hit.moment_source = None, None
            return
        fps = float(hit.record.fps) if hit.record is not None else 1.0
        hit.moment = run_span(runs[0], bank.timestamps, 1.0 / fps, duration_of(hit.record))
        hit.moment_source = "relevance"
        hit.moment_run = runs[0]

    def timeline(self, q_vec: np.ndarray, hit: Hit) -> Timeline:
        """Relevance over time, from what stage 2 computed: the readout similarity q·z_t after each
        streamed clip, or (one-shot, stage 1) the frame bank's relevance q·f_c."""
        if hit.step_scores is not None and hit.step_spans:
            return Timeline(
                "streaming",
                [(a, b, float(v)) for (a, b), v in zip(hit.step_spans, hit.step_scores, strict=False)],
            )
        bank = self.index.frame_bank(hit.video_id)
        rel = bank_relevance(self.index, hit, q_vec)
        fps = float(hit.record.fps) if hit.record is not None else 1.0
        return relevance_timeline(bank.timestamps, rel, 1.0 / fps, duration_of(hit.record))

    def clips(self, p: SearchParams, q_vec: np.ndarray, hits: list[Hit]) -> list[ClipHit]:
        """group_by "clip": every candidate's moments, best first across the candidates: a video's
        best moment carries its frame score, so the clip ranking and the video ranking agree."""
        clips = []
        null = self.null(q_vec)
        for hit in hits:
            bank = self.index.frame_bank(hit.video_id)
            rel = bank_relevance(self.index, hit, q_vec)
            fps = float(hit.record.fps) if hit.record is not None else 1.0
            for run in relevance_runs(rel, limit=MAX_CLIPS_PER_VIDEO):
                rows = np.arange(run.first, run.last + 1)
                clips.append(
                    ClipHit(
                        hit=hit,
                        score=frame_score(rel, self.aggregate, rows=rows),
                        moment=run_span(run, bank.timestamps, 1.0 / fps, duration_of(hit.record)),
                        # a clip's moment is the result itself; its frames are evidence
                        evidence=_items(bank, rel, rows) if p.include_evidence else [],
                        relevance=relevance(float(rel[run.peak]), null),
                    )
                )
        clips.sort(key=lambda c: (-c.score, c.hit.stage1_rank, c.moment[0]))
        return clips

    def cue_clip(self, p: SearchParams, q_vec: np.ndarray, hit: Hit, cue: dict) -> ClipHit:
        """A moment found through a cue alone: its times, the bank frames inside it as evidence."""
        bank = self.index.frame_bank(hit.video_id)
        rel = bank_relevance(self.index, hit, q_vec)
        inside = np.flatnonzero((bank.timestamps >= cue["start_s"]) & (bank.timestamps <= cue["end_s"]))
        evidence = _items(bank, rel, inside) if p.include_evidence else []
        return ClipHit(hit, 0.0, (cue["start_s"], cue["end_s"]), evidence, cue.get("coverage", 0.0))

    def refine(self, p: SearchParams, q_vec: np.ndarray, outcome: SearchOutcome, clock) -> None:
        """Refine the moments of the first ``refine_moments`` results at the source's frame rate (a
        stage-2 step: stage-1-only searches keep bank-resolution moments and their cost)."""
        if self.refiner is None or p.mode not in STAGE2_MODES:
            return
        todo = [h for h in outcome.hits[: self.refine_moments] if getattr(h, "moment_run", None)]
        if not todo:
            return
        stats = FrameStats()  # the refiner's reads are its own: the answer's cache counts are stage 2's
        with clock.stage("refine"):
            for hit in todo:
                span = self.refiner.refine(
                    hit, self.index.frame_bank(hit.video_id), hit.moment_run, q_vec, stats, clock=clock
                )
                if span is not None:
                    hit.moment = span
                    hit.moment_source = "refined"


def _items(bank, rel: np.ndarray, rows) -> list[EvidenceItem]:
    """The bank frames at ``rows`` as evidence: frame index, time, relevance."""
    return [EvidenceItem(int(bank.frame_indices[i]), float(bank.timestamps[i]), float(rel[i])) for i in rows]
