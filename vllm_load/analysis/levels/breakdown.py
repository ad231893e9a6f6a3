"""Figures broken down by what sent a request: per persona (Locust user class) and level, per turn
of a conversation, and conversations as wholes.

All three read the measured requests of `levels.measure_levels` (`LevelMeasurement.labelled`:
both outcomes, with their labels), so they agree with the per-level table: latency percentiles
are over successful measured requests, failures are counted beside them, and a persona's output
tok/s counts the work its successful requests did inside the level's measured window.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from . import as_floats, failed
from .window_rates import ChunkMarks, RequestSpans, work_in_window

#: percentiles shown per persona and per turn
BREAKDOWN_PERCENTILES = (50, 99)

PERSONA_COLUMNS = (
    "level",
    "value",  # the level's value in its kind of load
    "user_class",
    "measured",
    "ok",
    "failed",
    "share",
    *(f"{lat}_p{p}" for lat in ("ttft", "e2e", "tpot") for p in BREAKDOWN_PERCENTILES),
    "output_tok_per_s",
)
TURN_COLUMNS = (
    "turn",
    "measured",
    "ok",
    "failed",
    "prompt_tokens_mean",
    "cached_share",
    *(f"{lat}_p{p}" for lat in ("ttft", "e2e") for p in BREAKDOWN_PERCENTILES),
)


def _labels(frame: pd.DataFrame, column: str) -> pd.Series:
    """A label column with missing values (runs before the column existed) as ""."""
    if column not in frame:
        return pd.Series("", index=frame.index, dtype="string")
    return frame[column].astype("string").fillna("")


def _percentiles(values: np.ndarray) -> list[float]:
    values = values[~np.isnan(values)]
    if not len(values):
        return [np.nan] * len(BREAKDOWN_PERCENTILES)
    return [float(v) for v in np.percentile(values, BREAKDOWN_PERCENTILES)]


def _latency_figures(group: pd.DataFrame, latencies: tuple[str, ...]) -> dict[str, float]:
    ok = as_floats(group["ok"]) == 1
    out = {}
    for lat in latencies:
        for p, value in zip(BREAKDOWN_PERCENTILES, _percentiles(as_floats(group[lat])[ok])):
            out[f"{lat}_p{p}"] = value
    return out


#: the columns of the measured requests `label_table` reads, beside its label
_LABEL_TABLE_READS: frozenset[str] = frozenset(
    ("level", "ok", "error", "ttft", "e2e", "tpot", "start_ts", "end_ts")
    + ("prompt_tokens", "completion_tokens", "chunk_marks")
)


def persona_table(
    labelled: pd.DataFrame, metrics: pd.DataFrame, ok_marks: ChunkMarks | None = None
) -> pd.DataFrame:
    """Per level and user class: measured requests, successes, failures, the class's share of the
    level's measured requests, TTFT/E2E/TPOT percentiles and output tok/s in the level's window.
    Empty when every request came from one class (the per-level table says it all).
    `ok_marks`: the successful rows' chunk marks, already parsed (`LevelMeasurement.labelled_marks`);
    None: parsed here."""
    if _labels(labelled, "user_class").nunique() <= 1:
        return pd.DataFrame(columns=list(PERSONA_COLUMNS))
    return label_table(labelled, metrics, "user_class", ok_marks)[list(PERSONA_COLUMNS)]


def label_table(
    labelled: pd.DataFrame, metrics: pd.DataFrame, label: str, ok_marks: ChunkMarks | None = None
) -> pd.DataFrame:
    """Per level and value of the `label` column (a persona, a target): as `persona_table`, with
    the total (prompt and output) tok/s in the level's window beside the output's."""
    read = [c for c in labelled.columns if c in _LABEL_TABLE_READS]  # not a copy of every column
    frame = labelled[read].assign(**{label: _labels(labelled, label)}).reset_index(drop=True)
    windows = metrics.set_index("level")
    # every successful row's span once (its chunk marks parsed once), each group's taken from it
    ok_rows = np.flatnonzero(as_floats(frame["ok"]) == 1)
    spans_of_ok = _spans(frame.iloc[ok_rows], parse_marks=ok_marks is None)
    if ok_marks is not None:
        spans_of_ok = replace(spans_of_ok, marks=ok_marks)
    rows = []
    # each group's rows by position: iterating a groupby takes a sorted copy of the whole frame
    groups = frame.groupby(["level", label]).indices
    for level, value in sorted(groups):
        group = frame.take(groups[level, value])
        ok = as_floats(group["ok"]) == 1
        level_rows = (frame["level"] == level).sum()
        window = windows.loc[level] if level in windows.index else None
        rate = total = np.nan
        if window is not None and window["window_s"] == window["window_s"]:
            spans = spans_of_ok.take(np.searchsorted(ok_rows, group.index.to_numpy()[ok]))
            work = work_in_window(spans, window["window_start"], window["window_end"])
            rate = work.output_tokens / window["window_s"]
            total = (work.output_tokens + work.prompt_tokens) / window["window_s"]
        rows.append(
            {
                "level": int(level),
                "value": window["value"] if window is not None else np.nan,
                label: value,
                "measured": len(group),
                "ok": int(ok.sum()),
                "failed": int(failed(group).sum()),
                "share": len(group) / level_rows if level_rows else np.nan,
                **_latency_figures(group, ("ttft", "e2e", "tpot")),
                "output_tok_per_s": rate,
                "total_tok_per_s": total,
            }
        )
    columns = [*PERSONA_COLUMNS, "total_tok_per_s"]
    return pd.DataFrame(rows, columns=[label if c == "user_class" else c for c in columns])


def _spans(ok_rows: pd.DataFrame, parse_marks: bool = True) -> RequestSpans:
    """The successful rows' lives and tokens, as `levels.success_spans` builds them (only the
    measured ones here: a persona's work in its level's window)."""
    marks = ok_rows["chunk_marks"] if parse_marks and "chunk_marks" in ok_rows else None
    return RequestSpans.build(
        as_floats(ok_rows["start_ts"]),
        as_floats(ok_rows["ttft"]),
        as_floats(ok_rows["end_ts"]),
        np.nan_to_num(as_floats(ok_rows["prompt_tokens"])),
        np.nan_to_num(as_floats(ok_rows["completion_tokens"])),
        marks,
    )


def turn_table(labelled: pd.DataFrame) -> pd.DataFrame:
    """Per turn index of the conversations, over every level: measured requests, successes,
    failures, mean prompt tokens (the history grows) and TTFT/E2E percentiles. Empty when no
    request was part of a conversation."""
    in_conversation = (_labels(labelled, "conversation") != "").to_numpy()
    read = [
        c
        for c in ("turn", "ok", "error", "prompt_tokens", "cached_tokens", "ttft", "e2e")
        if c in labelled
    ]
    frame = labelled.loc[in_conversation, read]  # not a copy of every column
    if frame.empty:
        return pd.DataFrame(columns=list(TURN_COLUMNS))
    rows = []
    for turn, group in frame.groupby(as_floats(frame["turn"]).astype(np.int64), sort=True):
        ok = as_floats(group["ok"]) == 1
        prompt = as_floats(group["prompt_tokens"])[ok]
        cached = as_floats(group["cached_tokens"])[ok] if "cached_tokens" in group else np.array([])
        told = ~np.isnan(cached) & ~np.isnan(prompt) if len(cached) else np.zeros(0, bool)
        rows.append(
            {
                "turn": int(turn),
                "measured": len(group),
                "ok": int(ok.sum()),
                "failed": int(failed(group).sum()),
                "prompt_tokens_mean": float(np.nanmean(prompt))
                if (~np.isnan(prompt)).any()
                else np.nan,
                # the share of the prompt the server's prefix cache held, where it said (vLLM
                # reports it with --enable-prompt-tokens-details; a missing count is not a zero)
                "cached_share": float(cached[told].sum() / prompt[told].sum())
                if told.any() and prompt[told].sum() > 0
                else np.nan,
                **_latency_figures(group, ("ttft", "e2e")),
            }
        )
    return pd.DataFrame(rows, columns=list(TURN_COLUMNS))


def conversation_summary(requests: pd.DataFrame) -> dict[str, float]:
    """Conversations as wholes, over the whole run: how many, turns each (mean), their duration
    from the first turn's start to the last turn's end (mean, p50, p99, seconds; think time
    included) and how many had a failed turn. Empty when the run held none."""
    ids = _labels(requests, "conversation")
    part = (ids != "").to_numpy()
    frame = requests.loc[part, ["start_ts", "end_ts", "ok"]].assign(conversation=ids[part])
    if frame.empty:
        return {}
    grouped = frame.groupby("conversation")
    start = grouped["start_ts"].min().astype(np.float64)
    end = grouped["end_ts"].max().astype(np.float64)
    duration = (end - start).to_numpy(np.float64)
    failed = (pd.to_numeric(frame["ok"], errors="coerce") != 1).groupby(frame["conversation"]).any()
    return {
        "conversations": float(len(duration)),
        "turns_mean": float(grouped.size().mean()),
        "duration_mean": float(np.mean(duration)),
        "duration_p50": float(np.percentile(duration, 50)),
        "duration_p99": float(np.percentile(duration, 99)),
        "with_failed_turn": float(failed.sum()),
    }
