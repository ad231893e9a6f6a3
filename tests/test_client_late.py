"""Levels where the client was late: their TTFT and ITL are marked wherever they are shown
(terminal table, report), and validate-client does not call such a run's client proven."""

from __future__ import annotations

import math

import pandas as pd

from vllm_load.analysis.levels import LATE_MARK, TABLE_COLUMNS, format_level_table


def _metrics() -> pd.DataFrame:
    row = {col: 1.0 for _, col, _, _ in TABLE_COLUMNS}
    frame = pd.DataFrame([{**row, "level": i, "users": u} for i, u in enumerate((1, 2, 4))])
    frame["itl_p99"] = [0.02, 0.0, 0.0]  # the merged reads' zero gaps
    return frame


def _cells(line: str, header: str, table: str) -> str:
    head = table.splitlines()[0]
    start = head.index(header)
    return line[start - 2: start + len(header)].strip()  # right-justified under its header


def test_the_terminal_table_marks_late_levels_ttft_and_itl_and_says_why():
    text = format_level_table(_metrics(), {1: "62% of chunks merged in reads > 5%"})
    lines = text.splitlines()
    late_row, ok_row = lines[3], lines[2]
    assert _cells(late_row, "ITL p99 ms", text) == "0.00" + LATE_MARK
    assert _cells(late_row, "TTFT p50 ms", text).endswith(LATE_MARK)
    assert not _cells(ok_row, "ITL p99 ms", text).endswith(LATE_MARK)
    assert not _cells(late_row, "E2E p50 s", text).endswith(LATE_MARK)  # only what a late read dates
    assert lines[5].startswith(LATE_MARK + " client late: TTFT and ITL not trustworthy")
    assert lines[6].strip() == "2 users: 62% of chunks merged in reads > 5%"
    assert len({len(line) for line in lines[:5]}) == 1  # still fixed width


def test_an_unmarked_table_is_as_before():
    text = format_level_table(_metrics())
    assert LATE_MARK not in text and len(text.splitlines()) == 5
    assert format_level_table(_metrics(), {}) == text


def _late_synthetic_run(base) -> str:
    """A synthetic run whose second level (50 users) had every chunk merged in reads."""
    from vllm_load.analysis.synthetic import SyntheticRun, write_synthetic_run

    run = write_synthetic_run(str(base), SyntheticRun(model="synthetic/m", seed=1, levels=(10, 50, 100),
                                                      requests_per_level=40, warmup_requests=4, output_tokens=32))
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
    # per-run table: the 50-user row's 12 TTFT/ITL/TPOT cells; across-runs table: its 5; legends name it
    assert html.count('<span class="late"') == 12 + 5
    assert f"50 users ({reason})" in html and "Client late at 1 level(s)" in html
    assert markdown.count(" †") == 3 and "- 50 users: run " in markdown
    summary = json.load(open(paths.json))
    levels = summary["runs"][0]["levels"]
    assert [lv["client_late"] for lv in levels] == [False, True, False]
    assert levels[1]["client_late_reason"] == "100% of chunks merged in reads > 5%"
    assert [lv["client_late"] for lv in summary["series"][0]["levels"]] == [False, True, False]
    rows = [r for r in open(paths.csv).read().splitlines() if ",client_late," in r and r.startswith("run,")]
    assert [r.rsplit(",", 1)[1] for r in rows] == ["False", "True", "False"]


def test_a_run_without_the_new_columns_reports_no_late_level(tmp_path):
    import json

    from vllm_load.report.render import build_report

    run = _late_synthetic_run(tmp_path)
    requests = pd.read_csv(f"{run}/requests.csv").drop(columns="chunks_merged")  # as written before the column
    requests.to_csv(f"{run}/requests.csv", index=False)
    paths = build_report([run], str(tmp_path / "r.html"), progress=False)
    assert '<span class="late"' not in open(paths.html).read()
    assert not any(lv["client_late"] for lv in json.load(open(paths.json))["runs"][0]["levels"])
