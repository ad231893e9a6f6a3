"""The run directory writer on the master: requests.csv, steps.csv and run.json.

Records arrive in batches from workers (or the local process), are attributed to the level
during which they started, appended to requests.csv at once. Nothing is held for the whole run.
"""

from __future__ import annotations

import bisect
import csv
import io
import json
import os
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable

from ..load_kinds import Level
from ..run_format.claim import claim, claimed_for_us
from ..run_format.files import RUN_JSON, STEPS_CSV, run_files_in, safe_name, write_atomic
from ..run_format.records import (
    LEVEL_INDEX,
    START_INDEX,
    STEPS_COLUMNS,
    USERS_INDEX,
    WORKER_INDEX,
    RequestsCsvWriter,
)
from ..user_values import SettingsError


def utc_iso(ts: float | None = None) -> str:
    return datetime.fromtimestamp(ts if ts is not None else time.time(), timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def redacted_argv(argv: list[str], secret: str) -> list[str]:
    """`argv` with `secret` (the API key the options resolved to) hidden wherever it is: argparse
    takes it after any spelling of its flag (`--api-key KEY`, `--api-key=KEY`, `--api-k KEY`,
    `--api=KEY`...), so what is hidden is the value it resolved, not a spelling."""
    if not secret:
        return list(argv)
    return ["***" if arg == secret else arg.replace(secret, "***") for arg in argv]


def new_run_dir(base: str, model: str) -> str:
    """`base/<model>/<UTC timestamp>-<short id>`, the model id made one safe path component."""
    safe_model = safe_name(model, "unknown-model")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return os.path.join(base, safe_model, f"{stamp}-{secrets.token_hex(3)}")


def refuse_existing_run(run_dir: str) -> None:
    """SettingsError when `run_dir` already holds a run: a second one would append to its
    requests.csv, and the two would be measured as one."""
    found = run_files_in(run_dir)
    if found:
        raise SettingsError(
            f"--run-dir {run_dir} already holds a run ({', '.join(found)}): a second run would "
            "append to it and mix the two; name a new directory, or leave --run-dir out (each "
            "run then gets its own under --out)"
        )


@dataclass
class LevelRecord:
    level: int
    kind: str  # `load_kinds` name
    value: float  # in the kind's unit
    users: int
    start_ts: float
    warmup_requests: int
    target_requests: int
    time_cap: float
    end_ts: float | None = None
    stop_reason: str = ""

    def row(self) -> list:
        """steps.csv's row (`run_format.records.STEPS_COLUMNS`)."""
        return [
            self.level,
            self.kind,
            repr(self.value),
            self.users,
            repr(self.start_ts),
            "" if self.end_ts is None else repr(self.end_ts),
            self.warmup_requests,
            self.target_requests,
            self.time_cap,
            self.stop_reason,
        ]


class RunRecorder:
    """Owns one run directory while the run goes on."""

    def __init__(self, run_dir: str, run_info: dict) -> None:
        self.run_dir = run_dir
        if not claimed_for_us(run_dir):  # (a writer started on its own claims it here)
            refuse_existing_run(run_dir)
            claim(run_dir)
        self.run_info = dict(run_info)
        self.run_info.setdefault("outcome", "running")
        self.run_info.setdefault("started_at", utc_iso())
        self.levels: list[LevelRecord] = []
        self._level_starts: list[float] = []
        self.workers_seen: set[str] = set()
        self._abandoned: dict[int, int] = {}
        self.requests = RequestsCsvWriter(os.path.join(run_dir, "requests.csv"))
        self.closed = False
        self.write_steps()
        self.write_run_json()

    # levels -------------------------------------------------------------------------------
    def start_level(
        self, level: int, load: Level, at: float, warmup: int, target: int, time_cap: float
    ) -> None:
        self.levels.append(
            LevelRecord(level, load.kind.name, load.value, load.users, at, warmup, target, time_cap)
        )
        self._level_starts.append(at)
        self.write_steps()

    def end_level(self, level: int, at: float, reason: str) -> None:
        record = self.levels[level]
        if record.end_ts is None:
            record.end_ts, record.stop_reason = at, reason
            self.write_steps()

    @property
    def level_starts(self) -> list[float]:
        return list(self._level_starts)

    def level_of(self, start_ts: float) -> int:
        """The level during which a request started (level 0 for anything earlier)."""
        return max(0, bisect.bisect_right(self._level_starts, start_ts) - 1)

    # records ------------------------------------------------------------------------------
    def add_rows(self, rows: Iterable, worker: str | None = None) -> list[list]:
        """Attribute rows (RequestRecord.to_row tuples or lists) to levels, append them, return them."""
        attributed = []
        for row in rows:
            row = list(row)
            if self.levels:
                level = self.level_of(row[START_INDEX])
                row[LEVEL_INDEX], row[USERS_INDEX] = level, self.levels[level].users
            else:
                row[LEVEL_INDEX] = 0
            if worker is not None:
                row[WORKER_INDEX] = worker
            self.workers_seen.add(str(row[WORKER_INDEX]))
            attributed.append(row)
        if attributed and not self.closed:
            self.requests.write_rows(attributed)
        return attributed

    def add_abandoned(self, starts: Iterable[float], count: int = 1) -> None:
        """Count requests that were in flight when the test stopped them, or their worker was lost
        (they have no row); `count` -1 takes back one that got a row after all."""
        for start in starts:
            level = self.level_of(start) if self.levels else 0
            left = self._abandoned.get(level, 0) + count
            if left > 0:
                self._abandoned[level] = left
            else:
                self._abandoned.pop(level, None)

    # files --------------------------------------------------------------------------------
    def write_steps(self) -> None:
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(STEPS_COLUMNS)
        writer.writerows(level.row() for level in self.levels)
        write_atomic(os.path.join(self.run_dir, STEPS_CSV), text.getvalue())

    def write_run_json(self) -> None:
        self.run_info["workers_seen"] = sorted(self.workers_seen)
        self.run_info["requests_recorded"] = self.requests.rows_written
        self.run_info["requests_abandoned"] = {
            "total": sum(self._abandoned.values()),
            "by_level": {str(k): v for k, v in sorted(self._abandoned.items())},
        }
        text = json.dumps(self.run_info, indent=2, default=str) + "\n"
        write_atomic(os.path.join(self.run_dir, RUN_JSON), text)

    def close(self, outcome: str, reason: str = "interrupted") -> None:
        """End open levels, record the outcome and close the files. Safe to call twice."""
        if self.closed:
            return
        now = time.time()
        for level in self.levels:
            if level.end_ts is None:
                level.end_ts, level.stop_reason = now, reason
        self.write_steps()
        self.run_info["outcome"] = outcome
        self.run_info["ended_at"] = utc_iso(now)
        self.write_run_json()
        self.requests.close()
        self.closed = True
