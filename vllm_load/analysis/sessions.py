"""Sessions as wholes: the conversations and agentic sessions of a run, one row each
(`session_table`, written as sessions.csv: docs/run-format.md), and their summary for the report
(`session_summary`).

A session is every request of one `conversation` id, all levels and warm-ups included: it is one
task whatever window it crossed. Its E2E runs from its first turn's start to its last turn's end
(think and tool time included); its idle share is the time it waited for tools
(`tool_wait_s`, agentic sessions) over that E2E; its prompt's cached share pools the turns whose
server said how many prompt tokens its prefix cache held (`cached_tokens`), and is unknown (not
a zero) when none did. A subagent session (--fan-out) names its `parent` session; its `depth`
counts the parents above it (0: a top-level session), and a parent counts its `subagents`.
Subagents are extra requests in flight beside their parent's user, so `level_flight` gives each
level's peak of requests in flight against its users.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .frame_records import row_dicts
from .levels import as_floats

SESSION_COLUMNS: tuple[str, ...] = (
    "session",
    "parent",
    "depth",
    "subagents",
    "user_class",
    "turns",
    "failed_turns",
    "start_ts",
    "end_ts",
    "e2e",
    "tool_calls",
    "tool_wait_s",
    "idle_share",
    "prompt_tokens",
    "cached_tokens",
    "cached_share",
    "ttft_by_turn",
)
_READ = (
    "conversation",
    "user_class",
    "turn",
    "ok",
    "start_ts",
    "end_ts",
    "ttft",
    "prompt_tokens",
    "cached_tokens",
    "tool_calls",
    "tool_wait_s",
)


def session_table(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per session of the run (`SESSION_COLUMNS`), in order of their start; empty when
    no request was part of one. `prompt_tokens` and `cached_tokens` sum its successful turns
    (the cached ones over the turns that said); `ttft_by_turn` is each turn's TTFT in ms, in
    turn order, `;`-joined (empty for a turn without one)."""
    if "conversation" not in requests:
        return pd.DataFrame(columns=list(SESSION_COLUMNS))
    ids = requests["conversation"].astype("string").fillna("")
    part = (ids != "").to_numpy()
    frame = pd.DataFrame(
        {c: (as_floats(requests[c]) if c in requests else np.nan) for c in _READ[2:]},
        index=requests.index,
    )[part]
    if frame.empty:
        return pd.DataFrame(columns=list(SESSION_COLUMNS))
    frame["session"] = ids[part]
    frame["user_class"] = (
        requests["user_class"].astype("string").fillna("")[part] if "user_class" in requests else ""
    )
    frame["parent"] = (
        requests["parent"].astype("string").fillna("")[part] if "parent" in requests else ""
    )
    rows = [_session_row(str(name), group) for name, group in frame.groupby("session", sort=False)]
    table = pd.DataFrame(rows, columns=list(SESSION_COLUMNS))
    parents = dict(zip(table["session"], table["parent"]))
    table["depth"] = [_depth(name, parents) for name in table["session"]]
    children = table["parent"][table["parent"] != ""].value_counts()
    table["subagents"] = [int(children.get(name, 0)) for name in table["session"]]
    return table.sort_values("start_ts", kind="stable").reset_index(drop=True)


def _depth(name: str, parents: dict[str, str]) -> int:
    """How many parents a session has above it (a parent missing from the run still counts)."""
    depth, seen = 0, {name}
    parent = parents.get(name, "")
    while parent and parent not in seen:
        depth += 1
        seen.add(parent)
        parent = parents.get(parent, "")
    return depth


