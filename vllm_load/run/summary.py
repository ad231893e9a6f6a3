"""What a finished run prints: the per-level table (with its --slo, goodput per level), the
requests cut off, its directory; and what `vllm-load run` decides its exit status on, found
while the run is read for the table (run.json's `end_checks`), so that the launching command
need not read and measure the run again."""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass

from ..rundir.files import CLIENT_HEALTH_CSV, SERVER_METRICS_CSV
from ..rundir.lost_workers import LostWorker, lost_workers
from ..target.loss import FinalStreak, streak_in

logger = logging.getLogger("vllm_load")


@dataclass(frozen=True)
class EndChecks:
    """The levels that failed (`analysis.series.failures`, one line; "" when none) and the
    failures the run ended on (`target.loss`; None when it ended on a success)."""

    failed_levels: str
    final_streak: FinalStreak | None

    def as_json(self) -> dict:
        streak = self.final_streak
        return {
            "failed_levels": self.failed_levels,
            "final_streak": None if streak is None else asdict(streak),
        }


def lost_by_level(lost: list[LostWorker]) -> dict[int, str]:
    """{level: the workers lost during it, named, and what went with them}: the table's legend."""
    out: dict[int, list[str]] = {}
    for w in lost:
        if w.level is not None:
            what = w.what_was_lost()
            out.setdefault(w.level, []).append(w.named() + (f", {what}" if what else ""))
    return {lv: "; ".join(texts) for lv, texts in out.items()}


def print_summary(run_dir: str) -> EndChecks | None:
    """The per-level table (and goodput against the run's SLOs), the requests cut off at the
    stop, and where the run directory is; returns the run's `EndChecks` (None when the run
    could not be read)."""
    abandoned = 0
    lost: list[LostWorker] = []
    checks = None
    try:
        # at call time: pandas stays out of the load processes, which import this module too
        from ..analysis.decisions.goodput import format_goodput_table, level_goodput
        from ..analysis.decisions.slo import parse_slo
        from ..analysis.levels.client_side import (
            headroom_text,
            late_levels,
            level_client_health,
            read_client_health,
        )
        from ..analysis.levels.gpu import with_gpu
        from ..analysis.levels.measure import measure_levels
        from ..analysis.levels.rates import rate_verdicts
        from ..analysis.levels.server_side import read_server_metrics
        from ..analysis.levels.table import format_level_table
        from ..analysis.levels.targets import target_table_text
        from ..analysis.replay.read import read_replays
        from ..analysis.series.curve import axis_of
        from ..analysis.series.failures import describe_problems, level_problems
        from ..report.model import diagnose_run_dir, diagnosis_lines, read_targets
        from ..rundir.gpu_metrics import source_line
        from ..rundir.load import analysis_columns, load_run, read_run_json

        info = read_run_json(run_dir)
        abandoned = info.get("requests_abandoned", {}).get("total", 0)
        lost = lost_workers(info)
        # the diagnosis first: it reads and measures the run too, and lets it go before the
        # table's reading (which then finds requests.csv's columnar copy it wrote): one run in
        # memory at a time
        diagnosis, bottlenecks, head = diagnose_run_dir(run_dir)
        run = load_run(run_dir, analysis_columns())
        measurement = measure_levels(run.requests, run.steps, run.streams)
        measurement.metrics = with_gpu(measurement.metrics, run.gpu)  # GPU telemetry
        metrics = measurement.metrics
        problems = level_problems(measurement)
        checks = EndChecks(
            describe_problems(problems) if problems else "", streak_in(run.requests, run.steps)
        )
        health = read_client_health(os.path.join(run_dir, CLIENT_HEALTH_CSV)).frame
        verdicts = rate_verdicts(metrics)
        client_levels = level_client_health(health, metrics, run.requests)
        table = format_level_table(
            metrics,
            late_levels(client_levels),
            {lv: v.unsteady_text() for lv, v in verdicts.items() if not v.steady},
            bottlenecks,
            lost_by_level(lost),
        )
        if headroom := headroom_text(client_levels, axis_of(run.run, run.steps).unit):
            table += "\n" + headroom  # how close the client came to its limits
        if gpu_line := source_line(run.run):  # GPU telemetry: where its figures came from
            table += "\n" + gpu_line
        # the headline, from the same figures as the table above and the report
        table += "\n\nHeadline:\n" + "\n".join(f"  {line}" for line in head.lines())
        table += "\n\n" + "\n".join(diagnosis_lines(diagnosis))
        server = read_server_metrics(os.path.join(run_dir, SERVER_METRICS_CSV)).frame
        for replay in read_replays(run.requests, run.steps, run.run, server, streams=run.streams):
            table += "\n\nTrace replay:\n" + "\n".join(f"- {line.text}" for line in replay.lines())
        if targets := read_targets(run_dir, run, measurement, metrics):
            table += "\n\nTargets:\n" + target_table_text(targets)
        slo = parse_slo((run.run.get("settings") or {}).get("slo") or [])
        if slo:  # the run's --slo: goodput per level, as the report will show it
            goodput = level_goodput(run.requests, measurement, slo)
            table += "\n\n" + format_goodput_table(metrics, goodput, slo)
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
    print(f"\nRun directory: {run_dir}", flush=True)
    return checks
