"""Early exit for the time head (§A.10, Eq. 19, Prop. 3), measured on held-out renders.

The time head (models.time_head) reads every candidate's bank in ``T_EXIT`` lockstep steps: step t
is the first t / T_EXIT of each candidate's frames, and its readout y_t is the candidate's score so
far. Two ways to stop early are measured (benchmarks/bench_time_head.py), each with a gate fitted on
a render that neither trained the head nor is measured:

**Per query** (:func:`fit_exit_gate`, :func:`measure_exit`). Every candidate stops at once. A
logistic gate p_t estimates A_t, "the top-1 after step t is the full stream's top-1" (Assumption 2,
Eq. 24), from what step t shows: its share t / T, the lead of the first readout over the second,
whether the top-1 changed since step t - 1, and the query's condition. Exiting at the first t with
p_t >= eta bounds the disagreement by 1 - eta + eps_g (Prop. 3); the saved share of steps is
1 - E[T^] / T (Eq. 19).

**Per candidate** (:func:`fit_candidate_gate`, :func:`measure_candidate_exit`). In the paper each
query-candidate pair is a stream of its own (v_ij of Eq. 1), so each may stop on its own. A listwise
gate q_t^j = softmax_j(w · phi_t^j) estimates P(j is the full stream's top-1 | F_t) from every
candidate's readout at step t (its level, its gap to the leader, its change since step t - 1, its
best so far, whether it leads; per condition and step share). Candidate j exits at the first step
t < T with 1 - q_t^j >= eta, unless its readout is among the ``EXIT_READ_ON`` best at t (the leader
and the runner-up always read on). An exited candidate keeps its readout y_t but ranks below every
candidate read to the end: the gate said it is not the answer. The saved share is
1 - sum_j T^_j / (C T), Eq. 19 over the candidates' streams. Prop. 3 applied to each stream bounds
the chance that an exited candidate was the full stream's top-1 by 1 - eta + eps_g, so a query's
disagreement is at most C (1 - eta + eps_g) (a union bound; the measured one is far below it).

What a step saves here: the time head reads stored frame embeddings, so an exit saves memory
updates (GRU steps, milliseconds), not backbone calls; nothing here is served.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from models.time_head import TimeHead

__all__ = [
    "EXIT_READ_ON",
    "T_EXIT",
    "choose_eta",
    "exit_trajectories",
    "fit_candidate_gate",
    "fit_exit_gate",
    "measure_candidate_exit",
    "measure_exit",
]

T_EXIT = 8  # lockstep steps per candidate (the paper's 8 clips of 16 frames at K = 128)
EXIT_READ_ON = 2  # per-candidate exit: the best readouts at a step never exit there
_CLIP = 20.0  # readouts are clipped to +-_CLIP in the gates' features (an empty bank reads -inf)


@torch.no_grad()
def exit_trajectories(head: TimeHead, split) -> list[dict]:
    """Per query of ``split`` (training.time_head.TimeSplit): its condition, every candidate's readout
    at each lockstep t = 1..T_EXIT ([T_EXIT, C]; -inf for an empty bank), the top-1 and the lead of
    the first readout over the second at each step, and the right candidate's column."""
    out = []
    for item in split.queries:
        keys = list(item.relevance)
        scored = head.score([item.relevance[k] for k in keys], item.condition)
        readouts = np.full((T_EXIT, len(keys)), -np.inf, dtype=np.float64)
        for c, (_, y) in enumerate(scored):
            for t in range(1, T_EXIT + 1):
                if len(y):
                    readouts[t - 1, c] = y[max(1, math.ceil(t / T_EXIT * len(y))) - 1]
        top = readouts.argmax(axis=1)
        ordered = np.sort(readouts, axis=1)
        lead = ordered[:, -1] - ordered[:, -2] if len(keys) > 1 else np.full(T_EXIT, np.inf)
        out.append({"condition": item.condition, "readouts": readouts, "top": top,
                    "lead": np.nan_to_num(lead, posinf=1e3), "right": keys.index(item.right)})  # fmt: skip
    return out


def _row(eta: float, saved: list, agreed: list, hit: list, trajectories: list[dict], ece: float) -> dict:
    """One eta's measurements over a set of queries (the per-query and per-candidate exits alike)."""
    return {"eta": eta, "saved": float(np.mean(saved)), "agreement": float(np.mean(agreed)),
            "hit@1": float(np.mean(hit)), "ece": ece, "queries": len(trajectories),
            "full_hit@1": float(np.mean([tr["top"][-1] == tr["right"] for tr in trajectories]))}  # fmt: skip


def _ece(p: np.ndarray, hit: np.ndarray) -> float:
    """Expected calibration error over ten bins of ``p``: eps_g's empirical stand-in in Prop. 3."""
    bins = np.minimum((p * 10).astype(int), 9)
    return float(sum(abs(p[bins == b].mean() - hit[bins == b].mean()) * (bins == b).mean()
                     for b in range(10) if (bins == b).any()))  # fmt: skip


