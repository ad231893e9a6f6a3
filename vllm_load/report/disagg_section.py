"""A run against a disaggregated deployment in the report (`analysis.levels.disagg`): its TTFT
split into prefill, KV transfer and first decode step, and the KV bandwidth, by level, where the
run scraped its prefill and decode servers (--role-metrics); none without them, not zeros."""

from __future__ import annotations

import numpy as np

from .charts import STYLE, Chart, figure, floats, log_level_axis, plt, png_base64, run_title, slug
from .model import RunSummary

#: the TTFT parts, in the order they happen: (level column, legend)
PARTS = (
    ("pd_prefill_ms", "prefill (prefill server's TTFT)"),
    ("kv_xfer_ms", "KV transfer (vllm:nixl_xfer_time_seconds)"),
    ("pd_first_decode_ms", "first decode step (decode server's TTFT less the transfer)"),
)


def has_disagg(run: RunSummary) -> bool:
    """Whether some level of the run has a disaggregated deployment's figures."""
    return any(key in run.metrics and bool(run.metrics[key].notna().any()) for key, _ in PARTS)


def disagg_levels(run: RunSummary) -> Chart | None:
    """TTFT's parts per level, stacked, and the KV bandwidth: which side grew with the load."""
    if not has_disagg(run):
        return None
    rows = run.metrics.sort_values("value")
    values = floats(rows, "value")
    with plt.rc_context(STYLE):
        fig, (split, bandwidth) = figure(width=10.0, height=3.4, ncols=2)
        bottom = np.zeros(len(values))
        for key, label in PARTS:
            part = np.nan_to_num(floats(rows, key)) if key in rows else bottom * 0
            if part.any():
                split.fill_between(values, bottom, bottom + part, alpha=0.6, label=label)
            bottom = bottom + part
        split.set_ylabel("ms (means over the window)")
        split.set_title("TTFT by part")
        split.legend(loc="upper left", fontsize=7)
        if "kv_xfer_gbps" in rows and rows["kv_xfer_gbps"].notna().any():
            bandwidth.plot(values, floats(rows, "kv_xfer_gbps"), marker="o")
        bandwidth.set_ylim(bottom=0)
        bandwidth.set_ylabel("GB/s")
        bandwidth.set_title("KV bandwidth (bytes / transfer seconds)")
        for ax in (split, bandwidth):
            log_level_axis(ax, list(values), run.axis.label)
        run_title(fig, f"Run {run.run_id}: disaggregated prefill/decode per level")
        png = png_base64(fig)
    return Chart(
        f"disagg-{slug(run.run_id)}",
        f"Disaggregated prefill/decode per level, run {run.run_id}",
        f"TTFT split into prefill, KV transfer and first decode step, and KV bandwidth, at each "
        f"level of run {run.run_id}, from the prefill and decode servers' /metrics",
        png,
    )
