"""What a finished run prints: the per-level table, the requests cut off, its directory."""

from __future__ import annotations

import logging
import os

from ..rundir.files import CLIENT_HEALTH_CSV

logger = logging.getLogger("vllm_load")


def print_summary(run_dir: str) -> None:
    """The per-level table, the requests cut off at the stop, and where the run directory is."""
    abandoned = 0
    try:
        # at call time: pandas stays out of the load processes, which import this module too
        from ..analysis.client_side import late_levels, level_client_health, read_client_health
        from ..analysis.levels import format_level_table, level_metrics
        from ..analysis.rates import poisson_arrivals, rate_verdicts
        from ..rundir.load import load_run

        run = load_run(run_dir)
        abandoned = run.run.get("requests_abandoned", {}).get("total", 0)
        metrics = level_metrics(run.requests, run.steps)
        health = read_client_health(os.path.join(run_dir, CLIENT_HEALTH_CSV))
        verdicts = rate_verdicts(metrics, poisson_arrivals(run.run))
        table = format_level_table(
            metrics,
            late_levels(level_client_health(health, metrics, run.requests)),
            {lv: v.text() for lv, v in verdicts.items() if not v.kept_up},
        )
    except Exception as e:  # a summary must never lose the run: say why it is missing instead
        logger.warning("could not summarise the run: %s", e)
        table = ""
    if table:
        print("\n" + table, flush=True)
    if abandoned:
        print(
            f"{abandoned} request(s) in flight when the test stopped were cut off: no rows, counted in run.json",
            flush=True,
        )
    print(f"\nRun directory: {run_dir}", flush=True)
