"""bench_load's report: percentiles, one level's rounds pooled, and the flat rows docs/results.md shows."""

from __future__ import annotations

from collections import Counter

import numpy as np

CACHES = (("cold_levels", "cold"), ("levels", "warm"))  # where run_server keeps each one's levels


def pct(values, q) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def pool_rounds(levels: list[dict]) -> dict:
    """One level measured in several rounds, as one: the median round's throughput and CPU figures
    (a busy minute on a shared machine moves one round, not the median), latency percentiles over
    every answer, the statuses summed, and each round's req/s kept (``rounds_req_per_s``)."""
    latencies = [ms for lv in levels for ms in lv.pop("latencies_ms")]  # pooled here, not kept
    if len(levels) == 1:
        return {**levels[0], "rounds_req_per_s": [levels[0]["req_per_s"]]}

    def median(key: str) -> float:
        return float(np.median([lv[key] for lv in levels]))

    statuses = Counter()
    for lv in levels:
        statuses.update(lv["statuses"])
    keys = ("req_per_s", "server_cpu_s_per_req", "server_cores", "client_cores", "other_cores", "capacity",
            "cold_share")  # fmt: skip
    timing_keys = levels[0]["mean_timings_ms"].keys()
    return {
        **levels[0],
        **{k: median(k) for k in keys},
        "p50_ms": pct(latencies, 50),
        "p95_ms": pct(latencies, 95),
        "statuses": dict(sorted(statuses.items())),
        "wall_s": sum(lv["wall_s"] for lv in levels),
        "server_cpu_s": sum(lv["server_cpu_s"] for lv in levels),
        "mean_timings_ms": {
            k: float(np.mean([lv["mean_timings_ms"].get(k, 0.0) for lv in levels])) for k in timing_keys
        },
        "rounds_req_per_s": [lv["req_per_s"] for lv in levels],
    }


def table_rows(results: dict, load_clients: int) -> list[dict]:
    """One flat row per (server, caches, load) for docs/results.md (scripts/results.py): the rerank levels
    (cold, then warm), then stage 1 alone and under rerank load (on the warm server)."""
    rows = []
    for name, res in results.items():
        for key, caches in CACHES:
            for lv in res.get(key, []):
                rows.append(
                    {
                        "server": name,
                        "caches": caches,
                        "load": f"{lv['clients']} clients",
                        "req_per_s": lv["req_per_s"],
                        "p50_ms": lv["p50_ms"],
                        "p95_ms": lv["p95_ms"],
                        "cold_share": lv.get("cold_share"),
                        "5xx": sum(v for k, v in lv["statuses"].items() if k.startswith("5")),
                        "cpu_s_per_req": lv.get("server_cpu_s_per_req"),
                        "server_cores": lv.get("server_cores"),
                        "client_cores": lv.get("client_cores"),
                        "other_cores": lv.get("other_cores"),
                        "capacity": lv.get("capacity"),
                    }
                )
        for key, load in (
            ("stage1_alone", "stage 1 alone"),
            ("stage1_loaded", f"stage 1, {load_clients} rerank clients"),
        ):
            if key not in res:
                continue
            st = res[key]
            statuses = [*st["statuses"].items(), *st.get("load_statuses", {}).items()]  # probes and load
            five = sum(v for k, v in statuses if k.startswith("5"))
            rows.append(
                {
                    "server": name,
                    "caches": "warm",
                    "load": load,
                    "req_per_s": None,
                    "p50_ms": st["p50_ms"],
                    "p95_ms": st["p95_ms"],
                    "cold_share": None,
                    "5xx": five,
                    "cpu_s_per_req": None,
                    "server_cores": None,
                    "client_cores": None,
                    "other_cores": None,
                    "capacity": None,
                }
            )
    return rows
