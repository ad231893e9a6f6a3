"""A disaggregated deployment's figures per level (`analysis.levels.disagg`) and its verdict
(`diagnosis.verdict.disagg_limit`): from the prefill and decode servers' scrapes."""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
from support.role_scrapes import role_scrapes

from vllm_load.analysis.diagnosis.facts import ServerFacts
from vllm_load.analysis.diagnosis.kinds import KINDS
from vllm_load.analysis.diagnosis.verdict import LevelEvidence, level_verdict, with_baseline
from vllm_load.analysis.levels.disagg import with_disagg
from vllm_load.figures import TABLE, disagg_columns, shown_in

LEVELS = pd.DataFrame(
    {"level": [0, 1], "value": [1.0, 8.0], "window_start": [10.0, 30.0], "window_end": [20.0, 40.0]}
)


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def prefill_scrapes() -> pd.DataFrame:
    # level 1 (10-20 s): 10 requests, 0.5 s of TTFT; level 2 (30-40 s): 20, 2 s
    return frame(
        [
            {"ts": 10.0, "ttft_sum": 0.0, "ttft_count": 0.0},
            {"ts": 20.0, "ttft_sum": 0.5, "ttft_count": 10.0},
            {"ts": 30.0, "ttft_sum": 0.5, "ttft_count": 10.0},
            {"ts": 40.0, "ttft_sum": 2.5, "ttft_count": 30.0},
        ]
    )


def decode_scrapes(kv_at_40: float = 2.4) -> pd.DataFrame:
    # level 1: 10 transfers of 10 ms, 2 MiB each; decode TTFT 30 ms (20 ms after the transfer)
    # level 2: 20 transfers, 2.0 s in all (100 ms each); decode TTFT 150 ms each
    mib = 2.0**20
    return frame(
        [
            {"ts": 10.0, "ttft_sum": 0.0, "ttft_count": 0.0, "kv_xfer_sum": 0.0,
             "kv_xfer_count": 0.0, "kv_bytes_sum": 0.0},
            {"ts": 20.0, "ttft_sum": 0.3, "ttft_count": 10.0, "kv_xfer_sum": 0.1,
             "kv_xfer_count": 10.0, "kv_bytes_sum": 20 * mib},
            {"ts": 30.0, "ttft_sum": 0.3, "ttft_count": 10.0, "kv_xfer_sum": 0.1,
             "kv_xfer_count": 10.0, "kv_bytes_sum": 20 * mib},
            {"ts": 40.0, "ttft_sum": 3.3, "ttft_count": 30.0, "kv_xfer_sum": 0.1 + 2.0,
             "kv_xfer_count": 30.0, "kv_bytes_sum": 60 * mib},
        ]
    )  # fmt: skip


def test_each_level_gets_the_transfer_and_ttft_split_from_the_roles_scrapes():
    out = with_disagg(LEVELS, prefill_scrapes(), decode_scrapes())
    first, second = out.to_dict("records")
    assert first["pd_prefill_ms"] == 50.0 and second["pd_prefill_ms"] == 100.0
    assert first["kv_transfers"] == 10 and first["kv_xfer_ms"] == 10.0
    assert second["kv_xfer_ms"] == 100.0
    assert first["pd_first_decode_ms"] == 20.0 and second["pd_first_decode_ms"] == 50.0
    assert first["kv_xfer_mib"] == 2.0
    assert first["kv_xfer_gbps"] == 20 * 2.0**20 / 0.1 / 1e9
    assert second["kv_xfer_gbps"] == 40 * 2.0**20 / 2.0 / 1e9
    assert first["pd_unknown"] == second["pd_unknown"] == ""


