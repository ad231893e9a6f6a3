"""How a value is written in a report's cell (HTML and Markdown alike): the template filters
(`num`, `ms`, `secs`, `pct`, `md`, ...), a mean with its interval, and a declared figure's cell
(`figures.REPORT`)."""

from __future__ import annotations

import math
import re
from typing import Mapping

from ..analysis.levels.table import present
from ..analysis.number_text import missing as _missing
from ..analysis.number_text import num, secs
from ..analysis.number_text import signed_pct as signed_pct  # a template filter (render)
from ..figures import REPORT, Figure, shown_in


def ms(seconds) -> str:
    return "-" if _missing(seconds) else f"{seconds * 1000:,.1f} ms"


def pct(share) -> str:
    return "-" if _missing(share) else f"{share * 100:.1f}%"


# what Markdown (CommonMark, GitHub's tables and strikethrough) reads as markup inside a line:
# escaped with a backslash; `<`, `>` and `&` become entities, which every renderer passes on as
# text (some do not honour a backslash before `<`, and would let a tag through)
MD_PUNCTUATION = re.compile(r"([\\`*_\[\]{}|~])")
MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# what Markdown reads as markup at the start of a line (a heading, quote, list item, rule)
MD_LINE_START = re.compile(r"^(\s*)(?=[#+=-])|^(\s*\d+)(?=[.)](\s|$))")


def md(text) -> str:
    """Text (a name, a label, a sentence holding them) shown as itself in Markdown, a table
    cell included: no markup, HTML or link it holds takes effect, and it stays on one line."""
    flat = " ".join(str(text).splitlines())
    escaped = MD_PUNCTUATION.sub(r"\\\1", flat)
    escaped = "".join(MD_ENTITIES.get(c, c) for c in escaped)
    return MD_LINE_START.sub(lambda m: m.group(0) + "\\", escaped, count=1)


def md_code(text) -> str:
    """Text as a Markdown code span: fenced by more backticks than it holds in a row, so none of
    its own can end the span (CommonMark), on one line."""
    flat = " ".join(str(text).splitlines())
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {flat} {fence}" if longest else f"`{flat}`"


def _value(value, spec: str) -> str:
    if spec == "ms":
        return ms(value)
    if spec == "s":
        return secs(value)
    return num(value, spec)


def interval(low, high, n, spec: str = ",.0f") -> str:
    """`low – high`, or why there is none (a single run has no interval)."""
    if _missing(low) or _missing(high) or (n is not None and n < 2):
        return "n = 1, no interval" if n == 1 else "-"
    return f"{_value(low, spec)} – {_value(high, spec)}"


def mean_ci(row: Mapping, metric: str, spec: str) -> str:
    """`mean ± half-width` of an aggregated figure; the bare mean when n < 2."""
    mean = row.get(f"{metric}_mean")
    low, high = row.get(f"{metric}_ci_low", math.nan), row.get(f"{metric}_ci_high", math.nan)
    text = _value(mean, spec)
    if _missing(mean) or _missing(low) or _missing(high):
        return text
    half = (high - low) / 2.0
    if spec in ("ms", "s"):
        half_text = ms(half) if spec == "ms" else secs(half)
    else:
        half_text = num(half, spec)
    return f"{text} ± {half_text}"


def report_figures(curve) -> list[Figure]:
    """The figures the report's per-level table shows (`figures.REPORT`), those the series had
    (a reasoning model's where some level measured reasoning tokens)."""

    return shown_in(REPORT, lambda key: present(curve, f"{key}_mean"))


def figure_value(row: Mapping, figure: Figure) -> str:
    """A declared figure's cell in a table of means across runs: mean ± CI half-width."""
    if figure.unit == "share":
        return pct(row.get(f"{figure.key}_mean"))
    spec = ("ms" if figure.in_ms else "s") if figure.unit == "s" else figure.spec
    return mean_ci(row, figure.key, spec)
