"""What the SLO-max search (`slo_max.py`) prints and writes: the levels it measured as a table,
its result with one final line (`slo_max.json`'s `result`), and `slo_max.md`."""

from __future__ import annotations

import math
import os

from ...analysis.decisions.slo_interval import HOLDS, ItemFigure
from ...analysis.decisions.slo_search import BUDGET, CONVERGED, MAX_MET, NONE_MET, Step
from ...run_format.files import write_atomic
from ...slo import SloSpec
from .slo_max_state import TABLE_FILE, Level, SearchState


def _value(value: float, limit: float, item: str) -> str:
    if value != value:
        return "?"
    if value == math.inf:
        return "inf"
    if item.startswith("missed"):
        return f"{value * 100:.3g}%"
    return f"{value * 1000:.4g} ms" if limit < 1 else f"{value:.4g} s"


def item_cell(f: ItemFigure) -> str:
    interval = f"{_value(f.low, f.limit, f.item)}..{_value(f.high, f.limit, f.item)}"
    return f"{_value(f.estimate, f.limit, f.item)} ({interval})"


def format_levels(levels: list[Level], unit: str) -> str:
    """The levels measured, by level: each item's estimate (95 % interval), whether the estimates
    met the SLO, and what the intervals prove."""
    ordered = sorted(levels, key=lambda lv: lv.level)
    items = [f.item for f in ordered[0].figures] if ordered else []
    header = (unit, *items, "met", "proven", "order")
    order = {id(lv): i for i, lv in enumerate(levels, 1)}
    rows = [header] + [
        (
            f"{lv.level:g}",
            *(item_cell(f) for f in lv.figures),
            "yes" if lv.probe.met else "no",
            lv.verdict,
            str(order[id(lv)]),
        )
        for lv in ordered
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _figures_text(level: Level) -> str:
    return "; ".join(
        f"{f.item} {_value(f.estimate, f.limit, f.item)} (95% interval {item_cell(f).split('(')[1]}"
        for f in level.figures
    )


def summarize(step: Step, levels: list[Level], spec: SloSpec, unit: str) -> dict:
    """The search's result: what `slo_max.json` keeps under `result`, with its final line."""
    by_level = {lv.level: lv for lv in levels}
    low = by_level.get(step.low.level) if step.low else None
    high = by_level.get(step.high.level) if step.high else None
    below = [lv for lv in levels if high is None or lv.level < high.level]
    proven = [lv.level for lv in below if lv.verdict == HOLDS]
    slo = ", ".join(spec.items())
    n = len(levels)
    ran = f"{n} level{'s' if n != 1 else ''} run"
    result = {
        "status": step.status,
        "slo_max": low.level if low else None,
        "bracket": [low.level if low else None, high.level if high else None],
        "width": None if step.width != step.width else step.width,
        "levels_run": n,
        "verdict_at_slo_max": low.verdict if low else None,
        "proven_up_to": max(proven) if proven else None,
    }
    if step.status == NONE_MET:
        assert high is not None
        line = (
            f"no level meets the SLO ({slo}): at the lowest, {high.level:g} {unit}, "
            f"{_figures_text(high)}; lower --min-level or loosen the SLO"
        )
    elif step.status == MAX_MET:
        assert low is not None
        line = (
            f"the SLO ({slo}) is met up to --max-level, {low.level:g} {unit} (proven: "
            f"{low.verdict}); the SLO-max is higher: raise --max-level. {ran}"
        )
    else:
        assert low is not None
        span = (
            f"met at {low.level:g}, not at {high.level:g} (bracket {step.width * 100:.1f}% wide)"
            if high is not None
            else f"met at {low.level:g}, no level above it measured"
        )
        why = {CONVERGED: "", BUDGET: " before the bracket was within 5% (raise --max-levels)"}
        line = f"SLO-max {low.level:g} {unit} for {slo}: {span}; {ran}{why[step.status]}"
        if low.verdict != HOLDS:
            held = f"{max(proven):g} {unit}" if proven else "no level"
            line += (
                f". At {low.level:g} the SLO {low.verdict} within the 95% intervals (more "
                f"requests per level would tell); proven to hold: {held}"
            )
    if high is not None and high.late and step.status != NONE_MET:
        line += (
            f". The miss at {high.level:g} was measured twice while the client was late "
            f"({high.late}): it may be partly the load generator's"
        )
    elif high is not None and high.late:
        line += f" (measured twice while the client was late: {high.late})"
    result["line"] = line
    return result


def write_outputs(directory: str, state: SearchState, table: str) -> str:
    """`slo_max.md` beside `slo_max.json`; returns the Markdown's path."""
    path = os.path.join(directory, TABLE_FILE)
    search = state.search
    text = (
        f"# SLO-max: {', '.join(search['slo'])}\n\n"
        f"Server: `{search['server_cmd'] or search['host']}`\n\n"
        f"```\n{table}\n```\n\n{state.result['line']}\n\n"
        "Each item: the estimate as the report computes it (95% interval). *met*: every estimate "
        "within its limit (what the search follows); *proven*: holds when every interval is "
        "within its limit, fails when one is wholly beyond it, straddles otherwise.\n"
    )
    write_atomic(path, text)
    state.save(directory)
    return path
