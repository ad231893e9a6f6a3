"""GPU telemetry through a whole run (issue 39's acceptance): the simulator's DCGM-format endpoint
scraped with --gpu-metrics, energy per output token recomputed here from gpu_metrics.csv and
requests.csv, and the figures (marked simulated) in the printed table, the report's HTML and JSON,
and compare."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest
from support.runhelpers import load_run_files, only_run_dir, run_vllm_load
from support.shared_runs import shared_run

from vllm_load.analysis.levels.spans import success_spans
from vllm_load.analysis.levels.window_rates import work_in_window
from vllm_load.server.dcgm import ENERGY
from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.dcgm_exporter import DCGM_PATH

INTERVAL = 0.1


def make_gpu_run(out) -> None:
    with SimulatorProcess("--dcgm", "--time-scale", "0.2", "--max-num-seqs", "8") as sim:
        printed = run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--levels",
            "2,4",
            "--input-tokens",
            "128",
            "--output-tokens",
            "64",
            "--requests-per-level",
            "48",
            "--warmup-requests",
            "4",
            "--metrics-interval",
            str(INTERVAL),
            "--gpu-metrics",
            sim.url + DCGM_PATH,
            "--out",
            str(out / "runs"),
        ).stdout
    (out / "printed.txt").write_text(printed, encoding="utf-8")
    run_vllm_load("report", only_run_dir(out / "runs"), "-o", str(out / "r.html"), "--quiet")


@pytest.fixture
def gpu_run():
    """One run with its simulated GPU scraped, and its report, shared by the tests below (made
    once per session, whichever xdist worker asks first: tests/support/shared_runs.py)."""
    out = shared_run("gpu-telemetry", make_gpu_run)
    printed = (out / "printed.txt").read_text(encoding="utf-8")
    return only_run_dir(out / "runs"), printed, out


def _windows(requests: pd.DataFrame, steps: pd.DataFrame) -> dict[int, tuple[float, float]]:
    """Each level's measured window as docs/run-format.md defines it: from the W-th of its
    requests to finish to the (W + K)-th (levels that reached their count)."""
    out = {}
    for step in steps.to_dict("records"):
        assert step["stop_reason"] == "target_reached"
        ends = np.sort(requests.loc[requests["level"] == step["level"], "end_ts"].to_numpy())
        w, wk = int(step["warmup_requests"]), int(step["target_requests"])
        out[int(step["level"])] = (ends[w - 1], ends[wk - 1])
    return out


def test_energy_per_output_token_is_the_counters_growth_over_the_windows_output_tokens(gpu_run):
    run_dir, _printed, out = gpu_run
    requests, steps, run, _ = load_run_files(run_dir)
    (source,) = run["gpu_metrics"]["sources"]
    assert source["simulated"] and source["errors"] == 0 and source["samples"] >= 20
    readings = pd.read_csv(os.path.join(run_dir, "gpu_metrics.csv"))
    energy = readings[readings["figure"] == ENERGY].sort_values("ts")
    t, mj = energy["ts"].to_numpy(), energy["value"].to_numpy()
    summary = json.loads((out / "r.summary.json").read_text())
    levels = summary["runs"][0]["levels"]
    spans = success_spans(requests)
    for level, (a, b) in _windows(requests, steps).items():
        reported = levels[level]
        assert (reported["window_start"], reported["window_end"]) == pytest.approx((a, b))
        assert t[0] < a and b < t[-1] and b - a > 4 * INTERVAL  # read at both edges
        joules = (np.interp(b, t, mj) - np.interp(a, t, mj)) / 1000.0
        tokens = work_in_window(spans, a, b).output_tokens
        assert tokens == pytest.approx(reported["output_tok_per_s"] * (b - a))
        assert reported["gpu_energy_j"] == pytest.approx(joules, rel=1e-9)
        assert reported["gpu_j_per_output_token"] == pytest.approx(joules / tokens, rel=1e-9)
        requests_done = reported["req_per_s"] * (b - a)
        assert reported["gpu_j_per_request"] == pytest.approx(joules / requests_done, rel=1e-9)
        # a busy simulated GPU: between its idle and its full power
        assert 75.0 < reported["gpu_power_mean"] <= 700.0 and reported["gpu_util_mean"] > 0
        # the series' per-level mean over its one run is the same figure
        curve = summary["series"][0]["levels"][level]
        assert curve["gpu_j_per_output_token_mean"] == pytest.approx(
            reported["gpu_j_per_output_token"]
        )
    assert summary["runs"][0]["gpu_metrics"]["simulated"] is True


def test_the_figures_appear_marked_simulated_in_the_table_report_and_csv(gpu_run):
    run_dir, printed, out = gpu_run
    header = next(line for line in printed.splitlines() if line.startswith("users"))
    assert "GPU util %" in header and "GPU W" in header and "J/out tok" in header
    assert "GPU figures SIMULATED by vllm-load sim, not a real GPU" in printed
    html = (out / "r.html").read_text()
    summary = json.loads((out / "r.summary.json").read_text())
    assert 'id="chart-gpu-' in html and "J / output token" in html
    assert "GPU figures SIMULATED by vllm-load sim, not a real GPU" in html
    for level in summary["runs"][0]["levels"]:
        assert f"{level['gpu_j_per_output_token']:,.4f}" in html
    assert any("SIMULATED" in f for f in summary["series"][0]["findings"])
    assert "Run " in (out / "r.md").read_text() and "SIMULATED" in (out / "r.md").read_text()
    csv_text = (out / "r.summary.csv").read_text()
    assert ",gpu_j_per_output_token," in csv_text and ",gpu_simulated,value,1" in csv_text


def test_compare_tests_energy_per_output_token(gpu_run, tmp_path):
    run_dir, _printed, _out = gpu_run
    other = shutil.copytree(run_dir, tmp_path / "copy")
    printed = run_vllm_load("compare", run_dir, "vs", str(other), "-o", str(tmp_path / "ab")).stdout
    compared = json.loads((tmp_path / "ab.json").read_text())
    for level in compared["levels"]:
        rows = {row["figure"]: row for row in level["figures"]}
        assert rows["gpu_j_per_output_token"]["a"]["mean"] > 0
        assert rows["gpu_j_per_request"]["higher_is_better"] is False
    assert len(compared["gpu_sources"]) == 2 and all(
        "SIMULATED" in s for s in compared["gpu_sources"]
    )
    assert "SIMULATED by vllm-load sim" in printed
    assert "SIMULATED by vllm-load sim" in (tmp_path / "ab.html").read_text()
