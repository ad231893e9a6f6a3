"""Levels where the client was late: their TTFT and ITL are marked wherever they are shown
(terminal table, report), and validate-client does not call such a run's client proven."""

from __future__ import annotations

import math

import pandas as pd

from vllm_load.analysis.levels.table import LATE_MARK, format_level_table
from vllm_load.figures import REPORT, level_figures, shown_in


def _metrics() -> pd.DataFrame:
    row = {f.key: 1.0 for f in level_figures()}
    frame = pd.DataFrame([{**row, "level": i, "users": u} for i, u in enumerate((1, 2, 4))])
    frame["itl_p99"] = [0.02, 0.0, 0.0]  # the merged reads' zero gaps
    frame["measured"] = 100.0  # whole waves of their users: nothing else is marked
    return frame


def _cells(line: str, header: str, table: str) -> str:
    head = table.splitlines()[0]
    start = head.index(header)
    return line[start - 2 : start + len(header)].strip()  # right-justified under its header


def test_the_terminal_table_marks_late_levels_ttft_and_itl_and_says_why():
    text = format_level_table(_metrics(), {1: "62% of chunks merged in reads > 5%"})
    lines = text.splitlines()
    late_row, ok_row = lines[3], lines[2]
    assert _cells(late_row, "ITL p99 ms", text) == "0.00" + LATE_MARK
    assert _cells(late_row, "TTFT p50 ms", text).endswith(LATE_MARK)
    assert not _cells(ok_row, "ITL p99 ms", text).endswith(LATE_MARK)
    assert not _cells(late_row, "E2E p50 s", text).endswith(
        LATE_MARK
    )  # only what a late read dates
    assert lines[5].startswith(LATE_MARK + " client late: TTFT and ITL not trustworthy")
    assert lines[6].strip() == "2 users: 62% of chunks merged in reads > 5%"
    assert len({len(line) for line in lines[:5]}) == 1  # still fixed width


def test_an_unmarked_table_is_as_before():
    text = format_level_table(_metrics())
    assert LATE_MARK not in text and len(text.splitlines()) == 5
    assert format_level_table(_metrics(), {}) == text


def _late_synthetic_run(base) -> str:
    """A synthetic run whose second level (50 users) had every chunk merged in reads."""
    from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run

    run = write_synthetic_run(
        str(base),
        SyntheticRun(
            model="synthetic/m",
            seed=1,
            levels=(10, 50, 100),
            requests_per_level=40,
            warmup_requests=4,
            output_tokens=32,
        ),
    )
    requests = pd.read_csv(f"{run}/requests.csv")
    requests.loc[requests["level"] == 1, "chunks_merged"] = requests["n_chunks"]
    requests.to_csv(f"{run}/requests.csv", index=False)
    return run


def test_the_report_marks_late_levels_and_its_summary_carries_them(tmp_path):
    import json

    from vllm_load.report.render import build_report

    run = _late_synthetic_run(tmp_path)
    paths = build_report([run], str(tmp_path / "r.html"), progress=False)
    html, markdown = open(paths.html).read(), open(paths.markdown).read()
    reason = "100% of chunks merged in reads &gt; 5%"
    # per-run table: the 50-user row's 12 TTFT/ITL/TPOT cells; across-runs table (HTML and
    # Markdown alike): its cells of every figure dated by reads; legends name it
    read_timed = sum(f.read_timed for f in shown_in(REPORT) if not f.only_with)
    assert read_timed == 5  # TTFT p50, p99, ITL p50, p99, TPOT p50
    assert html.count('<span class="late"') == 12 + read_timed
    assert f"50 users ({reason})" in html and "Client late at 1 level(s)" in html
    assert markdown.count(" †") == read_timed and "- 50 users: run " in markdown
    summary = json.load(open(paths.json))
    levels = summary["runs"][0]["levels"]
    assert [lv["client_late"] for lv in levels] == [False, True, False]
    assert levels[1]["client_late_reason"] == "100% of chunks merged in reads > 5%"
    assert [lv["client_late"] for lv in summary["series"][0]["levels"]] == [False, True, False]
    # and the key findings say so, naming the level
    assert any(
        f.startswith("The client was late at 1 of 3 level(s) (50 concurrent)")
        for f in summary["series"][0]["findings"]
    ), summary["series"][0]["findings"]
    rows = [
        r
        for r in open(paths.csv).read().splitlines()
        if ",client_late," in r and r.startswith("run,")
    ]
    assert [r.rsplit(",", 1)[1] for r in rows] == ["False", "True", "False"]


