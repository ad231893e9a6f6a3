"""`vllm-load history --html`: the trend page of stored runs, per configuration over time, each
point's figures with their 95 % interval across its runs (none for a run alone, said so), vLLM
version changes marked, a table of the same numbers; no runs or none completed: one line, exit
2, no file. Built from in-process synthetic runs and campaign directories (`store import`)."""

from __future__ import annotations

import json
import math
import re

import pytest

from vllm_load.analysis.series.stats import summarize
from vllm_load.cli.main import main
from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run
from vllm_load.store.db import open_store, read_memberships
from vllm_load.store.history import stored_runs
from vllm_load.store.location import locate
from vllm_load.store.trend import peak, trend

SPEC = dict(levels=(4, 8), warmup_requests=4, requests_per_level=20, output_tokens=32)
HOUR = 3600.0
T0 = 1_790_000_000.0


def synthetic(base, i: int, hours: float, version: str, model="org/a", slo=(), **changes) -> str:
    """A synthetic run, started `hours` after T0, as served by vLLM `version` (its /version)."""
    path = write_synthetic_run(
        str(base),
        SyntheticRun(
            **SPEC,
            model=model,
            seed=i,
            start_ts=T0 + hours * HOUR,
            meta={"gpu": "H100", "gpus": "1"},
        ),
    )
    with open(f"{path}/run.json", encoding="utf-8") as fh:
        run = json.load(fh)
    run["target"]["version"] = {"version": version, "commit": f"c{version}"}
    if slo:
        run["settings"]["slo"] = list(slo)
    run.update(changes)
    with open(f"{path}/run.json", "w", encoding="utf-8") as fh:
        json.dump(run, fh)
    return path


def campaign(base, name: str, paths: list[str]) -> str:
    """A campaign directory (campaign.json, as `vllm-load campaign` keeps it) holding `paths`."""
    directory = base / name
    directory.mkdir(exist_ok=True)
    runs = [{"run_dir": p, "phase": "coarse", "outcome": "completed"} for p in paths]
    state = {"format": 1, "name": name, "options": {"host": "x"}, "runs": runs}
    (directory / "campaign.json").write_text(json.dumps(state))
    return str(directory)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """org/a: a campaign of two runs on vLLM 0.31, a run alone on 0.32 with SLOs, a campaign of
    three on 0.32, a failed run; org/b: a run, and one with SLOs no level met."""
    base = tmp_path_factory.mktemp("trend")
    first = campaign(base, "c1", [synthetic(base / "c1" / "runs", i, i, "0.31") for i in range(2)])
    alone = synthetic(base / "runs", 2, 24, "0.32", slo=("ttft_p99<=10s",))
    later = [synthetic(base / "c2" / "runs", 3 + i, 48 + i, "0.32") for i in range(3)]
    second = campaign(base, "c2", later)
    failed = synthetic(base / "runs", 6, 30, "0.32", outcome="failed")
    other = synthetic(base / "runs", 7, 12, "0.31", model="org/b")
    strict = synthetic(base / "runs", 8, 13, "0.31", model="org/b", slo=("ttft_p99<=1ms",))
    path = str(base / "results.sqlite")
    args = ["store", "import", first, second, alone, failed, other, strict, "--store", path]
    assert main(args) == 0
    return path


def _trend(path, model="org/a", level=None):
    s = open_store(locate(path))
    try:
        runs = stored_runs(s, model, [])
        with s.engine.begin() as conn:
            members = read_memberships(conn, [row["id"] for row, _ in runs])
    finally:
        s.close()
    return runs, trend(runs, members, level)


