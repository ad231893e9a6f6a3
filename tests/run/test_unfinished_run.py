"""A run whose writer was killed before it closed it is closed by whoever started it: run.json
never says `running` for a run that is over (`run_format.unfinished`)."""

from __future__ import annotations

import json
import os

from vllm_load.run_format.unfinished import close_unfinished

STEPS = (
    "level,users,start_ts,end_ts,warmup_requests,target_requests,time_cap,stop_reason,rate\r\n"
    "0,4,100.0,110.5,2,10,1200.0,target_reached,\r\n"
    "1,8,110.5,,2,10,1200.0,,\r\n"
)


def write_run(path, outcome: str) -> str:
    os.makedirs(path)
    with open(os.path.join(path, "run.json"), "w", encoding="utf-8") as fh:
        json.dump({"run_id": "r1", "outcome": outcome, "requests_recorded": 7}, fh)
    with open(os.path.join(path, "steps.csv"), "w", encoding="utf-8", newline="") as fh:
        fh.write(STEPS)
    return str(path)


def test_a_run_left_running_is_closed_as_interrupted_with_why(tmp_path):
    run_dir = write_run(tmp_path / "run", "running")
    assert close_unfinished(run_dir, "the Locust process was killed by signal 9", at=123.25)
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as fh:
        run = json.load(fh)
    assert run["outcome"] == "interrupted" and run["ended_at"] == "1970-01-01T00:02:03Z"
    assert run["closed_by"] == "the Locust process was killed by signal 9"
    assert run["requests_recorded"] == 7  # what was recorded stays as it was
    with open(os.path.join(run_dir, "steps.csv"), encoding="utf-8", newline="") as fh:
        lines = fh.read().split("\r\n")
    assert lines[1] == "0,4,100.0,110.5,2,10,1200.0,target_reached,"  # an ended level is kept
    assert lines[2] == "1,8,110.5,123.25,2,10,1200.0,interrupted,"
    assert not [p for p in os.listdir(run_dir) if p.endswith(".tmp")]


def test_a_closed_run_is_left_alone(tmp_path):
    for outcome in ("completed", "interrupted", "workers_lost"):
        run_dir = write_run(tmp_path / outcome, outcome)
        before = {n: open(os.path.join(run_dir, n)).read() for n in ("run.json", "steps.csv")}
        assert not close_unfinished(run_dir, "why")
        assert before == {n: open(os.path.join(run_dir, n)).read() for n in before}
    assert not close_unfinished(str(tmp_path / "nowhere"), "why")
