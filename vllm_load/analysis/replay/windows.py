"""A trace replay read over time: its figures per window along the replay.

The replay's time 0 is its level's start; windows of `length` seconds follow one another from
there to the end of its last request (the last window may be shorter: its figures are per
second of its own length). Per window [a, b):

- `scheduled`: the replay's requests due in it (`start_ts`, the request's scheduled time);
  `ended`: those that ended in it, `failed` of them the failures (a failure happens at its end);
- `in_flight`: requests sent and not yet ended (any level: what the server held), averaged over
  the window: their overlap with it / its length, each from its sending (`start_ts +
  queued_s`) to its end;
- `total_tok_per_s`, `output_tok_per_s`: the tokens the run's successful requests were served
  inside the window (`levels.window_rates`: each request's tokens spread over when they were
  done, as the server counts them), per second of it;
- TTFT, ITL and E2E p50 and p99 of the successful requests due in the window (ITL from their
  merged histograms); `late_p99`: the p99 of how late those requests were sent after their
  schedule (`queued_s`, every outcome);
- with the server's `/metrics`: its total and generated tok/s beside the client's over the
  part of the window between two scrapes (`server`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...run_format.stream_columns import StreamColumns
from ..levels import as_floats, group_percentiles
from ..levels.hist import hist_percentiles
from ..levels.spans import own_streams, success_spans
from ..levels.window_rates import work_in_window
from .server_rate import ServerSpan, ServerView

#: window lengths a replay is cut into, seconds: about a twelfth of it, rounded down to one
NICE_SECONDS: tuple[float, ...] = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
WINDOWS_WANTED = 12
#: at most this many windows, whatever length is asked (the table stays readable)
MAX_WINDOWS = 500


def window_length(span: float, asked: float | None = None) -> float:
    """The window length for a replay of `span` seconds: `asked` when given (but no more than
    `MAX_WINDOWS` windows), else the largest of `NICE_SECONDS` up to span / 12 (at least 1 s)."""
    if asked is not None and asked > 0:
        fewest = span / MAX_WINDOWS if span == span else 0.0
        return float(asked) if asked >= fewest else float(_nice_at_least(fewest))
    target = span / WINDOWS_WANTED if span == span else 0.0
    return float(max([s for s in NICE_SECONDS if s <= target], default=NICE_SECONDS[0]))


def _nice_at_least(seconds: float) -> float:
    return next((s for s in NICE_SECONDS if s >= seconds), math.ceil(seconds))


@dataclass(frozen=True)
class ReplayWindow:
    """One window of a replay (see the module doc); times in seconds since the replay started."""

    index: int
    start_s: float
    end_s: float
    trace_s: float  # the trace's time at the window's start (trace seconds)
    scheduled: int
    ended: int
    failed: int
    in_flight: float
    total_tok_per_s: float
    output_tok_per_s: float
    ttft_p50: float
    ttft_p99: float
    itl_p50: float
    itl_p99: float
    e2e_p50: float
    e2e_p99: float
    late_p99: float
    server: ServerSpan = ServerSpan()  # the server's tok/s beside the client's


def window_edges(t0: float, t1: float, length: float) -> np.ndarray:
    """Unix times of the edges of windows of `length` s from `t0` to `t1` (the last shorter)."""
    count = max(1, math.ceil((t1 - t0) / length - 1e-9))
    return (
        np.minimum(t0 + length * np.arange(count + 1), t1)
        if t1 > t0
        else np.array([t0, t0 + length])
    )


def _bins(times: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The window of each time ([a, b), the last window's end included; a time before the first
    window in the first: a load process whose clock runs a little behind); -1 when unknown."""
    idx = np.searchsorted(edges, times, side="right") - 1
    idx = np.clip(idx, 0, len(edges) - 2)
    return np.where(~np.isnan(times), idx, -1)