def test_a_run_without_the_new_columns_reports_no_late_level(tmp_path):
    import json

    from vllm_load.report.render import build_report

    run = _late_synthetic_run(tmp_path)
    requests = pd.read_csv(f"{run}/requests.csv").drop(
        columns="chunks_merged"
    )  # as written before the column
    requests.to_csv(f"{run}/requests.csv", index=False)
    paths = build_report([run], str(tmp_path / "r.html"), progress=False)
    assert '<span class="late"' not in open(paths.html).read()
    assert not any(lv["client_late"] for lv in json.load(open(paths.json))["runs"][0]["levels"])


def test_judge_is_not_proven_when_the_run_itself_was_client_late_or_bound():
    from vllm_load.cli.validate_client import EchoLevel, judge

    echo = [EchoLevel(100, 99.0, 1000.0, 1e5, 1e5, 5.0, 10.0, 15.0, 1.0)]
    assert judge(echo, 50, 2, 10.0, 100.0, []).proven
    late = judge(
        echo, 50, 2, 10.0, 100.0, ["4 users: client-late (run-queue wait 1,740 ms/s > 100 ms/s)"]
    )
    assert not late.proven and late.run_health == [
        "4 users: client-late (run-queue wait 1,740 ms/s > 100 ms/s)"
    ]
    assert late.reasons == [
        "the run's own health: 4 users: client-late (run-queue wait 1,740 ms/s > 100 ms/s)"
    ]


def _validate_against(tmp_path, run, capsys, monkeypatch):
    """validate-client --run RUN, with a healthy synthetic run standing in for its echo run."""
    import argparse
    import json

    from vllm_load.cli import validate_client
    from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run

    echo = write_synthetic_run(
        str(tmp_path / "echo"),
        SyntheticRun(model="echo", seed=7, levels=(10,), requests_per_level=40, warmup_requests=4),
    )
    monkeypatch.setattr(validate_client, "_echo_run", lambda _args, _host: echo)
    parser = argparse.ArgumentParser()
    validate_client.configure_parser(parser, "validate-client")
    args = parser.parse_args(
        [
            "--host",
            "http://echo.invalid",
            "--levels",
            "10",
            "--run",
            run,
            "--max-p50-ms",
            "1e9",
            "--min-margin",
            "1e-9",
        ]
    )
    validate_client.main(args)
    return capsys.readouterr().out, json.load(open(f"{run}/client_validation.json"))


def test_validate_client_never_proves_a_run_its_own_health_marked(tmp_path, capsys, monkeypatch):
    from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run

    healthy = write_synthetic_run(
        str(tmp_path / "ok"),
        SyntheticRun(
            model="synthetic/m", seed=2, levels=(10, 50), requests_per_level=40, warmup_requests=4
        ),
    )
    out, result = _validate_against(tmp_path, healthy, capsys, monkeypatch)
    assert "NOT the bottleneck (proven)" in out and result["proven"]

    late = _late_synthetic_run(tmp_path / "late")
    out, result = _validate_against(tmp_path, late, capsys, monkeypatch)
    assert "(proven)" not in out and "NOT proven" in out and not result["proven"]
    assert (
        "the run's own health: 50 users: client-late (100% of chunks merged in reads > 5%)" in out
    )
    assert result["run_health"] == ["50 users: client-late (100% of chunks merged in reads > 5%)"]


def test_validate_client_never_proves_a_run_its_own_health_marked_client_bound(
    tmp_path, capsys, monkeypatch
):
    from vllm_load.analysis.levels.measure import level_metrics
    from vllm_load.run_format.load import load_run
    from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run

    run = write_synthetic_run(
        str(tmp_path / "bound"),
        SyntheticRun(
            model="synthetic/m", seed=3, levels=(10, 50), requests_per_level=40, warmup_requests=4
        ),
    )
    data = load_run(run)
    window = level_metrics(data.requests, data.steps)[["window_start", "window_end"]].to_numpy()
    mid = [(a + b) / 2 for a, b in window]
    pd.DataFrame(
        {
            "ts": mid,
            "worker": ["local"] * 2,
            "level": [0, 1],
            "cpu_percent": [30.0, 97.0],
            "loop_lag_mean_ms": [1.0, 2.0],
            "loop_lag_max_ms": [2.0, 4.0],
            "rss_mib": [60.0, 61.0],
            "runqueue_wait_ms_per_s": [2.0, 3.0],
        }
    ).to_csv(f"{run}/client_health.csv", index=False)
    out, result = _validate_against(tmp_path, run, capsys, monkeypatch)
    assert "(proven)" not in out and not result["proven"]
    assert result["run_health"] == ["50 users: possibly client-bound (CPU 97% > 80%)"]
    assert not math.isnan(mid[1])


