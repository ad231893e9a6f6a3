"""Finding and loading run directories."""

from __future__ import annotations

import json
import os

import pytest

from vllm_load.run_format.load import load_run
from vllm_load.run_format.records import COLUMNS
from vllm_load.run_format.run_paths import expand_run_paths


def write_run(path, model="m", rows=()):
    os.makedirs(path)
    with open(os.path.join(path, "run.json"), "w") as fh:
        json.dump(
            {"format": 1, "run_id": os.path.basename(path), "model": model, "settings": {}}, fh
        )
    with open(os.path.join(path, "requests.csv"), "w") as fh:
        fh.write(",".join(COLUMNS) + "\n")
        for row in rows:
            fh.write(row + "\n")
    with open(os.path.join(path, "steps.csv"), "w") as fh:
        fh.write(
            "level,users,start_ts,end_ts,warmup_requests,target_requests,time_cap,stop_reason\n"
        )
        fh.write("0,2,1.0,5.0,0,2,600.0,target_reached\n")
    return str(path)


def test_expand_dirs_globs_and_parents(tmp_path):
    a = write_run(tmp_path / "runs" / "m" / "r1")
    b = write_run(tmp_path / "runs" / "m" / "r2")
    c = write_run(tmp_path / "runs" / "n" / "r3")
    assert expand_run_paths([a]) == [a]
    assert expand_run_paths([str(tmp_path / "runs" / "m" / "*")]) == [a, b]
    assert expand_run_paths([str(tmp_path / "runs")]) == [a, b, c]
    assert expand_run_paths([a, str(tmp_path / "runs" / "m")]) == [a, b]  # no duplicates


def test_expand_errors(tmp_path):
    with pytest.raises(ValueError, match="nothing matches"):
        expand_run_paths([str(tmp_path / "nope-*")])
    with pytest.raises(ValueError, match="nothing matches"):
        expand_run_paths([str(tmp_path / "missing")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a run directory"):
        expand_run_paths([str(tmp_path / "empty")])


def test_load_run(tmp_path):
    row = "0-1,local,0,2,chat,1,1.0,2.0,0.1,1.0,0.01,,,,,,10:3,4,0,,10,5,10,5,1,200,,"
    path = write_run(tmp_path / "r", rows=[row])
    run = load_run(path)
    assert run.model == "m" and run.run_id == "r"
    assert len(run.requests) == 1 and run.requests["itl_hist"].iloc[0] == "10:3"
    assert int(run.steps["users"].iloc[0]) == 2
    assert run.history is None
    sub = load_run(path, columns=["level", "end_ts", "ok"])
    assert list(sub.requests.columns) == ["level", "end_ts", "ok"]
    with pytest.raises(ValueError, match="not a run directory"):
        load_run(str(tmp_path))
