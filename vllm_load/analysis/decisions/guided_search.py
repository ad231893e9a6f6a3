"""The guided search's decisions (`tune --slo ... --guided`), pure: which flag to move next, to
what value, within which bounds; whether a configuration beat the best so far; when to stop.

Each configuration tried is one `GuidedStep`: its flags and server command, its SLO-max (one per
`--runs`) and bracket, the bottleneck verdict read at its SLO-max level and the flag it advises,
its knees, its throughput at the SLO-max level, the runs it used, and whether it was kept and
why. The search moves from the best configuration so far (the start, or the last one kept):
the next configuration sets one flag as the latest step's verdict advises, else as the best
one's; a value outside the flag's bounds is brought to the bound, a configuration already tried
is not tried again. It stops when no verdict names a flag it can move, when two steps in a row
gained nothing, or when the budget of runs is spent.

A change is kept only where it is better by the test `vllm-load compare` uses across runs:
Welch's t-test of the SLO-max values (`ab.verdict` at alpha 0.05) with two runs a side or
more. With one run a side no test is possible; a change is then kept only where its SLO-max is
at or above the lowest level at which the best configuration missed the SLO (its bracket's
high end): a level measured to miss on one side and to meet it on the other, so the gain is
more than the search's own resolution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

#: a step's outcome: measured, or why it has no SLO-max
MEASURED = "measured"
SERVER_FAILED = "server_failed"  # its server did not start (or did not get ready)
RUN_FAILED = "run_failed"  # a level's run did not complete

#: why the search stopped
NO_FLAG = "no_flag"
TWO_WITHOUT_GAIN = "two_without_gain"
BUDGET_SPENT = "budget"
START_FAILED = "start_failed"

#: how many steps in a row may gain nothing before the search stops
STEPS_WITHOUT_GAIN = 2
ALPHA = 0.05


@dataclass(frozen=True)
class FlagBound:
    """The values a flag may take: `low..high` (either may be open)."""

    name: str  # as a `config.NAME` tag: max_num_seqs
    low: float = -math.inf
    high: float = math.inf

    @property
    def flag(self) -> str:
        return flag_of(self.name)

    def clamp(self, value: float) -> float:
        return min(max(value, self.low), self.high)

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high


def flag_of(name: str) -> str:
    """`max_num_seqs` -> `--max-num-seqs`."""
    return "--" + name.replace("_", "-")


def name_of(flag: str) -> str:
    """`--max-num-seqs` -> `max_num_seqs`."""
    return flag.lstrip("-").replace("-", "_")


def parse_bound(text: str) -> FlagBound:
    """`NAME=LOW..HIGH` (NAME a flag, `max_num_seqs` or `--max-num-seqs`; LOW or HIGH may be
    left out) -> FlagBound; ValueError, one line, for anything else."""
    name, sep, span = text.partition("=")
    low_text, dots, high_text = span.partition("..")
    name = name_of(name.strip())
    if not sep or not dots or not name or not name.replace("_", "").isalnum():
        raise ValueError(f"--bound takes NAME=LOW..HIGH (e.g. max_num_seqs=2..256), got {text!r}")
    try:
        low = float(low_text) if low_text.strip() else -math.inf
        high = float(high_text) if high_text.strip() else math.inf
    except ValueError:
        raise ValueError(f"--bound {text!r}: LOW and HIGH must be numbers") from None
    if not low <= high:
        raise ValueError(f"--bound {text!r}: LOW is above HIGH")
    return FlagBound(name, low, high)


@dataclass(frozen=True)
class Advised:
    """One piece of advice a verdict gives: set `flag` to `value` (None: no value to set)."""

    flag: str
    value: str | None
    old: str | None = None  # the value the verdict read the server running with, when known
    #: flags set together with this one: a move of one alone would gain nothing
    also: tuple["Advised", ...] = ()


@dataclass
class GuidedStep:
    """One configuration the search tried, as `guided.json` keeps it and the frontier reads it."""

    index: int
    config: dict[str, str]  # flag name -> value, for the flags the search knows
    command: str
    change: str  # `--max-num-seqs 2 -> 8`, or "start"
    parent: int | None  # the step it moved from (None: the start)
    outcome: str = MEASURED
    reason: str = ""  # why it has no SLO-max, when it has none
    slo_max: list[float | None] = field(default_factory=list)  # one per run
    bracket: list[float | None] = field(default_factory=lambda: [None, None])  # the first run's
    status: str = ""  # the first run's search status (`slo_search`)
    verdict_kind: str = ""  # the bottleneck verdict read at `verdict_level`
    verdict_level: float | None = None  # the SLO-max, or the first level past it naming a flag
    #: {"flag", "from", "value"}: what the verdict advises, in its order
    advice: list[dict] = field(default_factory=list)
    knee_measured: float | None = None
    knee_predicted: float | None = None
    total_tok_per_s: float | None = None  # at the SLO-max level
    output_tok_per_s_per_user: float | None = None  # at the SLO-max level: 1 / median TPOT
    runs_used: int = 0  # level runs measured for this step
    run_dirs: list[str] = field(default_factory=list)
    kept: bool = False
    why: str = ""
    #: the flag this step set on its parent's configuration: {"flag", "from", "to", "note"}
    moved: dict | None = None

    @property
    def value(self) -> float | None:
        """The step's SLO-max: the mean over its runs; None without one in every run."""
        values = [v for v in self.slo_max if v is not None]
        if not values or len(values) != len(self.slo_max):
            return None
        return sum(values) / len(values)

    @property
    def advised(self) -> list[Advised]:
        return [
            Advised(
                a["flag"],
                a.get("value"),
                a.get("from"),
                tuple(Advised(b["flag"], b.get("value"), b.get("from")) for b in a.get("also", ())),
            )
            for a in self.advice
        ]


