"""A disaggregated deployment per level, from its prefill and decode servers' /metrics
(--role-metrics: `server_metrics_prefill.csv`, `server_metrics_decode.csv`), over each level's
measured window.

Over the scrapes of a role inside the window [`window_start`, `window_end`] (the first at or
after its start to the last at or before its end: differences between two real scrapes):

- KV transfer (decode side, the NIXL connector's `vllm:nixl_xfer_time_seconds` and
  `vllm:nixl_bytes_transferred`, recorded by the instance that reads the blocks): transfers, their
  mean time (posted to done), mean MiB, and bandwidth (bytes over transfer seconds, as vLLM's own
  log line "Throughput (MB/s)" computes it);
- TTFT split: prefill (the prefill server's mean TTFT, `vllm:time_to_first_token_seconds`: its
  queue and prefill), KV transfer (the mean above), and first decode step (the decode server's
  mean TTFT, which runs from the request's arrival there and so includes the transfer, less the
  transfer: its queue and first step).

A deployment without a role's metrics has none of its figures (NaN: tables and the report leave
them out), never zeros. A level's figures are unknown (NaN, `pd_unknown` says why) where a
counter went back between two of its scrapes (a restart), or fewer than two scrapes fall in its
window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...figures import disagg_columns
from ..frame_records import row_dicts
from .scrapes import counter_growth

#: the per-level column that says why a disaggregated level has no figures ("" if it has)
UNKNOWN = "pd_unknown"
_PREFILL = ("ttft_sum", "ttft_count")
_DECODE = ("ttft_sum", "ttft_count", "kv_xfer_sum", "kv_xfer_count", "kv_bytes_sum")
MIB = 2.0**20


def _mean_ms(total: float, count: float) -> float:
    return total / count * 1000.0 if count > 0 else np.nan


def split_over(
    prefill: pd.DataFrame | None, decode: pd.DataFrame | None, a: float, b: float
) -> dict[str, float | str]:
    """The disaggregation figures over [a, b], and why they are unknown ("")."""
    out: dict[str, float | str] = dict.fromkeys(disagg_columns(), np.nan)
    why = []
    if prefill is not None:
        p = counter_growth(prefill, _PREFILL, a, b)
        if isinstance(p, str):
            why.append(f"prefill server: {p}")
        else:
            out["pd_prefill_ms"] = _mean_ms(p["ttft_sum"], p["ttft_count"])
    if decode is not None:
        d = counter_growth(decode, _DECODE, a, b)
        if isinstance(d, str):
            why.append(f"decode server: {d}")
        else:
            n, xfer_s = d["kv_xfer_count"], d["kv_xfer_sum"]
            out["kv_transfers"] = n
            out["kv_xfer_ms"] = _mean_ms(xfer_s, n)
            out["kv_xfer_mib"] = d["kv_bytes_sum"] / n / MIB if n > 0 else np.nan
            out["kv_xfer_gbps"] = d["kv_bytes_sum"] / xfer_s / 1e9 if xfer_s > 0 else np.nan
            decode_ttft = _mean_ms(d["ttft_sum"], d["ttft_count"])
            out["pd_first_decode_ms"] = decode_ttft - float(out["kv_xfer_ms"])
    out[UNKNOWN] = "; ".join(why)
    return out


def _reports(frame: pd.DataFrame | None, column: str) -> bool:
    return (
        frame is not None
        and column in frame
        and bool(pd.to_numeric(frame[column], errors="coerce").notna().any())
    )


def with_disagg(
    metrics: pd.DataFrame, prefill: pd.DataFrame | None, decode: pd.DataFrame | None
) -> pd.DataFrame:
    """`measure_levels`'s per-level table with its disaggregation columns filled from the roles'
    scrapes (left NaN without them): a role that reports no TTFT (and, for decode, no KV
    transfer) counts as absent."""
    prefill = prefill if _reports(prefill, "ttft_count") else None
    decode = decode if _reports(decode, "kv_xfer_count") else None
    if prefill is None and decode is None:
        return metrics
    rows = [
        split_over(prefill, decode, rec["window_start"], rec["window_end"])
        for rec in row_dicts(metrics)
    ]
    out = metrics.copy()
    for column in (*disagg_columns(), UNKNOWN):
        out[column] = [row[column] for row in rows]
    return out


def disagg_findings(run_id: str, metrics: pd.DataFrame) -> list[str]:
    """The levels whose disaggregation figures are unknown, and why."""
    if UNKNOWN not in metrics:
        return []
    unknown = metrics[metrics[UNKNOWN].fillna("").astype(str) != ""]
    return [
        f"Run {run_id}: disaggregated prefill/decode figures unknown at {value:,.4g}: {why}."
        for value, why in zip(unknown["value"], unknown[UNKNOWN])
    ]
