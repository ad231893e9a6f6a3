"""The flags that move the limit a verdict names: each with its direction, the effect expected
from the capacity model, and its cost. Advice follows the verdict's evidence and nothing else:
`not_saturated`, `failures` and `undetermined` get none."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .capacity import BUDGET, COMPUTE, KV, SEQS, Prediction, predict
from .facts import GIVEN, Fact, ServerFacts
from .verdict import KV_FULL, Bottleneck


@dataclass(frozen=True)
class Advice:
    """Change `flag` from `from_value` (None: not known) to `to_value` (None: not a single value
    the loop can try, such as more replicas)."""

    flag: str
    from_value: str | None
    to_value: str | None
    expected: str
    cost: str

    def as_json(self) -> dict:
        return {
            "flag": self.flag,
            "from": self.from_value,
            "to": self.to_value,
            "expected": self.expected,
            "cost": self.cost,
        }

    def text(self) -> str:
        if self.to_value is None:
            change = self.flag
        elif self.from_value is None:
            change = f"set {self.flag} {self.to_value}"
        else:
            change = f"{self.flag} {self.from_value} → {self.to_value}"
        return f"{change}: {self.expected}; cost: {self.cost}"


@dataclass(frozen=True)
class Workload:
    """What the requests asked of the server, measured: mean prompt and generated tokens, and
    the tested levels."""

    input_tokens: float
    output_tokens: float
    levels: tuple[float, ...]


def _shown(x: float) -> str:
    return f"{x:,.0f}" if x == int(x) else f"{x:g}"


def _knee_after(
    facts: ServerFacts, work: Workload, name: str, value: float, step_cost
) -> Prediction:
    changed = ServerFacts({**facts.facts, name: Fact(value, GIVEN)})
    return predict(changed, work.input_tokens, work.output_tokens, work.levels, step_cost)


def _moves_nothing(before: float | None, after: Prediction) -> bool:
    """The capacity model keeps the knee where it is (or lower) after the change: such advice
    would cost a restart for nothing, so it is not given."""
    return before is not None and after.knee is not None and after.knee <= before


def _moves(before: float | None, after: Prediction, noun: str) -> str:
    if after.knee is None:
        where = "beyond the tested levels"
    else:
        where = f"to ~{_shown(after.knee)} {noun} (then limited by {after.first})"
    # the model's own knee before and after: the measured one may lie past it (`series._gap`)
    start = f"from its ~{_shown(before)} " if before is not None else ""
    return f"the capacity model moves the knee {start}{where}"


def advise(
    verdict: Bottleneck,
    facts: ServerFacts,
    work: Workload,
    now: Prediction,
    noun: str = "concurrent",
) -> tuple[Advice, ...]:
    """The advice for a saturated level's verdict."""
    kind, ev, knee = verdict.kind, verdict.evidence, now.knee
    step_cost = now.step_cost
    if kind == SEQS:
        cap = facts.number("max_num_seqs") or ev.get("requests_in_batch", math.nan)
        kv_room = next((lim.concurrency for lim in now.limits if lim.kind == KV), math.inf)
        to = max(cap * 2, min(kv_room, max(work.levels, default=cap * 2)))
        if kv_room < math.inf:
            to = min(to, kv_room)
        to = float(math.floor(to))
        if to <= cap:
            return ()
        after = _knee_after(facts, work, "max_num_seqs", to, step_cost)
        if _moves_nothing(knee, after):
            return ()
        kv_now = ev.get("kv_cache_usage_max")
        kv_text = f" (it reached {kv_now:.0%} here)" if kv_now is not None else ""
        return (
            Advice(
                "--max-num-seqs",
                _shown(cap),
                _shown(to),
                f"{_moves(knee, after, noun)}, while KV-cache usage stays below {KV_FULL:.0%}{kv_text}",
                "more sequences share each engine step: ITL and p99 latency rise at the new knee",
            ),
        )
    if kind == KV:
        out = []
        blocks = facts.get("num_gpu_blocks")
        overridden = facts.get("num_gpu_blocks_override") is not None or (
            blocks is not None and blocks.source == GIVEN
        )
        if blocks is not None and overridden:
            to = float(blocks.value) * 2
            after = _knee_after(facts, work, "num_gpu_blocks", to, step_cost)
            if not _moves_nothing(knee, after):
                out.append(
                    Advice(
                        "--num-gpu-blocks-override",
                        _shown(float(blocks.value)),
                        _shown(to),
                        _moves(knee, after, noun),
                        "the blocks need the memory: only where it is free",
                    )
                )
        util = facts.number("gpu_memory_utilization")
        if util is not None and util < 0.95 and not overridden:  # the override sizes the cache
            out.append(
                Advice(
                    "--gpu-memory-utilization",
                    f"{util:g}",
                    f"{min(0.95, util + 0.05):g}",
                    "more KV blocks: vLLM gives the cache what memory is left after the weights and activations",
                    "less headroom for other processes on the GPU; too high fails at start-up",
                )
            )
        dtype = facts.get("cache_dtype")
        if dtype is None or str(dtype.value) == "auto":
            out.append(
                Advice(
                    "--kv-cache-dtype",
                    str(dtype.value) if dtype is not None else None,
                    "fp8",
                    "about twice the tokens in the same KV-cache memory",
                    "a small accuracy loss; check the model's quality on your task",
                )
            )
        preempt = ev.get("preemptions_per_s", 0.0)
        kv_fit = next((lim.concurrency for lim in now.limits if lim.kind == KV), None)
        if preempt and kv_fit:
            out.append(
                Advice(
                    "--max-num-seqs",
                    None
                    if facts.get("max_num_seqs") is None
                    else _shown(facts.number("max_num_seqs") or 0),
                    _shown(max(1.0, kv_fit)),
                    f"no preemptions ({preempt:.2f}/s here, each recomputes a request's prompt): about the same throughput, lower p99",
                    "requests wait in the queue instead of in a thrashing batch",
                )
            )
        return tuple(out)
    if kind == BUDGET:
        budget = facts.number("max_num_batched_tokens")
        per = work.input_tokens + work.output_tokens
        higher = [u for u in work.levels if knee is None or u > (knee or 0)]
        want = higher[0] if higher else max(work.levels, default=1.0) * 2
        need = want * per / work.output_tokens if work.output_tokens else math.nan
        base = budget * 2 if budget else need
        budget_to: float | None = (
            float(2 ** math.ceil(math.log2(max(base, need, 1.0)))) if need == need else None
        )
        budget_after = (
            _knee_after(facts, work, "max_num_batched_tokens", budget_to, step_cost)
            if budget_to
            else None
        )
        if budget_after is not None and _moves_nothing(knee, budget_after):
            return ()
        return (
            Advice(
                "--max-num-batched-tokens",
                _shown(budget) if budget else None,
                _shown(budget_to) if budget_to else None,
                (
                    _moves(knee, budget_after, noun)
                    if budget_after
                    else "prefills finish in fewer steps"
                )
                + ": prefills take fewer engine steps",
                "a step with a long prefill takes longer: the running requests' ITL rises (chunked prefill's trade-off)",
            ),
        )
    if kind == COMPUTE:
        tp = facts.number("tensor_parallel_size")
        return (
            Advice(
                "more replicas behind a load balancer",
                None,
                None,
                "throughput scales with replicas at the same latency per replica",
                "a GPU (or set of GPUs) per replica",
            ),
            Advice(
                "--tensor-parallel-size",
                _shown(tp) if tp else None,
                _shown((tp or 1) * 2),
                "each step's work split over twice the GPUs: shorter steps, a higher ceiling",
                "twice the GPUs; communication between them takes part of the gain",
            ),
        )
    if kind == "client":
        return (
            Advice(
                "--workers",
                None,
                None,
                "more load processes: the client keeps up and the level's figures become the server's",
                "CPU cores for the client",
            ),
        )
    return ()


def with_advice(
    verdict: Bottleneck,
    facts: ServerFacts,
    work: Workload,
    now: Prediction,
    noun: str = "concurrent",
) -> Bottleneck:
    return replace(verdict, advice=advise(verdict, facts, work, now, noun))
