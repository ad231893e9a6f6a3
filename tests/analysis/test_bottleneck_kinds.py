"""Every kind of bottleneck is declared once (`analysis.diagnosis.kinds`): a kind declared in a
test, given by a verdict rule, reaches the series' sentence and advice, the report's "Why it
saturates" section and its evidence chart's legend, the summary JSON, and `tune --advice`, none
of them edited; a kind with nothing to prove is refused by `tune --advice` with its own reason."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.reports import report, synthetic_runs, why_sections

from vllm_load.analysis.diagnosis import kinds, series
from vllm_load.analysis.diagnosis.advice import Advice, Situation
from vllm_load.analysis.diagnosis.kinds import SEQUENCE_CAP, BottleneckKind
from vllm_load.report import evidence_charts
from vllm_load.run_format.synthetic import ServerModel
from vllm_load.user_values import SettingsError


def _bigger_prefix_cache(s: Situation) -> tuple[Advice, ...]:
    batch = s.evidence["requests_in_batch"]
    return (Advice("--prefix-cache-blocks", None, f"{2 * batch:.0f}", "more hits", "memory"),)


#: a kind no consumer names, with its own label, colour and advice
PREFIX_CACHE = BottleneckKind(
    "prefix_cache",
    "the prefix cache (made up for this test)",
    "tab:olive",
    _bigger_prefix_cache,
    configured=True,
    server=True,
)
#: a kind whose series `tune --advice` refuses, and whose report says why it advises nothing
QUIET = BottleneckKind(
    "quiet",
    "quiet",
    "tab:cyan",
    nothing_to_prove="a made-up reason to prove nothing",
    no_advice="No advice: quiet ({reason}).",
)


@pytest.fixture
def declared(monkeypatch):
    for kind in (PREFIX_CACHE, QUIET):
        monkeypatch.setitem(kinds.KINDS, kind.name, kind)
    # the rule that gives it: where the sequence cap would be named
    real = series.level_verdict

    def renamed(*args, **kwargs):
        v = real(*args, **kwargs)
        return replace(v, kind=PREFIX_CACHE.name) if v.kind == SEQUENCE_CAP.name else v

    monkeypatch.setattr(series, "level_verdict", renamed)
    legend: list[tuple[str, str]] = []
    line = evidence_charts.Line2D

    def recorded(*args, **kwargs):
        if kwargs.get("marker") == "o":
            legend.append((kwargs["label"], kwargs["color"]))
        return line(*args, **kwargs)

    monkeypatch.setattr(evidence_charts, "Line2D", recorded)
    return legend


def test_a_kind_declared_once_reaches_the_sentence_advice_report_chart_and_tune(tmp_path, declared):
    from vllm_load.cli.tuning.source import parse_diagnosis

    runs = synthetic_runs(
        tmp_path / "runs", 1, server=ServerModel(max_num_seqs=50), scrape_interval=0.5
    )
    summary, html, markdown = report(runs, tmp_path / "r.html")
    diagnosis = summary["series"][0]["diagnosis"]
    assert diagnosis["kind"] == "prefix_cache"
    assert (
        "limited by the prefix cache (made up for this test): the batch is full"
        in (diagnosis["sentence"])
    )
    (advice,) = diagnosis["advice"]
    assert advice["flag"] == "--prefix-cache-blocks" and advice["expected"] == "more hits"
    section, md_section = why_sections(html, markdown)
    assert 'data-kind="prefix_cache"' in section and "<code>--prefix-cache-blocks</code>" in section
    assert "Verdict: prefix\\_cache." in md_section and "--prefix-cache-blocks" in md_section
    assert ("prefix_cache", "tab:olive") in declared  # its colour in the chart's legend

    d = parse_diagnosis(summary["series"][0], "r.json")
    assert d.kind == "prefix_cache" and [a.flag for a in d.runnable] == ["--prefix-cache-blocks"]
    quiet = {**summary["series"][0], "diagnosis": {**diagnosis, "kind": "quiet"}}
    with pytest.raises(
        SettingsError, match="is diagnosed quiet: a made-up reason to prove nothing"
    ):
        parse_diagnosis(quiet, "r.json")


def test_a_kind_without_advice_says_why_in_its_own_words():
    from vllm_load.analysis.diagnosis.kinds import FAILURES, NOT_SATURATED, UNDETERMINED

    assert QUIET.why_no_advice("the batch is full") == "No advice: quiet (the batch is full)."
    assert UNDETERMINED.why_no_advice("x") == "No advice: the limit is undetermined (x)."
    assert NOT_SATURATED.why_no_advice("x").startswith("No advice: the series does not saturate")
    assert FAILURES.why_no_advice("x").endswith("their causes come first.")
    assert PREFIX_CACHE.why_no_advice("x") == (
        "No advice: no flag the evidence supports moves prefix_cache here (the capacity model "
        "sees no room past it)."
    )


def test_every_kind_has_a_colour_a_label_and_tune_knows_it():
    from vllm_load.cli.tuning.source import KINDS as TUNE_KINDS

    assert TUNE_KINDS is kinds.KINDS
    for name, kind in kinds.KINDS.items():
        assert kind.name == name and kind.colour and kind.label
        # the server's own limits advise a flag; every other kind says why tune has nothing to do
        assert bool(kind.nothing_to_prove) != kind.server, name
