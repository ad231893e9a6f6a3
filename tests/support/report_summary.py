"""What `vllm-load report RUN_DIR...` writes to NAME.summary.json, made in the test's own process
without drawing the report's charts or writing its HTML: a test that asserts only on the summary
(a level's verdict, the series' diagnosis, a target's rows) reads it here. A `vllm-load report`
subprocess spends seconds importing, drawing PNGs and compiling the templates for documents
such a test never reads (its HTML and charts are the tests/report tests' and the e2e tests that
read the HTML)."""

from __future__ import annotations

import json


def report_summary(*run_dirs: str) -> dict:
    """The summary.json of `vllm-load report RUN_DIRS` with its defaults, as that file holds it
    (through JSON: float level values, lists, None). Run files cut short fail the test, as
    they fail the command (exit 2 without --allow-partial)."""
    from vllm_load.report.model import build_report_data
    from vllm_load.report.summary_files import summary_dict
    from vllm_load.slo import parse_slo

    data = build_report_data(list(run_dirs), {}, slo=parse_slo(None))  # as report/cli.py passes
    partial = [note for run in data.runs for note in run.input_notes]
    assert not partial, f"partial run files: {partial}"
    return json.loads(json.dumps(summary_dict(data), ensure_ascii=False))
