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

The first ``frame_phase`` of the steps use frames only (cheap, where colour and shape are
learned); the rest mix in clips, long videos and order pairs. The trained weights (and the
tokenizer) ship in ``training/tiny_world/``; ``qaslr train-backbone`` reproduces them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.config import CHECKPOINT_TIME_HEAD_DIR
from models.backbone import Backbone, ClipStates
from training.world_data import Sample, WorldSampler, event_labels, token_coverage
from world.vocab import EVENTS, ORDER_PHRASINGS, PHRASINGS, order_text

logger = logging.getLogger(__name__)

PRESET = "tiny-world"
ASSET_DIR = Path(__file__).resolve().parent / "tiny_world"


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
        out.append(order_text(a, b, rng.randrange(len(ORDER_PHRASINGS))))
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


# -- loss -------------------------------------------------------------------------------------------


class Probes(nn.Module):
    """Colour (8 + none) and shape (4 + none) from an embedding; training-time only."""

    def __init__(self, dim: int):
        super().__init__()
        self.colour = nn.Linear(dim, 9)
        self.shape = nn.Linear(dim, 5)

    def forward(self, z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        colour = torch.tensor([event_labels(int(x))[0] for x in labels])
        shape = torch.tensor([event_labels(int(x))[1] for x in labels])
        return F.cross_entropy(self.colour(z), colour) + F.cross_entropy(self.shape(z), shape)


class VisualProbe(nn.Module):
    """Colour and shape of a frame from the vision tower's merged tokens (attention-pooled); a short
    gradient path into the vision tower, where shape has to be learned. Training-time only."""

    def __init__(self, dim: int):
        super().__init__()
        self.attend = nn.Linear(dim, 1)
        self.probes = Probes(dim)

    def forward(self, tokens: torch.Tensor, sizes: list[int], labels: torch.Tensor) -> torch.Tensor:
        pooled = []
        for chunk in torch.split(tokens, sizes):
            weights = torch.softmax(self.attend(chunk).squeeze(-1), dim=0)
            pooled.append(weights @ chunk)
        return self.probes(torch.stack(pooled), labels)


class DenseProbe(nn.Module):
    """Colour and shape of every vision token that the event covers (and "none" elsewhere), from
    the renderer's ground-truth masks: dense supervision of the vision tower. Training-time only."""

    def __init__(self, dim: int, threshold: float = 0.1):
        super().__init__()
        self.colour = nn.Linear(dim, 9)
        self.shape = nn.Linear(dim, 5)
        self.threshold = threshold

    def forward(self, tokens: torch.Tensor, coverage: np.ndarray, token_labels: np.ndarray) -> torch.Tensor:
        on = (coverage > self.threshold) & (token_labels >= 0)
        colour = torch.from_numpy(np.where(on, token_labels // 4, 8))
        shape = torch.from_numpy(np.where(on, token_labels % 4, 4))
        # event tokens and background tokens weigh half each (events cover few tokens)
        weight = np.where(on, 0.5 / max(1, on.sum()), 0.5 / max(1, (~on).sum())).astype(np.float32)
        per_token = F.cross_entropy(self.colour(tokens), colour, reduction="none")
        per_token = per_token + F.cross_entropy(self.shape(tokens), shape, reduction="none")
        return (torch.from_numpy(weight) * per_token).sum()


def contrastive_loss(
    text_z: torch.Tensor,
    visual_z: torch.Tensor,
    positive: torch.Tensor,
    masked: torch.Tensor,
    empty: torch.Tensor,
    scale: torch.Tensor,
    margin: float,
) -> dict[str, torch.Tensor]:
    """``positive`` [T, V]: visual v shows text t; ``masked`` [T, V]: neither positive nor negative;
    ``empty`` [V]: an empty haystack (a negative for every text)."""
    sim = text_z @ visual_z.T  # [T, V] cosines
    logits = scale * sim
    neg_inf = torch.finfo(logits.dtype).min
    # text -> visual: all positives against all non-masked visuals
    allowed = logits.masked_fill(masked, neg_inf)
    rows = positive.any(dim=1)  # texts whose event only appears in order clips have no positive
    t2v = -(torch.logsumexp(allowed.masked_fill(~positive, neg_inf), dim=1) - torch.logsumexp(allowed, dim=1))
    t2v = t2v[rows]
    # visual -> text, for visuals that show something
    has = positive.any(dim=0)
    v_logits = allowed.T[has]  # [V', T]
    v_pos = positive.T[has]
    v2t = -(torch.logsumexp(v_logits.masked_fill(~v_pos, neg_inf), dim=1) - torch.logsumexp(v_logits, dim=1))
    # every event text's positives above every empty haystack
    hinge = sim.new_zeros(())
    if empty.any() and rows.any():
        worst_pos = sim.masked_fill(~positive, 2.0).min(dim=1).values  # [T]
        best_empty = sim[:, empty].max(dim=1).values
        hinge = F.relu(margin - (worst_pos - best_empty))[rows].mean()
    return {"t2v": t2v.mean(), "v2t": v2t.mean() if has.any() else sim.new_zeros(()), "hinge": hinge}


# -- training ---------------------------------------------------------------------------------------


class BackboneTrainer:
    def __init__(self, backbone: Backbone, config: BackboneTrainConfig):
        self.backbone = backbone
        self.config = config
        torch.manual_seed(config.seed)
        self.model = backbone.model
        self.model.train().requires_grad_(True)
        self.probes = Probes(backbone.embed_dim)
        visual = self.model.model.visual
        self.visual_probe = VisualProbe(visual.config.out_hidden_size)
        self.dense_probe = DenseProbe(visual.config.out_hidden_size)
        self._visual_out: list[torch.Tensor] = []
        visual.register_forward_hook(lambda _m, _i, out: self._visual_out.append(out.pooler_output))
        proc = backbone.processor.image_processor
        self._token_px = proc.patch_size * proc.merge_size
        self.log_scale = nn.Parameter(torch.tensor(math.log(1 / config.init_temperature)))
        params = list(self.model.parameters()) + list(self.probes.parameters()) + [self.log_scale]
        params += list(self.visual_probe.parameters()) + list(self.dense_probe.parameters())
        decay = [p for p in params if p.ndim >= 2]
        no_decay = [p for p in params if p.ndim < 2]
        self.opt = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": config.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=config.lr,
            betas=(0.9, 0.98),
        )
        self.sampler = WorldSampler(backbone.frame_size, seed=config.seed)
        self.rng = np.random.default_rng(config.seed + 1)
        self.step = 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="world-sampler")
        self._next = None

    def difficulty(self, step: int) -> float:
        return min(1.0, step / max(1.0, self.config.ramp * self.config.steps))

    def _prefetched(self):
        """This step's samples; the next step's are drawn in a background thread meanwhile."""
        batch = self._next.result() if self._next is not None else self._batch(self.step)
        if self.step + 1 < self.config.steps:
            self._next = self._pool.submit(self._batch, self.step + 1)
        return batch

    def state_dict(self) -> dict:
        if self._next is not None:
            self._next.result()  # the next batch's random state is recorded once its drawing starts
        return {
            "step": self.step,
            "model": self.model.state_dict(),
            "probes": [m.state_dict() for m in (self.probes, self.visual_probe, self.dense_probe)],
            "log_scale": self.log_scale.detach().clone(),
            "opt": self.opt.state_dict(),
            "rng": self._rng_at.get(self.step)
            or (self.sampler.rng.bit_generator.state, self.rng.bit_generator.state),
        }

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        self.model.load_state_dict(state["model"])
        for m, sd in zip((self.probes, self.visual_probe, self.dense_probe), state["probes"], strict=True):
            m.load_state_dict(sd)
        with torch.no_grad():
            self.log_scale.copy_(state["log_scale"])
        self.opt.load_state_dict(state["opt"])
        self.sampler.rng.bit_generator.state, self.rng.bit_generator.state = state["rng"]
        self._next = None

    def lr_at(self, step: int) -> float:
        c = self.config
        if step < c.warmup:
            return c.lr * (step + 1) / c.warmup
        progress = (step - c.warmup) / max(1, c.steps - c.warmup)
        return c.lr * (c.min_lr_ratio + (1 - c.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))

    def _batch(self, step: int):
        """(images, videos, (texts, positive, masked, text labels)) of one step."""
        c, s = self.config, self.sampler
        self._rng_at = {
            step: (s.rng.bit_generator.state, self.rng.bit_generator.state),
            **{k: v for k, v in getattr(self, "_rng_at", {}).items() if k >= step - 1},
        }
        s.difficulty = self.difficulty(step)
        labels = self.rng.choice(len(EVENTS), size=c.images, replace=c.images > len(EVENTS))
        images = [s.image(int(x)) for x in labels] + [s.image(-1) for _ in range(c.empty_images)]
        videos: list[Sample] = []
        if step >= c.frame_phase * c.steps:
            videos += [s.clip(int(self.rng.integers(len(EVENTS)))) for _ in range(c.clips)]
            videos += [s.clip(-1) for _ in range(c.empty_clips)]
            lo, hi = c.long_frames
            for _ in range(c.long):
                n = int(self.rng.integers(lo // 2, hi // 2 + 1)) * 2
                videos.append(s.long(int(self.rng.integers(len(EVENTS))), n))
            for _ in range(c.order_pairs):
                videos += list(s.order_pair())
        return images, videos, self._texts(images + videos)

    def _texts(self, samples: list[Sample]):
        """One text per event and order label present; positives and masks against ``samples``."""
        singles = sorted(
            {s.label for s in samples if s.label >= 0} | {x for s in samples if s.order for x in s.order}
        )
        orders = sorted({s.order for s in samples if s.order})
        texts = [EVENTS[e].text(int(self.rng.integers(len(PHRASINGS)))) for e in singles]
        texts += [
            order_text(EVENTS[a], EVENTS[b], int(self.rng.integers(len(ORDER_PHRASINGS)))) for a, b in orders
        ]
        n_t, n_v = len(texts), len(samples)
        positive = torch.zeros(n_t, n_v, dtype=torch.bool)
        masked = torch.zeros(n_t, n_v, dtype=torch.bool)
        for v, smp in enumerate(samples):
            if smp.order:
                positive[len(singles) + orders.index(smp.order), v] = True
                for x in smp.order:  # it does show each event, but is not what a single text is about
                    masked[singles.index(x), v] = True
            elif smp.label >= 0:
                positive[singles.index(smp.label), v] = True
        labels = torch.tensor(singles + [-2] * len(orders))
        return texts, positive, masked, labels

    def train_step(self) -> dict[str, float]:
        c = self.config
        t0 = time.perf_counter()
        images, videos, (texts, positive, masked, text_labels) = self._prefetched()
        t1 = time.perf_counter()
        samples = images + videos
        for group in self.opt.param_groups:
            group["lr"] = self.lr_at(self.step)
        self._visual_out.clear()
        frames = [s.clip.frames[0] for s in images]
        z_img = embed_images(self.backbone, frames)
        sizes = [(f.shape[0] // self._token_px) * (f.shape[1] // self._token_px) for f in frames]
        tokens = self._visual_out[0]
        visual_aux = self.visual_probe(tokens, sizes, torch.tensor([s.label for s in images]))
        coverage = np.concatenate([token_coverage(s.masks[0], self._token_px) for s in images])
        token_labels = np.repeat(np.array([s.label for s in images]), sizes)
        dense = self.dense_probe(tokens, coverage, token_labels)
        self._visual_out.clear()
        zs = [z_img]
        if videos:
            zs.append(embed_clips(self.backbone, [s.clip for s in videos]))
        z_vis = torch.cat(zs)
        z_txt = embed_texts(self.backbone, texts)
        empty = torch.tensor([s.label < 0 and s.order is None for s in samples])
        scale = self.log_scale.exp().clamp(max=100.0)
        losses = contrastive_loss(z_txt, z_vis, positive, masked, empty, scale, c.margin)
        vis_labels = torch.tensor([s.label for s in samples])
        single = torch.tensor([s.order is None for s in samples])
        aux = self.probes(z_vis[single], vis_labels[single])
        single_t = text_labels >= -1
        aux = aux + self.probes(z_txt[single_t], text_labels[single_t])
        aux = aux + visual_aux
        total = losses["t2v"] + losses["v2t"] + losses["hinge"] + c.aux_weight * aux + c.dense_weight * dense
        self.opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.step += 1
        t2 = time.perf_counter()
        return {
            "step": self.step,
            "loss": float(total.detach()),
            **{k: float(v) for k, v in losses.items()},
            "aux": float(aux),
            "visual_aux": float(visual_aux),
            "dense": float(dense),
            "difficulty": self.sampler.difficulty,
            "temperature": float(1 / scale),
            "lr": self.lr_at(self.step - 1),
            "sample_s": t1 - t0,
            "model_s": t2 - t1,
        }


# -- evaluation -------------------------------------------------------------------------------------


@torch.no_grad()
def frame_check(backbone: Backbone, *, seed: int = 12345, trials: int = 3) -> dict:
    """Text -> frame retrieval over the 32 events on frames drawn with ``seed`` (held out), and the
    event-vs-empty margin: for each event text, its frames against ``4 * 32`` empty haystacks."""
    was_training = backbone.model.training
    backbone.model.eval()
    sampler = WorldSampler(backbone.frame_size, seed=seed)
    texts = [e.text(p) for p in range(len(PHRASINGS)) for e in EVENTS]
    z_txt = torch.cat([embed_texts(backbone, texts[i : i + 64]) for i in range(0, len(texts), 64)])
    correct, total, margins, colour_ok, shape_ok = 0, 0, [], 0, 0
    empties = [sampler.image(-1).clip.frames[0] for _ in range(4 * len(EVENTS))]
    z_empty = torch.cat([embed_images(backbone, empties[i : i + 64]) for i in range(0, len(empties), 64)])
    for _ in range(trials):
        frames = [sampler.image(k).clip.frames[0] for k in range(len(EVENTS))]
        z = torch.cat([embed_images(backbone, frames[i : i + 64]) for i in range(0, len(frames), 64)])
        sim = z_txt @ z.T  # [4 * 32, 32]
        truth = torch.arange(len(texts)) % len(EVENTS)
        pred = sim.argmax(dim=1)
        correct += int((pred == truth).sum())
        colour_ok += int((pred // 4 == truth // 4).sum())
        shape_ok += int((pred % 4 == truth % 4).sum())
        total += len(texts)
        pos = sim[torch.arange(len(texts)), truth]
        margins.append(pos - (z_txt @ z_empty.T).max(dim=1).values)
    margin = torch.cat(margins)
    backbone.model.train(was_training)
    return {
        "text_to_frame_top1": correct / total,
        "colour": colour_ok / total,
        "shape": shape_ok / total,
        "event_beats_all_empty": float((margin > 0).float().mean()),
        "min_margin": float(margin.min()),
    }


@torch.no_grad()
def video_check(backbone: Backbone, *, seed: int = 54321, frames: int = 64) -> dict:
    """Text -> long video (one-shot, ``frames`` frames, the event on 1-3 of them) over the 32 events,
    and colour/shape accuracy of the mistakes' nearest text."""
    was_training = backbone.model.training
    backbone.model.eval()
    sampler = WorldSampler(backbone.frame_size, seed=seed)
    texts = [e.text(0) for e in EVENTS]
    z_txt = embed_texts(backbone, texts)
    vids = [sampler.long(k, frames) for k in range(len(EVENTS))]
    z = torch.cat([embed_clips(backbone, [v.clip for v in vids[i : i + 4]]) for i in range(0, len(vids), 4)])
    labels = torch.tensor([v.label for v in vids])
    sim = z_txt @ z.T  # [32 texts, 32 videos]
    seen = labels >= 0
    hit = (sim.argmax(dim=1) == torch.arange(len(EVENTS)))[seen]
    backbone.model.train(was_training)
    return {"text_to_video_top1": float(hit.float().mean()), "videos_with_event_sampled": int(seen.sum())}


# -- the whole job ----------------------------------------------------------------------------------


def recipe_hash(config: BackboneTrainConfig) -> str:
    """Content hash of what determines the trained weights (code version aside)."""
    data = json.dumps({"preset": PRESET, **asdict(config)}, sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def train_backbone(
    out_dir: str | Path, config: BackboneTrainConfig = BackboneTrainConfig(), *, progress=True
) -> Path:
    """Train the tiny-world backbone and write ``model.safetensors``, ``tokenizer.json`` and
    ``recipe.json`` (config, metrics, time) to ``out_dir``; returns ``out_dir``."""
    from safetensors.torch import save_file
    from tqdm import tqdm

    from models.backbone import load_backbone
    from models.checkpoint import make_checkpoint, train_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(config.threads)
    tokenizer = train_tokenizer(world_sentences(), vocab_size=800, lowercase=True)
    tokenizer.save(str(out / "tokenizer.json"))
    work = out / "checkpoint"
    make_checkpoint(work, preset=PRESET, seed=config.seed, tokenizer=out / "tokenizer.json")
    backbone = load_backbone(work, device="cpu", dtype="float32")
    trainer = BackboneTrainer(backbone, config)
    state_file = out / "state.pt"
    evals: list[dict] = []
    if state_file.exists():  # resume an interrupted run where it stopped
        state = torch.load(state_file, weights_only=False)
        trainer.load_state_dict(state["trainer"])
        evals = state["evals"]
        logger.info("resuming tiny-world training at step %d", trainer.step)
    log = open(out / "train_log.jsonl", "a")
    started = time.perf_counter() - (evals[-1]["minutes"] * 60 if evals else 0.0)
    bar = tqdm(
        total=config.steps, initial=trainer.step, desc="train tiny-world", unit="step", disable=not progress
    )
    while trainer.step < config.steps:
        stats = trainer.train_step()
        bar.update(1)
        if trainer.step % config.log_every == 0 or trainer.step == 1:
            bar.set_postfix(loss=f"{stats['loss']:.3f}", d=f"{stats['difficulty']:.2f}")
            log.write(json.dumps(stats) + "\n")
            log.flush()
        if trainer.step % config.eval_every == 0 or trainer.step == config.steps:
            result = {"step": trainer.step, "minutes": (time.perf_counter() - started) / 60}
            result.update(frame_check(backbone, trials=1))
            if trainer.step >= config.frame_phase * config.steps:
                result.update(video_check(backbone))
            evals.append(result)
            log.write(json.dumps({"eval": result}) + "\n")
            log.flush()
            logger.info("eval: %s", result)
            tmp = state_file.with_suffix(".tmp")
            torch.save({"trainer": trainer.state_dict(), "evals": evals}, tmp)
            tmp.replace(state_file)
    bar.close()
    minutes = (time.perf_counter() - started) / 60
    state = {k: v.detach().contiguous() for k, v in backbone.model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"))
    backbone.model.eval()
    final = {**frame_check(backbone, trials=3), **video_check(backbone)}
    recipe = {
        "preset": PRESET,
        "config": asdict(config),
        "recipe_hash": recipe_hash(config),
        "train_minutes": round(minutes, 1),
        "torch": torch.__version__,
        "threads": config.threads,
        "final": final,
        "evals": evals,
    }
    (out / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
    logger.info("tiny-world backbone trained in %.1f min: %s", minutes, final)
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
    shipped = ASSET_DIR / CHECKPOINT_TIME_HEAD_DIR
    if seed == 0 and shipped.is_dir():  # the time head trained on these weights, served by default
        shutil.copytree(shipped, Path(out) / CHECKPOINT_TIME_HEAD_DIR, dirs_exist_ok=True)
    return out
