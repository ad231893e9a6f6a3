"""The report at scale (issue 40) gives the figures it gave before it was made fast: on a small
run with rows as a real run writes them (chunk marks, ITL histograms, personas with
conversations, failures, several levels and load workers), the vectorised `parse_marks` equals
the per-row parse it replaced, and the report's summary equals the one the code before the
change wrote (tests/data/realistic_run_seed7_summary.json: its `runs[0]` less the run's path).
Compared exactly: JSON keeps every float's shortest round-trip text."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from vllm_load.analysis.levels.window_rates import MARKS_BATCH, parse_marks
from vllm_load.client import sse
from vllm_load.report.render import build_report
from vllm_load.rundir import synthetic
from vllm_load.rundir.synthetic import ServerModel, SyntheticRun, write_synthetic_run
from vllm_load.rundir.synthetic_personas import Persona

REFERENCE = os.path.join(
    os.path.dirname(__file__), "..", "data", "realistic_run_seed7_summary.json"
)

#: the run the reference summary was written from (about 3,000 rows)
REALISTIC = SyntheticRun(
    levels=(4, 16, 64, 150),
    requests_per_level=600,
    warmup_requests=10,
    output_tokens=64,
    server=ServerModel(fail_rate=0.02, max_num_seqs=100),
    personas=(Persona("ChatUser", 3.0), Persona("AgentUser", 1.0, 1.4, turns=4)),
    chunk_marks=True,
    workers=3,
    seed=7,
)


def per_row_parse(marks) -> np.ndarray:
    """`parse_marks` as it was before issue 40: each row split, each field converted."""
    text = pd.Series(marks, dtype="string").fillna("")
    if not text.str.len().gt(0).any():
        return np.empty((len(text), 0))
    table = text.str.split(";", expand=True)
    return table.apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)


@pytest.fixture(scope="module")
def realistic_run(tmp_path_factory) -> str:
    return write_synthetic_run(str(tmp_path_factory.mktemp("runs")), REALISTIC)


def test_a_realistic_synthetic_run_writes_marks_workers_personas_and_failures(realistic_run):
    rows = pd.read_csv(os.path.join(realistic_run, "requests.csv"))
    rows[["chunk_marks", "itl_hist"]] = rows[["chunk_marks", "itl_hist"]].fillna("")
    ok = rows["ok"] == 1
    assert (rows.loc[ok, "chunk_marks"] != "").all() and (rows.loc[~ok, "chunk_marks"] == "").all()
    assert 0 < (~ok).sum() < 0.05 * len(rows)
    assert set(rows["worker"]) == {"worker-0", "worker-1", "worker-2"}
    assert set(rows["user_class"]) == {"ChatUser", "AgentUser"}
    assert (rows.loc[ok, "itl_hist"] != "").all()
    # chunk 0 at the first token, the last chunk at the end, 17 marks (16 segments) in order
    assert synthetic.CHUNK_MARKS == sse.CHUNK_MARKS == 16
    marks = parse_marks(rows.loc[ok, "chunk_marks"])
    assert marks.shape == (ok.sum(), sse.CHUNK_MARKS + 1)
    assert (np.diff(marks, axis=1) >= 0).all()
    np.testing.assert_allclose(marks[:, 0], rows.loc[ok, "ttft"] * 1000, atol=0.05 + 1e-6)
    np.testing.assert_allclose(marks[:, -1], rows.loc[ok, "e2e"] * 1000, atol=0.05 + 1e-6)


def test_vectorised_marks_equal_the_per_row_parse_on_a_realistic_run(realistic_run):
    marks = pd.read_csv(os.path.join(realistic_run, "requests.csv"), dtype="string")["chunk_marks"]
    # over several batches, a failed request (no marks) among them
    many = pd.concat([marks] * (2 * MARKS_BATCH // len(marks) + 1), ignore_index=True)
    for column in (marks, many):
        fast, slow = parse_marks(column), per_row_parse(column)
        assert fast.shape == slow.shape
        assert np.array_equal(fast, slow, equal_nan=True)


@pytest.mark.parametrize(
    "texts",
    [
        ["1.5;2", "", None, "3"],
        ["", None],
        ["1;;2", "x", "4.0;5"],  # an empty field, not a number
        ["1.2.3;4", "7"],
        ["-1.5;2e3", "1.;.5;-.5"],
        ["1;2;", ";1", "", ""],  # empty rows last
        ["-", "12.3"],
        [],
    ],
)
def test_vectorised_marks_equal_the_per_row_parse_on_odd_texts(texts):
    fast, slow = parse_marks(texts), per_row_parse(texts)
    assert fast.shape == slow.shape
    assert np.array_equal(fast, slow, equal_nan=True)


def test_the_report_figures_equal_those_before_issue_40(realistic_run, tmp_path):
    paths = build_report([realistic_run], str(tmp_path / "r.html"), progress=False)
    with open(paths.json, encoding="utf-8") as fh:
        (run,) = json.load(fh)["runs"]
    run.pop("path")
    with open(REFERENCE, encoding="utf-8") as fh:
        reference = json.load(fh)
    assert run == reference
