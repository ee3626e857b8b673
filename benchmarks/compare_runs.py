"""Do two runs of a benchmark agree? Compares two ``bench_quality.py --json`` files value by value,
leaving out what a machine's load moves (latencies and per-stage times, build throughput), and says
which values differ and whether the runs recorded the same package versions and commit.

    .venv/bin/python benchmarks/compare_runs.py A.json B.json

The reproducibility check: two fresh clones, each with the pinned install (``scripts/setup.sh``),
each running ``bench_quality.py`` with the same seeds into its own workdir, then this script. Exit
status 0 when every compared value is identical, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

# values that depend on how busy the machine was, not on what was computed
TIMING_KEYS = {"latency_ms", "stage2_ms", "moments_ms", "stages_ms", "wall_s", "video_min_per_s"}


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, inner in value.items():
            if key not in TIMING_KEYS:
                yield from _leaves(inner, (*path, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _leaves(inner, (*path, str(i)))
    else:
        yield path, value


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare(a: dict, b: dict) -> tuple[int, list[tuple[str, object, object]]]:
    """(values compared, [(path, a, b) for each difference]) over ``per_seed``."""
    left, right = dict(_leaves(a.get("per_seed", {}))), dict(_leaves(b.get("per_seed", {})))
    differences = [
        ("/".join(path), left.get(path), right.get(path))
        for path in sorted(set(left) | set(right))
        if path not in left or path not in right or not _same(left[path], right[path])
    ]
    return len(set(left) | set(right)), differences


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    args = p.parse_args(argv)
    with open(args.a) as fa, open(args.b) as fb:
        a, b = json.load(fa), json.load(fb)
    n, differences = compare(a, b)
    env_a, env_b = a.get("environment", {}), b.get("environment", {})
    print(f"{n - len(differences)} of {n} values identical (timings left out)")
    for path, x, y in differences[:50]:
        print(f"  differs: {path}: {x!r} vs {y!r}")
    print("package versions:", "the same" if env_a.get("packages") == env_b.get("packages") else "DIFFERENT")
    print("commit:", "the same" if env_a.get("git") == env_b.get("git") else "DIFFERENT", env_a.get("git"))
    return 0 if not differences else 1


if __name__ == "__main__":
    sys.exit(main())
