"""The record of `tune --advice` loops (vllm_load/run_format/advice_record.py) and the sentence a
report gives from it."""

from __future__ import annotations

import json

import pytest
from support.reports import report, synthetic_runs, why_sections

from vllm_load.run_format.advice_record import (
    DID_NOT,
    PAID_OFF,
    RECORD_ENV,
    UNDETERMINED,
    append_loop,
    record_path,
    score,
)
from vllm_load.run_format.synthetic import ServerModel


def test_loops_are_counted_per_verdict_kind_and_damaged_lines_skipped(tmp_path):
    path = str(tmp_path / "deep" / "record.jsonl")
    assert score("max_num_seqs", path) is None  # no record yet
    for kind, outcome in (
        ("max_num_seqs", PAID_OFF),
        ("max_num_seqs", DID_NOT),
        ("kv_cache", PAID_OFF),
        ("max_num_seqs", UNDETERMINED),
        ("max_num_seqs", PAID_OFF),
    ):
        append_loop(kind, outcome, {"advice": ["x"]}, path)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"kind": "max_num_seqs", "outcome": "paid_of')  # cut off
        fh.write("\nnot json\n" + json.dumps({"kind": "max_num_seqs", "outcome": "??"}) + "\n")
    seqs = score("max_num_seqs", path)
    assert (seqs.paid_off, seqs.did_not, seqs.undetermined, seqs.loops) == (2, 1, 1, 4)
    assert seqs.sentence() == (
        "Advice of this kind (max_num_seqs) paid off in 2 of 4 `tune --advice` loops recorded "
        "(1 undetermined at their n)."
    )
    assert score("compute", path) is None
    with pytest.raises(ValueError):
        append_loop("kv_cache", "maybe", {}, path)


def test_the_record_lives_where_the_environment_says(tmp_path, monkeypatch):
    monkeypatch.setenv(RECORD_ENV, str(tmp_path / "r.jsonl"))
    assert record_path() == str(tmp_path / "r.jsonl")
    monkeypatch.delenv(RECORD_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert record_path() == str(tmp_path / "data" / "vllm-load" / "advice-record.jsonl")


def test_a_report_whose_advice_kind_has_history_says_how_often_it_paid_off(tmp_path, monkeypatch):
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv(RECORD_ENV, str(record))
    runs = synthetic_runs(
        tmp_path / "runs", 1, server=ServerModel(max_num_seqs=50), scrape_interval=0.5
    )
    _, html, markdown = report(runs, tmp_path / "before.html")
    assert "paid off in" not in html  # no history: nothing said
    for outcome in (PAID_OFF, PAID_OFF, DID_NOT):
        append_loop("max_num_seqs", outcome, {}, str(record))
    append_loop("kv_cache", PAID_OFF, {}, str(record))
    _, html, markdown = report(runs, tmp_path / "after.html")
    section, md_section = why_sections(html, markdown)
    said = "Advice of this kind (max_num_seqs) paid off in 2 of 3 `tune --advice` loops recorded."
    assert f'<p class="advice-score">{said}</p>' in section.replace("&#96;", "`")
    assert "paid off in 2 of 3" in md_section