def better(best: GuidedStep, step: GuidedStep) -> tuple[bool, str]:
    """Whether `step` beats `best` on SLO-max, and the sentence why (the module's rule)."""
    # at call time: the statistics keep numpy, pandas and scipy out of every command's start
    from .ab import BETTER, verdict
    from .significance import NO_TEST, welch

    if step.outcome != MEASURED:
        return False, f"not measured ({step.outcome}): {step.reason}"
    if step.value is None:
        return False, "no level met the SLO"
    if best.value is None:
        return True, "the best so far met the SLO at no level"
    a = [float(v) for v in best.slo_max if v is not None]
    b = [float(v) for v in step.slo_max if v is not None]
    gain = (step.value - best.value) / best.value
    result = welch(a, b, ALPHA)
    if result.test != NO_TEST:
        judged = verdict(result.diff, result.p, ALPHA, True)
        said = f"SLO-max {gain * 100:+.1f}% (Welch p = {result.p:.3g}, n = {len(a)}/{len(b)})"
        return judged == BETTER, f"{said}: {judged}"
    high = best.bracket[1]
    if high is None:
        return False, (
            f"SLO-max {gain * 100:+.1f}% with one run a side; the best so far met the SLO up to "
            "its highest allowed level, so no gain can be shown"
        )
    kept = step.value >= high
    where = "at or above" if kept else "below"
    return kept, (
        f"SLO-max {gain * 100:+.1f}% with one run a side: {step.value:g} is {where} {high:g}, "
        "where the best so far missed the SLO"
    )


def _number(value: str) -> float | None:
    try:
        x = float(value.replace(",", ""))
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _same_number(a: str, b: str) -> bool:
    x, y = _number(a), _number(b)
    return x is not None and x == y


def _shown(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"


@dataclass(frozen=True)
class Move:
    """The next configuration: `flag` set to `value` on the best step's configuration (and the
    flags of `also` with it)."""

    flag: str
    old: str | None
    value: str
    note: str = ""  # e.g. brought to its bound
    also: tuple["Move", ...] = ()

    @property
    def change(self) -> str:
        one = f"{self.flag} {self.old if self.old is not None else 'default'} -> {self.value}"
        return ", ".join([one, *(m.change for m in self.also)])

    @property
    def values(self) -> dict[str, str]:
        """flag name -> value, for every flag the move sets."""
        return {name_of(m.flag): m.value for m in (self, *self.also)}


def move_for(advice: Advised, config: dict[str, str], bounds: dict[str, FlagBound]) -> Move | None:
    """The move one piece of advice makes from `config`, within its flags' bounds, the flags of
    its `also` with it; None where it makes none (no value, a value already set, a bound already
    reached). A flag of `also` that cannot move (already there, at its bound) is left out: the
    advice's own flag still moves."""
    one = _move_one(advice, config, bounds)
    if one is None:
        return None
    also = tuple(m for m in (_move_one(a, config, bounds) for a in advice.also) if m is not None)
    if not also:
        return one
    note = "; ".join(n for n in (one.note, *(m.note for m in also)) if n)
    return Move(one.flag, one.old, one.value, note, also)


def _move_one(advice: Advised, config: dict[str, str], bounds: dict[str, FlagBound]) -> Move | None:
    """`move_for` of one flag."""
    if advice.value is None or not advice.flag.startswith("--"):
        return None
    name = name_of(advice.flag)
    old = config.get(name, advice.old)
    bound = bounds.get(name)
    value, note = advice.value, ""
    target = _number(advice.value)
    if bound is not None:
        if target is None:
            return None  # a bounded flag takes numbers: a value outside them is not tried
        if not bound.holds(target):
            value = _shown(bound.clamp(target))
            note = f"advised {advice.value}, brought to its bound"
    if old is not None and (value == old or _same_number(value, old)):
        return None
    return Move(advice.flag, old, value, note)


def next_move(
    steps: list[GuidedStep],
    bounds: dict[str, FlagBound],
    tried: set[str],
    command_of: Callable[[GuidedStep, Move], str],
) -> Move | None:
    """The next configuration to try, from the best step: the latest step's advice first, then
    the best's; None when none moves a flag to a configuration not tried yet. `command_of(best,
    move)` is the command the move gives (the caller's: it knows the server command)."""
    best = best_step(steps)
    if best is None:
        return None
    latest = steps[-1]
    for step in (latest, best) if latest is not best else (best,):
        for advice in step.advised:
            move = move_for(advice, best.config, bounds)
            if move is not None and command_of(best, move) not in tried:
                return move
    return None


def best_step(steps: list[GuidedStep]) -> GuidedStep | None:
    """The last step kept (the start is kept when it measured)."""
    kept = [s for s in steps if s.kept]
    return kept[-1] if kept else None


def stop_reason(steps: list[GuidedStep]) -> str | None:
    """Why the search stops before choosing a move: the start failed, or the last steps gained
    nothing; None to go on."""
    if not steps:
        return None
    if best_step(steps) is None:
        return START_FAILED
    tail = steps[1:][-STEPS_WITHOUT_GAIN:]
    if len(tail) == STEPS_WITHOUT_GAIN and not any(s.kept for s in tail):
        return TWO_WITHOUT_GAIN
    return None


STOP_TEXT = {
    NO_FLAG: "the verdict names no flag it can move (within the bounds, to a configuration not "
    "tried yet)",
    TWO_WITHOUT_GAIN: f"{STEPS_WITHOUT_GAIN} steps in a row gained nothing",
    BUDGET_SPENT: "the budget of runs (--max-runs) is spent",
    START_FAILED: "the starting configuration has no SLO-max",
}
