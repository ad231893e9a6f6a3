"""The `/metrics` a synthetic run's server would have shown, scraped into `server_metrics.csv`,
for tests of the diagnosis and of the report's "Why it saturates" section.

The synthetic server (`synthetic.ServerModel`) runs up to `max_num_seqs` requests at once and
queues the rest: at any time the requests in flight, N(t), split into `running` = min(N, cap) and
`waiting` = N - running. Each scrape (every `interval` s) carries those gauges, the KV cache the
running requests hold (half their output generated, on average), and the counters a diagnosis
reads, integrated exactly between the requests' starts and ends: time in the batch and in the
queue (the `request_inference_time` and `request_queue_time` histograms' sums: Little's law then
gives the mean batch and queue), engine steps (one per ITL of the batch at the time) and the
tokens they carried (the batch's decode tokens, and each prompt at its first token). Nothing is
preempted. The columns follow docs/run-format.md; those left out are the ones the synthetic
server does not model (token totals, TTFT and E2E histograms).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .files import SPEC_POSITION_PREFIX

FETCH_S = 0.005  # how long each synthetic scrape took


def _cumulative(times: np.ndarray, rate_between: np.ndarray) -> np.ndarray:
    """The integral of a rate constant between consecutive `times`, at each of them."""
    return np.concatenate([[0.0], np.cumsum(rate_between * np.diff(times))])


def _count_until(sorted_times: np.ndarray, ts: np.ndarray) -> np.ndarray:
    return np.searchsorted(sorted_times, ts, side="right").astype(np.float64)


def scrape(
    requests: pd.DataFrame,
    server,
    input_tokens: int,
    output_tokens: int,
    speed: float,
    interval: float,
) -> pd.DataFrame:
    """`server_metrics.csv`'s rows for `requests` (start_ts, end_ts, ttft) served by `server` (a
    `synthetic.ServerModel`) at `speed` (the run's slowdown), scraped every `interval` s."""
    starts = np.sort(requests["start_ts"].to_numpy(np.float64))
    ends = np.sort(requests["end_ts"].to_numpy(np.float64))
    first = requests["start_ts"].to_numpy(np.float64) + requests["ttft"].to_numpy(np.float64)
    first = np.sort(first[~np.isnan(first)])
    times = np.concatenate([starts, ends])
    order = np.argsort(times, kind="stable")
    times = times[order]
    in_flight = np.cumsum(np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])[order])
    between = in_flight[:-1]  # the requests in flight from each event to the next
    running = np.minimum(between, server.max_num_seqs)
    waiting = between - running
    itl = server.base_itl_s * (1.0 + server.itl_growth_per_seq * running) * speed
    steps_per_s = np.where(running > 0, 1.0 / itl, 0.0)

    ts = np.arange(times[0] - interval, times[-1] + 2 * interval, interval)
    now = _count_until(starts, ts) - _count_until(ends, ts)
    running_now = np.minimum(now, server.max_num_seqs)
    blocks = math.ceil((input_tokens + output_tokens / 2) / server.block_size)

    def at(rate: np.ndarray) -> np.ndarray:
        return np.interp(ts, times, _cumulative(times, rate))

    frame = pd.DataFrame(
        {
            "ts": ts,
            "running": running_now,
            "waiting": now - running_now,
            "kv_cache_usage": np.minimum(1.0, running_now * blocks / server.kv_blocks),
            "preemptions_total": 0.0,
            "queue_time_sum": at(waiting),
            "queue_time_count": _count_until(first, ts),
            "waiting_capacity": now - running_now,
            "inference_time_sum": at(running),
            "inference_time_count": _count_until(ends, ts),
            "step_tokens_sum": at(steps_per_s * running) + input_tokens * _count_until(first, ts),
            "steps": at(steps_per_s),
        }
    )
    if server.speculation:
        restart = None if server.spec_restart_s is None else times[0] + server.spec_restart_s
        for column, values in _spec_counters(at(steps_per_s * running), server.speculation):
            frame[column] = _restarted(values, ts, restart)
    frame["fetch_s"] = FETCH_S
    return frame


def _spec_counters(drafts: np.ndarray, accepted_share: tuple[float, ...]):
    """vLLM's speculation counters (`run.server_metrics`'s columns) for `drafts` drafts of
    K = len(accepted_share) tokens, position i accepted in that share of them."""
    yield "spec_drafts", drafts
    yield "spec_draft_tokens", drafts * len(accepted_share)
    yield "spec_accepted_tokens", drafts * sum(accepted_share)
    for position, share in enumerate(accepted_share):
        yield f"{SPEC_POSITION_PREFIX}{position}", drafts * share


def _restarted(values: np.ndarray, ts: np.ndarray, at: float | None) -> np.ndarray:
    """A counter as a server restarted at `at` shows it: from 0 again there (None: never)."""
    if at is None:
        return values
    after = ts >= at
    if not after.any():
        return values
    return np.where(after, values - values[np.argmax(after)], values)


def scrape_status(samples: int, interval: float, server) -> dict:
    """run.json's `server_metrics` for a synthetic scrape: as `run.server_metrics.ScrapeStatus`,
    with the KV cache's size in `vllm:cache_config_info`'s labels."""
    return {
        "url": "synthetic://server/metrics",
        "interval": interval,
        "samples": samples,
        "errors": 0,
        "note": "",
        "cache_config": {
            "block_size": str(server.block_size),
            "num_gpu_blocks": str(server.kv_blocks),
            "cache_dtype": "auto",
        },
    }
