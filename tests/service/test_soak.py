"""Soak: a real `qaslr serve` process under bounded concurrency for over a minute, mixing indexed
and rerank searches (with filters, seeds and frame budgets varying). Required: zero 5xx (indeed
zero failures of any kind) and a steady RSS; reported: RSS slope, p95 latency at the start and at
the end, throughput.

``QASLR_SOAK_S`` sets the measured duration (default 60 s, some 8,000 requests on 2 cores; a 20 s
warm-up comes first and is not measured; set it longer for a longer soak). Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from tests.helpers import free_port, wait_until_ready

DURATION_S = float(os.environ.get("QASLR_SOAK_S", "60"))
WARMUP_S = 20.0
CONCURRENCY = 4
QUERIES = [
    "a red block slides across the sea",
    "moving blocks",
    "a bright band sweeps down",
    "two coloured squares",
    "the city at night",
    "forest",
]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS")


def _slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    cov = sum((t - mt) * (r - mr) for t, r in samples)
    return 60.0 * cov / var if var else 0.0


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def test_soak_mixed_load_steady_rss_no_5xx(qaslr_index, tiny_checkpoint, tiny_head, tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASLR_") and k != "REDIS_URL"}
    env.update(OMP_NUM_THREADS="1", QASLR_CACHE_MAX_ITEMS="1024", QASLR_LOG_LEVEL="warning")
    cmd = [
        str(Path(sys.executable).parent / "qaslr"), "serve", "--index", str(qaslr_index), "--model",
        str(tiny_checkpoint), "--head", str(tiny_head), "--port", str(port), "--max-frames", "8",
        "--default-frames", "4", "--queue-size", "8",
    ]  # fmt: skip
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    results: list[tuple[float, float, object, str]] = []  # (finished at, seconds, status, mode)
    rss: list[tuple[float, float]] = []
    lock, stop = threading.Lock(), threading.Event()

    def client(worker: int) -> None:
        rng = random.Random(worker)
        with httpx.Client(base_url=url, timeout=60) as http:
            while not stop.is_set():
                mode = "rerank" if rng.random() < 0.5 else "indexed"
                body = {
                    "query": rng.choice(QUERIES),
                    "mode": mode,
                    "top_k": rng.choice([1, 3, 5]),
                    "seed": rng.randrange(1000),
                }
                if rng.random() < 0.5:
                    body["frames"] = rng.choice([2, 4, 8])
                if rng.random() < 0.3:
                    body["filter"] = rng.choice(
                        [{"split": "test"}, {"rank": {"gte": 2}}, {"topic": {"in": ["sea", "city"]}}]
                    )
                t0 = time.monotonic()
                try:
                    status: object = http.post("/search", json=body).status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                with lock:
                    results.append((time.monotonic(), time.monotonic() - t0, status, mode))

    try:
        wait_until_ready(proc, url, log.read_text, 90)
        threads = [threading.Thread(target=client, args=(w,), daemon=True) for w in range(CONCURRENCY)]
        started = time.monotonic()
        for t in threads:
            t.start()
        measure_from = started + WARMUP_S
        end = measure_from + DURATION_S
        while time.monotonic() < end:
            assert proc.poll() is None, log.read_text()[-3000:]
            now = time.monotonic()
            if now >= measure_from:
                rss.append((now - measure_from, _rss_mb(proc.pid)))
            time.sleep(2.0)
        stop.set()
        for t in threads:
            t.join(90)
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)

    measured = [r for r in results if r[0] >= measure_from]
    statuses = Counter(r[2] for r in results)
    n = len(measured)
    first, last = measured[: max(1, n // 5)], measured[-max(1, n // 5) :]
    slope = _slope_mb_per_min(rss)
    report = {
        "duration_s": DURATION_S,
        "concurrency": CONCURRENCY,
        "requests": len(results),
        "measured_requests": n,
        "by_mode": dict(Counter(r[3] for r in measured)),
        "statuses": {str(k): v for k, v in statuses.items()},
        "throughput_rps": round(n / DURATION_S, 2),
        "p95_start_ms": round(1e3 * _p95([r[1] for r in first]), 1),
        "p95_end_ms": round(1e3 * _p95([r[1] for r in last]), 1),
        "rss_start_mb": round(rss[0][1], 1),
        "rss_end_mb": round(rss[-1][1], 1),
        "rss_max_mb": round(max(r for _, r in rss), 1),
        "rss_slope_mb_per_min": round(slope, 2),
    }
    print(f"\nSOAK REPORT {report}")
    (tmp_path / "soak.json").write_text(repr(report))
    assert n >= 20, report
    assert all(isinstance(s, int) and s < 500 for s in statuses), report  # zero 5xx, no dropped connection
    assert set(statuses) == {200}, report
    # steady memory: after the warm-up, no trend beyond allocator noise
    assert slope < 10.0, report
    assert rss[-1][1] - rss[0][1] < 64.0, report
