"""`vllm-load demo` end to end: a stepped run against the simulator and its report."""

import glob
import json
import os
import re
import warnings

import pytest
from support.runhelpers import client_flags, run_vllm_load, skip_where_flagged

DEMO_ARGS = ("--levels", "2,8,16,32")
# a bound, not a tolerance: ~30 s on a quiet machine, 170 s beside other tests' load at a load
# average of ~28 on 2 cores (180 s timed out there under coverage)
DEMO_TIMEOUT = 420
# the levels where the simulator's 16-sequence batch fills: the saturation found, the peak and
# the diagnosis rest on their throughput, which a client that waited for a CPU holds back
BATCH_FULL = (16, 32)


def test_demo_writes_a_report_that_finds_the_simulators_saturation(tmp_path):
    os.chdir(tmp_path)
    first = run_vllm_load("demo", *DEMO_ARGS, timeout=DEMO_TIMEOUT)
    assert "users  achieved" in first.stdout and "Report: reports/demo-" in first.stdout
    (html,) = glob.glob("reports/demo-*.html")
    assert "Throughput vs concurrency" in open(html).read()
    (run_dir,) = glob.glob("runs/*/*/run.json")
    run_dir = os.path.dirname(run_dir)
    # no level's figures are said to disagree with the simulator's /metrics
    (demo_summary,) = glob.glob("reports/demo-*.summary.json")
    (run,) = json.loads(open(demo_summary).read())["runs"]
    server_levels = run["server_levels"]
    # a window the scrapes cannot resolve (on a loaded machine: gaps in scraping) is not judged and
    # says why; test_server_metrics checks that resolvable windows agree
    assert len(server_levels) == 4
    assert all(lv["comparable"] or lv["not_comparable_reason"] for lv in server_levels), (
        server_levels
    )
    # where the run found its own client late, its TTFT and in-flight count carry that lateness and
    # the report rightly says they differ (test_server_metrics holds the same rule); elsewhere none
    late = {lv["level"] for lv in run["client_levels"] if lv["client_late"] or lv["client_bound"]}
    flagged = {lv["level"] for lv in server_levels if lv["flagged"]}
    assert not flagged - late, (server_levels, run["client_levels"])
    if flagged:
        warnings.warn(
            f"/metrics agreement not held at the levels the run found its client late: {sorted(flagged)}"
        )
    else:
        assert "differ from the client" not in open(html).read()
    # a late level is said so under the table, with why; the client's headroom is printed (issue 46)
    for lv in run["client_levels"]:
        if lv["client_late"]:
            assert f"  {lv['value']:g} users: {lv['client_late_reason']}" in first.stdout, lv
    assert "Client headroom, each figure at its highest level: chunks merged in reads " in (
        first.stdout
    )
    # the throughput scaling names the ladder's own levels; TTFT growth at 32 users on 16
    # sequences is put down to the queue the simulator's /metrics show, with their figures
    (series,) = json.loads(open(demo_summary).read())["series"]
    findings = series["findings"]
    assert "Throughput scales" in " ".join(findings) and "not tested" not in " ".join(findings)
    # a finding that says requests wait names the queue figures it stands on, whenever it is made
    for ttft in (f for f in findings if f.startswith("TTFT p99 grows")):
        assert "vllm:request_queue_time_seconds" in ttft and "requests wait in its queue" in ttft
    text = open(html).read()
    # the client health never says "kept up" beside late levels (issue 35, Why 6)
    assert not ("the client kept up" in text and re.search(r"Client late at \d+ level", text))
    diagnosis = series["diagnosis"]
    assert diagnosis["server_facts"]["max_num_seqs"] == {"value": 16.0, "source": "given"}
    means = {lv["value"]: lv["total_tok_per_s_mean"] for lv in series["levels"]}
    peak = max(means.values())
    assert f"Headline:\n  Peak throughput: {peak:,.0f} tok/s." in first.stdout
    assert "Why it saturates: " in first.stdout
    # the shape of the findings follows the run's figures: held only where its client was on
    # time (two suites side by side, load ~6: no "TTFT p99 grows" finding was made)
    saturation = saturation_misses(series, first.stdout) + finding_misses(findings)
    if saturation:
        # held only where the run says its client was on time at the levels that fill the batch
        # (waited for no CPU, kept up): a miss there fails; a miss at a level it flagged is skipped
        # with the run's own flags and figures
        flagged = client_flags(run_dir)
        flags = {
            lv["value"]: why
            for lv in run["client_levels"]
            if (why := flagged.get(lv["level"])) and lv["value"] in BATCH_FULL
        }
        headroom = next(line for line in first.stdout.splitlines() if "Client headroom" in line)
        misses = f"{'; '.join(saturation)}; {headroom.strip()}"
        skip_where_flagged(misses, flags, f"the saturation checks at {BATCH_FULL} users")


