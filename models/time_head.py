"""The time head: a streaming memory that reads a video in order against a query's events.

A best-frame score (the frame tier) or a pooled one (one-shot encoding) cannot tell "A, then B" from
its mirror "B, then A", nor one showing of A from two: each frame is judged alone, or every frame
is mixed into one vector. A memory that reads the frames in chronological order can. This head is
such a memory, kept small and trained on what the backbone already sees well (single events):

    query   -> events e_1..e_S and a condition c (models.time_query: "order", "count:1", "count:2")
    p_k     =  backbone text embedding of event phrase e_k                       (one call per event)
    x_t[k]  =  p_k · f_t  -  median_t' p_k · f_t'                                 f_t: the video's frame
                                                                                  bank, in time order
    H_0     =  tanh(C[c])                                     the memory starts from the condition
                                                              (the conditioning input c of Eq. 4)
    H_t     =  GRU(H_{t-1}, W_in (s · x_t))                   one memory update per bank frame, the
                                                              role of Eq. 6-8's U_phi(H_{t-1}, E_t)
                                                              (``peak_inputs``: W_in [s · x_t ;
                                                              x_t / max(max_t' x_t', 0.05)], the
                                                              showing's shape whatever its height;
                                                              ``evidence_inputs``: and the hand
                                                              rule's streaming evidence, evidence())
    y_t     =  w · H_t + b                                    a readout after every step (Eq. 9-10);
                                                              the candidate's score is y_T

and, where the head was calibrated (``calibration``: (a_c, b_c) per condition c, fitted by
training.time_head.calibrate on rendered pairs the head never trained on; Platt scaling),

    P(the video shows the order or number asked | it shows the events)  =  sigmoid(a_c · y_T + b_c)

which the search answer folds into a result's relevance (engine.search.evidence): y_T ranks the
candidates of one query, this says whether the one read holds what is asked. Each condition has
its own pair because training fixes no score's level, only its order among one query's candidates:
on the shipped head's held-out render an order's right videos read about 10 and a twice's about -3.

The per-video median makes x_t the frame's relevance above the video's own background, so a
haystack that matches an event phrase a little everywhere does not look like a showing. Like the
median, the peak of ``peak_inputs`` is the whole bank's: the bank is stored before any query comes,
and the head reads it whole, not as a live stream. The score lives in one space for one query: every
candidate of a ranking is read by the same head under the same condition. Frames come from the index's frame bank (about one a second, stored at build time),
so the head calls no backbone on the video side; the query side costs one text embedding per event.

This is our head, not the paper's Eq. 6-10 head over re-encoded clips (models.head): its memory
holds a few numbers per event instead of think tokens over evidence tokens, which is what lets a
few hundred rendered pairs teach it order and count (training/time_head.py; training/README.md
"The time head" has the measurements and the command that reproduces the shipped weights).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from core.files import atomic_path

__all__ = [
    "TIME_CONFIG_FILENAME",
    "TIME_WEIGHTS_FILENAME",
    "TimeHead",
    "TimeHeadConfig",
    "calibrated",
    "centred",
    "event_relevance",
    "evidence",
    "load_time_head",
    "save_time_head",
    "time_head_fingerprint",
]

TIME_CONFIG_FILENAME = "time_head.json"
TIME_WEIGHTS_FILENAME = "time_head.safetensors"
PEAK_FLOOR = 0.05  # a peak below this (a video without the event: noise) is read as this


@dataclass
class TimeHeadConfig:
    hidden: int = 32  # the memory's size
    max_events: int = 2  # S: event slots per query (order of two, or one counted event)
    conditions: tuple[str, ...] = ("order", "count:1", "count:2")  # what it was trained to answer
    input_scale: float = 10.0  # s: bank cosines above the median are a few tenths
    # also read each event's relevance over its peak in the video (x_t[k] / max_t' x_t'[k]): a showing's
    # shape whatever its height (white shapes on grey peak lower than coloured ones); off in heads
    # trained before it
    peak_inputs: bool = False
    # also read the hand rule's evidence as it streams (:func:`evidence`): per event whether x_t is in a
    # showing (at least half the video's peak) and how many showings have begun so far (a count's runs),
    # and the best showing of the first event before t together with the second at t (an order's pairs
    # i < j); off in the shipped head (training/tiny_world/README.md measured it: no better)
    evidence_inputs: bool = False
    # recorded by training: the backbone the event embeddings and frame banks came from
    backbone: str | None = None
    trained: dict = field(default_factory=dict)  # data, steps, seed, validation numbers
    # condition -> (a, b): P(what is asked holds | the events show) = sigmoid(a · y_T + b); None or a
    # condition left out: not calibrated
    calibration: dict[str, tuple[float, float]] | None = None

    def __post_init__(self) -> None:
        self.conditions = tuple(self.conditions)
        if self.hidden < 1 or self.max_events < 1 or not self.conditions:
            raise ValueError("a time head needs hidden >= 1, max_events >= 1 and one condition at least")
        if self.calibration is not None:
            fitted = {}
            for condition, pair in dict(self.calibration).items():
                a, b = (float(v) for v in pair)
                if condition not in self.conditions or not (np.isfinite(a) and np.isfinite(b) and a > 0):
                    raise ValueError(
                        f"a time head's calibration maps each of its conditions to (a > 0, b), got {condition!r}: {pair!r}"
                    )
                fitted[condition] = (a, b)
            self.calibration = fitted

    def supports(self, condition: str, events: int) -> bool:
        return condition in self.conditions and 1 <= events <= self.max_events


def event_relevance(bank: np.ndarray, events: np.ndarray) -> np.ndarray:
    """x_t[k] = p_k · f_t - median_t p_k · f_t: [T, S] for a bank [T, d] and event embeddings [S, d]."""
    return centred(np.asarray(bank, dtype=np.float32) @ np.asarray(events, dtype=np.float32).T)


def centred(scores: np.ndarray) -> np.ndarray:
    """[T, S] cosines p_k · f_t minus each event's median over the video: the head's input x_t."""
    r = np.asarray(scores, dtype=np.float32)
    return r if len(r) == 0 else r - np.median(r, axis=0, keepdims=True)


def input_width(config: TimeHeadConfig) -> int:
    """How many numbers the memory reads per frame: s · x_t, then x_t over its peak, then :func:`evidence`."""
    s = config.max_events
    return s * (2 if config.peak_inputs else 1) + (2 * s + 1 if config.evidence_inputs else 0)


def evidence(x: Tensor, lengths: Tensor, scale: float) -> Tensor:
    """The hand rule's evidence (training.time_head.rule_score) as it streams, from ``x`` [B, T, S]:

        in_t[k]    =  1[x_t[k] >= max(max_t' x_t'[k], 0) / 2]      frame t is in a showing of event k
        runs_t[k]  =  (showings of event k begun at or before t) / 3
        pair_t     =  s · min(max_{i<t} x_i[1], x_t[2])            the best showing of event 1 before t
                                                                    with event 2 at t (0 at t = 1)

    [B, T, 2S + 1]; rows past a row's length are 0. The rule answers a count by runs_T and an order by
    max_t pair_t; the memory reads them beside x_t and learns where they mislead (a faint event's
    showings near the haystack's bumps)."""
    b, t, s = x.shape
    valid = (torch.arange(t)[None, :] < lengths[:, None]).to(x.dtype)[..., None]  # [B, T, 1]
    peak = x.amax(dim=1, keepdim=True).clamp(min=1e-6)
    inside = (x >= 0.5 * peak).to(x.dtype) * valid
    begun = inside - torch.cat([torch.zeros_like(inside[:, :1]), inside[:, :-1]], dim=1)
    runs = begun.clamp(min=0).cumsum(dim=1) / 3.0 * valid
    if s >= 2 and t >= 2:
        before = torch.cummax(x[:, :, 0], dim=1).values[:, :-1]
        pair = torch.cat([torch.zeros_like(x[:, :1, 0]), torch.minimum(before, x[:, 1:, 1])], dim=1)
    else:
        pair = torch.zeros_like(x[:, :, 0])
    return torch.cat([inside, runs, scale * pair[..., None] * valid], dim=-1)


class TimeHead(nn.Module):
    """The memory (module docstring). :meth:`forward` reads a batch of candidates of any lengths."""

    def __init__(self, config: TimeHeadConfig):
        super().__init__()
        self.config = config
        h = config.hidden
        self.condition = nn.Embedding(len(config.conditions), h)
        self.inp = nn.Linear(input_width(config), h)
        self.memory = nn.GRU(h, h, batch_first=True)
        self.readout = nn.Linear(h, 1)

    def condition_index(self, condition: str) -> int:
        try:
            return self.config.conditions.index(condition)
        except ValueError:
            raise ValueError(
                f"this time head answers {', '.join(self.config.conditions)}, not {condition!r}"
            ) from None

    def forward(self, x: Tensor, lengths: Tensor, condition: Tensor) -> tuple[Tensor, Tensor]:
        """``x`` [B, T, S] event relevance (zero-padded past each row's length, and past its events),
        ``lengths`` [B], ``condition`` [B] indices. Returns the readouts after every step [B, T]
        (steps past a row's length are meaningless) and each row's final score y_T [B]."""
        h0 = torch.tanh(self.condition(condition)).unsqueeze(0)  # [1, B, H]
        inputs = x * self.config.input_scale
        if self.config.peak_inputs:  # each event's relevance over its own peak (padding stays 0)
            peak = x.amax(dim=1, keepdim=True).clamp(min=PEAK_FLOOR)
            inputs = torch.cat([inputs, x / peak], dim=-1)
        if self.config.evidence_inputs:
            inputs = torch.cat([inputs, evidence(x, lengths, self.config.input_scale)], dim=-1)
        states, _ = self.memory(self.inp(inputs), h0)
        steps = self.readout(states).squeeze(-1)  # [B, T]
        last = (lengths.clamp(min=1) - 1).long()
        final = steps.gather(1, last[:, None]).squeeze(1)
        return steps, final

    @torch.no_grad()
    def score(self, relevance: list[np.ndarray], condition: str) -> list[tuple[float, np.ndarray]]:
        """(y_T, y_1..y_T) of each candidate, from its :func:`event_relevance` [T_i, S'] (S' <= S)."""
        if not relevance:
            return []
        x, lengths = pad(relevance, self.config.max_events)
        cond = torch.full((len(relevance),), self.condition_index(condition), dtype=torch.long)
        steps, final = self(x, lengths, cond)
        out = []
        for i, n in enumerate(lengths.tolist()):
            if n == 0:  # an empty bank: nothing seen, the lowest score
                out.append((float("-inf"), np.zeros(0, np.float32)))
            else:
                out.append((float(final[i]), steps[i, :n].numpy().copy()))
        return out

    def confidence(self, score: float, condition: str) -> float | None:
        """sigmoid(a_c · y_T + b_c): how likely a candidate with final readout ``score`` under
        ``condition`` shows the order or number asked, given that it shows the events (module
        docstring); None where the head has no calibration for ``condition``."""
        fitted = (self.config.calibration or {}).get(condition)
        if fitted is None:
            return None
        return calibrated(score, fitted)


def calibrated(score: float, fit: tuple[float, float]) -> float:
    """sigmoid(a · score + b) for ``fit`` = (a, b); 0 for an empty bank's score (-inf: nothing seen)."""
    if not np.isfinite(score):
        return 0.0
    a, b = fit
    return float(1.0 / (1.0 + np.exp(-np.clip(a * score + b, -60.0, 60.0))))


def pad(relevance: list[np.ndarray], max_events: int) -> tuple[Tensor, Tensor]:
    """Stack [T_i, S_i] arrays into a zero-padded [B, max T, max_events] tensor and their lengths."""
    lengths = torch.tensor([len(r) for r in relevance], dtype=torch.long)
    x = torch.zeros(len(relevance), max(1, int(lengths.max())), max_events)
    for i, r in enumerate(relevance):
        if len(r):
            r = np.asarray(r, dtype=np.float32)
            if r.ndim != 2 or r.shape[1] > max_events:
                raise ValueError(f"event relevance must be [T, <= {max_events}], got {r.shape}")
            x[i, : len(r), : r.shape[1]] = torch.from_numpy(r)
    return x, lengths


def save_time_head(head: TimeHead, directory: str | Path) -> Path:
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}
    with atomic_path(directory / TIME_WEIGHTS_FILENAME) as tmp:
        save_file(state, str(tmp))
    with atomic_path(directory / TIME_CONFIG_FILENAME) as tmp:
        Path(tmp).write_text(json.dumps(asdict(head.config), indent=2, sort_keys=True) + "\n")
    return directory


def load_time_head(directory: str | Path) -> TimeHead:
    """A time head saved by :func:`save_time_head` (ValueError names what is missing or wrong)."""
    from safetensors.torch import load_file

    directory = Path(directory)
    config_file, weights = directory / TIME_CONFIG_FILENAME, directory / TIME_WEIGHTS_FILENAME
    if not config_file.is_file() or not weights.is_file():
        raise ValueError(
            f"a time head needs {TIME_CONFIG_FILENAME} and {TIME_WEIGHTS_FILENAME} in its folder"
        )
    try:
        config = TimeHeadConfig(**json.loads(config_file.read_text()))
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{TIME_CONFIG_FILENAME} is not a time head's config: {exc}") from exc
    head = TimeHead(config)
    head.load_state_dict(load_file(str(weights)))
    return head.eval()


def time_head_fingerprint(directory: str | Path) -> str:
    """A short digest of the head's weights and config (what /readyz shows)."""
    digest = hashlib.sha256()
    for name in (TIME_CONFIG_FILENAME, TIME_WEIGHTS_FILENAME):
        digest.update((Path(directory) / name).read_bytes())
    return digest.hexdigest()[:16]
