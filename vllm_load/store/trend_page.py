"""The trend page (`vllm-load history --html`): one self-contained HTML file, drawn with the
report's own machinery (`report.charts`: matplotlib to PNG data URIs, the report's style and
templates): per configuration a chart of its points over time (peak total tok/s, the highest
level meeting the SLOs where recorded, p99 TTFT at one level), each point with its 95 %
t-interval across its runs where it has two or more, vertical marks where the vLLM version
changed, and a table of the same numbers under it. No network: nothing is fetched to view it."""

from __future__ import annotations

import datetime as _dt
import math
import os
from dataclasses import dataclass
from typing import Callable

from .. import __version__
from ..analysis.series.stats import Summary
from ..report import charts
from ..report.cells import ms
from ..run_format.files import write_atomic
from .trend import TrendPoint, TrendSeries


@dataclass(frozen=True)
class Panel:
    """One panel of a series' chart: a figure of its points."""

    title: str
    pick: Callable[[TrendPoint], Summary]
    ylabel: str
    scale: float = 1.0

    def named(self, series: TrendSeries) -> str:
        """The title, with what the panel holds fixed: the level of p99 TTFT, the SLOs."""
        if self is TTFT:
            return f"{self.title} {series.level_note.split(' (')[0]}"
        if self is SLO_MAX:
            slos = sorted({p.slo for p in series.points if p.slo})
            held = slos[0] if len(slos) == 1 else "SLOs differ: see the table"
            return f"{self.title} ({held})"
        return self.title


PEAK = Panel("peak total tok/s", lambda p: p.peak, "total tok/s")
SLO_MAX = Panel("highest level meeting the SLOs", lambda p: p.slo_max, "level")
TTFT = Panel("p99 TTFT", lambda p: p.ttft, "p99 TTFT (ms)", 1000.0)


def _when(text: str) -> _dt.datetime:
    """A run's `started_at` (ISO 8601, UTC) as a naive UTC time for matplotlib."""
    when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return when.astimezone(_dt.timezone.utc).replace(tzinfo=None) if when.tzinfo else when


def _draw(ax, points: list[TrendPoint], panel: Panel) -> None:
    """Each point at its time, with its interval as a bar where it has one; hollow where it is
    one run."""
    pick, scale = panel.pick, panel.scale
    for p in points:
        s = pick(p)
        if s.n == 0 or math.isnan(s.mean):
            continue
        x, y = _when(p.when), s.mean * scale
        if s.n >= 2 and not math.isnan(s.ci_low):
            err = [[y - s.ci_low * scale], [s.ci_high * scale - y]]
            ax.errorbar([x], [y], yerr=err, fmt="o", color="C0", capsize=4)
        else:
            ax.plot([x], [y], "o", mfc="white", mec="C0")
    drawn = [(_when(p.when), pick(p).mean * scale) for p in points if pick(p).n]
    if len(drawn) > 1:
        ax.plot(*zip(*drawn), "-", color="C0", alpha=0.35)


def _mark_versions(axes, points: list[TrendPoint]) -> None:
    """A dashed line where the vLLM version (or commit) changed, named on the top panel; the
    first point's version named too."""
    for i, p in enumerate(points):
        if i and not p.version_changed:
            continue
        x = _when(p.when)
        if p.version_changed:
            for ax in axes:
                ax.axvline(x, color="C3", linestyle="--", linewidth=1)
        axes[0].annotate(
            f"vLLM {p.version}",
            (x, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -2),
            textcoords="offset points",
            rotation=90,
            va="top",
            fontsize=7,
            color="C3" if p.version_changed else "0.4",
        )


