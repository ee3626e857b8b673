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
- optionally (``distill`` > 0) self-distillation of the frame path: the step's event frames and
  their texts embedded by the starting weights (frozen) and by the trained ones, ``1 - cos`` between
  the two, so that single-frame retrieval stays where it was, not only ranked right; with
  ``clips`` and ``long``, event clips and long videos (one-shot) likewise, so that a video's
  embedding (stage 1, the one-shot tier) stays where it was too, after the first ``videos_from`` steps
  (direction is learnt first: with long videos from the first step it was not); with ``empty``, empty
  haystack frames (an event's frame must still beat them), and with ``sentences``, sentences that hold
  a world text among other words (:func:`sentences_around`: "X while someone talks about the ...",
  order and count texts), so that what the frame tier, the spoken fusion and the time head score
  frames against stays too;
- optionally (``in_batch`` > 0) text <-> clip contrastive over every clip of the step, so that a clip
  still finds its own event's text among other events' clips;
- optionally (``stills`` > 0) **the still loss**: each change text against its clip and the same clip
  with the shape shown still (training.world_data ``motion_pair(stills=True)``: in each colour the
  change shows), a softmax at ``scale``: the reversal loss tells a change from its reversal, not from
  a video that merely shows the shape, which a motion query over a whole collection must (measured:
  ``motion_check``'s ``above_still``).

``train`` chooses what learns: ``all`` (every weight; retention and distillation keep the frame path
close); ``temporal`` (only the image-neutral half of the vision patch embedding,
:class:`TemporalDifference`: every still frame, still clip and text embeds as before, to float
rounding, so retention and the text probe are off); or ``temporal+words`` (that, and the input
embeddings of the tokens only change texts use, :func:`change_only_tokens`). Measured: the last two
do not learn direction (training/tiny_world/README.md, "Motion").

AdamW at ``lr``, constant or (``min_lr_ratio`` < 1) decaying on a cosine. Every ``eval_every`` steps
(and at the end) it records ``training.backbone_checks`` ``motion_check`` (held-out reversal pairs)
and ``frame_check``, and saves its state (rerun the command to resume; with more ``--steps`` to go
on); it writes ``model.safetensors`` (the last step's weights), ``tokenizer.json``,
``train_log.jsonl`` and ``motion_recipe.json`` (config, evaluations, minutes, torch) to OUT.
``benchmarks/bench_backbone.py OUT`` measures the weights beside the shipped ones on seeds that
chose nothing. ``qaslr train-backbone --motion-recipe-steps N`` runs the recipe as its third phase.
It does not replace the shipped weights: what serves was measured with them.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from training.backbone_config import TRAINABLE, MotionRecipe
from training.threads import torch_threads

logger = logging.getLogger(__name__)


class TemporalDifference(torch.nn.Module):
    """The vision patch embedding's kernel over a temporal patch of two frames ``(a, b)`` written as
    its sum and difference, the sum fixed:

        W = [(S + D) / 2, (S - D) / 2]  ->  W * (a, b) = S (a + b) / 2 + D (a - b) / 2

    A single frame enters Qwen3-VL as the frame twice (a = b), so its patches see ``S`` alone: only
    ``D``, what a patch sees change between its two frames, learns, and a still frame, a still clip
    and every text embed exactly as before (to float rounding). A parametrization of
    ``Conv3d.weight`` (``torch.nn.utils.parametrize``): ``D`` is the trained tensor."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        if weight.dim() != 5 or weight.shape[2] != 2:
            raise ValueError(f"expected a Conv3d kernel over 2 frames, got shape {tuple(weight.shape)}")
        self.register_buffer("frame_sum", (weight[:, :, 0] + weight[:, :, 1]).detach().clone())

    def forward(self, difference: torch.Tensor) -> torch.Tensor:
        return torch.stack([(self.frame_sum + difference) / 2, (self.frame_sum - difference) / 2], dim=2)

    def right_inverse(self, weight: torch.Tensor) -> torch.Tensor:
        return weight[:, :, 0] - weight[:, :, 1]


def temporal_only(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """Freeze ``model`` but the frame difference of its vision patch embedding; return that one."""
    from torch.nn.utils import parametrize

    model.requires_grad_(False)
    proj = model.model.visual.patch_embed.proj
    parametrize.register_parametrization(proj, "weight", TemporalDifference(proj.weight))
    difference = proj.parametrizations.weight.original
    difference.requires_grad_(True)
    return [difference]


def change_only_tokens(backbone) -> list[int]:
    """Token ids that the world's change texts use (as the model reads them, prompt and all) and that
    no other world prompt does: no event, order or count text, no image or video prompt. Their input
    embeddings can learn what a change says without moving any other world text or frame."""
    from models.backbone import VideoClip
    from world import vocab as v

    tokenizer = backbone.processor.tokenizer
    ids = lambda prompts: {i for p in prompts for i in tokenizer(p)["input_ids"]}  # noqa: E731
    prompt = lambda text: backbone.render_prompt(text=text)  # noqa: E731
    other = [prompt(e.text(p)) for e in v.EVENTS for p in range(len(v.PHRASINGS))]
    pairs = [(a, b) for a in v.EVENTS[:8] for b in v.EVENTS[-8:]]
    other += [prompt(v.order_text(a, b, p)) for a, b in pairs for p in range(len(v.ORDER_PHRASINGS))]
    counts = [(n, p) for n, forms in v.COUNT_PHRASINGS.items() for p in range(len(forms))]
    other += [prompt(v.count_text(e, n, p)) for e in v.EVENTS for n, p in counts]
    other.append(backbone.render_prompt(image=True))
    other += [f"<{t / 2:.1f} seconds>" for t in range(0, 2400)]  # a video prompt's timestamps
    size = backbone.frame_size
    clips = [
        VideoClip(np.zeros((n, size, size, 3), np.uint8), list(range(0, 600 * n, 600)), 2.0) for n in (2, 8)
    ]
    parts = backbone.clip_inputs(clips)
    video = backbone.prepare(parts["prompts"], videos=parts["videos"], metadata=parts["metadata"])
    said = []
    for e in v.EVENTS:
        to = v.EVENTS[(e.index + 4) % len(v.EVENTS)].colour  # another colour
        for change in v.CHANGES:
            said += [
                prompt(t) for t in v.change_texts(v.Change(e, change, to if change == "recolour" else None))
            ]
    return sorted(ids(said) - ids(other) - set(video["input_ids"].flatten().tolist()))


def words_only(model: torch.nn.Module, tokens: list[int]) -> list[torch.nn.Parameter]:
    """Let the input embeddings of ``tokens`` learn (the other rows' gradients are zeroed); returns
    the embedding matrix (train it without weight decay, so the other rows stay exactly)."""
    table = model.get_input_embeddings().weight
    mask = torch.zeros(table.shape[0], 1)
    mask[tokens] = 1.0
    table.requires_grad_(True)
    table.register_hook(lambda grad: grad * mask)
    return [table]


# Words a sentence may hold around a world text (``sentences_around``): everyday topics that are not
# in the world, so a sentence is an event text among other words, as users type them.
TOPICS: tuple[str, ...] = (
    "weather", "dinner", "market", "river", "train", "garden", "music", "meeting", "city", "football",
    "kitchen", "history", "ocean", "lecture", "mountain", "bridge", "school", "news", "forest", "station",
)  # fmt: skip
FRAMES: tuple[str, ...] = (
    "{e} while someone talks about the {t}",
    "{e} during the {t}",
    "{e}, and someone mentions the {t}",
    "the part where {e}",
    "{e} before the {t} starts",
    "{e} after the {t}",
    "a video about the {t} where {e}",
)


def sentences_around(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` sentences that hold world texts among other words (distilled by the motion recipe's
    ``sentences``): an event text inside a sentence (:data:`FRAMES`, :data:`TOPICS`), an order text, a
    count text, each with equal chance. The frame tier and the time head score frames against such
    texts; the recipe keeps their embeddings where the starting weights had them."""
    from world import vocab as v

    def event() -> v.EventKind:
        return v.EVENTS[int(rng.integers(len(v.EVENTS)))]

    out = []
    for _ in range(n):
        kind = int(rng.integers(3))
        if kind == 0:
            frame = FRAMES[int(rng.integers(len(FRAMES)))]
            said = event().text(int(rng.integers(len(v.PHRASINGS))))
            out.append(frame.format(e=said, t=TOPICS[int(rng.integers(len(TOPICS)))]))
        elif kind == 1:
            a, b = event(), event()
            out.append(v.order_text(a, b, int(rng.integers(len(v.ORDER_PHRASINGS)))))
        else:
            times = int(rng.choice(list(v.COUNT_PHRASINGS)))
            out.append(v.count_text(event(), times, int(rng.integers(len(v.COUNT_PHRASINGS[times])))))
    return out


def bake(model: torch.nn.Module) -> None:
    """Undo :func:`temporal_only`'s parametrization, keeping its weights (a plain Conv3d again)."""
    from torch.nn.utils import parametrize

    proj = model.model.visual.patch_embed.proj
    if parametrize.is_parametrized(proj, "weight"):
        parametrize.remove_parametrizations(proj, "weight", leave_parametrized=True)


def still_loss(z_said: torch.Tensor, own: torch.Tensor, z_still: torch.Tensor, owner: torch.Tensor,
               scale: float) -> torch.Tensor:  # fmt: skip
    """The still loss: text i (of pair i // 2: a pair's two clips sit side by side) against its own
    clip (``own[i]``, the text · clip cosine) and the still showings of its pair's shape (``z_still``
    [S, d], ``owner[s]`` the pair still s belongs to), a softmax at ``scale``; other pairs' stills
    are no negatives (their shapes differ, and the reversal and in-batch losses weigh other clips)."""
    mine = owner[None, :] == (torch.arange(len(own)) // 2)[:, None]
    sim = (z_said @ z_still.T).masked_fill(~mine, float("-inf"))
    logits = torch.cat([own[:, None], sim], 1) * scale
    return F.cross_entropy(logits, torch.zeros(len(own), dtype=torch.long))


class MotionRecipeTrainer:
    """One step of the recipe at a time (``train_step``), its checks (``evaluate``) and its state
    (``state_dict``: weights, probes, optimizer, random streams), so that
    ``training.backbone_trainer.run_phase`` runs it with a progress bar, a log and resumption."""

    def __init__(self, backbone, recipe: MotionRecipe, *, teacher=None):
        from training.world_data import WorldSampler
        from world.vocab import CHANGES

        if recipe.train not in TRAINABLE:
            raise ValueError(f"train must be one of {TRAINABLE}, got {recipe.train!r}")
        self.backbone, self.model, self.config, self.teacher = backbone, backbone.model, recipe, teacher
        self.clip_probe = torch.nn.Linear(backbone.embed_dim, len(CHANGES))
        self.text_probe = torch.nn.Linear(backbone.embed_dim, len(CHANGES))
        # the frame path, and every text but a change's, stay as they were
        self.frozen_text = recipe.train != "all"
        if self.frozen_text:
            params = [*temporal_only(self.model), *self.clip_probe.parameters()]
            if recipe.train == "temporal+words":
                params += words_only(self.model, change_only_tokens(backbone))
        else:
            self.model.requires_grad_(True)  # the loader hands it over for inference, frozen
            params = [*self.model.parameters(), *self.clip_probe.parameters(), *self.text_probe.parameters()]
        self.retention = 0.0 if self.frozen_text else recipe.retention
        # no weight decay where only part of a tensor learns: decay would move the rest
        self.opt = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0 if self.frozen_text else 0.01)
        self.sampler = WorldSampler(backbone.frame_size, seed=recipe.seed, difficulty=recipe.difficulty)
        self.rng = np.random.default_rng(recipe.seed)
        self.step = 0
        self.losses: list[float] = []  # the reversal loss since the last evaluation
        self.model.train()

    def _batch(self):
        from world.vocab import CHANGES, change_texts

        clips, labels, texts, stills = [], [], [], []
        for _ in range(self.config.pairs):
            forward, backward, *still = self.sampler.motion_pair(
                paired=self.config.pair_s, stills=bool(self.config.stills)
            )
            for sample in (forward, backward):
                clips.append(sample.clip)
                labels.append(CHANGES.index(sample.change.change))
                said = change_texts(sample.change)
                texts.append(said[int(self.rng.integers(len(said)))])
            stills.append([s.clip for s in still])
        return clips, torch.tensor(labels), texts, stills

    def train_step(self) -> dict[str, float]:
        from training.backbone_config import embed_clips, embed_images, embed_texts
        from training.backbone_trainer import cosine_lr
        from world.vocab import EVENTS, PHRASINGS

        c, b = self.config, self.backbone
        clips, y, texts, stills = self._batch()
        z_clip = embed_clips(b, clips)
        with torch.set_grad_enabled(c.train != "temporal"):
            z_said = embed_texts(b, texts)
        n = len(clips)
        partner = torch.arange(n) ^ 1  # a pair's two clips sit side by side
        own, reversed_ = (z_said * z_clip).sum(-1), (z_said * z_clip[partner]).sum(-1)
        reversal = F.cross_entropy(
            torch.stack([own, reversed_], 1) * c.scale, torch.zeros(n, dtype=torch.long)
        )
        parts = {
            "reversal": reversal,
            "clip_probe": F.cross_entropy(self.clip_probe(z_clip * c.probe_scale), y),
        }
        if c.stills:  # each text against its clip and every still showing of its shape (the pair's)
            z_still = embed_clips(b, [clip for pair in stills for clip in pair])
            owner = torch.tensor([k for k, pair in enumerate(stills) for _ in pair])
            parts["still"] = c.stills * still_loss(z_said, own, z_still, owner, c.scale)
        if not self.frozen_text:
            parts["text_probe"] = F.cross_entropy(self.text_probe(z_said * c.probe_scale), y)
        if self.retention or self.teacher is not None:
            events = self.rng.choice(len(EVENTS), size=c.images, replace=False)
            frames = [self.sampler.image(int(k)).clip.frames[0] for k in events]
            frame_texts = [EVENTS[int(k)].text(int(self.rng.integers(len(PHRASINGS)))) for k in events]
            z_named, z_frame = embed_texts(b, frame_texts), embed_images(b, frames)
            sim = z_named @ z_frame.T * c.scale
            which = torch.arange(len(frames))
            parts["retention"] = self.retention * (
                F.cross_entropy(sim, which) + F.cross_entropy(sim.T, which)
            )
            if self.teacher is not None:
                # empty haystacks and sentences around world texts are kept beside the event frames
                empties = [self.sampler.image(-1).clip.frames[0] for _ in range(c.empty)]
                said = sentences_around(self.rng, c.sentences)
                with torch.no_grad():
                    was_named = embed_texts(self.teacher, frame_texts + said)
                    was_frame = embed_images(self.teacher, frames + empties)
                named = torch.cat([z_named, embed_texts(b, said)]) if said else z_named
                shown = torch.cat([z_frame, embed_images(b, empties)]) if empties else z_frame
                kept = (named * was_named).sum(-1).mean() + (shown * was_frame).sum(-1).mean()
                parts["distill"] = c.distill * (2 - kept)
                if (c.clips or c.long) and self.step >= c.videos_from:
                    labels = self.rng.choice(len(EVENTS), size=c.clips + c.long, replace=False)
                    kept_clips = [self.sampler.clip(int(k)).clip for k in labels[: c.clips]]
                    kept_clips += [self.sampler.long(int(k), c.long_frames).clip for k in labels[c.clips :]]
                    with torch.no_grad():
                        was_clip = embed_clips(self.teacher, kept_clips)
                    z_kept = embed_clips(b, kept_clips)
                    parts["distill_clips"] = c.distill * (1 - (z_kept * was_clip).sum(-1).mean())
        if c.in_batch:  # each text finds its own clip among all the step's clips, and back
            logits = z_said @ z_clip.T * c.scale
            which = torch.arange(n)
            parts["in_batch"] = c.in_batch * (
                F.cross_entropy(logits, which) + F.cross_entropy(logits.T, which)
            )
        loss = sum(parts.values())
        for group in self.opt.param_groups:
            group["lr"] = cosine_lr(c.lr, c.min_lr_ratio, self.step / max(1, c.steps - 1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.step += 1
        self.losses.append(float(reversal.detach()))
        return {"step": self.step, "loss": float(loss.detach()), "difficulty": c.difficulty,
                **{k: float(v.detach()) for k, v in parts.items()}}  # fmt: skip

    def evaluate(self, step: int, *, progress=print) -> dict:
        """The held-out checks (``motion_check``, ``frame_check``) and the mean reversal loss since the
        last evaluation."""
        from training.backbone_checks import frame_check, motion_check

        self.model.eval()
        motion = motion_check(self.backbone, pairs=self.config.eval_pairs, pair_s=self.config.pair_s)
        frames = frame_check(self.backbone, trials=1)
        self.model.train()
        loss = float(np.mean(self.losses)) if self.losses else None
        self.losses.clear()
        progress(
            f"step {step}: reversal loss {loss if loss is not None else float('nan'):.3f}, "
            f"reversal {motion['reversal']:.3f} "
            f"({', '.join(f'{k} {v:.2f}' for k, v in motion['by_change'].items())}), "
            f"above a still showing {motion['above_still']:.3f}, "
            f"text -> clip {motion['text_to_clip_top1']:.3f}, text -> frame {frames['text_to_frame_top1']:.3f}"
        )
        return {"reversal_loss": loss, **motion, **frames}

    def state_dict(self) -> dict:
        return {
            "step": self.step,
            "model": self.model.state_dict(),
            "probes": [self.clip_probe.state_dict(), self.text_probe.state_dict()],
            "opt": self.opt.state_dict(),
            "rng": (self.sampler.rng.bit_generator.state, self.rng.bit_generator.state),
        }

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        self.model.load_state_dict(state["model"])
        for probe, saved in zip((self.clip_probe, self.text_probe), state["probes"], strict=True):
            probe.load_state_dict(saved)
        self.opt.load_state_dict(state["opt"])
        self.sampler.rng.bit_generator.state, self.rng.bit_generator.state = state["rng"]


# In OUT, saved at every evaluation: rerun the command to resume a stopped run, or with more --steps
# to go on from a finished one (the learning rate's cosine then spans the new total).
STATE = "state-motion-recipe.pt"


def run_recipe(backbone, checkpoint: Path, recipe: MotionRecipe, out: Path, log, *, progress=True,
               checks=None, start: Path | None = None) -> tuple[list[dict], float]:  # fmt: skip
    """Train ``backbone`` (loaded from ``checkpoint``) by ``recipe`` from the weights it holds,
    resuming from OUT's state; ``checks()``: more measurements at each evaluation; ``start``: where the
    checks on the starting weights go (once). Returns (evals, minutes); the weights end baked."""
    from models.backbone import load_backbone
    from training.backbone_trainer import run_phase

    teacher = None
    if recipe.distill and recipe.train == "all":  # the starting weights, frozen: the frame path's teacher
        teacher = load_backbone(checkpoint, device="cpu", dtype="float32")
        teacher.model.load_state_dict(backbone.model.state_dict())
        teacher.model.eval().requires_grad_(False)
    trainer = MotionRecipeTrainer(backbone, recipe, teacher=teacher)
    say = functools.partial(print, flush=True) if progress else logger.info

    def evaluate(step: int) -> dict:
        return {**trainer.evaluate(step, progress=say), **(checks() if checks else {})}

    if start is not None and not start.exists():
        start.write_text(json.dumps({"step": 0, "minutes": 0.0, **evaluate(0)}) + "\n")
    evals, minutes = run_phase(trainer, out / STATE, recipe.steps, recipe.eval_every, evaluate, log,
                                desc="motion recipe", progress=progress)  # fmt: skip
    bake(backbone.model)
    return evals, minutes


def train_motion(
    first_phase: Path, out: Path, recipe: MotionRecipe = MotionRecipe(), *, progress=True
) -> dict:
    """Run ``recipe`` from the weights in ``first_phase`` (a directory with ``model.safetensors`` and
    ``tokenizer.json``), resuming from OUT's state if an earlier run stopped; write OUT's files and
    return the record."""
    from safetensors.torch import save_file

    from models.backbone import load_backbone
    from models.checkpoint import make_checkpoint
    from training.backbone_config import PRESET

    with torch_threads(recipe.threads):
        torch.manual_seed(recipe.seed)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(first_phase / "tokenizer.json", out / "tokenizer.json")
        work = make_checkpoint(out / "checkpoint", preset=PRESET, seed=0, weights=first_phase / "model.safetensors",
                               tokenizer=out / "tokenizer.json")  # fmt: skip
        backbone = load_backbone(work, device="cpu", dtype="float32")
        start = out / "start.json"  # the checks on the starting weights, kept across a resumption
        with open(out / "train_log.jsonl", "a") as log:
            evals, minutes = run_recipe(backbone, work, recipe, out, log, progress=progress, start=start)
        state = {k: v.detach().contiguous() for k, v in backbone.model.state_dict().items()}
        save_file(state, str(out / "model.safetensors"))
        shutil.rmtree(work, ignore_errors=True)
        evals = [json.loads(start.read_text()), *evals]
        record = {
            "recipe": asdict(recipe),
            "first_phase": first_phase.name,
            "train_minutes": round(minutes, 1),
            "torch": torch.__version__,
            "evals": evals,
            "final": evals[-1],
        }
        (out / "motion_recipe.json").write_text(json.dumps(record, indent=1) + "\n")
        return record


HELP = {
    "steps": "steps in all (rerun with more to go on from a finished run)",
    "pairs": "reversal pairs a step",
    "images": "event frames a step for retention and distillation",
    "retention": "weight of text <-> frame contrastive over the event frames",
    "distill": "weight of keeping event frames' and texts' embeddings where the start had them",
    "clips": "event clips a step kept where the start had them (with --distill)",
    "long": "long videos a step kept where the start had them, one-shot (with --distill)",
    "videos_from": "steps before --clips and --long distil (0: from the first)",
    "empty": "empty haystack frames a step kept where the start had them (with --distill)",
    "sentences": "sentences around world texts a step (an event text among other words, order and count "
    "texts) kept where the start had them (with --distill)",
    "in_batch": "weight of text <-> clip contrastive over the step's clips (0: off)",
    "stills": "weight of each change text against its clip and the same clip with the shape shown still "
    "(each colour the change shows), a softmax (0: off)",
    "min_lr_ratio": "cosine decay to lr x this (1: constant)",
    "train": "what learns: every weight, the patch embedding's frame difference, or that and the "
    "change-only token embeddings (the last two keep every frame and other text embedding)",
    "eval_every": "held-out checks every this many steps (and the state saved)",
}


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
        extra = {"choices": TRAINABLE} if name == "train" else {}
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value,
                       help=f"{HELP.get(name, '')} (default: %(default)s)".strip(), **extra)  # fmt: skip
    args = vars(p.parse_args(argv))
    out, first = args.pop("out"), args.pop("first_phase")
    logging.basicConfig(level=logging.WARNING)
    record = train_motion(first, out, MotionRecipe(**args))
    print(json.dumps({k: record["final"][k] for k in ("reversal", "text_to_frame_top1")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
