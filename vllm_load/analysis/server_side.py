"""The server's own view of a run, from `server_metrics.csv`, checked against the client's.

Per level, over the same measured window as the client's figures:

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

import os

import numpy as np
import pandas as pd

TOLERANCE = 0.02  # client vs server generated tokens
CONCURRENCY_TOLERANCE = 0.05
TTFT_TOLERANCE = 0.05
TTFT_FLOOR = 0.010  # s: a TTFT difference smaller than this (a client's own request write and read) is no disagreement
MIN_INTERVALS = 4  # a window shorter than this many scrape intervals is too short to compare
EDGE_SHARE = 0.01  # the edge samples' dating may blur this share of the window, at most (half the tolerance)
GAUGE_POINTS = 200  # points a gauge is averaged over within a window

#: why the client's and the server's figures can differ, for the report
DISAGREEMENT_CAUSES = (
    "other traffic on the server during the window (another client, a health check that generates)",
    "requests the client cut off or never recorded (a run stopped mid-level; failures without usage)",
    "window edges between two scrapes: counters are interpolated linearly inside a scrape interval",
    "a client that read late (see client health): its chunk times, and so its windows, shift",
)


def read_server_metrics(path: str) -> pd.DataFrame | None:
    """`server_metrics.csv` sorted by time; None when absent or empty."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    frame = pd.read_csv(path)
    if frame.empty or "ts" not in frame.columns:
        return None
    return frame.sort_values("ts").reset_index(drop=True)


def scrape_interval(server: pd.DataFrame, configured: float | None = None) -> float:
    """The scrape interval: as configured (run.json), else the median gap between samples."""
    if configured and configured > 0:
        return float(configured)
    gaps = np.diff(server["ts"].to_numpy(np.float64))
    return float(np.median(gaps)) if len(gaps) else np.nan


def _column(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    if column not in frame:
        return np.array([]), np.array([])
    t = frame["ts"].to_numpy(np.float64)
    v = pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)
    ok = ~np.isnan(v)
    return t[ok], v[ok]


def counter_delta(frame: pd.DataFrame, column: str, a: float, b: float) -> float:
    """How much a counter grew over [a, b], interpolated between samples; NaN when the samples
    do not cover both edges."""
    t, v = _column(frame, column)
    if len(t) < 2 or not (a == a and b == b) or a < t[0] or b > t[-1]:
        return np.nan
    return float(np.interp(b, t, v) - np.interp(a, t, v))


def gauge_mean(frame: pd.DataFrame, column: str, a: float, b: float) -> float:
    """A gauge's mean over [a, b], linear between samples; NaN without samples around it."""
    t, v = _column(frame, column)
    if len(t) < 2 or not (a == a and b == b) or b <= a or a < t[0] or b > t[-1]:
        inside = v[(t >= a) & (t <= b)] if len(t) else v
        return float(inside.mean()) if len(inside) else np.nan
    return float(np.interp(np.linspace(a, b, GAUGE_POINTS), t, v).mean())


def resolvable(server: pd.DataFrame, a: float, b: float, step: float) -> str:
    """Why the samples cannot resolve the window [a, b] ("" when they can).

    The window must span `MIN_INTERVALS` of the gaps between the samples around and inside it
    (the configured interval, or the real gaps where a busy load process scraped late), and the
    dating of its edge samples must blur at most `EDGE_SHARE` of it."""
    window = b - a
    if not (window == window and step == step):
        return "no measured window"
    t = server["ts"].to_numpy(np.float64)
    lo, hi = np.searchsorted(t, a) - 1, np.searchsorted(t, b)
    if lo < 0 or hi >= len(t):
        return "the scrapes do not cover the window"
    gap = max(float(np.diff(t[lo:hi + 1]).max()), step)
    if window < MIN_INTERVALS * gap:
        spacing = f"{step:g} s scrape intervals" if gap <= 1.5 * step else f"scrapes {gap:.2f} s apart (every {step:g} s asked)"
        return f"window {window:.2f} s < {MIN_INTERVALS} × {spacing}"
    if "fetch_s" in server:
        fetch = pd.to_numeric(server["fetch_s"], errors="coerce").to_numpy(np.float64)
        blur = np.nansum([max(fetch[lo], fetch[lo + 1]), max(fetch[hi - 1], fetch[hi])]) / 2
        if blur > EDGE_SHARE * window:
            return (f"scrapes at the window's edges are dated to ±{blur * 1000:.0f} ms in all, "
                    f"> {EDGE_SHARE:.0%} of its {window:.2f} s")
    return ""


def _relative(server: float, client: float) -> float:
    return server / client - 1.0 if client and client == client and server == server else np.nan


def client_ttft_in_windows(requests: pd.DataFrame | None, metrics: pd.DataFrame) -> np.ndarray:
    """Per level: mean TTFT of the successful requests (any level) whose first content chunk
    came inside the level's window, the requests the server's TTFT histogram saw then."""
    out = np.full(len(metrics), np.nan)
    if requests is None or requests.empty:
        return out
    ok = pd.to_numeric(requests["ok"], errors="coerce").to_numpy() == 1
    start = pd.to_numeric(requests["start_ts"], errors="coerce").to_numpy(np.float64)[ok]
    ttft = pd.to_numeric(requests["ttft"], errors="coerce").to_numpy(np.float64)[ok]
    first = start + ttft
    for i, (a, b) in enumerate(zip(metrics["window_start"], metrics["window_end"])):
        inside = (first > a) & (first <= b)
        if inside.any():
            out[i] = float(ttft[inside].mean())
    return out


