"""A run's speculative decoding in the report (`analysis.levels.speculation`): its chart by level,
where the server speculated (a server without speculation has no chart, not one of zeros)."""

from __future__ import annotations

import numpy as np

from ..figures import spec_position_keys
from .charts import STYLE, Chart, figure, floats, log_level_axis, plt, png_base64, run_title, slug
from .model import RunSummary


def has_speculation(run: RunSummary) -> bool:
    """Whether some level of the run has speculation figures."""
    column = "spec_acceptance_length"
    return column in run.metrics and bool(run.metrics[column].notna().any())


def speculation_levels(run: RunSummary) -> Chart | None:
    """Acceptance length per level, and the share of drafts accepted at each draft position:
    what the drafts were worth at each load (levels whose counters were reset are left out)."""
    if not has_speculation(run):
        return None
    rows = run.metrics.sort_values("value")
    values = floats(rows, "value")
    with plt.rc_context(STYLE):
        fig, (length, positions) = figure(width=10.0, height=3.4, ncols=2)
        length.plot(values, floats(rows, "spec_acceptance_length"), marker="o")
        length.set_ylim(bottom=1.0)
        length.set_ylabel("tokens per step per sequence")
        length.set_title("acceptance length (1 + accepted per draft)")
        for key in spec_position_keys(rows.columns):
            share = floats(rows, key)
            if np.isfinite(share).any():
                position = key.rsplit("_", 1)[1]
                positions.plot(values, share * 100.0, marker="o", label=f"position {position}")
        positions.set_ylim(0, 105)
        positions.set_ylabel("% of drafts")
        positions.set_title("accepted at each draft position")
        positions.legend(loc="best")
        for ax in (length, positions):
            log_level_axis(ax, list(values), run.axis.label)
        run_title(fig, f"Run {run.run_id}: speculative decoding per level")
        png = png_base64(fig)
    return Chart(
        f"speculation-{slug(run.run_id)}",
        f"Speculative decoding per level, run {run.run_id}",
        f"Acceptance length and per-position acceptance at each level of run {run.run_id}, "
        "from the server's vllm:spec_decode_* counters over the measured window",
        png,
    )
