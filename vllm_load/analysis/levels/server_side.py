"""The server's own view of a run, from `server_metrics.csv`, checked against the client's.

Per level, over the part of the measured window between two scrapes (no interpolation: requests
finish and start in closed-loop waves, and a latency sum's jump spread over a scrape interval
that the window's edge cuts reads as a difference that is not there), the client's figures
recomputed over exactly that span:

- generated tokens/s: `generation_tokens_total` interpolated linearly at the window's edges,
  against the client's output tok/s (which counts the tokens generated inside the window,
  `window_rates`);
- requests in the server: by Little's law, the server's summed request latency
  (`e2e_sum`) of the requests that ended in the window over its length, against the same sum of
  the client's own E2E (what the client's concurrency accounting says); and the `running` and
  `waiting` gauges averaged over the window beside the client's achieved concurrency. The
  gauges are updated when an engine step ends: on a CPU, where one 2048-token prefill is a
  ~1.6 s step, vLLM 0.32 read 0.5 running at 1 user with a request always in flight, so they
  are shown, and judged only where the server has no latency histogram;
- mean TTFT: the server's TTFT histogram (`ttft_sum`/`ttft_count`) over the window, against the
  mean TTFT of the client's requests whose first chunk came inside it (the same requests);
- prefix-cache hits and queries over the window.

A comparison needs samples that can place the window's edges: counters are read every
`interval` seconds and interpolated in between, and each sample is dated when its request went
out and its answer came, to within half the time the scrape took (`fetch_s`). A window shorter
than `MIN_INTERVALS` scrape gaps (as configured, or as they were where a busy load process
scraped late), or whose edge samples are dated less precisely than `EDGE_SHARE` of it, is not
resolvable: it reads "too short to
compare" with the reason, never a disagreement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...run_format.optional_csv import CsvRead, read_optional_csv
from ...run_format.stream_columns import StreamColumns
from ..frame_records import row_dicts
from .scrapes import counter_delta, gauge_mean, samples_max
from .spans import success_spans
from .window_rates import RequestSpans, work_in_window

TOLERANCE = 0.02  # client vs server generated tokens
CONCURRENCY_TOLERANCE = 0.05
TTFT_TOLERANCE = 0.05
TTFT_FLOOR = 0.010  # s: a TTFT difference smaller than this (a client's own request write and read) is no disagreement
MIN_INTERVALS = 4  # a window shorter than this many scrape intervals is too short to compare
EVENT_MARGIN = (
    0.005  # s: a client event this close to a scrape (beyond its dating blur) is too close to call
)
EDGE_SHARE = (
    0.01  # the edge samples' dating may blur this share of the window, at most (half the tolerance)
)

#: why the client's and the server's figures can differ, for the report
DISAGREEMENT_CAUSES = (
    "other traffic on the server during the window (another client, a health check that generates)",
    "requests the client cut off or never recorded (a run stopped mid-level; failures without usage)",
    "window edges between two scrapes: counters are interpolated linearly inside a scrape interval",
    "a client that read late (see client health): its chunk times, and so its windows, shift",
)


def read_server_metrics(path: str) -> CsvRead:
    """`server_metrics.csv` sorted by time (None when absent or empty), its bad lines skipped
    and counted in the note."""
    read = read_optional_csv(path, ("ts",))
    if read.frame is None:
        return read
    return CsvRead(read.frame.sort_values("ts").reset_index(drop=True), read.note)


def scrape_interval(server: pd.DataFrame, configured: float | None = None) -> float:
    """The scrape interval: as configured (run.json), else the median gap between samples."""
    if configured and configured > 0:
        return float(configured)
    gaps = np.diff(server["ts"].to_numpy(np.float64))
    return float(np.median(gaps)) if len(gaps) else np.nan


def scrape_window(
    server: pd.DataFrame, a: float, b: float, events: np.ndarray | None = None
) -> tuple[int, int]:
    """Indices of the first scrape at or after `a` and the last at or before `b` ((-1, -1) when
    fewer than two scrapes inside the window are left). Comparing between two scrapes needs no interpolation:
    requests finish (and get their first token) in closed-loop waves, and a wave's jump in a
    latency sum spread linearly over a scrape interval cut by the window's edge reads as a
    difference that is not there.

    A scrape is dated to within half its fetch time: one with a client event (`events`: request
    ends and first chunks) that close cannot tell on which side the server counted it, so the
    edges move inward past such scrapes."""
    if not (a == a and b == b) or len(server) < 2:
        return -1, -1
    t = server["ts"].to_numpy(np.float64)
    lo, hi = int(np.searchsorted(t, a, "left")), int(np.searchsorted(t, b, "right")) - 1
    if events is not None and len(events) and "fetch_s" in server:
        events = np.sort(events[~np.isnan(events)])
        blur = (
            np.nan_to_num(pd.to_numeric(server["fetch_s"], errors="coerce").to_numpy(np.float64))
            / 2
            + EVENT_MARGIN
        )

        def ambiguous(i: int) -> bool:
            j = np.searchsorted(events, t[i] - blur[i])
            return j < len(events) and events[j] <= t[i] + blur[i]

        while lo < hi and ambiguous(lo):
            lo += 1
        while hi > lo and ambiguous(hi):
            hi -= 1
    return (lo, hi) if 0 <= lo < hi < len(t) else (-1, -1)


def resolvable(server: pd.DataFrame, lo: int, hi: int, step: float) -> str:
    """Why the scrapes `lo` .. `hi` cannot resolve a comparison ("" when they can).

    The span must hold `MIN_INTERVALS` of the largest gap between its scrapes (the configured
    interval, or the real gap where a busy load process scraped late), and the dating of its two
    edge scrapes must blur at most `EDGE_SHARE` of it."""
    if lo < 0:
        return "fewer than two scrapes in the window can be dated apart from the client's requests"
    t = server["ts"].to_numpy(np.float64)
    window = t[hi] - t[lo]
    gap = max(float(np.diff(t[lo : hi + 1]).max()), step if step == step else 0.0)
    if window < MIN_INTERVALS * gap:
        spacing = (
            f"{step:g} s scrape intervals"
            if gap <= 1.5 * step
            else f"scrapes {gap:.2f} s apart (every {step:g} s asked)"
        )
        return f"window {window:.2f} s between scrapes < {MIN_INTERVALS} × {spacing}"
    if "fetch_s" in server:
        fetch = pd.to_numeric(server["fetch_s"], errors="coerce").to_numpy(np.float64)
        blur = np.nansum([fetch[lo], fetch[hi]]) / 2
        if blur > EDGE_SHARE * window:
            return (
                f"the scrapes at the window's edges are dated to ±{blur * 1000:.0f} ms in all, "
                f"> {EDGE_SHARE:.0%} of its {window:.2f} s"
            )
    return ""


def _relative(server: float, client: float) -> float:
    return server / client - 1.0 if client and client == client and server == server else np.nan


@dataclass(frozen=True)
class ClientRequests:
    """The client's requests as arrays, for its side of each comparison."""

    spans: RequestSpans  # successful requests, for output tokens in a window
    start: np.ndarray  # every request (any outcome), for requests in flight
    end: np.ndarray
    ok_first: np.ndarray  # successful requests: first content chunk, TTFT, end, E2E
    ok_ttft: np.ndarray
    ok_end: np.ndarray
    ok_e2e: np.ndarray

    @classmethod
    def of(cls, requests: pd.DataFrame, streams: StreamColumns | None = None) -> "ClientRequests":
        """`streams`: the requests' parsed chunk marks (`RunData.streams`); without them, the
        frame's own texts."""

        def num(column: str) -> np.ndarray:
            return pd.to_numeric(requests[column], errors="coerce").to_numpy(np.float64)

        ok = num("ok") == 1
        start, end, ttft = num("start_ts"), num("end_ts"), num("ttft")
        return cls(
            success_spans(requests, ok, streams),
            start,
            end,
            (start + ttft)[ok],
            ttft[ok],
            end[ok],
            (end - start)[ok],
        )

    def figures(self, a: float, b: float) -> dict:
        """Over (a, b]: output tok/s, requests in flight, Little's law and mean TTFT."""
        window = b - a
        first = (self.ok_first > a) & (self.ok_first <= b)
        in_flight = np.clip(np.minimum(self.end, b) - np.maximum(self.start, a), 0.0, None).sum()
        return {
            "client_output_tok_per_s": work_in_window(self.spans, a, b).output_tokens / window,
            "achieved_concurrency": float(in_flight) / window,
            "client_in_system": float(
                np.nansum(self.ok_e2e[(self.ok_end > a) & (self.ok_end <= b)])
            )
            / window,
            "client_ttft_mean": float(self.ok_ttft[first].mean()) if first.any() else np.nan,
        }


