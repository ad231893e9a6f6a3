"""A run's charts per persona, per target (several --hosts) and per conversation turn (the tables of `analysis.breakdown`).

Drawn only when they say more than the per-level charts: the persona chart when the run had
several Locust user classes, the turn chart when it held conversations. Levels are on the run's
own axis (concurrent users, or requests/s for an open-loop run), as its per-level table has them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .charts import STYLE, Chart, figure, floats, log_level_axis, plt, png_base64, run_title, slug
from .model import RunSummary


def _level_values(run: RunSummary, levels: np.ndarray) -> np.ndarray:
    """The run's level values (in its kind of load) of these level indices."""
    by_level = dict(zip(floats(run.metrics, "level"), floats(run.metrics, "value")))
    return np.array([by_level.get(float(lv), np.nan) for lv in levels], dtype=np.float64)


def persona_levels(run: RunSummary) -> Chart | None:
    """p99 TTFT, p99 E2E and output tok/s per level: one line per persona, and the run's total."""
    table = run.personas
    if table is None or table.empty or table["user_class"].nunique() < 2:
        return None
    return _per_label(run, table, "user_class", "persona")


def target_levels(run: RunSummary) -> Chart | None:
    """The same per target of a run of several (--hosts)."""
    if len(run.targets) < 2:
        return None
    return _per_label(run, pd.concat([t.table for t in run.targets]), "target", "target")


def _per_label(run: RunSummary, table: pd.DataFrame, label: str, noun: str) -> Chart:
    total = run.metrics.sort_values("value")
    panels = (
        ("ttft_p99", 1000.0, "p99 time to first token", "ms"),
        ("e2e_p99", 1.0, "p99 end-to-end latency", "seconds"),
        ("output_tok_per_s", 1.0, "output throughput", "output tok/s"),
    )
    with plt.rc_context(STYLE):
        fig, axes = figure(width=12.0, height=3.6, ncols=3)
        xs: list[float] = []
        for ax, (metric, scale, title, unit) in zip(axes, panels):
            for name, group in table.groupby(label, sort=True):
                x = _level_values(run, floats(group, "level"))
                order = np.argsort(x)
                ax.plot(x[order], floats(group, metric)[order] * scale, marker="o", label=str(name))
                xs.extend(x)
            ax.plot(
                floats(total, "value"),
                floats(total, metric) * scale,
                color="black",
                linestyle="--",
                marker=".",
                label="total" if metric != "output_tok_per_s" else "total (whole level)",
            )
            log_level_axis(ax, xs, run.axis.label)
            ax.set_ylabel(unit)
            ax.set_ylim(bottom=0)
            ax.set_title(title)
        axes[0].legend(loc="best")
        axes[2].legend(loc="best")
        run_title(fig, f"Run {run.run_id} per {noun}")
        png = png_base64(fig)
    return Chart(
        f"{noun}s-{slug(run.run_id)}",
        f"Per {noun}, run {run.run_id}",
        "p99 time to first token, p99 end-to-end latency and output tokens per second at each "
        f"level, one line per {noun} and the run's total",
        png,
    )


def turns(run: RunSummary) -> Chart | None:
    """TTFT p50 and p99 per turn of the run's conversations, and the prompt each turn sent."""
    table = run.turns
    if table is None or table.empty:
        return None
    turn = floats(table, "turn") + 1  # turns are shown from 1, as in the table
    with plt.rc_context(STYLE):
        fig, axes = figure(width=9.5, height=3.4, ncols=2)
        for p, style in ((50, "-"), (99, "--")):
            axes[0].plot(
                turn,
                floats(table, f"ttft_p{p}") * 1000.0,
                marker="o",
                linestyle=style,
                label=f"TTFT p{p}",
            )
        axes[0].set_ylabel("ms")
        axes[0].set_title("time to first token per turn")
        axes[0].legend(loc="best")
        prompt = floats(table, "prompt_tokens_mean")
        axes[1].bar(turn, np.nan_to_num(prompt), color="tab:blue", alpha=0.5, label="prompt")
        cached = prompt * floats(table, "cached_share")
        if not np.isnan(cached).all():
            axes[1].bar(
                turn, np.nan_to_num(cached), color="tab:blue", alpha=0.9, label="prefix-cached"
            )
            axes[1].legend(loc="best")
        axes[1].set_ylabel("tokens (mean)")
        axes[1].set_title("prompt tokens per turn")
        for ax in axes:
            ax.set_xlabel("turn")
            ax.set_xticks(turn)
            ax.set_xticklabels([f"{t:.0f}" for t in turn])
            ax.set_ylim(bottom=0)
        run_title(fig, f"Run {run.run_id} per conversation turn")
        png = png_base64(fig)
    return Chart(
        f"turns-{slug(run.run_id)}",
        f"Per conversation turn, run {run.run_id}",
        "Median and p99 time to first token and mean prompt tokens at each turn of the "
        "run's conversations",
        png,
    )
