"""The simulator's `/metrics`: its counts (counters.py) as vLLM 0.32 names them.

Names, types, label names, HELP texts and bucket boundaries are those of a real vLLM 0.32.0
(tests/data/vllm_0.32.0_cpu_metrics_full.txt; tests/sim/test_sim_vllm_metrics.py compares
them). prometheus-client only formats: a custom collector on the simulator's own registry reads
the plain counters when a scrape comes.
"""

from __future__ import annotations

from typing import Callable, Iterable

from .config import EngineConfig
from .counters import (
    BLOCKED_BY,
    Histogram,
    Occupancy,
    ServerStats,
    SpecCounts,
    StepCounts,
    TransferCounts,
)

# What a vLLM server started without cache options prints for the CacheConfig fields the
# simulator has no notion of (mamba, offloading, sliding windows...), as vLLM 0.32 does.
_CACHE_CONFIG_DEFAULTS = {
    "_block_size_resolved": "True",
    "cache_dtype": "auto",
    "cache_hit_alignment_tokens": "None",
    "enable_mamba_shared_prefix_checkpoint": "False",
    "gpu_memory_utilization": "0.9",
    "hash_block_size": "None",
    "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]",
    "kv_cache_layout": "None",
    "kv_cache_memory_bytes": "None",
    "kv_offloading_backend": "native",
    "kv_offloading_size": "None",
    "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "auto",
    "num_cpu_blocks": "None",
    "num_gpu_blocks_override": "None",
    "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256",
    "prefix_match_unit": "None",
    "replayssm_buffer_len": "16",
    "skip_page_size_padded": "None",
    "sliding_window": "None",
    "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False",
    "use_replayssm": "False",
    "user_specified_block_size": "False",
}


def cache_config_labels(config: EngineConfig) -> dict[str, str]:
    """`vllm:cache_config_info`'s labels for the engine's KV cache, computed as vLLM computes
    them: a request of max_model_len tokens takes ceil(max_model_len / block_size) blocks, the
    maximum concurrency is the blocks over that, and the KV size in tokens is that concurrency
    times max_model_len (the blocks times the block size when max_model_len is a multiple of it)."""
    blocks_per_request = -(-config.max_model_len // config.block_size)
    concurrency = config.num_gpu_blocks / blocks_per_request
    return {
        **_CACHE_CONFIG_DEFAULTS,
        "block_size": str(config.block_size),
        "effective_attention_block_size": str(config.block_size),
        "enable_prefix_caching": str(config.enable_prefix_caching),
        "kv_cache_max_concurrency": str(concurrency),
        "kv_cache_size_tokens": str(int(concurrency * config.max_model_len)),
        "num_gpu_blocks": str(config.num_gpu_blocks),
        **(
            {"num_gpu_blocks_override": str(config.num_gpu_blocks)}
            if config.blocks_overridden
            else {}
        ),
    }


# (name, HELP, ServerStats attribute) of every histogram, in vLLM's order
_HISTOGRAMS = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "request_prompt_tokens"),
    (
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        "request_generation_tokens",
    ),
    (
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        "iteration_tokens",
    ),
    (
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        "ttft",
    ),
    (
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        "itl",
    ),
    (
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        "e2e",
    ),
    (
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        "queue_time",
    ),
    (
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        "inference_time",
    ),
    (
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        "prefill_time",
    ),
    (
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        "decode_time",
    ),
    (
        "vllm:request_num_preemptions",
        "Histogram of the number of times a request was preempted.",
        "request_preemptions",
    ),
    (
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        "request_prefill_computed",
    ),
)

_WAITING_BY_REASON_HELP = (
    "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
    "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, "
    "blocked status). Sum of all reasons equals vllm:num_requests_waiting."
)


class VllmCollector:
    """Yields the simulator's numbers as vLLM-named metric families for prometheus-client."""

    def __init__(
        self,
        stats: ServerStats,
        occupancy: Callable[[], Occupancy],
        model_name: str,
        cache_config: dict[str, str] | None = None,
    ) -> None:
        self.stats = stats
        self.occupancy = occupancy
        self.labels = {"model_name": model_name, "engine": "0"}
        # vLLM's info gauge carries the engine but not the model name
        self.cache_config = {**cache_config, "engine": "0"} if cache_config else None

    def describe(self) -> Iterable:
        return []  # registering without a scrape at start-up

    def collect(self) -> Iterable:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        names, values = list(self.labels), list(self.labels.values())
        s, occ = self.stats, self.occupancy()

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=names)
            g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=names)
            c.add_metric(values, value)
            return c

        def histogram(name: str, doc: str, h: Histogram) -> HistogramMetricFamily:
            fam = HistogramMetricFamily(name, doc, labels=names)
            fam.add_metric(values, h.cumulative(), h.total)
            return fam

        yield gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            occ.running,
        )
        yield gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", occ.waiting
        )
        # vLLM says "capacity" for a full batch and a full KV cache alike; the simulator has
        # none of the transient causes (LoRA budget, KV transfer) that make "deferred"
        by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason",
            _WAITING_BY_REASON_HELP,
            labels=[*names, "reason"],
        )
        by_reason.add_metric([*values, "capacity"], occ.waiting)
        by_reason.add_metric([*values, "deferred"], 0)
        yield by_reason
        yield gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            occ.kv_cache_usage,
        )
        yield counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            s.prefix_cache_queries,
        )
        yield counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            s.prefix_cache_hits,
        )
        yield counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            s.preemptions,
        )
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens)
        yield counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        for reason, n in s.requests_ok.items():
            success.add_metric([*values, reason], n)
        yield success
        for name, doc, attribute in _HISTOGRAMS:
            yield histogram(name, doc, getattr(s, attribute))
        if s.speculation.positions:  # like vLLM: only a server started with speculation has them
            yield from _spec_families(s.speculation, names, values)
        if s.kv_transfer is not None:  # like vLLM: only an instance with a KV connector
            yield from _nixl_families(s.kv_transfer, names, values)
        yield from _sim_families(s.steps, names, values)
        if self.cache_config is not None:
            info = GaugeMetricFamily(
                "vllm:cache_config_info",
                "Information of the LLMEngine CacheConfig",
                labels=sorted(self.cache_config),
            )
            info.add_metric([self.cache_config[k] for k in sorted(self.cache_config)], 1.0)
            yield info


