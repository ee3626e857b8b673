"""Two tiny-world backbones side by side on the backbone's own held-out checks (issue 38's judge).

    .venv/bin/python benchmarks/bench_backbone.py OTHER [--base training/tiny_world]
        [--seeds 1001 1002 1003] [--json docs/bench/backbone_motion.json]

Each backbone (a directory with ``model.safetensors`` and ``tokenizer.json``: the shipped one, a run of
``python -m training.motion_recipe``) is loaded through the production loader and measured with
``training.backbone_checks`` on world samples drawn with each seed:

- ``frame_check`` (3 trials): text -> frame top-1 over the 32 events, colour and shape of the pick,
  and how often an event's frame beats every empty haystack for its text (``min_margin``: the least
  such margin);
- ``video_check``: text -> long video (64 frames, the event on 1-3), one-shot;
- ``motion_check`` (56 reversal pairs, frames in temporal pairs 0.2 s apart as serving reads a
  moment): ``reversal`` (a change text ranks its own clip above the same frames reversed; chance
  0.5), per change, ``text_to_clip_top1`` (among all 112 clips), and ``above_still`` (a change text
  ranks its own clip above the same frames with the shape shown still, in each colour the change
  shows: what a motion query over a whole collection asks of a clip), per change.

The recipes choose their stop on their own check seeds (12345, 54321, 97531: ``training/backbone.py``
and ``training/motion_recipe.py`` evaluate there); the default seeds here chose nothing. Mean ± std
over the seeds; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import environment  # noqa: E402

KEYS = (
    ("frame", "text_to_frame_top1"), ("frame", "colour"), ("frame", "shape"),
    ("frame", "event_beats_all_empty"), ("frame", "min_margin"), ("video", "text_to_video_top1"),
    ("motion", "reversal"), ("motion", "text_to_clip_top1"), ("motion", "above_still"),
)  # fmt: skip


def load(weights: Path, work: Path):
    """``weights`` (model.safetensors + tokenizer.json) as a tiny-world checkpoint, loaded as served."""
    from models.backbone import load_backbone
    from models.checkpoint import make_checkpoint
    from training.backbone_config import PRESET

    checkpoint = make_checkpoint(work, preset=PRESET, seed=0, weights=weights / "model.safetensors",
                                 tokenizer=weights / "tokenizer.json")  # fmt: skip
    return load_backbone(checkpoint, device="cpu", dtype="float32")


def measure(backbone, seed: int) -> dict:
    from training.backbone_checks import frame_check, motion_check, video_check

    return {
        "frame": frame_check(backbone, seed=seed, trials=3),
        "video": video_check(backbone, seed=seed),
        "motion": motion_check(backbone, seed=seed, pair_s=0.2),
    }


def summary(runs: list[dict]) -> dict:
    out = {}
    for group, key in KEYS:
        values = [r[group][key] for r in runs]
        out[key] = {"mean": statistics.fmean(values), "std": statistics.pstdev(values)}
    changes = runs[0]["motion"]["by_change"]
    for name, key in (("reversal_by_change", "by_change"), ("above_still_by_change", "by_change_still")):
        out[name] = {c: statistics.fmean(r["motion"][key][c] for r in runs) for c in changes}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("other", type=Path, help="the backbone to compare (model.safetensors, tokenizer.json)")
    p.add_argument(
        "--base", type=Path, default=ROOT / "training" / "tiny_world", help="default: the shipped one"
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[1001, 1002, 1003], help="world seeds (held out)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="write the measurements here")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    result = {
        # a directory by its name only (no machine paths in a result file)
        "args": {k: v.name if isinstance(v, Path) else v for k, v in vars(args).items()},
        "backbones": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, weights in (("base", args.base), ("other", args.other)):
            backbone = load(weights, Path(tmp) / name)
            runs = [measure(backbone, seed) for seed in args.seeds]
            result["backbones"][name] = {"weights": weights.name, "per_seed": runs, "summary": summary(runs)}
    result["minutes"] = (time.perf_counter() - t0) / 60
    result["environment"] = environment()
    width = max(len(k) for _, k in KEYS) + 2
    print(f"{'check':<{width}}{'base':>16}{'other':>16}   (seeds {args.seeds}, mean ± std)")
    for _, key in KEYS:
        cells = [result["backbones"][n]["summary"][key] for n in ("base", "other")]
        print(f"{key:<{width}}" + "".join(f"{c['mean']:>9.3f} ± {c['std']:.3f}" for c in cells))
    for what in ("reversal", "above_still"):
        for change in result["backbones"]["base"]["summary"][f"{what}_by_change"]:
            cells = [
                result["backbones"][n]["summary"][f"{what}_by_change"][change] for n in ("base", "other")
            ]
            print(f"{'  ' + what + ' ' + change:<{width}}" + "".join(f"{c:>16.3f}" for c in cells))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