def test_points_are_the_runs_repeated_together_with_their_intervals(store):
    runs, series = _trend(store)
    (a,) = series
    assert a.configuration.model == "org/a" and a.configuration.gpus == "1x H100"
    assert a.left_out == 1  # the failed run: counted, not drawn
    assert [len(p.run_ids) for p in a.points] == [2, 1, 3]
    assert [p.source for p in a.points] == ["campaign c1: coarse", "run", "campaign c2: coarse"]
    assert [p.version_changed for p in a.points] == [False, True, False]
    # each point's peak: the mean of its runs' highest total tok/s, with the t-interval
    by_id = {row["run_id"]: levels for row, levels in runs}
    for p in a.points:
        expected = summarize(peak(by_id[r]) for r in p.run_ids)
        assert p.peak.mean == pytest.approx(expected.mean) and p.peak.n == len(p.run_ids)
        if p.peak.n >= 2:
            assert p.peak.ci_low == pytest.approx(expected.ci_low) and p.peak.ci_low < p.peak.mean
        else:
            assert math.isnan(p.peak.ci_low)
    # p99 TTFT at the highest level every run measured, else at --level
    assert a.level == 8.0 and "every run measured" in a.level_note
    ttft = {lv.value: lv.figures["ttft_p99"] for lv in by_id[a.points[1].run_ids[0]]}
    assert a.points[1].ttft.mean == ttft[8.0]
    (at4,) = _trend(store, level=4.0)[1]
    assert at4.level == 4.0 and at4.points[1].ttft.mean == ttft[4.0] != ttft[8.0]
    # SLO-max where the run recorded SLOs: the run alone, judged as the report judges it
    assert [p.slo for p in a.points] == ["", "ttft_p99<=10s", ""]
    assert a.points[1].slo_max.mean == 8.0 and a.points[0].slo_max.n == 0
    (b,) = _trend(store, model="org/b")[1]
    assert [(p.slo, p.slo_max.n, p.slo_none) for p in b.points] == [
        ("", 0, 0),
        ("ttft_p99<=1ms", 0, 1),
    ]


def test_the_page_draws_each_configuration_with_a_table_of_the_same_numbers(
    store, tmp_path, capsys
):
    out = tmp_path / "trend.html"
    capsys.readouterr()
    assert main(["history", "--html", str(out), "--store", store]) == 0
    assert (
        f"Trend page: {out} (2 configuration(s), 5 point(s) from 9 run(s)"
        in capsys.readouterr().out
    )
    page = out.read_text()
    assert page.count('<img src="data:image/png;base64,') == 2
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched
    _, (a,) = _trend(store)
    rows = re.findall(r"<tr><td class=\"l\">(.*?)</tr>", page)
    assert len(rows) == 5  # one per point, both configurations
    assert "1 run(s) met them at no level [ttft_p99&lt;=1ms]" in rows[4]
    campaign_row, alone_row = rows[0], rows[1]
    p = a.points[0]
    assert f"{p.peak.mean:,.0f} (95% CI {p.peak.ci_low:,.0f} – {p.peak.ci_high:,.0f}, n = 2)" in (
        campaign_row
    )
    assert "0.32 (c0.32) (changed)" in alone_row and "one run: no interval" in alone_row
    assert "8 (one run: no interval) [ttft_p99&lt;=10s]" in alone_row
    assert "no SLOs recorded" in campaign_row
    assert "p99 TTFT at 8" in page and "1 run that did not complete left out" in page


def test_no_runs_or_none_completed_is_one_line_and_no_file(store, tmp_path, capsys):
    out = tmp_path / "t.html"
    for args, says in (
        (["--store", str(tmp_path / "empty.sqlite")], "no stored run is in sqlite:///"),
        (["--model", "org/c", "--store", store], "no stored run matches --model org/c in"),
        (["--where", "outcome=failed", "--store", store], "none of the 1 stored run(s) matching"),
    ):
        capsys.readouterr()
        assert main(["history", "--html", str(out), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0] and "no trend page written" in err[0], err
        assert not out.exists()
    capsys.readouterr()
    assert main(["history", "--html", str(out), "--groups", "--store", store]) == 2
    assert "not both" in capsys.readouterr().err


def test_a_newer_schema_writes_no_page(tmp_path, capsys):
    import sqlite3

    path = tmp_path / "s.sqlite"
    synthetic(tmp_path / "runs", 0, 0, "0.31")
    assert main(["store", "import", str(tmp_path / "runs"), "--store", str(path)]) == 0
    db = sqlite3.connect(str(path))
    db.execute("UPDATE alembic_version SET version_num = '0099'")
    db.commit()
    capsys.readouterr()
    assert main(["history", "--html", str(tmp_path / "t.html"), "--store", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "schema revision 0099" in err[0] and "nothing was written" in err[0]
    assert not (tmp_path / "t.html").exists()
