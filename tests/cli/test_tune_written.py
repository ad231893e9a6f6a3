"""`tune` does not rebuild its report where the completed runs and options it shows are the
ones it was last written from (a resume that ran nothing), and does where anything changed."""

from __future__ import annotations

import os
from types import SimpleNamespace

from vllm_load.cli.tuning.runs import write_report


def test_the_report_is_rebuilt_only_where_what_it_shows_changed(tmp_path, monkeypatch, capsys):
    built: list[tuple[list[str], object]] = []

    def build_report(run_dirs, out_html, progress, slo):
        built.append((list(run_dirs), slo))
        with open(out_html, "w", encoding="utf-8") as fh:
            fh.write("report")
        return SimpleNamespace(html=out_html)

    monkeypatch.setattr("vllm_load.report.render.build_report", build_report)
    runs = []
    for name in ("a", "b"):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        (run / "requests.csv").write_text("x\n1\n")
        runs.append(str(run))
    out = tmp_path / "t"
    out.mkdir()

    def report(run_dirs, slo=None) -> str:
        capsys.readouterr()
        write_report(run_dirs, str(out), slo)
        return capsys.readouterr().out

    report(runs[:1])
    assert len(built) == 1
    assert "Report unchanged" in report(runs[:1])  # a resume that ran nothing
    assert len(built) == 1
    assert "Report unchanged" not in report(runs)  # a new completed run
    assert len(built) == 2 and built[-1][0] == runs
    report(runs, ["ttft<=2s"])  # other options
    assert len(built) == 3
    report(runs, ["ttft<=2s"])
    assert len(built) == 3
    (tmp_path / "runs" / "a" / "requests.csv").write_text("x\n1\n2\n")  # a run rewritten
    report(runs, ["ttft<=2s"])
    assert len(built) == 4
    os.remove(out / "report.html")  # the report gone
    report(runs, ["ttft<=2s"])
    assert len(built) == 5
    assert write_report(runs, str(out), ["ttft<=2s"]) == str(out / "report.html")
