"""The client's own health per level, from `client_health.csv` (see `vllm_load.client.health`)
and requests.csv's `chunks_merged`.

A level is *possibly client-bound* when any load process, during the level's measured window,
used more than `CPU_LIMIT` % of a core or had a mean event-loop lag above `LAG_LIMIT_MS` over a
report interval: then some latency may be the client's, not the server's.

A level is *client-late* when its chunk dates cannot be trusted: more than `MERGED_LIMIT` of the
content chunks of its measured requests shared their read with another chunk (so they were
dated alike and their gaps read 0), or a load process's loop thread waited more than
`RUNQUEUE_LIMIT_MS` per second for a CPU. Its ITL and TTFT are then marked as not trustworthy
wherever they are shown. A chunk merged now and then is harmless; 5 % is where the artefact
reaches the figures a report prints: every merged chunk but the first of its read leaves a zero
gap and the first one a gap too long, so at 5 % merged (in pairs) 2.5 % of the gaps are zeros
and 2.5 % too long: ITL p99 and p95 are the reader's, not the server's (and at 50 % ITL p50
reads 0.00 ms). On a client with a CPU to spare the share stays well under 1 %. For the
run-queue limit see `RUNQUEUE_LIMIT_MS`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...load_kinds import kind_named
from ...run_format.optional_csv import CsvRead, read_optional_csv
from ..frame_records import row_dicts

CPU_LIMIT = 80.0  # percent of one core
LAG_LIMIT_MS = 10.0
#: ms per second of wall time the loop thread waited for a CPU, above which its reads are late.
#: Measured: < 7 ms/s on a server's idle cores; 7–52 ms/s on a shared 2-core box running the
#: simulator and other tests, with no chunk merged at 20 ms between tokens; 1,740 ms/s beside
#: vLLM's busy-polling engine, where TTFT read +36 % and ITL p50 0.00 ms. 100 ms/s (a tenth of
#: the time waiting) is twice the busiest healthy figure and far below the starved one.
RUNQUEUE_LIMIT_MS = 100.0

#: the share of content chunks merged (dated with another) above which a level is client-late
MERGED_LIMIT = 0.05
#: the client-late rule, in words (shown in the report)
LATE_RULE = (
    f"more than {MERGED_LIMIT * 100:g}% of the content chunks came in a read with another chunk, or a "
    f"load process's event loop waited more than {RUNQUEUE_LIMIT_MS:g} ms per second for a CPU"
)


def shown_past(value: float, limit: float, decimals: int = 0) -> str:
    """`value` with `decimals` decimals, or as many more as it takes for the number shown to be
    on its side of `limit` (5.1 % against 5 % reads "5.1", never "5"; at most 4 more)."""
    above = value > limit
    places = decimals
    while places < decimals + 4 and (
        round(value, places) <= limit if above else round(value, places) >= limit
    ):
        places += 1
    return f"{value:,.{places}f}"


def read_client_health(path: str) -> CsvRead:
    """`client_health.csv` (None when absent or empty), its bad lines skipped and counted in the
    note."""
    return read_optional_csv(path, ("ts", "worker", "level"), text_columns=("worker",))


def as_floats(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def level_merged_chunks(requests: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """Per level: content chunks of the successful requests that finished in its measured window
    (`chunks`), how many of them were merged, and the share (NaN for a run without the column)."""
    level, ok, end = (
        as_floats(requests, "level"),
        as_floats(requests, "ok") == 1,
        as_floats(requests, "end_ts"),
    )
    chunks, merged = as_floats(requests, "n_chunks"), as_floats(requests, "chunks_merged")
    known = ~np.isnan(merged)
    rows = []
    for rec in row_dicts(metrics):
        ws, we = rec["window_start"], rec["window_end"]
        mask = (level == rec["level"]) & ok
        if ws == ws and we == we:
            mask &= (end > ws) & (end <= we)
        n = float(np.nansum(chunks[mask & known]))
        m = float(np.sum(merged[mask & known]))
        rows.append(
            {
                "level": rec["level"],
                "chunks": n,
                "chunks_merged": m if (mask & known).any() else np.nan,
                "merged_share": m / n if n > 0 else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=["level", "chunks", "chunks_merged", "merged_share"])


def _window_part(health: pd.DataFrame | None, rec: dict) -> pd.DataFrame:
    """The health samples of one level's measured window (its level's samples if none fell in it)."""
    if health is None:
        return pd.DataFrame()
    ts = health["ts"].to_numpy(np.float64)
    ws, we = rec["window_start"], rec["window_end"]
    in_window = (
        (ts > ws) & (ts <= we) if ws == ws and we == we else np.zeros(len(health), dtype=bool)
    )
    return health[in_window] if in_window.any() else health[health["level"] == rec["level"]]


def _max(part: pd.DataFrame, column: str) -> float:
    values = as_floats(part, column)
    return float(np.nanmax(values)) if len(values) and not np.isnan(values).all() else np.nan


def level_client_health(
    health: pd.DataFrame | None,
    metrics: pd.DataFrame,
    requests: pd.DataFrame | None = None,
    cpu_limit: float = CPU_LIMIT,
    lag_limit_ms: float = LAG_LIMIT_MS,
    runqueue_limit_ms: float = RUNQUEUE_LIMIT_MS,
    merged_limit: float = MERGED_LIMIT,
) -> pd.DataFrame:
    """Per level: processes seen, worst CPU %, worst interval-mean and single loop lag, worst
    run-queue wait per second, peak RSS, the share of content chunks merged; whether the level
    was possibly client-bound (`client_bound`, `reason`) and client-late (`client_late`,
    `client_late_reason`). Either input may be missing: its figures are then NaN and judge nothing."""
    merged = (
        level_merged_chunks(requests, metrics).set_index("level") if requests is not None else None
    )
    rows = []
    for rec in row_dicts(metrics):
        part = _window_part(health, rec)
        cpu, lag = _max(part, "cpu_percent"), _max(part, "loop_lag_mean_ms")
        wait = _max(part, "runqueue_wait_ms_per_s")
        share = float(merged.at[rec["level"], "merged_share"]) if merged is not None else np.nan
        reasons, late = [], []
        if cpu > cpu_limit:
            reasons.append(f"CPU {shown_past(cpu, cpu_limit)}% > {cpu_limit:g}%")
        if lag > lag_limit_ms:
            reasons.append(f"loop lag {shown_past(lag, lag_limit_ms, 1)} ms > {lag_limit_ms:g} ms")
        if share > merged_limit:
            late.append(
                f"{shown_past(share * 100, merged_limit * 100)}% of chunks merged in reads "
                f"> {merged_limit * 100:g}%"
            )
        if wait > runqueue_limit_ms:
            late.append(
                f"run-queue wait {shown_past(wait, runqueue_limit_ms)} ms/s > {runqueue_limit_ms:g} ms/s"
            )
        rows.append(
            {
                "level": rec["level"],
                "users": rec["users"],  # Locust's users: the cap in a rate or trace level
                "kind": kind_named(rec.get("kind")).name,  # the level's kind of load
                "value": rec.get("value", rec["users"]),  # the level's own (axis units)
                "processes": int(part["worker"].nunique()) if len(part) else 0,
                "cpu_percent_max": cpu,
                "loop_lag_mean_ms_max": lag,
                "loop_lag_max_ms": _max(part, "loop_lag_max_ms"),
                "runqueue_wait_ms_per_s_max": wait,
                "rss_mib_max": _max(part, "rss_mib"),
                "chunks": float(merged.at[rec["level"], "chunks"])
                if merged is not None
                else np.nan,
                "chunks_merged": float(merged.at[rec["level"], "chunks_merged"])
                if merged is not None
                else np.nan,
                "merged_share": share,
                "client_bound": bool(reasons),
                "reason": "; ".join(reasons),
                "client_late": bool(late),
                "client_late_reason": "; ".join(late),
            }
        )
    return pd.DataFrame(rows)


#: (column, what it is, its limit, the unit it is shown in, its scale, what passing it makes the
#: level) of the client's headroom
_HEADROOM = (
    ("merged_share", "chunks merged in reads", MERGED_LIMIT, "%", 100.0, "late"),
    ("runqueue_wait_ms_per_s_max", "run-queue wait", RUNQUEUE_LIMIT_MS, " ms/s", 1.0, "late"),
    ("cpu_percent_max", "load-process CPU", CPU_LIMIT, "% of a core", 1.0, "client-bound"),
)


def headroom_text(client_levels: pd.DataFrame | None, unit: str = "users") -> str:
    """How close the client came to being late or bound: each figure at its highest level
    against its limit ("" without client figures), so that a run on time says by how much."""
    if client_levels is None or not len(client_levels):
        return ""
    parts = []
    for column, name, limit, shown, scale, past in _HEADROOM:
        values = as_floats(client_levels, column)
        if np.isnan(values).all():
            continue
        i = int(np.nanargmax(values))
        at = f"{float(client_levels['value'].iloc[i]):,.4g} {unit}"
        parts.append(
            f"{name} {float(values[i]) * scale:,.1f}{shown} ({at}; {past} above "
            f"{limit * scale:g}{shown})"
        )
    if not parts:
        return ""
    return "Client headroom, each figure at its highest level: " + ", ".join(parts) + "."


def bound_levels(client_levels: pd.DataFrame | None) -> dict[int, str]:
    """{level: why} for the possibly client-bound levels of `level_client_health`."""
    if client_levels is None or not len(client_levels):
        return {}
    bound = client_levels[client_levels["client_bound"]]
    return dict(zip(bound["level"].astype(int), bound["reason"]))


def late_levels(client_levels: pd.DataFrame | None) -> dict[int, str]:
    """{level: why} for the client-late levels of `level_client_health` (ITL/TTFT not trustworthy)."""
    if client_levels is None or client_levels.empty:
        return {}
    late = client_levels[client_levels["client_late"]]
    return {int(lv): str(why) for lv, why in zip(late["level"], late["client_late_reason"])}


def health_problems(client_levels: pd.DataFrame | None) -> list[str]:
    """One line per level whose own health samples say the client may have shaped the figures,
    the level named in its kind's unit (`64 users`, `2.50 requests/s`)."""
    if client_levels is None or client_levels.empty:
        return []
    out = []
    for row in row_dicts(client_levels):
        level = kind_named(row.get("kind")).text(row.get("value", row["users"]))
        if row["client_bound"]:
            out.append(f"{level}: possibly client-bound ({row['reason']})")
        if row["client_late"]:
            out.append(f"{level}: client-late ({row['client_late_reason']})")
    return out
