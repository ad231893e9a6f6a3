"""`vllm-load tune --slo ...` alone: the SLO-max search of one configuration, on the simulator
with room for 4 sequences (from a fifth user on, requests wait for a place in the batch)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

import pytest
from support.runhelpers import run_vllm_load

from vllm_load.analysis.decisions.slo_search import NONE_MET, Bounds, Probe, Step
from vllm_load.cli.tuning.slo_max import Level, Search, summarize
from vllm_load.cli.tuning.slo_max_state import SearchState
from vllm_load.sim.child import free_port
from vllm_load.slo import parse_slo


def _search(port: int, out, *extra: str) -> tuple[str, ...]:
    server = (
        f"{sys.executable} -m vllm_load sim --port {port} --max-num-seqs 4 --time-scale 0.2 "
        "--seed 1"
    )
    return (
        "tune",
        "--slo",
        "e2e_p90<=175ms",
        "--server-cmd",
        server,
        "--host",
        f"http://127.0.0.1:{port}",
        "--input-tokens",
        "64",
        "--output-tokens",
        "64",
        "--requests-per-level",
        "20",
        "--warmup-requests",
        "4",
        "--max-level",
        "64",
        "--ready-timeout",
        "30",
        "--out",
        str(out),
        *extra,
    )


@pytest.mark.slow
def test_the_search_finds_where_the_batch_is_full_and_resumes(tmp_path):
    port = free_port()
    # a budget of 3 levels first: 1, 2, then the growth; it stops there with its bracket
    first = run_vllm_load(*_search(port, tmp_path, "--max-levels", "3"), timeout=300)
    state = json.loads((tmp_path / "slo-max" / "slo_max.json").read_text())
    assert [lv["level"] for lv in state["levels"]][:2] == [1.0, 2.0]
    assert state["result"]["status"] == "budget" and state["result"]["levels_run"] == 3
    assert "raise --max-levels" in first.stdout.strip().splitlines()[-1]
    # the same command with a larger budget carries on: no finished level runs again
    again = run_vllm_load(*_search(port, tmp_path), timeout=400)
    assert "resuming: 3 levels already measured" in again.stdout
    state = json.loads((tmp_path / "slo-max" / "slo_max.json").read_text())
    levels = [lv["level"] for lv in state["levels"]]
    assert len(levels) == len(set(levels))  # no level measured twice
    result = state["result"]
    assert result["status"] == "converged"
    low, high = result["bracket"]
    # 4 users fill the batch (E2E p90 ~150 ms measured); from 5, requests wait for a place
    # (~200 ms at 5, ~280 ms at 8); the machine's load moves the measured p90 a little
    assert 3 <= low <= 6 and high <= max(low + 1, 1.05 * low)
    assert result["levels_run"] == len(levels) <= 12
    last = again.stdout.strip().splitlines()[-1]
    assert last.startswith(f"SLO-max {low:g} users for e2e_p90<=175ms") and "levels run" in last
    table = (tmp_path / "slo-max" / "slo_max.md").read_text()
    assert "e2e_p90<=175ms" in table and result["line"] in table


def test_a_server_that_does_not_start_is_one_line_and_exit_1(tmp_path):
    port = free_port()
    done = run_vllm_load(
        "tune",
        "--slo",
        "e2e_p99<=1s",
        "--server-cmd",
        f"{sys.executable} -c 'import sys; sys.exit(3)'",
        "--host",
        f"http://127.0.0.1:{port}",
        "--ready-timeout",
        "20",
        "--out",
        str(tmp_path),
        expect=1,
    )
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "server" in lines[0] and "run the same command again" in lines[0]


def test_bad_bounds_are_one_line_and_exit_2(tmp_path):
    search = (
        "tune",
        "--slo",
        "e2e_p99<=1s",
        "--host",
        "http://127.0.0.1:9",
        "--out",
        str(tmp_path),
    )
    done = run_vllm_load(*search, "--min-level", "8", "--max-level", "4", expect=2)
    assert "--min-level 8 and --max-level 4" in done.stderr
    done = run_vllm_load(*search, "--runs", "3", expect=2)
    assert "leave out --runs" in done.stderr


def _level(level: float, estimate: float, verdict: str) -> Level:
    item = {"item": "e2e_p99<=100ms", "limit": 0.1, "estimate": estimate, "low": 0.0}
    return Level(level, f"runs/{level:g}", [{**item, "high": math.inf}], verdict)


def test_no_level_meeting_the_slo_says_so_with_the_lowest_levels_figures():
    lowest = _level(1.0, 0.25, "fails")
    step = Step(NONE_MET, None, None, Probe(1.0, (2.5,)))
    result = summarize(step, [lowest], parse_slo("e2e_p99<=100ms"), "users")
    assert result["slo_max"] is None and result["status"] == NONE_MET
    assert result["line"].startswith("no level meets the SLO (e2e_p99<=100ms): at the lowest, 1")
    assert "250 ms" in result["line"]


def test_a_slo_max_whose_interval_straddles_the_limit_says_so():
    levels = [_level(4.0, 0.05, "holds"), _level(8.0, 0.09, "straddles"), _level(9.0, 0.2, "fails")]
    step = Step("converged", None, levels[1].probe, levels[2].probe)
    result = summarize(step, levels, parse_slo("e2e_p99<=100ms"), "users")
    assert result["slo_max"] == 8.0 and result["proven_up_to"] == 4.0
    assert (
        "At 8 the SLO straddles" in result["line"] and "proven to hold: 4 users" in result["line"]
    )


class _LateSearch(Search):
    """A search whose levels are given, in order, instead of run: (level, estimate, late)."""

    def __init__(self, directory, measured: list[tuple[float, float, str]]):
        args = argparse.Namespace(name="slo-max", server_cmd=None)
        super().__init__(args, str(directory), SearchState({"slo": "e2e_p99<=100ms"}))
        self.measured, self.asked = list(measured), []

    def measure(self, level: float, unit: str) -> Level:
        self.asked.append(level)
        at = next((i for i, m in enumerate(self.measured) if m[0] == level), None)
        # a level not given meets the SLO on time (where the search's growth lands is its own)
        _, estimate, late = self.measured.pop(at) if at is not None else (level, 0.05, "")
        verdict = "holds" if estimate <= 0.1 else "fails"
        return dataclasses.replace(_level(level, estimate, verdict), late=late)


def test_a_miss_while_the_client_was_late_is_measured_again_not_taken(tmp_path):
    late = "run-queue wait 533 ms/s > 100 ms/s"
    # 2 users missed only while the client was late; measured again on time, they meet it
    search = _LateSearch(tmp_path, [(1.0, 0.05, ""), (2.0, 0.3, late), (2.0, 0.08, "")])
    step = search.run(Bounds(1.0, 2.0, 4), "users")
    assert search.asked == [1.0, 2.0, 2.0]
    assert [(lv.level, lv.late) for lv in search.state.levels] == [(1.0, ""), (2.0, "")]
    # the late run is a level run spent (the guided search's budget counts it), not evidence
    assert [lv.runs for lv in search.state.levels] == [1, 2]
    assert search.state.levels[1].late_runs == ["runs/2"]
    assert step.status == "max_met" and step.low is not None and step.low.level == 2.0
    # a late level that met the SLO is taken as it is: the delay only made it look slower
    search = _LateSearch(tmp_path, [(1.0, 0.05, late), (2.0, 0.3, "")])
    step = search.run(Bounds(1.0, 2.0, 4), "users")
    assert search.asked == [1.0, 2.0] and step.low is not None and step.low.level == 1.0


def test_a_miss_late_twice_is_taken_and_the_line_says_the_client_was_late(tmp_path):
    late = "run-queue wait 124 ms/s > 100 ms/s"
    # a real vLLM at --max-num-seqs 4: 7 users met, 8 missed twice while the client was late;
    # the levels that met stand (failing the search there dropped them)
    search = _LateSearch(tmp_path, [(8.0, 0.3, late), (8.0, 0.25, late)])
    step = search.run(Bounds(1.0, 8.0, 12), "users")
    assert search.asked.count(8.0) == 2 and step.status == "converged"
    assert step.low is not None and step.low.level == 7.0 and step.high is not None
    top = next(lv for lv in search.state.levels if lv.level == 8.0)
    assert (top.level, top.late, top.runs) == (8.0, late, 2)
    result = summarize(step, search.state.levels, parse_slo("e2e_p99<=100ms"), "users")
    assert result["slo_max"] == 7.0
    assert (
        "miss at 8 was measured twice while the client was late (run-queue wait 124"
        in (result["line"])
    )
