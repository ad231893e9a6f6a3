"""Speculative decoding in `compare`: acceptance length and the draft acceptance rate per level,
judged with the same across-run test as the headline figures, only where both sides' servers
speculated; the rate, which falls as K rises whatever the drafts are worth, has no better side."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from vllm_load.analysis.decisions import ab
from vllm_load.analysis.decisions.ab import BETTER, HIGHER, LOWER, UNSURE, RunLevels
from vllm_load.analysis.decisions.significance import WELCH
from vllm_load.figures import COMPARE, shown_in
from vllm_load.report.compare_render import value_text

SPEC = ("spec_acceptance_length", "spec_draft_acceptance_rate")


def run(run_id: str, length: float | None, rate: float | None, seed: int) -> RunLevels:
    """One run at 8 and 64 users; `length` None: a server without speculation."""
    rng = np.random.default_rng(seed)
    rows, measured = [], []
    for i, users in enumerate((8, 64)):
        e2e = rng.lognormal(0, 0.1, 50)
        measured.append(pd.DataFrame({"level": i, "ttft": e2e / 10, "e2e": e2e, "tpot": np.nan}))
        row = {
            "level": i,
            "users": float(users),
            "measured": 50,
            "ok": 50,
            "success_rate": 1.0,
            "total_tok_per_s": 1000.0 * (1 + rng.normal(0, 0.01)),
            "output_tok_per_s": 100.0,
            "e2e_p50": float(np.median(e2e)),
        }
        if length is not None:
            noise = 1 + rng.normal(0, 0.01)
            row |= {
                "spec_drafts": 500.0,
                "spec_acceptance_length": length * noise,
                "spec_draft_acceptance_rate": rate * noise,
            }
        rows.append(row)
    return RunLevels(run_id, pd.DataFrame(rows), pd.concat(measured, ignore_index=True))


def side(name: str, length, rate, seed: int) -> list[RunLevels]:
    return [run(f"{name}{i}", length, rate, seed + i) for i in range(3)]


def test_both_sides_speculating_compare_length_and_rate_with_welchs_test():
    # A: K = 1 (1.7 tokens a step, 70 % of drafts accepted); B: K = 3 (2.4, 47 %)
    res = ab.compare_runs(side("a", 1.7, 0.7, 0), side("b", 2.4, 0.47, 10), resamples=100)
    at = {c.figure.key: c for c in res.at(64.0)}
    length, rate = at["spec_acceptance_length"], at["spec_draft_acceptance_rate"]
    assert length.result.test == WELCH and rate.result.test == WELCH
    assert length.verdict == BETTER  # more tokens a step: better
    assert rate.verdict == LOWER  # lower, and no worse for it: the rate has no better side
    assert rate.figure.higher_is_better is None and rate.p_adjusted < 0.05
    assert ab.verdict(0.1, 0.01, 0.05, None) == HIGHER
    assert ab.verdict(0.1, 0.2, 0.05, None) == UNSURE
    assert not ab.worse_by(res, 0.0)  # a lower rate is never "worse"
    assert value_text(2.4, length.figure) == "2.40 tokens"
    assert value_text(rate.diff, rate.figure, signed=True) == f"{rate.diff * 100:+.2f}%"


def test_speculation_figures_are_left_out_unless_both_sides_speculate():
    without = side("a", None, None, 0)
    res = ab.compare_runs(without, side("b", 2.4, 0.47, 10), resamples=100)
    keys = {c.figure.key for c in res.comparisons}
    assert not keys & set(SPEC) and "total_tok_per_s" in keys
    both = ab.compare_runs(side("a", 2.4, 0.5, 0), side("b", 2.4, 0.5, 10), resamples=100)
    assert set(SPEC) <= {c.figure.key for c in both.comparisons}
    assert {f.key for f in shown_in(COMPARE)} >= set(SPEC)


def test_joules_are_not_shown_as_milliseconds():
    joules = next(f for f in shown_in(COMPARE) if f.key == "gpu_j_per_output_token")
    assert value_text(0.125, joules) == "0.125 J/token"
    assert value_text(math.nan, joules) == "-"
