"""The chart of a series' server evidence per level (the "Why it saturates" section): what each
level's bottleneck verdict stands on, one panel per figure, each level's point coloured by its
verdict's kind, the configured limit as a dashed line where it is known (labelled read, given or
inferred), and the measured and predicted knees as vertical lines. A panel whose figure no level
has is left out, and said so. Where a run recorded the GPUs' telemetry, their utilisation and SM
activity have panels too, with the thresholds `compute` is judged by (`gpu_evidence`), titled
SIMULATED where the simulator's GPU gave them; a run without GPU telemetry gets no GPU panel and
no note about them (the report's GPU section says where GPU figures come from).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from matplotlib.lines import Line2D

from ..analysis.diagnosis.capacity import KV_FULL
from ..analysis.diagnosis.facts import ServerFacts
from ..analysis.diagnosis.gpu_evidence import SM_BUSY, SM_IDLE, UTIL_BUSY, UTIL_IDLE
from ..analysis.diagnosis.kinds import KINDS, UNDETERMINED, kind_named
from ..run_format.gpu_metrics import simulated
from .charts import STYLE, Chart, floats, log_level_axis, plt, png_base64
from .model import SeriesReport

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
    gpu: bool = False  # a GPU figure: drawn, or noted as missing, only where a run recorded GPUs
    thresholds: tuple[tuple[float, str], ...] = ()  # lines at these values (in the panel's unit)


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
    Panel(
        "gpu_sm",
        "GPU SM activity",
        "gpu_sm_active_mean",
        "%",
        "DCGM_FI_PROF_SM_ACTIVE, a profiling field dcgm-exporter reads only when configured with it",
        scale=100.0,
        gpu=True,
        thresholds=(
            (SM_BUSY * 100, f"busy: {SM_BUSY:.0%}"),
            (SM_IDLE * 100, f"idle below {SM_IDLE:.0%}"),
        ),
    ),
    Panel(
        "gpu_util",
        "GPU utilisation",
        "gpu_util_mean",
        "%",
        "DCGM_FI_DEV_GPU_UTIL",
        scale=100.0,
        gpu=True,
        thresholds=(
            (UTIL_BUSY * 100, f"busy: {UTIL_BUSY:.0%}"),
            (UTIL_IDLE * 100, f"idle below {UTIL_IDLE:.0%}"),
        ),
    ),
)


@dataclass(frozen=True)
class EvidenceChart:
    """The chart (None when no panel has a figure), the panels drawn, and a note per panel
    left out."""

    chart: Chart | None
    panels: tuple[str, ...]
    skipped: tuple[str, ...]


def _limits(panel: Panel, facts: ServerFacts) -> tuple[tuple[float, str], ...]:
    """The horizontal lines of a panel: their values and labels."""
    if panel.key == "kv":
        return ((KV_FULL * 100.0, f"full: {KV_FULL:.0%}"),)
    if not panel.limit_fact:
        return panel.thresholds
    value, fact = facts.number(panel.limit_fact), facts.get(panel.limit_fact)
    if not value or fact is None:
        return ()
    return ((value, f"{panel.limit_flag} {value:,.0f} ({fact.source})"),)


def _draw(ax, panel: Panel, users, values, colours, limits, knees, label) -> None:
    ax.plot(users, values, color="0.65", linewidth=1.0, zorder=1)
    ax.scatter(users, values, c=colours, s=40, zorder=3, edgecolors="white", linewidths=0.6)
    top = float(np.nanmax(values)) if np.isfinite(values).any() else 0.0
    line = "tab:gray" if panel.thresholds else "tab:red"  # a GPU's busy/idle, or a limit
    for value, text in limits:
        ax.axhline(value, color=line, linestyle="--", linewidth=1.0, zorder=2)
        ax.text(
            0.02, value, text, transform=ax.get_yaxis_transform(), ha="left", va="bottom",
            fontsize=7, color=line, zorder=2,
        )  # fmt: skip
        top = max(top, value)
    for at, colour, style in knees:
        ax.axvline(at, color=colour, linestyle=style, linewidth=1.0, alpha=0.8, zorder=2)
    log_level_axis(ax, users, label)
    ax.set_title(panel.title)
    ax.set_ylabel(panel.unit)
    if panel.key == "kv":
        ax.set_ylim(0, 100)
    elif panel.gpu:
        ax.set_ylim(0, 105)
    else:
        ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)


def evidence_chart(s: SeriesReport, anchor: str) -> EvidenceChart:
    """The evidence chart of series `s` (its curve and diagnosis); `anchor` names it."""
    d, curve = s.diagnosis, s.curve
    values_x = floats(curve, "value")
    fake = any(simulated(r.run) for r in s.runs)
    present, missing = [], []
    for panel in PANELS:
        if panel.gpu and fake:
            panel = replace(panel, title=f"{panel.title} (SIMULATED)")
        values = floats(curve, f"{panel.column}_mean") * panel.scale
        if np.isnan(values).all():
            missing.append(
                (panel, f"{panel.title}: not drawn, no level has it (from {panel.source})")
            )
        else:
            present.append((panel, values))
    with_gpu = any(panel.gpu for panel, _ in present)
    skipped = [note for panel, note in missing if with_gpu or not panel.gpu]
    if d is None or not present or len(values_x) == 0:
        return EvidenceChart(None, (), (NOTHING,))
    kind_of = {v.value: v.kind for v in d.levels}
    kinds = [kind_of.get(float(x), UNDETERMINED.name) for x in values_x]
    colours = [kind_named(k).colour for k in kinds]
    sat = s.saturation
    knees: list[tuple[float, str, Any]] = []  # where, colour, line style
    if sat.saturated and sat.saturation is not None:
        knees.append((float(sat.saturation.value), MEASURED_KNEE, ":"))
    if d.prediction.knee is not None:
        knees.append((float(d.prediction.knee), PREDICTED_KNEE, "-."))
    with plt.rc_context(STYLE):
        ncols = 2 if len(present) == 4 else min(3, len(present))  # 4: two by two
        nrows = math.ceil(len(present) / ncols)
        fig, grid = plt.subplots(nrows, ncols, figsize=(3.7 * ncols, 3.0 * nrows), squeeze=False)
        axes = list(grid.ravel())
        for ax, (panel, values) in zip(axes, present):
            _draw(
                ax, panel, values_x, values, colours, _limits(panel, d.facts), knees, s.axis.label
            )
        for ax in axes[len(present) :]:
            ax.remove()
        handles = [
            Line2D([], [], marker="o", linestyle="", color=kind.colour, label=name)
            for name, kind in KINDS.items()
            if name in kinds
        ]
        names = {MEASURED_KNEE: "measured knee", PREDICTED_KNEE: "predicted knee"}
        handles += [
            Line2D([], [], color=colour, linestyle=style, label=f"{names[colour]} ({at:,.0f})")
            for at, colour, style in knees
        ]
        ncol = min(len(handles), 5)
        fig.legend(handles=handles, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, 0.0))
        # the legend's rows below the panels, inside the figure: it is drawn once (`tight_png`)
        legend_rows = math.ceil(len(handles) / max(ncol, 1))
        fig.tight_layout(rect=(0, (0.08 + 0.25 * legend_rows) / fig.get_figheight(), 1, 1))
        png = png_base64(fig)
    drawn = tuple(panel.key for panel, _ in present)
    gpu_words = ("and SIMULATED GPU " if fake else "and GPU ") if with_gpu else ""
    return EvidenceChart(
        Chart(
            f"evidence-{anchor}",
            f"Server {gpu_words}evidence per level: {s.label}",
            f"The {'server and GPU' if with_gpu else 'server'} evidence at each level ("
            + ", ".join(panel.title.lower() for panel, _ in present)
            + "), each point coloured by the level's verdict, with the configured limits and the "
            "measured and predicted knees",
            png,
        ),
        drawn,
        tuple(skipped),
    )
