"""The tiny-world backbone's training steps: the contrastive loss over texts and visual samples, the
training-time probes, the first phase's trainer (:class:`BackboneTrainer`) and the second phase's
(:class:`MotionTrainer`: motion and change). See training.backbone for the recipe."""

from __future__ import annotations

import json
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.files import atomic_path
from models.backbone import Backbone
from training.backbone_config import (
    FIRST_ORDER_PHRASINGS,
    BackboneTrainConfig,
    embed_clips,
    embed_images,
    embed_texts,
)
from training.world_data import Sample, WorldSampler, event_labels, shown_events, token_coverage
from world.vocab import CHANGES, EVENTS, ORDER_PHRASINGS, PHRASINGS, change_texts, order_text

logger = logging.getLogger(__name__)

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
    *,
    hinge_positive: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """``positive`` [T, V]: visual v shows text t; ``masked`` [T, V]: neither positive nor negative;
    ``empty`` [V]: an empty haystack (a negative for every text); ``hinge_positive`` [T, V]: visuals
    that only the hinge counts as the text's (above every empty haystack by ``margin``)."""
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
    above = positive if hinge_positive is None else positive | hinge_positive
    if empty.any() and rows.any():
        worst_pos = sim.masked_fill(~above, 2.0).min(dim=1).values  # [T]
        best_empty = sim[:, empty].max(dim=1).values
        hinge = F.relu(margin - (worst_pos - best_empty))[rows].mean()
    return {"t2v": t2v.mean(), "v2t": v2t.mean() if has.any() else sim.new_zeros(()), "hinge": hinge}


# -- training ---------------------------------------------------------------------------------------


def cosine_lr(lr: float, min_ratio: float, progress: float) -> float:
    """``lr`` on a cosine from 1 to ``min_ratio`` of it as ``progress`` goes from 0 to 1."""
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


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
        self.order_phrasings = FIRST_ORDER_PHRASINGS  # the phrasings the first phase was trained on
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
        return cosine_lr(c.lr, c.min_lr_ratio, (step - c.warmup) / max(1, c.steps - c.warmup))

    def _batch(self, step: int):
        """(images, videos, (texts, positive, masked, text labels, hinge positives)) of one step."""
        images, videos = self._samples(step)
        return images, videos, self._texts(images + videos)

    def _samples(self, step: int) -> tuple[list[Sample], list[Sample]]:
        """(images, videos) of one step."""
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
        return images, videos

    def _texts(self, samples: list[Sample]):
        """One text per event, order and change present; positives, masks and hinge positives
        against ``samples``. A sample that shows an event (an order or motion clip) but is not what
        that event's text is about is masked for it; a motion text is masked for single frames of
        its event (a frame cannot show a change) but they must still beat every empty haystack (the
        hinge: motion queries find their event's frames), and its clip's reversal, or a static clip
        of the same event, is a negative."""
        singles = sorted({x for s in samples for x in s.shows})
        orders = sorted({s.order for s in samples if s.order})
        changes = sorted({s.change for s in samples if s.change is not None})
        texts = [EVENTS[e].text(int(self.rng.integers(len(PHRASINGS)))) for e in singles]
        phrasings = self.order_phrasings
        texts += [order_text(EVENTS[a], EVENTS[b], int(self.rng.integers(len(phrasings))), phrasings=phrasings)
                  for a, b in orders]  # fmt: skip
        texts += [c.text(int(self.rng.integers(len(change_texts(c))))) for c in changes]
        n_t, n_v = len(texts), len(samples)
        positive = torch.zeros(n_t, n_v, dtype=torch.bool)
        masked = torch.zeros(n_t, n_v, dtype=torch.bool)
        hinge = torch.zeros(n_t, n_v, dtype=torch.bool)
        first_change = len(singles) + len(orders)
        for v, smp in enumerate(samples):
            if smp.order:
                positive[len(singles) + orders.index(smp.order), v] = True
            elif smp.change is not None:
                positive[first_change + changes.index(smp.change), v] = True
            elif smp.label >= 0:
                positive[singles.index(smp.label), v] = True
            if smp.order or smp.change is not None:  # it does show each event, but is not about it
                for x in smp.shows:
                    masked[singles.index(x), v] = True
        for t, change in enumerate(changes, start=first_change):
            kinds = shown_events(change)
            for v, smp in enumerate(samples):
                if len(smp.clip.frames) == 1 and smp.label in kinds:
                    masked[t, v] = hinge[t, v] = True
        labels = torch.tensor(singles + [-2] * (len(orders) + len(changes)))
        return texts, positive, masked, labels, hinge

    def extra_losses(
        self, videos: list[Sample], z_videos: torch.Tensor, clip_tokens
    ) -> dict[str, torch.Tensor]:
        """A phase's own terms over its video samples (their embeddings, the vision tower's tokens)."""
        return {}

    def train_step(self) -> dict[str, float]:
        c = self.config
        t0 = time.perf_counter()
        images, videos, (texts, positive, masked, text_labels, hinge) = self._prefetched()
        t1 = time.perf_counter()
        samples = images + videos
        for group in self.opt.param_groups:
            group["lr"] = group.get("fixed_lr") or self.lr_at(self.step)
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
        extra = self.extra_losses(videos, z_vis[len(images) :], self._visual_out[0] if videos else None)
        z_txt = embed_texts(self.backbone, texts)
        empty = torch.tensor([not s.shows for s in samples])
        scale = self.log_scale.exp().clamp(max=100.0)
        losses = contrastive_loss(
            z_txt, z_vis, positive, masked, empty, scale, c.margin, hinge_positive=hinge
        )
        vis_labels = torch.tensor([s.label for s in samples])
        single = torch.tensor([s.order is None and s.change is None for s in samples])
        aux = self.probes(z_vis[single], vis_labels[single])
        single_t = text_labels >= -1
        aux = aux + self.probes(z_txt[single_t], text_labels[single_t])
        aux = aux + visual_aux
        total = losses["t2v"] + losses["v2t"] + losses["hinge"] + c.aux_weight * aux + c.dense_weight * dense
        total = total + sum(extra.values(), total.new_zeros(()))
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
            **{k: float(v) for k, v in extra.items()},
            "difficulty": self.sampler.difficulty,
            "temperature": float(1 / scale),
            "lr": self.lr_at(self.step - 1),
            "sample_s": t1 - t0,
            "model_s": t2 - t1,
        }


