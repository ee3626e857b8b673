"""The QASLR post-training loop over cached features (§3.4, §A.1 Table 3, §A.2).

One optimizer step (interleaved sub-batching, §3.4 / §A.2):

    batch of B pairs --group by task and input format--> homogeneous sub-batches s_1..s_k
    no-grad pass: each sub-batch's positive-side embeddings -> shared negative pool per kind
    for each s: L_s = L_final + l_step L_step + l_distill L_distill (Eq. 11-14), with the other
                sub-batches' positives as extra (detached) negatives; backward(|s| / B * L_s)
    one AdamW step (lr 1e-4)

Only the head (or a control aggregator) trains; the backbone's outputs come from the feature cache.
The epoch order is a function of (seed, epoch), and checkpoints hold the model, optimizer, step,
position in the epoch and RNG states, so a resumed run continues exactly where it stopped. A QASLR
head records the clip plan of its features (K', K_max, L, M) in its config, which serving checks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from core.files import atomic_path
from models.head import StreamingHeadConfig
from training.data import Pair
from training.features import FeatureStore
from training.losses import LAMBDA_DISTILL, LAMBDA_STEP, total_loss
from training.scoring import Negatives, embed_sides, is_conditioned, pair_losses

logger = logging.getLogger(__name__)

CHECKPOINT_FILENAME = "checkpoint.pt"
METRICS_FILENAME = "metrics.jsonl"


@dataclass
class TrainConfig:
    epochs: int = 20
    batch_size: int = 32
    lr: float = 1e-4  # §A.2
    weight_decay: float = 0.01
    seed: int = 0
    scoring: str = "indexable"  # indexable | conditioned (Eq. 1)
    step_loss: bool = True  # Eq. 12 on/off (Table 6)
    distill_loss: bool = True  # Eq. 13 on/off (Table 6)
    lambda_step: float = LAMBDA_STEP
    lambda_distill: float = LAMBDA_DISTILL
    # L_clip (two-stage recipe, query-conditioned scoring only): distil the query-weighted pooling
    # of the backbone's own clip embeddings into every step readout; 0 turns it off
    lambda_clip: float = 0.0
    sub_batching: bool = True
    candidate_negatives: str = "text"  # none | text | all: listed candidates used as extra negatives
    max_steps: int | None = None  # stop after this many optimizer steps (overrides epochs)
    eval_every: int = 0  # optimizer steps between validation evaluations (0: only at the end)
    checkpoint_every: int = 50
    log_every: int = 10

    def __post_init__(self) -> None:
        if self.scoring not in ("indexable", "conditioned"):
            raise ValueError(f"scoring must be indexable or conditioned, got {self.scoring!r}")
        if self.candidate_negatives not in ("none", "text", "all"):
            raise ValueError("candidate_negatives must be none, text or all")
        if self.batch_size < 2:
            raise ValueError("batch_size must be >= 2 (contrastive learning needs negatives)")
        if self.epochs < 1 and not self.max_steps:
            raise ValueError("epochs must be >= 1")


def epoch_batches(pairs: Sequence[Pair], config: TrainConfig, epoch: int) -> list[list[list[int]]]:
    """Optimizer steps of one epoch; each step is a list of homogeneous sub-batches (pair indices).

    With sub-batching a step takes B random pairs and groups them by ``Pair.input_format``. Without
    it, every step is a single homogeneous batch of one format (the no-sub-batching baseline: no
    gradient accumulation across formats and no shared negatives)."""
    rng = np.random.default_rng([config.seed, epoch])
    order = rng.permutation(len(pairs))
    steps: list[list[list[int]]] = []
    if config.sub_batching:
        for start in range(0, len(order), config.batch_size):
            groups: dict[str, list[int]] = defaultdict(list)
            for i in order[start : start + config.batch_size]:
                groups[pairs[i].input_format].append(int(i))
            subs = [g for g in groups.values() if len(g) >= 2]  # a lone pair has no in-batch negative
            if subs:
                steps.append(subs)
    else:
        by_format: dict[str, list[int]] = defaultdict(list)
        for i in order:
            by_format[pairs[i].input_format].append(int(i))
        for idx in by_format.values():
            for start in range(0, len(idx), config.batch_size):
                chunk = idx[start : start + config.batch_size]
                if len(chunk) >= 2:
                    steps.append([chunk])
        steps = [steps[i] for i in rng.permutation(len(steps))]
    return steps


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


class Trainer:
    def __init__(
        self,
        model: nn.Module,
        store: FeatureStore,
        train_pairs: Sequence[Pair],
        *,
        config: TrainConfig,
        out_dir: str | os.PathLike,
        val_pairs: Sequence[Pair] | None = None,
        progress: bool = True,
    ):
        self.model, self.store, self.pairs, self.config = model, store, list(train_pairs), config
        self.val_pairs = list(val_pairs or [])
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.progress = progress
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=config.lr, weight_decay=config.weight_decay
        )
        self.step, self.epoch, self.batch_in_epoch = 0, 0, 0
        self._record_clip_plan()
        self._fit_query_whitening()
        torch.manual_seed(config.seed)
        np.random.seed(config.seed)
        random.seed(config.seed)

    def _record_clip_plan(self) -> None:
        """A QASLR head records the clip plan of the features it trains on (K', K_max, L, M:
        ``FeatureStore.clip_plan``) in its config, so ``save_head`` writes it to head_config.json
        and serving can refuse another plan (engine.loader). A head trained again on other features
        records the newer plan."""
        config = getattr(self.model, "config", None)
        if isinstance(config, StreamingHeadConfig):
            config.clip_plan = self.store.clip_plan

    def _fit_query_whitening(self) -> None:
        """A head with ``query_whitening`` whitens its conditioning input by the statistics of the
        training queries' embeddings (``StreamingHead.set_query_statistics``): fitted here, before the
        first step, from the data alone (a resumed run fits the same values, then loads them)."""
        config = getattr(self.model, "config", None)
        if not (isinstance(config, StreamingHeadConfig) and config.query_whitening):
            return
        texts = sorted({p.query.text for p in self.pairs if p.query.video is None and p.query.text})
        if len(texts) < 2:
            raise ValueError("query whitening needs at least two distinct training queries")
        self.model.set_query_statistics(torch.stack([self.store.text(t) for t in texts]).float())

    # -- checkpointing ----------------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> Path:
        return self.out / CHECKPOINT_FILENAME

    def save_checkpoint(self) -> Path:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "rng": _rng_state(),
            "config": dataclasses.asdict(self.config),
        }
        with atomic_path(self.checkpoint_path) as tmp:
            torch.save(state, tmp)
        return self.checkpoint_path

    def load_checkpoint(self) -> bool:
        """Resume from ``out_dir/checkpoint.pt`` if present; False when starting fresh."""
        if not self.checkpoint_path.is_file():
            return False
        state = torch.load(self.checkpoint_path, weights_only=False)
        saved = {
            k: v
            for k, v in state["config"].items()
            if k not in ("eval_every", "checkpoint_every", "log_every", "max_steps", "epochs")
        }
        mine = {k: v for k, v in dataclasses.asdict(self.config).items() if k in saved}
        if saved != mine:
            diff = sorted(k for k in saved if saved[k] != mine.get(k))
            raise ValueError(f"cannot resume {self.checkpoint_path}: training settings differ ({diff})")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.epoch, self.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
        _set_rng_state(state["rng"])
        logger.info("resumed from %s at step %d (epoch %d)", self.checkpoint_path, self.step, self.epoch)
        return True

    def _log(self, record: dict) -> None:
        with open(self.out / METRICS_FILENAME, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    # -- one optimizer step -----------------------------------------------------------------------
    def train_step(self, subs: list[list[int]]) -> dict:
        cfg = self.config
        self.model.train()
        batches = [[self.pairs[i] for i in sub] for sub in subs]
        pools = self._shared_negatives(batches) if len(batches) > 1 else None
        total = sum(len(b) for b in batches)
        self.optimizer.zero_grad(set_to_none=True)
        sums = defaultdict(float)
        for s, batch in enumerate(batches):
            negatives = pools[s] if pools is not None else None
            terms = pair_losses(
                self.model,
                self.store,
                batch,
                scoring=cfg.scoring,
                negatives=negatives,
                candidate_negatives=cfg.candidate_negatives,
                clip_loss=cfg.lambda_clip > 0,
            )
            loss = total_loss(  # Eq. 14
                terms.final,
                terms.step if cfg.step_loss else None,
                terms.distill if cfg.distill_loss else None,
                lambda_step=cfg.lambda_step,
                lambda_distill=cfg.lambda_distill,
                clip=terms.clip,
                lambda_clip=cfg.lambda_clip,
            )
            weight = len(batch) / total  # losses weighted by sub-batch size
            (weight * loss).backward()  # gradients accumulate into one update
            for name, value in (
                ("loss", loss),
                ("final", terms.final),
                ("step_loss", terms.step),
                ("distill", terms.distill),
                *((("clip", terms.clip),) if terms.clip is not None else ()),
            ):
                sums[name] += weight * float(value.detach())
        self.optimizer.step()
        self.step += 1
        sums["tau"] = float(self.model.temperature.detach())
        sums["subbatches"] = len(batches)
        return dict(sums)

    @torch.no_grad()
    def _shared_negatives(self, batches: list[list[Pair]]) -> list[Negatives | None]:
        """Positives of every sub-batch, shared as negatives with the others of the same kind
        (§A.2: negatives are shared across sub-batches). Query-conditioned candidates are never
        shared: they are only meaningful under their own query (§3.4)."""
        embs = []
        for batch in batches:
            if all(is_conditioned(p, self.config.scoring) for p in batch):
                embs.append(None)
                continue
            e = embed_sides(self.model, self.store, [p.positive for p in batch]).final.detach()
            embs.append(
                (
                    batch[0].positive.kind,
                    e,
                    [p.positive.key() for p in batch],
                    [p.group for p in batch],
                    [p.query.key() for p in batch],
                )
            )
        pools: list[Negatives | None] = []
        for s in range(len(batches)):
            if embs[s] is None:
                pools.append(None)
                continue
            kind = embs[s][0]
            others = [
                embs[o] for o in range(len(batches)) if o != s and embs[o] is not None and embs[o][0] == kind
            ]
            if not others:
                pools.append(None)
                continue
            pools.append(
                Negatives(
                    embeddings=torch.cat([o[1] for o in others]),
                    keys=[k for o in others for k in o[2]],
                    groups=[g for o in others for g in o[3]],
                    queries=[q for o in others for q in o[4]],
                )
            )
        return pools

    # -- the loop ---------------------------------------------------------------------------------
    def fit(self, *, resume: bool = True, stop_after: int | None = None) -> dict:
        """Train to the configured length (``stop_after``: return early after that many optimizer
        steps in total, e.g. to simulate an interruption). Returns the last validation metrics."""
        from tqdm import tqdm

        cfg = self.config
        if resume:
            self.load_checkpoint()
        plan = [epoch_batches(self.pairs, cfg, e) for e in range(cfg.epochs)]
        total_steps = sum(len(p) for p in plan)
        if cfg.max_steps:
            total_steps = min(total_steps, cfg.max_steps) if cfg.epochs else cfg.max_steps
        bar = tqdm(
            total=total_steps, initial=self.step, desc="training", unit="step", disable=not self.progress
        )
        started = time.time()
        last_eval: dict = {}
        done = False
        while not done and self.epoch < cfg.epochs:
            batches = (
                plan[self.epoch] if self.epoch < len(plan) else epoch_batches(self.pairs, cfg, self.epoch)
            )
            while self.batch_in_epoch < len(batches):
                if self.step >= total_steps or (stop_after is not None and self.step >= stop_after):
                    done = True
                    break
                stats = self.train_step(batches[self.batch_in_epoch])
                self.batch_in_epoch += 1
                bar.update(1)
                bar.set_postfix(loss=f"{stats['loss']:.3f}", tau=f"{stats['tau']:.3f}")
                if self.step % cfg.log_every == 0 or self.step == 1:
                    self._log(
                        {
                            "step": self.step,
                            "epoch": self.epoch,
                            "time_s": round(time.time() - started, 2),
                            **stats,
                        }
                    )
                if cfg.eval_every and self.step % cfg.eval_every == 0 and self.val_pairs:
                    last_eval = self.validate()
                if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                    self.save_checkpoint()
            if not done:
                self.epoch += 1
                self.batch_in_epoch = 0
        bar.close()
        self.save_checkpoint()
        if self.val_pairs and (stop_after is None or self.step >= total_steps):
            last_eval = self.validate()
        return last_eval

    def validate(self) -> dict:
        from training.evaluate import evaluate_pairs

        metrics = evaluate_pairs(self.model, self.store, self.val_pairs, scoring=self.config.scoring)
        self._log({"step": self.step, "epoch": self.epoch, "val": metrics})
        logger.info("step %d validation: mean Hit@1 %.3f", self.step, metrics["mean_hit@1"])
        return metrics
