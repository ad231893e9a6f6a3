"""Scraping the target's Prometheus `/metrics` during a run into `server_metrics.csv`.

vLLM exposes its scheduler state (running and waiting requests, KV-cache usage, preemptions)
and token counters there; the report plots them against the levels and checks the server's
generated-token rate against the client's measurement. Parsing uses prometheus-client's text
parser. Samples of every label set for the tested model are summed (vLLM has one per engine).
A target without `/metrics` is noted and skipped, never an error.
"""

from __future__ import annotations

import csv
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from ..run_format.files import SPEC_POSITION_PREFIX, spec_position_columns
from ..server.control import auth_headers

#: column -> sample names, newest vLLM name first (older releases called KV usage gpu_cache_usage_perc).
#: Sample names, not family names: prometheus-client's parser strips `_total` from a counter's
#: family name (`vllm:prefix_cache_hits`) but its samples keep it (`vllm:prefix_cache_hits_total`),
#: as in vLLM 0.32's exposition (tests/data/vllm_0.32.0_cpu_metrics.txt). `ttft_sum`/`ttft_count`
#: are the server's TTFT histogram sum and count, for its mean TTFT over a window; `e2e_sum`/`e2e_count`
#: its request-latency histogram, for requests in the server by Little's law; `queue_time_sum`/
#: `queue_time_count` its queue-time histogram (arrival to first scheduled), the evidence for a
#: queue; the prefix-cache counters count tokens (queried, and found in the cache).
COLUMNS: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "prompt_tokens_total": ("vllm:prompt_tokens_total",),
    "generation_tokens_total": ("vllm:generation_tokens_total",),
    "preemptions_total": ("vllm:num_preemptions_total",),
    "ttft_sum": ("vllm:time_to_first_token_seconds_sum",),
    "ttft_count": ("vllm:time_to_first_token_seconds_count",),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total",),
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total",),
    "e2e_sum": ("vllm:e2e_request_latency_seconds_sum",),
    "e2e_count": ("vllm:e2e_request_latency_seconds_count",),
    "queue_time_sum": ("vllm:request_queue_time_seconds_sum",),
    "queue_time_count": ("vllm:request_queue_time_seconds_count",),
    # what a bottleneck verdict reads (analysis/diagnosis): requests waiting for capacity (a full
    # batch or a full KV cache), time in RUNNING (Little's law: requests in the batch), prefill
    # time (first scheduled to first token), tokens and count of engine steps
    "waiting_capacity": ('vllm:num_requests_waiting_by_reason{reason="capacity"}',),
    "inference_time_sum": ("vllm:request_inference_time_seconds_sum",),
    "inference_time_count": ("vllm:request_inference_time_seconds_count",),
    "prefill_time_sum": ("vllm:request_prefill_time_seconds_sum",),
    "prefill_time_count": ("vllm:request_prefill_time_seconds_count",),
    "step_tokens_sum": ("vllm:iteration_tokens_total_sum",),
    "steps": ("vllm:iteration_tokens_total_count",),
    # speculative decoding (vllm/v1/spec_decode/metrics.py), only on a server started with it:
    # drafts verified (one per sequence per step), their tokens, the tokens accepted
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
    # KV transfers of a disaggregated deployment, on the instance that reads the blocks (NIXL
    # connector, vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py): transfers and their
    # summed duration (posted to done), summed bytes
    "kv_xfer_sum": ("vllm:nixl_xfer_time_seconds_sum",),
    "kv_xfer_count": ("vllm:nixl_xfer_time_seconds_count",),
    "kv_bytes_sum": ("vllm:nixl_bytes_transferred_sum",),
}
#: ... and per draft position (label `position`, 0 .. K-1): drafts whose token there was
#: accepted, one column each (`SPEC_POSITION_PREFIX` + position), as many as the first scrape has
SPEC_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
#: the labels of vLLM's `vllm:cache_config_info` a diagnosis reads (the KV cache's size)
CACHE_CONFIG_INFO = "vllm:cache_config_info"
#: a sample labelled with one of these is also summed under `name{label="value"}`
SPLIT_LABELS = ("reason", "position")
HEADER = ("ts", *COLUMNS, "fetch_s")
#: the scrapes the scraper keeps in memory for the live verdict (`run.live_verdict`): 15 min at 1 s
RECENT = 900


#: the sample names `parse_exposition` reads
WANTED = frozenset(
    {n.split("{")[0] for names in COLUMNS.values() for n in names}
    | {CACHE_CONFIG_INFO, SPEC_PER_POSITION}
)


def _wanted_lines(text: str) -> str:
    """The exposition's sample lines `parse_exposition` reads, and no other. A parse of a whole
    exposition took 12 ms (the simulator's; 9 ms of most of a real vLLM's), most of it in
    histogram buckets nobody reads, and it runs in a load process's event loop, where it held a
    trace replay's requests back: 6 ms late at p99 with 2 scrapes a second. Without its HELP and
    TYPE lines a sample keeps its full name, which is what `COLUMNS` names."""
    keep = []
    for line in text.split("\n"):
        if not line or line[0] == "#":
            continue
        brace, space = line.find("{"), line.find(" ")
        end = brace if 0 <= brace < space or space < 0 else space
        if line[:end] in WANTED:
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_metrics(text: str, model: str | None = None) -> dict[str, float]:
    """The `COLUMNS` figures of one exposition, summed over label sets (of `model` when given)."""
    return parse_exposition(text, model)[0]


