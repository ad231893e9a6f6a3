"""The server's own view of a run, from `server_metrics.csv`, checked against the client's.

Counters (`generation_tokens_total`, ...) are interpolated linearly at the edges of each
level's measured window, so the server's generated-token rate covers exactly the window the
client's output tok/s covers. The two should agree; a disagreement above `TOLERANCE` means
tokens the client did not see (or counted twice) and is flagged in the report.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

TOLERANCE = 0.02


def read_server_metrics(path: str) -> pd.DataFrame | None:
    """`server_metrics.csv` sorted by time; None when absent or empty."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    frame = pd.read_csv(path)
    if frame.empty or "ts" not in frame.columns:
        return None
    return frame.sort_values("ts").reset_index(drop=True)


def _counter_at(frame: pd.DataFrame, column: str, ts: float) -> float:
    t = frame["ts"].to_numpy(np.float64)
    v = pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)
    ok = ~np.isnan(v)
    if ok.sum() < 2 or ts != ts or ts < t[ok][0] or ts > t[ok][-1]:
        return np.nan
    return float(np.interp(ts, t[ok], v[ok]))


def level_server_figures(server: pd.DataFrame, metrics: pd.DataFrame, tolerance: float = TOLERANCE) -> pd.DataFrame:
    """Per level: server-side generation tok/s over the measured window against the client's
    output tok/s, mean running/waiting requests, peak KV-cache usage and preemptions."""
    rows = []
    t = server["ts"].to_numpy(np.float64)
    for rec in metrics.to_dict("records"):
        ws, we = rec["window_start"], rec["window_end"]
        gen = np.nan
        if ws == ws and we == we and we > ws:
            gen = (_counter_at(server, "generation_tokens_total", we) - _counter_at(server, "generation_tokens_total", ws)) / (we - ws)
        start, end = rec["level_start"], rec["level_end"] if rec["level_end"] == rec["level_end"] else t[-1]
        inside = server[(t >= start) & (t <= end)]
        client = rec["output_tok_per_s"]
        diff = gen / client - 1.0 if client and client == client and gen == gen else np.nan
        rows.append({
            "level": rec["level"], "users": rec["users"],
            "server_gen_tok_per_s": gen, "client_output_tok_per_s": client, "difference": diff,
            "disagrees": bool(diff == diff and abs(diff) > tolerance),
            "running_mean": float(inside["running"].mean()) if len(inside) else np.nan,
            "waiting_mean": float(inside["waiting"].mean()) if len(inside) else np.nan,
            "kv_cache_usage_max": float(inside["kv_cache_usage"].max()) if len(inside) else np.nan,
            "preemptions": _counter_at(server, "preemptions_total", end) - _counter_at(server, "preemptions_total", start),
        })
    return pd.DataFrame(rows)


def run_token_check(server: pd.DataFrame, requests: pd.DataFrame) -> dict:
    """Generated tokens the server counted over the whole run against the completions the client
    received (usage counts of every request); exact when nothing else used the server."""
    gen = pd.to_numeric(server["generation_tokens_total"], errors="coerce").dropna()
    server_tokens = float(gen.iloc[-1] - gen.iloc[0]) if len(gen) >= 2 else np.nan
    client_tokens = float(pd.to_numeric(requests["completion_tokens"], errors="coerce").fillna(0).sum())
    diff = server_tokens / client_tokens - 1.0 if client_tokens else np.nan
    return {"server_generation_tokens": server_tokens, "client_completion_tokens": client_tokens, "difference": diff}
