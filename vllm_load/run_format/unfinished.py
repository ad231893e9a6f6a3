"""Closing a run whose writer died before it could: run.json must never say `running` for a run
that is over.

The process that writes a run (the Locust master, or the single local process) closes it itself
on every way out it lives through (the end of the test, Ctrl-C, SIGTERM, its parent's death).
When it is killed outright (SIGKILL, the OOM killer) its run.json still says `running`; the
command that started it (`vllm-load run` and the commands built on it) sees it exit and closes
the run here as `interrupted`, saying why in `closed_by`. What was recorded stays as it is.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from datetime import datetime, timezone

from .files import RUN_JSON, STEPS_CSV, write_atomic

INTERRUPTED = "interrupted"


def is_unfinished(run_dir: str) -> bool:
    """Whether `run_dir`'s run.json says the run is still running."""
    try:
        with open(os.path.join(run_dir, RUN_JSON), encoding="utf-8") as fh:
            run = json.load(fh)
    except (OSError, ValueError):
        return False
    return isinstance(run, dict) and run.get("outcome") == "running"


def close_unfinished(run_dir: str, why: str, at: float | None = None) -> bool:
    """Close a run its writer left `running`: its outcome becomes `interrupted`, `ended_at` and
    `closed_by` (`why`) are set, and its open levels in steps.csv end at `at` (now) with the stop
    reason `interrupted`. False, changing nothing, when the run is not left running."""
    if not is_unfinished(run_dir):
        return False
    at = time.time() if at is None else at
    _end_open_levels(os.path.join(run_dir, STEPS_CSV), at)
    path = os.path.join(run_dir, RUN_JSON)
    with open(path, encoding="utf-8") as fh:
        run = json.load(fh)
    run["outcome"] = INTERRUPTED
    run["ended_at"] = datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    run["closed_by"] = why
    write_atomic(path, json.dumps(run, indent=2, default=str) + "\n")
    return True


def _end_open_levels(path: str, at: float) -> None:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            rows = list(csv.reader(fh))
    except OSError:
        return
    if not rows or "end_ts" not in rows[0] or "stop_reason" not in rows[0]:
        return
    end, reason = rows[0].index("end_ts"), rows[0].index("stop_reason")
    changed = False
    for row in rows[1:]:
        if len(row) == len(rows[0]) and not row[end]:
            row[end], row[reason] = repr(at), INTERRUPTED
            changed = True
    if changed:
        text = io.StringIO()
        csv.writer(text).writerows(rows)
        write_atomic(path, text.getvalue())
