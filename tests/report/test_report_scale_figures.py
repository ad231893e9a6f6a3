"""The report at scale (issue 40) gives the figures it gave before it was made fast: on a small
run with rows as a real run writes them (chunk marks, ITL histograms, personas with
conversations, failures, several levels and load workers), the vectorised `parse_marks` equals
the per-row parse it replaced, and the report's summary equals the one the code before the
change wrote (tests/data/*_summary.json: its `runs[0]` less the run's path), whether the run is
parsed from requests.csv or read from its columnar copy: on that run, on one with the server's
/metrics judged against SLOs (the server-side and goodput figures), and on a trace replay.
Compared to the last bits: JSON keeps every float's shortest round-trip text, and a float may
differ from the reference by a few units in its last place only (numpy's sums take other SIMD
paths on other CPUs: an ITL percentile read 0.01212546003653966 on an AMD EPYC host against the
reference's 0.012125460036539661)."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from vllm_load.client import sse
from vllm_load.report.render import build_report
from vllm_load.run_format import synthetic
from vllm_load.run_format.files import REQUESTS_COPY
from vllm_load.run_format.stream_columns import MARKS_BATCH, parse_marks
from vllm_load.run_format.synthetic import ServerModel, SyntheticRun, write_synthetic_run
from vllm_load.run_format.synthetic_personas import Persona
from vllm_load.run_format.synthetic_trace import TraceRun, bursty_trace, write_trace_run
from vllm_load.slo import parse_slo

DATA = os.path.join(os.path.dirname(__file__), "..", "data")

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
#: the server's /metrics beside the client's, judged against SLOs (its reference: the code
#: before issue 40, realistic_server_slo_summary.json)
WITH_SERVER = SyntheticRun(
    levels=(4, 16, 64),
    requests_per_level=300,
    warmup_requests=10,
    output_tokens=48,
    server=ServerModel(fail_rate=0.03, max_num_seqs=32),
    personas=(Persona("ChatUser", 2.0), Persona("AgentUser", 1.0, 1.3, turns=3)),
    chunk_marks=True,
    workers=2,
    seed=11,
    scrape_interval=1.0,
)
SLO = ("ttft<=300ms", "e2e_p99<=5s")


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


def _summary_run(run_dir: str, out: str, slo=()) -> dict:
    paths = build_report([run_dir], out, progress=False, slo=parse_slo(list(slo)) if slo else None)
    with open(paths.json, encoding="utf-8") as fh:
        (run,) = json.load(fh)["runs"]
    run.pop("path")
    return run


def _reference(name: str) -> dict:
    with open(os.path.join(DATA, name), encoding="utf-8") as fh:
        return json.load(fh)


#: a few units in the last place of a double (whose own is ~2.2e-16 of the value)
LAST_BITS = 1e-14


def differences(got, want, path: str = "") -> list[str]:
    """Where `got` and `want` (parsed JSON) differ: a key, a length, a text or a number, a
    float by more than LAST_BITS of its value."""
    if isinstance(got, dict) and isinstance(want, dict):
        if set(got) != set(want):
            return [f"{path}: keys {sorted(set(got) ^ set(want))}"]
        return [d for k in want for d in differences(got[k], want[k], f"{path}.{k}")]
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} items against {len(want)}"]
        return [
            d for i, (g, w) in enumerate(zip(got, want)) for d in differences(g, w, f"{path}[{i}]")
        ]
    if isinstance(got, float) and isinstance(want, float):
        if got == want or abs(got - want) <= LAST_BITS * max(abs(got), abs(want)):
            return []
    elif type(got) is type(want) and got == want:
        return []
    return [f"{path}: {got!r} against {want!r}"]


def test_the_comparison_tells_last_bits_from_a_changed_figure():
    ref = {"levels": [{"itl_p50": 0.012125460036539661, "ok": 583, "kind": "failures"}]}
    assert (
        differences(
            {"levels": [{"itl_p50": 0.01212546003653966, "ok": 583, "kind": "failures"}]}, ref
        )
        == []
    )
    assert differences(
        {"levels": [{"itl_p50": 0.0121254600366, "ok": 583, "kind": "failures"}]}, ref
    )
    assert differences(
        {"levels": [{"itl_p50": 0.012125460036539661, "ok": 583.0, "kind": "failures"}]}, ref
    )
    assert differences(
        {"levels": [{"itl_p50": 0.012125460036539661, "ok": 583, "kind": "none"}]}, ref
    )
    assert differences({"levels": [{"itl_p50": None, "ok": 583, "kind": "failures"}]}, ref)
    assert differences({"levels": []}, ref) and differences({"levels": [{}]}, ref)


def _from_csv_then_copy(run_dir: str, tmp_path, reference: str, slo=()) -> None:
    """The summary equals the reference parsed from requests.csv (which writes the columnar
    copy) and again read from the copy."""
    assert not os.path.exists(os.path.join(run_dir, REQUESTS_COPY))
    want = _reference(reference)
    assert differences(_summary_run(run_dir, str(tmp_path / "csv.html"), slo), want) == []
    assert os.path.exists(os.path.join(run_dir, REQUESTS_COPY))
    assert differences(_summary_run(run_dir, str(tmp_path / "copy.html"), slo), want) == []


def test_the_report_figures_equal_those_before_issue_40(tmp_path):
    run = write_synthetic_run(str(tmp_path / "runs"), REALISTIC)
    _from_csv_then_copy(run, tmp_path, "realistic_run_seed7_summary.json")


def test_server_side_and_goodput_figures_equal_those_before_issue_40(tmp_path):
    run = write_synthetic_run(str(tmp_path / "runs"), WITH_SERVER)
    _from_csv_then_copy(run, tmp_path, "realistic_server_slo_summary.json", SLO)


def test_trace_replay_figures_equal_those_before_issue_40(tmp_path):
    requests = bursty_trace(seed=1, duration=60.0)
    spec = TraceRun(
        requests,
        cap=32,
        scrape_interval=1.0,
        predicted_cached_tokens=sum(r.server_hits for r in requests),
        settings={"slo": ["ttft<=200ms"]},
    )
    run = write_trace_run(str(tmp_path / "runs"), spec)
    _from_csv_then_copy(run, tmp_path, "trace_replay_summary.json")
