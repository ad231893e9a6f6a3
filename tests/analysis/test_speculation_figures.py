"""Speculative decoding per level (`analysis.levels.speculation`) from vLLM's vllm:spec_decode_*
counters in server_metrics.csv: acceptance length, draft acceptance rate and the per-position
shares over each level's measured window; none at all for a server that does not speculate, and
unknown (never negative) for a level whose counters were reset by a restart."""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest

from vllm_load.analysis.levels.speculation import (
    UNKNOWN,
    level_speculation,
    speculation_findings,
    with_speculation,
)
from vllm_load.analysis.levels.table import format_level_table, table_columns
from vllm_load.analysis.measured_run import measure_run
from vllm_load.figures import REPORT, TABLE, shown_in, spec_position_key
from vllm_load.run.server_metrics import parse_metrics
from vllm_load.run_format.synthetic import ServerModel, SyntheticRun, write_synthetic_run

TS = np.arange(0.0, 21.0)


def scrapes(drafts, draft_tokens, accepted, *positions) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "ts": TS,
            "spec_drafts": drafts,
            "spec_draft_tokens": draft_tokens,
            "spec_accepted_tokens": accepted,
        }
    )
    for p, values in enumerate(positions):
        frame[f"spec_accepted_pos_{p}"] = values
    return frame


def levels(*windows) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "level": list(range(len(windows))),
            "value": [4.0 * (i + 1) for i in range(len(windows))],
            "window_start": [a for a, _ in windows],
            "window_end": [b for _, b in windows],
        }
    )


def test_figures_are_the_counters_differences_between_the_scrapes_inside_each_window():
    # level 0 (2.5 .. 9.5 s: scrapes 3 .. 9): 10 drafts/s of K = 3, 0.8 and 0.5 of them accepted
    # at positions 0 and 1, 0.2 at 2; level 1 (10 .. 20 s): 20 drafts/s, all rejected
    rate = np.where(TS <= 10, 10.0, 20.0)
    drafts = np.concatenate([[0.0], np.cumsum(rate[1:])])
    before = np.minimum(drafts, 100.0)  # the drafts of the first 10 s
    spec = scrapes(
        drafts,
        3 * drafts,
        1.5 * before,
        0.8 * before,
        0.5 * before,
        0.2 * before,
    )
    out = level_speculation(spec, levels((2.5, 9.5), (10.0, 20.0)))
    first, second = out.to_dict("records")
    assert first["spec_drafts"] == 60.0  # scrapes 3 .. 9, no interpolation
    assert first["spec_acceptance_length"] == pytest.approx(2.5)
    assert first["spec_draft_acceptance_rate"] == pytest.approx(0.5)
    assert [first[spec_position_key(p)] for p in range(3)] == pytest.approx([0.8, 0.5, 0.2])
    assert first[UNKNOWN] == ""
    assert second["spec_acceptance_length"] == 1.0
    assert second["spec_draft_acceptance_rate"] == 0.0


def test_a_server_without_speculation_has_no_figures_not_zeros():
    plain = pd.DataFrame({"ts": TS, "running": 1.0, "spec_drafts": np.nan})
    metrics = levels((2.0, 9.0))
    assert level_speculation(plain, metrics) is None
    assert level_speculation(None, metrics) is None
    assert with_speculation(metrics, plain) is metrics
    assert speculation_findings("r", metrics) == []


def test_counters_that_went_back_make_the_level_unknown_never_negative():
    drafts = np.where(TS < 12, TS * 10, (TS - 12) * 10)  # a restart at 12 s: 110 -> 0
    spec = scrapes(drafts, 2 * drafts, drafts, drafts * 0.6, drafts * 0.4)
    metrics = levels((1.0, 8.0), (9.0, 16.0), (13.0, 20.0))
    out = level_speculation(spec, metrics)
    before, across, after = out.to_dict("records")
    assert before["spec_acceptance_length"] == pytest.approx(2.0) and before[UNKNOWN] == ""
    assert math.isnan(across["spec_acceptance_length"])
    assert math.isnan(across["spec_draft_acceptance_rate"])
    assert math.isnan(across[spec_position_key(0)])
    assert "spec_drafts went back between scrapes (at 12.0)" in across[UNKNOWN]
    assert after["spec_acceptance_length"] == pytest.approx(2.0) and after[UNKNOWN] == ""
    findings = speculation_findings("r1", with_speculation(metrics.assign(value=[1, 2, 3]), spec))
    assert findings == [
        "Run r1: speculative decoding figures unknown at 2: spec_drafts went back between "
        "scrapes (at 12.0): the server's counters were reset, a restart."
    ]


