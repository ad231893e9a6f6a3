"""Write a comparison: self-contained HTML (one embedded chart), Markdown and JSON beside it.

`write_comparison` is the one entry point (used by `vllm-load compare`). Like the report, the
HTML has no scripts and no external requests, and every string from a run goes through
jinja2's autoescaping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import __version__
from ..analysis.decisions.ab import BETTER, HIGHER, LOWER, UNSURE, WORSE, Comparison
from ..figures import Figure
from . import charts
from .compare_model import CompareData, compare_dict, dropped_text, level_text, outcome_text
from .render import html_and_base, template_env, write_documents

#: the HTML class of each verdict's cell ("untested" for "no test possible at n = 1")
VERDICT_CLASS = {
    BETTER: "better",
    WORSE: "worse",
    UNSURE: "unsure",
    HIGHER: "unsure",
    LOWER: "unsure",
}


def verdict_class(verdict: str) -> str:
    return VERDICT_CLASS.get(verdict, "untested")


@dataclass(frozen=True)
class ComparePaths:
    """Where one comparison's files were written."""

    html: str
    markdown: str
    json: str


def value_text(value: float, figure: Figure, signed: bool = False) -> str:
    """A figure's value (or a difference of it, `signed`) in the unit people read it in."""
    if value is None or math.isnan(value):
        return "-"
    sign = "+" if signed else ""
    if figure.unit == "tok/s":
        return f"{value:{sign},.0f}"
    if figure.unit == "share":
        return f"{value * 100:{sign}.2f}%"
    if figure.unit != "s":  # tokens a step (acceptance length), joules: the figure's own format
        return f"{value:{sign}{figure.spec or ',.2f'}} {figure.unit}"
    if figure.key.startswith("e2e"):
        return f"{value:{sign},.3f} s"
    return f"{value * 1000:{sign},.1f} ms"


def ci_text(c: Comparison) -> str:
    """The interval of the difference the deciding test gives, or `-` when it gives none."""
    r = c.result
    if math.isnan(r.ci_low) or math.isnan(r.ci_high):
        return "-"
    return f"{value_text(r.ci_low, c.figure, True)} … {value_text(r.ci_high, c.figure, True)}"


def rel_text(share: float) -> str:
    return "-" if share is None or math.isnan(share) else f"{share * 100:+.1f}%"


def p_text(p: float) -> str:
    if p is None or math.isnan(p):
        return "-"
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}"


def throughput_chart(data: CompareData) -> charts.Chart | None:
    """Mean total tok/s per level for A and B, with each side's t-interval where n >= 2."""
    rows = [c for c in data.result.comparisons if c.figure.key == "total_tok_per_s"]
    if not rows:
        return None
    levels = np.array([c.level for c in rows])
    with charts.plt.rc_context(charts.STYLE):
        fig, ax = charts.plt.subplots(figsize=(7.5, 3.6))
        for name, pick in ((data.a.name, lambda c: c.a), (data.b.name, lambda c: c.b)):
            mean = np.array([pick(c).mean for c in rows])
            low = np.array([pick(c).ci_low for c in rows])
            high = np.array([pick(c).ci_high for c in rows])
            err = np.vstack([np.nan_to_num(mean - low), np.nan_to_num(high - mean)])
            ax.errorbar(levels, mean, yerr=err, marker="o", capsize=3, label=name)
        if levels.size >= 2 and levels.max() / levels.min() >= 8:  # 10 → 1000 spans decades
            ax.set_xscale("log")
            ax.minorticks_off()
        ax.set_xticks(levels, [f"{lv:,.4g}" for lv in levels])
        ax.set_xlabel(data.a.axis.label)
        ax.set_ylabel("total tok/s")
        ax.set_ylim(bottom=0)
        ax.legend()
        png = charts.png_base64(fig)
    return charts.Chart(
        key="ab-throughput",
        title=f"Total throughput of {data.a.name} and {data.b.name} per level",
        alt=f"total tok/s per level, {data.a.name} against {data.b.name}",
        png_base64=png,
    )


def _paths(out_html: str) -> ComparePaths:
    html, base = html_and_base(out_html)
    return ComparePaths(html=html, markdown=f"{base}.md", json=f"{base}.json")


def write_comparison(data: CompareData, out_html: str) -> ComparePaths:
    """Write the comparison's HTML at `out_html`, with its Markdown and JSON beside it."""
    paths = _paths(out_html)
    env = template_env()
    env.filters.update(value=value_text, p=p_text, rel=rel_text)
    env.globals.update(
        ci_text=ci_text,
        level_text=lambda lv: level_text(lv, data.a.axis),
        verdict_class=verdict_class,
        decided=(BETTER, WORSE, HIGHER, LOWER),
    )
    context = dict(
        data=data,
        result=data.result,
        dropped=dropped_text(data),
        outcome=outcome_text(data),
        chart=throughput_chart(data),
        title=f"vllm-load compare: {data.a.name} vs {data.b.name}",
        version=__version__,
        worse_text=WORSE,
    )
    write_documents(paths, "compare", context, compare_dict(data), env)
    return paths