def client_in_system(requests: pd.DataFrame | None, metrics: pd.DataFrame) -> np.ndarray:
    """Per level: the summed E2E of the successful requests (any level) that ended inside the
    window, over its length: Little's law on the client's side, as the server's `e2e_sum` gives it."""
    out = np.full(len(metrics), np.nan)
    if requests is None or requests.empty or "e2e" not in requests:
        return out
    ok = pd.to_numeric(requests["ok"], errors="coerce").to_numpy() == 1
    end = pd.to_numeric(requests["end_ts"], errors="coerce").to_numpy(np.float64)[ok]
    e2e = pd.to_numeric(requests["e2e"], errors="coerce").to_numpy(np.float64)[ok]
    for i, (a, b) in enumerate(zip(metrics["window_start"], metrics["window_end"])):
        if b > a:
            out[i] = float(np.nansum(e2e[(end > a) & (end <= b)])) / (b - a)
    return out


def level_server_figures(server: pd.DataFrame, metrics: pd.DataFrame, requests: pd.DataFrame | None = None,
                         interval: float | None = None, tolerance: float = TOLERANCE) -> pd.DataFrame:
    """Per level: the server's figures over the measured window beside the client's, their
    relative differences, whether the window is long enough to compare (`comparable`) and
    whether the figures disagree beyond tolerance (`disagrees`, only where comparable)."""
    step = scrape_interval(server, interval)
    client_ttft = client_ttft_in_windows(requests, metrics)
    client_little = client_in_system(requests, metrics)
    t_last = server["ts"].to_numpy(np.float64)[-1] if len(server) else np.nan
    rows = []
    for i, rec in enumerate(metrics.to_dict("records")):
        a, b = rec["window_start"], rec["window_end"]
        window = b - a if a == a and b == b else np.nan
        why_not = resolvable(server, a, b, step)
        comparable = not why_not
        gen = counter_delta(server, "generation_tokens_total", a, b) / window if window == window else np.nan
        running, waiting = gauge_mean(server, "running", a, b), gauge_mean(server, "waiting", a, b)
        in_server = running + (waiting if waiting == waiting else 0.0)
        ttft_n = counter_delta(server, "ttft_count", a, b)
        server_ttft = counter_delta(server, "ttft_sum", a, b) / ttft_n if ttft_n and ttft_n == ttft_n else np.nan
        diff = _relative(gen, rec["output_tok_per_s"])
        server_little = counter_delta(server, "e2e_sum", a, b) / window if window == window else np.nan
        if server_little == server_little:  # the server's latency histogram: Little's law on both sides
            conc_diff = _relative(client_little[i], server_little)
        else:
            conc_diff = _relative(rec["achieved_concurrency"], in_server)
        ttft_diff = _relative(client_ttft[i], server_ttft)
        start, end = rec["level_start"], rec["level_end"] if rec["level_end"] == rec["level_end"] else t_last
        rows.append({
            "level": rec["level"], "users": rec["users"], "window_s": window, "comparable": comparable,
            "not_comparable_reason": why_not,
            "server_gen_tok_per_s": gen, "client_output_tok_per_s": rec["output_tok_per_s"], "difference": diff,
            "running_mean": running, "waiting_mean": waiting,
            "achieved_concurrency": rec["achieved_concurrency"],
            "server_in_system": server_little, "client_in_system": client_little[i],
            "concurrency_difference": conc_diff,
            "server_ttft_mean": server_ttft, "client_ttft_mean": client_ttft[i], "ttft_difference": ttft_diff,
            "prefix_cache_hits": counter_delta(server, "prefix_cache_hits", a, b),
            "prefix_cache_queries": counter_delta(server, "prefix_cache_queries", a, b),
            "disagrees": bool(comparable and diff == diff and abs(diff) > tolerance),
            "concurrency_disagrees": bool(comparable and conc_diff == conc_diff
                                          and abs(conc_diff) > CONCURRENCY_TOLERANCE),
            "ttft_disagrees": bool(comparable and ttft_diff == ttft_diff and abs(ttft_diff) > TTFT_TOLERANCE
                                   and abs(client_ttft[i] - server_ttft) > TTFT_FLOOR),
            "kv_cache_usage_max": _level_max(server, "kv_cache_usage", start, end),
            "preemptions": counter_delta(server, "preemptions_total", start, min(end, t_last)),
        })
    frame = pd.DataFrame(rows)
    if len(frame):
        frame["flagged"] = frame["disagrees"] | frame["concurrency_disagrees"] | frame["ttft_disagrees"]
        frame["too_short"] = ~frame["comparable"]
    return frame


def _level_max(server: pd.DataFrame, column: str, start: float, end: float) -> float:
    t, v = _column(server, column)
    inside = v[(t >= start) & (t <= end)]
    return float(inside.max()) if len(inside) else np.nan


def run_token_check(server: pd.DataFrame, requests: pd.DataFrame) -> dict:
    """Generated tokens the server counted over the whole run against the completions the client
    received (usage counts of every request); exact when nothing else used the server."""
    gen = pd.to_numeric(server["generation_tokens_total"], errors="coerce").dropna()
    server_tokens = float(gen.iloc[-1] - gen.iloc[0]) if len(gen) >= 2 else np.nan
    client_tokens = float(pd.to_numeric(requests["completion_tokens"], errors="coerce").fillna(0).sum())
    diff = server_tokens / client_tokens - 1.0 if client_tokens else np.nan
    return {"server_generation_tokens": server_tokens, "client_completion_tokens": client_tokens, "difference": diff}
