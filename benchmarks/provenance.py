"""Where a benchmark number came from: stored under the ``"environment"`` key of every benchmark's
JSON output, so that two result files can be compared knowing what differed (commit, package
versions, thread count, machine)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the distributions whose versions move benchmark numbers (absent ones are recorded as None)
PACKAGES = (
    "qaslr-search", "torch", "torchvision", "transformers", "tokenizers", "safetensors", "numpy",
    "pillow", "av", "decord", "faiss-cpu", "faiss-gpu", "huggingface-hub", "fastapi", "uvicorn",
    "redis", "lz4", "ray",
)  # fmt: skip
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip()


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def threads() -> dict:
    out: dict = {name: os.environ.get(name) for name in THREAD_VARS}
    if "torch" in sys.modules or package_versions(("torch",))["torch"]:
        import torch

        out["torch_num_threads"] = torch.get_num_threads()
        out["torch_num_interop_threads"] = torch.get_num_interop_threads()
    try:
        import faiss

        out["faiss_omp_threads"] = faiss.omp_get_max_threads()
    except ImportError:
        pass
    return out


def environment() -> dict:
    """{git: {commit, dirty}, python, packages: {name: version or None}, threads, platform,
    cpu_count}; git fields are None outside a checkout."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "git": {"commit": _git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)},
        "python": platform.python_version(),
        "packages": package_versions(),
        "threads": threads(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }


def _spin(seconds: float) -> float:
    """Pure-Python work for ``seconds``: loop iterations a second (no lock, no memory traffic)."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n / seconds


def parallel_capacity(seconds: float = 0.75, rounds: int = 3, processes: int | None = None) -> dict:
    """How much more work this machine's cores do together than one alone: ``processes`` (default:
    the usable cores) busy processes at once against one alone, as the ratio of their summed loop
    rates (``rounds`` times, one then all; the median, and the range). Cores that are really cores
    give about their count; shared or throttled virtual CPUs give less, and that bounds every
    "N clients against one" ratio measured on the machine at that time."""
    import multiprocessing
    import statistics

    n = processes or (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    ctx = multiprocessing.get_context("spawn")  # no state of the caller's threads in the children
    ratios = []
    with ctx.Pool(n) as pool:
        pool.map(_spin, [0.05] * n, chunksize=1)  # the workers started and warm
        for _ in range(rounds):
            one = pool.apply(_spin, (seconds,))
            together = sum(pool.map(_spin, [seconds] * n, chunksize=1))
            ratios.append(together / one if one else float("nan"))
    return {"processes": n, "ratio": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def recorded_args(args) -> dict:
    """A benchmark's arguments as its JSON records them: local paths (the workdir, the output file)
    left out, and a head's or model's path cut to its folder's name, since they name one machine's
    folders and say nothing about the measurement."""

    def named(v):  # "NAME=DIR" (a head) -> NAME and the folder's own name
        if isinstance(v, str) and "=" in v and os.sep in v:
            name, _, path = v.partition("=")
            return f"{name}={Path(path).name}"
        if isinstance(v, str) and os.path.isabs(v):
            return Path(v).name
        return v

    out = {}
    for k, v in vars(args).items():
        if k in ("workdir", "json"):
            continue
        out[k] = [named(x) for x in v] if isinstance(v, list) else named(v)
    return out


def world_workdir_and_model(args, default_name: str) -> Path:
    """Set ``args.workdir`` (default: ``default_name`` under the temp directory) and create it, and
    return the backbone directory: ``args.model``, or the shipped tiny-world checkpoint written
    into the workdir once."""
    import tempfile

    args.workdir = args.workdir or str(Path(tempfile.gettempdir()) / default_name)
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    if args.model:
        return Path(args.model).resolve()
    from training.backbone import current_tiny_world_checkpoint

    return current_tiny_world_checkpoint(Path(args.workdir) / "tiny-world")
