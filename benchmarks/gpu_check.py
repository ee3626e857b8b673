"""The GPU check: the paper's search settings at the 2B shape through the engine, in one short run.

    bash benchmarks/gpu_check.sh [OUT.json]            # on a GPU machine: < 8 minutes
    GPU_CHECK_TINY=1 bash benchmarks/gpu_check.sh      # anywhere (the CPU): a tiny checkpoint, ~30 s

What it does, in a scratch directory (``--workdir``, default a temporary one):
1. writes a random-weight checkpoint (``qaslr make-checkpoint --preset 2b``; ``tiny`` with
   GPU_CHECK_TINY=1) and a random streaming head for it (``qaslr make-head``, N = 32, M = 256);
2. renders a small world corpus (``world.corpus``) and indexes it one-shot with K = 128 (the index's
   frame bank serves the frame tier), timing the build: videos/s and frames/s (backbone load
   included; ``load_s`` is the engine's load for comparison);
3. runs the paper's setting R = 10, K' = 128, L = 16 through ``engine.load_engine`` in the Table 4
   modes: stage 1 (``indexed``), the frame tier (``frames``), one-shot on all R (``rerank``,
   heavy = 10), the streaming head on all R (``rerank`` with ``rerank_head``, heavy = 10) and the
   default cascade (``rerank``); one warm-up query per mode, then the median latency of the rest
   next to the paper's H100 latencies, and each mode's median per-stage timings;
4. writes one JSON file: the environment (versions, device name, attention kernel, clips per
   backbone call), the settings, indexing throughput, latencies, peak GPU memory
   (``torch.cuda.max_memory_allocated``, per phase) and the whole run's time.

Random weights: the rankings mean nothing, only the times and memory do. The index build is
``build_index`` alone, so another indexer entry point can replace it in one place.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The paper's Table 4 latencies on an H100 (seconds per query); the default cascade has none.
PAPER_H100_S = {
    "indexed": 0.18,
    "frames": 0.61,
    "oneshot_all_r": 1.26,
    "streaming_all_r": 1.72,
    "cascade": None,
}


@dataclass(frozen=True)
class Settings:
    preset: str = "2b"
    videos: int = 12  # at least R
    min_duration_s: float = 36.0  # at 4 fps still 144 frames >= K
    max_duration_s: float = 48.0
    fps: tuple[float, ...] = (4.0, 6.0)
    short_side: tuple[int, int] = (128, 192)  # decoded at the 448² working size anyway
    index_frames: int = 128  # K
    clip_len: int = 16  # L
    shortlist: int = 10  # R
    frames: int = 128  # K'
    heavy: int = 10  # all of R
    queries: int = 6  # per mode, after one warm-up
    think_tokens: int = 32  # N
    evidence_tokens: int = 256  # M
    clip_batch_size: int | str = "auto"
    budget_s: float = 360.0  # past this, each mode runs one query after its warm-up (8 minutes in all)


# Everything shrunk for the CPU (the CI test): a tiny backbone, 6 short small videos, R = heavy = 5,
# K = K' = 8, L = 4, one query per mode after the warm-up.
TINY = Settings(
    preset="tiny",
    videos=6,
    min_duration_s=14.0,
    max_duration_s=16.0,
    fps=(4.0,),
    short_side=(64, 80),
    index_frames=8,
    clip_len=4,
    shortlist=5,
    frames=8,
    heavy=5,
    queries=1,
    think_tokens=8,
    evidence_tokens=32,
    budget_s=120.0,
)


def build_index(manifest: Path, index: Path, model: Path, s: Settings) -> None:
    """Index ``manifest`` one-shot with K frames per video (and the default frame bank)."""
    from indexer import BuildOptions
    from indexer import build_index as build

    options = BuildOptions(model=str(model), embedder="oneshot", frames=s.index_frames, clip_len=s.clip_len)
    report = build(manifest, index, options)
    if report.has_failures or report.stopped:
        raise SystemExit(f"indexer build failed: {report.summary()}")


def make_head(model: Path, directory: Path, s: Settings) -> None:
    """A random streaming head for ``model`` (``qaslr make-head``: N think tokens, M evidence tokens)."""
    from qaslr.commands import make_head as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(
        [str(directory), "--model", str(model), "--think-tokens", str(s.think_tokens),
         "--evidence-tokens", str(s.evidence_tokens)]
    )  # fmt: skip
    command.run(args)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict:
    import numpy
    import torch
    import transformers

    from models.backbone import pick_attn_implementation, pick_device, pick_dtype

    try:
        import faiss

        faiss_version = faiss.__version__
    except Exception as exc:  # noqa: BLE001 - reported, not fatal here
        faiss_version = f"unavailable ({exc})"
    from indexer.store.faiss_index import gpu_count

    device = pick_device(None)
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
        "faiss": faiss_version,
        "faiss_gpus": gpu_count(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name(),
        "cpu_count": os.cpu_count(),
        "dtype": str(pick_dtype(device)).removeprefix("torch."),
        "attn_implementation": pick_attn_implementation(device, pick_dtype(device)),
    }
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        env.update(gpu_memory_gib=round(total / 2**30, 1), gpu_free_gib_at_start=round(free / 2**30, 1))
    return env


def _peak_gib() -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 3) if torch.cuda.is_available() else None


def _reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_modes(engine, queries: list[str], modes: dict[str, dict], s: Settings, deadline: float) -> dict:
    out = {}
    for name, extra in modes.items():
        request = {"mode": "rerank", "shortlist": s.shortlist, "top_k": s.shortlist, "frames": s.frames}
        request.update(extra)
        _reset_peak()
        latencies, stages, hits = [], {}, None
        for i, query in enumerate([queries[0], *queries[: s.queries]]):  # the first is the warm-up
            if i > 1 and time.perf_counter() > deadline:
                break
            t = time.perf_counter()
            outcome = engine.search_sync({**request, "query": query})
            _sync()
            if i == 0:
                continue
            latencies.append(time.perf_counter() - t)
            hits = len(outcome.hits)
            for stage, ms in outcome.timings_ms.items():
                stages.setdefault(stage, []).append(ms)
        median = statistics.median(latencies) if latencies else None
        out[name] = {
            "request": request,
            "queries": len(latencies),
            "latency_s_median": None if median is None else round(median, 4),
            "latency_s_max": None if not latencies else round(max(latencies), 4),
            "paper_h100_s": PAPER_H100_S[name],
            "hits": hits,
            "rerank_embedder": getattr(outcome, "rerank_embedder", None),
            "timings_ms_median": {k: round(statistics.median(v), 2) for k, v in stages.items() if any(v)},
            "peak_gpu_gib": _peak_gib(),
        }
        print(
            f"{name:>16}: {out[name]['latency_s_median']} s median over {len(latencies)} "
            f"(paper H100 {PAPER_H100_S[name]} s)",
            flush=True,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="gpu_check.json", help="the JSON report (default gpu_check.json)")
    p.add_argument("--workdir", default=None, help="scratch directory (default: a temporary one)")
    p.add_argument("--tiny", action="store_true", default=os.environ.get("GPU_CHECK_TINY") == "1",
                   help="a tiny checkpoint and corpus, for the CPU (also GPU_CHECK_TINY=1)")  # fmt: skip
    p.add_argument("--queries", type=int, default=None, help="queries per mode after the warm-up")
    args = p.parse_args(argv)
    started = time.perf_counter()
    s = TINY if args.tiny else Settings()
    if args.queries is not None:
        s = replace(s, queries=args.queries)
    deadline = started + s.budget_s
    work_ctx = tempfile.TemporaryDirectory(prefix="gpu_check-") if args.workdir is None else None
    work = Path(args.workdir or work_ctx.name)
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {"settings": asdict(s), "environment": environment(), "phases_s": {}, "complete": False}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every phase, so that a run cut short still leaves what it measured
        out.write_text(json.dumps(report, indent=2) + "\n")

    save()
    print(
        f"gpu check ({'tiny' if args.tiny else s.preset}) on {report['environment']['device_name']}",
        flush=True,
    )

    from models.checkpoint import make_checkpoint
    from world.corpus import CorpusConfig, make_corpus

    t = time.perf_counter()
    model = work / f"checkpoint-{s.preset}"
    if not (model / "qaslr_backbone.json").exists():
        make_checkpoint(model, preset=s.preset, seed=0)
    head_dir = work / "head"
    if not (head_dir / "head_config.json").exists():
        make_head(model, head_dir, s)
    report["phases_s"]["checkpoint"] = round(time.perf_counter() - t, 1)
    save()

    t = time.perf_counter()
    corpus = make_corpus(
        work / "corpus",
        CorpusConfig(
            videos=s.videos, seed=11, min_duration_s=s.min_duration_s, max_duration_s=s.max_duration_s,
            fps=s.fps, short_side=s.short_side,
        ),
    )  # fmt: skip
    report["phases_s"]["corpus"] = round(time.perf_counter() - t, 1)

    index = work / "index"
    _reset_peak()
    t = time.perf_counter()
    if not (index / "manifest.json").exists():
        build_index(corpus.manifest, index, model, s)
    _sync()
    build_s = time.perf_counter() - t
    report["phases_s"]["index"] = round(build_s, 1)
    report["indexing"] = {
        "videos": s.videos,
        "frames_per_video": s.index_frames,
        "build_s": round(build_s, 2),
        "videos_per_s": round(s.videos / build_s, 3),
        "frames_per_s": round(s.videos * s.index_frames / build_s, 1),
        "includes": "backbone load, decoding, the one-shot embeddings and the frame bank's images",
        "peak_gpu_gib": _peak_gib(),
    }
    print(
        f"indexing: {report['indexing']['videos_per_s']} videos/s, {report['indexing']['frames_per_s']} frames/s"
    )
    save()

    from engine import EngineConfig, load_engine

    queries = [q for q, _ in corpus.queries("single")]
    # model_processes=0: every call in this process, as on a GPU (auto starts none there), the CPU rehearsal too
    base = EngineConfig(
        index=index, model=str(model), default_frames=s.frames, default_shortlist=s.shortlist,
        clip_batch_size=s.clip_batch_size, model_processes=0,
    )  # fmt: skip
    latency: dict = {}
    for label, config, modes in (
        (
            "oneshot",
            base,
            {
                "indexed": {"mode": "indexed"},
                "frames": {"mode": "frames"},
                "oneshot_all_r": {"mode": "rerank", "heavy": s.heavy},
                "cascade": {"mode": "rerank"},
            },
        ),
        (
            "streaming",
            replace(base, rerank_head=head_dir),
            {"streaming_all_r": {"mode": "rerank", "heavy": s.heavy}},
        ),
    ):
        t = time.perf_counter()
        engine = load_engine(config)
        report["phases_s"][f"load_{label}"] = round(time.perf_counter() - t, 1)
        report.setdefault("engine", {})[label] = {
            "clip_batch_size": engine.encoder.clip_batch_size,  # "auto" resolved for this device
            "frame_size": engine.encoder.backbone.frame_size,
            "attn_implementation": engine.encoder.backbone.model.config._attn_implementation,
        }
        try:
            latency.update(run_modes(engine, queries, modes, s, deadline))
            report["latency"] = {name: latency[name] for name in PAPER_H100_S if name in latency}
            save()
        finally:
            engine.close()
        import gc

        del engine
        gc.collect()
        if report["environment"]["device"].startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
    report["latency"] = {name: latency[name] for name in PAPER_H100_S if name in latency}
    report["load_s"] = report["phases_s"].get("load_oneshot")
    report["peak_gpu_gib"] = max(
        (v["peak_gpu_gib"] for v in [*report["latency"].values(), report["indexing"]] if v["peak_gpu_gib"]),
        default=None,
    )
    report["total_s"] = round(time.perf_counter() - started, 1)
    report["complete"] = True
    save()
    print(f"wrote {args.out} ({report['total_s']} s)")
    if work_ctx is not None:
        work_ctx.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