def level_server_figures(
    server: pd.DataFrame,
    metrics: pd.DataFrame,
    requests: pd.DataFrame | None = None,
    interval: float | None = None,
    tolerance: float = TOLERANCE,
    streams: StreamColumns | None = None,
) -> pd.DataFrame:
    """Per level: the server's figures beside the client's over the part of the measured window
    between two scrapes (`compare_start`, `compare_end`), their relative differences, whether the
    scrapes resolve it (`comparable`, else `not_comparable_reason`) and whether the figures
    disagree beyond tolerance (only where comparable). Without `requests`, the client's side is
    the level's own figures over the whole measured window; `streams`: the requests' parsed
    chunk marks (`RunData.streams`), else their own texts."""
    step = scrape_interval(server, interval)
    client = (
        ClientRequests.of(requests, streams) if requests is not None and len(requests) else None
    )
    events = np.concatenate([client.ok_end, client.ok_first]) if client is not None else None
    t = server["ts"].to_numpy(np.float64)
    t_last = t[-1] if len(t) else np.nan
    rows = []
    for rec in row_dicts(metrics):
        lo, hi = scrape_window(server, rec["window_start"], rec["window_end"], events)
        a, b = (t[lo], t[hi]) if lo >= 0 else (np.nan, np.nan)
        window = b - a
        why_not = resolvable(server, lo, hi, step)
        comparable = not why_not
        mine = {
            "client_output_tok_per_s": rec["output_tok_per_s"],
            "achieved_concurrency": rec["achieved_concurrency"],
            "client_in_system": np.nan,
            "client_ttft_mean": np.nan,
        }
        if client is not None and window > 0:
            mine = client.figures(a, b)
        gen = (
            counter_delta(server, "generation_tokens_total", a, b) / window
            if window > 0
            else np.nan
        )
        running, waiting = gauge_mean(server, "running", a, b), gauge_mean(server, "waiting", a, b)
        in_server = running + (waiting if waiting == waiting else 0.0)
        ttft_n = counter_delta(server, "ttft_count", a, b)
        server_ttft = (
            counter_delta(server, "ttft_sum", a, b) / ttft_n
            if ttft_n and ttft_n == ttft_n
            else np.nan
        )
        diff = _relative(gen, mine["client_output_tok_per_s"])
        server_little = counter_delta(server, "e2e_sum", a, b) / window if window > 0 else np.nan
        if server_little == server_little and mine["client_in_system"] == mine["client_in_system"]:
            conc_diff = _relative(
                mine["client_in_system"], server_little
            )  # Little's law on both sides
        else:
            conc_diff = _relative(mine["achieved_concurrency"], in_server)
        ttft_diff = _relative(mine["client_ttft_mean"], server_ttft)
        start, end = (
            rec["level_start"],
            rec["level_end"] if rec["level_end"] == rec["level_end"] else t_last,
        )
        rows.append(
            {
                "level": rec["level"],
                "users": rec["users"],  # Locust's users: the cap in a rate or trace level
                "value": rec.get("value", rec["users"]),  # the level's own (axis units)
                "window_s": rec["window_end"] - rec["window_start"],
                "compare_start": a,
                "compare_end": b,
                "compare_s": window,
                "comparable": comparable,
                "not_comparable_reason": why_not,
                "server_gen_tok_per_s": gen,
                "client_output_tok_per_s": mine["client_output_tok_per_s"],
                "difference": diff,
                "running_mean": running,
                "waiting_mean": waiting,
                "achieved_concurrency": mine["achieved_concurrency"],
                "server_in_system": server_little,
                "client_in_system": mine["client_in_system"],
                "concurrency_difference": conc_diff,
                "server_ttft_mean": server_ttft,
                "client_ttft_mean": mine["client_ttft_mean"],
                "ttft_difference": ttft_diff,
                **_prefix_cache(server, start, min(end, t_last)),
                "disagrees": bool(comparable and diff == diff and abs(diff) > tolerance),
                "concurrency_disagrees": bool(
                    comparable and conc_diff == conc_diff and abs(conc_diff) > CONCURRENCY_TOLERANCE
                ),
                "ttft_disagrees": bool(
                    comparable
                    and ttft_diff == ttft_diff
                    and abs(ttft_diff) > TTFT_TOLERANCE
                    and abs(mine["client_ttft_mean"] - server_ttft) > TTFT_FLOOR
                ),
                "kv_cache_usage_max": samples_max(server, "kv_cache_usage", start, end),
                "preemptions": counter_delta(server, "preemptions_total", start, min(end, t_last)),
            }
        )
    frame = pd.DataFrame(rows)
    if len(frame):
        frame["flagged"] = (
            frame["disagrees"] | frame["concurrency_disagrees"] | frame["ttft_disagrees"]
        )
        frame["too_short"] = ~frame["comparable"]
    return frame


