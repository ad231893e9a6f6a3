"""A search's page (`pareto.html`): self-contained, drawn with the report's machinery
(`report.charts`: matplotlib to PNG data URIs, the report's style and templates). The Pareto
chart: every configuration's levels as points of total tok/s per GPU against output tok/s per
user, a configuration's levels joined in order, filled where the level met the SLO, the
frontier as a step line, the rate the SLO's ITL or TPOT limit implies as a vertical line, the
SLO-max levels ringed and the chosen point starred. An SLO-max search adds its levels: each SLO
item's estimate over its limit with its 95 % interval, the bracket shaded."""

from __future__ import annotations

import datetime as _dt
import math
from itertools import groupby

from ... import __version__
from .. import charts
from .page_model import LevelJudged, SearchView

_X = "output tok/s per user (1 / median TPOT)"
_Y = "total tok/s per GPU"


def _draw_configurations(ax, v: SearchView) -> None:
    drawn = [r for r in v.rows if not r.missing]
    keyed = sorted(drawn, key=lambda r: r.point.label)
    for i, (label, group) in enumerate(groupby(keyed, key=lambda r: r.point.label)):
        rows = sorted(group, key=lambda r: r.point.level)
        color = f"C{i % 10}"
        xs = [r.point.output_tok_per_s_per_user for r in rows]
        ys = [r.point.total_tok_per_s_per_gpu for r in rows]
        ax.plot(xs, ys, "-", color=color, alpha=0.35, linewidth=1)
        for r, x, y in zip(rows, xs, ys):
            filled = r.point.meets_slo is not False
            ax.plot([x], [y], "o", color=color, mfc=color if filled else "white", mec=color)
            ax.annotate(
                f"{r.point.level:g}",
                (x, y),
                xytext=(4, 3),
                textcoords="offset points",
                fontsize=7,
                color="0.35",
            )
            if r.point.slo_max is not None and r.point.level == r.point.slo_max:
                ax.plot([x], [y], "o", ms=13, mfc="none", mec="C3", mew=1.2)
        ax.plot([], [], "o", color=color, label=label or "as given")


def _draw_frontier(ax, v: SearchView) -> None:
    front = v.frontier.frontier
    if len(front) > 1:
        xs = [p.output_tok_per_s_per_user for p in front]
        ys = [p.total_tok_per_s_per_gpu for p in front]
        ax.step(xs, ys, where="post", color="0.2", linestyle="--", linewidth=1, label="frontier")
    if v.chosen is not None:
        c = v.chosen
        ax.plot(
            [c.output_tok_per_s_per_user],
            [c.total_tok_per_s_per_gpu],
            "*",
            ms=16,
            color="gold",
            mec="0.2",
            label="chosen",
            zorder=5,
        )


def pareto_chart(v: SearchView) -> charts.Chart | None:
    if not any(not r.missing for r in v.rows):
        return None
    fig, (ax,) = charts.figure(7.5, 4.4)
    _draw_configurations(ax, v)
    _draw_frontier(ax, v)
    line = v.page.per_user_line
    if line is not None:
        ax.axvline(
            line,
            color="C3",
            linestyle=":",
            linewidth=1.3,
            label=f"SLO: {line:,.1f} tok/s per user (1 / its ITL/TPOT limit)",
        )
    if any(r.point.slo_max is not None for r in v.rows):
        ax.plot([], [], "o", ms=10, mfc="none", mec="C3", label="SLO-max level")
    ax.set_xlabel(_X)
    ax.set_ylabel(_Y)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    alt = (
        f"{_Y} against {_X}: "
        + "; ".join(
            f"{p.label} at {p.level:g}: {p.total_tok_per_s_per_gpu:,.0f} per GPU, "
            f"{p.output_tok_per_s_per_user:,.1f} per user"
            for p in v.frontier.frontier
        )
        + " (the frontier)"
    )
    return charts.Chart(
        "pareto", "Throughput per GPU against interactivity", alt, charts.png_base64(fig)
    )


def _item_bars(levels: list[LevelJudged], item: str, top: float):
    """(levels, estimate / limit, bar below, bar above) of one SLO item; an interval without an
    upper end reaches past the chart's top."""
    xs, ys, lo, hi = [], [], [], []
    for lv in sorted(levels, key=lambda lv: lv.level):
        f = next((f for f in lv.figures if f.item == item), None)
        if f is None or not f.limit or not math.isfinite(f.ratio):
            continue
        xs.append(lv.level)
        ys.append(f.ratio)
        lo.append(max(f.ratio - f.low / f.limit, 0.0))
        hi.append(max(f.high / f.limit - f.ratio, 0.0) if math.isfinite(f.high) else 2 * top)
    return xs, ys, lo, hi


def levels_chart(v: SearchView) -> charts.Chart | None:
    """An SLO-max search's levels: each item's estimate / its limit, 95 % intervals as bars."""
    levels = v.page.levels
    if not levels:
        return None
    fig, (ax,) = charts.figure(7.5, 3.6)
    items = [f.item for f in levels[0].figures]
    ratios = [f.ratio for lv in levels for f in lv.figures if math.isfinite(f.ratio)]
    # the estimates decide the scale: an interval of a few requests can be ten limits wide
    top = max([2.0, *(1.3 * r for r in ratios)])
    for i, item in enumerate(items):
        xs, ys, lo, hi = _item_bars(levels, item, top)
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", color=f"C{i}", capsize=3, label=item)
    ax.axhline(1.0, color="C3", linestyle=":", linewidth=1.3, label="the limit")
    low, high = v.page.bracket or (None, None)
    if low is not None and high is not None:
        ax.axvspan(low, high, color="C2", alpha=0.15, label=f"bracket {low:g}..{high:g}")
    if v.page.slo_max is not None:
        ax.axvline(v.page.slo_max, color="C2", linewidth=1.2, label=f"SLO-max {v.page.slo_max:g}")
    ax.set_ylim(0, top)
    charts.log_level_axis(ax, [lv.level for lv in levels], v.page.unit)
    ax.set_ylabel("estimate / limit (1: at the limit)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    alt = "; ".join(
        f"{lv.level:g} {v.page.unit}: " + ", ".join(f"{f.item} {f.ratio:.2f}x" for f in lv.figures)
        for lv in levels
    )
    return charts.Chart(
        "levels", "The levels measured, against the SLO", alt, charts.png_base64(fig)
    )


def render_html(v: SearchView) -> str:
    # at call time: jinja2 is only needed when a page is written
    from ..render import template_env

    return (
        template_env()
        .get_template("search.html")
        .render(
            v=v,
            page=v.page,
            version=__version__,
            generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            pareto=pareto_chart(v),
            levels=levels_chart(v),
        )
    )