# what one temporal pair of frames shows a vision token of a moving event (the dense motion probe's labels)
LOCAL_CHANGES = ("right", "left", "down", "up", "grow", "shrink", "still")


class MotionTrainer(BackboneTrainer):
    """The second phase (:class:`~training.backbone_config.MotionPhaseConfig`): the first phase's
    mixed samples (smaller, the world's difficulty ramped up again), plus reversal pairs whose frames
    come in temporal pairs a moment apart (the backbone's temporal patch sees how things move inside
    it), their events' still frames and static twins, and every order phrasing. Two probes of its
    own teach the vision tower to see change: a pooled one (which change, or none, from the clip's
    embedding) and a dense one (each vision token of the event: how it moves within its temporal
    pair); its own learning-rate schedule, optimizer, probes and samples."""

    def __init__(self, backbone: Backbone, config: BackboneTrainConfig):
        phase = config.motion
        mix = ("steps", "lr", "warmup", "min_lr_ratio", "images", "empty_images", "clips", "empty_clips", "long",
               "order_pairs", "aux_weight", "dense_weight", "ramp")  # fmt: skip
        first = replace(
            config,
            frame_phase=0.0,
            seed=config.seed + phase.seed_offset,
            **{k: getattr(phase, k) for k in mix},
        )
        super().__init__(backbone, first)
        self.phase = phase
        self.order_phrasings = ORDER_PHRASINGS
        self.change_probe = nn.Linear(backbone.embed_dim, len(CHANGES) + 1)  # the changes, and none
        self.motion_probe = nn.Linear(self.model.model.visual.config.out_hidden_size, len(LOCAL_CHANGES) + 1)
        probes = list(self.change_probe.parameters()) + list(self.motion_probe.parameters())
        self.opt.add_param_group({"params": probes, "weight_decay": 0.0, "fixed_lr": phase.probe_lr})

    def _samples(self, step: int) -> tuple[list[Sample], list[Sample]]:
        images, videos = super()._samples(step)
        s = self.sampler
        for _ in range(self.phase.motion_pairs):
            forward, backward = s.motion_pair(paired=self.phase.pair_s)
            videos += [forward, backward]
            event = forward.change.kind.index
            images.append(s.image(event))  # its event as a still frame (the hinge: motion texts find it)
            if self.rng.random() < self.phase.static_twins:
                videos.append(s.clip(event))  # the same event, not moving: a negative for the motion text
        return images, videos

    def extra_losses(self, videos, z_videos, clip_tokens) -> dict[str, torch.Tensor]:
        """Which change a clip shows (or none: a static event), from its embedding; and, for every
        vision token a changing event covers, how it moves within the token's temporal pair (balanced
        against the tokens it does not cover, as the first phase's dense probe)."""
        labels = torch.tensor([CHANGES.index(v.change.change) if v.change else len(CHANGES) for v in videos])
        pooled = F.cross_entropy(self.change_probe(z_videos), labels)
        per_clip = [self._token_labels(v) for v in videos]
        target = torch.from_numpy(np.concatenate(per_clip))
        if clip_tokens is None or len(target) != len(clip_tokens):  # the layout is not the one assumed
            return {"change": pooled}
        known = target >= 0
        on = known & (target < len(LOCAL_CHANGES))
        weight = torch.where(on, 0.5 / max(1, int(on.sum())), 0.5 / max(1, int((known & ~on).sum())))
        per_token = F.cross_entropy(self.motion_probe(clip_tokens), target.clamp(min=0), reduction="none")
        return {"change": pooled, "motion": (weight * known * per_token).sum()}

    def _token_labels(self, sample: Sample) -> np.ndarray:
        """Per vision token of ``sample`` (its temporal pairs in order, tokens row-major): how the event
        moves there (LOCAL_CHANGES), none (len(LOCAL_CHANGES)) where it is not, or -1 (not a motion clip)."""
        frames = sample.clip.frames
        pairs = -(-len(frames) // 2)
        h, w = frames.shape[1] // self._token_px, frames.shape[2] // self._token_px
        if sample.change is None or sample.masks is None:
            return np.full(pairs * h * w, -1, dtype=np.int64)
        masks = sample.masks if len(frames) % 2 == 0 else np.concatenate([sample.masks, sample.masks[-1:]])
        local = (
            LOCAL_CHANGES.index(sample.change.change)
            if sample.change.change in LOCAL_CHANGES
            else len(LOCAL_CHANGES) - 1
        )
        out = []
        for g in range(pairs):
            covered = np.maximum(
                token_coverage(masks[2 * g], self._token_px), token_coverage(masks[2 * g + 1], self._token_px)
            )
            out.append(np.where(covered > 0.1, local, len(LOCAL_CHANGES)))
        return np.concatenate(out).astype(np.int64)


def run_phase(
    trainer, state_file: Path, steps: int, eval_every: int, evaluate, log, *, desc: str, progress=True
):
    """Train ``trainer`` to ``steps`` (resuming from ``state_file``), evaluating every ``eval_every``
    steps with ``evaluate(step)`` (saved with the state); returns (evals, minutes)."""
    from tqdm import tqdm

    evals: list[dict] = []
    if state_file.exists():  # resume an interrupted run where it stopped
        state = torch.load(state_file, weights_only=False)
        trainer.load_state_dict(state["trainer"])
        evals = state["evals"]
        logger.info("resuming %s at step %d", desc, trainer.step)
    started = time.perf_counter() - (evals[-1]["minutes"] * 60 if evals else 0.0)
    bar = tqdm(total=steps, initial=trainer.step, desc=desc, unit="step", disable=not progress)
    while trainer.step < steps:
        stats = trainer.train_step()
        bar.update(1)
        if trainer.step % trainer.config.log_every == 0 or trainer.step == 1:
            bar.set_postfix(loss=f"{stats['loss']:.3f}", d=f"{stats['difficulty']:.2f}")
            log.write(json.dumps({"phase": desc, **stats}) + "\n")
            log.flush()
        if trainer.step % eval_every == 0 or trainer.step == steps:
            result = {"step": trainer.step, "minutes": (time.perf_counter() - started) / 60}
            result.update(evaluate(trainer.step))
            evals.append(result)
            log.write(json.dumps({"phase": desc, "eval": result}) + "\n")
            log.flush()
            logger.info("%s eval: %s", desc, result)
            with atomic_path(state_file) as tmp:
                torch.save({"trainer": trainer.state_dict(), "evals": evals}, tmp)
    bar.close()
    return evals, (time.perf_counter() - started) / 60
