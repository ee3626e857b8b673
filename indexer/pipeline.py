"""The offline build: discover -> probe + decode (pool) -> encode (batched) -> frame bank -> commit.

Per video (docs/architecture.md, "Building an index"; paper §3.2, §A.4):

    probe (fps, frame count, size)      indexer.video.probe_video
    K uniform frames (Eq. 2, uniform)   models.selection.uniform_indices(num_frames, K)
    C candidate frames (frame bank)     indexer.video.candidate_frame_indices (~1/s, <= 4 h of them)
    decode the *union* of both sets once, at the backbone's working resolution (no frame is
    decoded twice in a build), in a thread pool that runs ahead of the model; a video with more
    than ``bank_chunk`` (256) bank frames decodes only its K frames there, and its bank is decoded,
    stored and embedded ``bank_chunk`` frames at a time (:func:`bank_chunks`), so the pixels a build
    holds stay bounded on hour-long videos
    encode the K frames                 models.streaming.VideoEncoder.encode (clips of L, Eq. 3-10;
                                        or one-shot) on a group of videos, so clips of several
                                        videos share backbone batches; with a head, a video of at
                                        most L frames keeps the one-shot pathway (§3.1), a rule of
                                        the index (its L) and the video, not of any query
    embed the C frames as images        Backbone.embed_images, batched across the group, float16
    keep the C frames' pixels           indexer.store.frames.encode_frames (the frame store, when the
                                        index keeps one: encoded in the decode pool, at the working size)
    read its text tracks                indexer.subtitles.read_text_tracks (sidecars, embedded streams,
                                        the ASR hook; in the decode pool; never fails the video)
    commit the group                    indexer.store.IndexWriter.commit (the crash-safe point)

A video already in the index whose sidecar subtitle files changed (or whose text tracks were never
read: an index built before them) has only its text tracks read again and replaced (:meth:`Builder.retrack`),
without decoding or embedding it.

Batches are fixed chunks of the source list (in its stable order) minus the videos already in the
index, so a resumed build runs the same batches as an uninterrupted one and writes the same bytes.
Files written are documented in :mod:`indexer.store` and docs/architecture.md.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.config import (
    BANK_MAX_FRAMES,
    BANK_PER_SECOND,
    EDGE_GAPS,
    INDEX_BANK_CHUNK,
    INDEX_BATCH_VIDEOS,
    INDEX_DECODE_WORKERS,
    INDEX_IMAGE_BATCH,
    FrameStore,
)
from core.errors import describe, strip_paths, summarize
from indexer.decoding import Decoded, FrameGauge, bank_chunks, decode_video  # noqa: E402,F401 (re-exported)
from indexer.edges import embed_edge_frames
from indexer.sources import SourceError, SourceItem, discover, source_stat  # noqa: E402,F401 (re-exported)
from indexer.store import Entry, IndexWriter, VideoRecord
from indexer.store.faiss_index import automatic_switch
from indexer.store.format import STATUS_FAILED, STATUS_INDEXED
from indexer.store.frames import EncodedFrames
from indexer.subtitles.tracks import (
    KIND_SIDECAR,
    TrackOptions,
    read_text_tracks,
    sidecar_signature,
    sidecars_of,
    track_warnings,
)
from indexer.video import (
    file_fingerprint,
)

logger = logging.getLogger(__name__)


@dataclass
class BuilderOptions:
    batch_videos: int = INDEX_BATCH_VIDEOS  # videos per model batch (their clips share backbone calls)
    workers: int = INDEX_DECODE_WORKERS  # decode threads
    prefetch_batches: int = 2  # decoded batches kept ready ahead of the model
    image_batch: int = INDEX_IMAGE_BATCH  # frame-bank frames per backbone image call
    bank_per_second: float = BANK_PER_SECOND
    bank_max_frames: int = BANK_MAX_FRAMES
    bank_chunk: int = INDEX_BANK_CHUNK  # longer banks: decoded and embedded this many frames at a time
    edge_gaps: int = EDGE_GAPS  # indexer.edges: bank gaps per video whose source frames are stored
    retry_failed: bool = False  # re-try videos recorded as failed (else they are skipped)
    checkpoint_every_s: float = 30.0  # FAISS checkpoint interval (SQLite holds every commit anyway)
    faiss_factory: str | None = None  # final FAISS factory (None: keep the manifest's)
    # with no faiss_factory: switch an automatically chosen FAISS type when the corpus has crossed this
    # size (None: never switch; `indexer add` passes core.config.FAISS_EXACT_MAX_VECTORS)
    faiss_exact_max: int | None = None
    text_tracks: TrackOptions | None = field(default_factory=TrackOptions)  # None: read no subtitles


@dataclass
class BuildStats:
    total: int = 0
    indexed: int = 0
    skipped: int = 0
    failed: int = 0
    failed_before: int = 0  # skipped because an earlier run recorded them as failed
    frames_decoded: int = 0
    frames_encoded: int = 0
    video_s: float = 0.0  # seconds of video indexed
    peak_frames_in_memory: int = 0  # the most decoded frames held at once (local builds)
    seconds: dict = field(
        default_factory=lambda: {
            "decode": 0.0,
            "decode_wait": 0.0,
            "encode": 0.0,
            "bank": 0.0,
            "store": 0.0,
            "tracks": 0.0,
            "write": 0.0,
        }
    )
    wall_s: float = 0.0
    failures: list = field(default_factory=list)  # (id, reason)
    stopped: bool = False  # asked to stop (should_stop) before every batch was done
    stored_bytes: int = 0  # frame-store bytes written by this run
    faiss_switched_from: str | None = None  # the FAISS type the index had before this run switched it
    text_tracks: int = 0  # tracks read (sidecar files, embedded streams, speech recognition)
    cues: int = 0  # cues they gave
    videos_with_cues: int = 0
    retracked: int = 0  # videos already indexed whose text tracks alone were read again
    track_warnings: list = field(default_factory=list)  # "id: kind track 'name': problem"

    def merge(self, part: BuildStats) -> None:
        """Add what one batch processed elsewhere (a Ray actor) counted: videos, frames, model time."""
        self.indexed += part.indexed
        self.failed += part.failed
        self.frames_decoded += part.frames_decoded
        self.frames_encoded += part.frames_encoded
        self.video_s += part.video_s
        self.peak_frames_in_memory = max(self.peak_frames_in_memory, part.peak_frames_in_memory)
        self.stored_bytes += part.stored_bytes
        self.failures.extend(part.failures)
        self.text_tracks += part.text_tracks
        self.cues += part.cues
        self.videos_with_cues += part.videos_with_cues
        self.track_warnings.extend(part.track_warnings)
        for key in ("decode", "encode", "bank", "store", "tracks"):
            self.seconds[key] += part.seconds.get(key, 0.0)

    def count_tracks(self, video_id: str, tracks: list | None) -> None:
        """Count one video's text tracks, and report those that have a problem."""
        if tracks is None:
            return
        self.text_tracks += len(tracks)
        cues = sum(len(t.cues) for t in tracks)
        self.cues += cues
        self.videos_with_cues += cues > 0
        for line in track_warnings(video_id, tracks):
            logger.warning("subtitles: %s", line)
            self.track_warnings.append(line)

    def summary(self) -> str:
        s = self.seconds
        lines = [
            f"videos: {self.total} in source, {self.indexed} indexed, {self.skipped} skipped "
            f"(done earlier, {self.failed_before} of them failed; --retry-failed retries those), "
            f"{self.failed} failed",
            f"frames decoded: {self.frames_decoded}; frames encoded: {self.frames_encoded}; "
            f"video: {self.video_s / 60:.1f} min",
            f"time: wall {self.wall_s:.1f}s | decode {s['decode']:.1f}s (in {s.get('workers', 1)} worker(s), "
            f"model waited {s['decode_wait']:.1f}s) | encode {s['encode']:.1f}s | frame bank {s['bank']:.1f}s "
            f"| frame store {s['store']:.1f}s ({self.stored_bytes / 1e6:.2f} MB) | write {s['write']:.1f}s",
        ]
        if self.wall_s > 0 and self.indexed:
            lines.append(
                f"throughput: {self.indexed / self.wall_s:.2f} videos/s, {self.frames_decoded / self.wall_s:.1f} frames/s, "
                f"{self.video_s / 60 / self.wall_s * 60:.1f} video-minutes/min"
            )
        if self.text_tracks or self.retracked:
            lines.append(
                f"text tracks: {self.cues} cues from {self.text_tracks} tracks of {self.videos_with_cues} "
                f"videos ({s.get('tracks', 0.0):.1f}s); {len(self.track_warnings)} with a problem"
                + (
                    f"; {self.retracked} indexed videos had their text tracks read again"
                    if self.retracked
                    else ""
                )
            )
            for line in self.track_warnings[:20]:
                lines.append(f"  subtitles: {line}")
            if len(self.track_warnings) > 20:
                lines.append(f"  ... and {len(self.track_warnings) - 20} more (see `indexer stats`)")
        if self.faiss_switched_from:
            lines.append(
                f"FAISS: switched from {self.faiss_switched_from} (the corpus crossed the thresholds)"
            )
        for vid, reason in self.failures[:20]:
            lines.append(f"  failed: {vid}: {reason}")
        if len(self.failures) > 20:
            lines.append(f"  ... and {len(self.failures) - 20} more failures (see `indexer stats`)")
        return "\n".join(lines)