def finding_misses(findings: list[str]) -> list[str]:
    """The findings the simulator's saturation makes on time that the demo's report lacks."""
    misses = []
    if not any(
        f.startswith("Throughput scales") and "from 2 to 32 concurrent" in f for f in findings
    ):
        misses.append("no finding 'Throughput scales ... from 2 to 32 concurrent'")
    if not any(f.startswith("TTFT p99 grows") for f in findings):
        misses.append("no finding 'TTFT p99 grows'")
    return misses


def saturation_misses(series: dict, stdout: str) -> list[str]:
    """What the simulator's saturation, as the demo finds it, got wrong (empty: all of it held).

    The simulator batches 16 sequences: 16 and 32 users are near the peak, 2 users far below it
    (three runs and their n = 3 intervals: test_campaign, which runs them the same way); why it
    saturates (issue 36) is the sequence cap of 16, which the demo gives as --server-args, in the
    JSON and under the printed table."""
    means = {lv["value"]: lv["total_tok_per_s_mean"] for lv in series["levels"]}
    misses = []
    if not means[2] < 0.3 * max(means.values()):
        misses.append(f"2 users at {means[2] / max(means.values()):.0%} of the peak, not < 30%")
    found = series["saturation"]["saturation_point"]
    if found is None or found["value"] not in BATCH_FULL:
        misses.append(f"saturation point {found and found['value']}, not in {BATCH_FULL}")
    diagnosis = series["diagnosis"]
    if diagnosis["kind"] != "max_num_seqs":
        misses.append(f"diagnosis {diagnosis['kind']}, not max_num_seqs")
    elif not (
        diagnosis["advice"][0]["flag"] == "--max-num-seqs"
        and diagnosis["advice"][0]["from"] == "16"
        and "--max-num-seqs 16 (given)" in stdout
    ):
        misses.append(f"advice {diagnosis['advice'][:1]}, not --max-num-seqs from 16 (given)")
    return misses


def test_the_demos_server_sends_each_stream_a_token_no_faster_than_the_client_reads_apart():
    # issue 46 item 4: at --time-scale 0.25 the simulator stepped every 2.5 ms and a shared 2-core
    # machine merged 40-96 % of the chunks in reads: every level client-late, every figure marked
    import argparse

    from vllm_load.cli import demo
    from vllm_load.sim import cli as sim_cli

    parser = argparse.ArgumentParser()
    sim_cli.configure_parser(parser, "sim")
    engine = sim_cli.build_config(parser.parse_args(list(demo.SIM_ARGS))).engine
    # the fastest step: decodes only, one sequence (each of a stream's tokens takes one step)
    fastest = engine.cost.seconds(0, 1) * engine.time_scale
    assert fastest >= 0.010, fastest
    # at the slower pace, still a whole wave of every level's users measured (fewer is flagged)
    levels = [int(v) for v in demo.DEMO_DEFAULTS["levels"].split(",")]
    assert demo.DEMO_DEFAULTS["requests_per_level"] >= max(levels)


def test_the_demos_simulator_yields_the_cpu_to_the_client(monkeypatch):
    # issue 46 item 4: the simulator shares the client's two cores; at the same priority the load
    # process waited behind its steps (run-queue wait past 100 ms/s marks a level client late)
    import argparse

    from vllm_load.cli import demo

    started = {}

    class Started(Exception):
        pass

    def simulator(*args, **kwargs):
        started.update(args=args, **kwargs)
        raise Started

    monkeypatch.setattr(demo, "SimulatorProcess", simulator)
    args = argparse.Namespace(sim_arg=["--max-num-seqs=32"])
    with pytest.raises(Started):
        demo.main(args)
    assert started["nice"] == demo.SIM_NICE >= 5
    assert started["args"] == (*demo.SIM_ARGS, "--max-num-seqs=32")
