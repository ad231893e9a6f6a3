"""How each run of a series ended, as the sentences that open its key findings.

A run's figures say what was measured, not whether the test went as planned: an interrupted run
(run.json `outcome` `interrupted`), one that lost every load worker (`workers_lost`) or never
closed (`running`) has levels it never reached, and its highest level can look like the top of a
rising curve; a run whose target stopped answering (`vllm_load.server.loss`: it ended on a streak
of failures with no answer and no success after them) keeps outcome `completed` while its last
levels measured nothing but failures; a run that lost some of its workers moved their users to
the others and abandoned their requests in flight, so the level it lost one during held less
than its load for a while (`lost_levels`: not the client's doing). The report says each of these
before any figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ...run_format.load import RunData
from ...run_format.lost_workers import LostWorker, lost_workers
from ...server.loss import ended_unanswered, streak_in
from ...stop_when import stopped_by_line
from ..levels.recorded_levels import kinds_and_values
from .curve import axis_of, value_text

#: `steps.csv` stop reasons of a level that ended before its requests did
CUT_SHORT = frozenset({"interrupted", "workers_lost", "client_limit", "stop_when"})


@dataclass(frozen=True)
class Silence:
    """The failures a run ended on, when they are the target-lost rule's (`server.loss`)."""

    level: int  # the level during which the first of them ended
    failures: str  # e.g. `4,062 connect failures, 16 disconnect failures`


@dataclass(frozen=True)
class RunOutcome:
    """How one run ended, its levels named as the series names them (users, or requests/s)."""

    run_id: str
    outcome: str  # run.json's `outcome`
    noun: str  # what follows a level's number: "concurrent" or "requests/s"
    stopped_during: float | None  # the level running when an unfinished run stopped
    cut_short: tuple[float, ...]  # levels that ended before their requests did
    not_run: tuple[float, ...]  # levels of the planned ladder never started
    workers_lost: tuple[tuple[LostWorker, float], ...]  # (worker, level it was lost during)
    silent_from: float | None = None  # the level the target stopped answering during
    silent_failures: str = ""
    stopped_by: str = ""  # a --stop-when rule that ended the ladder: run.json's `stopped_by` line

    @property
    def finished(self) -> bool:
        """Whether the run walked its whole ladder."""
        return self.outcome == "completed" and not self.cut_short and not self.not_run

    @property
    def unreached(self) -> tuple[float, ...]:
        """The levels of its ladder this run did not run to their end."""
        return tuple(sorted({*self.cut_short, *self.not_run}))

    def _levels(self, levels) -> str:
        return f"{', '.join(value_text(x) for x in levels)} {self.noun}"

    def sentences(self) -> list[str]:
        out = []
        if not self.finished:
            how = {
                "interrupted": "was interrupted",
                "workers_lost": "lost every load worker",
                "client_limit": "was stopped at a load process's client-side limit (run.json "
                "`client_limit` names it)",
                "running": "never closed (its process was killed, or it is still running)",
                "stopped": f"was stopped early ({self.stopped_by})"
                if self.stopped_by
                else "was stopped early by a --stop-when rule",
            }.get(self.outcome, f"ended early (outcome {self.outcome})")
            during = (
                f" during level {self._levels([self.stopped_during])}"
                if self.stopped_during is not None
                else ""
            )
            parts = []
            if self.cut_short:
                verb = "was" if len(self.cut_short) == 1 else "were"
                parts.append(
                    f"{self._levels(self.cut_short)} {verb} cut short (ended before its measured "
                    "requests had finished)"
                )
            if self.not_run:
                parts.append(f"{self._levels(self.not_run)} never ran")
            rest = "; ".join(parts) or "every level had ended, but not every request was recorded"
            out.append(
                f"Run {self.run_id} {how}{during} (run.json outcome: {self.outcome}): {rest}. "
                "These findings cover only the levels it reached; run the whole ladder to know "
                "the rest."
            )
        if self.silent_from is not None:
            out.append(
                f"Run {self.run_id}: the target stopped answering during level "
                f"{self._levels([self.silent_from])}: the run ended on {self.silent_failures} "
                "with no success after them, so its levels from there on measured failures, not "
                "serving."
            )
        if self.outcome != "workers_lost":
            out.extend(self._lost_sentence(worker, level) for worker, level in self.workers_lost)
        return out

    def _lost_sentence(self, worker: LostWorker, level: float) -> str:
        if not worker.during_level:  # (found silent between levels or as the test stopped)
            after = f" after level {self._levels([level])} had ended" if level == level else ""
            what = worker.what_was_lost() or "its requests in flight were never recorded"
            return (
                f"Run {self.run_id} lost load {worker.named()}{after}, while no level ran "
                f"({what}): no level held less than its load for it."
            )
        during = f" during level {self._levels([level])}" if level == level else ""
        what = (
            f"its {worker.in_flight:,} request(s) in flight were abandoned (never recorded)"
            if worker.in_flight is not None
            else "its requests in flight were never recorded"
        )
        if worker.unsent:
            what += f", {worker.unsent:,} requests of its trace share were never sent"
        held = (
            "; that level held less than its load meanwhile, so its achieved concurrency "
            "is the loss's, not the client's"
            if level == level
            else ""
        )
        return (
            f"Run {self.run_id} lost load {worker.named()}{during}: {what} and its users moved "
            f"to the remaining workers{held}."
        )


