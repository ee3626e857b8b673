"""Streaming clip by clip vs one context holding all frames: peak memory and time.

For K selected frames (64 ... 1024) this embeds one video two ways with the same backbone:
  (a) QASLR streaming: clips of L frames, one backbone call per clip, compression, head update;
  (b) one-shot: all K frames in a single backbone context.
Each (mode, K) runs in a fresh child process so that peak memory is that run's own: on CUDA the
peak of torch.cuda.max_memory_allocated, on the CPU the rise of the process's peak RSS above its
level just before the call (model loaded and frames decoded already). The persistent streaming
state (N x D think-token memory, Eq. 6) is reported too: it does not depend on K.

    python benchmarks/bench_streaming_memory.py                 # tiny backbone, CPU
    python benchmarks/bench_streaming_memory.py --frames 64 256 --repeats 3
    python benchmarks/bench_streaming_memory.py --preset 2b --device cuda   # public 2B shape, random weights
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(args: argparse.Namespace) -> None:
    import numpy as np
    import torch

    from models.backbone import VideoClip, load_backbone
    from models.head import StreamingHeadConfig, create_head
    from models.streaming import StreamingConfig, VideoEncoder

    torch.set_num_threads(args.threads)
    backbone = load_backbone(args.checkpoint, device=args.device)
    d = backbone.hidden_size
    head = None
    if args.mode == "stream":
        heads = next(h for h in (16, 8, 4, 2, 1) if d % h == 0)
        head = create_head(StreamingHeadConfig(hidden_size=d, embed_dim=d, num_heads=heads), seed=0)
        head = head.to(backbone.device, backbone.dtype)
    k = args.k
    config = StreamingConfig(max_frames=k, clip_len=16, max_evidence=256, clip_batch_size=1)
    encoder = VideoEncoder(backbone, head, config=config)
    size = backbone.frame_size
    rng = np.random.default_rng(0)
    video = VideoClip(rng.integers(0, 256, (k, size, size, 3), dtype=np.uint8), np.arange(k) * 15, 30.0)
    warm = VideoClip(video.frames[:16], video.frame_indices[:16], 30.0)
    encoder.encode([warm])  # warm-up outside the measurement
    cuda = backbone.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_mib()
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        encoder.encode([video])
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if cuda:
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    state_bytes = 0
    if head is not None:
        state_bytes = head.init_state(1).numel() * head.init_state(1).element_size()
    print(
        json.dumps(
            {"time_s": statistics.median(times), "peak_mib": max(peak, 0.0), "state_bytes": state_bytes}
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--preset", default="tiny", choices=["tiny", "2b", "8b"])
    ap.add_argument(
        "--checkpoint", default=None, help="use this checkpoint directory instead of generating one"
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="stream", help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, default=64, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return

    from models.checkpoint import make_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.checkpoint or str(make_checkpoint(Path(tmp) / "ckpt", preset=args.preset, seed=0))
        rows = []
        for k in args.frames:
            row = {"K": k}
            for mode in ("stream", "oneshot"):
                cmd = [
                    sys.executable,
                    __file__,
                    "--child",
                    "--mode",
                    mode,
                    "--k",
                    str(k),
                    "--checkpoint",
                    ckpt,
                    "--device",
                    args.device,
                    "--repeats",
                    str(args.repeats),
                    "--threads",
                    str(args.threads),
                ]
                out = (
                    subprocess.run(cmd, capture_output=True, text=True, check=True)
                    .stdout.strip()
                    .splitlines()[-1]
                )
                row[mode] = json.loads(out)
            rows.append(row)
            print(f"measured K={k}", file=sys.stderr)

    print(
        f"\nbackbone preset={args.preset} device={args.device}; L=16, M=256, N=32; one child process per cell"
    )
    header = (
        f"{'K':>5} | {'stream s':>9} {'stream MiB':>10} | {'one-shot s':>10} {'one-shot MiB':>12} | "
        f"{'time ratio':>10} {'mem ratio':>9} | {'state KiB':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        s, o = r["stream"], r["oneshot"]
        print(
            f"{r['K']:>5} | {s['time_s']:>9.3f} {s['peak_mib']:>10.1f} | {o['time_s']:>10.3f} {o['peak_mib']:>12.1f} | "
            f"{o['time_s'] / s['time_s']:>10.2f} {o['peak_mib'] / max(s['peak_mib'], 0.1):>9.1f} | "
            f"{s['state_bytes'] / 1024:>9.1f}"
        )
    print("ratios are one-shot / streaming (above 1: streaming is cheaper)")


if __name__ == "__main__":
    main()
