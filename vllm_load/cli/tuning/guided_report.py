"""What the guided search (`guided.py`) prints and writes: its path as a table, its result with
one final line (`guided.json`'s `result`), and `guided.md`."""

from __future__ import annotations

import os

from ...analysis.decisions.guided_search import (
    MEASURED,
    STOP_TEXT,
    GuidedStep,
    best_step,
)
from ...run_format.files import write_atomic
from ...slo import SloSpec

TABLE_FILE = "guided.md"


def _num(value: float | None, spec: str = "g") -> str:
    return "-" if value is None else format(value, spec)


def _slo_max(step: GuidedStep) -> str:
    if step.outcome != MEASURED:
        return step.outcome.replace("_", " ")
    if step.value is None:
        return "none met"
    low, high = step.bracket
    shown = f"{step.value:g}"
    if len(step.slo_max) > 1:
        shown += f" (mean of {len(step.slo_max)})"
    return f"{shown} [{_num(low)}..{_num(high)}]"


def _verdict(step: GuidedStep) -> str:
    if not step.verdict_kind:
        return "-"
    return f"{step.verdict_kind} at {_num(step.verdict_level)}"


def _advised(step: GuidedStep) -> str:
    def one(a: dict) -> str:
        together = "".join(f" with {b['flag']} {b['value']}" for b in a.get("also", ()))
        return f"{a['flag']} {a['value']}{together}"

    return ", ".join(one(a) for a in step.advice) or "-"


def step_rows(steps: list[GuidedStep], unit: str) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The search's path, (header, rows): one row per configuration tried, in order."""
    header: tuple[str, ...] = (
        "step",
        "change",
        f"SLO-max {unit} [bracket]",
        "tok/s there",
        "out tok/s/user",
        "verdict",
        "advises",
        "knee meas/pred",
        "runs",
        "kept",
    )
    rows: list[tuple[str, ...]] = [
        (
            str(s.index),
            s.change,
            _slo_max(s),
            _num(s.total_tok_per_s, ",.0f"),
            _num(s.output_tok_per_s_per_user, ".1f"),
            _verdict(s),
            _advised(s),
            f"{_num(s.knee_measured)}/{_num(s.knee_predicted, '.3g')}",
            str(s.runs_used),
            "yes" if s.kept else "no",
        )
        for s in steps
    ]
    return header, rows


def format_steps(steps: list[GuidedStep], unit: str) -> str:
    """The search's path as a text table."""
    header, body = step_rows(steps, unit)
    rows = [header, *body]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summarize_search(steps: list[GuidedStep], reason: str, spec: SloSpec, unit: str) -> dict:
    """The search's result: the best configuration, where it started, why it stopped."""
    best = best_step(steps)
    start = steps[0] if steps else None
    runs = sum(s.runs_used for s in steps)
    slo = ", ".join(spec.items())
    why = STOP_TEXT.get(reason, reason)
    result = {
        "stopped": reason,
        "best_step": best.index if best else None,
        "best_command": best.command if best else None,
        "best_config": best.config if best else None,
        "best_slo_max": best.value if best else None,
        "start_slo_max": start.value if start else None,
        "steps": len(steps),
        "runs_used": runs,
    }
    if best is None:
        said = start.why if start is not None else "nothing measured"
        line = f"the starting configuration has no SLO-max for {slo} ({said}); stopped: {why}"
    else:
        moved = [s.change for s in steps if s.kept and s.index != 0]
        how = f"by {'; '.join(moved)}" if moved else "no change kept"
        line = (
            f"best: SLO-max {best.value:g} {unit} for {slo} (start {steps[0].value:g}), {how}: "
            f"`{best.command}`; {len(steps)} configurations, {runs} runs; stopped: {why}"
        )
    result["line"] = line
    return result


def write_outputs(
    directory: str, search: dict, steps: list[GuidedStep], result: dict, table: str
) -> str:
    """`guided.md` beside `guided.json`; returns the Markdown's path."""
    path = os.path.join(directory, TABLE_FILE)
    lines = [
        f"# Guided search: {', '.join(search['slo'])}",
        "",
        f"Start: `{search['server_cmd']}`",
        "",
        "```",
        table,
        "```",
        "",
        result["line"],
        "",
        "Each step: the configuration one flag away from the best so far, as the bottleneck "
        "verdict at the SLO-max level advised (where that level names no flag, the first level "
        "past it that does); kept only where its SLO-max is better (Welch's t-test across "
        "--runs; with one run a side, at or above the level where the best missed the SLO).",
        "",
        "| step | command | kept | why |",
        "|---|---|---|---|",
        *(f"| {s.index} | `{s.command}` | {'yes' if s.kept else 'no'} | {s.why} |" for s in steps),
        "",
    ]
    write_atomic(path, "\n".join(lines))
    return path
