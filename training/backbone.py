"""Teach the tiny-world backbone to see the shapes world.

The tiny-world preset (``models.checkpoint.PRESETS["tiny-world"]``) is Qwen3-VL-Embedding-shaped:
``Qwen3VLModel`` with a vision tower, deepstack and M-RoPE, loaded by the production loader. Its
weights are trained here, contrastively, through the production embedding path
(``Backbone.prepare`` -> ``Qwen3VLForEmbedding`` -> last-token pooling -> L2 norm), on samples from
:mod:`training.world_data`:

    text  <-> frame        single frames embedded as images (the frame bank's path)
    text  <-> clip         2-16 frames of one video with the event on a run of them, or none
    text  <-> long video   24-64 frames over minutes with the event on 1-3 of them (one-shot)
    order text <-> clip    "a then b" vs the mirror clip "b then a" (a hard negative)

Loss per step (every visual sample against every text of the step, one similarity matrix):
- text -> visual InfoNCE with every visual that shows the text's event as a positive (empty
  haystacks are negatives for every text);
- visual -> text InfoNCE (samples with an event only; an order clip's single-event texts are
  masked, not negatives);
- a hinge that keeps every event text's positives above every empty haystack by ``margin``;
- auxiliary linear probes for colour (8 + none) and shape (4 + none) on visual and text
  embeddings. Without them the last-token embedding collapses at the start (every input ends in
  the same template token); the probes are not part of the checkpoint.

Two phases. The first (:class:`BackboneTrainConfig`): the first ``frame_phase`` of its steps use
frames only (cheap, where colour and shape are learned); the rest mix in clips, long videos and
order pairs. The second (:class:`MotionPhaseConfig`, motion and change): from the first phase's
weights, the same mix at full difficulty plus reversal pairs, a changing event forwards and
backwards in clips spaced as a frame bank spaces them,

    change text <-> clip   "a red square moves from left to right" vs the same clip played
                           backwards (the same frames, the opposite change: a hard negative), and
                           a static clip of the same event (a negative)

with every still frame of the pair's event above every empty haystack for the change's text (the
hinge), so that a motion query still finds its event's frames. The trained weights (and the
tokenizer, the first phase's) ship in ``training/tiny_world/``; ``qaslr train-backbone`` reproduces
them (both phases; ``--first-phase DIR`` starts the second from a first phase's weights).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path

import torch

from core.config import CHECKPOINT_HEAD_DIR, CHECKPOINT_TIME_HEAD_DIR
from training.backbone_checks import frame_check, motion_check, video_check
from training.backbone_config import (  # noqa: F401 (the recipe's names, imported from here)
    ASSET_DIR,
    PRESET,
    BackboneTrainConfig,
    MotionPhaseConfig,
    recipe_hash,
    world_sentences,
)
from training.backbone_trainer import BackboneTrainer, MotionTrainer, run_phase
from training.threads import torch_threads

logger = logging.getLogger(__name__)

FIRST_WEIGHTS = "first_phase.safetensors"  # the first phase's weights, kept in OUT between phases


def train_backbone(
    out_dir: str | Path,
    config: BackboneTrainConfig = BackboneTrainConfig(),
    *,
    first_phase: str | Path | None = None,
    progress=True,
) -> Path:
    """Train the tiny-world backbone (both phases) and write ``model.safetensors``,
    ``tokenizer.json`` and ``recipe.json`` (config, metrics, time per phase) to ``out_dir``; returns
    ``out_dir``. ``first_phase``: a directory holding a first phase's ``model.safetensors``,
    ``tokenizer.json`` and ``recipe.json`` (a run of this recipe's first phase, e.g. the backbone
    shipped before the motion phase): only the second phase runs, from those weights."""
    from safetensors.torch import load_file, save_file

    from models.backbone import load_backbone
    from models.checkpoint import make_checkpoint, train_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with torch_threads(config.threads):
        if first_phase is not None:
            shutil.copyfile(Path(first_phase) / "tokenizer.json", out / "tokenizer.json")
            shutil.copyfile(Path(first_phase) / "model.safetensors", out / FIRST_WEIGHTS)
        else:
            tokenizer = train_tokenizer(world_sentences(), vocab_size=800, lowercase=True)
            tokenizer.save(str(out / "tokenizer.json"))
        work = out / "checkpoint"
        make_checkpoint(work, preset=PRESET, seed=config.seed, tokenizer=out / "tokenizer.json")
        backbone = load_backbone(work, device="cpu", dtype="float32")
        log = open(out / "train_log.jsonl", "a")
        if (out / FIRST_WEIGHTS).exists():  # given, or trained by an earlier run of this command
            backbone.model.load_state_dict(load_file(str(out / FIRST_WEIGHTS)))
            record = first_phase_record(Path(first_phase) if first_phase is not None else out)
        else:

            def first_eval(step: int) -> dict:
                checks = frame_check(backbone, trials=1)
                return (
                    {**checks, **video_check(backbone)}
                    if step >= config.frame_phase * config.steps
                    else checks
                )

            evals, minutes = run_phase(BackboneTrainer(backbone, config), out / "state.pt", config.steps,
                                        config.eval_every, first_eval, log, desc="train tiny-world", progress=progress)  # fmt: skip
            state = {k: v.detach().contiguous() for k, v in backbone.model.state_dict().items()}
            save_file(state, str(out / FIRST_WEIGHTS))
            record = {"train_minutes": round(minutes, 1), "evals": evals}
            (out / "first_phase.json").write_text(json.dumps(record, indent=2) + "\n")
        phase = config.motion
        evals, minutes = [], 0.0
        if phase.steps:  # the motion phase (off by default: backbone_config.MotionPhaseConfig)
            evals, minutes = run_phase(
                MotionTrainer(backbone, config), out / "state-motion.pt", phase.steps, phase.eval_every,
                lambda step: {**frame_check(backbone, trials=1), **video_check(backbone),
                              **motion_check(backbone, pair_s=phase.pair_s)},  # fmt: skip
                log, desc="motion phase", progress=progress,
            )  # fmt: skip
        recipe_evals, recipe_minutes = [], 0.0
        if config.motion_recipe.steps:  # the third phase (off by default): training.motion_recipe
            from training.motion_recipe import run_recipe

            recipe_evals, recipe_minutes = run_recipe(backbone, work, config.motion_recipe, out, log,
                                                      progress=progress, checks=lambda: video_check(backbone))  # fmt: skip
        state = {k: v.detach().contiguous() for k, v in backbone.model.state_dict().items()}
        save_file(state, str(out / "model.safetensors"))
        backbone.model.eval()
        final = {
            **frame_check(backbone, trials=3),
            **video_check(backbone),
            **motion_check(backbone, pair_s=phase.pair_s),
        }
        recipe = {
            "preset": PRESET,
            "config": asdict(config),
            "recipe_hash": recipe_hash(config),
            "train_minutes": round(record["train_minutes"] + minutes + recipe_minutes, 1),
            "torch": torch.__version__,
            "threads": config.threads,
            "final": final,
            "phases": {
                "first": record,
                "motion": {"train_minutes": round(minutes, 1), "evals": evals},
                "motion_recipe": {"train_minutes": round(recipe_minutes, 1), "evals": recipe_evals},
            },
        }
        (out / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
        logger.info("tiny-world backbone trained in %.1f min: %s", recipe["train_minutes"], final)
        return out


def first_phase_record(directory: Path) -> dict:
    """The first phase's time and evaluations, from its own record (``first_phase.json``, written by
    this command) or from the recipe.json of a backbone trained before the motion phase existed."""
    own = directory / "first_phase.json"
    if own.exists():
        return json.loads(own.read_text())
    recipe = json.loads((directory / "recipe.json").read_text())
    first = recipe.get("phases", {}).get("first")
    if first is not None:
        return first
    return {"train_minutes": recipe["train_minutes"], "evals": recipe["evals"], "final": recipe["final"],
            "recipe_hash": recipe["recipe_hash"]}  # fmt: skip


# Beside a copy of the shipped checkpoint: the digest of the files it was written from. Not part of the
# checkpoint's fingerprint (models.backbone.checkpoint_fingerprint), which the heads record.
ASSETS_DIGEST_FILE = "tiny_world_assets.sha256"


def assets_digest(assets: Path = ASSET_DIR) -> str:
    """Content hash of a tiny-world backbone's files (weights, tokenizer, and the heads shipped with
    them): what a checkpoint written from them records, so that a stale copy is found."""
    h = hashlib.sha256()
    files = [assets / "model.safetensors", assets / "tokenizer.json"]
    for folder in (CHECKPOINT_HEAD_DIR, CHECKPOINT_TIME_HEAD_DIR):
        files += sorted(p for p in (assets / folder).glob("*") if p.is_file())
    for path in files:
        if path.exists():
            h.update(path.relative_to(assets).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def current_tiny_world_checkpoint(directory: str | Path) -> Path:
    """The shipped tiny-world checkpoint in ``directory``: written there if missing, and written again
    if it was written from other weights than those shipped now (a work directory kept across an
    update of ``training/tiny_world/``), so a command never serves a stale copy."""
    directory, digest = Path(directory), assets_digest()
    recorded = directory / ASSETS_DIGEST_FILE
    if (directory / "config.json").exists():
        if recorded.exists() and recorded.read_text().strip() == digest:
            return directory
        logger.info("the shipped tiny-world backbone changed: writing %s again", directory)
        shutil.rmtree(directory)
    out = tiny_world_checkpoint(directory)
    (Path(out) / ASSETS_DIGEST_FILE).write_text(digest + "\n")
    return out


def tiny_world_checkpoint(directory: str | Path, *, seed: int = 0) -> Path:
    """Write the tiny-world checkpoint to ``directory`` in the public file layout.

    Seed 0 is the trained checkpoint that ships with the project (``training/tiny_world/``).
    Any other seed trains the same recipe with that seed first (about as long as the shipped run
    took, see its ``recipe.json``), cached under ``$QASLR_CACHE`` (default ``~/.cache/qaslr``) by
    the recipe's content hash, so a machine trains each seed once."""
    import os

    if seed == 0 and (ASSET_DIR / "model.safetensors").exists():
        assets = ASSET_DIR
    else:
        config = BackboneTrainConfig(seed=seed)
        cache = Path(os.environ.get("QASLR_CACHE", Path.home() / ".cache" / "qaslr"))
        assets = cache / "tiny-world" / recipe_hash(config)
        if not (assets / "recipe.json").exists():
            logger.info(
                "training the tiny-world backbone with seed %d into %s (this takes a while)", seed, assets
            )
            train_backbone(assets, config)
    from models.checkpoint import make_checkpoint

    recipe = json.loads((assets / "recipe.json").read_text())
    info = {
        "trained": "shapes world (see docs/shapes-world.md)",
        "recipe_hash": recipe["recipe_hash"],
        "train_minutes": recipe["train_minutes"],
        "frame_check": recipe["final"],
    }
    out = make_checkpoint(
        directory,
        preset=PRESET,
        seed=seed,
        weights=assets / "model.safetensors",
        tokenizer=assets / "tokenizer.json",
        info=info,
    )
    for folder in (CHECKPOINT_HEAD_DIR, CHECKPOINT_TIME_HEAD_DIR):  # heads trained on these weights
        shipped = ASSET_DIR / folder
        if seed == 0 and shipped.is_dir():  # served by default from the checkpoint's own folder
            shutil.copytree(shipped, Path(out) / folder, dirs_exist_ok=True)
    return out
