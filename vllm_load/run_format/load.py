"""Loading run directories (docs/run-format.md) into data frames: the analysis package's only I/O.

A run directory is recognised by its `run.json` (`run_paths`, which also turns what a user
typed into a list of run directories). `load_run` reads one of them, checking its files first (`checks`): what is not what it claims
is refused with one line, or left out and said (`RunData.notes`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Iterable

import pandas as pd

from .. import figures
from .checks import (
    CHECKED_COLUMNS,
    DamagedRun,
    check_header,
    check_request_values,
    check_run_json,
    count_notes,
)
from .columnar import CsvStamp, copy_is_current, read_copy, write_copy
from .files import CLIENT_VALIDATION_JSON, HISTORY_CSV, REQUESTS_CSV, RUN_JSON, STEPS_CSV
from .gpu_metrics import read_gpu_metrics
from .records import COLUMNS, PANDAS_DTYPES, STEPS_COLUMNS
from .requests_csv import parse_rows
from .run_paths import is_run_dir
from .stream_columns import STREAM_COLUMNS, StreamColumns

#: the requests.csv columns the analysis reads as a frame (the rest are for people reading the
#: file; `itl_hist` and `chunk_marks` are always read, parsed into `RunData.streams`)
ANALYSIS_COLUMNS: tuple[str, ...] = (
    "level",
    "users",
    "start_ts",
    "end_ts",
    "ttft",
    "e2e",
    "tpot",
    "itl_max",  # a per-request SLO may limit it (analysis.slo)
    "n_chunks",
    "chunks_merged",
    "prompt_tokens",
    "completion_tokens",
    "requested_prompt_tokens",
    "requested_completion_tokens",
    "ok",
    "status",  # an http_status failure's status, in the report's failure counts
    "error",
    "user_class",
    "task",
    "conversation",
    "turn",
    "cached_tokens",
    "queued_s",
    "tool_calls",  # an agentic session's turns (analysis.sessions)
    "tool_wait_s",
    "parent",  # a subagent session's parent (analysis.sessions)
    "stolen_s",  # a replay's late sends: the host's steal meanwhile (analysis.replay)
    "images",  # a request's prompt exactness counts its images' tokens (analysis.levels)
    "image_bytes",
    "worker",  # open-loop levels: each load process's untaken arrivals (analysis.rates)
    "target",  # several targets (--hosts): each target's figures (analysis.levels.per_target)
)


def analysis_columns() -> tuple[str, ...]:
    """`ANALYSIS_COLUMNS` and the column of every declared per-request figure
    (`figures.PER_REQUEST`: `ttfat`, `reasoning_tokens`, ...)."""
    declared = (p.key for p in figures.PER_REQUEST if not p.from_histogram)
    return (*ANALYSIS_COLUMNS, *(c for c in declared if c not in ANALYSIS_COLUMNS))


@dataclass
class RunData:
    """Everything about one run that the analysis needs: `streams` is its requests'
    `itl_hist` and `chunk_marks`, parsed, row for row with `requests`."""

    path: str
    run: dict
    requests: pd.DataFrame
    steps: pd.DataFrame
    history: pd.DataFrame | None
    streams: StreamColumns
    notes: list[str] = field(default_factory=list)  # what was left out of its files, and why
    gpu: pd.DataFrame | None = None  # gpu_metrics.csv (`run_format.gpu_metrics`), when recorded

    @property
    def model(self) -> str:
        return str(self.run.get("model") or self.run.get("settings", {}).get("model") or "unknown")

    @property
    def run_id(self) -> str:
        return str(self.run.get("run_id") or os.path.basename(self.path.rstrip("/")))


@dataclass(frozen=True)
class RequestsRead:
    """requests.csv's whole rows, checked (`checks`), their stream columns parsed, and what the
    report must say about it."""

    frame: pd.DataFrame
    notes: list[str]
    streams: StreamColumns


def read_requests_frame(path: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
    """requests.csv with the documented dtypes; only `columns` when given (faster on big runs).
    DamagedRun when it cannot be measured (`read_requests`)."""
    return read_requests(path, {}, columns).frame


def read_requests(path: str, run: dict, columns: Iterable[str] | None = None) -> RequestsRead:
    """requests.csv with the documented dtypes (only `columns` when given), checked on its own
    and against the run's run.json (`checks`), and its stream columns parsed (whether or not
    `columns` names them): DamagedRun when it cannot be measured, notes on what was left out
    otherwise. Read from its columnar copy where that stands for it (`columnar`); parsed from
    the CSV otherwise, which writes the copy where it can."""
    wanted = list(columns) if columns is not None else list(COLUMNS)
    if not os.path.exists(path):
        raise DamagedRun(f"{path} is missing: the run's requests are not there")
    if os.path.getsize(path) == 0:
        raise DamagedRun(f"{path} is empty (not even its header): the run's requests are lost")
    copy = read_copy(path, wanted)
    if copy is not None:  # checked when it was written; run.json's count is checked anew
        notes = count_notes(len(copy.frame), copy.partial, run, path, copy.cut_id)
        return RequestsRead(_with_columns(copy.frame, wanted), notes, copy.streams)
    stamp = CsvStamp.of(path)
    try:
        header = [str(c) for c in pd.read_csv(path, nrows=0).columns]
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise DamagedRun(f"{path}: not a {REQUESTS_CSV} ({str(e).strip()[:80]})") from None
    check_header(header, path)
    read = [
        c
        for c in COLUMNS
        if c in header and (c in wanted or c in CHECKED_COLUMNS or c in STREAM_COLUMNS)
    ]
    try:
        rows = parse_rows(path, read, keep=set(wanted))
    except UnicodeDecodeError as e:
        raise DamagedRun(f"{path}: not text ({e})") from None
    frame = rows.frame
    check_request_values(frame, path)
    notes = count_notes(len(frame), rows.partial, run, path, rows.cut_id)
    if frame.empty:
        raise DamagedRun(f"{path} holds no request: nothing to measure")
    frame = frame.reset_index(drop=True)
    _keep_copy(path, stamp, frame, rows.streams, rows.partial, rows.cut_id, header)
    return RequestsRead(_with_columns(frame, wanted), notes, rows.streams)


def _with_columns(frame: pd.DataFrame, wanted: list[str]) -> pd.DataFrame:
    """`frame`'s `wanted` columns, those it lacks (an older run's file) empty."""
    missing = {
        c: pd.Series(None, index=frame.index, dtype=PANDAS_DTYPES.get(c, "float64"))
        for c in wanted
        if c not in frame.columns
    }
    return (frame.assign(**missing) if missing else frame)[wanted]


def copy_columns() -> tuple[str, ...]:
    """The columns a columnar copy keeps: every one the analysis reads and the checks read
    (ids aside: they are checked, and nothing measures them)."""
    kept = (*analysis_columns(), *CHECKED_COLUMNS)
    return tuple(c for c in COLUMNS if c in kept and c != "request_id")


def _keep_copy(
    path: str,
    stamp: CsvStamp,
    frame: pd.DataFrame,
    streams: StreamColumns,
    partial: bool,
    cut_id: str,
    header: list[str],
) -> None:
    """Write the columnar copy of a read that holds every column it keeps; where the directory
    cannot take it, the next reader parses the CSV again."""
    kept = [c for c in copy_columns() if c in header]
    if any(c not in frame.columns for c in kept) or copy_is_current(path, stamp):
        return
    try:
        write_copy(path, stamp, frame[kept], streams, partial, cut_id, header)
    except OSError:
        pass


#: steps.csv's columns the analysis cannot do without
STEPS_REQUIRED: tuple[str, ...] = ("level", "users", "start_ts", "end_ts")


def read_steps(path: str) -> pd.DataFrame:
    """steps.csv; DamagedRun when it is missing, or is not a steps.csv (its header, its types)."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        raise DamagedRun(
            f"{path} is {'empty' if os.path.exists(path) else 'missing'}: the run's levels are not there"
        )
    try:
        frame = pd.read_csv(
            path, dtype={"stop_reason": "string", "kind": "string"}, keep_default_na=True
        )
    except (UnicodeDecodeError, pd.errors.ParserError) as e:
        raise DamagedRun(f"{path}: unreadable ({str(e).strip()[:80]})") from None
    missing = [c for c in STEPS_REQUIRED if c not in frame.columns]
    if missing:
        raise DamagedRun(f"{path}: not a {STEPS_CSV} (its header lacks {', '.join(missing)})")
    for c in frame.columns:
        if c in STEPS_COLUMNS and c not in ("stop_reason", "kind") and frame[c].dtype == object:
            raise DamagedRun(f"{path}: {c} holds {frame[c].iloc[0]!r}, not numbers")
    return frame


