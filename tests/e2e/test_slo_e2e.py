"""SLOs end to end: a run started with `--slo` against the simulator, and the report it gets.

The simulator's steps cost 1.67 ms plus 1.67 ms per sequence in the batch (and 20 us per prefill
token), and every user fits in one batch (`--max-num-seqs 64`): TPOT is about 3.3, 8, 75 and
100 ms at 1, 4, 48 and 64 users, while throughput still rises (48 users: ~590 tok/s against ~480
at 4, ~280 at 1). With `tpot<=25ms` the last level meeting the SLO is 4 users, where goodput
peaks, below the throughput peak. The levels that meet it do so by a factor of 3 and those that
miss it miss it by a factor of 3, so another test's load beside the run (a slower simulator, a
late read) moves no level across it: the run needs no machine of its own.
"""

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.runhelpers import only_run_dir, run_vllm_load
from support.shared_runs import shared_run

from vllm_load.sim.child import SimulatorProcess

SLO = "tpot<=25ms"


def run_with_an_slo(folder) -> None:
    """The run, started with --slo, and what it printed."""
    with SimulatorProcess(
        "--time-scale",
        "1",
        "--max-num-seqs",
        "64",
        "--step-base",
        "0.00167",
        "--decode-cost",
        "0.00167",
    ) as sim:
        done = run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--levels",
            "1,4,48,64",
            "--input-tokens",
            "64",
            "--output-tokens",
            "16",
            "--requests-per-level",
            "12",
            "--warmup-requests",
            "2",
            "--out",
            str(folder / "runs"),
            "--slo",
            SLO,
        )
    (folder / "stdout.txt").write_text(done.stdout, encoding="utf-8")


@pytest.fixture
def slo_run():
    """One run shared by the two tests below: the first checks what it printed and recorded, the
    second what its reports say (their HTML and a report's own --slo)."""
    return shared_run("slo-e2e", run_with_an_slo)


def test_a_run_with_an_slo_judges_its_levels_by_it(slo_run):
    # the run's own summary judges its levels against its SLO
    stdout = (slo_run / "stdout.txt").read_text(encoding="utf-8")
    assert "SLOs: a request is good when it succeeded with tpot<=25ms" in stdout
    with open(os.path.join(only_run_dir(slo_run / "runs"), "run.json"), encoding="utf-8") as fh:
        assert json.load(fh)["settings"]["slo"] == [SLO]


def test_a_latency_slo_binds_below_the_throughput_peak(slo_run, tmp_path):
    run_dir = only_run_dir(slo_run / "runs")
    out, again_out = str(tmp_path / "report.html"), str(tmp_path / "again.html")
    # no --slo on the report's command line: the run's own SLO is used; and a report's own --slo
    # replaces the run's (the two reports at once: each keeps a core busy)
    with ThreadPoolExecutor(2) as pool:
        reports = [
            pool.submit(run_vllm_load, "report", run_dir, "-o", out, "--quiet"),
            pool.submit(
                run_vllm_load, "report", run_dir, "-o", again_out, "--quiet", "--slo", "tpot<=400ms"
            ),
        ]
        for report in reports:
            report.result()
    with open(str(tmp_path / "report.summary.json"), encoding="utf-8") as fh:
        summary = json.load(fh)
    series = summary["series"][0]
    levels = {row["value"]: row for row in series["levels"]}
    assert [levels[u]["slo_met_mean"] for u in (1, 4, 48, 64)] == [1, 1, 0, 0], levels
    slo = series["slo"]
    assert slo["highest_level_meeting"]["mean"] == 4
    assert slo["goodput_peak_value"] == 4 < slo["throughput_peak_value"]
    assert slo["bound_by"].startswith(SLO) and slo["bound_by_missed"]
    assert levels[64]["goodput_req_per_s_mean"] < levels[4]["goodput_req_per_s_mean"]
    # with every request good, goodput is throughput; a request slowed past 25 ms by another
    # test's load beside the run is not good. The good share counts the level's measured
    # requests, goodput (as throughput) the work inside its window, so the two ratios can differ
    # by the requests crossing the window's two edges, measured or not: at most 4 at each, at 4
    # users (loaded: every measured request good, goodput 29.34 against 29.44 req/s)
    four = levels[4]
    share, goodput, rate = (
        four["slo_good_share_mean"],
        four["goodput_req_per_s_mean"],
        four["req_per_s_mean"],
    )
    # (summed over a subset, goodput can exceed the equal throughput in its last bits)
    assert share > 0.5 and goodput <= rate * (1 + 1e-12)
    assert abs(goodput / rate - share) <= 2 * 4 / four["measured_mean"], four
    assert series["findings"][0].startswith(
        "Highest concurrency meeting the SLOs (tpot<=25ms): 4 concurrent"
    )
    assert "bound by tpot<=25ms" in series["findings"][0]
    with open(out, encoding="utf-8") as fh:
        html = fh.read()
    assert 'id="chart-goodput"' in html and "bound by tpot&lt;=25ms" in html
    # the report with its own --slo
    with open(str(tmp_path / "again.summary.json"), encoding="utf-8") as fh:
        again = json.load(fh)["series"][0]["slo"]
    assert again["highest_level_meeting"]["mean"] == 64 and not again["bound_by_missed"]
