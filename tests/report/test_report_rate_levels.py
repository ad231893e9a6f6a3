"""A rate run's levels are named by their requested rate (`value`, kind `rate`, unit
requests/s) all through the summary files, and `users` is only ever Locust's users (the cap on
requests in flight): issue 38's users-as-rate column is gone."""

from __future__ import annotations

import csv
import json
import os
import re

import pandas as pd
import pytest

from vllm_load.report.render import build_report
from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run
from vllm_load.slo import parse_slo

#: the Locust users of each level (its cap on requests in flight) and its requested rate
USERS = (4, 8, 16)
RATES = (0.5, 1.5, 2.5)


def rate_run(base: str, seed: int) -> str:
    """A synthetic run recorded as a rate run: steps.csv's levels of kind `rate` at `RATES`
    (Locust's `USERS` each), run.json's `--rates`. (Its requests are the synthetic server's
    closed loop: what is tested is how the levels are named, not the arrivals.)"""
    run_dir = write_synthetic_run(
        base,
        SyntheticRun(
            levels=USERS,
            requests_per_level=40,
            warmup_requests=4,
            output_tokens=32,
            seed=seed,
            scrape_interval=0.25,
        ),
    )
    steps_csv = os.path.join(run_dir, "steps.csv")
    steps = pd.read_csv(steps_csv)
    steps["kind"], steps["value"] = "rate", list(RATES)
    steps.to_csv(steps_csv, index=False)
    run_json = os.path.join(run_dir, "run.json")
    with open(run_json, encoding="utf-8") as fh:
        run = json.load(fh)
    run["settings"]["rates"] = list(RATES)
    with open(run_json, "w", encoding="utf-8") as fh:
        json.dump(run, fh)
    return run_dir


@pytest.fixture(scope="module")
def rate_report(tmp_path_factory):
    base = tmp_path_factory.mktemp("rate")
    runs = [rate_run(str(base / "runs"), seed) for seed in (0, 1)]
    paths = build_report(
        runs, str(base / "r.html"), progress=False, slo=parse_slo(["e2e_p99<=60s"])
    )
    with open(paths.json, encoding="utf-8") as fh:
        summary = json.load(fh)
    with open(paths.csv, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    with open(paths.html, encoding="utf-8") as fh, open(paths.markdown, encoding="utf-8") as md:
        return summary, rows, (fh.read(), md.read())


def _keys(obj, path=""):
    """Every (path, key, value) of a JSON tree."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield path, key, value
            yield from _keys(value, f"{path}.{key}")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _keys(value, f"{path}[{i}]")


def test_a_rate_runs_levels_carry_their_rate_as_value_and_locusts_users_as_users(rate_report):
    summary, _rows, _docs = rate_report
    assert summary["format"] == 2
    (series,) = summary["series"]
    assert (series["kind"], series["unit"]) == ("rate", "requests/s")
    for records in [series["levels"], *(r["levels"] for r in summary["runs"])]:
        assert [lv["value"] for lv in records] == list(RATES)
        assert [lv["users"] for lv in records] == list(USERS)  # Locust's, not the rate
        assert {(lv["kind"], lv["unit"]) for lv in records} == {("rate", "requests/s")}
    for run in summary["runs"]:
        assert (run["kind"], run["unit"]) == ("rate", "requests/s")
        assert "locust_users" not in run["levels"][0]
    sat = series["saturation"]
    assert sat["peak"]["value"] in RATES and "users" not in sat["peak"]
    assert all(r["value"] in RATES for r in sat["recommendations"])
    assert series["slo"]["goodput_peak_value"] in RATES
    assert series["slo"]["throughput_peak_value"] in RATES
    (row,) = summary["comparison"]
    assert row["peak_value"] in RATES and (row["kind"], row["unit"]) == ("rate", "requests/s")


def test_no_series_key_ending_in_users_holds_a_rate(rate_report):
    summary, _rows, _docs = rate_report
    (series,) = summary["series"]
    named = [(path, key, value) for path, key, value in _keys(series) if key.endswith("users")]
    assert not [n for n in named if n[1] != "users"], named  # no `*_users` at all
    assert {value for _path, _key, value in named} <= set(USERS), named


def test_summary_csv_names_each_level_by_kind_and_rate(rate_report):
    _summary, rows, _docs = rate_report
    assert "users" not in rows[0] and {"kind", "level_value", "value"} <= set(rows[0])
    levels = [r for r in rows if r["scope"] in ("series", "run")]
    assert {r["kind"] for r in levels} == {"rate"}
    assert {float(r["level_value"]) for r in levels} == set(RATES)
    users = {float(r["value"]) for r in levels if r["metric"] == "users"}
    assert users == set(map(float, USERS))


def _first_cells(html: str, table: str) -> list[str]:
    """The first cell of each body row of every HTML table of class `table`, tags stripped."""
    cells = []
    for part in html.split(f'<table class="{table}">')[1:]:
        body = part.split("</table>", 1)[0].split("<tbody>", 1)[1]
        rows = body.split("<tr")[1:]
        cells += [re.sub(r"<[^>]+>", "", r.split(">", 1)[1].split("</td>", 1)[0]) for r in rows]
    return [c.replace("⚠", "").replace("†", "").strip() for c in cells]


def test_every_table_names_a_level_by_its_rate_not_its_cap(rate_report):
    # 0.5 requests/s printed as users (",.0f") read "0"; the cap, 4, is Locust's users
    _summary, _rows, (html, md) = rate_report
    rates = ["0.50", "1.50", "2.50"]
    assert _first_cells(html, "levels-agg") == rates  # the series
    assert _first_cells(html, "levels-run") == rates * 2  # each run's levels
    assert _first_cells(html, "server-levels") == rates * 2  # each run's server, per level
    assert _first_cells(html, "why-levels") == rates  # the verdict per level
    recommended = [
        re.sub(r"<[^>]+>", "", row.split("</td>")[1])
        for row in html.split('<table class="recommendations">')[1].split("</table>")[0]
        .split("<tbody>")[1].split("<tr>")[1:]
    ]  # fmt: skip
    assert recommended and set(recommended) <= set(rates), recommended
    peak = re.search(r"<strong>Peak:</strong> [\d,]+ tok/s at ([\d.,]+) requests/s", html)
    assert peak and peak.group(1) in rates, peak
    scaling = re.search(r"Scaling:</strong> [\d.]+x from ([\d.]+) to ([\d.]+) requests/s", html)
    assert scaling and scaling.groups() == ("0.50", "2.50"), scaling
    # the markdown: the comparison row's level, and the series' level table
    assert "| 0.50 | 2 |" in md and "| 2.50 | 2 |" in md
