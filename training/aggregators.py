"""Aggregators compared with QASLR in Table 5 (§A.6), on the same cached evidence banks.

All share the streaming head's call signature, ``forward(evidence [B, T, M, D], evidence_mask
[B, T, M], step_mask [B, T]) -> HeadOutput`` with a readout after every step, a learnable
temperature, and the same objectives, so the trainer and the evaluator treat them alike:

- ``mean``: mean pooling of all valid evidence tokens seen so far, LN, linear projection to d.
  Ordered: yes; persistent memory: no (a running average, no state update).
- ``gru``: per clip, a learnable query attention-pools the clip's evidence tokens; a GRU carries a
  D-dimensional state across clips; a linear readout after every step (recurrent aggregator).
- ``transformer``: all evidence tokens of all clips plus one readout token per step, with learned
  clip-position embeddings, through a pre-LN Transformer encoder; tokens of clip t and readout t see
  only clips <= t (so step t never sees the future, like QASLR's z_t).

``build_model("qaslr", ...)`` returns the real ``models.head.StreamingHead``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.config import DEFAULT_TEXT_CONDITIONING, Embedder
from models.head import HeadOutput, StreamingHeadConfig, create_head, load_head, save_head

logger = logging.getLogger(__name__)

KINDS = (Embedder.QASLR, "mean", "gru", "transformer")  # the real QASLR head, then the controls
CONFIG_FILENAME = "aggregator.json"
WEIGHTS_FILENAME = "aggregator.safetensors"


def _finish(steps: Tensor, step_mask: Tensor) -> HeadOutput:
    """steps [B, T, d] -> HeadOutput with zeros at invalid steps and the last valid readout as final."""
    steps = torch.where(step_mask[..., None], steps, 0.0)
    t = steps.shape[1]
    positions = torch.arange(t, device=steps.device)
    last = torch.where(step_mask, positions, -1).amax(dim=1).clamp(min=0)
    final = steps[torch.arange(steps.shape[0], device=steps.device), last]
    return HeadOutput(step_embeddings=steps, step_mask=step_mask, final=final)


class _Base(nn.Module):
    kind = "base"

    def __init__(
        self, hidden_size: int, embed_dim: int, *, num_heads: int = 4, init_temperature: float = 0.05
    ):
        super().__init__()
        self.hidden_size, self.embed_dim, self.num_heads = hidden_size, embed_dim, num_heads
        self.log_temperature = nn.Parameter(torch.tensor(math.log(init_temperature)))
        self.proj = nn.Linear(hidden_size, embed_dim, bias=False)

    @property
    def temperature(self) -> Tensor:
        return self.log_temperature.exp()

    def config_dict(self) -> dict:
        return {
            "kind": self.kind,
            "hidden_size": self.hidden_size,
            "embed_dim": self.embed_dim,
            "num_heads": self.num_heads,
        }

    @staticmethod
    def _masks(evidence_mask: Tensor, step_mask: Tensor) -> tuple[Tensor, Tensor]:
        evidence_mask = evidence_mask.bool() & step_mask.bool()[..., None]
        return evidence_mask, step_mask.bool() & evidence_mask.any(-1)


class MeanPoolAggregator(_Base):
    kind = "mean"

    def __init__(self, hidden_size: int, embed_dim: int, **kw):
        super().__init__(hidden_size, embed_dim, **kw)
        self.norm = nn.LayerNorm(hidden_size)

    def forward(self, evidence, evidence_mask, step_mask, *, reset_memory: bool = False) -> HeadOutput:
        evidence_mask, step_mask = self._masks(evidence_mask, step_mask)
        w = evidence_mask.to(evidence.dtype)  # [B, T, M]
        sums = (evidence * w[..., None]).sum(2).cumsum(1)  # [B, T, D] running sums over clips <= t
        counts = w.sum(2).cumsum(1).clamp(min=1)[..., None]  # [B, T, 1]
        steps = F.normalize(self.proj(self.norm(sums / counts)), dim=-1)
        return _finish(steps, step_mask)


class GRUAggregator(_Base):
    kind = "gru"

    def __init__(self, hidden_size: int, embed_dim: int, **kw):
        super().__init__(hidden_size, embed_dim, **kw)
        self.query = nn.Parameter(torch.randn(1, 1, hidden_size) * 0.02)
        self.norm = nn.LayerNorm(hidden_size)
        self.pool = nn.MultiheadAttention(hidden_size, self.num_heads, batch_first=True)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.out_norm = nn.LayerNorm(hidden_size)

    def forward(self, evidence, evidence_mask, step_mask, *, reset_memory: bool = False) -> HeadOutput:
        evidence_mask, step_mask = self._masks(evidence_mask, step_mask)
        b, t, m, d = evidence.shape
        x = self.norm(evidence.reshape(b * t, m, d))
        km = evidence_mask.reshape(b * t, m).clone()
        km[:, 0] |= ~km.any(-1)  # empty clips get one dummy key; their step is masked anyway
        pooled, _ = self.pool(self.query.expand(b * t, -1, -1), x, x, key_padding_mask=~km)
        pooled = pooled.reshape(b, t, d) * step_mask[..., None]
        # Absent steps keep the state: run step by step so padded clips do not update it.
        h = evidence.new_zeros(1, b, d)
        outs = []
        for i in range(t):
            y, h_new = self.gru(pooled[:, i : i + 1], h)
            h = torch.where(step_mask[None, :, i, None], h_new, h)
            outs.append(h[0])
        steps = F.normalize(self.proj(self.out_norm(torch.stack(outs, 1))), dim=-1)
        return _finish(steps, step_mask)


class TransformerAggregator(_Base):
    kind = "transformer"

    def __init__(self, hidden_size: int, embed_dim: int, *, num_layers: int = 2, max_steps: int = 64, **kw):
        super().__init__(hidden_size, embed_dim, **kw)
        self.num_layers, self.max_steps = num_layers, max_steps
        self.norm = nn.LayerNorm(hidden_size)
        self.clip_pos = nn.Parameter(torch.randn(max_steps, hidden_size) * 0.02)
        self.readout_token = nn.Parameter(torch.randn(hidden_size) * 0.02)
        layer = nn.TransformerEncoderLayer(
            hidden_size, self.num_heads, 4 * hidden_size, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.out_norm = nn.LayerNorm(hidden_size)

    def config_dict(self) -> dict:
        return {**super().config_dict(), "num_layers": self.num_layers, "max_steps": self.max_steps}

    def forward(self, evidence, evidence_mask, step_mask, *, reset_memory: bool = False) -> HeadOutput:
        evidence_mask, step_mask = self._masks(evidence_mask, step_mask)
        b, t, m, d = evidence.shape
        if t > self.max_steps:
            raise ValueError(f"at most {self.max_steps} steps, got {t}")
        tokens = self.norm(evidence) + self.clip_pos[:t, None]  # [B, T, M, D]
        readouts = (self.readout_token + self.clip_pos[:t])[None].expand(b, -1, -1)  # [B, T, D]
        x = torch.cat([tokens.reshape(b, t * m, d), readouts], 1)  # [B, T*M + T, D]
        clip_of = torch.cat([torch.arange(t).repeat_interleave(m), torch.arange(t)]).to(evidence.device)
        valid = torch.cat([evidence_mask.reshape(b, t * m), step_mask], 1)  # [B, L]
        allowed = (clip_of[None, :, None] >= clip_of[None, None, :]) & valid[:, None, :]  # [B, Lq, Lk]
        allowed = allowed | torch.eye(x.shape[1], dtype=torch.bool, device=x.device)[None]
        attn = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill(~allowed, float("-inf"))
        attn = attn.repeat_interleave(self.num_heads, dim=0)  # [B * heads, L, L]
        y = self.encoder(x, mask=attn)
        steps = F.normalize(self.proj(self.out_norm(y[:, t * m :])), dim=-1)  # [B, T, d]
        return _finish(steps, step_mask)


_CLASSES = {c.kind: c for c in (MeanPoolAggregator, GRUAggregator, TransformerAggregator)}


def build_model(
    kind: str,
    *,
    hidden_size: int,
    embed_dim: int,
    num_think_tokens: int = 32,
    max_evidence: int = 256,
    num_heads: int | None = None,
    depth: int = 1,
    init_temperature: float = 0.05,
    seed: int = 0,
    query_conditioning: bool = False,
    text_conditioning: str = DEFAULT_TEXT_CONDITIONING,
    evidence_sink: bool = False,
    identity_init: bool = False,
    query_whitening: bool = False,
) -> nn.Module:
    """A freshly initialised aggregator of ``kind`` (qaslr | mean | gru | transformer). For a QASLR
    head, ``query_conditioning`` adds the query as its conditioning input and ``text_conditioning``
    records where the query text sat in the backbone prompt of its training features; ``evidence_sink``
    appends the learnable "nothing here" evidence token and ``identity_init`` starts the evidence path
    from the identity (``StreamingHeadConfig``)."""
    if kind not in KINDS:
        raise ValueError(f"model kind must be one of {KINDS}, got {kind!r}")
    # Default heads: up to 16 with at least 16 dimensions each (16 at D = 2048; 4 at the tiny D = 64).
    heads = num_heads or next(
        h for h in (16, 8, 4, 2, 1) if hidden_size % h == 0 and hidden_size // h >= 16 or h == 1
    )
    if kind == Embedder.QASLR:
        config = StreamingHeadConfig(
            hidden_size=hidden_size,
            embed_dim=embed_dim,
            num_think_tokens=num_think_tokens,
            max_evidence_tokens=max_evidence,
            num_heads=heads,
            depth=depth,
            init_temperature=init_temperature,
            query_conditioning=query_conditioning,
            text_conditioning=str(text_conditioning),
            evidence_sink=evidence_sink,
            identity_init=identity_init,
            query_whitening=query_whitening and query_conditioning,
        )
        return create_head(config, seed=seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _CLASSES[kind](hidden_size, embed_dim, num_heads=heads, init_temperature=init_temperature)


def model_kind(model: nn.Module) -> str:
    return getattr(model, "kind", Embedder.QASLR)


def save_model(model: nn.Module, directory: str | os.PathLike) -> Path:
    """QASLR heads are written with ``models.head.save_head`` (loadable by the indexer and service);
    the control aggregators as ``aggregator.json`` + ``aggregator.safetensors``."""
    if model_kind(model) == Embedder.QASLR:
        return save_head(model, directory)
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(out / WEIGHTS_FILENAME)
    )
    (out / CONFIG_FILENAME).write_text(json.dumps(model.config_dict(), indent=2) + "\n")
    return out


def load_model(directory: str | os.PathLike) -> nn.Module:
    from safetensors.torch import load_file

    d = Path(directory)
    if (d / CONFIG_FILENAME).is_file():
        cfg = json.loads((d / CONFIG_FILENAME).read_text())
        kind = cfg.pop("kind")
        model = _CLASSES[kind](cfg.pop("hidden_size"), cfg.pop("embed_dim"), **cfg)
        model.load_state_dict(load_file(str(d / WEIGHTS_FILENAME)))
        return model
    return load_head(d)
