"""Where the server's configuration puts the knee, before a run and beside the measured one.

Each configured limit allows a number of requests in the batch, for a workload of `input` prompt
and `output` generated tokens per request:

- the sequence cap: `max_num_seqs`;
- the KV cache: its blocks over the blocks one request holds at full length,
  `num_gpu_blocks // ceil((input + output) / block_size)` (vLLM allocates blocks as a request
  grows and preempts when none is left, so more can run for a while, not in a steady state);
- the token budget: each step schedules at most `max_num_batched_tokens` tokens and a request
  needs `input + output` of them over about `output` steps, so the budget is full at
  `max_num_batched_tokens * output / (input + output)` requests.

Throughput at a level of N users is then proportional to `n / step_time(n)`, n = min(N, every
limit), with `step_time(n) = c0 + c1 * n` fitted to the engine steps measured at the run's levels
(`vllm:iteration_tokens_total`'s count) where there are two distinct batch sizes, else constant.
The predicted knee is the lowest tested level within the saturation rule's tolerance of the
highest predicted throughput: the same rule the measured knee follows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .facts import ServerFacts

#: the limits the server's configuration sets, and compute: the names of the bottleneck kinds that
#: are the server's own (`kinds`) and of the limits here
SEQS, KV, BUDGET, COMPUTE = "max_num_seqs", "kv_cache", "max_num_batched_tokens", "compute"
#: KV-cache usage (0..1) at which the cache counts as full (the verdict's `kv_cache` rule, or lower:
#: `verdict.kv_full_at`); advice that adds requests keeps usage below it
KV_FULL = 0.90


@dataclass(frozen=True)
class Limit:
    """A configured limit and the requests in the batch it allows."""

    kind: str
    concurrency: float
    basis: str  # the facts it stands on, as a sentence names them

    def text(self) -> str:
        return f"{self.kind} allows ~{self.concurrency:,.0f} ({self.basis})"


@dataclass(frozen=True)
class Prediction:
    """The capacity model's answer."""

    limits: tuple[Limit, ...]  # the known limits, lowest first
    unknown: tuple[str, ...]  # the limits it could not place, and why
    knee: float | None  # the predicted knee: a tested level, or the first limit without a ladder
    first: str  # the limit the knee comes from (`compute` when the step time flattens it)
    step_cost: tuple[float, float] | None = None  # (c0, c1): seconds per step = c0 + c1 * batch

    def sentence(self, noun: str = "concurrent") -> str:
        if self.knee is None:
            if not self.limits:
                return "No configured limit is known: " + "; ".join(self.unknown) + "."
            lowest = self.limits[0]
            return (
                f"The capacity model's first limit, {lowest.text()}, puts no knee within the tested "
                "levels (a knee needs a level past it whose throughput the next one does not beat)."
            )
        known = "; ".join(lim.text() for lim in self.limits) or "no configured limit known"
        return f"The capacity model puts the knee at ~{self.knee:,.0f} {noun}, from {self.first} ({known})."

    def as_json(self) -> dict:
        return {
            "knee": self.knee,
            "first": self.first,
            "limits": [
                {"kind": lim.kind, "concurrency": lim.concurrency, "basis": lim.basis}
                for lim in self.limits
            ],
            "unknown": list(self.unknown),
            "step_cost": list(self.step_cost) if self.step_cost else None,
        }


