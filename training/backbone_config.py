"""The tiny-world backbone's training recipe as data (two phases: the world's events, then motion
and change), the tokenizer's corpus, and the model's view of a sample: the production embedding
path with gradients (``Backbone.prepare`` -> ``Qwen3VLForEmbedding`` -> last-token pooling -> L2 norm).
training.backbone runs the recipe; training.backbone_trainer and training.backbone_checks hold its
steps and its evaluation."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from models.backbone import Backbone, ClipStates
from models.windows import MOTION_PAIR_S
from world.vocab import EVENTS, ORDER_PHRASINGS, PHRASINGS, order_text

logger = logging.getLogger(__name__)


PRESET = "tiny-world"
# The order phrasings of the first phase (and of the tokenizer's corpus) as the shipped weights were
# trained on them; the world has more since ("... after ...", "... before ..."), which the motion
# phase adds.
FIRST_ORDER_PHRASINGS = ORDER_PHRASINGS[:2]
ASSET_DIR = Path(__file__).resolve().parent / "tiny_world"


@dataclass(frozen=True)
class MotionPhaseConfig:
    """The second phase: from the first phase's weights, the same mix of samples (frames, clips,
    long videos, order pairs, at the world's full difficulty) plus ``motion_pairs`` reversal pairs a
    step (training.world_data ``motion_pair``: a changing event forwards and backwards, each other's
    hard negative), with a still frame of each pair's event (a motion text must find its event's
    frames: the hinge) and, for ``static_twins`` of them, a clip of the same event not moving (a
    negative for the motion text). Order texts take every world phrasing ("... after ...", "...
    before ..."). Its own sample stream (``seed_offset``), optimizer and probes."""

    # Off by default (0 steps): measured, 1,000 steps from the shipped weights left the reversal check at
    # 0.54 (chance 0.5; training/tiny_world/README.md, "Motion"), so the shipped weights are the first
    # phase's. `qaslr train-backbone --motion-steps N` runs it.
    steps: int = 0
    lr: float = 3e-4
    min_lr_ratio: float = 0.05
    warmup: int = 50
    ramp: float = 0.4  # share of the steps over which the world's difficulty grows from easy to full again
    motion_pairs: int = 12
    pair_s: float = MOTION_PAIR_S  # a reversal clip's frames come in temporal pairs this far apart
    static_twins: float = 0.25
    probe_lr: float = 1e-2  # the fresh probes' own (fixed) learning rate
    # the first phase's mix, smaller: it keeps what the first phase learned while the steps go to motion
    images: int = 16
    empty_images: int = 4
    clips: int = 4
    empty_clips: int = 2
    long: int = 1
    order_pairs: int = 1
    # the probes start afresh (they are not part of a checkpoint): weighed lightly, so that their first
    # steps do not pull the trained backbone about
    aux_weight: float = 0.05
    dense_weight: float = 0.05
    seed_offset: int = 1000
    eval_every: int = 250


@dataclass(frozen=True)
class MotionRecipe:
    """The motion recipe (training.motion_recipe, whose docstring says what each weight does)."""

    steps: int = 1500
    pairs: int = 8  # reversal pairs a step (16 clips)
    images: int = 16  # event frames a step (frame retention)
    retention: float = 1.0  # the frame-retention loss's weight
    distill: float = 0.0  # weight of keeping each event frame's and event text's embedding where it was
    clips: int = 0  # event clips (2-16 frames) a step whose embeddings distil too (with ``distill``)
    long: int = 0  # long videos a step (``long_frames`` frames, the event on 1-3) distilled likewise
    long_frames: int = 24
    # steps before ``clips`` and ``long`` distil (0: from the first): direction learnt first, then
    # a video's embedding brought back (measured: with long videos from the start it is not learnt)
    videos_from: int = 0
    empty: int = 0  # empty haystack frames a step distilled with the event frames (with ``distill``)
    # sentences a step that hold world texts among other words (``sentences_around``), their text
    # embeddings distilled (with ``distill``): a sentence around an event text stays where it was
    sentences: int = 0
    in_batch: float = 0.0  # weight of text <-> clip contrastive over every clip of the step (0: off)
    stills: float = 0.0  # weight of each change text against its clip and its shape shown still (0: off)
    lr: float = 1e-3
    min_lr_ratio: float = 1.0  # cosine decay to lr x this over the steps (1: constant)
    scale: float = 14.0  # the reversal softmax's (about 1 / 0.07)
    probe_scale: float = 10.0
    pair_s: float = MOTION_PAIR_S
    difficulty: float = 0.3
    seed: int = 11
    eval_every: int = 250
    eval_pairs: int = 56
    threads: int = 1
    log_every: int = 25  # a line of train_log.jsonl every this many steps
    train: str = "all"  # "all", "temporal" or "temporal+words" (see TRAINABLE)


# The third phase of the shipped backbone: direction first (1,000 steps), then event clips' and long
# videos' embeddings kept too; event frames, empty haystacks and sentences around world texts kept
# throughout (self-distillation from the phase's starting weights).
SHIPPED_MOTION_RECIPE = MotionRecipe(
    steps=1800, distill=10.0, images=32, long=3, videos_from=1000, empty=8, sentences=16, min_lr_ratio=0.1,
    threads=2,
)  # fmt: skip


# What learns: every weight; the patch embedding's frame difference alone; or that and the input
# embeddings of the tokens only change texts use (:func:`change_only_tokens`). The last two leave every
# still frame and every other world text embedding as it was.
TRAINABLE = ("all", "temporal", "temporal+words")


@dataclass(frozen=True)
class BackboneTrainConfig:
    steps: int = 2600
    lr: float = 1e-3
    min_lr_ratio: float = 0.05
    warmup: int = 100
    weight_decay: float = 0.05
    images: int = 48  # frames with an event, per step
    empty_images: int = 12  # empty haystack frames, per step
    clips: int = 12  # mixed phase only
    empty_clips: int = 4
    long: int = 2
    long_frames: tuple[int, int] = (24, 64)
    order_pairs: int = 2
    frame_phase: float = 0.72  # share of the steps with frames only (then clips, long videos, order)
    ramp: float = 0.5  # share of the steps over which the world's difficulty grows from easy to full
    margin: float = 0.1
    aux_weight: float = 0.5
    dense_weight: float = 1.0
    init_temperature: float = 0.07
    seed: int = 0
    threads: int = 2
    eval_every: int = 250
    log_every: int = 25
    motion: MotionPhaseConfig = field(default_factory=MotionPhaseConfig)  # the second phase
    # the third: training.motion_recipe from the weights the phases before it left (0 steps: off);
    # the shipped weights' (training/tiny_world/README.md, "Motion": what each setting was chosen by)
    motion_recipe: MotionRecipe = field(default_factory=lambda: SHIPPED_MOTION_RECIPE)


def world_sentences() -> list[str]:
    """The tokenizer's training corpus: every world phrasing, the instruction, timestamps and a
    little general English, so that each world word is a single token."""
    import random

    out = []
    for kind in EVENTS:
        for p in range(len(PHRASINGS)):
            out.append(kind.text(p))
    rng = random.Random(0)
    for _ in range(2000):
        a, b = rng.sample(EVENTS, 2)
        out.append(order_text(a, b, rng.randrange(2), phrasings=FIRST_ORDER_PHRASINGS))
    out += [f"<{t / 2:.1f} seconds>" for t in range(0, 2400)]
    out += ["Represent the user's input."] * 50
    words = (
        "a an the is are was there here appears appear shows show up briefly first then after before "
        "and or of in on at with video clip frame moment scene event colour color shape find me where when "
        "what which how grey gray black dark light big small large bright person dog cat car ball"
    ).split()
    out += [" ".join(rng.choice(words) for _ in range(8)) for _ in range(1000)]
    return out


# -- the model's view -------------------------------------------------------------------------------


def _forward(backbone: Backbone, prompts, **kwargs) -> torch.Tensor:
    """The production embedding path with gradients: processor -> model -> pool -> [B, d]."""
    inputs = backbone.prepare(prompts, **kwargs)
    hidden = backbone.model(**inputs)
    return backbone.pool(ClipStates(hidden=hidden, mask=inputs["attention_mask"].bool()))


def embed_texts(backbone: Backbone, texts: list[str]) -> torch.Tensor:
    return _forward(backbone, [backbone.render_prompt(text=t) for t in texts])


def embed_images(backbone: Backbone, frames: list[np.ndarray]) -> torch.Tensor:
    images = [torch.from_numpy(np.ascontiguousarray(f)).permute(2, 0, 1) for f in frames]
    return _forward(backbone, [backbone.render_prompt(image=True)] * len(images), images=images)


def embed_clips(backbone: Backbone, clips) -> torch.Tensor:
    parts = backbone.clip_inputs(clips)
    return _forward(backbone, parts["prompts"], videos=parts["videos"], metadata=parts["metadata"])


# -- the whole job ----------------------------------------------------------------------------------


def recipe_hash(config: BackboneTrainConfig) -> str:
    """Content hash of what determines the trained weights (code version aside); a recipe without a
    motion phase or motion recipe hashes as the recipe did before they existed, and a motion recipe
    without the still loss as it did before ``stills`` existed."""
    fields = asdict(config)
    if not config.motion.steps:
        del fields["motion"]
    if not config.motion_recipe.steps:
        del fields["motion_recipe"]
    elif not config.motion_recipe.stills:
        del fields["motion_recipe"]["stills"]
    data = json.dumps({"preset": PRESET, **fields}, sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()[:16]
