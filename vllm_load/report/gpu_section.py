"""A run's GPU telemetry in the report (`analysis.levels.gpu`): its chart per level, and where
its figures came from, as the HTML, Markdown and JSON say it (simulated figures named so)."""

from __future__ import annotations

import numpy as np

from ..run_format.gpu_metrics import gpu_record, simulated, source_line
from .charts import STYLE, Chart, figure, floats, log_level_axis, plt, png_base64, run_title, slug
from .model import RunSummary


def has_gpu(run: RunSummary) -> bool:
    """Whether the run recorded GPU figures that some level measured."""
    return "gpu_power_mean" in run.metrics and bool(run.metrics["gpu_power_mean"].notna().any())


def gpu_levels(run: RunSummary) -> Chart | None:
    """GPU utilisation (and SM activity, where recorded) and power per level: what the GPUs did
    at each load, beside the throughput the table gives."""
    if not has_gpu(run):
        return None
    rows = run.metrics.sort_values("value")
    values = floats(rows, "value")
    kind = "SIMULATED GPU (vllm-load sim)" if simulated(run.run) else "GPU"
    with plt.rc_context(STYLE):
        fig, (util, power) = figure(width=10.0, height=3.4, ncols=2)
        util.plot(values, floats(rows, "gpu_util_mean") * 100.0, marker="o", label="GPU util")
        sm = floats(rows, "gpu_sm_active_mean")
        if np.isfinite(sm).any():
            util.plot(values, sm * 100.0, marker="s", label="SM active")
        util.set_ylim(0, 105)
        util.set_ylabel("%")
        util.set_title("utilisation, mean over the measured window")
        util.legend(loc="best")
        power.plot(values, floats(rows, "gpu_power_mean"), marker="o", color="tab:red")
        power.set_ylim(bottom=0)
        power.set_ylabel("W (all GPUs)")
        power.set_title("power, mean over the measured window")
        for ax in (util, power):
            log_level_axis(ax, list(values), run.axis.label)
        run_title(fig, f"Run {run.run_id}: {kind} per level")
        png = png_base64(fig)
    return Chart(
        f"gpu-{slug(run.run_id)}",
        f"{kind} utilisation and power per level, run {run.run_id}",
        f"{kind} utilisation and power draw at each level of run {run.run_id}",
        png,
    )


def gpu_json(run: dict) -> dict | None:
    """The run's GPU sources for the report's JSON (None without GPU figures)."""
    record = gpu_record(run)
    if not record:
        return None
    return {"source": source_line(run), "simulated": simulated(run), **record}
