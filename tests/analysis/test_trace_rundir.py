"""The run directory's contract for a trace replay (docs/run-format.md): requests.csv's
`trace_index`, and run.json's `trace` record checked like every field the analysis reads."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from vllm_load.run_format.checks import DamagedRun
from vllm_load.run_format.load import load_run
from vllm_load.run_format.synthetic_trace import TraceRequest, TraceRun, write_trace_run

REQUESTS = tuple(TraceRequest(at=0.5 * i) for i in range(5))


def test_trace_index_is_read_back(tmp_path):
    run = write_trace_run(str(tmp_path), TraceRun(REQUESTS))
    data = load_run(run)
    assert data.requests["trace_index"].dtype == "Int64"
    assert sorted(data.requests["trace_index"].tolist()) == [0, 1, 2, 3, 4]


def test_a_request_of_no_trace_has_no_index(tmp_path):
    earlier = (TraceRequest(at=-2.0),)
    data = load_run(write_trace_run(str(tmp_path), TraceRun(REQUESTS, earlier=earlier)))
    first = data.requests.sort_values("start_ts").iloc[0]
    assert first["level"] == 0 and pd.isna(first["trace_index"])


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("requests", "five", r"trace.requests is a string .*not an integer"),
        (
            "predicted_cached_tokens",
            1.5,
            r"trace.predicted_cached_tokens is a number .*not an integer or null",
        ),
        ("speed", None, r"trace.speed is null .*not a number"),
    ],
)
def test_a_damaged_trace_record_is_refused_naming_the_field(tmp_path, field, value, message):
    run = write_trace_run(str(tmp_path), TraceRun(REQUESTS))
    path = os.path.join(run, "run.json")
    with open(path) as fh:
        info = json.load(fh)
    info["trace"][field] = value
    with open(path, "w") as fh:
        json.dump(info, fh)
    with pytest.raises(DamagedRun, match=message):
        load_run(run)


def test_a_negative_trace_index_is_refused(tmp_path):
    run = write_trace_run(str(tmp_path), TraceRun(REQUESTS))
    path = os.path.join(run, "requests.csv")
    frame = pd.read_csv(path)
    frame.loc[2, "trace_index"] = -1
    frame.to_csv(path, index=False)
    with pytest.raises(DamagedRun, match=r"trace_index is -1 but must be finite and not negative"):
        load_run(run)
