"""The report per persona and per conversation turn, over synthetic runs with personas: the
charts appear only when there is more than one persona / there are conversations, and the
summary files carry `analysis.breakdown`'s tables."""

from __future__ import annotations

import csv
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from support.reports import PERSONAS, embedded_pngs, persona_runs, synthetic_runs

from vllm_load.analysis.levels.breakdown import conversation_summary, persona_table, turn_table
from vllm_load.analysis.levels.measure import measure_levels
from vllm_load.report.charts import slug
from vllm_load.report.render import build_report
from vllm_load.run_format.load import load_run
from vllm_load.run_format.synthetic_personas import Persona


@pytest.fixture(scope="module")
def persona_report(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    (run,) = persona_runs(base, 1)
    return run, build_report([run], str(base / "out" / "p.html"), progress=False)


def chart_ids(html: str) -> list[str]:
    return re.findall(r'<figure id="chart-([^"]+)"', html)


def test_persona_and_turn_charts_are_drawn_for_several_personas_with_conversations(
    persona_report,
):
    run, paths = persona_report
    html = open(paths.html).read()
    run_id = slug(run.rstrip("/").split("/")[-1])
    ids = chart_ids(html)
    assert f"personas-{run_id}" in ids and f"turns-{run_id}" in ids
    # each after its table
    assert html.index('class="personas"') < html.index(f'id="chart-personas-{run_id}"')
    assert html.index('class="turns"') < html.index(f'id="chart-turns-{run_id}"')
    # overview (3) + distributions + timeline + the two, all valid PNGs
    images = embedded_pngs(html)
    assert len(images) == 3 + 1 + 1 + 2
    assert all(im.format == "PNG" and im.width > 300 and im.height > 150 for im in images)


@pytest.mark.parametrize(
    "personas, persona_chart, turn_chart",
    [
        ((), False, False),  # no personas at all: one unnamed class
        ((Persona("Solo"),), False, False),  # one persona: the per-level charts say it all
        ((Persona("Chat", turns=3),), False, True),  # one persona, in conversations
        ((Persona("A"), Persona("B", latency_scale=1.5)), True, False),  # no conversations
    ],
    ids=["none", "one", "one-talking", "two-single"],
)
def test_charts_only_when_there_is_something_to_break_down(
    tmp_path, personas, persona_chart, turn_chart
):
    if personas:
        (run,) = persona_runs(tmp_path, 1, personas=personas, levels=(10, 50))
    else:
        (run,) = synthetic_runs(tmp_path, 1, levels=(10, 50))
    paths = build_report([run], str(tmp_path / "r.html"), progress=False)
    html = open(paths.html).read()
    ids = chart_ids(html)
    assert any(i.startswith("personas-") for i in ids) == persona_chart
    assert any(i.startswith("turns-") for i in ids) == turn_chart
    assert len(embedded_pngs(html)) == 3 + 1 + 1 + persona_chart + turn_chart
    markdown = open(paths.markdown).read()
    assert ("| users | persona |" in markdown) == persona_chart
    assert ("| turn | measured |" in markdown) == turn_chart
    assert ("per persona and per conversation turn" in markdown) == (persona_chart or turn_chart)
    (summary_run,) = json.loads(open(paths.json).read())["runs"]
    assert bool(summary_run["personas"]) == persona_chart
    assert bool(summary_run["turns"]) == bool(summary_run["conversations"]) == turn_chart


def _same(json_rows: list[dict], frame: pd.DataFrame) -> None:
    assert len(json_rows) == len(frame)
    for got, want in zip(json_rows, frame.to_dict("records")):
        assert list(got) == list(want)
        for column, value in want.items():
            if isinstance(value, str):
                assert got[column] == value
            elif value is None or (isinstance(value, float) and math.isnan(value)):
                assert got[column] is None, column
            else:
                assert got[column] == pytest.approx(value, rel=1e-12), column


def test_summary_json_holds_the_breakdown_tables(persona_report):
    run, paths = persona_report
    (summary_run,) = json.loads(open(paths.json).read())["runs"]
    data = load_run(run)
    meas = measure_levels(data.requests, data.steps)
    personas = persona_table(meas.labelled, meas.metrics)
    turns = turn_table(meas.labelled)
    _same(summary_run["personas"], personas)
    _same(summary_run["turns"], turns)
    assert summary_run["conversations"] == pytest.approx(conversation_summary(data.requests))
    # both personas at every level, in the weights' proportion of users (by requests, the
    # slower RAG users send fewer), and the RAG users are twice as slow
    assert sorted(set(personas["user_class"])) == ["Chat", "Rag"]
    assert (personas.groupby("level").size() == 2).all()
    at_10 = personas[personas["value"] == 10].set_index("user_class")
    assert at_10.loc["Rag", "e2e_p50"] == pytest.approx(2 * at_10.loc["Chat", "e2e_p50"], rel=0.1)
    assert at_10.loc["Chat", "share"] > at_10.loc["Rag", "share"]
    # four turns, each prompt 256 tokens longer than the last, the previous one prefix-cached
    assert list(turns["turn"]) == [0, 1, 2, 3]
    assert list(turns["prompt_tokens_mean"]) == [2048 + 256 * t for t in range(4)]
    assert turns["cached_share"].iloc[0] == 0
    assert turns["cached_share"].iloc[1] == pytest.approx(2048 / 2304)


def test_summary_csv_and_markdown_hold_the_breakdown(persona_report):
    run, paths = persona_report
    (summary_run,) = json.loads(open(paths.json).read())["runs"]
    with open(paths.csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    rag_10 = next(
        r for r in summary_run["personas"] if r["user_class"] == "Rag" and r["value"] == 10
    )
    assert any(
        r["scope"] == "persona"
        and r["metric"] == "Rag.ttft_p99"
        and r["level_value"] == "10.0"
        and float(r["value"]) == pytest.approx(rag_10["ttft_p99"])
        for r in rows
    )
    assert any(r["scope"] == "turn" and r["metric"] == "turn3.prompt_tokens_mean" for r in rows)
    conversations = {r["metric"]: float(r["value"]) for r in rows if r["scope"] == "conversations"}
    assert conversations == pytest.approx(summary_run["conversations"])

    markdown = open(paths.markdown).read()
    assert f"## Run {summary_run['run_id']}: per persona and per conversation turn" in markdown
    assert f"| 10 | Rag | {rag_10['share'] * 100:.1f}% | {rag_10['measured']} |" in markdown
    assert re.search(r"^\| 4 \| \d+ \| \d+ \| 0 \| 2,816 \| ", markdown, re.M)
    conv = summary_run["conversations"]
    assert f"{conv['conversations']:,.0f} conversations of" in markdown


def test_synthetic_personas_label_every_request(tmp_path):
    (run,) = persona_runs(tmp_path, 1, levels=(10, 200))
    requests = pd.read_csv(f"{run}/requests.csv", keep_default_na=False)
    assert set(requests["user_class"]) == {"Chat", "Rag"}
    chat = requests[requests["user_class"] == "Chat"]
    rag = requests[requests["user_class"] == "Rag"]
    assert (chat["task"] == "conversation").all() and (rag["task"] == "single").all()
    assert (rag["conversation"] == "").all() and (rag["turn"] == 0).all()
    assert set(chat["turn"]) == {0, 1, 2, 3} and (chat["conversation"] != "").all()
    # a conversation's turns follow one another, one user's, its prompt growing
    for _, turns in chat.groupby("conversation"):
        turns = turns.sort_values("start_ts")
        assert list(turns["turn"]) == list(range(len(turns)))
        assert (np.diff(turns["prompt_tokens"].astype(int)) == 256).all()
        # (past the batch, a user's first request ends up to the 10 ms start jitter late)
        gaps = turns["start_ts"].to_numpy()[1:] - turns["end_ts"].to_numpy()[:-1]
        assert (gaps >= -0.011).all()
    run_json = json.loads(open(f"{run}/run.json").read())
    assert run_json["user_classes"] == {p.name: p.weight for p in PERSONAS}