def plan_batches(items: Sequence[SourceItem], done: set[str], batch_videos: int) -> list[list[SourceItem]]:
    """Fixed chunks of the full source list, minus finished videos (so resume == uninterrupted)."""
    batches = []
    for start in range(0, len(items), batch_videos):
        chunk = [it for it in items[start : start + batch_videos] if it.id not in done]
        if chunk:
            batches.append(chunk)
    return batches


class Builder:
    """Runs the build for one writer (see the module docstring): plans the batches, gets each batch's
    entries from a batch source (the local decode pool and encoder, or :mod:`indexer.distributed`'s
    Ray Data pipeline) in plan order, and commits them through the one writer."""

    def __init__(self, writer: IndexWriter, encoder=None, *, options: BuilderOptions = BuilderOptions()):
        self.writer = writer
        self.encoder = encoder  # None when a remote batch source embeds (Ray)
        self.options = options
        m = writer.manifest
        if encoder is not None and m.embed_dim != encoder.embed_dim:
            raise ValueError(f"index has embed_dim {m.embed_dim}, encoder embeds to {encoder.embed_dim}")

    def decode_kwargs(self) -> dict:
        """What :func:`decode_video` needs besides the item; picklable (it travels to Ray tasks)."""
        from functools import partial

        from models.backbone import working_size

        m = self.writer.manifest
        return dict(
            frame_shape=partial(working_size, frame_size=m.frame_size),
            max_frames=m.max_frames,
            bank_per_second=self.options.bank_per_second,
            bank_max=self.options.bank_max_frames,
            frame_store=m.frame_store,
            bank_chunk=self.options.bank_chunk,
            text_tracks=self.options.text_tracks,
        )

    def plan(self, items: Sequence[SourceItem], stats: BuildStats) -> list[list[SourceItem]]:
        """The batches still to run: the source minus what the index already holds (unchanged files;
        failed ones too unless ``retry_failed``); counts the skipped videos in ``stats``."""
        finished = self.writer.finished()
        done = set()
        for it in items:
            prev = finished.get(it.id)
            if prev is None:
                continue
            fingerprint, status, stat = prev
            if status == STATUS_FAILED and self.options.retry_failed:
                continue
            if _unchanged(it.path, fingerprint, stat):
                done.add(it.id)
                stats.failed_before += status == STATUS_FAILED
            else:
                logger.info("%s changed on disk since it was indexed; re-indexing it", it.id)
        stats.skipped = len(done)
        self._retrack = self._tracks_to_read(items, done)
        return plan_batches(items, done, max(1, self.options.batch_videos))

    def _tracks_to_read(self, items: Sequence[SourceItem], done: set[str]) -> list[tuple]:
        """Indexed, unchanged videos whose text tracks must be read again: (item, duration, whole,
        signature); ``whole``: never read (every kind), else only their sidecar files changed."""
        options = self.options.text_tracks
        if options is None:
            return []
        known = self.writer.tracks_stats()
        todo = []
        for it in items:
            if it.id not in done or it.id not in known:
                continue
            stored, duration = known[it.id]
            signature = sidecar_signature(sidecars_of(it) if options.sidecars else [])
            if stored is None or stored != signature:
                todo.append((it, duration, stored is None, signature))
        return todo

    def retrack(self, stats: BuildStats) -> None:
        """Read and replace the text tracks :meth:`plan` found out of date (one transaction each)."""
        options = self.options.text_tracks
        for it, duration, whole, signature in getattr(self, "_retrack", []):
            t = time.perf_counter()
            if whole:
                tracks = read_text_tracks(it, duration_s=duration, options=options)
            else:  # the sidecars changed: they alone are read again (embedded streams did not)
                tracks = read_text_tracks(it, duration_s=duration, options=options, embedded=False)
                tracks = [tr for tr in tracks if tr.kind == KIND_SIDECAR]
            stats.seconds["tracks"] += time.perf_counter() - t
            kinds = None if whole else [KIND_SIDECAR]
            self.writer.replace_tracks(it.id, tracks, kinds=kinds, tracks_stat=signature)
            stats.count_tracks(it.id, tracks)
            stats.retracked += 1

    def run(
        self,
        items: Sequence[SourceItem],
        *,
        progress: Callable[[int, int, float], None] | None = None,
        on_plan: Callable[[int], None] | None = None,
        on_commit: Callable[[int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        batch_source: Callable[[list[list[SourceItem]]], Iterator[BatchResult]] | None = None,
    ) -> BuildStats:
        """Index every item not yet in the index. ``progress(videos, frames, video_seconds)`` after each batch;
        ``on_plan(n_pending)`` once the work is known; ``on_commit(n_batches_committed)`` right after
        each batch's commit (tests inject faults there); ``should_stop()`` is asked before each batch,
        and a true answer ends the build cleanly (``stats.stopped``) with everything committed kept.
        ``batch_source(batches)`` yields one :class:`BatchResult` per planned batch, in plan order
        (default: :meth:`local_batches`)."""
        opts = self.options
        stats = BuildStats(total=len(items))
        wall = time.perf_counter()
        batches = self.plan(items, stats)
        if on_plan:
            on_plan(sum(len(b) for b in batches))
        last_checkpoint = time.perf_counter()
        checkpoint_every = opts.checkpoint_every_s
        committed = 0
        stats.seconds["workers"] = opts.workers
        stop = should_stop or (lambda: False)
        results = (batch_source or self.local_batches)(batches)
        if not stop():
            self.retrack(stats)
        try:
            for result in [] if batches and stop() else results:
                stats.merge(result.stats)
                stats.seconds["decode_wait"] += result.waited_s
                t = time.perf_counter()
                self.writer.commit(result.entries)
                if time.perf_counter() - last_checkpoint > checkpoint_every:
                    c = time.perf_counter()
                    self.writer.checkpoint()
                    last_checkpoint = time.perf_counter()
                    # big indexes take long to serialise: keep checkpoints under ~10% of the time
                    checkpoint_every = max(opts.checkpoint_every_s, 10 * (last_checkpoint - c))
                stats.seconds["write"] += time.perf_counter() - t
                committed += 1
                if on_commit is not None:
                    on_commit(committed)
                if progress:
                    progress(len(result.entries), result.frames, result.video_s)
                if committed < len(batches) and stop():
                    break
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()  # a generator's finally: cancels the decode pool, ends the Ray job
        if committed < len(batches):
            stats.stopped = True
            logger.warning("stop requested: ending the build after %d batch(es)", committed)
        t = time.perf_counter()
        if not stats.stopped:  # a stopped build is finalized by the run that completes it
            factory = opts.faiss_factory
            if factory is None and opts.faiss_exact_max is not None:
                factory = automatic_switch(
                    self.writer.manifest.faiss_factory,
                    self.writer.counts()[STATUS_INDEXED],
                    opts.faiss_exact_max,
                )
                if factory:
                    logger.info("the corpus crossed the FAISS thresholds: switching the index to %s", factory)
                    stats.faiss_switched_from = self.writer.manifest.faiss_factory
            self.writer.finalize(factory=factory)
        stats.seconds["write"] += time.perf_counter() - t
        stats.wall_s = time.perf_counter() - wall
        return stats

    def local_batches(self, batches: list[list[SourceItem]]) -> Iterator[BatchResult]:
        """This process: a thread pool decodes ``prefetch_batches`` ahead of the model, which encodes
        each batch here."""
        if self.encoder is None:
            raise ValueError("a local build needs an encoder")
        opts = self.options
        batch_encoder = BatchEncoder(
            self.encoder, embed_dim=self.writer.manifest.embed_dim, image_batch=opts.image_batch,
            edge_gaps=opts.edge_gaps,
        )  # fmt: skip
        decode_kwargs = self.decode_kwargs()
        gauge = FrameGauge()
        with ThreadPoolExecutor(max_workers=max(1, opts.workers), thread_name_prefix="decode") as pool:
            queue: deque[list[Future]] = deque()
            next_batch = 0

            def fill():
                nonlocal next_batch
                while next_batch < len(batches) and len(queue) < max(1, opts.prefetch_batches) + 1:
                    queue.append(
                        [
                            pool.submit(decode_video, it, gauge=gauge, **decode_kwargs)
                            for it in batches[next_batch]
                        ]
                    )
                    next_batch += 1

            fill()
            try:
                while queue:
                    futures = queue.popleft()
                    t = time.perf_counter()
                    decoded = [f.result() for f in futures]
                    waited = time.perf_counter() - t
                    fill()  # keep the pool busy while the model works on this batch
                    part = BuildStats()
                    part.seconds["decode"] += sum(
                        d.seconds - d.store_seconds - d.tracks_seconds for d in decoded
                    )
                    part.seconds["store"] += sum(d.store_seconds for d in decoded)
                    part.seconds["tracks"] += sum(d.tracks_seconds for d in decoded)
                    frames = sum(d.decoded_frames for d in decoded)
                    entries = batch_encoder.process(decoded, part)
                    part.peak_frames_in_memory = gauge.peak
                    yield BatchResult(entries, part, frames, waited, part.video_s)
            finally:
                for futures in queue:
                    for f in futures:
                        f.cancel()


@dataclass
class BatchResult:
    """One planned batch, embedded: its entries (in source order) and what processing it counted."""

    entries: list[Entry]
    stats: BuildStats
    frames: int = 0  # frames decoded, for the progress bar
    waited_s: float = 0.0  # how long the model waited for this batch's decoding
    video_s: float = 0.0  # seconds of video indexed in this batch, for the progress bar


class BatchEncoder:
    """Decoded videos -> index entries with one encoder: the final embeddings (clips of a batch share
    backbone calls) and the frame-bank embeddings. The same code runs in a local build and in each
    Ray embedding actor, so both backends embed a batch identically."""

    def __init__(self, encoder, *, embed_dim: int, image_batch: int, edge_gaps: int = EDGE_GAPS):
        self.encoder = encoder
        self.backbone = encoder.backbone
        self.embed_dim = embed_dim
        self.image_batch = image_batch
        self.edge_gaps = int(edge_gaps)  # indexer.edges: gaps per video whose frames are stored (0: none)

    def process(self, decoded: list[Decoded], stats: BuildStats) -> list[Entry]:
        from models.backbone import VideoClip

        ok = [d for d in decoded if d.error is None]
        stats.frames_decoded += sum(d.decoded_frames for d in ok)
        t = time.perf_counter()
        finals = self._guarded(
            ok,
            lambda group: [
                e.final.numpy()
                for e in self.encoder.encode(
                    [VideoClip(d.frames[d.uniform], d.union[d.uniform], d.info.fps) for d in group],
                    short_oneshot=True,  # §3.1 per video: an index property (VideoEncoder.encode)
                )
            ],
        )
        stats.seconds["encode"] += time.perf_counter() - t
        t = time.perf_counter()
        banks = self._guarded([d for d in ok if d.error is None], self._embed_banks)
        edges = {id(d): self._edges(d, banks[id(d)]) for d in ok if id(d) in banks}
        edge_frames = sum(len(e.frame_indices) for e in edges.values() if e is not None)
        stats.frames_decoded += edge_frames  # decoded and embedded here, beside the bank
        stats.frames_encoded += edge_frames
        stats.seconds["bank"] += time.perf_counter() - t
        entries = []
        for d in decoded:
            info = d.info
            record = VideoRecord(
                id=d.item.id,
                faiss_id=-1,
                path=str(d.item.path),
                fingerprint=d.fingerprint,
                fps=info.fps if info else 0.0,
                num_frames=info.num_frames if info else 0,
                duration_s=info.duration_s if info else 0.0,
                width=info.width if info else 0,
                height=info.height if info else 0,
                metadata=dict(d.item.metadata),
                status=STATUS_FAILED if d.error else STATUS_INDEXED,
                error=d.error,
            )
            if d.error:
                stats.failed += 1
                stats.failures.append((d.item.id, d.error))
                logger.warning("cannot index %s: %s", d.item.id, d.error)
                entries.append(Entry(record, source_stat=d.source_stat))
                d.drop_frames()
                continue
            stats.indexed += 1
            stats.video_s += info.duration_s
            stats.frames_encoded += len(d.uniform) + len(d.bank)
            if d.chunked:  # its bank was decoded and stored while it was embedded
                stats.seconds["decode"] += d.seconds
                stats.seconds["store"] += d.store_seconds
            entries.append(
                Entry(
                    record,
                    embedding=finals[id(d)],
                    bank_indices=d.bank,
                    bank_embeddings=banks[id(d)],
                    source_stat=d.source_stat,
                    stored_frames=d.stored,
                    tracks=d.tracks,
                    tracks_stat=d.tracks_stat,
                    edge_indices=None if edges.get(id(d)) is None else edges[id(d)].frame_indices,
                    edge_embeddings=None if edges.get(id(d)) is None else edges[id(d)].embeddings,
                )
            )
            stats.count_tracks(d.item.id, d.tracks)
            if d.stored is not None:
                stats.stored_bytes += d.stored.nbytes
            d.drop_frames()  # free the pixels early
        return entries

    def _embed_banks(self, group: list[Decoded]) -> list[np.ndarray]:
        """Candidate frames of all videos in the group, embedded as images in shared batches; a
        chunked (long) video's bank chunk by chunk (:meth:`_embed_chunked`)."""
        held = [d for d in group if not d.chunked]
        frames = [f for d in held for f in d.frames[d.candidates]]  # sum C frames [h_v, w_v, 3]
        out = np.empty((len(frames), self.embed_dim), dtype=np.float16)
        step = max(1, self.image_batch)
        for s in range(0, len(frames), step):
            out[s : s + step] = self.backbone.embed_images(frames[s : s + step]).float().cpu().numpy()
        bounds = np.cumsum([0] + [len(d.candidates) for d in held])
        banks = {id(d): out[bounds[i] : bounds[i + 1]] for i, d in enumerate(held)}
        return [banks[id(d)] if id(d) in banks else self._embed_chunked(d) for d in group]

    def _embed_chunked(self, d: Decoded) -> np.ndarray:
        """A long video's bank, ``d.bank_chunk`` frames at a time (:func:`bank_chunks`); sets its
        frame-store frames (``d.stored``) and adds the chunks' decode and store time to ``d``."""
        out = np.empty((len(d.bank), self.embed_dim), dtype=np.float16)
        step = max(1, self.image_batch)
        blobs, shapes, row, decode_s, store_s = [], [], 0, 0.0, 0.0
        for frames, stored, dec, sto in bank_chunks(d):
            for s in range(0, len(frames), step):
                part = list(frames[s : s + step])
                out[row + s : row + s + len(part)] = self.backbone.embed_images(part).float().cpu().numpy()
            row += len(frames)
            decode_s, store_s = decode_s + dec, store_s + sto
            if stored is not None:
                blobs.extend(stored.blobs)
                shapes.extend(stored.shapes)
        if d.frame_store != FrameStore.NONE:
            d.stored = EncodedFrames(codec=str(d.frame_store), blobs=blobs, shapes=shapes)
        # counted by process (the decode pool's time was counted before)
        d.seconds, d.store_seconds = decode_s, store_s
        return out

    def _edges(self, d: Decoded, bank: np.ndarray):
        """The video's edge frames (indexer.edges), or None: none asked for, no gap has frames, or
        they could not be made (a warning; the video is indexed without them, its moments decoded)."""
        if self.edge_gaps <= 0:
            return None
        try:
            return embed_edge_frames(
                self.backbone, d.item.path, d.bank, bank, size=d.frame_size, gaps=self.edge_gaps,
                image_batch=self.image_batch,
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - optional data: never fails the video
            logger.warning("no edge frames for %s: %s", d.item.id, summarize(exc))
            return None

    def _guarded(self, group: list[Decoded], fn) -> dict[int, np.ndarray]:
        """Run ``fn`` on the whole group; if it fails, retry video by video so that one bad video
        (e.g. a decoder returning odd frames) fails alone with its reason."""
        if not group:
            return {}
        try:
            return {id(d): r for d, r in zip(group, fn(group), strict=True)}
        except Exception as exc:  # noqa: BLE001 - any model error is isolated per video below
            if len(group) == 1:
                group[0].error = strip_paths(f"model failed: {describe(exc)}")
                return {}
            logger.warning("batch failed (%s); retrying its videos one by one", summarize(exc))
            out = {}
            for d in group:
                out.update(self._guarded([d], fn))
            return out


def _unchanged(path: Path, fingerprint: str, stat: str | None) -> bool:
    """Same file as when it was indexed: same size and mtime, or else the same content fingerprint.
    A file that is gone or unreadable now keeps what the index has."""
    now = source_stat(path)
    if now is None or now == stat:
        return True
    try:
        return file_fingerprint(path) == fingerprint
    except OSError:
        return True
