"""The report tells one story (issue 46, item 3): a headline first (peak, knee, limit, flag,
effect) with the tables' own figures; no "-0%"; a level with no measured request reads "not
measured"; the capacity model counts what images add to a prompt; the gap between the model's
knee and the measured one says why."""

from __future__ import annotations

import json
import re

import pandas as pd
from support.reports import report, synthetic_runs

from vllm_load.analysis.diagnosis.capacity import Limit, Prediction
from vllm_load.analysis.diagnosis.gap import knee_gap
from vllm_load.analysis.diagnosis.verdict import Bottleneck
from vllm_load.analysis.series.findings import _pct
from vllm_load.report.cells import signed_pct
from vllm_load.report.model import build_report_data
from vllm_load.run_format.synthetic import ServerModel

#: a server whose sequence cap (50) binds inside the synthetic ladder (10, 50, 100, 200)
CAPPED = ServerModel(max_num_seqs=50)


def _section(markdown: str, start: str, end: str) -> str:
    return markdown[markdown.index(start) : markdown.index(end)]


def _cells(markdown: str, header: str) -> list[list[str]]:
    """The rows of the first Markdown table whose header line starts with `header`."""
    lines = markdown.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[i + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_the_headline_comes_first_with_the_tables_own_figures(tmp_path):
    runs = synthetic_runs(tmp_path / "runs", 1, server=CAPPED, scrape_interval=0.5)
    summary, html, markdown = report(runs, tmp_path / "r.html")
    series = summary["series"][0]
    head = _section(markdown, "## Headline", "## Key findings")
    assert markdown.index("## Headline") < markdown.index("## Key findings")
    items = {
        k: v.replace("\\", "")  # Markdown's escapes
        for k, v in re.findall(r"^- ([^:\n]+): (.+?)\. ", head, re.M)
    }
    assert list(items) == [
        "Peak throughput",
        "Knee",
        "Limited by",
        "The flag",
        "Expected effect",
    ]

    # the peak: the summary table's cell, and the per-level table's row at the peak's level
    (row,) = _cells(markdown, "| series | runs | peak tok/s")
    peak_cell, peak_level = row[2], row[4]
    assert items["Peak throughput"] == f"{peak_cell} tok/s"
    levels = {r[0]: r for r in _cells(markdown, "| users | n |")}
    assert levels[peak_level][4] == peak_cell
    assert f"At {peak_level} concurrent, p99 E2E {row[9]}." in head
    # the knee: the summary table's saturation column, and the recommendations' saturation point
    knee = series["saturation"]["saturation_point"]["value"]
    assert items["Knee"] == f"~{knee:,.0f} concurrent"
    assert row[7].startswith(items["Knee"])
    high = next(r for r in _cells(markdown, "| use case |") if r[0] == "High throughput")
    assert high[1] == f"{knee:,.0f}"
    # the limit and the flag: the diagnosis' verdict and its advice, as the section below says them
    diagnosis = series["diagnosis"]
    assert diagnosis["kind"] == "max_num_seqs"
    assert items["Limited by"] == "the sequence cap (--max-num-seqs)"
    advice = diagnosis["advice"][0]
    assert items["The flag"] == f"{advice['flag']} {advice['from']} → {advice['to']}"
    assert f"- \\--max-num-seqs {advice['from']} → {advice['to']}: " in markdown
    effect = diagnosis["advised_knee"]
    assert items["Expected effect"] == f"knee ~{effect:,.0f} concurrent"
    assert f"the capacity model puts the knee at \\~{effect:,.0f} concurrent" in markdown
    # the HTML shows the same items, first
    assert html.index('<section id="headline">') < html.index('<section id="findings">')
    for label, figure in items.items():
        shown = figure.replace(">", "&gt;")
        assert f'<dt>{label}</dt><dd><strong class="headline-figure">{shown}</strong>' in html
    # and no change is ever written "-0%"
    assert "-0%" not in markdown and "-0%" not in html


def test_a_change_that_rounds_to_nothing_is_never_minus_zero():
    for change in (-0.002, -0.0049, 0.0, 0.004):
        assert _pct(change) == "±0%" and signed_pct(change) == "±0%"
    assert _pct(-0.006) == "-1%" and signed_pct(0.52) == "+52%"


def _drop_measured(run: str, level: int) -> None:
    """A level cut short (its time cap) before any of its measured requests was recorded: only
    its warm-up is left."""
    req = pd.read_csv(f"{run}/requests.csv", dtype=str, keep_default_na=False)
    steps = pd.read_csv(f"{run}/steps.csv")
    warmup = int(steps.loc[level, "warmup_requests"])
    mine = req[req["level"] == str(level)]
    first = mine.assign(s=mine["start_ts"].astype(float)).sort_values("s").index[:warmup]
    req[(req["level"] != str(level)) | req.index.isin(first)].to_csv(
        f"{run}/requests.csv", index=False
    )
    steps.loc[level, "stop_reason"] = "time_cap"
    steps.to_csv(f"{run}/steps.csv", index=False)
    info = json.load(open(f"{run}/run.json"))
    info.pop("requests_recorded", None)  # the file is whole: it was recorded so
    json.dump(info, open(f"{run}/run.json", "w"))


def test_a_level_with_no_measured_request_reads_not_measured(tmp_path):
    (run,) = synthetic_runs(tmp_path / "runs", 1, server=CAPPED, scrape_interval=0.5)
    _drop_measured(run, 2)  # 100 users
    data = build_report_data([run])
    (series,) = data.series
    verdicts = {v.value: v for v in series.diagnosis.levels}
    assert verdicts[100.0].kind == "not_measured"
    assert verdicts[100.0].reason.startswith("not measured: ")
    assert series.runs[0].bottlenecks[100.0]["kind"] == "not_measured"
    # the levels around it are judged as before, on their own figures
    assert verdicts[10.0].kind == "not_saturated" and verdicts[200.0].kind != "not_measured"


def test_the_capacity_model_counts_the_tokens_images_add_to_a_prompt(tmp_path):
    (run,) = synthetic_runs(tmp_path / "runs", 1, server=CAPPED, scrape_interval=0.5)
    image_tokens = 258  # one 512x512 image, as Qwen3-VL charges it
    info = json.load(open(f"{run}/run.json"))
    info["settings"]["images"] = 1
    json.dump(info, open(f"{run}/run.json", "w"))
    req = pd.read_csv(f"{run}/requests.csv", dtype=str, keep_default_na=False)
    # the server's usage counts the image; the prompt was built to its text's length alone
    req["prompt_tokens"] = (req["prompt_tokens"].astype(int) + image_tokens).astype(str)
    req["images"] = "1"
    req.to_csv(f"{run}/requests.csv", index=False)
    (series,) = build_report_data([run]).series
    kv = next(lim for lim in series.diagnosis.prediction.limits if lim.kind == "kv_cache")
    per_request = 2048 + image_tokens + 64
    assert f"per request of {per_request:,.0f} tokens" in kv.basis
    assert kv.concurrency == 4096 // -(-per_request // 128)


def test_a_measured_knee_past_the_models_says_what_the_runs_measured_there():
    prediction = Prediction(
        (Limit("max_num_seqs", 16.0, "--max-num-seqs 16 (given)"),), (), 16.0, "max_num_seqs"
    )
    levels = [
        Bottleneck(
            "not_saturated", 16.0, "", {"requests_in_batch": 14.3, "total_tok_per_s": 38747}
        ),
        Bottleneck("max_num_seqs", 32.0, "", {"requests_in_batch": 15.8, "total_tok_per_s": 43061}),
    ]
    gap = knee_gap(prediction, 32.0, "concurrent", "", levels)
    assert "at ~16 concurrent, where the model has throughput at its top already, the runs " in gap
    assert "measured 38,747 tok/s, 90% of the peak" in gap
    assert "the batch held 14.3 requests on average there against 15.8 at ~32" in gap
    assert "The headline and the tables use the measured knee" in gap
    # a batch as full as at the knee: the throughput, and no mechanism the figures do not show
    full = [
        Bottleneck("not_saturated", 16.0, "", {**levels[0].evidence, "requests_in_batch": 15.6}),
        levels[1],
    ]
    gap = knee_gap(prediction, 32.0, "concurrent", "", full)
    assert "90% of the peak" in gap and "the batch held" not in gap
    # no figures at the model's knee: the reason for the limit's kind, as before
    assert "throughput keeps rising a little past a full batch" in knee_gap(
        prediction, 32.0, "concurrent", "", levels[1:]
    )
