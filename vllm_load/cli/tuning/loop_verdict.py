"""Whether the advice paid off, from the runs of A (as run) and B (the advice applied): peak
total tok/s across runs (`analysis.decisions.advice_check`), p99 E2E at the highest level both
measured (`vllm-load compare`'s own verdict there), and where each side's knee is against the
capacity model's; written as `verdict.json` and `verdict.txt` in the tune directory, beside the
whole comparison (`compare.html`, `.md`, `.json`: every level and figure, as `vllm-load compare`
writes it).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Callable

from ...analysis.decisions.ab import BETTER, UNSURE, WORSE, Comparison
from ...analysis.decisions.advice_check import (
    KneeCheck,
    knee_check,
    knee_moved,
    knee_stayed,
    peak_comparison,
)
from ...run_format.advice_record import DID_NOT, PAID_OFF, UNDETERMINED
from ...run_format.files import write_atomic
from ..errors import CommandFailed
from . import written
from .runs import ConfigResult, Configuration
from .source import Diagnosis

VERDICT_JSON, VERDICT_TEXT, COMPARISON = "verdict.json", "verdict.txt", "compare.html"
KNEE_MOVED = {
    True: "the knee moved where the advice said (B's within one tested level of it)",
    False: "the knee did not move where the advice said (B's more than one tested level away)",
    None: "whether the knee moved where the advice said cannot be told",
}
KNEE_STAYED = (
    "the knee did not move: B's stayed where A's was, though the advice said it would move"
)


@dataclass
class AdviceVerdict:
    """Everything the verdict says, and the comparison it rests on."""

    diagnosis: Diagnosis
    configurations: tuple[Configuration, Configuration]
    results: tuple[ConfigResult, ConfigResult]
    throughput: Comparison  # peak total tok/s, across runs
    latency: Comparison | None  # p99 E2E at the highest level both measured, as compare gives it
    knees: tuple[KneeCheck, KneeCheck]
    #: the comparison's way of naming a level (`8 users`, `2.50 requests/s`)
    level_text: Callable[[float], str]
    compare_outcome: str  # compare's one-line outcome over every level and figure
    compare_path: str

    @property
    def conclusion(self) -> str:
        """The verdict in one sentence."""
        t, lat = self.throughput, self.latency
        gain = f"peak total tok/s ({_rel(t.rel_diff)})"
        if t.verdict == BETTER:
            if lat is not None and lat.verdict == WORSE:
                return (
                    f"the advice raised throughput at a latency cost: B better on {gain}, B worse "
                    f"on p99 E2E at {self.level_text(lat.level)} ({_rel(lat.rel_diff)})"
                )
            return f"the advice paid off: B better on {gain}"
        if t.verdict == WORSE:
            return f"the advice did not pay off: B worse on {gain}"
        if t.verdict == UNSURE:
            return (
                f"undetermined at this n: no significant difference in peak total tok/s "
                f"({_rel(t.rel_diff)}, n = {min(t.a.n, t.b.n)} runs a side); run more with --runs"
            )
        return f"no verdict: {t.verdict} (every run of a side is needed; see the runs above)"

    def knee_line(self, check: KneeCheck) -> str:
        """Where one side's knee was measured, and where the capacity model put it."""
        if check.measured is not None:
            where = f"~{self.level_text(check.measured)}"
        elif check.levels:
            where = f"not saturated up to {self.level_text(max(check.levels))}"
        else:
            where = "no level measured"
        if check.expected is None:
            return f"{where}; the capacity model gave no knee"
        said = f"{where}; the capacity model: ~{self.level_text(check.expected)}"
        if check.agrees is None:
            return f"{said} (too few levels to tell how far apart)"
        return f"{said}, {'within' if check.agrees else 'more than'} one tested level"

    @property
    def knee_moved(self) -> bool | None:
        """Whether B's knee is where the advice said (`advised_knee`, within one tested level)
        and moved from A's (`advice_check.knee_moved`)."""
        return knee_moved(*self.knees)

    @property
    def knee_text(self) -> str:
        return KNEE_STAYED if knee_stayed(*self.knees) else KNEE_MOVED[self.knee_moved]

    def text(self) -> str:
        d, (a, b) = self.diagnosis, self.configurations
        changes = ", ".join(f"{x.flag} {a.shown[x.name]} -> {b.config[x.name]}" for x in d.runnable)
        lines = [
            f"Advice ({d.kind}, series {d.series!r} of {d.source}): {changes}",
            f"A: {a.command}",
            f"B: {b.command}",
            f"  {_comparison_line(self.throughput, 'peak total tok/s')}",
        ]
        if self.latency is not None:
            at = f"p99 E2E at {self.level_text(self.latency.level)}"
            lines.append(f"  {_comparison_line(self.latency, at)}")
        lines.append(f"  knee of A (as run): {self.knee_line(self.knees[0])}")
        lines.append(f"  knee of B (advised): {self.knee_line(self.knees[1])}")
        lines.append(f"  {self.knee_text}")
        lines.append(f"Verdict: {self.conclusion}")
        lines.append(f"Every level and figure (as vllm-load compare): {self.compare_outcome}")
        lines.append(f"Comparison: {self.compare_path}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        # at call time: the report's JSON helpers keep pandas out of the command's start
        from ...report.compare_model import comparison_dict, numeric

        (a, b), (ra, rb) = self.configurations, self.results
        latency = None
        if self.latency is not None:
            latency = {"level": self.latency.level, **comparison_dict(self.latency)}
        return {
            "format": 1,
            "diagnosis": self.diagnosis.as_dict(),
            "skipped_advice": [x.flag for x in self.diagnosis.skipped],
            "configurations": {
                name: {
                    "config": c.config,
                    "values": c.shown or c.config,
                    "command": c.command,
                    "runs": r.run_dirs,
                }
                for name, c, r in (("A", a, ra), ("B", b, rb))
            },
            "peak_throughput": comparison_dict(self.throughput),
            "e2e_p99": latency,
            "knee": {
                name: {
                    "levels": list(k.levels),
                    "measured": numeric(k.measured) if k.measured is not None else None,
                    "saturated": k.saturated,
                    "expected": k.expected,
                    "within_one_level": k.agrees,
                }
                for name, k in (("A", self.knees[0]), ("B", self.knees[1]))
            },
            "knee_moved_as_advised": self.knee_moved,
            "verdict": self.conclusion,
            "compare_outcome": self.compare_outcome,
            "comparison": self.compare_path,
            "text": self.text(),
        }


def _rel(share: float) -> str:
    return "-" if share is None or math.isnan(share) else f"{share * 100:+.1f}%"


def _comparison_line(c: Comparison, what: str) -> str:
    # at call time: keeps pandas and matplotlib out of every command's start (cli.main)
    from ...report.compare_render import p_text, value_text

    test = f"p = {p_text(c.p_adjusted)}" if c.tested else c.result.test
    return (
        f"{what}: A {value_text(c.a.mean, c.figure)} -> B {value_text(c.b.mean, c.figure)} "
        f"({_rel(c.rel_diff)}, {test}): {c.verdict}"
    )


def decide(
    diagnosis: Diagnosis,
    configurations: tuple[Configuration, Configuration],
    results: tuple[ConfigResult, ConfigResult],
    directory: str,
) -> AdviceVerdict:
    """Compare A's runs with B's and write the comparison and the verdict in `directory`."""
    # at call time: keeps pandas, scipy and matplotlib out of every command's start (cli.main)
    from ...report.compare_model import build_compare_data, level_text, outcome_text
    from ...report.compare_render import write_comparison

    a, b = results
    try:
        data = build_compare_data(a.run_dirs, b.run_dirs, "A", "B")
    except ValueError as e:  # runs that cannot be read or compared
        raise CommandFailed(f"the runs of A and B cannot be compared: {e}") from None
    html = os.path.join(directory, COMPARISON)
    key = written.fingerprint(
        "compare", written.run_files(a.run_dirs), written.run_files(b.run_dirs)
    )
    if written.unchanged(directory, "compare", key, [html]):
        print("Comparison unchanged: the same runs of A and B as when it was written")
    else:
        write_comparison(data, html)
        written.remember(directory, "compare", key)
    top = max(data.result.levels)
    latency = next(
        (c for c in data.result.at(top) if c.figure.key == "e2e_p99"),
        None,
    )
    return AdviceVerdict(
        diagnosis=diagnosis,
        configurations=configurations,
        results=results,
        throughput=peak_comparison(data.a.runs, data.b.runs, data.result.alpha),
        latency=latency,
        knees=(
            knee_check(a.levels, _knee(a), diagnosis.predicted_knee),
            knee_check(b.levels, _knee(b), diagnosis.advised_knee),
        ),
        level_text=lambda level: level_text(level, data.a.axis),
        compare_outcome=outcome_text(data),
        compare_path=html,
    )


def _knee(result: ConfigResult) -> float | None:
    return None if result.knee_value != result.knee_value else result.knee_value


def loop_outcome(throughput_verdict: str) -> str:
    """A loop's outcome for the advice record, from its peak-throughput verdict."""
    if throughput_verdict == BETTER:
        return PAID_OFF
    if throughput_verdict == WORSE:
        return DID_NOT
    return UNDETERMINED


def write_verdict(verdict: AdviceVerdict, directory: str) -> str:
    """`verdict.json` and `verdict.txt` in the tune directory; returns the JSON's path."""
    path = os.path.join(directory, VERDICT_JSON)
    write_atomic(path, json.dumps(verdict.as_dict(), indent=2))
    write_atomic(os.path.join(directory, VERDICT_TEXT), verdict.text() + "\n")
    return path
