"""A disaggregated deployment's prefill and decode servers' scrapes, made up for a run's level
windows (the analysis and report tests of `analysis.levels.disagg`; no tests here)."""

from __future__ import annotations

import pandas as pd


def role_scrapes(windows: pd.DataFrame, transfer_s) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Scrapes of a prefill and a decode server at each level's window edges: 10 requests a
    level, each 40 ms of prefill TTFT, `transfer_s(level)` of KV transfer (4 MiB) and 15 ms of
    decode TTFT after it."""
    prefill, decode = [], []
    n = 0
    xfer = ttft = 0.0
    for rec in windows.to_dict("records"):
        for ts, grow in ((rec["window_start"], False), (rec["window_end"], True)):
            if grow:
                n += 10
                xfer += 10 * transfer_s(rec["level"])
                ttft += 10 * (transfer_s(rec["level"]) + 0.015)
            prefill.append({"ts": ts, "ttft_sum": n * 0.04, "ttft_count": n})
            decode.append({"ts": ts, "ttft_sum": ttft, "ttft_count": n, "kv_xfer_sum": xfer,
                           "kv_xfer_count": n, "kv_bytes_sum": n * 4 * 2.0**20})  # fmt: skip
    return pd.DataFrame(prefill), pd.DataFrame(decode)
