"""Per level: vllm-load's figures beside vLLM's own /metrics over the same measured window, and
beside `vllm bench serve` at the same concurrency.

The client side is `vllm_load.analysis.levels.measure_levels`, the server side
`vllm_load.analysis.server_side.level_server_figures` on the run's `server_metrics.csv`. What
that function does not return yet (see `interim_server_columns`) is computed here.
"""

from __future__ import annotations

import inspect
import math
import os

import numpy as np
import pandas as pd

from vllm_load.analysis import server_side
from vllm_load.analysis.levels import measure_levels
from vllm_load.analysis.rundir import load_run

#: the per-level columns `level_server_figures` is being extended to return (issue 21)
SERVER_COLUMNS = ("server_gen_tok_per_s", "client_output_tok_per_s", "difference", "running_mean",
                  "achieved_concurrency", "concurrency_difference", "server_ttft_mean", "client_ttft_mean",
                  "ttft_difference", "prefix_cache_hits", "prefix_cache_queries", "comparable")
#: a window shorter than this many scrape intervals cannot be compared with counters scraped at them
MIN_SCRAPES = 3


def interim_server_columns(figures: pd.DataFrame, metrics: pd.DataFrame, measured: pd.DataFrame,
                           server: pd.DataFrame, interval: float) -> pd.DataFrame:
    """INTERIM: fills in the `SERVER_COLUMNS` that `server_side.level_server_figures` does not
    return yet; delete once it returns them all (nothing here overrides a column it returns,
    except `running_mean`, which it averages over the whole level rather than the measured
    window until `concurrency_difference` appears beside it).

    Over each level's measured window: mean `num_requests_running` (scrapes inside the window),
    the server's mean TTFT (TTFT histogram sum and count, interpolated at the window's edges),
    prefix-cache hits and queries (tokens); the client's mean TTFT over its measured successful
    requests; `comparable` when the window spans at least `MIN_SCRAPES` scrape intervals.
    """
    out = figures.copy()
    new_api = "concurrency_difference" in figures.columns
    ts = server["ts"].to_numpy(np.float64)
    at = server_side._counter_at
    rows = metrics.set_index("level")
    ttft_client = measured.groupby("level")["ttft"].mean()
    for i, level in enumerate(out["level"].tolist()):
        rec = rows.loc[level]
        ws, we = float(rec["window_start"]), float(rec["window_end"])
        ok = ws == ws and we == we and we > ws

        def delta(col: str) -> float:
            if not ok or col not in server.columns:
                return math.nan
            return at(server, col, we) - at(server, col, ws)

        values = {}
        if not new_api:
            inside = server[(ts >= ws) & (ts <= we)] if ok else server.iloc[0:0]
            values["running_mean"] = float(inside["running"].mean()) if len(inside) else math.nan
            values["achieved_concurrency"] = float(rec["achieved_concurrency"])
        count = delta("ttft_count")
        values["server_ttft_mean"] = delta("ttft_sum") / count if count and count == count else math.nan
        values["client_ttft_mean"] = float(ttft_client.get(level, math.nan))
        values["prefix_cache_hits"] = delta("prefix_cache_hits")
        values["prefix_cache_queries"] = delta("prefix_cache_queries")
        values["comparable"] = bool(ok and (we - ws) >= MIN_SCRAPES * interval)
        for key, value in values.items():
            if key not in figures.columns or (key == "running_mean" and not new_api):
                out.loc[out.index[i], key] = value
    if "concurrency_difference" not in figures.columns:
        out["concurrency_difference"] = out["achieved_concurrency"] / out["running_mean"] - 1.0
    if "ttft_difference" not in figures.columns:
        out["ttft_difference"] = out["client_ttft_mean"] / out["server_ttft_mean"] - 1.0
    return out


