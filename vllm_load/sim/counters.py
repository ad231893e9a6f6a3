"""What the simulator counts while it serves, in the units and buckets of vLLM's `/metrics`.

Counting is plain attribute arithmetic and bucket arrays on the hot path: per token a counter,
per engine step one histogram observation, per finished request one `finish_request` call.
exposition.py formats the numbers with prometheus-client only when `/metrics` is scraped, so a
busy step does not pay a lock per observation.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

# vLLM's bucket boundaries (vllm/v1/metrics/loggers.py), checked against a real vLLM 0.32's
# /metrics in tests/sim/test_sim_vllm_metrics.py
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
# vllm:iteration_tokens_total (tokens per engine step)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
# vllm:request_num_preemptions (preemptions of one finished request)
PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)


def token_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's buckets for per-request token counts: 1, 2, 5, 10, 20, 50, ... up to
    max_model_len (1000 and 2000 but not 5000 for a 4096-token context)."""
    bounds: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_model_len:
                return tuple(bounds)
            bounds.append(mantissa * scale)
        scale *= 10


class Histogram:
    """A latency histogram kept as per-bucket counts, made cumulative only when scraped
    (Prometheus `le` semantics: a value equal to a bound belongs to that bound's bucket)."""

    __slots__ = ("bounds", "counts", "total", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        """Record `value` `n` times (a step observes one gap for all its decoding sequences)."""
        self.counts[bisect_left(self.bounds, value)] += n
        self.total += value * n
        self.count += n

    def cumulative(self) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, c in zip(self.bounds, self.counts):
            running += c
            out.append((repr(float(bound)), running))
        out.append(("+Inf", self.count))
        return out


# What kept the waiting queue's head out of an engine step (`vllm_sim:engine_steps_blocked`):
# the batch at --max-num-seqs, the step's token budget spent, too few free KV blocks for its
# prompt, or a step that preempted (vLLM admits nothing in one)
MAX_NUM_SEQS = "max_num_seqs"
MAX_NUM_BATCHED_TOKENS = "max_num_batched_tokens"
KV_CACHE = "kv_cache"
PREEMPTION = "preemption"
BLOCKED_BY = (MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS, KV_CACHE, PREEMPTION)


@dataclass
class StepCounts:
    """The simulator's own truth about its engine steps (no vLLM metric says it): how many it
    ran, how long they took and how much of that was the fixed cost of a step, and in how many
    requests waited, by what kept the queue's head out. Plain counters: a step adds to them."""

    steps: int = 0
    seconds: float = 0.0  # summed modelled step durations (time scale applied)
    fixed_seconds: float = 0.0  # ... their fixed part (--step-base): the rest grows with the batch
    waiting: int = 0  # steps planned with requests left in the queue
    blocked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BLOCKED_BY, 0))
    # steps at a limit whether or not anything waited: the batch at the cap, the budget spent
    full: dict[str, int] = field(
        default_factory=lambda: {MAX_NUM_SEQS: 0, MAX_NUM_BATCHED_TOKENS: 0}
    )

    def count(
        self,
        seconds: float,
        fixed_seconds: float,
        blocked_by: tuple[str, ...],
        at_cap: bool = False,
        budget_spent: bool = False,
    ) -> None:
        """One planned step; `blocked_by` is () when nothing was left waiting."""
        self.steps += 1
        self.seconds += seconds
        self.fixed_seconds += fixed_seconds
        if at_cap:
            self.full[MAX_NUM_SEQS] += 1
        if budget_spent:
            self.full[MAX_NUM_BATCHED_TOKENS] += 1
        if blocked_by:
            self.waiting += 1
            for reason in blocked_by:
                self.blocked[reason] += 1


@dataclass
class SpecCounts:
    """Speculative decoding as vLLM counts it (`vllm:spec_decode_*`): drafts verified, their
    tokens, the tokens accepted, and per draft position how many drafts had it accepted.
    `positions`: K, the positions vLLM exposes (0: the server does not speculate)."""

    positions: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.accepted_per_pos = [0] * self.positions

    def observe(self, draft: int, accepted: int) -> None:
        """One sequence's draft of `draft` tokens, the first `accepted` of them accepted."""
        self.drafts += 1
        self.draft_tokens += draft
        self.accepted += accepted
        for position in range(accepted):
            self.accepted_per_pos[position] += 1


