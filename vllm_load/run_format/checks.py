"""Whether a run directory's files are what they claim (docs/run-format.md), before any analysis.

A file that is not what vllm-load wrote is refused with one line naming the file and the
problem (`DamagedRun`); damage the analysis can work around is named instead, in a sentence
the report shows (`notes`). Which is which:

- run.json must be a JSON object of format 1 with its settings, and every field the analysis
  reads must have its documented type: a wrong one is refused, never half-read.
- requests.csv is refused when it is missing, empty, not a request log (its header), holds a
  request id twice (duplicated rows count twice in throughput), a value of the wrong type, a
  required value that is empty, or a number that is not finite and non-negative (latencies,
  timestamps, token counts): such a file was not written by a run, and nothing in it can be
  told sound from damaged. So is one holding more rows than run.json recorded when the run
  ended (rows appended after it: a second run in the same directory).
- A last row cut short (the run was killed while writing it, the common real case), or rows
  missing at the end of the file against run.json's count, are left out and said: every row
  still there is whole.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .files import REQUESTS_CSV, RUN_JSON

#: the run.json format this vllm-load reads
FORMAT = 1


class DamagedRun(ValueError):
    """A run directory's file is not what it claims: the message names the file and the problem
    in one line."""


# --- run.json ------------------------------------------------------------------------------------
#: run.json fields the analysis and the report read (dotted: inside another field), and the JSON
#: types each may have when present; `int` and `number` exclude booleans
RUN_FIELDS: dict[str, str] = {
    "run_id": "str",
    "model": "str",
    "settings": "dict",
    "meta": "dict",
    "target": "dict",
    "target.host": "str",
    "target.models": "dict|null",
    "client": "dict",
    "prompts": "dict|null",
    "user_classes": "dict",
    "workload": "dict",
    "outcome": "str",
    "started_at": "str",
    "ended_at": "str",
    "workers_seen": "list",
    "workers_lost": "list",
    "requests_recorded": "int",
    "requests_abandoned": "dict",
    "requests_abandoned.total": "int",
    "server_metrics": "dict",
    "server_metrics.interval": "number|null",
    "drain": "dict",
    "settings.model": "str",
    "settings.levels": "list[int]",
    "settings.rates": "list[number]",
    "settings.slo": "list[str]",
    "settings.input_tokens": "int",
    "settings.output_tokens": "int",
    "settings.input_lengths": "str",
    "settings.output_lengths": "str",
    "settings.endpoint": "str",
    "settings.stream": "bool",
    "settings.dataset": "str",
    "settings.shared_prefix_tokens": "int",
    "settings.temperature": "number|null",
    "settings.requests_per_level": "int|null",  # null: by the level's users (run.steps)
    "settings.warmup_requests": "int",
    "settings.trace_window": "number|null",  # the report's window along a trace replay
    # a --trace replay (docs/run-format.md): what the report's "Replay over time" reads
    "trace": "dict",
    "trace.path": "str",
    "trace.format": "str",
    "trace.start": "number",
    "trace.duration": "number|null",
    "trace.speed": "number",
    "trace.requests": "int",
    "trace.prompt_tokens": "int",
    "trace.predicted_cached_tokens": "int|null",
    "trace.block_tokens": "int",
}

_WORDS = {
    "str": "a string",
    "dict": "an object",
    "list": "a list",
    "int": "an integer",
    "number": "a number",
    "bool": "true or false",
    "null": "null",
}


#: the Python types a JSON value of each kind parses to
_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "dict": (dict,),
    "list": (list,),
    "int": (int,),
    "number": (int, float),
    "bool": (bool,),
    "null": (type(None),),
}


def _is(value: Any, kind: str) -> bool:
    if kind.startswith("list[") and isinstance(value, list):
        return all(_is(item, kind[5:-1]) for item in value)
    if kind in ("int", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES.get(kind, ()))


def _kind_words(kinds: str) -> str:
    return " or ".join(
        f"a list of {_WORDS[k[5:-1]].split(' ', 1)[1]}s" if k.startswith("list[") else _WORDS[k]
        for k in kinds.split("|")
    )


def _json_type(value: Any) -> str:
    for kind in ("bool", "int", "number", "str", "dict", "list", "null"):
        if _is(value, kind):
            return _WORDS[kind]
    return type(value).__name__


def check_run_json(run: Any, path: str) -> dict:
    """`run` (a parsed run.json of the run directory `path`) when it is a run record this vllm-load
    reads; DamagedRun otherwise."""
    where = f"{path}/{RUN_JSON}"
    if not isinstance(run, dict):
        raise DamagedRun(f"{where} is {_json_type(run)}, not a run record (a JSON object)")
    if "format" not in run or "settings" not in run:
        missing = " and ".join(k for k in ("format", "settings") if k not in run)
        raise DamagedRun(f"{where} has no {missing}: not a run record vllm-load wrote")
    if run["format"] != FORMAT:
        raise DamagedRun(
            f"{where} is format {run['format']!r}; this vllm-load reads format {FORMAT}"
        )
    for name, kinds in RUN_FIELDS.items():
        parent, _, key = name.rpartition(".")
        holder = run.get(parent) if parent else run
        if not isinstance(holder, dict) or key not in holder:
            continue
        value = holder[key]
        if not any(_is(value, kind) for kind in kinds.split("|")):
            raise DamagedRun(
                f"{where}: {name} is {_json_type(value)} ({str(value)[:40]!r}), not "
                f"{_kind_words(kinds)}: the file was not written by vllm-load (or was edited)"
            )
    if run.get("requests_recorded", 0) < 0:
        raise DamagedRun(f"{where}: requests_recorded is negative")
    return run


# --- requests.csv --------------------------------------------------------------------------------
#: columns every requests.csv has had since format 1 (others came later: absent means unknown)
REQUIRED_COLUMNS: tuple[str, ...] = (
    "request_id",
    "level",
    "users",
    "start_ts",
    "end_ts",
    "ttft",
    "e2e",
    "ok",
    "error",
)
#: columns that are never empty in a row vllm-load wrote
NEVER_EMPTY: tuple[str, ...] = ("request_id", "level", "users", "start_ts", "end_ts", "e2e", "ok")
#: numeric columns that must be finite and non-negative where they hold a value
NON_NEGATIVE: tuple[str, ...] = (
    "level",
    "users",
    "start_ts",
    "end_ts",
    "ttft",
    "e2e",
    "tpot",
    "itl_mean",
    "itl_p50",
    "itl_p90",
    "itl_p99",
    "itl_max",
    "n_chunks",
    "chunks_merged",
    "prompt_tokens",
    "completion_tokens",
    "requested_prompt_tokens",
    "requested_completion_tokens",
    "status",
    "turn",
    "cached_tokens",
    "queued_s",
    "images",
    "image_bytes",
    "trace_index",
    "stolen_s",
    "tool_calls",
    "tool_wait_s",
)
#: the columns the checks always read, whatever columns a caller asked for
CHECKED_COLUMNS: tuple[str, ...] = (*NEVER_EMPTY, "ttft", "n_chunks")


def check_header(header: list[str], path: str) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        shown = ", ".join(str(c) for c in header[:4]) + (", ..." if len(header) > 4 else "")
        raise DamagedRun(
            f"{path}: not a {REQUESTS_CSV} (its header, {shown or 'empty'}, lacks "
            f"{', '.join(missing)})"
        )


def _broken_rules(frame: pd.DataFrame) -> list[tuple[str, np.ndarray, str]]:
    """Every rule some row breaks: its column, which rows, and what the column must be."""
    rules: list[tuple[str, np.ndarray, str]] = []
    for c in NEVER_EMPTY:
        if c in frame:
            rules.append((c, frame[c].isna().to_numpy(), "must not be empty"))
    for c in NON_NEGATIVE:
        if c in frame:
            values = pd.to_numeric(frame[c], errors="coerce").to_numpy(np.float64, na_value=np.nan)
            broken = ~np.isnan(values) & ~(np.isfinite(values) & (values >= 0))
            rules.append((c, broken, "must be finite and not negative"))
    ok = frame["ok"].to_numpy(np.float64, na_value=np.nan)
    rules.append(("ok", ~np.isnan(ok) & (ok != 0) & (ok != 1), "must be 0 or 1"))
    if "n_chunks" in frame:  # TTFT is the first content chunk's time (non-streamed: the E2E)
        content = (ok == 1) & (frame["n_chunks"].to_numpy(np.float64, na_value=np.nan) > 0)
        no_ttft = frame["ttft"].isna().to_numpy() if "ttft" in frame else content & False
        rules.append(("ttft", content & no_ttft, "must not be empty for a successful request"))
    start, end = (frame[c].to_numpy(np.float64, na_value=np.nan) for c in ("start_ts", "end_ts"))
    rules.append(("end_ts", end < start - 1e-6, "must not be before start_ts"))
    return [rule for rule in rules if rule[1].any()]


def check_request_values(frame: pd.DataFrame, path: str) -> None:
    """DamagedRun naming a repeated request id, or the first row whose values no run writes and
    how many there are."""
    ids = frame["request_id"]
    repeated = ids[ids.duplicated(keep=False)]
    if len(repeated):
        first = repeated.iloc[0]
        raise DamagedRun(
            f"{path}: request id {first} appears {int((ids == first).sum())} times "
            f"({repeated.nunique():,} ids repeated, {len(repeated) - repeated.nunique():,} extra "
            "rows): rows were duplicated or two runs mixed, and would count twice"
        )
    rules = _broken_rules(frame)
    if not rules:
        return
    bad = np.logical_or.reduce([mask for _, mask, _ in rules])
    i = int(np.flatnonzero(bad)[0])
    column, _, must = next(rule for rule in rules if rule[1][i])
    value = frame[column].iloc[i]
    shown = "empty or NaN" if pd.isna(value) else str(value)
    raise DamagedRun(
        f"{path}: row {i + 1} (request {ids.iloc[i]}): {column} is {shown} but {must} "
        f"({int(bad.sum()):,} row(s) like it): not what a run writes; fix or remove those rows"
    )


def count_notes(read: int, partial: bool, run: dict, path: str, partial_id: str = "") -> list[str]:
    """What the report must say about requests.csv's rows against run.json's count
    (`requests_recorded`); DamagedRun when a run that ended recorded fewer rows than the file has.

    `read`: whole rows read; `partial`: a last row cut short was left out."""
    notes = []
    if partial:
        which = f" (request {partial_id})" if partial_id else ""
        notes.append(
            f"{path} ends inside a row{which}, the one being written when the run stopped (or "
            "while it still runs): that row is left out."
        )
    recorded = run.get("requests_recorded")
    if not isinstance(recorded, int):
        return notes
    running = run.get("outcome") in (None, "running")
    if read > recorded and not running:
        raise DamagedRun(
            f"{path} holds {read:,} rows but run.json recorded {recorded:,} when the run ended "
            f"({run.get('outcome')}): rows were added after it (another run written into the "
            "same directory?)"
        )
    if read == 0 and recorded > 0:
        raise DamagedRun(f"{path} holds no rows but run.json recorded {recorded:,}")
    missing = recorded - read - (1 if partial else 0)
    if missing > 0:
        notes.append(
            f"{path} holds {read:,} of the {recorded:,} rows run.json recorded: {missing:,} "
            "are missing (the file was cut short), so the levels they belonged to are measured "
            "without them."
        )
    return notes
