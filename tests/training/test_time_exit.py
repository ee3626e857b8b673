"""Early exit for the time head (training.time_exit): per query, every candidate stops once the top-1
has settled; per candidate, a candidate stops once the gate is sure it is not the answer, and the
answer itself reads to the end."""

from __future__ import annotations

import numpy as np

from training.time_exit import (
    T_EXIT,
    candidate_exit,
    choose_eta,
    fit_candidate_gate,
    fit_exit_gate,
    measure_candidate_exit,
    measure_exit,
)


def _trajectory(settle: int, condition: str = "order") -> dict:
    """A query's lockstep readouts: the top-1 wanders until step ``settle``, then holds with a
    growing lead (what a found event gives)."""
    top = np.array([(t % 3) + 1 if t < settle - 1 else 0 for t in range(T_EXIT)])
    lead = np.array([0.05 if t < settle - 1 else 1.0 + t for t in range(T_EXIT)], dtype=np.float64)
    return {"condition": condition, "top": top, "lead": lead, "right": 0}


def test_the_exit_gate_stops_once_the_top_one_has_settled_and_keeps_the_full_answer():
    rng = np.random.default_rng(0)
    fit = [_trajectory(int(rng.integers(1, T_EXIT + 1))) for _ in range(200)]
    held = [_trajectory(int(rng.integers(1, T_EXIT + 1))) for _ in range(100)]
    gate = fit_exit_gate(fit, ("order",))
    rows = {r["eta"]: r for r in measure_exit(gate, held, ("order",), etas=(0.9, 1.01))}
    assert rows[0.9]["saved"] > 0.25 and rows[0.9]["agreement"] == 1.0
    assert rows[0.9]["hit@1"] == rows[0.9]["full_hit@1"] == 1.0
    assert rows[1.01]["saved"] == 0.0  # a threshold no p_t reaches: the full stream, Prop. 3's T^ = T


def _candidates(rng, candidates: int = 8) -> dict:
    """Lockstep readouts of one query: every candidate hovers near zero until the answer's event
    shows at a random step, from which the answer climbs far above the rest (a found event); a few
    decoys climb half as far at their own steps."""
    readouts = rng.normal(0.0, 0.3, size=(T_EXIT, candidates))
    right = int(rng.integers(candidates))
    found = int(rng.integers(0, T_EXIT))
    readouts[found:, right] += 6.0
    for decoy in rng.choice(
        [c for c in range(candidates) if c != right], size=min(2, candidates - 1), replace=False
    ):
        readouts[int(rng.integers(0, T_EXIT)) :, decoy] += 2.0
    top = readouts.argmax(axis=1)
    return {"condition": "order", "readouts": readouts, "top": top, "right": right}


def test_candidates_stop_once_the_answer_has_shown_and_the_answer_reads_to_the_end():
    rng = np.random.default_rng(0)
    fit = [_candidates(rng) for _ in range(150)]
    held = [_candidates(rng) for _ in range(100)]
    gate = fit_candidate_gate(fit, ("order",))
    rows = {r["eta"]: r for r in measure_candidate_exit(gate, held, etas=(0.99, 1.01))}
    assert rows[0.99]["saved"] > 0.25 and rows[0.99]["agreement"] >= 0.98
    assert rows[0.99]["hit@1"] == rows[0.99]["full_hit@1"]
    assert rows[1.01]["saved"] == 0.0  # no 1 - q reaches it: every stream is read to the end
    answered = [candidate_exit(gate, t, 0.99) for t in held]
    whole = [a["steps"][int(t["top"][-1])] == T_EXIT for a, t in zip(answered, held, strict=True)]
    assert np.mean(whole) >= 0.98  # the full stream's top-1 is read to the end


def test_the_two_best_readouts_never_stop_so_a_pair_is_read_whole():
    rng = np.random.default_rng(1)
    gate = fit_candidate_gate([_candidates(rng) for _ in range(100)], ("order",))
    pair = _candidates(rng, candidates=2)
    assert candidate_exit(gate, pair, 0.5)["saved"] == 0.0


def test_eta_is_chosen_on_the_gates_own_render_for_the_agreement_asked():
    rows = [
        {"eta": 0.9, "saved": 0.5, "agreement": 0.9},
        {"eta": 0.99, "saved": 0.3, "agreement": 0.98},
        {"eta": 0.999, "saved": 0.2, "agreement": 1.0},
    ]
    assert choose_eta(rows, 0.98) == 0.99
    assert choose_eta(rows, 1.0) == 0.999
    assert choose_eta(rows[:1], 0.98) is None
