"""A run's per-level figures as text, as `vllm-load run` prints them at the end, and its failed
requests counted per level and error category (the report's errors table)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...figures import TABLE, Figure, level_figures, shown_in
from ...load_kinds import CONCURRENCY, LoadKind, kind_named
from ..frame_records import row_dicts
from . import as_floats
from . import failed as failed_requests


def _fmt(value: float, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


#: an open-loop level's row (a rate or a trace) leads with the load offered and achieved and the
#: client's queueing, instead of the achieved concurrency and req/s: (header, metric, scale, format)
OPEN_LOOP_HEAD: tuple[tuple[str, str, float, str], ...] = (
    ("offered", "offered_rate", 1, ",.2f"),
    ("achieved", "achieved_rate", 1, ",.2f"),
    # a request's clock starts when it is due: queued on the client or sent (<= --max-in-flight)
    ("in system", "achieved_concurrency", 1, ",.1f"),
    ("queued p50 ms", "queued_p50", 1000, ",.1f"),
    ("queued p99 ms", "queued_p99", 1000, ",.1f"),
)
_NOT_IN_OPEN_LOOP_TABLE = frozenset({"achieved_concurrency", "req_per_s"})


def level_kinds(metrics: pd.DataFrame) -> list[LoadKind]:
    """The kinds of load of a run's levels, in the order they first appear."""
    names = metrics["kind"] if "kind" in metrics else [CONCURRENCY.name] * len(metrics)
    return list(dict.fromkeys(kind_named(name) for name in names))


def level_name(rec: dict) -> str:
    """A level as a sentence names it: `64 users`, `2.50 requests/s`, `0 s into the trace`."""
    value = rec.get("value", rec.get("users"))
    return kind_named(rec.get("kind")).text(float(value) if value is not None else math.nan)


def column_of(figure: Figure) -> tuple[str, str, float, str]:
    """(header, metric, scale, format) of a declared figure in the printed table."""
    if figure.unit == "s":
        scale, suffix = (1000.0, " ms") if figure.in_ms else (1.0, " s")
    elif figure.unit == "share":
        scale, suffix = 100.0, " %"
    else:
        scale, suffix = 1.0, ""
    return figure.header + suffix, figure.key, scale, figure.spec


def table_columns(metrics: pd.DataFrame) -> list[tuple[str, str, float, str]]:
    """The printed table's columns: the level (its value, in its kind's unit), the figures
    declared for the table (`figures.shown_in`) that the run had (a reasoning model's where some
    level measured reasoning), and an open-loop level's columns first when it has one (those it
    measured: a trace's levels have no requested rate to offer or achieve)."""
    kinds = level_kinds(metrics)
    header = kinds[0].unit if len(kinds) == 1 else "level"
    level = (header, "value" if "value" in metrics else "users", 1.0, kinds[0].spec)
    shown = [column_of(f) for f in shown_in(TABLE, lambda key: present(metrics, key))]
    shown = [c for c in shown if c[1] != "users"]
    if not any(kind.open_loop for kind in kinds):
        return [level, *shown]
    measured = [c for c in OPEN_LOOP_HEAD if c[1] in metrics and metrics[c[1]].notna().any()]
    return [level, *measured, *(c for c in shown if c[1] not in _NOT_IN_OPEN_LOOP_TABLE)]


def present(metrics: pd.DataFrame, key: str) -> bool:
    """Whether the level figure `key` is above 0 at some level."""
    return key in metrics and bool((as_floats(metrics[key]) > 0).any())


#: what marks a latency the client could not date (the level was client-late)
LATE_MARK = "*"
#: what marks the achieved rate of an open-loop level whose window was no steady state
UNSTEADY_MARK = "!"
#: what marks a concurrency level that measured fewer requests than it had users
THIN_MARK = "~"
#: what marks the achieved load of a level a load worker was lost during
LOST_MARK = "x"


