"""How a headless `vllm-load run` ended: its outcome (`run.outcomes`) as run.json and the checks
after the last level say, and the one line saying why when it is not `completed`."""

from __future__ import annotations

import json
import os

from ..run.outcomes import EXIT_CODES
from ..run_format.lost_workers import lost_during_levels
from ..server.loss import still_answers, target_lost
from ..stop_when import stopped_by_line

TARGET_LOST = (
    "target_lost"  # what campaign and tune see for such a run (run.json keeps "completed")
)


def run_outcome(run_dir: str | None) -> str:
    """A run's outcome from its run.json; `failed` when it has none."""
    return str(read_run_json(run_dir or "").get("outcome") or "unknown")


def stopped_run(run_dir: str | None, kept: str) -> str:
    """What a run stopped by a signal left: `kept` (`Launch.kept`), and whether it had ended
    first (then it is whole: its outcome)."""
    outcome = read_run_json(run_dir).get("outcome") if run_dir else None
    if outcome in EXIT_CODES and outcome != "interrupted":
        return f"{kept.lstrip('; ')} (the run had ended first: outcome {outcome})"
    return kept.lstrip("; ")


def conclude(run_dir: str, host: str, api_key: str | None) -> tuple[str, str]:
    """How a headless run that Locust ended went (`run.outcomes`), and one line saying why when
    it is not `completed`: run.json's outcome (a --stop-when rule's line from its `stopped_by`),
    then whether the target was lost, then whether any level failed more of its measured
    requests than allowed or measured none."""
    run = read_run_json(run_dir)
    outcome = str(run.get("outcome") or "unknown")
    if outcome == "client_limit":
        limit = run.get("client_limit") or {}
        return outcome, f"{limit.get('message', 'a client-side limit')}; the test was stopped"
    if outcome == "stopped":
        line = stopped_by_line(run) or "a --stop-when rule ended the run"
        answers = "" if still_answers(host, api_key) else f"; {host} does not answer now"
        return outcome, f"{line}{answers}; {run_dir} holds what was measured"
    if outcome != "completed":
        return (
            outcome if outcome in EXIT_CODES else "interrupted",
            f"the run ended early (outcome {outcome}); {run_dir} holds what was measured",
        )
    lost = target_lost(run_dir, host, api_key)
    if lost:  # every level ran, but against a server that was gone
        return TARGET_LOST, lost
    if gone := lost_targets_line(run, api_key):  # the others carried the test on without it
        return TARGET_LOST, f"{gone}; {run_dir} holds what was measured"
    if workers := lost_workers_line(run):  # every level ran, but not at the load it was to hold
        return "workers_lost", f"{workers}; {run_dir} holds what was measured"
    failed = failed_levels(run_dir)
    if failed:
        silent = [
            str(t.get("url"))
            for t in run.get("targets") or []
            if isinstance(t, dict) and not still_answers(str(t.get("url", "")), api_key)
        ]
        gone = f"; {', '.join(silent)} does not answer now" if silent else ""
        return "levels_failed", f"{failed}{gone}; the run is in {run_dir}"
    return "completed", ""


def lost_targets_line(run: dict, api_key: str | None) -> str:
    """One line naming the targets of several that the run lost (run.json's `end_checks`; every
    target where the checks are not recorded) and that do not answer now ("" when none)."""
    targets = [str(t.get("url", "")) for t in run.get("targets") or [] if isinstance(t, dict)]
    if len(targets) < 2:
        return ""
    checks = run.get("end_checks")
    recorded = checks.get("lost_targets") if isinstance(checks, dict) else None
    if isinstance(recorded, list) and all(isinstance(url, str) for url in recorded):
        targets = recorded
    silent = [url for url in targets if not still_answers(url, api_key)]
    if not silent:
        return ""
    return (
        f"target {', '.join(silent)} was lost during the run and does not answer now (new "
        "requests went to the other targets)"
    )


def lost_workers_line(run: dict) -> str:
    """One line naming the load workers a run lost while a level ran and what went with them
    ("" when none): a worker that went silent only as the test stopped cost no level its load."""
    return "; ".join(
        f"{w.named()} was lost"
        + (f" {when}" if (when := w.when()) else "")
        + (f" ({what})" if (what := w.what_was_lost()) else "")
        for w in lost_during_levels(run)
    )


def failed_levels(run_dir: str) -> str:
    """One line naming the run's levels that failed (`analysis.series.failures`), "" if none: as
    the run's own process found them (run.json's `end_checks`), else measured here."""
    checks = read_run_json(run_dir).get("end_checks")
    recorded = checks.get("failed_levels") if isinstance(checks, dict) else None
    if isinstance(recorded, str):
        return recorded
    # at call time: pandas stays out of the commands that never read a run
    from ..analysis.levels.measure import measure_levels
    from ..analysis.series.failures import describe_problems, level_problems
    from ..run_format.load import analysis_columns, load_run

    run = load_run(run_dir, analysis_columns())
    problems = level_problems(measure_levels(run.requests, run.steps, run.streams))
    return describe_problems(problems) if problems else ""


def read_run_json(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {"outcome": "failed"}
    return data if isinstance(data, dict) else {"outcome": "failed"}