def level_comparison(run_dir: str) -> tuple[pd.DataFrame, dict]:
    """One row per level of the run in `run_dir`: the `SERVER_COLUMNS` plus users, measured
    requests, token exactness, window length and `client_late` (when the run records it); and
    run-wide totals (prefix-cache hits over the whole run, server vs client generated tokens)."""
    data = load_run(run_dir)
    lm = measure_levels(data.requests, data.steps)
    metrics = lm.metrics
    server = server_side.read_server_metrics(os.path.join(run_dir, "server_metrics.csv"))
    if server is None:
        raise ValueError(f"{run_dir} has no server_metrics.csv: vllm-load did not scrape /metrics")
    interval = float((data.run.get("settings") or {}).get("metrics_interval", 1.0) or 1.0)
    if "requests" in inspect.signature(server_side.level_server_figures).parameters:
        # the extended function (main after af09c15): client TTFT and the scrape interval go in
        figures = server_side.level_server_figures(server, metrics, data.requests, interval)
    else:
        figures = server_side.level_server_figures(server, metrics)
    if any(c not in figures.columns for c in SERVER_COLUMNS):
        figures = interim_server_columns(figures, metrics, lm.measured, server, interval)
    keep = ["level", "measured", "ok", "window_s", "prompt_exact_share", "completion_exact_share"]
    keep = ["level"] + [c for c in keep if c not in figures.columns]
    table = figures.merge(metrics[keep], on="level", how="left")
    late = next((f["client_late"] for f in (figures, metrics) if "client_late" in f.columns), None)
    table["client_late"] = late.to_numpy() if late is not None else None
    totals = server_side.run_token_check(server, data.requests)
    hits = pd.to_numeric(server.get("prefix_cache_hits"), errors="coerce").dropna() if "prefix_cache_hits" in server else pd.Series([], dtype=float)
    queries = pd.to_numeric(server.get("prefix_cache_queries"), errors="coerce").dropna() if "prefix_cache_queries" in server else pd.Series([], dtype=float)
    totals["run_prefix_cache_hits"] = float(hits.iloc[-1] - hits.iloc[0]) if len(hits) >= 2 else math.nan
    totals["run_prefix_cache_queries"] = float(queries.iloc[-1] - queries.iloc[0]) if len(queries) >= 2 else math.nan
    totals["requests"] = int(len(data.requests))
    totals["failed"] = int((pd.to_numeric(data.requests["ok"], errors="coerce") != 1).sum())
    totals["requests_abandoned"] = data.run.get("requests_abandoned")  # cut off at the end: no rows
    return table, totals


def _f(value, spec: str, scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value * scale, spec)


def format_table(label: str, table: pd.DataFrame, bench: dict[int, dict]) -> str:
    """The side-by-side text table of one mode (and `vllm bench serve` per users, if run)."""
    head = ["users", "meas", "out tok/s client", "server", "diff %", "achieved", "running", "diff %",
            "TTFT ms client", "server", "diff %", "prefix hits/queries", "exact", "window s", "note"]
    if bench:
        head += ["bench out tok/s", "bench TTFT ms", "bench prefix hits/queries"]
    rows = [head]
    for rec in table.to_dict("records"):
        notes = []
        if not rec.get("comparable", True):
            notes.append("too short")
        if rec.get("client_late") is True:
            notes.append("client late")
        exact = min(rec.get("prompt_exact_share", math.nan), rec.get("completion_exact_share", math.nan))
        row = [_f(rec["users"], ".0f"), _f(float(rec["measured"]), ".0f"),
               _f(rec["client_output_tok_per_s"], ",.1f"), _f(rec["server_gen_tok_per_s"], ",.1f"),
               _f(rec["difference"], "+.1f", 100),
               _f(rec["achieved_concurrency"], ".2f"), _f(rec["running_mean"], ".2f"),
               _f(rec["concurrency_difference"], "+.1f", 100),
               _f(rec["client_ttft_mean"], ",.1f", 1000), _f(rec["server_ttft_mean"], ",.1f", 1000),
               _f(rec["ttft_difference"], "+.1f", 100),
               f"{_f(rec['prefix_cache_hits'], '.0f')}/{_f(rec['prefix_cache_queries'], '.0f')}",
               _f(exact, ".0%"), _f(rec["window_s"], ".1f"), ", ".join(notes)]
        if bench:
            b = bench.get(int(rec["users"]), {})
            row += [_f(b.get("output_tok_per_s", math.nan), ",.1f"), _f(b.get("mean_ttft_ms", math.nan), ",.1f"),
                    f"{_f(b.get('prefix_cache_hits', math.nan), '.0f')}/{_f(b.get('prefix_cache_queries', math.nan), '.0f')}"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [label, "  ".join(c.rjust(w) for c, w in zip(rows[0], widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows[1:]]
    return "\n".join(lines)
