"""Prometheus metrics: one registry per app, so several apps (tests, replicas in one process) never
share counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
QUEUE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# timings_ms key -> queue label: admission to a search thread, then each kind of batched backbone work
QUEUE_STAGES = {
    "queue": "admission",
    "query_queue": "query",
    "heavy_queue": "heavy",
    "refine_queue": "refine",
}


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "qaslr_http_requests_total",
            "HTTP requests by route, search mode and status",
            ["route", "mode", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "qaslr_http_request_duration_seconds",
            "HTTP request latency by route, search mode and status",
            ["route", "mode", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.stage = Histogram(
            "qaslr_search_stage_seconds",
            "time spent in each search stage",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.cache_hits = Counter(
            "qaslr_frame_cache_hits_total", "frames served by the frame cache", registry=r
        )
        self.cache_misses = Counter(
            "qaslr_frame_cache_misses_total", "frames not in the frame cache", registry=r
        )
        self.cache_hit_ratio = Gauge(
            "qaslr_frame_cache_hit_ratio", "frame cache hits / lookups since start", registry=r
        )
        self.frames_decoded = Counter(
            "qaslr_frames_decoded_total", "frames decoded from video files", registry=r
        )
        self.frames_from_store = Counter(
            "qaslr_frames_from_store_total", "frames read from the index's frame store", registry=r
        )
        self.frame_store_errors = Counter(
            "qaslr_frame_store_errors_total",
            "stored frames that could not be read (decoded from the source instead)",
            registry=r,
        )
        self.redis_errors = Counter(
            "qaslr_redis_errors_total",
            "Redis frame-cache errors (the search fell back to decoding)",
            registry=r,
        )
        self.queue_depth = Gauge(
            "qaslr_queue_depth", "searches waiting for or running on the model worker", registry=r
        )
        self.queue_time = Histogram(
            "qaslr_queue_seconds",
            "time a search waited: for admission to a search thread, or its heavy-tier clips in the batcher",
            ["queue"],
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        # per kind of batched backbone work (engine.runtime.batching): clips, queries, images
        self.batch_clips = Histogram(
            "qaslr_batch_clips", "items (clips, queries or images) per batched backbone call", ["kind"],
            buckets=SIZE_BUCKETS, registry=r,
        )  # fmt: skip
        self.batch_frames = Histogram(
            "qaslr_batch_frames", "frames (a query counts one) per batched backbone call", ["kind"],
            buckets=SIZE_BUCKETS, registry=r,
        )  # fmt: skip
        self.batch_requests = Histogram(
            "qaslr_batch_requests", "searches sharing one batched backbone call", ["kind"], buckets=SIZE_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.rejected = Counter(
            "qaslr_rejected_total", "searches refused or abandoned", ["reason"], registry=r
        )
        self.index_reloads = Counter(
            "qaslr_index_reloads_total",
            "index hot-swaps that succeeded (SIGHUP or POST /admin/reload-index)",
            registry=r,
        )
        self.ready = Gauge("qaslr_ready", "1 when the model and index are loaded", registry=r)
        self.random_weights = Gauge(
            "qaslr_backbone_random_weights",
            "1 when the backbone has random weights (meaningless rankings)",
            registry=r,
        )
        self._hits = 0
        self._lookups = 0

    def observe_search(self, result) -> None:
        for name, ms in result.timings_ms.items():
            if name != "total" and ms > 0:
                self.stage.labels(name).observe(ms / 1e3)
        self.stage.labels("total").observe(result.timings_ms.get("total", 0.0) / 1e3)
        for name, label in QUEUE_STAGES.items():
            if name == "queue" or result.timings_ms.get(name, 0.0) > 0:
                self.queue_time.labels(label).observe(result.timings_ms.get(name, 0.0) / 1e3)
        self.cache_hits.inc(result.cache_hits)
        self.cache_misses.inc(result.cache_misses)
        self.frames_decoded.inc(result.decoded_frames)
        self.frames_from_store.inc(result.store_frames)
        self.frame_store_errors.inc(result.store_errors)
        self._hits += result.cache_hits
        self._lookups += result.cache_hits + result.cache_misses
        if self._lookups:
            self.cache_hit_ratio.set(self._hits / self._lookups)

    def observe_batch(self, batch) -> None:
        """One batched encode call (engine.runtime.batching.BatchStats)."""
        self.batch_clips.labels(batch.kind).observe(batch.clips)
        self.batch_frames.labels(batch.kind).observe(batch.frames)
        self.batch_requests.labels(batch.kind).observe(batch.requests)

    def render(self) -> bytes:
        return generate_latest(self.registry)
