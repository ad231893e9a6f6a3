"""The client's own health per level, from `client_health.csv` (see `vllm_load.client_health`).

A level is *possibly client-bound* when any load process, during the level's measured window,
used more than `CPU_LIMIT` % of a core or had a mean event-loop lag above `LAG_LIMIT_MS` over a
report interval: then some latency may be the client's, not the server's.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from ..client_health import CPU_LIMIT, LAG_LIMIT_MS


def read_client_health(path: str) -> pd.DataFrame | None:
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    frame = pd.read_csv(path, dtype={"worker": "string"})
    return None if frame.empty else frame


def level_client_health(health: pd.DataFrame, metrics: pd.DataFrame, cpu_limit: float = CPU_LIMIT,
                        lag_limit_ms: float = LAG_LIMIT_MS) -> pd.DataFrame:
    """Per level: processes seen, worst CPU %, worst interval-mean and single loop lag, peak RSS,
    and whether the level was possibly client-bound (and why)."""
    rows = []
    ts = health["ts"].to_numpy(np.float64)
    for rec in metrics.to_dict("records"):
        ws, we = rec["window_start"], rec["window_end"]
        in_window = (ts > ws) & (ts <= we) if ws == ws and we == we else np.zeros(len(health), dtype=bool)
        part = health[in_window] if in_window.any() else health[health["level"] == rec["level"]]
        cpu = float(part["cpu_percent"].max()) if len(part) else np.nan
        lag = float(part["loop_lag_mean_ms"].max()) if len(part) else np.nan
        reasons = []
        if cpu > cpu_limit:
            reasons.append(f"CPU {cpu:.0f}% > {cpu_limit:.0f}%")
        if lag > lag_limit_ms:
            reasons.append(f"loop lag {lag:.1f} ms > {lag_limit_ms:g} ms")
        rows.append({
            "level": rec["level"], "users": rec["users"], "processes": int(part["worker"].nunique()) if len(part) else 0,
            "cpu_percent_max": cpu, "loop_lag_mean_ms_max": lag,
            "loop_lag_max_ms": float(part["loop_lag_max_ms"].max()) if len(part) else np.nan,
            "rss_mib_max": float(part["rss_mib"].max()) if len(part) else np.nan,
            "client_bound": bool(reasons), "reason": "; ".join(reasons),
        })
    return pd.DataFrame(rows)
