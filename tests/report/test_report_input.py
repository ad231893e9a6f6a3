"""A run directory whose files are not what they claim: refused in one line naming the file, or
analysed over what is sound with the report saying what it left out (run_format/checks.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from vllm_load.report.render import build_report
from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run


def small_run(base) -> str:
    return write_synthetic_run(
        str(base), SyntheticRun(levels=(4, 8), requests_per_level=40, warmup_requests=4)
    )


def rows(run: str) -> pd.DataFrame:
    return pd.read_csv(f"{run}/requests.csv", dtype=str, keep_default_na=False)


def write_rows(run: str, frame: pd.DataFrame) -> None:
    frame.to_csv(f"{run}/requests.csv", index=False)


def edit_run_json(run: str, change) -> None:
    with open(f"{run}/run.json") as fh:
        info = json.load(fh)
    change(info)
    with open(f"{run}/run.json", "w") as fh:
        json.dump(info, fh)


def report(run: str, tmp_path):
    paths = build_report([run], str(tmp_path / "r.html"), progress=False)
    summary = json.loads(open(paths.json).read())
    return paths, summary


def test_a_last_row_cut_short_is_left_out_and_said_not_counted_as_a_failure(tmp_path):
    """A run killed while writing a row: the half row was a failed request ("0.8 % failed" for a
    run that had none). Rows are in arrival order, so the cut one may be a measured request."""
    run = small_run(tmp_path / "runs")
    frame = rows(run)
    measured = frame.index[15]  # level 0, after its 4 warm-up requests: a measured one
    cut_id = frame.at[measured, "request_id"]
    write_rows(run, pd.concat([frame.drop(index=measured), frame.loc[[measured]]]))
    text = open(f"{run}/requests.csv").read()
    cut = text.rindex(cut_id) + text[text.rindex(cut_id) :].index(",0,,")  # before n_chunks...ok
    open(f"{run}/requests.csv", "w").write(text[:cut])
    paths, summary = report(run, tmp_path)
    assert all(level["success_rate"] == 1.0 for level in summary["runs"][0]["levels"])
    assert all(level["failed"] == 0 for level in summary["runs"][0]["levels"])
    said = f"requests.csv ends inside a row (request {cut_id})"
    (first,) = [f for f in summary["series"][0]["findings"] if "requests.csv" in f]
    assert said in first and "left out" in first
    assert said in summary["runs"][0]["input_notes"][0]
    assert said in open(paths.markdown).read()
    assert "Left out of this run's files: " in open(paths.html).read()
    assert paths.notes and said in paths.notes[0]


def test_a_cut_inside_a_quoted_message_and_missing_rows_are_said(tmp_path):
    run = small_run(tmp_path / "runs")
    frame = rows(run)
    last = frame.index[-1]
    frame.loc[last, ["ok", "status", "error"]] = ["0", "500", "http_status"]
    frame.loc[last, "error_message"] = "HTTP 500: one line\nand, a second"
    write_rows(run, frame)
    text = open(f"{run}/requests.csv").read()
    open(f"{run}/requests.csv", "w").write(text[: text.index("and, a")])
    _, summary = report(run, tmp_path)
    (note,) = summary["runs"][0]["input_notes"]  # every whole row read: none missing
    assert "requests.csv ends inside a row" in note
    assert sum(level["failed"] for level in summary["runs"][0]["levels"]) == 0

    run = small_run(tmp_path / "more")
    write_rows(run, rows(run).iloc[:-10])
    _, summary = report(run, tmp_path)
    (note,) = summary["runs"][0]["input_notes"]
    assert f"holds {len(rows(run))} of the {len(rows(run)) + 10} rows run.json recorded" in note
    assert "10 are missing" in note


def _duplicated(run):
    frame = rows(run)
    write_rows(run, pd.concat([frame, frame]))


def _appended_by_another_run(run):
    frame = rows(run)
    extra = frame.iloc[:5].copy()
    extra["request_id"] = "ffff-" + extra["request_id"]
    write_rows(run, pd.concat([frame, extra]))


def _value(column, value, row=5):
    def damage(run):
        frame = rows(run)
        frame.loc[row, column] = value
        write_rows(run, frame)

    return damage


def _text(text):
    def damage(run):
        with open(f"{run}/requests.csv", "w") as fh:
            fh.write(text)

    return damage


def _header_only(run):
    write_rows(run, rows(run).iloc[:0])


def _missing(run):
    import os

    os.remove(f"{run}/requests.csv")


def _run_json(text):
    def damage(run):
        with open(f"{run}/run.json", "w") as fh:
            fh.write(text)

    return damage


@pytest.mark.parametrize(
    "damage, message",
    [
        (_text(""), r"requests.csv is empty"),
        (_missing, r"requests.csv is missing"),
        (_text("hello world\n\x01 garbage\n"), r"not a requests.csv \(its header"),
        (_header_only, r"requests.csv holds no rows but run.json recorded \d+"),
        (_duplicated, r"request id 0-1 appears 2 times .*would count twice"),
        (_appended_by_another_run, r"holds \d+ rows but run.json recorded \d+ when the run ended"),
        (_value("e2e", "-1.5"), r"row 6 \(request 0-6\): e2e is -1.5 but must be finite"),
        (_value("ttft", "nan"), r"row 6 \(request 0-6\): ttft is empty or NaN"),
        (_value("e2e", "inf"), r"row 6 \(request 0-6\): e2e is inf but must be finite"),
        (_value("completion_tokens", "-3"), r"completion_tokens is -3 but must be finite"),
        (_value("e2e", "1.2.3"), r"row 6: e2e is '1.2.3', not a number"),
        (_value("ok", "2"), r"ok is 2 but must be 0 or 1"),
        (_run_json("{}"), r"run.json has no format and settings"),
        (_run_json("[1, 2]"), r"run.json is a list, not a run record"),
        (_run_json('{"format": 1, "settings": "x"}'), r"run.json: settings is a string"),
        (
            _run_json('{"format": 1, "settings": {"levels": "4,8"}}'),
            r"settings.levels is a string .*not a list of integers",
        ),
        (_run_json('{"format": 1, "settings": {}, "requests_recorded": "104"}'), "an integer"),
    ],
)
def test_input_that_is_not_what_it_claims_is_refused_naming_the_file(tmp_path, damage, message):
    run = small_run(tmp_path / "runs")
    damage(run)
    with pytest.raises(ValueError, match=message) as refused:
        build_report([run], str(tmp_path / "r.html"), progress=False)
    assert run in str(refused.value) and "\n" not in str(refused.value)


def test_the_cli_refuses_in_one_line_without_a_traceback(tmp_path):
    run = small_run(tmp_path / "runs")
    edit_run_json(run, lambda info: info.update(settings="oops"))
    done = subprocess.run(
        [sys.executable, "-m", "vllm_load", "report", run, "-o", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"{run}/run.json: settings is a string" in line


def test_an_optional_file_s_bad_lines_are_skipped_and_counted(tmp_path):
    run = small_run(tmp_path / "runs")
    start = float(rows(run)["start_ts"].astype(float).min())
    lines = [f"{start + i},{i % 3},0,{100 * i}" for i in range(60)]
    lines[7] = f"{start + 7},1,0,700,stray"  # one field too many
    lines[9] = f"{start + 9},busy,0,900"  # not a number
    with open(f"{run}/server_metrics.csv", "w") as fh:
        fh.write("ts,running,waiting,generation_tokens_total\n" + "\n".join(lines) + "\n")
    with open(f"{run}/client_health.csv", "w") as fh:
        fh.write("when,who\n1,local\n")  # not client_health.csv's header
    paths, summary = report(run, tmp_path)
    notes = summary["runs"][0]["input_notes"]
    assert any("server_metrics.csv: 2 bad line(s) skipped (the first, line 9" in n for n in notes)
    assert any("client_health.csv does not have the columns" in n for n in notes)
    assert summary["runs"][0]["server_levels"] is not None  # the sound lines were used
    findings = " ".join(summary["series"][0]["findings"])
    assert "server_metrics.csv: 2 bad line(s) skipped" in findings


def test_a_report_on_a_cut_file_is_written_warned_at_its_top_and_exits_2(tmp_path, capsys):
    """Issue 46: a requests.csv cut mid-row got a report with changed figures and exit 0."""
    from vllm_load.cli.main import main

    run = small_run(tmp_path / "runs")
    text = open(f"{run}/requests.csv").read()
    open(f"{run}/requests.csv", "w").write(text[: len(text) - 40])  # the last line cut
    out = tmp_path / "r.html"
    assert main(["report", run, "-o", str(out), "--quiet"]) == 2
    printed = capsys.readouterr()
    assert f"Report: {out}" in printed.out  # the figures are kept
    error = printed.err.strip().splitlines()[-1]
    assert error.startswith("vllm-load report: error: the report is from partial run files")
    assert "--allow-partial" in error
    html = open(out).read()
    assert html.index('id="partial"') < html.index('id="findings"')
    assert "requests.csv ends inside a row" in html[: html.index('id="findings"')]
    markdown = open(tmp_path / "r.md").read()
    assert markdown.index("**Partial input") < markdown.index("## Key findings")

    assert main(["report", run, "-o", str(out), "--quiet", "--allow-partial"]) == 0
    assert 'id="partial"' in open(out).read()
    whole = small_run(tmp_path / "whole")
    assert main(["report", whole, "-o", str(tmp_path / "w.html"), "--quiet"]) == 0
    assert 'id="partial"' not in open(tmp_path / "w.html").read()


def test_a_comparison_of_a_cut_run_is_written_warned_and_exits_2(tmp_path, capsys):
    """`compare` on a run whose requests.csv was cut exited 0: a CI gate passed a cut run."""
    from vllm_load.cli.main import main

    a, b = small_run(tmp_path / "a"), small_run(tmp_path / "b")
    text = open(f"{b}/requests.csv").read()
    open(f"{b}/requests.csv", "w").write(text[: len(text) - 40])  # the last line cut
    out = tmp_path / "ab.html"
    assert main(["compare", a, b, "-o", str(out)]) == 2
    printed = capsys.readouterr()
    assert f"Comparison: {out}" in printed.out  # written either way
    error = printed.err.strip().splitlines()[-1]
    assert error.startswith("vllm-load compare: error: the comparison is from partial run files")
    assert "Left out of the runs' files:" in open(out).read()
    assert main(["compare", a, b, "-o", str(out), "--allow-partial"]) == 0


@pytest.mark.parametrize(
    "text, says",
    [
        ("5,3", "FROM below TO (the ratio is TO's throughput over FROM's), got '5,3': write 3,5"),
        ("4,4", "two different levels"),
        ("inf,8", "two positive levels"),
    ],
)
def test_scaling_levels_out_of_order_are_refused_in_one_line(tmp_path, capsys, text, says):
    """Issue 46: `--scaling 5,3` printed "Throughput scales 0.5x from 4 to 2"."""
    from vllm_load.cli.main import main

    assert main(["report", str(tmp_path), "--scaling", text]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