def _spec_families(spec: SpecCounts, names: list[str], values: list[str]) -> Iterable:
    """`vllm:spec_decode_*` with vLLM's names, HELP texts and labels
    (vllm/v1/spec_decode/metrics.py): every position 0 .. K-1 from the start, as vLLM has them."""
    from prometheus_client.core import CounterMetricFamily

    for name, doc, value in (
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", spec.drafts),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", spec.draft_tokens),
        ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", spec.accepted),
    ):
        c = CounterMetricFamily(name, doc, labels=names)
        c.add_metric(values, value)
        yield c
    per_pos = CounterMetricFamily(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        labels=[*names, "position"],
    )
    for position, n in enumerate(spec.accepted_per_pos):
        per_pos.add_metric([*values, str(position)], n)
    yield per_pos


def _nixl_families(kv: TransferCounts, names: list[str], values: list[str]) -> Iterable:
    """`vllm:nixl_*` with the NIXL connector's names and HELP texts
    (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py, vLLM 0.32)."""
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    for name, doc, h in (
        (
            "vllm:nixl_xfer_time_seconds",
            "Histogram of transfer duration for NIXL KV Cache transfers.",
            kv.xfer_time,
        ),
        (
            "vllm:nixl_bytes_transferred",
            "Histogram of bytes transferred per NIXL KV Cache transfers.",
            kv.bytes_transferred,
        ),
        (
            "vllm:nixl_num_descriptors",
            "Histogram of number of descriptors per NIXL  KV Cache transfers.",
            kv.descriptors,
        ),
    ):
        fam = HistogramMetricFamily(name, doc, labels=names)
        fam.add_metric(values, h.cumulative(), h.total)
        yield fam
    failed = CounterMetricFamily(
        "vllm:nixl_num_failed_transfers",
        "Number of failed NIXL KV Cache transfers, including handshake and notification "
        "failures. NOTE: KV expiry is tracked separately in vllm:nixl_num_kv_expired_reqs.",
        labels=names,
    )
    failed.add_metric(values, kv.failed)
    yield failed


def _sim_families(steps: StepCounts, names: list[str], values: list[str]) -> Iterable:
    """The simulator's own counters (`vllm_sim:`, no vLLM has them): the truth about its engine
    steps that bench/diagnosis_accuracy.py judges the diagnosis against (docs/simulator.md)."""
    from prometheus_client.core import CounterMetricFamily

    for name, doc, value in (
        ("vllm_sim:engine_steps", "Engine steps run (simulator only).", steps.steps),
        (
            "vllm_sim:engine_step_seconds",
            "Modelled seconds of engine steps (simulator only).",
            steps.seconds,
        ),
        (
            "vllm_sim:engine_step_fixed_seconds",
            "The fixed part (--step-base) of those seconds (simulator only).",
            steps.fixed_seconds,
        ),
        (
            "vllm_sim:engine_steps_waiting",
            "Engine steps that left requests waiting (simulator only).",
            steps.waiting,
        ),
    ):
        c = CounterMetricFamily(name, doc, labels=names)
        c.add_metric(values, value)
        yield c
    blocked = CounterMetricFamily(
        "vllm_sim:engine_steps_blocked",
        "Engine steps that left requests waiting, by what kept the queue's head out: "
        + ", ".join(BLOCKED_BY)
        + " (each that would have stopped it; simulator only).",
        labels=[*names, "reason"],
    )
    for reason, n in steps.blocked.items():
        blocked.add_metric([*values, reason], n)
    yield blocked
    full = CounterMetricFamily(
        "vllm_sim:engine_steps_full",
        "Engine steps planned at a limit, requests waiting or not: the batch at max_num_seqs, "
        "the max_num_batched_tokens budget spent (simulator only).",
        labels=[*names, "limit"],
    )
    for limit, n in steps.full.items():
        full.add_metric([*values, limit], n)
    yield full


class MetricsExporter:
    """Owns the simulator's CollectorRegistry (never the global one) and renders it."""

    def __init__(
        self,
        stats: ServerStats,
        occupancy: Callable[[], Occupancy],
        model_name: str,
        cache_config: dict[str, str] | None = None,
    ) -> None:
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(VllmCollector(stats, occupancy, model_name, cache_config))

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
