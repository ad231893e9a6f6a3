"""The report's "Why it saturates" section (issue 36, item 7): right after the key findings, per
series, the verdict and the capacity model in sentences, the server's facts, the advice (or why
there is none), a verdict per level, and a chart of the evidence per level; in the HTML and the
Markdown."""

from __future__ import annotations

import pandas as pd
from support.reports import embedded_pngs, report, synthetic_runs, why_sections

from vllm_load.report.evidence_charts import NOTHING, PANELS, evidence_chart
from vllm_load.report.model import build_report_data
from vllm_load.run_format.synthetic import ServerModel

#: a server whose sequence cap (50) binds inside the synthetic ladder (10, 50, 100, 200)
CAPPED = ServerModel(max_num_seqs=50)


def test_a_capped_server_gets_the_sequence_cap_its_advice_and_a_verdict_per_level(tmp_path):
    runs = synthetic_runs(tmp_path / "runs", 2, server=CAPPED, scrape_interval=0.5)
    summary, html, markdown = report(runs, tmp_path / "r.html")
    section, md_section = why_sections(html, markdown)
    diagnosis = summary["series"][0]["diagnosis"]
    assert diagnosis["kind"] == "max_num_seqs"
    assert diagnosis["server_facts"]["max_num_seqs"] == {"value": 50.0, "source": "inferred"}
    (advice,) = diagnosis["advice"]
    assert advice["flag"] == "--max-num-seqs" and advice["from"] == "50"

    assert '<div class="why" id="why-series-1" data-kind="max_num_seqs">' in section
    assert f"<strong>max_num_seqs</strong>: {diagnosis['sentence']}" in section.replace(
        "&#39;", "'"
    )
    assert (
        diagnosis["capacity"]["knee"] is not None
        and "The capacity model puts the knee at ~" in section
    )
    # the facts, each with how it is known
    assert (
        '<td class="l"><code>max_num_seqs</code></td><td class="l"><code>--max-num-seqs</code>'
        '</td><td>50</td><td class="l">inferred</td>'
    ) in section
    assert '<td>4,096</td><td class="l">read</td>' in section  # cache_config_info's blocks
    # a limit nobody gave, with no default for this server's version, says why
    assert (
        '<td class="l"><code>max_num_batched_tokens</code></td><td class="l"><code>'
        '--max-num-batched-tokens</code></td><td>not known</td><td class="l">not given, and no '
        "default: vLLM synthetic has no defaults table here (known: 0.32)</td>"
    ) in section
    # the advice: flag, from -> to, expected, cost
    assert (
        f"<li><code>--max-num-seqs</code> 50 → {advice['to']}: {advice['expected']}. "
        f'<span class="muted">Cost: {advice["cost"]}.</span></li>'
    ) in section
    assert 'class="no-advice"' not in section
    # a verdict per level: below the knee not saturated, from the knee on the sequence cap
    knee = summary["series"][0]["saturation"]["saturation_point"]["value"]
    for level in summary["series"][0]["levels"]:
        kind = "max_num_seqs" if level["value"] >= knee else "not_saturated"
        assert level["bottleneck"]["kind"] == kind
        assert (
            f'data-kind="{kind}"><td>{level["value"]:,.0f}</td><td class="l">{kind}</td>' in section
        )
    # and its evidence on a chart
    assert '<figure id="chart-evidence-series-1" class="chart">' in section
    assert len(embedded_pngs(section)) == 1

    assert "Verdict: max\\_num\\_seqs. At \\~" in md_section
    assert f"- \\--max-num-seqs 50 → {advice['to']}: " in md_section
    assert "| max\\_num\\_seqs | \\--max-num-seqs | 50 | inferred |" in md_section
    assert f"| {knee:,.0f} | max\\_num\\_seqs | the batch is full: " in md_section


def test_a_run_without_server_metrics_says_why_the_limit_is_undetermined(tmp_path):
    runs = synthetic_runs(tmp_path / "runs", 1, server=CAPPED)
    summary, html, markdown = report(runs, tmp_path / "r.html")
    section, md_section = why_sections(html, markdown)
    assert summary["series"][0]["diagnosis"]["kind"] == "undetermined"
    why = "the run did not scrape the server&#39;s /metrics (--metrics-interval 0, or an older run)"
    assert 'data-kind="undetermined"' in section
    assert f'<p class="no-advice">No advice: the limit is undetermined ({why}).</p>' in section
    # no empty chart: a note instead
    assert "<figure" not in section and not embedded_pngs(section)
    assert f'<p class="muted evidence-note">{NOTHING}</p>'.replace("'", "&#39;") in section
    assert "Verdict: undetermined. " in md_section
    assert "No advice: the limit is undetermined (the run did not scrape the server's /metrics" in (
        md_section
    )
    assert "Advice:" not in md_section


def drop_server_columns(run: str, *columns: str) -> None:
    path = f"{run}/server_metrics.csv"
    pd.read_csv(path).drop(columns=list(columns)).to_csv(path, index=False)


def test_the_chart_draws_a_panel_per_figure_some_level_has_and_names_the_others(tmp_path):
    (full,) = synthetic_runs(tmp_path / "full", 1, server=CAPPED, scrape_interval=0.5)
    (partial,) = synthetic_runs(tmp_path / "partial", 1, server=CAPPED, scrape_interval=0.5)
    drop_server_columns(partial, "steps", "step_tokens_sum", "preemptions_total")

    whole = evidence_chart(build_report_data([full]).series[0], "a")
    assert whole.panels == tuple(p.key for p in PANELS if not p.gpu) and whole.skipped == ()
    some = evidence_chart(build_report_data([partial]).series[0], "b")
    assert some.panels == ("batch", "waiting", "kv")
    assert some.skipped == (
        "Preemptions per second: not drawn, no level has it (from vllm:num_preemptions_total)",
        "Tokens per engine step: not drawn, no level has it (from vllm:iteration_tokens_total)",
    )
    # five panels take two rows of three, three panels one row
    (two_rows,) = embedded_pngs(f'src="{whole.chart.data_uri}"')
    (one_row,) = embedded_pngs(f'src="{some.chart.data_uri}"')
    assert two_rows.height > 1.6 * one_row.height

    _, html, _ = report([partial], tmp_path / "r.html")
    section, _ = why_sections(html, "## Key findings\n## Why it saturates\n## Summary")
    for note in some.skipped:
        assert f'<p class="muted evidence-note">{note}</p>' in section


def test_a_given_cap_the_server_contradicts_is_flagged_and_the_measured_plateau_wins(tmp_path):
    # told --max-num-seqs 20 while the server ran 50 at once: the report says so, and the cap
    # is inferred from the running gauge's plateau instead
    meta = {"gpus": "8", "config.max_num_seqs": "20"}
    runs = synthetic_runs(tmp_path / "runs", 1, server=CAPPED, scrape_interval=0.5, meta=meta)
    summary, html, markdown = report(runs, tmp_path / "r.html")
    section, md_section = why_sections(html, markdown)
    diagnosis = summary["series"][0]["diagnosis"]
    (conflict,) = diagnosis["conflicts"]
    assert conflict.startswith("--max-num-seqs 20 (given) contradicts the server: 50.0 requests")
    assert diagnosis["server_facts"]["max_num_seqs"] == {"value": 50.0, "source": "inferred"}
    assert diagnosis["kind"] == "max_num_seqs"
    assert '<p class="warn">⚠ --max-num-seqs 20 (given) contradicts the server' in section
    assert "⚠ \\--max-num-seqs 20 (given) contradicts the server" in md_section