def test_a_deployment_without_the_roles_metrics_has_no_figures_not_zeros():
    assert with_disagg(LEVELS, None, None) is LEVELS
    no_kv = decode_scrapes().drop(columns=["kv_xfer_sum", "kv_xfer_count", "kv_bytes_sum"])
    no_kv = no_kv.assign(kv_xfer_sum=np.nan, kv_xfer_count=np.nan, kv_bytes_sum=np.nan)
    out = with_disagg(LEVELS, prefill_scrapes(), no_kv)  # a connector without NIXL's metrics
    assert out["pd_prefill_ms"].tolist() == [50.0, 100.0]
    for column in ("kv_xfer_ms", "kv_xfer_gbps", "kv_transfers", "pd_first_decode_ms"):
        assert out[column].isna().all(), column
    shown = {f.key for f in shown_in(TABLE, lambda key: key in out and (out[key] > 0).any())}
    assert "pd_prefill_ms" in shown and "kv_xfer_ms" not in shown
    assert not set(disagg_columns()) & {
        f.key for f in shown_in(TABLE, lambda key: key in LEVELS and (LEVELS[key] > 0).any())
    }


def test_a_counter_that_went_back_makes_the_level_unknown_not_negative():
    decode = decode_scrapes()
    decode.loc[3, "kv_xfer_count"] = 2.0  # the decode server restarted in level 2
    out = with_disagg(LEVELS, prefill_scrapes(), decode).to_dict("records")
    assert "kv_xfer_count went back" in out[1]["pd_unknown"]
    assert math.isnan(out[1]["kv_xfer_ms"]) and out[0]["kv_xfer_ms"] == 10.0


def verdict_of(rows: list[dict]):
    evidence = with_baseline([LevelEvidence.of(r) for r in rows])
    return level_verdict(evidence[1], evidence[0], ServerFacts({}), True)


def test_the_verdict_names_the_part_of_ttft_that_grew_most():
    out = with_disagg(LEVELS, prefill_scrapes(), decode_scrapes())
    rows = [{**r, "total_tok_per_s": 100.0} for r in out.to_dict("records")]
    verdict = verdict_of(rows)
    assert verdict.kind == "kv_transfer"
    assert "KV transfer 10.0 → 100.0 ms" in verdict.reason and "GB/s" in verdict.reason
    assert verdict.evidence["kv_transfer_ms"] == 100.0
    assert verdict.evidence["kv_transfer_ms_lowest"] == 10.0
    assert KINDS["kv_transfer"].nothing_to_prove  # tune --advice cannot change the deployment
    prefill_bound = [dict(r) for r in rows]
    prefill_bound[1].update(pd_prefill_ms=400.0, kv_xfer_ms=12.0)
    assert verdict_of(prefill_bound).kind == "prefill_side"
    decode_bound = [dict(r) for r in rows]
    decode_bound[1].update(pd_first_decode_ms=300.0, kv_xfer_ms=12.0)
    assert verdict_of(decode_bound).kind == "decode_side"
    advice = KINDS["decode_side"].advice
    assert advice is not None


def test_without_a_split_the_verdict_is_as_before():
    rows = [{"value": 1.0, "total_tok_per_s": 100.0}, {"value": 8.0, "total_tok_per_s": 110.0}]
    assert verdict_of(rows).kind == "undetermined"


def test_a_run_with_its_roles_scrapes_gets_the_figures_and_the_verdict(tmp_path):
    from vllm_load.analysis.measured_run import measure_run
    from vllm_load.run_format.files import role_metrics_csv
    from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run

    run_dir = write_synthetic_run(str(tmp_path), SyntheticRun(levels=(10, 50, 100, 200)))
    before = measure_run(run_dir).metrics
    assert before[list(disagg_columns())].isna().all().all()  # no roles scraped: no figures
    prefill, decode = role_scrapes(before, lambda level: 0.01 * (1 + level) ** 2)
    prefill.to_csv(os.path.join(run_dir, role_metrics_csv("prefill")), index=False)
    decode.to_csv(os.path.join(run_dir, role_metrics_csv("decode")), index=False)
    after = measure_run(run_dir).metrics
    assert after["pd_prefill_ms"].round(6).tolist() == [40.0] * 4
    assert after["kv_xfer_ms"].round(6).tolist() == [10.0, 40.0, 90.0, 160.0]
    assert after["pd_first_decode_ms"].round(6).tolist() == [15.0] * 4
    assert after["kv_xfer_mib"].round(6).tolist() == [4.0] * 4