# the NIXL connector's buckets (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py)
NIXL_XFER_TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
NIXL_BYTES_BUCKETS = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))
NIXL_DESCRIPTORS_BUCKETS = (
    10,
    20,
    30,
    50,
    75,
    100,
    200,
    400,
    1000,
    2000,
    4000,
    10000,
    20000,
    50000,
)


@dataclass
class TransferCounts:
    """KV transfers as vLLM's NIXL connector counts them on the instance that reads the blocks
    (the decode instance): per transfer its duration (posted to done), bytes and descriptors."""

    xfer_time: Histogram = field(default_factory=lambda: Histogram(NIXL_XFER_TIME_BUCKETS))
    bytes_transferred: Histogram = field(default_factory=lambda: Histogram(NIXL_BYTES_BUCKETS))
    descriptors: Histogram = field(default_factory=lambda: Histogram(NIXL_DESCRIPTORS_BUCKETS))
    failed: int = 0

    def observe(self, seconds: float, nbytes: int, descriptors: int) -> None:
        self.xfer_time.observe(seconds)
        self.bytes_transferred.observe(nbytes)
        self.descriptors.observe(descriptors)


@dataclass
class ServerStats:
    """Counters and histograms of one simulator process. `max_model_len` sets the buckets of
    the per-request token counts, as it does in vLLM."""

    max_model_len: int = 8192
    speculative_tokens: int = 0  # K of the engine's speculation (0: none)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int = 0  # ... and found there
    requests_ok: dict[str, int] = field(
        default_factory=lambda: {"stop": 0, "length": 0, "abort": 0}
    )
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    queue_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    inference_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    prefill_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    decode_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    request_preemptions: Histogram = field(default_factory=lambda: Histogram(PREEMPTIONS_BUCKETS))
    steps: StepCounts = field(default_factory=StepCounts)  # simulator-only (`vllm_sim:`)
    iteration_tokens: Histogram = field(default_factory=lambda: Histogram(ITERATION_TOKENS_BUCKETS))
    request_prompt_tokens: Histogram = field(init=False)
    request_generation_tokens: Histogram = field(init=False)
    request_prefill_computed: Histogram = field(init=False)  # prompt tokens not from the cache
    speculation: SpecCounts = field(init=False)
    kv_transfer: TransferCounts | None = None  # a --disagg decode instance's KV reads

    def __post_init__(self) -> None:
        self.speculation = SpecCounts(self.speculative_tokens)
        bounds = token_buckets(self.max_model_len)
        self.request_prompt_tokens = Histogram(bounds)
        self.request_generation_tokens = Histogram(bounds)
        self.request_prefill_computed = Histogram(bounds)

    def finish_request(
        self,
        queued: float,
        scheduled: float,
        first_token: float,
        last_token: float,
        prompt_tokens: int,
        cached_tokens: int,
        generated: int,
        preemptions: int,
    ) -> None:
        """A request generated its last token: its phases as vLLM splits them (times in one
        clock). Queue: queued -> first scheduled; prefill: first scheduled -> first token;
        decode: first token -> last; inference: first scheduled -> last. A preempted request's
        second wait is inside prefill or decode (and inference), not in the queue time.
        `scheduled` is the modelled start of the step, which may precede by a timer's lateness
        a request that arrived while that step's deadline was overdue: such a wait counts 0."""
        self.queue_time.observe(max(0.0, scheduled - queued))
        self.prefill_time.observe(first_token - scheduled)
        self.decode_time.observe(last_token - first_token)
        self.inference_time.observe(last_token - scheduled)
        self.request_prompt_tokens.observe(prompt_tokens)
        self.request_generation_tokens.observe(generated)
        self.request_prefill_computed.observe(prompt_tokens - cached_tokens)
        self.request_preemptions.observe(preemptions)


@dataclass(frozen=True)
class Occupancy:
    """The gauges: what is in the engine right now."""

    running: int
    waiting: int
    kv_cache_usage: float  # 0..1