def limits(
    facts: ServerFacts, input_tokens: float, output_tokens: float
) -> tuple[list[Limit], list[str]]:
    """The limits the facts allow placing, lowest first, and why the others could not be."""
    found: list[Limit] = []
    unknown: list[str] = []
    cap = facts.get("max_num_seqs")
    if cap is not None and facts.number("max_num_seqs"):
        found.append(Limit(SEQS, float(cap.value), f"--max-num-seqs {cap.text()}"))
    else:
        unknown.append(
            "the sequence cap (vLLM does not expose --max-num-seqs; give it with --server-args)"
        )
    per_request = input_tokens + output_tokens
    if not (
        per_request == per_request
        and per_request > 0
        and output_tokens == output_tokens
        and output_tokens > 0
    ):
        unknown.append("the KV cache and token budget limits (no request lengths measured)")
        return sorted(found, key=lambda lim: lim.concurrency), unknown
    blocks = facts.kv_blocks_tokens
    if blocks is not None:
        n_blocks, size = blocks
        per = math.ceil(per_request / size)
        found.append(
            Limit(
                KV,
                float(n_blocks // per),
                f"{n_blocks:,.0f} KV blocks ({facts.facts['num_gpu_blocks'].source}) of {size:,.0f} tokens, {per} per request of {per_request:,.0f} tokens",
            )
        )
    else:
        unknown.append("the KV cache (the server exposes no vllm:cache_config_info)")
    budget = facts.number("max_num_batched_tokens")
    if budget:
        found.append(
            Limit(
                BUDGET,
                budget * output_tokens / per_request,
                f"--max-num-batched-tokens {facts.facts['max_num_batched_tokens'].text()} for {input_tokens:,.0f} in + {output_tokens:,.0f} out",
            )
        )
    else:
        unknown.append(
            "the token budget (vLLM does not expose --max-num-batched-tokens; give it with --server-args)"
        )
    return sorted(found, key=lambda lim: lim.concurrency), unknown


def fit_step_cost(batch: Sequence[float], step_time: Sequence[float]) -> tuple[float, float] | None:
    """Least-squares `step_time = c0 + c1 * batch` over the levels with both figures; None without
    two distinct batch sizes, or where the step time does not grow or has no fixed part."""
    b, t = np.asarray(batch, np.float64), np.asarray(step_time, np.float64)
    ok = ~(np.isnan(b) | np.isnan(t))
    b, t = b[ok], t[ok]
    if len(b) < 2 or np.ptp(b) < 0.5:
        return None
    # relative residuals (weights 1/t): the small steps place the intercept, which a plain fit
    # leaves to the noise of the largest step
    c1, c0 = np.polyfit(b, t, 1, w=1.0 / t)
    if c1 <= 0 or c0 <= 0:
        return None
    return float(c0), float(c1)


def predict(
    facts: ServerFacts,
    input_tokens: float,
    output_tokens: float,
    levels: Sequence[float] = (),
    step_cost: tuple[float, float] | None = None,
    tolerance: float = 0.05,
) -> Prediction:
    """The predicted knee on the tested `levels` (the first limit's concurrency without levels)."""
    found, unknown = limits(facts, input_tokens, output_tokens)
    if step_cost is None:
        unknown.append("compute (no engine step times measured at two batch sizes)")
    if not levels:
        lowest = found[0] if found else None
        return Prediction(
            tuple(found),
            tuple(unknown),
            lowest.concurrency if lowest else None,
            lowest.kind if lowest else "",
            step_cost,
        )
    ceiling = min((lim.concurrency for lim in found), default=math.inf)
    ladder = sorted(float(u) for u in levels)
    batch = [min(u, ceiling) for u in ladder]
    if step_cost is None:
        if not found:
            return Prediction((), tuple(unknown), None, "", None)
        throughput = batch
    else:
        c0, c1 = step_cost
        throughput = [n / (c0 + c1 * n) for n in batch]
    top = max(throughput)
    knee_i = next(i for i, x in enumerate(throughput) if x >= (1 - tolerance) * top)
    if knee_i == len(ladder) - 1 and (len(ladder) < 2 or throughput[-2] < (1 - tolerance) * top):
        return Prediction(tuple(found), tuple(unknown), None, "", step_cost)  # still rising
    if batch[knee_i] >= ceiling:  # every limit that allows just this many
        first = " and ".join(lim.kind for lim in found if lim.concurrency <= ceiling)
    elif step_cost is not None:
        first = COMPUTE
    else:
        first = found[0].kind
    return Prediction(tuple(found), tuple(unknown), ladder[knee_i], first, step_cost)