def _percentiles(values: np.ndarray, groups: np.ndarray, n: int, q: float) -> np.ndarray:
    """The `q`th percentile (linear, as every latency percentile) of `values` per group 0..n-1;
    NaN for a group without one."""
    keep = groups >= 0
    return group_percentiles(values[keep], groups[keep], n, (q / 100.0,))[:, 0]


def sent_spans(requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each request's sending (`start_ts + queued_s`, its schedule where `queued_s` is empty)
    and end, Unix seconds."""
    start = as_floats(requests["start_ts"])
    queued = as_floats(requests["queued_s"]) if "queued_s" in requests else np.zeros(len(start))
    return start + np.nan_to_num(queued), as_floats(requests["end_ts"])


def in_flight_mean(sent: np.ndarray, end: np.ndarray, a: float, b: float) -> float:
    """The mean number of requests sent and not yet ended over [a, b]."""
    overlap = np.clip(np.minimum(end, b) - np.maximum(sent, a), 0.0, None)
    return float(np.nansum(overlap)) / (b - a) if b > a else math.nan


def replay_windows(
    requests: pd.DataFrame,
    level: int,
    edges: np.ndarray,
    trace_start: float = 0.0,
    speed: float = 1.0,
    server: ServerView | None = None,
    streams: StreamColumns | None = None,
) -> list[ReplayWindow]:
    """The figures of each window between `edges` (Unix times) of the replay of `level` (see
    the module doc). `requests` is the run's whole requests frame, `streams` its parsed stream
    columns (`RunData.streams`; without them, the frame's own texts)."""
    n = len(edges) - 1
    t0 = float(edges[0])
    if streams is None:
        streams = own_streams(requests)
    in_level = as_floats(requests["level"]) == level
    mine = requests[in_level]
    start, end = as_floats(mine["start_ts"]), as_floats(mine["end_ts"])
    ok = as_floats(mine["ok"]) == 1
    queued = as_floats(mine["queued_s"]) if "queued_s" in mine else np.full(len(mine), np.nan)
    due, over = _bins(start, edges), _bins(end, edges)
    scheduled = np.bincount(due[due >= 0], minlength=n)
    ended = np.bincount(over[over >= 0], minlength=n)
    failed = np.bincount(over[(over >= 0) & ~ok], minlength=n)
    good = np.where(ok, due, -1)
    in_window = good >= 0
    itl = streams.itl.merge(np.flatnonzero(in_level)[in_window], good[in_window], n)
    itl_q = hist_percentiles(itl, (50.0, 99.0))
    ttft, e2e = as_floats(mine["ttft"]), as_floats(mine["e2e"])
    stats = {
        "ttft_p50": _percentiles(ttft, good, n, 50),
        "ttft_p99": _percentiles(ttft, good, n, 99),
        "e2e_p50": _percentiles(e2e, good, n, 50),
        "e2e_p99": _percentiles(e2e, good, n, 99),
        "late_p99": _percentiles(queued, due, n, 99),
    }

    sent, every_end = sent_spans(requests)
    spans = success_spans(requests, streams=streams)
    out = []
    for i in range(n):
        a, b = float(edges[i]), float(edges[i + 1])
        length = b - a
        work = work_in_window(spans, a, b)
        out.append(
            ReplayWindow(
                index=i,
                start_s=a - t0,
                end_s=b - t0,
                trace_s=trace_start + (a - t0) * speed,
                scheduled=int(scheduled[i]),
                ended=int(ended[i]),
                failed=int(failed[i]),
                in_flight=in_flight_mean(sent, every_end, a, b),
                total_tok_per_s=(work.prompt_tokens + work.output_tokens) / length,
                output_tok_per_s=work.output_tokens / length,
                itl_p50=float(itl_q[i, 0]),
                itl_p99=float(itl_q[i, 1]),
                **{k: float(v[i]) for k, v in stats.items()},
                server=server.over(a, b) if server is not None else ServerSpan(),
            )
        )
    return out
