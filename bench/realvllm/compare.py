"""Per level: vllm-load's figures beside vLLM's own /metrics over the same measured window, and
beside `vllm bench serve` at the same concurrency.

The client side is `vllm_load.analysis.levels.measure.measure_levels`, the server side
`vllm_load.analysis.levels.server_side.level_server_figures` on the run's `server_metrics.csv`, and
whether the client was late `vllm_load.analysis.levels.client_side`: the same functions the report uses.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd

from vllm_load.analysis.levels import server_side
from vllm_load.analysis.levels.client_side import (
    late_levels,
    level_client_health,
    read_client_health,
)
from vllm_load.analysis.levels.measure import measure_levels
from vllm_load.run_format.files import CLIENT_HEALTH_CSV
from vllm_load.run_format.load import load_run


def level_comparison(run_dir: str) -> tuple[pd.DataFrame, dict]:
    """One row per level of the run in `run_dir`: `level_server_figures`' columns plus users,
    measured requests, token exactness, window length and `client_late`; and run-wide totals
    (prefix-cache hits over the whole run, server vs client generated tokens)."""
    data = load_run(run_dir)
    metrics = measure_levels(data.requests, data.steps, data.streams).metrics
    server = server_side.read_server_metrics(os.path.join(run_dir, "server_metrics.csv")).frame
    if server is None:
        raise ValueError(f"{run_dir} has no server_metrics.csv: vllm-load did not scrape /metrics")
    interval = (data.run.get("server_metrics") or {}).get("interval")
    figures = server_side.level_server_figures(
        server, metrics, data.requests, interval, streams=data.streams
    )
    decoding = [
        _decoding_at_scrapes(server, data.requests, a, b)
        for a, b in zip(figures["compare_start"], figures["compare_end"])
    ]
    figures["client_decoding_at_scrapes"] = decoding
    keep = ["level", "measured", "ok", "prompt_exact_share", "completion_exact_share"]
    table = figures.merge(metrics[keep], on="level", how="left")
    health = read_client_health(os.path.join(run_dir, CLIENT_HEALTH_CSV)).frame
    late = late_levels(level_client_health(health, metrics, data.requests))
    table["client_late"] = [int(lv) in late for lv in table["level"]]
    table["client_late_reason"] = [late.get(int(lv), "") for lv in table["level"]]
    totals = server_side.run_token_check(server, data.requests)
    for column in ("prefix_cache_hits", "prefix_cache_queries"):
        values = (
            pd.to_numeric(server[column], errors="coerce").dropna()
            if column in server
            else pd.Series([], dtype=float)
        )
        totals[f"run_{column}"] = (
            float(values.iloc[-1] - values.iloc[0]) if len(values) >= 2 else math.nan
        )
    totals["requests"] = int(len(data.requests))
    totals["failed"] = int((pd.to_numeric(data.requests["ok"], errors="coerce") != 1).sum())
    totals["requests_abandoned"] = (data.run.get("requests_abandoned") or {}).get("total", 0)
    totals["drain"] = data.run.get("drain")
    return table, totals


def _decoding_at_scrapes(server: pd.DataFrame, requests: pd.DataFrame, a: float, b: float) -> float:
    """The client's requests past their first content chunk and not yet ended, at each scrape in
    (a, b], averaged: what vLLM's running gauge shows if it counts a request from the end of its
    prefill step (the gauge is set when an engine step ends) to the step that finishes it."""
    ts = server["ts"].to_numpy(float)
    at = ts[(ts > a) & (ts <= b)]
    if not len(at):
        return math.nan
    start = pd.to_numeric(requests["start_ts"], errors="coerce").to_numpy(float)
    first = start + pd.to_numeric(requests["ttft"], errors="coerce").to_numpy(float)
    end = pd.to_numeric(requests["end_ts"], errors="coerce").to_numpy(float)
    return float(np.mean([np.count_nonzero((first <= t) & (end > t)) for t in at]))


def _f(value, spec: str, scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value * scale, spec)


def format_table(label: str, table: pd.DataFrame, bench: dict[int, dict]) -> str:
    """The side-by-side text table of one mode (and `vllm bench serve` per users, if run)."""
    head = [
        "users",
        "meas",
        "out tok/s client",
        "server",
        "diff %",
        "achieved",
        "running",
        "past 1st tok",
        "Little srv/cli",
        "diff %",
        "TTFT ms client",
        "server",
        "diff %",
        "prefix hits/queries",
        "exact",
        "window s",
        "note",
    ]
    if bench:
        head += ["bench out tok/s", "bench TTFT ms", "bench prefix hits/queries"]
    rows = [head]
    for rec in table.to_dict("records"):
        notes = []
        if not rec.get("comparable", True):
            notes.append(f"too short to compare ({rec.get('not_comparable_reason')})")
        if rec.get("client_late"):
            notes.append(f"client late ({rec.get('client_late_reason')})")
        if rec.get("flagged"):
            notes.append("DISAGREES")
        exact = min(
            rec.get("prompt_exact_share", math.nan), rec.get("completion_exact_share", math.nan)
        )
        row = [
            _f(rec["users"], ".0f"),
            _f(float(rec["measured"]), ".0f"),
            _f(rec["client_output_tok_per_s"], ",.1f"),
            _f(rec["server_gen_tok_per_s"], ",.1f"),
            _f(rec["difference"], "+.1f", 100),
            _f(rec["achieved_concurrency"], ".2f"),
            _f(rec["running_mean"], ".2f"),
            _f(rec.get("client_decoding_at_scrapes", math.nan), ".2f"),
            f"{_f(rec.get('server_in_system', math.nan), '.2f')}/{_f(rec.get('client_in_system', math.nan), '.2f')}",
            _f(rec["concurrency_difference"], "+.1f", 100),
            _f(rec["client_ttft_mean"], ",.1f", 1000),
            _f(rec["server_ttft_mean"], ",.1f", 1000),
            _f(rec["ttft_difference"], "+.1f", 100),
            f"{_f(rec['prefix_cache_hits'], '.0f')}/{_f(rec['prefix_cache_queries'], '.0f')}",
            _f(exact, ".0%"),
            _f(rec["window_s"], ".1f"),
            ", ".join(notes),
        ]
        if bench:
            b = bench.get(int(rec["users"]), {})
            row += [
                _f(b.get("output_tok_per_s", math.nan), ",.1f"),
                _f(b.get("mean_ttft_ms", math.nan), ",.1f"),
                f"{_f(b.get('prefix_cache_hits', math.nan), '.0f')}/{_f(b.get('prefix_cache_queries', math.nan), '.0f')}",
            ]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        label,
        "  ".join(c.rjust(w) for c, w in zip(rows[0], widths)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows[1:]]
    return "\n".join(lines)
