"""How a backbone call's cost falls with its batch, and how far two threads run side by side.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_backbone_threads.py [--sizes 1 8 16 64] [--calls 12] [--json out.json]

The batcher (engine.runtime.batching) merges the stage-2 backbone work of concurrent searches into shared
calls on its worker threads. Whether that raises throughput on a CPU depends on two things this
prints side by side, for ``Backbone.embed_images`` on the shipped tiny-world backbone at the index's
working size (the refine step's call, engine.refine):

1. the CPU per image of one call of each ``--sizes`` images, on one thread;
2. calls per second with one, two and three threads calling at once (each its own batch): above 1x
   for two threads only as far as the call leaves the interpreter lock free (torch ops release it;
   the Python around them holds it), and at most what the machine's cores give together against
   one alone (``capacity``, measured before each size: benchmarks/provenance.py).

Nothing is asserted: the numbers are the result.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 16, 64], help="images per call")
    p.add_argument("--calls", type=int, default=12, help="calls per thread per measurement")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import torch

    from benchmarks.provenance import parallel_capacity
    from models.backbone import load_backbone
    from training.backbone import tiny_world_checkpoint

    model = tiny_world_checkpoint(Path(tempfile.mkdtemp(prefix="qaslr-bb-")) / "tiny-world")
    backbone = load_backbone(str(model))
    w, h = backbone.frame_shape(160, 120)  # a 4:3 video's frames at the working size
    rng = np.random.default_rng(0)
    rows = []
    for size in args.sizes:
        frames = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for _ in range(size)]

        def work(calls: int, frames=frames) -> None:
            with torch.inference_mode():
                for _ in range(calls):
                    backbone.embed_images(frames)

        work(2)  # warm
        row = {"images_per_call": size, "capacity": parallel_capacity()["ratio"]}  # the cores, right now
        for threads in args.threads:
            t0 = time.perf_counter()
            pool = [threading.Thread(target=work, args=(args.calls,)) for _ in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
            row[f"calls_per_s_{threads}_threads"] = threads * args.calls / (time.perf_counter() - t0)
        one = row[f"calls_per_s_{args.threads[0]}_threads"]
        row["ms_per_image_1_thread"] = 1e3 / one / size
        rows.append(row)
        cells = "  ".join(f"{t} threads {row[f'calls_per_s_{t}_threads'] / one:.2f}x" for t in args.threads)
        print(f"{size:>4} images per call ({h}x{w}): {1e3 / one:7.1f} ms a call, "
              f"{row['ms_per_image_1_thread']:.2f} ms an image; {cells} (cores: {row['capacity']:.2f}x)", flush=True)  # fmt: skip
    if args.json:
        from benchmarks.provenance import environment, recorded_args

        out = {"args": recorded_args(args), "environment": environment(), "rows": rows}
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
