"""The GPUs' telemetry in "Why it saturates" (issue 39, item 2): a synthetic server whose engine
steps lengthen as its batch grows (the batch rule's `compute`), its run given a gpu_metrics.csv
by hand; the verdict names the GPU's figures (SIMULATED where the simulator gave them) or, with
an idle GPU, is not `compute`, and the evidence chart draws the GPU panels where recorded."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from support.report_summary import report_summary
from support.reports import embedded_pngs, report, synthetic_runs, why_sections

from vllm_load.report.evidence_charts import PANELS, evidence_chart
from vllm_load.report.model import build_report_data
from vllm_load.run_format.synthetic import ServerModel
from vllm_load.server.dcgm import GPU_UTIL, POWER, SIMULATED_MODEL, SM_ACTIVE

#: every step 20 % longer per sequence in the batch, no cap within the ladder: `compute`
SLOWING = ServerModel(max_num_seqs=1000, itl_growth_per_seq=0.2)
SERVER_PANELS = tuple(p.key for p in PANELS if not p.gpu)


def add_gpu(run_dir: str, util: list[float], sm: list[float] | None, model: str) -> None:
    """Give a run one GPU whose utilisation (%) and SM activity (0..1) hold each level's value
    from its start to the next level's, read every 0.5 s, as `--gpu-metrics` records them."""
    steps = pd.read_csv(os.path.join(run_dir, "steps.csv"))
    starts = steps["start_ts"].to_numpy(np.float64)
    rows = []
    for t in np.arange(starts[0], float(steps["end_ts"].max()) + 5.0, 0.5):
        level = int(np.searchsorted(starts, t, side="right")) - 1
        figures = {GPU_UTIL: util[level], POWER: 300.0 + 4 * util[level]}
        if sm is not None:
            figures[SM_ACTIVE] = sm[level]
        rows += [
            (t, "http://gpu:9400/metrics", "h", "0", "GPU-a", f, v) for f, v in figures.items()
        ]
    pd.DataFrame(
        rows, columns=["ts", "source", "hostname", "gpu", "uuid", "figure", "value"]
    ).to_csv(os.path.join(run_dir, "gpu_metrics.csv"), index=False)
    path = os.path.join(run_dir, "run.json")
    with open(path, encoding="utf-8") as fh:
        run = json.load(fh)
    gpus = [{"hostname": "h", "gpu": "0", "uuid": "GPU-a", "model_name": model}]
    run["gpu_metrics"] = {
        "interval": 0.5,
        "sources": [
            {
                "source": "http://gpu:9400/metrics",
                "kind": "dcgm",
                "samples": len(rows),
                "errors": 0,
                "gpus": gpus,
                "simulated": model == SIMULATED_MODEL,
            }
        ],
    }
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(run, fh)


def _compute_run(base) -> str:
    (run,) = synthetic_runs(base, 1, server=SLOWING, scrape_interval=0.5)
    return run


def test_a_busy_gpu_is_named_in_the_compute_verdict_and_drawn_on_the_evidence_chart(tmp_path):
    run = _compute_run(tmp_path / "runs")
    add_gpu(run, util=[70, 99, 99, 100], sm=[0.4, 0.88, 0.92, 0.95], model="NVIDIA H100")
    summary, html, markdown = report([run], tmp_path / "r.html")
    diagnosis = summary["series"][0]["diagnosis"]
    assert diagnosis["kind"] == "compute", diagnosis["sentence"]
    # the knee is the lowest level; its verdict is the first level's past it, 50
    assert "; the GPU was busy: SM active 40% → 88%, GPU util 70% → 99%" in diagnosis["sentence"]
    assert "SIMULATED" not in diagnosis["sentence"]
    levels = {lv["value"]: lv["bottleneck"] for lv in summary["series"][0]["levels"]}
    assert levels[200.0]["kind"] == "compute"
    assert "SM active 92% → 95%, GPU util 99% → 100%" in levels[200.0]["reason"]
    assert levels[200.0]["evidence"]["gpu_sm_active"] == pytest.approx(0.95)
    section, md_section = why_sections(html, markdown)
    assert "the GPU was busy: SM active 92% → 95%" in section
    assert "the GPU was busy: SM active 92% → 95%" in md_section

    chart = evidence_chart(build_report_data([run]).series[0], "a")
    assert chart.panels == (*SERVER_PANELS, "gpu_sm", "gpu_util") and chart.skipped == ()
    assert chart.chart is not None and chart.chart.title.startswith("Server and GPU evidence")
    assert "gpu sm activity, gpu utilisation" in chart.chart.alt
    assert len(embedded_pngs(section)) == 1


def test_an_idle_simulated_gpu_rules_compute_out_and_says_simulated(tmp_path):
    run = _compute_run(tmp_path / "runs")
    add_gpu(run, util=[20, 30, 35, 40], sm=None, model=SIMULATED_MODEL)
    summary = report_summary(run)
    levels = {lv["value"]: lv["bottleneck"] for lv in summary["series"][0]["levels"]}
    for users in (50.0, 100.0, 200.0):  # the batch rule's `compute` levels without the GPU
        assert levels[users]["kind"] == "undetermined", levels[users]
        assert "yet the GPU was not busy (busy from 90% GPU utilisation" in levels[users]["reason"]
        assert "(SIMULATED by vllm-load sim, not a real GPU)" in levels[users]["reason"]
    assert summary["series"][0]["diagnosis"]["kind"] != "compute"

    chart = evidence_chart(build_report_data([run]).series[0], "a")
    assert chart.panels == (*SERVER_PANELS, "gpu_util")
    (note,) = chart.skipped  # SM activity: recorded by no level, and said so
    assert note.startswith("GPU SM activity (SIMULATED): not drawn, no level has it")
    assert chart.chart is not None
    assert chart.chart.title.startswith("Server and SIMULATED GPU evidence")


def test_a_run_without_gpu_telemetry_gets_the_same_verdicts_and_no_gpu_panel(tmp_path):
    run = _compute_run(tmp_path / "runs")
    summary = report_summary(run)
    levels = {lv["value"]: lv["bottleneck"] for lv in summary["series"][0]["levels"]}
    assert [levels[u]["kind"] for u in (50.0, 100.0, 200.0)] == ["compute"] * 3
    assert not any("GPU" in lv["reason"] for lv in levels.values())
    chart = evidence_chart(build_report_data([run]).series[0], "a")
    assert chart.panels == SERVER_PANELS and chart.skipped == ()
    assert chart.chart is not None and chart.chart.title.startswith("Server evidence per level")
