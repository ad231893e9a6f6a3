"""The report's charts: matplotlib figures rendered to PNG and embedded as data URIs.

Each function takes the report's plain data and returns a `Chart` (or None when there is
nothing to draw), so the HTML stays self-contained and needs no network. Text from runs
(model ids, labels) is drawn literally: mathtext is off so a `$` in a model id cannot break
a chart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from ..analysis.frame_records import row_dicts
from ..analysis.levels.hist import bucket_values  # noqa: E402
from ..analysis.series.saturation import TOTAL_TOKENS, Throughput  # noqa: E402
from ..load_kinds import CONCURRENCY  # noqa: E402
from .chart_png import png_base64 as png_base64  # noqa: E402  (every chart module's)
from .model import RunSummary, SeriesReport  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType  # matplotlib >= 3.8

STYLE: dict[RcKeyType, Any] = {
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 9,
    "legend.fontsize": 8,
    # room below the axes for their tick labels and label, so that a chart draws inside its
    # figure and is drawn once (`tight_png`); the saved PNG is cropped to what it draws
    "figure.subplot.bottom": 0.15,
    "text.parse_math": False,
}


@dataclass(frozen=True)
class Chart:
    """One embedded chart: an id for anchors and tests, a title, alt text and the PNG."""

    key: str
    title: str
    alt: str
    png_base64: str

    @property
    def data_uri(self) -> str:
        return f"data:image/png;base64,{self.png_base64}"


def slug(text: str) -> str:
    """`text` reduced to characters safe in an HTML id."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


def figure(width: float = 7.5, height: float = 3.6, ncols: int = 1):
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False)
    return fig, list(axes[0])


def run_title(fig, text: str) -> None:
    """`text` above a figure's panels and their titles, inside the figure: drawn once
    (`tight_png`), where a title placed above the figure's edge made it be drawn twice."""
    height = fig.get_figheight()
    fig.subplots_adjust(top=1 - 0.62 / height)
    fig.suptitle(text, fontsize=9, y=1 - 0.08 / height)


def _axis_label(series: Sequence[SeriesReport]) -> str:
    """The x-axis title for these series' levels: users, requests/s, or both when mixed (each
    series still has its own curve: runs of the two kinds are never in one series)."""
    labels = {s.axis.label for s in series}
    return labels.pop() if len(labels) == 1 else "concurrent users or requests/s (see legend)"


def log_level_axis(ax, values: Sequence[float], label: str = CONCURRENCY.label) -> None:
    """A log level axis labelled with the tested levels (10 → 1000 spans two decades)."""
    values = sorted({float(v) for v in values if v == v and v > 0})
    if len(values) >= 2 and values[-1] / values[0] >= 8:
        ax.set_xscale("log")
        ax.set_xticks(values)
        ax.set_xticklabels(
            [f"{v:,.0f}" if v == int(v) else f"{v:,.3g}" for v in values],
            rotation=45 if len(values) > 8 else 0,
        )
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.minorticks_off()
    ax.set_xlabel(label)


