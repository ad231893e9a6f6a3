"""Loading run directories (docs/run-format.md) into data frames: the analysis package's only I/O.

A run directory is recognised by its `run.json`. `expand_run_paths` turns what a user typed
(run directories, directories holding runs, globs) into a list of run directories, and
`load_run` reads one of them.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import Iterable, Sequence

import pandas as pd

from .files import CLIENT_VALIDATION_JSON, HISTORY_CSV, REQUESTS_CSV, RUN_JSON, STEPS_CSV
from .records import COLUMNS, PANDAS_DTYPES, STEPS_COLUMNS

#: the requests.csv columns the analysis reads (the rest are for people reading the file)
ANALYSIS_COLUMNS: tuple[str, ...] = (
    "level",
    "users",
    "start_ts",
    "end_ts",
    "ttft",
    "e2e",
    "tpot",
    "itl_max",  # a per-request SLO may limit it (analysis.slo)
    "itl_hist",
    "n_chunks",
    "chunks_merged",
    "chunk_marks",
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
    "worker",  # open-loop levels: each load process's untaken arrivals (analysis.rates)
)


@dataclass
class RunData:
    """Everything about one run that the analysis needs."""

    path: str
    run: dict
    requests: pd.DataFrame
    steps: pd.DataFrame
    history: pd.DataFrame | None

    @property
    def model(self) -> str:
        return str(self.run.get("model") or self.run.get("settings", {}).get("model") or "unknown")

    @property
    def run_id(self) -> str:
        return str(self.run.get("run_id") or os.path.basename(self.path.rstrip("/")))


def is_run_dir(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, RUN_JSON))


def _runs_below(path: str) -> list[str]:
    """Run directories one or two levels below `path` (runs/<model>/<run> or <model>/<run>)."""
    found = glob.glob(os.path.join(glob.escape(path), "*", RUN_JSON))
    found += glob.glob(os.path.join(glob.escape(path), "*", "*", RUN_JSON))
    return sorted(os.path.dirname(p) for p in found)


def expand_run_paths(patterns: Sequence[str]) -> list[str]:
    """Run directories named by `patterns`, in order and without duplicates.

    Each pattern is a run directory, a directory holding run directories (such as `runs/` or
    `runs/<model>/`), or a glob of either. Raises ValueError when a pattern matches nothing or
    names a directory that neither is nor holds a run.
    """
    out: list[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches or not any(os.path.exists(m) for m in matches):
            raise ValueError(f"{pattern}: no such run directory (nothing matches)")
        runs: list[str] = []
        for match in matches:
            if is_run_dir(match):
                runs.append(match)
            elif os.path.isdir(match):
                runs.extend(_runs_below(match))
        if not runs:
            raise ValueError(f"{pattern}: not a run directory (no {RUN_JSON}) and holds no runs")
        for run in runs:
            norm = os.path.normpath(run)
            if norm not in out:
                out.append(norm)
    return out


def read_requests_frame(path: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
    """requests.csv with the documented dtypes; only `columns` when given (faster on big runs)."""
    wanted = list(columns) if columns is not None else list(COLUMNS)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return _empty_requests(wanted)
    header = pd.read_csv(path, nrows=0).columns
    usecols = [c for c in wanted if c in header]
    dtypes = {c: t for c, t in PANDAS_DTYPES.items() if c in usecols}
    frame = pd.read_csv(path, usecols=usecols, dtype=dtypes, keep_default_na=True, engine="c")
    for c in wanted:
        if c not in frame.columns:
            frame[c] = pd.Series(None, index=frame.index, dtype=PANDAS_DTYPES.get(c, "float64"))
    return frame[wanted]


def _empty_requests(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=PANDAS_DTYPES.get(c, "float64")) for c in columns})


def read_steps(path: str) -> pd.DataFrame:
    """steps.csv (empty frame with the documented columns when missing)."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return pd.DataFrame({c: [] for c in STEPS_COLUMNS})
    frame = pd.read_csv(path, dtype={"stop_reason": "string"}, keep_default_na=True)
    return frame


def read_history(path: str) -> pd.DataFrame | None:
    """Locust's stats history, aggregated rows only, numeric; None when absent or empty."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    frame = pd.read_csv(path, na_values=["N/A"])
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


def load_run(path: str, columns: Iterable[str] | None = None) -> RunData:
    """Read one run directory. `columns` limits which requests.csv columns are loaded.

    Raises ValueError when `path` is not a run directory or its run.json is unreadable.
    """
    if not is_run_dir(path):
        raise ValueError(f"{path}: not a run directory (no {RUN_JSON})")
    try:
        with open(os.path.join(path, RUN_JSON), encoding="utf-8") as fh:
            run = json.load(fh)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable {RUN_JSON}: {e}") from e
    if not isinstance(run, dict):
        raise ValueError(f"{path}: {RUN_JSON} is not a JSON object")
    return RunData(
        path=path,
        run=run,
        requests=read_requests_frame(os.path.join(path, REQUESTS_CSV), columns),
        steps=read_steps(os.path.join(path, STEPS_CSV)),
        history=read_history(os.path.join(path, HISTORY_CSV)),
    )
