"""The QASLR streaming latent reasoning head (§3.3, Eq. 6-10).

N learnable think tokens form a persistent latent memory per video (Eq. 6). At every clip step
the memory cross-attends to that clip's evidence bank E_t (Eq. 7), runs a feed-forward update
(Eq. 8), and a learnable embed token attention-pools the memory into the readout z_t (Eq. 9):

    H~_t = LN[H_{t-1} + MHA(LN(H_{t-1}), LN(E_t), LN(E_t))]                     # Eq. 7
    H_t  = LN[H~_t + FFN(H~_t)]                                                  # Eq. 8
    r_t  = MHA(e, H_t, H_t),   z_t = W r_t / ||W r_t||_2                         # Eq. 9
    Z    = (z_1, ..., z_T), final embedding z_T                                  # Eq. 10

Batch rows are independent videos: they never attend to each other, padded evidence tokens are
excluded through the attention mask, and absent steps leave a row's state untouched.

Trainable parameters at the real 2B dimensions (D = d = 2048, N = 32, M = 256, 16 heads,
ffn_mult = 4), measured by instantiating the head (see ``num_trainable_parameters``):

    depth 1:  71,413,761   (one update block is 50,366,464; readout MHA + W + tokens ~21.0M)
    depth 3: 172,146,689
    depth 4: 222,513,153   (smallest depth at or above the paper's ~200M, §A.2)

At the 8B dimensions (D = d = 4096, otherwise the same): depth 1 285,433,857; depth 2 486,830,081;
depth 3 688,226,305 (paper: ~600M). Counts include the learnable temperature (1 parameter).

The paper reports "approximately 200 million" trainable parameters for the 2B configuration
without giving the head's exact layout; Eq. 7-8 describe a single block (depth 1), which is the
default here. Per-step cost matches §A.12 Eq. 16: O(NMD + (N + M) D^2 + Dd).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.config import DEFAULT_MAX_EVIDENCE
from core.files import atomic_path
from models.selection import ClipPlan
from models.windows import WindowPlan

logger = logging.getLogger(__name__)

__all__ = [
    "CONFIG_FILENAME",
    "WEIGHTS_FILENAME",
    "HeadOutput",
    "StreamingHead",
    "StreamingHeadConfig",
    "create_head",
    "head_fingerprint",
    "load_head",
    "num_trainable_parameters",
    "save_head",
]

CONFIG_FILENAME = "head_config.json"
POSITION_DIMS = 4  # models.backbone.ClipStates.positions: video token, temporal pair, row, column
WORD_PERIODS = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)  # tokens: a query word's place, as sinusoids
WEIGHTS_FILENAME = "head.safetensors"


@dataclass
class StreamingHeadConfig:
    hidden_size: int  # D, the backbone hidden size
    embed_dim: int  # d, the shared embedding space
    num_think_tokens: int = 32  # N (§3.2)
    max_evidence_tokens: int = DEFAULT_MAX_EVIDENCE  # M (§3.2), the compression budget per clip
    num_heads: int = 16
    ffn_mult: int = 4
    depth: int = 1  # update blocks applied per clip step; Eq. 7-8 is depth 1
    dropout: float = 0.0
    init_temperature: float = 0.05  # tau of Eq. 1 / Eq. 11
    learnable_temperature: bool = True
    # Eq. 4 allows a conditioning input c. With query_conditioning the query embedding q (dim d) is
    # projected and added to every think token of H_0, so the memory reads each clip's evidence in
    # the query's light from the first step on (the query-conditioned, two-stage setting, §3.1).
    query_conditioning: bool = False
    # Where the query text went in the backbone prompt when this head was trained on query-conditioned
    # evidence (core.config.TextConditioning: none, after, before); the encoder uses the same.
    text_conditioning: str = "after"
    # One learnable "nothing here" evidence token appended to every clip's bank (our addition to
    # Eq. 7, off in the paper's form). Softmax attention must spend all of its weight on the clip's
    # evidence, so every clip moves the memory about as much; with the sink, a think token can
    # attend to it instead, and a clip that does not match the query leaves the memory nearly
    # untouched. That makes "keep the clip where the event was" learnable, which the query-
    # conditioned rerank head needs (training/README.md, two-stage recipe).
    evidence_sink: bool = False
    # Initialise the path that carries evidence to the readout as the identity (the attention
    # projections, the conditioning projection P_c and W; needs D >= d) instead of N(0, 0.02): the
    # untrained head then reads out roughly the query-weighted sum of the clips' states, so training
    # starts from an embedding in the backbone's own space rather than from noise. An
    # initialisation choice (the paper does not give one); the equations are unchanged.
    identity_init: bool = False
    # Whiten the conditioning input before P_c: q~ = W (q - mu) / sqrt(d), with mu and W (ZCA, ridge)
    # from the training queries' embeddings (``set_query_statistics``, stored with the weights). Queries
    # that ask for different orders or counts of the same events lie close together (cosine 0.94 for
    # a mirror order, 0.99 for once / twice with the tiny-world backbone); whitened, those directions
    # weigh as much as the ones that tell events apart, so H_0 can differ by what the query asks (ours,
    # with query_conditioning only; training/README.md, "Order and count").
    query_whitening: bool = False
    # The clip plan the head was trained with (models.selection.ClipPlan: K', K_max, L, M), recorded
    # by training (training.trainer) and checked by serving (engine.loader); None for heads saved
    # before plans were recorded, or never trained (they load, with a warning where served).
    clip_plan: ClipPlan | None = None
    # The head reads the query's text (ours; Eq. 4's conditioning input c, given to the memory): before
    # the first clip the memory takes one update step (Eq. 7-8, a block of its own) over the query's
    # token states, the backbone's hidden states of the query prompt, masked. A pooled q hardly tells
    # "A then B" from "B then A" (cosine 0.94 with the tiny-world backbone) or "twice" from "three
    # times"; its tokens, in order, do. Needs the query's states at every call (``query_states``).
    text_memory: bool = False
    # The query's words too (ours, with ``text_memory``): each prompt token's final state has its input
    # embedding (the word itself, projected) and its place in the prompt (sinusoids of its index,
    # projected) added before the memory reads it. The tiny-world backbone's final states all but drop
    # the connective: "A appears before B appears" and "A appears after B appears" lie at cosine 0.98
    # at the very token "before" / "after" and at no less than 0.93 anywhere (the two words' input
    # embeddings: 0.03), so a head that reads only them cannot tell one order from the other
    # (training/tiny_world/README.md, "the head that reads the query's words"). Needs
    # ``query_words`` at every call.
    query_words: bool = False
    # A gated memory update (ours, after GRU-style recurrent memories): H_t = g * H~ + (1 - g) * H_{t-1}
    # with g = sigmoid(W_g [H_{t-1}; H~] + b_g) per think token and channel, H~ the block's output
    # (Eq. 7-8). A clip that says nothing about the query can leave the memory as it was, which a
    # count or an order across several clips needs.
    update_gate: bool = False
    # The moment windows the head was trained on (models.windows.WindowPlan: W clips of at most L bank
    # frames around the relevance peaks), recorded by training and used by serving; None: Eq. 3's plan.
    window_plan: WindowPlan | None = None
    # Evidence tokens carry where they are (ours): each token's position in its clip (a video token
    # or not, its temporal pair, row and column: models.backbone.ClipStates.positions), projected and
    # added to the token before the memory reads it. Attention reads a set; without positions the
    # memory cannot tell where in the frame, or when within the clip, what it reads was.
    evidence_positions: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.clip_plan, dict):
            self.clip_plan = ClipPlan.from_dict(self.clip_plan)
        if isinstance(self.window_plan, dict):
            self.window_plan = WindowPlan.from_dict(self.window_plan)
        for name in ("hidden_size", "embed_dim", "num_think_tokens", "max_evidence_tokens", "num_heads"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.ffn_mult < 1 or self.depth < 1:
            raise ValueError(f"ffn_mult and depth must be >= 1, got {self.ffn_mult} and {self.depth}")
        if self.hidden_size % self.num_heads != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not self.init_temperature > 0:
            raise ValueError(f"init_temperature must be positive, got {self.init_temperature}")
        if self.identity_init and self.hidden_size < self.embed_dim:
            raise ValueError("identity_init needs hidden_size >= embed_dim")
        if self.query_words and not self.text_memory:
            raise ValueError(
                "query_words needs text_memory (the words are read with the query's token states)"
            )

    def to_dict(self) -> dict:
        """The fields as JSON-ready values; a head without a clip plan writes none (as before)."""
        data = dataclasses.asdict(self)
        for name in (
            "clip_plan",
            "window_plan",
            "text_memory",
            "update_gate",
            "evidence_positions",
            "query_words",
        ):
            if not data[name]:  # heads without them write none (as before)
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> StreamingHeadConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown StreamingHeadConfig fields: {unknown}")
        return cls(**data)

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """Serialise to a JSON string; also write it to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> StreamingHeadConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


