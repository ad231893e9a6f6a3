"""The GPUs' figures per level (`analysis.levels.gpu`) from hand-made gpu_metrics.csv frames, and
their declarations (`figures.GPU`): shown where a run recorded GPUs, absent everywhere else."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from vllm_load.analysis.levels.gpu import gpu_findings, level_gpu_figures, with_gpu
from vllm_load.analysis.levels.measure import metric_columns
from vllm_load.analysis.levels.table import table_columns
from vllm_load.figures import COMPARE, REPORT, gpu_columns, shown_in
from vllm_load.server.dcgm import ENERGY, FB_USED, GPU_UTIL, POWER, SM_ACTIVE


def _readings(ts, source="nvml", gpu="0", uuid="GPU-a", **figures) -> list[dict]:
    rows = []
    for figure, values in figures.items():
        for t, v in zip(ts, values):
            rows.append(
                {
                    "ts": t,
                    "source": source,
                    "hostname": "h",
                    "gpu": gpu,
                    "uuid": uuid,
                    "figure": {"util": GPU_UTIL, "sm": SM_ACTIVE, "fb": FB_USED}.get(
                        figure, {"power": POWER, "energy": ENERGY}.get(figure, figure)
                    ),
                    "value": float(v),
                }
            )
    return rows


def _levels(*windows, tok_per_s=100.0, req_per_s=2.0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "level": list(range(len(windows))),
            "users": [4.0 * (i + 1) for i in range(len(windows))],
            "window_start": [a for a, _ in windows],
            "window_end": [b for _, b in windows],
            "output_tok_per_s": tok_per_s,
            "req_per_s": req_per_s,
        }
    )


TS = [float(t) for t in range(21)]


def test_two_gpus_energy_per_output_token_is_the_counters_growth_over_the_windows_tokens():
    # GPU a: 300 W steady (300 J/s = 300,000 mJ/s); GPU b: 100 W; utilisation 80 % and 20 %
    rows = _readings(
        TS,
        gpu="0",
        uuid="GPU-a",
        util=[80] * 21,
        sm=[0.6] * 21,
        fb=[1000 + 10 * t for t in TS],
        power=[300] * 21,
        energy=[5e6 + 300_000 * t for t in TS],
    )
    rows += _readings(
        TS,
        gpu="1",
        uuid="GPU-b",
        util=[20] * 21,
        fb=[500] * 21,
        power=[100] * 21,
        energy=[1e6 + 100_000 * t for t in TS],
    )
    row = level_gpu_figures(pd.DataFrame(rows), _levels((2.5, 12.5))).iloc[0]
    assert row.gpu_energy_j == pytest.approx(400.0 * 10)  # (300 + 100) W over 10 s
    assert row.gpu_j_per_output_token == pytest.approx(4000.0 / (100.0 * 10))
    assert row.gpu_j_per_request == pytest.approx(4000.0 / (2.0 * 10))
    assert row.gpu_util_mean == pytest.approx(0.5)  # mean of the GPUs, as a share
    assert row.gpu_power_mean == pytest.approx(400.0)  # summed
    assert row.gpu_memory_used_max == pytest.approx(1000 + 10 * 12.5)  # the fullest, at the edge
    assert row.gpu_sm_active_mean == pytest.approx(0.6)  # only GPU 0 reports it


def test_a_stale_counter_is_read_at_its_changes_not_as_a_staircase():
    # an exporter that refreshes every 4 s, scraped every second: the same value 4 times over
    fresh = [300_000 * (t - t % 4) for t in TS]
    rows = _readings(TS, power=[300] * 21, energy=fresh)
    row = level_gpu_figures(pd.DataFrame(rows), _levels((2.0, 18.0))).iloc[0]
    # between its changes (at 0, 4, 8, ...) the counter is 300 J/s, exactly
    assert row.gpu_energy_j == pytest.approx(300.0 * 16)
    # a window shorter than 4 of its updates is not read (16 s >= 4 x 4 s is)
    short = level_gpu_figures(pd.DataFrame(rows), _levels((2.0, 14.0))).iloc[0]
    assert math.isnan(short.gpu_energy_j) and math.isnan(short.gpu_j_per_output_token)
    assert short.gpu_power_mean == pytest.approx(300.0)


def test_energy_is_not_read_across_a_reset_or_outside_the_readings():
    energy = [1e6 + 300_000 * t for t in TS]
    energy[10:] = [300_000 * (t - 10) for t in TS[10:]]  # the GPU was reset at 10 s
    rows = _readings(TS, power=[300] * 21, energy=energy)
    frame = pd.DataFrame(rows)
    got = level_gpu_figures(frame, _levels((5.0, 15.0), (11.0, 19.0), (15.0, 25.0)))
    assert math.isnan(got.gpu_energy_j[0])  # the counter went back inside the window
    assert got.gpu_energy_j[1] == pytest.approx(300.0 * 8)  # after the reset
    assert math.isnan(got.gpu_energy_j[2])  # past the last reading


def test_a_gpu_read_by_two_sources_counts_once():
    rows = _readings(TS, source="nvml", power=[300] * 21, energy=[300_000 * t for t in TS])
    rows += _readings(TS, source="http://x:9400/metrics", power=[300] * 21, energy=[0] * 21)
    row = level_gpu_figures(pd.DataFrame(rows), _levels((2.0, 12.0))).iloc[0]
    assert row.gpu_power_mean == pytest.approx(300.0)
    assert row.gpu_energy_j == pytest.approx(3000.0)


def test_without_gpu_data_the_columns_are_there_and_empty():
    levels = _levels((2.0, 12.0))
    got = level_gpu_figures(None, levels)
    assert list(got.columns) == ["level", *gpu_columns()] and got[list(gpu_columns())].isna().all(
        axis=None
    )
    assert with_gpu(levels, None) is levels
    assert set(gpu_columns()) <= set(metric_columns())


def _metrics(with_gpu_figures: bool) -> pd.DataFrame:
    frame = pd.DataFrame({"level": [0, 1], "value": [2.0, 4.0], "success_rate": [1.0, 1.0]})
    for column in gpu_columns():
        frame[column] = [0.5, 0.6] if with_gpu_figures else np.nan
    frame["gpu_sm_active_mean"] = np.nan  # SM activity: none recorded
    return frame


def test_the_gpu_figures_are_shown_only_where_a_run_recorded_gpus():
    def present(metrics):
        return lambda key: key in metrics and bool((metrics[key] > 0).any())

    shown = [c[1] for c in table_columns(_metrics(True))]
    assert {"gpu_util_mean", "gpu_power_mean", "gpu_j_per_output_token"} <= set(shown)
    assert not {c[1] for c in table_columns(_metrics(False))} & set(gpu_columns())
    report = {f.key for f in shown_in(REPORT, present(_metrics(True)))}
    assert report >= set(gpu_columns()) - {"gpu_sm_active_mean"}
    assert "gpu_sm_active_mean" not in report  # only with SM activity recorded
    compared = {f.key for f in shown_in(COMPARE, present(_metrics(True)))}
    assert {"gpu_j_per_output_token", "gpu_j_per_request"} <= compared


def test_the_findings_name_simulated_figures_and_levels_whose_energy_was_not_read():
    run = {
        "gpu_metrics": {
            "sources": [
                {
                    "source": "http://127.0.0.1:8000/dcgm/metrics",
                    "samples": 30,
                    "simulated": True,
                    "gpus": [{"model_name": "vllm-load simulated GPU"}],
                }
            ]
        }
    }
    metrics = _metrics(True)
    metrics.loc[1, "gpu_energy_j"] = np.nan
    found = gpu_findings("r1", run, metrics)
    assert "SIMULATED by vllm-load sim, not a real GPU" in found[0]
    assert "not read at 4:" in found[1]
    assert gpu_findings("r1", {}, metrics) == []