def _level_values(run: dict, steps: pd.DataFrame) -> dict[int, float]:
    """{level index: the level as the series names it (its value in its kind of load)} from
    steps.csv."""
    _, values = kinds_and_values(steps, pd.to_numeric(steps["users"], errors="coerce"))
    levels = pd.to_numeric(steps["level"], errors="coerce")
    return {int(lv): float(v) for lv, v in zip(levels, values) if lv == lv}


def _level_of(values: dict[int, float], level: object) -> float:
    """A level index from run.json as the series names it (NaN when it names none)."""
    return values.get(level, float("nan")) if isinstance(level, int) else float("nan")


def run_outcome(
    run_id: str, run: dict, steps: pd.DataFrame, silence: Silence | None = None
) -> RunOutcome:
    """How the run of `run` (run.json) and `steps` (steps.csv) ended; `silence` when it ended
    on the target-lost rule's failures."""
    axis = axis_of(run, steps)
    settings = run.get("settings") or {}
    ladder = settings.get("rates") or settings.get("levels") or []
    planned = (
        [float(x) for x in ladder if isinstance(x, (int, float))]
        if isinstance(ladder, list)
        else []
    )
    values = _level_values(run, steps)
    reasons = (
        steps["stop_reason"].astype("string").fillna("").to_numpy(dtype=object)
        if "stop_reason" in steps
        else np.full(len(steps), "", dtype=object)
    )
    ends = (
        pd.to_numeric(steps["end_ts"], errors="coerce").to_numpy(np.float64)
        if "end_ts" in steps
        else np.zeros(len(steps))
    )
    levels = pd.to_numeric(steps["level"], errors="coerce").to_numpy(np.float64)
    outcome = str(run.get("outcome") or "unknown")
    unended = [
        int(lv) for lv, why, end in zip(levels, reasons, ends) if why in CUT_SHORT or end != end
    ]
    cut = tuple(values[lv] for lv in unended if lv in values)
    started = int(np.nanmax(levels)) + 1 if len(levels) else 0
    stopped = values.get(max(unended)) if unended else None
    lost = tuple((w, _level_of(values, w.level)) for w in lost_workers(run))
    return RunOutcome(
        run_id=run_id,
        outcome=outcome,
        noun=axis.noun,
        stopped_during=stopped if outcome != "completed" else None,
        cut_short=cut if outcome != "completed" else (),
        not_run=tuple(planned[started:]) if outcome != "completed" else (),
        workers_lost=lost,
        silent_from=values.get(silence.level) if silence is not None else None,
        silent_failures=silence.failures if silence is not None else "",
        stopped_by=stopped_by_line(run),
    )


def lost_levels(outcomes: Sequence[RunOutcome]) -> set[float]:
    """The levels (as the series names them) during which some run lost a load worker."""
    return {
        level for o in outcomes for w, level in o.workers_lost if level == level and w.during_level
    }


def unreached(outcomes: Sequence[RunOutcome]) -> tuple[float, ...]:
    """The levels some run of a series did not run to their end."""
    return tuple(sorted({lv for o in outcomes for lv in o.unreached}))


def outcome_of(data: RunData) -> RunOutcome:
    """How a run ended: run.json's outcome, its steps, and whether it ended on the target-lost
    rule's failures (`server.loss`; the report cannot probe the target, so it says what the
    requests show)."""
    streak = streak_in(data.requests, data.steps)
    silence = (
        Silence(streak.level, streak.describe()) if streak and ended_unanswered(streak) else None
    )
    return run_outcome(data.run_id, data.run, data.steps, silence)