def format_level_table(
    metrics: pd.DataFrame,
    late: dict[int, str] | None = None,
    unsteady: dict[int, str] | None = None,
    bottlenecks: dict[int, str] | None = None,
    lost: dict[int, str] | None = None,
) -> str:
    """A fixed-width text table of `level_metrics` for the terminal (empty string for no levels).

    `late` ({level: why}, from `analysis.client_side.late_levels`) marks the TTFT and ITL of
    those levels with `LATE_MARK`, and a legend under the table says why they are not trustworthy.
    Open-loop levels (a rate, a trace) get the open-loop columns; `unsteady` ({level: why}, from
    `analysis.rates.rate_verdicts`) marks the achieved rate of those whose window was no steady
    state (the target fell behind, or a backlog was worked off) with `UNSTEADY_MARK`, and a
    legend says why, as the report does when it leaves them out of the peak. `bottlenecks`
    ({level: verdict kind}, `analysis.diagnosis`) is the last column when given. `lost`
    ({level: the workers lost during it}) marks its achieved load with `LOST_MARK`, and a legend
    names them: the level held less than its load while they were being found, not for the
    client's or the server's sake.
    """
    if metrics is None or metrics.empty:
        return ""
    late, unsteady, lost = late or {}, unsteady or {}, lost or {}
    thin = set(thin_levels(metrics))
    columns = table_columns(metrics)
    rows = [[h for h, *_ in columns] + (["bottleneck"] if bottlenecks else [])]
    read_timed = [f.key for f in level_figures() if f.read_timed]
    for rec in row_dicts(metrics):
        lv = rec.get("level")
        marks = {
            **{
                key: LATE_MARK if lv in late else " " if late else ""
                for key in read_timed  # (TTFT, ITL: dated by the client's reads)
            },
            "achieved_rate": UNSTEADY_MARK if lv in unsteady else " " if unsteady else "",
            "measured": THIN_MARK if lv in thin else " " if thin else "",
            "achieved_concurrency": LOST_MARK if lv in lost else " " if lost else "",
        }
        rows.append(
            [
                _fmt(rec.get(col, math.nan) * scale if rec.get(col) is not None else math.nan, spec)
                + next((m for key, m in marks.items() if col.startswith(key)), "")
                for _, col, scale, spec in columns
            ]
            + ([bottlenecks.get(int(lv or 0), "-")] if bottlenecks else [])
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.rjust(wd) if i < len(columns) else cell.ljust(wd)
            for i, (cell, wd) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * wd for wd in widths))
    names = {rec["level"]: level_name(rec) for rec in row_dicts(metrics)}
    marked = [(lv, why) for lv, why in sorted(late.items()) if lv in names]
    if marked:
        lines.append(
            f"{LATE_MARK} client late: TTFT and ITL not trustworthy (chunks came together in reads and "
            "could not be dated apart, or the load process waited for a CPU):"
        )
        lines += [f"  {names[lv]}: {why}" for lv, why in marked]
    if thin:
        lines.append(
            f"{THIN_MARK} fewer measured requests than users: each measured a slice of one wave "
            "(the requests that started first after its warm-up, each user's at most once); "
            "leave --requests-per-level unset (2 per user) to measure whole waves:"
        )
        lines += [f"  {names[lv]}: {why}" for lv, why in thin_levels(metrics).items()]
    marked = [(lv, why) for lv, why in sorted(lost.items()) if lv in names]
    if marked:
        lines.append(
            f"{LOST_MARK} a load worker was lost during the level: its requests in flight were "
            "abandoned and its users moved to the others, so the level held less than its load "
            "meanwhile (not the client's doing):"
        )
        lines += [f"  {names[lv]}: {why}" for lv, why in marked]
    marked = [(lv, why) for lv, why in sorted(unsteady.items()) if lv in names]
    if marked:
        lines.append(
            f"{UNSTEADY_MARK} no steady state (left out of the report's peak and saturation point):"
        )
        lines += [f"  {names[lv]}: {why}" for lv, why in marked]
    return "\n".join(lines)


def thin_levels(metrics: pd.DataFrame) -> dict[int, str]:
    """Concurrency levels whose measured requests were fewer than their users: {level: why}."""
    out: dict[int, str] = {}
    if "measured" not in metrics:
        return out
    kinds = metrics["kind"] if "kind" in metrics else [CONCURRENCY.name] * len(metrics)
    for lv, kind, users, measured in zip(
        metrics["level"], kinds, metrics["users"], metrics["measured"]
    ):
        if kind_named(kind) is CONCURRENCY and 0 < measured < users:
            out[int(lv)] = f"{measured:,.0f} measured of {users:,.0f} users"
    return out


def error_counts(requests: pd.DataFrame) -> pd.DataFrame:
    """Failed requests per level and error category (a cancelled request is no failure): columns level, error, status, count;
    `status` is the HTTP status of an `http_status` failure (so a 503 and a 429 are told apart),
    0 for any other category or where requests.csv has no status.

    Every recorded failure counts, warm-up included: a failure is never discarded as warm-up.
    """
    if requests.empty:
        return pd.DataFrame(
            {
                "level": pd.Series([], dtype=np.int64),
                "error": pd.Series([], dtype=object),
                "status": pd.Series([], dtype=np.int64),
                "count": pd.Series([], dtype=np.int64),
            }
        )
    failed = requests[failed_requests(requests) & ~np.isnan(as_floats(requests["level"]))]
    errors = failed["error"].astype("string").fillna("").replace("", "unknown")
    status = (
        np.nan_to_num(as_floats(failed["status"])).astype(np.int64)
        if "status" in failed
        else np.zeros(len(failed), dtype=np.int64)
    )
    counts = (
        pd.DataFrame(
            {
                "level": as_floats(failed["level"]).astype(np.int64),
                "error": errors.to_numpy(dtype=object),
                "status": np.where(errors.to_numpy(dtype=object) == "http_status", status, 0),
            }
        )
        .groupby(["level", "error", "status"], sort=True)
        .size()
        .rename("count")
        .reset_index()
    )
    return counts