def _session_row(name: str, group: pd.DataFrame) -> dict:
    group = group.sort_values("turn", kind="stable")
    ok = group["ok"].to_numpy() == 1
    start, end = float(group["start_ts"].min()), float(group["end_ts"].max())
    e2e = end - start
    waits = group["tool_wait_s"].to_numpy(np.float64)
    waited = float(np.nansum(waits)) if (~np.isnan(waits)).any() else np.nan
    prompt = group["prompt_tokens"].to_numpy(np.float64)[ok]
    cached = group["cached_tokens"].to_numpy(np.float64)[ok]
    told = ~np.isnan(cached) & ~np.isnan(prompt)
    ttfts = group["ttft"].to_numpy(np.float64)
    return {
        "session": name,
        "parent": str(group["parent"].iloc[0]),
        "depth": 0,
        "subagents": 0,
        "user_class": str(group["user_class"].iloc[0]),
        "turns": len(group),
        "failed_turns": int((~ok).sum()),
        "start_ts": start,
        "end_ts": end,
        "e2e": e2e,
        "tool_calls": int(np.nansum(group["tool_calls"].to_numpy(np.float64))),
        "tool_wait_s": waited,
        "idle_share": waited / e2e if e2e > 0 and not np.isnan(waited) else np.nan,
        "prompt_tokens": float(np.nansum(prompt)),
        "cached_tokens": float(cached[told].sum()) if told.any() else np.nan,
        "cached_share": float(cached[told].sum() / prompt[told].sum())
        if told.any() and prompt[told].sum() > 0
        else np.nan,
        "ttft_by_turn": ";".join("" if np.isnan(t) else f"{t * 1000:.1f}" for t in ttfts),
    }


def session_summary(table: pd.DataFrame, requests: pd.DataFrame | None = None) -> dict[str, Any]:
    """The report's per-session figures: how many sessions, turns and tool calls each (mean),
    E2E p50/p99 (s), idle share and the prompt's cached share (each the mean over the sessions
    that have one: that waited for tools, whose server said; NaN where none). Empty without
    any. A run with subagent sessions adds how many (`subagent_sessions`), how many sessions
    fanned out (`fanned_out`), and, given its `requests`, each level's in-flight peak
    (`flight`: `level_flight`'s rows)."""
    if table.empty:
        return {}
    e2e = table["e2e"].to_numpy(np.float64)
    idle = table["idle_share"].to_numpy(np.float64)
    cached = table["cached_share"].to_numpy(np.float64)
    return {
        "sessions": float(len(table)),
        "turns_mean": float(table["turns"].mean()),
        "tool_calls_mean": float(table["tool_calls"].mean()),
        "e2e_p50": float(np.percentile(e2e, 50)),
        "e2e_p99": float(np.percentile(e2e, 99)),
        "idle_share_mean": float(np.nanmean(idle)) if (~np.isnan(idle)).any() else np.nan,
        "cached_share": float(np.nanmean(cached)) if (~np.isnan(cached)).any() else np.nan,
        "with_failed_turn": float((table["failed_turns"] > 0).sum()),
        **_fan_out_summary(table, requests),
    }


def _fan_out_summary(table: pd.DataFrame, requests: pd.DataFrame | None) -> dict[str, Any]:
    subagents = int((table["depth"] > 0).sum())
    if not subagents:
        return {}
    flight = level_flight(requests) if requests is not None else pd.DataFrame()
    return {
        "subagent_sessions": float(subagents),
        "fanned_out": float((table["subagents"] > 0).sum()),
        "flight": row_dicts(flight),
    }


def level_flight(requests: pd.DataFrame) -> pd.DataFrame:
    """Per level (`level`, its `users`): how many requests it recorded and the most of them in
    flight at once (`in_flight_peak`, from their start and end times; a request that ends as
    another starts is not counted with it). Empty without the columns."""
    needed = ("level", "users", "start_ts", "end_ts")
    if requests.empty or not all(c in requests for c in needed):
        return pd.DataFrame(columns=["level", "users", "requests", "in_flight_peak"])
    rows = []
    for level, group in requests.groupby("level", sort=True):
        starts, ends = as_floats(group["start_ts"]), as_floats(group["end_ts"])
        rows.append(
            {
                "level": int(float(level)),  # type: ignore[arg-type]
                "users": int(as_floats(group["users"]).max()),
                "requests": len(group),
                "in_flight_peak": peak_in_flight(starts, ends),
            }
        )
    return pd.DataFrame(rows, columns=["level", "users", "requests", "in_flight_peak"])


def peak_in_flight(starts: np.ndarray, ends: np.ndarray) -> int:
    """The most intervals [start, end) open at once."""
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.lexsort((steps, times))  # at equal times, ends (-1) before starts
    return int(np.cumsum(steps[order]).max(initial=0))