def test_a_run_writes_chunks_merged_and_run_queue_wait(tmp_path):
    """End to end against the simulator at 20 ms between tokens: every row has `chunks_merged`,
    every health sample of a second or so a run-queue wait (on Linux)."""
    import os

    from support.runhelpers import load_run_files, only_run_dir, run_vllm_load

    from vllm_load.sim.child import SimulatorProcess

    with SimulatorProcess("--ttft", "0.05", "--itl", "0.02") as sim:
        run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--levels",
            "2,4",
            "--input-tokens",
            "64",
            "--output-tokens",
            "16",
            "--requests-per-level",
            "8",
            "--warmup-requests",
            "2",
            "--out",
            str(tmp_path),
        )
    run_dir = only_run_dir(tmp_path)
    requests, *_ = load_run_files(run_dir)
    assert requests["chunks_merged"].notna().all() and (requests["chunks_merged"] >= 0).all()
    assert (requests["chunks_merged"] <= requests["n_chunks"]).all()
    health = pd.read_csv(os.path.join(run_dir, "client_health.csv"))
    assert "runqueue_wait_ms_per_s" in health
    if os.path.exists("/proc/thread-self/schedstat"):
        waits = health["runqueue_wait_ms_per_s"].dropna()
        assert len(waits) and (waits >= 0).all() and (waits <= 1000.5).all()


def test_a_run_whose_chunks_all_came_at_once_prints_its_latencies_marked(tmp_path):
    """An echo server sends a whole response at once: no chunk can be dated apart, and the
    table `vllm-load run` prints must not show the zero ITL as a measurement."""
    from support.runhelpers import load_run_files, only_run_dir, run_vllm_load

    from vllm_load.sim.child import SimulatorProcess

    with SimulatorProcess("--echo") as sim:
        done = run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--levels",
            "2",
            "--input-tokens",
            "64",
            "--output-tokens",
            "16",
            "--requests-per-level",
            "20",
            "--warmup-requests",
            "2",
            "--out",
            str(tmp_path),
        )
    requests, *_ = load_run_files(only_run_dir(tmp_path))
    assert requests["chunks_merged"].sum() > 0.5 * requests["n_chunks"].sum()
    table = done.stdout[done.stdout.index("users  achieved") :]
    row = table.splitlines()[2]
    assert row.count(LATE_MARK) == 3  # TTFT p50, TTFT p99, ITL p99
    assert f"{LATE_MARK} client late: TTFT and ITL not trustworthy" in table
    assert "2 users: " in table and "of chunks merged in reads > 5%" in table


def test_a_merged_share_just_over_the_limit_reads_over_it():
    """5.1 % merged against the 5 % limit reads "5.1%", never "5% > 5%"; the same for the
    run-queue wait, the CPU and the loop lag against theirs."""
    from vllm_load.analysis.levels.client_side import level_client_health

    metrics = pd.DataFrame(
        {"level": [0], "users": [4], "window_start": [0.0], "window_end": [10.0]}
    )
    requests = pd.DataFrame(
        {"level": [0], "ok": [1], "end_ts": [5.0], "n_chunks": [1000], "chunks_merged": [51]}
    )
    health = pd.DataFrame(
        {
            "ts": [5.0],
            "level": [0],
            "worker": ["local"],
            "cpu_percent": [80.3],
            "loop_lag_mean_ms": [10.04],
            "runqueue_wait_ms_per_s": [100.4],
        }
    )
    (row,) = level_client_health(health, metrics, requests).to_dict("records")
    assert row["client_late_reason"] == (
        "5.1% of chunks merged in reads > 5%; run-queue wait 100.4 ms/s > 100 ms/s"
    )
    assert row["reason"] == "CPU 80.3% > 80%; loop lag 10.04 ms > 10 ms"


def test_the_headroom_says_each_figure_at_its_highest_level_against_its_limit():
    # issue 46.4: a demo on time says by how much; one late says by how much too
    from vllm_load.analysis.levels.client_side import headroom_text

    levels = pd.DataFrame(
        {
            "value": [2.0, 32.0],
            "merged_share": [0.01, 0.021],
            "runqueue_wait_ms_per_s_max": [30.0, 12.0],
            "cpu_percent_max": [float("nan")] * 2,  # no client_health.csv: not said
        }
    )
    assert headroom_text(levels) == (
        "Client headroom, each figure at its highest level: chunks merged in reads 2.1% "
        "(32 users; late above 5%), run-queue wait 30.0 ms/s (2 users; late above 100 ms/s)."
    )
    assert headroom_text(None) == "" and headroom_text(levels.iloc[:0]) == ""
