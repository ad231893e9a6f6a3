"""--stop-when end to end (issue 48 item 3): a tiny ladder against the simulator, half of whose
requests fail (`--fault-error-rate 0.5`), stopped by `failed>20%` in its first level. The
rules themselves are tested on synthetic requests in tests/run/test_stop_rules.py."""

from __future__ import annotations

import json
import os

import pandas as pd
from support.runhelpers import only_run_dir, run_vllm_load

from vllm_load.analysis.levels.measure import measure_levels
from vllm_load.analysis.series.outcome import outcome_of
from vllm_load.run.outcomes import EXIT_CODES
from vllm_load.run_format.load import analysis_columns, load_run
from vllm_load.sim.child import SimulatorProcess


def test_a_rule_that_trips_ends_the_ladder_and_says_so(tmp_path):
    # a success takes ~1.3 s (a failure is at once): the level's failures decide its share while
    # its last measured request still runs, and the shape (a tick every 0.2 s) sees it then
    with SimulatorProcess("--fault-error-rate", "0.5", "--seed", "3", "--time-scale", "16") as sim:
        done = run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--levels",
            "1,2,3",
            "--requests-per-level",
            "6",
            "--warmup-requests",
            "1",
            "--input-tokens",
            "32",
            "--output-tokens",
            "8",
            "--metrics-interval",
            "0",
            "--out",
            str(tmp_path),
            "--stop-when",
            "failed>20%, ttft_p99>60s",
            expect=EXIT_CODES["stopped"],
        )
    run_dir = only_run_dir(tmp_path)
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as fh:
        run = json.load(fh)
    assert run["outcome"] == "stopped"
    assert run["settings"]["stop_when"] == ["failed>20%", "ttft_p99>60s"]
    stopped = run["stopped_by"]
    assert (stopped["rule"], stopped["level"], stopped["figure"], stopped["cut"]) == (
        "failed>20%",
        0,
        "failed",
        True,
    )
    assert stopped["load"] == "1 users" and stopped["limit"] == 0.2
    # decided while the level ran: more than 20 % of its 6 measured requests, 2 of them
    assert stopped["value"] * 6 >= 2 and "measured requests had failed" in stopped["detail"]
    # the ladder ended at the level that tripped, cut there; no later level ran
    steps = pd.read_csv(os.path.join(run_dir, "steps.csv"))
    assert list(steps["level"]) == [0] and list(steps["stop_reason"]) == ["stop_when"]
    # the summary, the exit line and the report's findings name the rule, its level and figure
    line = stopped["line"]
    assert line.startswith("--stop-when failed>20% tripped at level 0 (1 users) while it ran")
    assert f"Stopped early: {line}" in done.stdout
    assert f"vllm-load run: {line}" in done.stderr and "(exit 7)" in done.stderr
    data = load_run(run_dir, analysis_columns())
    sentences = outcome_of(data).sentences()
    assert any(
        f"was stopped early ({line})" in s and "2, 3 concurrent never ran" in s for s in sentences
    ), sentences
    # the level is measured as far as it ran: its failures are at least those that tripped it
    level = measure_levels(data.requests, data.steps, data.streams).metrics.iloc[0]
    assert level["failed"] >= round(stopped["value"] * 6)
    assert level["measured"] <= 6