#: the columns of Locust's stats history a report draws (its timeline's active users)
HISTORY_COLUMNS: tuple[str, ...] = ("Timestamp", "User Count")


def read_history(path: str) -> pd.DataFrame | None:
    """Locust's stats history, aggregated rows only, numeric, its `HISTORY_COLUMNS` (a long
    run's file holds a row a second for every request name: tens of MB of columns no figure
    reads); None when absent or empty."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    wanted = ("Name", *HISTORY_COLUMNS)
    frame = pd.read_csv(path, na_values=["N/A"], usecols=lambda c: c in wanted)
    if "Name" in frame.columns:
        frame = frame[frame["Name"] == "Aggregated"]
    if frame.empty:
        return None
    return frame.reset_index(drop=True)


def read_client_validation(path: str) -> dict | None:
    """validate-client's verdict on the run (client_validation.json); None if missing or bad."""
    try:
        with open(os.path.join(path, CLIENT_VALIDATION_JSON), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_run_json(path: str) -> dict:
    """The run directory `path`'s run.json, checked (`checks.check_run_json`); DamagedRun when it
    is unreadable or not a run record."""
    try:
        with open(os.path.join(path, RUN_JSON), encoding="utf-8") as fh:
            run = json.load(fh)
    except (OSError, ValueError) as e:
        raise DamagedRun(f"{path}/{RUN_JSON}: unreadable ({e})") from None
    return check_run_json(run, path)


def load_run(path: str, columns: Iterable[str] | None = None) -> RunData:
    """Read one run directory. `columns` limits which requests.csv columns are loaded.

    Raises ValueError when `path` is not a run directory, DamagedRun (a ValueError) when one of
    its files is not what it claims (`checks`)."""
    if not is_run_dir(path):
        raise ValueError(f"{path}: not a run directory (no {RUN_JSON})")
    run = read_run_json(path)
    requests = read_requests(os.path.join(path, REQUESTS_CSV), run, columns)
    gpu = read_gpu_metrics(path)
    return RunData(
        path=path,
        run=run,
        requests=requests.frame,
        steps=read_steps(os.path.join(path, STEPS_CSV)),
        history=read_history(os.path.join(path, HISTORY_CSV)),
        streams=requests.streams,
        notes=[*requests.notes, *([gpu.note] if gpu.note else [])],
        gpu=gpu.frame,
    )