def _prefix_cache(server: pd.DataFrame, start: float, end: float) -> dict[str, float]:
    """The prefix cache's hits and queries (tokens) over a level's whole span, and their ratio."""
    t = server["ts"].to_numpy(np.float64)
    if len(t):  # a level that began just before the first scrape: over the part scraped
        start = max(start, float(t[0]))
    hits = counter_delta(server, "prefix_cache_hits", start, end)
    queries = counter_delta(server, "prefix_cache_queries", start, end)
    return {
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "prefix_cache_hit_rate": hits / queries if queries and queries == queries else np.nan,
    }


def run_token_check(server: pd.DataFrame, requests: pd.DataFrame) -> dict:
    """Generated tokens the server counted over the whole run against the completions the client
    received (usage counts of every request); exact when nothing else used the server."""
    gen = pd.to_numeric(server["generation_tokens_total"], errors="coerce").dropna()
    server_tokens = float(gen.iloc[-1] - gen.iloc[0]) if len(gen) >= 2 else np.nan
    client_tokens = float(
        pd.to_numeric(requests["completion_tokens"], errors="coerce").fillna(0).sum()
    )
    diff = server_tokens / client_tokens - 1.0 if client_tokens else np.nan
    return {
        "server_generation_tokens": server_tokens,
        "client_completion_tokens": client_tokens,
        "difference": diff,
    }
