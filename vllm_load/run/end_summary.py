"""What a finished run prints: the per-level table (with its --slo, goodput per level), the
requests cut off, its directory; and what `vllm-load run` decides its exit status on, found
while the run is read for the table (run.json's `end_checks`), so that the launching command
need not read and measure the run again."""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ..run_format.files import SESSIONS_CSV, write_atomic
from ..run_format.lost_workers import LostWorker, lost_workers
from ..server.loss import FinalStreak, streak_in
from ..stop_when import stopped_by_line

if TYPE_CHECKING:
    from ..analysis.levels.per_target import TargetFigures
    from ..analysis.measured_run import MeasuredRun

logger = logging.getLogger("vllm_load")


@dataclass(frozen=True)
class EndChecks:
    """The levels that failed (`analysis.series.failures`, one line; "" when none) and the
    failures the run ended on (`server.loss`; None when it ended on a success)."""

    failed_levels: str
    final_streak: FinalStreak | None
    #: the targets of several (--hosts) whose requests failed to the end of the run
    #: (`analysis.levels.per_target.target_loss`): ejected, the others carried the test on
    lost_targets: tuple[str, ...] = ()

    def as_json(self) -> dict:
        streak = self.final_streak
        return {
            "failed_levels": self.failed_levels,
            "final_streak": None if streak is None else asdict(streak),
            "lost_targets": list(self.lost_targets),
        }


def lost_by_level(lost: list[LostWorker]) -> dict[int, str]:
    """{level: the workers lost during it, named, and what went with them}: the table's legend."""
    out: dict[int, list[str]] = {}
    for w in lost:
        if (level := w.held_less()) is not None:
            what = w.what_was_lost()
            out.setdefault(level, []).append(w.named() + (f", {what}" if what else ""))
    return {lv: "; ".join(texts) for lv, texts in out.items()}


def print_summary(run_dir: str) -> EndChecks | None:
    """The per-level table (and goodput against the run's SLOs), the requests cut off at the
    stop, and where the run directory is; returns the run's `EndChecks` (None when the run
    could not be read). A run that held conversations or agentic sessions gets its
    sessions.csv from the same reading."""
    abandoned = 0
    lost: list[LostWorker] = []
    checks = None
    stopped = ""
    try:
        # at call time: pandas stays out of the load processes, which import this module too
        from ..analysis.measured_run import measure_run, read_targets
        from ..run_format.load import read_run_json

        info = read_run_json(run_dir)
        abandoned = info.get("requests_abandoned", {}).get("total", 0)
        lost = lost_workers(info)
        stopped = stopped_by_line(info)
        measured = measure_run(run_dir)  # once: the table, the diagnosis and the checks read it
        write_sessions(run_dir, measured.data.requests)
        meas = measured.meas
        targets = read_targets(run_dir, measured.data, meas, meas.metrics)
        checks = end_checks(measured, targets)
        table = summary_text(measured, lost, targets)
    except Exception as e:  # a summary must never lose the run: say why it is missing instead
        logger.warning("could not summarise the run: %s", e)
        table = ""
    if table:
        print("\n" + table, flush=True)
    if abandoned:
        by_loss = sum(w.in_flight or 0 for w in lost)
        why = (
            " with the workers lost"
            if by_loss >= abandoned
            else f" ({by_loss} with the workers lost, the rest when the test stopped)"
            if by_loss
            else " when the test stopped"
        )
        print(
            f"{abandoned} request(s) in flight were cut off{why}: no rows, counted in run.json",
            flush=True,
        )
    for w in lost:
        if not w.during_level:
            what = w.what_was_lost()
            print(
                f"{w.named()} was lost {w.when()}, while no level ran"
                + (f" ({what})" if what else "")
                + ": no level held less than its load for it",
                flush=True,
            )
    if stopped:
        print(f"\nStopped early: {stopped}", flush=True)
    print(f"\nRun directory: {run_dir}", flush=True)
    return checks


def write_sessions(run_dir: str, requests) -> int:
    """sessions.csv (docs/run-format.md) from the run's requests, when it held sessions; how
    many rows it has."""
    from ..analysis.sessions import session_table  # (pandas: at call time, as above)

    table = session_table(requests)
    if not table.empty:
        write_atomic(os.path.join(run_dir, SESSIONS_CSV), table.to_csv(index=False))
    return len(table)


def end_checks(measured: MeasuredRun, targets: list[TargetFigures]) -> EndChecks:
    """What `vllm-load run` decides its exit status on, from the run as measured and its
    targets' figures (`analysis.measured_run.read_targets`)."""
    from ..analysis.series.failures import describe_problems, level_problems

    problems = level_problems(measured.meas)
    data = measured.data
    return EndChecks(
        describe_problems(problems) if problems else "",
        streak_in(data.requests, data.steps),
        tuple(t.url for t in targets if t.loss is not None),
    )


def summary_text(
    measured: MeasuredRun, lost: list[LostWorker], targets: list[TargetFigures]
) -> str:
    """The per-level table with its verdicts, where the GPUs' figures came from, the diagnosis,
    a trace replay's lines, each target's figures and goodput against the run's --slo."""
    from ..analysis.decisions.goodput import format_goodput_table, level_goodput
    from ..analysis.levels.client_side import headroom_text, late_levels
    from ..analysis.levels.per_target import target_table_text
    from ..analysis.levels.rates import rate_verdicts
    from ..analysis.levels.table import format_level_table
    from ..analysis.measured_run import diagnose_run, diagnosis_lines
    from ..analysis.replay.read import read_replays
    from ..run_format.gpu_metrics import source_line
    from ..slo import parse_slo

    run, measurement = measured.data, measured.meas
    metrics = measurement.metrics
    diagnosis, bottlenecks, head = diagnose_run(measured)
    verdicts = rate_verdicts(metrics)
    table = format_level_table(
        metrics,
        late_levels(measured.client_levels),
        {lv: v.unsteady_text() for lv, v in verdicts.items() if not v.steady},
        bottlenecks,
        lost_by_level(lost),
    )
    if headroom := headroom_text(measured.client_levels, measured.axis.unit):
        table += "\n" + headroom  # how close the client came to its limits
    if gpu_line := source_line(run.run):  # GPU telemetry: where its figures came from
        table += "\n" + gpu_line
    # the headline, from the same figures as the table above and the report
    table += "\n\nHeadline:\n" + "\n".join(f"  {line}" for line in head.lines())
    table += "\n\n" + "\n".join(diagnosis_lines(diagnosis))
    server = measured.server_read.frame
    for replay in read_replays(run.requests, run.steps, run.run, server, streams=run.streams):
        table += "\n\nTrace replay:\n" + "\n".join(f"- {line.text}" for line in replay.lines())
    if targets:
        table += "\n\nTargets:\n" + target_table_text(targets)
    slo = parse_slo((run.run.get("settings") or {}).get("slo") or [])
    if slo:  # the run's --slo: goodput per level, as the report will show it
        goodput = level_goodput(run.requests, measurement, slo)
        table += "\n\n" + format_goodput_table(metrics, goodput, slo)
    return table
