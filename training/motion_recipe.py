"""A motion recipe that learns on the CPU (issue 38): the tiny-world backbone's clip embedding told
from its time reversal, from the shipped weights, with direct objectives.

    python -m training.motion_recipe OUT [--steps 1500] [--first-phase training/tiny_world] [--eval-every 250]

Each step draws ``pairs`` reversal pairs (training.world_data ``motion_pair``, frames in temporal
pairs ``pair_s`` apart as serving reads a moment, the world's ``difficulty``) and ``images`` event
frames, and minimises the sum of

- **the reversal loss**: each clip's change text against its clip and the clip's reversal, a softmax
  over the two at ``scale`` (the check this recipe is judged by, made a loss);
- **two change probes**: which of the 7 changes a clip shows, from its embedding, and which a text
  says, from its embedding (linear, ``probe_scale``-scaled unit vectors): each side learns to carry
  the change on its own, where the reversal loss alone gives neither side a gradient to start from
  (measured: alone it stays at ln 2 for 200 steps);
- **frame retention** (weight ``retention``): text -> frame and frame -> text contrastive over the
  event frames, so that single-frame retrieval stays as the first phase left it;
- optionally (``in_batch`` > 0) text <-> clip contrastive over every clip of the step, so that a clip
  still finds its own event's text among other events' clips.

AdamW at ``lr``, constant or (``min_lr_ratio`` < 1) decaying on a cosine. Every ``eval_every`` steps (and at the end) it records
``training.backbone_checks`` ``motion_check`` (held-out reversal pairs) and ``frame_check``; it writes
``model.safetensors`` (the last step's weights), ``tokenizer.json`` and ``motion_recipe.json`` (config,
evaluations, minutes, torch) to OUT. It does not replace the shipped weights: what serves was measured
with them (training/tiny_world/README.md, "Motion").
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MotionRecipe:
    steps: int = 1500
    pairs: int = 8  # reversal pairs a step (16 clips)
    images: int = 16  # event frames a step (frame retention)
    retention: float = 1.0  # the frame-retention loss's weight
    in_batch: float = 0.0  # weight of text <-> clip contrastive over every clip of the step (0: off)
    lr: float = 1e-3
    min_lr_ratio: float = 1.0  # cosine decay to lr x this over the steps (1: constant)
    scale: float = 14.0  # the reversal softmax's (about 1 / 0.07)
    probe_scale: float = 10.0
    pair_s: float = 0.2
    difficulty: float = 0.3
    seed: int = 11
    eval_every: int = 250
    eval_pairs: int = 56
    threads: int = 1


def train_motion(
    first_phase: Path, out: Path, recipe: MotionRecipe = MotionRecipe(), *, progress=print
) -> dict:
    """Run ``recipe`` from the weights in ``first_phase`` (a directory with ``model.safetensors`` and
    ``tokenizer.json``); write OUT's files and return the record."""
    from safetensors.torch import load_file, save_file

    from models.backbone import load_backbone
    from models.checkpoint import make_checkpoint
    from training.backbone import PRESET
    from training.backbone_checks import frame_check, motion_check
    from training.backbone_config import embed_clips, embed_images, embed_texts
    from training.backbone_trainer import cosine_lr
    from training.world_data import WorldSampler
    from world.vocab import CHANGES, EVENTS, PHRASINGS, change_texts

    torch.set_num_threads(recipe.threads)
    torch.manual_seed(recipe.seed)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(first_phase / "tokenizer.json", out / "tokenizer.json")
    work = make_checkpoint(out / "checkpoint", preset=PRESET, seed=0, tokenizer=out / "tokenizer.json")
    backbone = load_backbone(work, device="cpu", dtype="float32")
    model = backbone.model
    model.load_state_dict(load_file(str(first_phase / "model.safetensors")))
    clip_probe = torch.nn.Linear(backbone.embed_dim, len(CHANGES))
    text_probe = torch.nn.Linear(backbone.embed_dim, len(CHANGES))
    params = [*model.parameters(), *clip_probe.parameters(), *text_probe.parameters()]
    opt = torch.optim.AdamW(params, lr=recipe.lr)
    sampler = WorldSampler(backbone.frame_size, seed=recipe.seed, difficulty=recipe.difficulty)
    rng = np.random.default_rng(recipe.seed)
    evals: list[dict] = []
    t0 = time.perf_counter()

    def evaluate(step: int) -> None:
        model.eval()
        motion = motion_check(backbone, pairs=recipe.eval_pairs, pair_s=recipe.pair_s)
        frames = frame_check(backbone, trials=1)
        model.train().requires_grad_(True)
        evals.append({"step": step, "minutes": (time.perf_counter() - t0) / 60, **motion, **frames})
        progress(
            f"step {step}: reversal {motion['reversal']:.3f} "
            f"({', '.join(f'{k} {v:.2f}' for k, v in motion['by_change'].items())}), "
            f"text -> frame {frames['text_to_frame_top1']:.3f}"
        )

    evaluate(0)
    for step in range(1, recipe.steps + 1):
        clips, labels, texts = [], [], []
        for _ in range(recipe.pairs):
            for sample in sampler.motion_pair(paired=recipe.pair_s):
                clips.append(sample.clip)
                labels.append(CHANGES.index(sample.change.change))
                said = change_texts(sample.change)
                texts.append(said[int(rng.integers(len(said)))])
        events = rng.choice(len(EVENTS), size=recipe.images, replace=False)
        frames = [sampler.image(int(k)).clip.frames[0] for k in events]
        frame_texts = [EVENTS[int(k)].text(int(rng.integers(len(PHRASINGS)))) for k in events]
        y = torch.tensor(labels)
        z_clip = embed_clips(backbone, clips)
        z_text = embed_texts(backbone, texts + frame_texts)
        z_said, z_named = z_text[: len(texts)], z_text[len(texts) :]
        z_frame = embed_images(backbone, frames)
        n = len(clips)
        partner = torch.arange(n) ^ 1  # a pair's two clips sit side by side
        own, reversed_ = (z_said * z_clip).sum(-1), (z_said * z_clip[partner]).sum(-1)
        reversal = F.cross_entropy(
            torch.stack([own, reversed_], 1) * recipe.scale, torch.zeros(n, dtype=torch.long)
        )
        probes = F.cross_entropy(clip_probe(z_clip * recipe.probe_scale), y) + F.cross_entropy(
            text_probe(z_said * recipe.probe_scale), y
        )
        sim = z_named @ z_frame.T * recipe.scale
        which = torch.arange(len(frames))
        retention = F.cross_entropy(sim, which) + F.cross_entropy(sim.T, which)
        loss = reversal + probes + recipe.retention * retention
        if recipe.in_batch:  # each text finds its own clip among all the step's clips, and back
            logits = z_said @ z_clip.T * recipe.scale
            loss = loss + recipe.in_batch * (
                F.cross_entropy(logits, torch.arange(n)) + F.cross_entropy(logits.T, torch.arange(n))
            )
        for group in opt.param_groups:
            group["lr"] = cosine_lr(recipe.lr, recipe.min_lr_ratio, (step - 1) / max(1, recipe.steps - 1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % recipe.eval_every == 0 or step == recipe.steps:
            evaluate(step)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"))
    shutil.rmtree(work, ignore_errors=True)
    record = {
        "recipe": asdict(recipe),
        "first_phase": first_phase.name,
        "train_minutes": round((time.perf_counter() - t0) / 60, 1),
        "torch": torch.__version__,
        "evals": evals,
        "final": evals[-1],
    }
    (out / "motion_recipe.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def main(argv=None) -> int:
    defaults = MotionRecipe()
    p = argparse.ArgumentParser(
        prog="python -m training.motion_recipe",
        description="Train the tiny-world backbone to tell a motion from its reversal (issue 38's direct recipe).",
    )
    p.add_argument("out", type=Path, help="where model.safetensors, tokenizer.json and motion_recipe.json go")
    p.add_argument("--first-phase", type=Path, default=Path(__file__).resolve().parent / "tiny_world",
                   help="the weights to start from (default: the shipped ones)")  # fmt: skip
    for name, value in asdict(defaults).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = vars(p.parse_args(argv))
    out, first = args.pop("out"), args.pop("first_phase")
    logging.basicConfig(level=logging.WARNING)
    record = train_motion(first, out, MotionRecipe(**args))
    print(json.dumps({k: record["final"][k] for k in ("reversal", "text_to_frame_top1")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