def series_chart(series: TrendSeries, key: str) -> charts.Chart | None:
    import matplotlib.pyplot as plt
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    if not series.points:
        return None
    panels = [PEAK, SLO_MAX, TTFT] if any(p.slo for p in series.points) else [PEAK, TTFT]
    with plt.rc_context(charts.STYLE):
        fig, grid = plt.subplots(
            len(panels), 1, figsize=(7.5, 2.3 * len(panels)), sharex=True, squeeze=False
        )
    axes = list(grid[:, 0])
    for ax, panel in zip(axes, panels):
        _draw(ax, series.points, panel)
        ax.set_title(panel.named(series), fontsize=9, loc="left")
        ax.set_ylabel(panel.ylabel)
    locator = AutoDateLocator()
    axes[-1].xaxis.set_major_locator(locator)
    axes[-1].xaxis.set_major_formatter(ConciseDateFormatter(locator))
    axes[-1].set_xlabel("first start of the point's runs (UTC)")
    _mark_versions(axes, series.points)
    alt = f"{series.configuration.label}: {len(series.points)} point(s) over time; " + "; ".join(
        f"{p.when} vLLM {p.version} peak {p.peak.mean:,.0f} tok/s" for p in series.points
    )
    return charts.Chart(key, series.configuration.label, alt, charts.png_base64(fig))


def _figure_cell(s: Summary, shown: Callable[[float], str]) -> str:
    """The mean and its 95 % interval across the point's runs, or why there is none."""
    if s.n == 0 or math.isnan(s.mean):
        return "-"
    if s.n < 2:
        return f"{shown(s.mean)} (one run: no interval)"
    return f"{shown(s.mean)} (95% CI {shown(s.ci_low)} – {shown(s.ci_high)}, n = {s.n})"


def _tok(value: float) -> str:
    return f"{value:,.0f}"


def _level(value: float) -> str:
    return f"{value:,.4g}"


def _slo_cell(p: TrendPoint) -> str:
    if not p.slo:
        return "no SLOs recorded"
    parts = []
    if p.slo_max.n:
        parts.append(_figure_cell(p.slo_max, _level))
    if p.slo_none:
        parts.append(f"{p.slo_none} run(s) met them at no level")
    if p.slo_unknown:
        parts.append(f"{p.slo_unknown} run(s) unknown")
    return f"{'; '.join(parts)} [{p.slo}]"


def _ttft_cell(p: TrendPoint) -> str:
    return _figure_cell(p.ttft, ms) if p.ttft.n else "not measured at this level"


@dataclass(frozen=True)
class PointRow:
    when: str
    version: str
    changed: bool
    source: str
    runs: int
    peak: str
    slo: str
    ttft: str
    run_ids: str


def point_rows(series: TrendSeries) -> list[PointRow]:
    return [
        PointRow(
            when=p.when,
            version=p.version,
            changed=p.version_changed,
            source=p.source,
            runs=len(p.run_ids),
            peak=_figure_cell(p.peak, _tok),
            slo=_slo_cell(p),
            ttft=_ttft_cell(p),
            run_ids=", ".join(p.run_ids),
        )
        for p in series.points
    ]


@dataclass(frozen=True)
class SeriesView:
    series: TrendSeries
    chart: charts.Chart | None
    rows: list[PointRow]


def write_trend_page(series: list[TrendSeries], out_html: str, store_shown: str, asked: str):
    """Render the page to `out_html` (atomically); `store_shown`: the store as messages name it
    (no password); `asked`: the selection, as the user gave it."""
    import jinja2

    from ..report.render import template_env

    views = [
        SeriesView(s, series_chart(s, charts.slug(f"{i}-{s.configuration.model}")), point_rows(s))
        for i, s in enumerate(series, 1)
    ]
    env = template_env()
    report_templates = env.loader
    assert report_templates is not None
    env.loader = jinja2.ChoiceLoader(
        [jinja2.PackageLoader("vllm_load.store", "templates"), report_templates]
    )
    html = env.get_template("trend.html").render(
        title="vllm-load trend",
        version=__version__,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        store=store_shown,
        asked=asked,
        views=views,
    )
    os.makedirs(os.path.dirname(os.path.abspath(out_html)), exist_ok=True)
    write_atomic(out_html, html)