def floats(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(np.float64)


def plot_with_ci(ax, s: SeriesReport, metric: str, label: str):
    """One series' mean of `metric` per level with its 95 % CI as error bars; returns the levels'
    values."""
    c = s.curve
    values, mean = floats(c, "value"), floats(c, f"{metric}_mean")
    lo, hi = floats(c, f"{metric}_ci_low"), floats(c, f"{metric}_ci_high")
    err = np.vstack([np.nan_to_num(mean - lo), np.nan_to_num(hi - mean)])
    ax.errorbar(values, mean, yerr=err, marker="o", capsize=3, label=label)
    return list(values)


def throughput_vs_concurrency(
    series: Sequence[SeriesReport], throughput: Throughput = TOTAL_TOKENS
) -> Chart | None:
    """Mean throughput (total tok/s unless told) per level, one line per series, 95 % CI error
    bars where n >= 2."""
    if not series:
        return None
    with plt.rc_context(STYLE):
        fig, (ax,) = figure()
        all_values: list[float] = []
        for s in series:
            values = plot_with_ci(ax, s, throughput.column, f"{s.label} (n={s.n_runs})")
            sat = s.saturation.saturation
            if s.saturation.saturated and sat is not None:
                ax.axvline(sat.value, linestyle=":", alpha=0.6, color=ax.lines[-1].get_color())
            all_values.extend(values)
        log_level_axis(ax, all_values, _axis_label(series))
        ax.set_ylabel(throughput.name)
        ax.set_ylim(bottom=0)
        ax.legend(loc="best")
        ax.set_title("Throughput vs concurrency (dotted: saturation point)")
        png = png_base64(fig)
    return Chart(
        "throughput",
        "Throughput vs concurrency",
        f"Mean {throughput.name} at each concurrency level with 95% confidence intervals",
        png,
    )


def goodput_vs_concurrency(series: Sequence[SeriesReport]) -> Chart | None:
    """Requests/s beside goodput (good requests/s) per level, one colour per series, 95 % CI
    bars where n >= 2; a dashed line at the highest level meeting the SLOs."""
    judged = [s for s in series if "goodput_req_per_s_mean" in s.curve]
    if not judged:
        return None
    with plt.rc_context(STYLE):
        fig, (ax,) = figure()
        all_values: list[float] = []
        for s in judged:
            all_values.extend(plot_with_ci(ax, s, "req_per_s", f"{s.label}: throughput"))
            color = ax.containers[-1].lines[0].get_color()
            plot_with_ci(ax, s, "goodput_req_per_s", f"{s.label}: goodput")
            ax.containers[-1].lines[0].set_linestyle("--")
            head = s.slo_headline
            if head is not None and head.best.n:
                ax.axvline(head.best.mean, linestyle="--", alpha=0.5, color=color)
        log_level_axis(ax, all_values, _axis_label(series))
        ax.set_ylabel("requests/s (goodput: requests meeting the SLOs)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="best")
        ax.set_title("Goodput vs throughput (dashed line: highest level meeting the SLOs)")
        png = png_base64(fig)
    return Chart(
        "goodput",
        "Goodput vs throughput",
        "Mean requests per second and good requests per second at each level, with 95% "
        "confidence intervals",
        png,
    )


def latency_vs_concurrency(series: Sequence[SeriesReport]) -> Chart | None:
    """p99 E2E and p99 TTFT per level, one line per series, CI bars where n >= 2."""
    if not series:
        return None
    with plt.rc_context(STYLE):
        fig, axes = figure(width=9.5, height=3.6, ncols=2)
        all_values: list[float] = []
        for ax, metric, title in (
            (axes[0], "e2e_p99", "p99 end-to-end latency"),
            (axes[1], "ttft_p99", "p99 time to first token"),
        ):
            for s in series:
                all_values.extend(plot_with_ci(ax, s, metric, s.label))
            log_level_axis(ax, all_values, _axis_label(series))
            ax.set_ylabel("seconds")
            ax.set_ylim(bottom=0)
            ax.set_title(title)
        axes[0].legend(loc="best")
        png = png_base64(fig)
    return Chart(
        "latency",
        "p99 latency vs concurrency",
        "p99 end-to-end latency and p99 time to first token at each concurrency level",
        png,
    )


def latency_throughput_tradeoff(
    series: Sequence[SeriesReport], throughput: Throughput = TOTAL_TOKENS
) -> Chart | None:
    """Throughput against p99 E2E, points labelled with their concurrency: the price of each tok/s."""
    if not series:
        return None
    with plt.rc_context(STYLE):
        fig, (ax,) = figure()
        for s in series:
            c = s.curve
            x, y = floats(c, "e2e_p99_mean"), floats(c, f"{throughput.column}_mean")
            values = floats(c, "value")
            ax.plot(x, y, marker="o", label=s.label)
            for xi, yi, v in zip(x, y, values):
                if xi == xi and yi == yi:
                    ax.annotate(
                        s.axis.number(v),
                        (xi, yi),
                        textcoords="offset points",
                        xytext=(4, -10),
                        fontsize=7,
                    )
        ax.set_xlabel("p99 end-to-end latency (s)")
        ax.set_ylabel(throughput.name)
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.legend(loc="best")
        ax.set_title(f"Latency–throughput trade-off (labels: {_axis_label(series)})")
        png = png_base64(fig)
    return Chart(
        "tradeoff",
        "Latency–throughput trade-off",
        f"{throughput.name.capitalize()} against p99 end-to-end latency, one point per "
        "concurrency level",
        png,
    )


def run_timeline(run: RunSummary) -> Chart | None:
    """Throughput and active users over a run's time, with level boundaries and measured windows."""
    tl = run.timeline
    if tl is None or tl.empty:
        return None
    t0 = float(np.nanmin(run.steps["level_start"])) if len(run.steps) else float(tl["t"].min())
    with plt.rc_context(STYLE):
        fig, (ax,) = figure(width=9.5, height=3.4)
        ax.plot(tl["t"] - t0, tl["tok_per_s"], color="tab:blue", linewidth=1.2, label="total tok/s")
        ax.set_ylabel("tok/s", color="tab:blue")
        ax.set_xlabel("seconds since the first level started")
        ax.set_ylim(bottom=0)
        metrics = run.metrics
        for rec in row_dicts(metrics):
            start = rec.get("level_start")
            if start == start and start is not None:
                ax.axvline(start - t0, color="grey", linestyle="--", linewidth=0.8, alpha=0.7)
            ws, we = rec.get("window_start"), rec.get("window_end")
            if ws == ws and we == we and ws is not None and we is not None:
                ax.axvspan(ws - t0, we - t0, color="tab:green", alpha=0.08)
        users_ax = ax.twinx()
        users_ax.grid(False)
        hist = run.history
        if hist is not None and "User Count" in hist.columns and "Timestamp" in hist.columns:
            ts = pd.to_numeric(hist["Timestamp"], errors="coerce").to_numpy(np.float64)
            users_ax.step(
                ts - t0,
                pd.to_numeric(hist["User Count"], errors="coerce"),
                where="post",
                color="tab:orange",
                linewidth=1.0,
                label="active users (Locust)",
            )
        users_ax.plot(
            tl["t"] - t0,
            tl["in_flight"],
            color="tab:red",
            linewidth=0.8,
            alpha=0.7,
            label="requests in flight",
        )
        users_ax.set_ylabel("users", color="tab:orange")
        users_ax.set_ylim(bottom=0)
        lines = ax.get_lines()[:1] + users_ax.get_lines()
        ax.legend(lines, [ln.get_label() for ln in lines], loc="upper left", fontsize=7)
        ax.set_title(
            f"Run {run.run_id}: throughput (tokens spread over each request) and users; dashed: level starts; shaded: measured windows",
            fontsize=8,
        )
        png = png_base64(fig)
    return Chart(
        f"timeline-{slug(run.run_id)}",
        f"Timeline of run {run.run_id}",
        "Total tokens per second and active users over the run, with level boundaries",
        png,
    )


def distributions(s: SeriesReport) -> Chart | None:
    """TTFT and ITL distributions of the measured requests at the saturation level (or the peak)."""
    ttft = np.asarray(s.ttft_at_dist, dtype=np.float64)
    ttft = ttft[~np.isnan(ttft)]
    itl = np.asarray(s.itl_at_dist, dtype=np.int64)
    if s.dist_value is None or (ttft.size == 0 and itl.sum() == 0):
        return None
    with plt.rc_context(STYLE):
        fig, axes = figure(width=9.5, height=3.2, ncols=2)
        if ttft.size:
            axes[0].hist(
                ttft * 1000.0,
                bins=min(60, max(10, int(np.sqrt(ttft.size)))),
                color="tab:blue",
                alpha=0.8,
            )
            for q, style in ((50, "-"), (99, "--")):
                v = float(np.percentile(ttft, q)) * 1000.0
                axes[0].axvline(
                    v, color="black", linestyle=style, linewidth=0.8, label=f"p{q} {v:,.1f} ms"
                )
            axes[0].legend(loc="best")
        axes[0].set_xlabel("TTFT (ms)")
        axes[0].set_ylabel("requests")
        axes[0].set_title(f"TTFT at {s.axis.text(s.dist_value)}")
        if itl.sum():
            nz = np.flatnonzero(itl)
            lo = nz[0]
            hi = min(
                int(np.searchsorted(np.cumsum(itl), 0.999 * itl.sum())) + 2, len(itl)
            )  # to p99.9: tails flatten the view
            values = bucket_values(hi)[lo:hi] * 1000.0
            edges = np.append(values, values[-1] * 1.01)
            axes[1].stairs(itl[lo:hi], edges, fill=True, color="tab:purple", alpha=0.8)
        axes[1].set_xlabel("inter-token latency (ms), up to p99.9")
        axes[1].set_ylabel("gaps")
        axes[1].set_title(f"ITL at {s.axis.text(s.dist_value)}")
        png = png_base64(fig)
    return Chart(
        f"dist-{slug(s.label)}",
        f"TTFT and ITL distributions at {s.axis.text(s.dist_value)}",
        "Histograms of time to first token and inter-token latency at the saturation level",
        png,
    )


def server_state(run: RunSummary) -> Chart | None:
    """The server's running and waiting requests and KV-cache usage over the run (from /metrics)."""
    srv = run.server
    if srv is None or len(srv) < 2:
        return None
    t0 = float(np.nanmin(run.steps["level_start"])) if len(run.steps) else float(srv["ts"].min())
    t = srv["ts"].to_numpy(np.float64) - t0
    with plt.rc_context(STYLE):
        fig, (ax,) = figure(width=9.5, height=3.0)
        ax.plot(t, floats(srv, "running"), label="running", color="tab:green")
        ax.plot(t, floats(srv, "waiting"), label="waiting", color="tab:red")
        for start in floats(run.metrics, "level_start"):
            if start == start:
                ax.axvline(start - t0, color="grey", linestyle="--", linewidth=0.8, alpha=0.7)
        ax.set_ylabel("requests")
        ax.set_xlabel("seconds since the first level started")
        ax.set_ylim(bottom=0)
        kv = ax.twinx()
        kv.grid(False)
        kv.plot(
            t,
            floats(srv, "kv_cache_usage") * 100.0,
            label="KV cache %",
            color="tab:purple",
            linewidth=0.9,
        )
        kv.set_ylabel("KV cache usage %", color="tab:purple")
        kv.set_ylim(0, 100)
        lines = ax.get_lines()[:2] + kv.get_lines()
        ax.legend(lines, [ln.get_label() for ln in lines], loc="upper left", fontsize=7)
        ax.set_title(
            f"Run {run.run_id}: server state from /metrics (dashed: level starts)", fontsize=8
        )
        png = png_base64(fig)
    return Chart(
        f"server-{slug(run.run_id)}",
        f"Server state during run {run.run_id}",
        "Running and waiting requests and KV-cache usage reported by the server",
        png,
    )