def parse_exposition(
    text: str, model: str | None = None
) -> tuple[dict[str, float], dict[str, str]]:
    """The `COLUMNS` figures of one exposition, summed over label sets (of `model` when given),
    and the labels of its `vllm:cache_config_info` ({} without one; the first engine's)."""
    sums: dict[str, float] = {}
    cache_config: dict[str, str] = {}
    for family in text_string_to_metric_families(_wanted_lines(text)):
        for sample in family.samples:
            if model and sample.labels.get("model_name", model) != model:
                continue
            if sample.name == CACHE_CONFIG_INFO and not cache_config:
                cache_config = dict(sample.labels)
            sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
            for label in SPLIT_LABELS:
                if label in sample.labels:
                    key = f'{sample.name}{{{label}="{sample.labels[label]}"}}'
                    sums[key] = sums.get(key, 0.0) + float(sample.value)
    out = {}
    for column, names in COLUMNS.items():
        out[column] = next((sums[n] for n in names if n in sums), float("nan"))
    out.update(_spec_positions(sums))
    return out, cache_config


def _spec_positions(sums: dict[str, float]) -> dict[str, float]:
    """The per-position acceptance counters as `spec_accepted_pos_<i>` columns, by position."""
    found = {}
    head = SPEC_PER_POSITION + '{position="'
    for key, value in sums.items():
        if key.startswith(head) and key[len(head) : -2].isdigit():
            found[int(key[len(head) : -2])] = value
    return {f"{SPEC_POSITION_PREFIX}{p}": found[p] for p in sorted(found)}


@dataclass
class ScrapeStatus:
    """What happened to scraping in one run, recorded in run.json."""

    url: str
    interval: float
    samples: int = 0
    errors: int = 0
    note: str = ""
    #: `vllm:cache_config_info`'s labels at the first scrape (the KV cache's blocks, block size,
    #: size in tokens, maximum concurrency): what the server says it is configured with
    cache_config: dict[str, str] = field(default_factory=dict)


class MetricsScraper:
    """Fetches `/metrics` every `interval` seconds and appends a row per scrape to the CSV.

    `run()` loops until `stop()`; it is a plain blocking loop, meant for a greenlet in the
    Locust master (gevent makes its socket and sleep cooperative) or a thread. The last `RECENT`
    scrapes stay in memory too (`recent`: their time and figures, as written), for the web UI's
    live verdict.
    """

    def __init__(
        self,
        host: str,
        path: str,
        interval: float = 1.0,
        model: str | None = None,
        api_key: str | None = None,
    ):
        self.url = host.rstrip("/") + "/metrics"
        self.path = path
        self.model = model
        self.headers = auth_headers(api_key)
        self.status = ScrapeStatus(url=self.url, interval=interval)
        self.sent_at = 0.0
        self.fetch_s = 0.0  # how long the last scrape took: how uncertain its time is
        self.recent: deque[tuple[float, dict[str, float]]] = deque(maxlen=RECENT)
        self._stopped = False

    def fetch(self) -> dict[str, float] | None:
        """One scrape; None (with the status noted) when the target has no usable /metrics.

        The server reads its counters somewhere between `sent_at` and the answer's arrival
        (`fetch_s` later; a busy server or load process makes that tens of ms): a sample is
        dated halfway, to within `fetch_s / 2`, and parsing is not part of it."""
        self.sent_at = time.time()
        try:
            req = urllib.request.Request(self.url, headers=self.headers)
            with urllib.request.urlopen(req, timeout=max(self.status.interval * 5, 5.0)) as resp:
                text = resp.read().decode("utf-8", "replace")
            self.fetch_s = time.time() - self.sent_at
        except urllib.error.HTTPError as e:
            self.status.errors += 1
            self.status.note = f"{self.url} answered HTTP {e.code}"
            return None
        except (OSError, urllib.error.URLError) as e:
            self.status.errors += 1
            self.status.note = f"{self.url}: {e}"
            return None
        try:
            values, cache_config = parse_exposition(text, self.model)
        except ValueError as e:
            self.status.errors += 1
            self.status.note = f"{self.url}: not Prometheus text ({e})"
            return None
        if all(v != v for v in values.values()):
            self.status.note = f"{self.url} has none of vLLM's metrics"
            return None
        if cache_config and not self.status.cache_config:
            self.status.cache_config = cache_config
        return values

    def run(self, sleep=time.sleep) -> None:
        first = self.fetch()
        if first is None and self.status.samples == 0:
            self.status.note = f"server metrics skipped: {self.status.note}"
            return
        # a speculating server's positions are all there from its start: the first scrape's
        positions = spec_position_columns(first or {})
        columns = (*COLUMNS, *positions)
        with open(self.path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow((*HEADER[:-1], *positions, HEADER[-1]))
            values = first
            while True:
                if values is not None:
                    # dated halfway through the scrape: the server read its counters in it
                    at = self.sent_at + self.fetch_s / 2
                    writer.writerow(
                        [
                            f"{at:.4f}",
                            *(_cell(values.get(c, float("nan"))) for c in columns),
                            f"{self.fetch_s:.4f}",
                        ]
                    )
                    fh.flush()
                    self.recent.append((at, values))
                    self.status.samples += 1
                if self._stopped:
                    return
                sleep(self.status.interval)
                values = self.fetch()

    def stop(self) -> None:
        self._stopped = True


def _cell(value: float) -> str:
    return "" if value != value else repr(float(value))