@dataclass
class HeadOutput:
    step_embeddings: Tensor  # [B, T, d], z_t after every step (Eq. 10); zeros at invalid steps
    step_mask: Tensor  # [B, T] bool, steps that updated the state
    final: Tensor  # [B, d], readout at each row's last valid step (z_T)


class CrossAttention(nn.Module):
    """Multi-head attention of queries [B, Nq, D] over keys/values [B, Nk, D] with a key mask."""

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        self.num_heads = num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None = None) -> Tensor:
        b, nq, dim = q.shape
        nk = k.shape[1]
        h = self.num_heads
        q = self.q_proj(q).view(b, nq, h, dim // h).transpose(1, 2)  # [B, h, Nq, D/h]
        k = self.k_proj(k).view(b, nk, h, dim // h).transpose(1, 2)  # [B, h, Nk, D/h]
        v = self.v_proj(v).view(b, nk, h, dim // h).transpose(1, 2)  # [B, h, Nk, D/h]
        attn_mask = None if key_mask is None else key_mask[:, None, None, :]  # [B, 1, 1, Nk], True = attend
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout if self.training else 0.0
        )  # [B, h, Nq, D/h]
        return self.out_proj(y.transpose(1, 2).reshape(b, nq, dim))


class UpdateBlock(nn.Module):
    """One memory update: Eq. 7 (pre-LN cross-attention + residual + LN), Eq. 8 (FFN + residual + LN)."""

    def __init__(self, config: StreamingHeadConfig):
        super().__init__()
        dim = config.hidden_size
        self.ln_memory = nn.LayerNorm(dim)  # LN(H_{t-1})
        self.ln_evidence = nn.LayerNorm(dim)  # LN(E_t), shared by keys and values
        self.attn = CrossAttention(dim, config.num_heads, config.dropout)
        self.ln_attn = nn.LayerNorm(dim)  # outer LN of Eq. 7
        self.ffn = nn.Sequential(
            nn.Linear(dim, config.ffn_mult * dim),
            nn.GELU(),
            nn.Linear(config.ffn_mult * dim, dim),
        )
        self.ln_ffn = nn.LayerNorm(dim)  # outer LN of Eq. 8
        self.drop = nn.Dropout(config.dropout)

    def forward(self, memory: Tensor, evidence: Tensor, evidence_mask: Tensor) -> Tensor:
        # memory [B, N, D], evidence [B, M, D], evidence_mask [B, M]
        e = self.ln_evidence(evidence)
        h = self.ln_attn(memory + self.drop(self.attn(self.ln_memory(memory), e, e, evidence_mask)))  # Eq. 7
        return self.ln_ffn(h + self.drop(self.ffn(h)))  # Eq. 8


class StreamingHead(nn.Module):
    def __init__(self, config: StreamingHeadConfig):
        super().__init__()
        self.config = config
        dim = config.hidden_size
        self.think_tokens = nn.Parameter(torch.empty(config.num_think_tokens, dim))  # H_0, Eq. 6
        self.blocks = nn.ModuleList(UpdateBlock(config) for _ in range(config.depth))
        self.query_block = UpdateBlock(config) if config.text_memory else None  # reads the query's text
        self.word_proj = nn.Linear(dim, dim) if config.query_words else None  # a token's input embedding
        self.word_position_proj = nn.Linear(2 * len(WORD_PERIODS), dim) if config.query_words else None
        self.gate = nn.Linear(2 * dim, dim) if config.update_gate else None  # W_g, b_g
        self.position_proj = nn.Linear(POSITION_DIMS, dim) if config.evidence_positions else None
        self.embed_token = nn.Parameter(torch.empty(1, dim))  # e, Eq. 9
        self.sink_token = nn.Parameter(torch.empty(1, dim)) if config.evidence_sink else None
        # P_c: conditioning input c = q [d] -> a shift of H_0 [D] (only with query_conditioning)
        self.query_proj = nn.Linear(config.embed_dim, dim) if config.query_conditioning else None
        if config.query_conditioning and config.query_whitening:  # identity until set_query_statistics
            self.register_buffer("query_mean", torch.zeros(config.embed_dim))
            self.register_buffer("query_whiten", torch.eye(config.embed_dim))
        self.readout_attn = CrossAttention(dim, config.num_heads, config.dropout)
        self.proj = nn.Linear(dim, config.embed_dim, bias=False)  # W, Eq. 9
        self.log_temperature = nn.Parameter(
            torch.tensor(math.log(config.init_temperature)), requires_grad=config.learnable_temperature
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        nn.init.normal_(self.think_tokens, std=0.02)
        nn.init.normal_(self.embed_token, std=0.02)
        if self.gate is not None:  # an update passes about halfway at first
            nn.init.zeros_(self.gate.bias)
        if self.sink_token is not None:
            nn.init.normal_(self.sink_token, std=0.02)
        if self.config.identity_init:
            with torch.no_grad():
                attns = [block.attn for block in self.blocks] + [self.readout_attn]
                for linear in (lin for a in attns for lin in (a.q_proj, a.k_proj, a.v_proj, a.out_proj)):
                    linear.weight.copy_(torch.eye(linear.weight.shape[0]))
                d = self.config.embed_dim
                self.proj.weight.zero_()
                self.proj.weight[:, :d] = torch.eye(d)  # W = [I_d, 0]: z = the first d dims of r
                if self.query_proj is not None:
                    self.query_proj.weight.zero_()
                    self.query_proj.weight[:d] = torch.eye(d)  # P_c = [I_d; 0]
        with torch.no_grad():
            self.log_temperature.fill_(math.log(self.config.init_temperature))

    @property
    def temperature(self) -> Tensor:
        """Contrastive temperature tau (Eq. 1, Eq. 11), stored in log space."""
        return self.log_temperature.exp()

    # ---- incremental API -------------------------------------------------------------------------

    def init_state(
        self,
        batch_size: int,
        query: Tensor | None = None,
        query_states: Tensor | None = None,
        query_mask: Tensor | None = None,
        query_words: Tensor | None = None,
    ) -> Tensor:
        """H_0 for ``batch_size`` videos: [B, N, D] (Eq. 6); with query conditioning and ``query``
        [B, d] given, H_0 + P_c q (the same shift on every think token); with ``text_memory``, then
        one update over the query's token states ``query_states`` [B, S, D] (mask [B, S]), each with
        its word and place added where the head reads them (``query_words`` [B, S, D])."""
        h0 = self.think_tokens.unsqueeze(0).expand(batch_size, -1, -1)
        if query is not None and self.query_proj is not None:
            shift = self.query_proj(self.condition(query.to(h0.dtype)))  # [B, D]
            h0 = h0 + shift[:, None, :]
        if self.query_block is not None:
            if query_states is None:
                raise ValueError("this head reads the query's text: pass its token states (query_states)")
            states = query_states.to(h0.dtype)
            mask = (
                torch.ones(states.shape[:2], dtype=torch.bool, device=states.device)
                if query_mask is None
                else query_mask
            )
            if self.word_proj is not None:
                states = states + self.read_words(query_words, states)
            h0 = self.query_block(h0, states, mask.to(device=states.device, dtype=torch.bool))
        return h0

    def read_words(self, words: Tensor | None, states: Tensor) -> Tensor:
        """What ``query_words`` adds to the query's token states [B, S, D]: W_w w_s + W_p pos(s), each
        token's input embedding and the sinusoids of its index s in the prompt, projected."""
        if words is None:
            raise ValueError("this head reads the query's words: pass their input embeddings (query_words)")
        if words.shape[:2] != states.shape[:2]:
            raise ValueError(
                f"query_words {tuple(words.shape)} do not match the query's states {tuple(states.shape)}"
            )
        index = torch.arange(states.shape[1], device=states.device, dtype=states.dtype)[:, None]
        angles = 2 * math.pi * index / torch.tensor(WORD_PERIODS, device=states.device, dtype=states.dtype)
        places = torch.cat([angles.sin(), angles.cos()], dim=-1)  # [S, 2 x periods]
        return self.word_proj(words.to(states.dtype)) + self.word_position_proj(places)[None]

    def condition(self, query: Tensor) -> Tensor:
        """The conditioning input P_c acts on: q, or q whitened (``query_whitening``) [B, d]."""
        if not hasattr(self, "query_whiten"):
            return query
        return (query - self.query_mean.to(query.dtype)) @ self.query_whiten.to(query.dtype)

    @torch.no_grad()
    def set_query_statistics(self, queries: Tensor, *, ridge: float = 0.01) -> None:
        """Fit the whitening of ``query_whitening`` to training query embeddings [n, d]: mu their mean,
        W = V diag((lambda + eps)^-1/2) V^T / sqrt(d) from their covariance (eps = ``ridge`` x the mean
        eigenvalue, so a direction no query varies in is not blown up), scaled so that a whitened
        query has about the norm of q (1)."""
        if not hasattr(self, "query_whiten"):
            raise ValueError("this head was not configured with query_whitening")
        x = queries.double()
        mu = x.mean(0)
        cov = (x - mu).T @ (x - mu) / max(1, len(x) - 1)
        evals, evecs = torch.linalg.eigh(cov)
        evals = evals.clamp(min=0)
        eps = ridge * float(evals.mean()) + 1e-12
        w = evecs @ torch.diag((evals + eps).rsqrt()) @ evecs.T / math.sqrt(x.shape[1])
        self.query_mean.copy_(mu.to(self.query_mean.dtype))
        self.query_whiten.copy_(w.to(self.query_whiten.dtype))

    def update(
        self,
        state: Tensor,
        evidence: Tensor,
        evidence_mask: Tensor,
        *,
        active: Tensor | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """One streaming step H_{t-1} -> H_t (Eq. 7-8).

        state [B, N, D], evidence [B, M, D], evidence_mask [B, M] (True = real token),
        active [B] (False = keep the previous state), positions [B, M, 4] (``evidence_positions``).
        Rows whose evidence is fully masked are treated as inactive.
        """
        if evidence.shape[1] == 0:  # no evidence tokens at all: nothing can change
            return state
        if self.position_proj is not None:
            if positions is None:
                raise ValueError("this head reads where its evidence is: pass the tokens' positions")
            evidence = evidence + self.position_proj(positions.to(evidence.dtype))
        evidence_mask = evidence_mask.to(device=evidence.device, dtype=torch.bool)
        has_evidence = evidence_mask.any(dim=-1)  # [B]
        active = has_evidence if active is None else active.to(has_evidence.device).bool() & has_evidence
        # Give empty rows one dummy key so attention stays finite; their result is discarded below.
        safe_mask = evidence_mask.clone()
        safe_mask[:, 0] |= ~has_evidence
        if self.sink_token is not None:  # [B, M + 1, D]: the clip's evidence, then the sink
            sink = self.sink_token.to(evidence.dtype).expand(evidence.shape[0], 1, -1)
            evidence = torch.cat([evidence, sink], dim=1)
            safe_mask = torch.cat([safe_mask, safe_mask.new_ones(safe_mask.shape[0], 1)], dim=1)
        new = state
        for block in self.blocks:
            new = block(new, evidence, safe_mask)
        if self.gate is not None:  # gated memory: how much of the update each token and channel takes
            g = torch.sigmoid(self.gate(torch.cat([state, new], dim=-1)))
            new = g * new + (1 - g) * state
        return torch.where(active[:, None, None], new, state)

    def readout(self, state: Tensor) -> Tensor:
        """z = W r / ||W r|| with r = MHA(e, H, H) (Eq. 9): [B, N, D] -> [B, d]."""
        e = self.embed_token.unsqueeze(0).expand(state.shape[0], -1, -1)  # [B, 1, D]
        r = self.readout_attn(e, state, state).squeeze(1)  # [B, D]
        return F.normalize(self.proj(r), dim=-1)  # [B, d]

    # ---- full sequence ---------------------------------------------------------------------------

    def forward(
        self,
        evidence: Tensor,
        evidence_mask: Tensor,
        step_mask: Tensor,
        *,
        reset_memory: bool = False,
        query: Tensor | None = None,
        query_states: Tensor | None = None,
        query_mask: Tensor | None = None,
        evidence_positions: Tensor | None = None,
        query_words: Tensor | None = None,
    ) -> HeadOutput:
        """Stream T clip evidence banks through the memory and read out after each step.

        evidence [B, T, M, D], evidence_mask [B, T, M], step_mask [B, T]; ``query`` [B, d] is the
        conditioning input of a query-conditioned head (ignored otherwise), ``query_states`` [B, S, D]
        and ``query_mask`` [B, S] the query's token states for a head that reads the query's text,
        ``query_words`` [B, S, D] their input embeddings for one that reads its words.
        With ``reset_memory`` the state is re-initialised to H_0 before every step (the no-memory
        control of Table 5).
        """
        b, t, _, _ = evidence.shape
        evidence_mask = evidence_mask.to(device=evidence.device, dtype=torch.bool)
        step_mask = step_mask.to(device=evidence.device, dtype=torch.bool) & evidence_mask.any(
            dim=-1
        )  # [B, T]
        h0 = self.init_state(b, query, query_states, query_mask, query_words)
        state = h0
        steps = []
        for i in range(t):
            active = step_mask[:, i]  # [B]
            if reset_memory:
                state = torch.where(active[:, None, None], h0, state)
            where = None if evidence_positions is None else evidence_positions[:, i]
            state = self.update(state, evidence[:, i], evidence_mask[:, i], active=active, positions=where)
            steps.append(self.readout(state))  # z_t, [B, d]
        d = self.config.embed_dim
        step_embeddings = torch.stack(steps, dim=1) if steps else evidence.new_zeros(b, 0, d)  # [B, T, d]
        step_embeddings = torch.where(step_mask[..., None], step_embeddings, 0.0)  # zeros at invalid steps
        # z_T: the readout at each row's last valid step; rows without any valid step read out H_0.
        positions = torch.arange(t, device=evidence.device)
        last = torch.where(step_mask, positions, -1).amax(dim=1) if t > 0 else positions.new_full((b,), -1)
        has_step = last >= 0  # [B]
        rows = torch.arange(b, device=evidence.device)
        final = step_embeddings[rows, last.clamp(min=0)] if t > 0 else evidence.new_zeros(b, d)  # [B, d]
        if not bool(has_step.all()):
            final = torch.where(has_step[:, None], final, self.readout(h0))
        return HeadOutput(step_embeddings=step_embeddings, step_mask=step_mask, final=final)


# ---- utilities -----------------------------------------------------------------------------------


def num_trainable_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def create_head(config: StreamingHeadConfig, *, seed: int | None = None) -> StreamingHead:
    """A freshly initialised head; the same seed gives identical weights (global RNG untouched)."""
    if seed is None:
        return StreamingHead(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return StreamingHead(config)


def save_head(head: StreamingHead, directory: str | os.PathLike) -> Path:
    """Write ``head_config.json`` and ``head.safetensors`` into ``directory`` (atomic per file)."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in head.state_dict().items()}
    for name, write in (
        (WEIGHTS_FILENAME, lambda p: save_file(tensors, str(p), metadata={"format": "pt"})),
        (CONFIG_FILENAME, lambda p: head.config.to_json(p)),
    ):
        with atomic_path(out / name) as tmp:
            write(tmp)
    logger.info("saved streaming head (%d trainable parameters) to %s", num_trainable_parameters(head), out)
    return out


def _require_head_files(directory: str | os.PathLike) -> tuple[Path, Path]:
    d = Path(directory)
    config_path, weights_path = d / CONFIG_FILENAME, d / WEIGHTS_FILENAME
    missing = [p.name for p in (config_path, weights_path) if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"streaming head directory {str(d)!r} is missing {missing}; "
            f"expected {CONFIG_FILENAME} and {WEIGHTS_FILENAME} (written by save_head)"
        )
    return config_path, weights_path


def load_head(
    directory: str | os.PathLike,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> StreamingHead:
    """Load a head written by ``save_head``, in eval mode (dropout off, as serving and evaluation read it;
    call ``.train()`` to train it further); keeps the stored dtype unless ``dtype`` is given."""
    from safetensors.torch import load_file

    config_path, weights_path = _require_head_files(directory)
    config = StreamingHeadConfig.from_json(config_path)
    state = load_file(str(weights_path), device="cpu")
    with torch.device("meta"):
        head = StreamingHead(config)
    head.load_state_dict(state, strict=True, assign=True)
    head.log_temperature.requires_grad_(config.learnable_temperature)
    if device is not None or dtype is not None:
        head = head.to(device=device, dtype=dtype)
    return head.eval()


def head_fingerprint(directory: str | os.PathLike) -> str:
    """sha256 over ``head_config.json`` then ``head.safetensors``; first 16 hex characters."""
    digest = hashlib.sha256()
    for path in _require_head_files(directory):
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]
