"""The chart of a series' server evidence per level (the "Why it saturates" section): what each
level's bottleneck verdict stands on, one panel per figure, each level's point coloured by its
verdict's kind, the configured limit as a dashed line where it is known (labelled read, given or
inferred), and the measured and predicted knees as vertical lines. A panel whose figure no level
has is left out, and said so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.lines import Line2D

from ..analysis.diagnosis.facts import ServerFacts
from ..analysis.diagnosis.verdict import KINDS, KV_FULL
from .charts import STYLE, Chart, floats, log_level_axis, plt, png_base64
from .model import SeriesReport

#: a verdict kind's colour on the chart
KIND_COLOURS = {
    "not_saturated": "tab:green",
    "max_num_seqs": "tab:orange",
    "kv_cache": "tab:purple",
    "max_num_batched_tokens": "tab:brown",
    "compute": "tab:red",
    "client": "tab:pink",
    "failures": "black",
    "undetermined": "tab:gray",
}
MEASURED_KNEE, PREDICTED_KNEE = "black", "tab:blue"
#: the note of a series none of whose levels has a figure from the server
NOTHING = "No evidence chart: no level has a figure from the server's /metrics."


@dataclass(frozen=True)
class Panel:
    """One figure of the evidence: the curve's `column` (its mean across runs) times `scale`."""

    key: str
    title: str
    column: str
    unit: str
    source: str  # the /metrics families it comes from, for the note when it is missing
    scale: float = 1.0
    limit_fact: str = ""  # the server fact drawn as a line ("" for none)
    limit_flag: str = ""


PANELS = (
    Panel(
        "batch",
        "Requests in the batch",
        "server_batch",
        "requests",
        "vllm:request_inference_time_seconds, vllm:num_requests_running",
        limit_fact="max_num_seqs",
        limit_flag="--max-num-seqs",
    ),
    Panel(
        "waiting",
        "Requests waiting",
        "server_queued",
        "requests",
        "vllm:request_queue_time_seconds, vllm:num_requests_waiting",
    ),
    Panel(
        "kv",
        "KV-cache usage (highest)",
        "server_kv_usage_max",
        "%",
        "vllm:kv_cache_usage_perc",
        scale=100.0,
    ),
    Panel(
        "preemptions",
        "Preemptions per second",
        "server_preemptions_per_s",
        "preemptions/s",
        "vllm:num_preemptions_total",
    ),
    Panel(
        "step_tokens",
        "Tokens per engine step",
        "server_step_tokens",
        "tokens",
        "vllm:iteration_tokens_total",
        limit_fact="max_num_batched_tokens",
        limit_flag="--max-num-batched-tokens",
    ),
)


@dataclass(frozen=True)
class EvidenceChart:
    """The chart (None when no panel has a figure), the panels drawn, and a note per panel
    left out."""

    chart: Chart | None
    panels: tuple[str, ...]
    skipped: tuple[str, ...]


def _limit(panel: Panel, facts: ServerFacts) -> tuple[float, str] | None:
    """The horizontal line of a panel: its value and label."""
    if panel.key == "kv":
        return KV_FULL * 100.0, f"full: {KV_FULL:.0%}"
    if not panel.limit_fact:
        return None
    value, fact = facts.number(panel.limit_fact), facts.get(panel.limit_fact)
    if not value or fact is None:
        return None
    return value, f"{panel.limit_flag} {value:,.0f} ({fact.source})"


def _draw(ax, panel: Panel, users, values, colours, limit, knees, label) -> None:
    ax.plot(users, values, color="0.65", linewidth=1.0, zorder=1)
    ax.scatter(users, values, c=colours, s=40, zorder=3, edgecolors="white", linewidths=0.6)
    top = float(np.nanmax(values)) if np.isfinite(values).any() else 0.0
    if limit is not None:
        value, text = limit
        ax.axhline(value, color="tab:red", linestyle="--", linewidth=1.0, zorder=2)
        ax.text(
            0.02, value, text, transform=ax.get_yaxis_transform(), ha="left", va="bottom",
            fontsize=7, color="tab:red", zorder=2,
        )  # fmt: skip
        top = max(top, value)
    for at, colour, style in knees:
        ax.axvline(at, color=colour, linestyle=style, linewidth=1.0, alpha=0.8, zorder=2)
    log_level_axis(ax, users, label)
    ax.set_title(panel.title)
    ax.set_ylabel(panel.unit)
    if panel.key == "kv":
        ax.set_ylim(0, 100)
    else:
        ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)


def evidence_chart(s: SeriesReport, anchor: str) -> EvidenceChart:
    """The evidence chart of series `s` (its curve and diagnosis); `anchor` names it."""
    d, curve = s.diagnosis, s.curve
    users = floats(curve, "users")
    present, skipped = [], []
    for panel in PANELS:
        values = floats(curve, f"{panel.column}_mean") * panel.scale
        if np.isnan(values).all():
            skipped.append(f"{panel.title}: not drawn, no level has it (from {panel.source})")
        else:
            present.append((panel, values))
    if d is None or not present or len(users) == 0:
        return EvidenceChart(None, (), (NOTHING,))
    kind_of = {v.users: v.kind for v in d.levels}
    kinds = [kind_of.get(float(u), "undetermined") for u in users]
    colours = [KIND_COLOURS.get(k, "tab:gray") for k in kinds]
    sat = s.saturation
    knees: list[tuple[float, str, Any]] = []  # where, colour, line style
    if sat.saturated and sat.saturation is not None:
        knees.append((float(sat.saturation.users), MEASURED_KNEE, ":"))
    if d.prediction.knee is not None:
        knees.append((float(d.prediction.knee), PREDICTED_KNEE, "-."))
    with plt.rc_context(STYLE):
        ncols = 2 if len(present) == 4 else min(3, len(present))  # 4: two by two
        nrows = math.ceil(len(present) / ncols)
        fig, grid = plt.subplots(nrows, ncols, figsize=(3.7 * ncols, 3.0 * nrows), squeeze=False)
        axes = list(grid.ravel())
        for ax, (panel, values) in zip(axes, present):
            _draw(ax, panel, users, values, colours, _limit(panel, d.facts), knees, s.axis.label)
        for ax in axes[len(present) :]:
            ax.remove()
        handles = [
            Line2D([], [], marker="o", linestyle="", color=KIND_COLOURS[k], label=k)
            for k in KINDS
            if k in kinds
        ]
        names = {MEASURED_KNEE: "measured knee", PREDICTED_KNEE: "predicted knee"}
        handles += [
            Line2D([], [], color=colour, linestyle=style, label=f"{names[colour]} ({at:,.0f})")
            for at, colour, style in knees
        ]
        fig.legend(
            handles=handles,
            loc="lower center",
            ncol=min(len(handles), 5),
            bbox_to_anchor=(0.5, -0.06 / nrows),
            fontsize=8,
        )
        fig.tight_layout()
        png = png_base64(fig)
    drawn = tuple(panel.key for panel, _ in present)
    return EvidenceChart(
        Chart(
            f"evidence-{anchor}",
            f"Server evidence per level: {s.label}",
            "The server's evidence at each level ("
            + ", ".join(panel.title.lower() for panel, _ in present)
            + "), each point coloured by the level's verdict, with the configured limits and the "
            "measured and predicted knees",
            png,
        ),
        drawn,
        tuple(skipped),
    )