def test_a_position_counter_that_went_back_alone_is_caught_too():
    drafts = TS * 10
    position = np.where(TS < 5, TS * 8, TS * 8 - 50)
    out = level_speculation(scrapes(drafts, drafts, drafts, position), levels((1.0, 8.0)))
    assert "spec_accepted_pos_0 went back" in out[UNKNOWN][0]
    assert math.isnan(out["spec_acceptance_length"][0])


def test_a_window_without_two_scrapes_or_without_drafts_is_unknown():
    drafts = np.where(TS < 10, TS * 10, 90.0)
    out = level_speculation(scrapes(drafts, drafts, drafts), levels((3.2, 3.9), (11.0, 19.0)))
    assert out[UNKNOWN].tolist() == [
        "fewer than two scrapes inside the measured window",
        "no drafts verified in the measured window",
    ]
    assert out["spec_acceptance_length"].isna().all()


def test_the_scraper_reads_vllms_spec_decode_counters_and_their_positions():
    text = "\n".join(
        [
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 12.0',
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 36.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 10.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 3.0',
            'vllm:num_requests_running{engine="0",model_name="m"} 2.0',
        ]
    )
    values = parse_metrics(text + "\n", "m")
    assert (values["spec_drafts"], values["spec_draft_tokens"], values["spec_accepted_tokens"]) == (
        12.0,
        36.0,
        20.0,
    )
    assert [values[f"spec_accepted_pos_{p}"] for p in range(3)] == [10.0, 7.0, 3.0]
    plain = parse_metrics('vllm:num_requests_running{model_name="m"} 2.0\n', "m")
    assert math.isnan(plain["spec_drafts"]) and "spec_accepted_pos_0" not in plain


def test_a_real_vllms_spec_decode_exposition_is_read():
    path = os.path.join(
        os.path.dirname(__file__), "..", "data", "vllm_0.32.0_cpu_spec_decode_metrics.txt"
    )
    with open(path, encoding="utf-8") as fh:
        values = parse_metrics(fh.read(), "tiny-llama")
    assert (values["spec_drafts"], values["spec_draft_tokens"]) == (18.0, 45.0)
    assert values["spec_accepted_tokens"] == 45.0
    assert [values[f"spec_accepted_pos_{p}"] for p in range(3)] == [18.0, 15.0, 12.0]


def _run(tmp_path, **server) -> str:
    spec = SyntheticRun(
        levels=(4, 16),
        requests_per_level=40,
        warmup_requests=4,
        output_tokens=64,
        scrape_interval=0.25,
        server=ServerModel(**server),
    )
    return write_synthetic_run(str(tmp_path), spec)


def test_a_speculating_run_shows_its_figures_in_the_level_table_and_report_columns(tmp_path):
    measured = measure_run(_run(tmp_path, speculation=(0.9, 0.6, 0.3)))
    metrics = measured.meas.metrics
    assert metrics["spec_acceptance_length"].tolist() == pytest.approx([2.8, 2.8])
    assert metrics["spec_draft_acceptance_rate"].tolist() == pytest.approx([0.6, 0.6])
    assert metrics[spec_position_key(2)].tolist() == pytest.approx([0.3, 0.3])
    headers = [h for h, *_ in table_columns(metrics)]
    assert "accept len" in headers and "draft acc %" in headers
    assert "accept len" in format_level_table(metrics)
    assert "spec_acceptance_length" in measured.metrics  # what the report's tables read


def test_a_run_on_a_server_without_speculation_shows_no_speculation_columns(tmp_path):
    measured = measure_run(_run(tmp_path))
    metrics = measured.meas.metrics
    assert metrics["spec_acceptance_length"].isna().all()  # NaN: nothing, not 0
    headers = " ".join(h for h, *_ in table_columns(metrics))
    assert "accept len" not in headers and "draft acc" not in headers
    assert "accept len" not in format_level_table(metrics)
    present = lambda key: bool((metrics.get(key, pd.Series(dtype=float)) > 0).any())  # noqa: E731
    assert not {f.key for f in shown_in(REPORT, present)} & {"spec_acceptance_length"}
    assert not {f.key for f in shown_in(TABLE, present)} & {"spec_draft_acceptance_rate"}


def test_a_restart_mid_run_marks_its_level_unknown(tmp_path):
    before = measure_run(_run(tmp_path / "a", speculation=(0.8,)))
    assert before.meas.metrics[UNKNOWN].eq("").all()
    first = before.meas.metrics.iloc[0]
    restart = (first["window_start"] + first["window_end"]) / 2
    restart -= before.data.requests["start_ts"].min()  # the synthetic server's time 0
    path = _run(tmp_path / "b", speculation=(0.8,), spec_restart_s=restart)
    metrics = measure_run(path).meas.metrics
    assert "went back between scrapes" in metrics[UNKNOWN][0]
    assert math.isnan(metrics["spec_acceptance_length"][0])
    assert metrics["spec_acceptance_length"][1] == pytest.approx(1.8)
