"""Formatting shared by the results page's sections (scripts/results.py, scripts/results_time.py)."""

from __future__ import annotations

import statistics


def mean_std(values: list[float], pct: bool) -> str:
    vals = [v for v in values if isinstance(v, int | float) and v == v]  # NaN-free
    if not vals:
        return "–"
    scale = 100.0 if pct else 1.0
    mean = statistics.fmean(vals) * scale
    std = (statistics.pstdev(vals) * scale) if len(vals) > 1 else 0.0
    if pct:
        return f"{mean:.1f} ± {std:.1f}"
    if mean >= 100:
        return f"{mean:.0f} ± {std:.0f}"
    if mean >= 1:
        return f"{mean:.1f} ± {std:.1f}"
    return f"{mean:.2f} ± {std:.2f}"


def environment_line(data: dict) -> str:
    """The environment a benchmark recorded (benchmarks/provenance.py), in one line."""
    env = data.get("environment") or data.get("meta") or {}
    found = []
    git = env.get("git") or {}
    if git.get("commit"):
        found.append(
            f"commit {git['commit'][:10]}" + (" (with uncommitted changes)" if git.get("dirty") else "")
        )
    if env.get("python"):
        found.append(f"Python {env['python']}")
    packages = env.get("packages") or {}
    for name in ("torch", "transformers", "numpy", "pillow", "av", "faiss-cpu"):
        if packages.get(name):
            found.append(f"{name} {packages[name]}")
    threads = env.get("threads") or {}
    if threads.get("torch_num_threads") is not None:
        found.append(f"torch threads {threads['torch_num_threads']}")
    for key in ("cpu_count", "nproc"):
        if env.get(key) is not None:
            found.append(f"{env[key]} CPUs")
            break
    return ", ".join(found)


def mode_names(per_seed: dict) -> list[str]:
    first = next(iter(per_seed.values()))
    return [m for m in first if not m.startswith("_")]  # "_builds" and the like are not modes


def cell_text(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return "–" if value is None else str(value)
