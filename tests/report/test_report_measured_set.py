"""A level's failure counts and throughput are over its measured set, like its other figures
(issue 52 item 6): the failures of its warm-up are not named beside the share of its measured
requests that failed (14 named beside 9), and a level where no measured request succeeded shows
no throughput (it showed 15,804 tok/s: the work of other levels' requests in its window)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from support.report_summary import report_summary
from support.reports import report, synthetic_runs

from vllm_load.analysis.levels.measure import measure_levels

TEXT = {"error": object, "error_message": object, "itl_hist": object, "chunk_marks": object}


def fail(run: str, which) -> pd.DataFrame:
    """Rewrite requests.csv with the requests `which(requests)` picks failed (HTTP 503, at
    once); the rewritten requests."""
    requests = pd.read_csv(f"{run}/requests.csv", dtype=TEXT)
    shed = which(requests)
    requests.loc[shed, ["ok", "status", "error", "error_message"]] = [0, 503, "http_status", "503"]
    requests.loc[shed, "end_ts"] = requests.loc[shed, "start_ts"] + 0.002
    for col in ("ttft", "prompt_tokens", "completion_tokens", "tpot"):
        requests[col] = requests[col].astype(np.float64)
        requests.loc[shed, col] = np.nan
    requests.to_csv(f"{run}/requests.csv", index=False)
    return requests


def top_level(requests: pd.DataFrame) -> pd.Series:
    return requests["level"] == requests["level"].max()


def test_a_levels_failures_named_are_its_measured_ones(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1, warmup_requests=200)
    requests = fail(run, lambda r: top_level(r) & (np.arange(len(r)) % 4 == 0))
    summary = report_summary(run)
    top = max(summary["runs"][0]["levels"], key=lambda lv: lv["level"])
    shed = int((top_level(requests) & (requests["ok"] != 1)).sum())
    assert 0 < top["failed"] < shed  # the warm-up failed too: the two sets differ
    level = next(f for f in summary["series"][0]["findings"] if f.startswith("Level 200"))
    assert f"(its failed requests: {top['failed']:,} http_status 503)" in level, level


def test_a_level_where_nothing_succeeded_shows_no_throughput(tmp_path):
    (run,) = synthetic_runs(tmp_path, 1)
    fail(run, top_level)
    requests = pd.read_csv(f"{run}/requests.csv", dtype=TEXT)
    steps = pd.read_csv(f"{run}/steps.csv", dtype={"stop_reason": object})
    metrics = measure_levels(requests, steps).metrics
    top, below = metrics.iloc[-1], metrics.iloc[-2]
    assert top["success_rate"] == 0
    for column in ("req_per_s", "total_tok_per_s", "output_tok_per_s", "input_tok_per_s"):
        assert math.isnan(top[column]), (column, top[column])
        assert below[column] > 0
    summary, _, markdown = report([run], tmp_path / "r.html")
    shown = next(lv for lv in summary["runs"][0]["levels"] if lv["level"] == top["level"])
    assert shown["total_tok_per_s"] is None and shown["req_per_s"] is None
    lines = markdown.splitlines()
    # (⚠: left out of the conclusions for its failures, and named for them)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("| ⚠ 200 ") and "0.0%" in ln)
    header = next(lines[i] for i in range(at, 0, -1) if lines[i].startswith("| users "))
    cells = dict(zip(header.split(" | "), lines[at].split(" | ")))
    assert cells["req/s"] == cells["total tok/s"] == cells["output tok/s"] == "-", cells
    named = [f for f in summary["series"][0]["findings"] if f.startswith("Level 200")]
    assert named and "100.0% of its measured requests failed" in named[0], named
