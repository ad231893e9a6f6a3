"""What the simulator counts while it serves, and its `/metrics` exposition with vLLM's names.

Counting is plain attribute arithmetic and bucket arrays on the hot path; prometheus-client
only formats the numbers (a custom collector on the simulator's own registry) when `/metrics`
is scraped, so a busy step does not pay a lock per observation.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Callable, Iterable

# vLLM's bucket boundaries (vllm/v1/metrics/loggers.py)
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


@dataclass
class ServerStats:
    """Counters and latency histograms of one simulator process."""

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


@dataclass(frozen=True)
class Occupancy:
    """The gauges: what is in the engine right now."""

    running: int
    waiting: int
    kv_cache_usage: float  # 0..1


class VllmCollector:
    """Yields the simulator's numbers as vLLM-named metric families for prometheus-client."""

    def __init__(
        self, stats: ServerStats, occupancy: Callable[[], Occupancy], model_name: str
    ) -> None:
        self.stats = stats
        self.occupancy = occupancy
        self.labels = {"model_name": model_name, "engine": "0"}

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
        yield gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            occ.kv_cache_usage,
        )
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens)
        yield counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens
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
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        for reason, n in s.requests_ok.items():
            success.add_metric([*values, reason], n)
        yield success
        yield histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            s.ttft,
        )
        yield histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            s.itl,
        )
        yield histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            s.e2e,
        )
        yield histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            s.queue_time,
        )


class MetricsExporter:
    """Owns the simulator's CollectorRegistry (never the global one) and renders it."""

    def __init__(
        self, stats: ServerStats, occupancy: Callable[[], Occupancy], model_name: str
    ) -> None:
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(VllmCollector(stats, occupancy, model_name))

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