# -- per query ------------------------------------------------------------------------------------


def _gate_features(trajectory: dict, conditions: tuple[str, ...]) -> np.ndarray:
    """[T_EXIT, F] features of each step (module docstring, per query)."""
    t = np.arange(1, T_EXIT + 1, dtype=np.float32) / T_EXIT
    changed = np.concatenate([[1.0], (trajectory["top"][1:] != trajectory["top"][:-1]).astype(np.float32)])
    cond = np.zeros((T_EXIT, len(conditions)), np.float32)
    if trajectory["condition"] in conditions:
        cond[:, conditions.index(trajectory["condition"])] = 1.0
    lead = np.clip(trajectory["lead"], 0.0, _CLIP).astype(np.float32)
    return np.column_stack([t, lead, np.minimum(lead, 2.0), changed, cond, cond * t[:, None]]).astype(
        np.float32
    )


def fit_exit_gate(trajectories: list[dict], conditions: tuple[str, ...], *, steps: int = 300) -> nn.Module:
    """A logistic gate p_t = sigmoid(w · features_t + b), fitted by binary cross-entropy on A_t."""
    x = torch.from_numpy(np.concatenate([_gate_features(tr, conditions) for tr in trajectories]))
    y = torch.from_numpy(
        np.concatenate([(tr["top"] == tr["top"][-1]).astype(np.float32) for tr in trajectories])
    )
    gate = nn.Linear(x.shape[1], 1)
    opt = torch.optim.LBFGS(gate.parameters(), max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(gate(x).squeeze(1), y) + 1e-4 * gate.weight.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    return gate.eval()


@torch.no_grad()
def measure_exit(gate: nn.Module, trajectories: list[dict], conditions: tuple[str, ...],
                 etas=(0.5, 0.8, 0.9, 0.95, 0.98, 0.99), t_min: int = 1) -> list[dict]:  # fmt: skip
    """Per eta: the share of steps saved (1 - E[T^] / T, Eq. 19), the top-1 agreement with the full
    stream, Hit@1 at the exit against the full stream's, and the gate's calibration error (ECE over
    all steps). And the share an oracle saves at 100 % agreement (each query stopped once its top-1
    never changes again), overall and per condition: no per-query gate over these steps saves more."""
    probs = [torch.sigmoid(gate(torch.from_numpy(_gate_features(tr, conditions)))).squeeze(1).numpy()
             for tr in trajectories]  # fmt: skip
    agree = [(tr["top"] == tr["top"][-1]) for tr in trajectories]
    ece = _ece(np.concatenate(probs), np.concatenate(agree).astype(np.float64))
    # what no gate can beat: each query stopped at the first step after which its top-1 never changes
    settled = [
        T_EXIT - int(np.flatnonzero(tr["top"] != tr["top"][-1]).max(initial=-1)) - 1 for tr in trajectories
    ]
    oracle = {"all": float(np.mean([s / T_EXIT for s in settled]))}
    for cond in sorted({tr["condition"] for tr in trajectories}):
        oracle[cond] = float(np.mean([s / T_EXIT for s, tr in zip(settled, trajectories, strict=True)
                                      if tr["condition"] == cond]))  # fmt: skip
    out = []
    for eta in etas:
        saved, agreed, hit = [], [], []
        for tr, p in zip(trajectories, probs, strict=True):
            ok = np.flatnonzero((p >= eta) & (np.arange(1, T_EXIT + 1) >= t_min))
            t = int(ok[0]) + 1 if len(ok) else T_EXIT
            saved.append(1 - t / T_EXIT)
            agreed.append(float(tr["top"][t - 1] == tr["top"][-1]))
            hit.append(float(tr["top"][t - 1] == tr["right"]))
        out.append(_row(eta, saved, agreed, hit, trajectories, ece) | {"oracle_saved": oracle})
    return out


# -- per candidate --------------------------------------------------------------------------------


def _candidate_features(seen: np.ndarray, t: int, condition: str, conditions: tuple[str, ...]) -> np.ndarray:
    """[C, F] features phi_t^j of every candidate at step ``t`` (0-based) from ``seen`` [t + 1, C],
    the readouts observed through step t (an exited candidate's frozen at its exit)."""
    seen = np.clip(seen, -_CLIP, _CLIP)
    y = seen[t]
    gap = y.max() - y
    prev = seen[t - 1] if t else y
    leads = (np.arange(len(y)) == y.argmax()).astype(np.float64)
    base = np.column_stack([y, gap, np.minimum(gap, 2.0), y - prev, seen[: t + 1].max(axis=0), leads])
    share = (t + 1) / T_EXIT
    blocks = [base * float(c == condition) * s for s in (1.0, share) for c in conditions]
    return np.concatenate(blocks, axis=1).astype(np.float32)


class CandidateGate(nn.Module):
    """q_t^j = softmax_j(w · phi_t^j): the chance that candidate j is the full stream's top-1."""

    def __init__(self, features: int, conditions: tuple[str, ...]):
        super().__init__()
        self.conditions = tuple(conditions)
        self.w = nn.Linear(features, 1, bias=False)  # a bias is the same for every candidate

    @torch.no_grad()
    def winner_chance(self, seen: np.ndarray, t: int, condition: str) -> np.ndarray:
        phi = torch.from_numpy(_candidate_features(seen, t, condition, self.conditions))
        return torch.softmax(self.w(phi).squeeze(1), dim=0).numpy()


def fit_candidate_gate(trajectories: list[dict], conditions: tuple[str, ...], *, steps: int = 500,
                       l2: float = 1e-3) -> CandidateGate:  # fmt: skip
    """Fit w by cross-entropy of the full stream's top-1 over the candidates, at every step t < T."""
    phis, winners = [], []
    for tr in trajectories:
        for t in range(T_EXIT - 1):
            phis.append(torch.from_numpy(_candidate_features(tr["readouts"][: t + 1], t, tr["condition"],
                                                             conditions)))  # fmt: skip
            winners.append(int(tr["top"][-1]))
    width = max(len(p) for p in phis)
    x = torch.zeros(len(phis), width, phis[0].shape[1])
    mask = torch.ones(len(phis), width, dtype=torch.bool)  # True: padding
    for i, p in enumerate(phis):
        x[i, : len(p)], mask[i, : len(p)] = p, False
    target = torch.tensor(winners)
    gate = CandidateGate(x.shape[2], conditions)
    opt = torch.optim.LBFGS(gate.parameters(), max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        logits = gate.w(x).squeeze(2).masked_fill(mask, float("-inf"))
        loss = F.cross_entropy(logits, target) + l2 * gate.w.weight.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    return gate.eval()


def measure_candidate_exit(gate: CandidateGate, trajectories: list[dict],
                           etas=(0.99, 0.995, 0.998, 0.999, 0.9995, 0.9999)) -> list[dict]:  # fmt: skip
    """Per eta (module docstring, per candidate): the share of candidate steps saved, the top-1
    agreement with the full stream, Hit@1 with the exits against the full stream's, and the gate's
    calibration error (ECE of q_t^j against "j is the full stream's top-1", every candidate and step
    t < T of the full streams)."""
    q_all, won_all = [], []
    for tr in trajectories:
        for t in range(T_EXIT - 1):
            q = gate.winner_chance(tr["readouts"][: t + 1], t, tr["condition"])
            q_all.append(q)
            won_all.append(np.arange(len(q)) == tr["top"][-1])
    ece = _ece(np.concatenate(q_all), np.concatenate(won_all).astype(np.float64))
    out = []
    for eta in etas:
        saved, agreed, hit = [], [], []
        for tr in trajectories:
            ranked = candidate_exit(gate, tr, eta)
            saved.append(ranked["saved"])
            agreed.append(float(ranked["top"] == tr["top"][-1]))
            hit.append(float(ranked["top"] == tr["right"]))
        out.append(_row(eta, saved, agreed, hit, trajectories, ece))
    return out


def choose_eta(rows: list[dict], agreement: float = 0.98) -> float | None:
    """The eta, of rows measured on the gate's own render, that saves most at ``agreement`` or more
    (None if none does): how eta is chosen without looking at the measured render."""
    ok = [r for r in rows if r["agreement"] >= agreement]
    return max(ok, key=lambda r: r["saved"])["eta"] if ok else None


def candidate_exit(gate: CandidateGate, trajectory: dict, eta: float) -> dict:
    """One query read with per-candidate exits: its top-1, each candidate's steps, the saved share."""
    readouts = trajectory["readouts"]
    seen = readouts.copy()
    candidates = readouts.shape[1]
    steps = np.full(candidates, T_EXIT)
    for t in range(T_EXIT - 1):
        reading = steps == T_EXIT
        seen[t] = np.where(reading, readouts[t], seen[t - 1] if t else readouts[t])
        q = gate.winner_chance(seen[: t + 1], t, trajectory["condition"])
        read_on = np.argsort(-seen[t], kind="stable")[:EXIT_READ_ON]
        leave = reading & (1.0 - q >= eta)
        leave[read_on] = False
        steps[leave] = t + 1
    # every candidate's score: its final readout, or its readout at its exit ranked below all finals
    final = np.where(steps == T_EXIT, readouts[-1], -np.inf)
    exited = np.where(steps < T_EXIT, readouts[steps - 1, np.arange(candidates)], -np.inf)
    top = int(np.argmax(final)) if np.isfinite(final).any() else int(np.argmax(exited))
    return {"top": top, "steps": steps, "saved": float(1 - steps.sum() / (candidates * T_EXIT))}
