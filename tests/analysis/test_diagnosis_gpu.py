"""The GPUs' telemetry as evidence in the bottleneck verdict (issue 39, item 2): a busy GPU
supports `compute` and is named, an idle one rules it out, a run without telemetry is judged as
before; on hand-made levels (tests/analysis/test_diagnosis.py builds them the same way)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from vllm_load.analysis.diagnosis.facts import ServerFacts
from vllm_load.analysis.diagnosis.gpu_evidence import (
    BUSY,
    IDLE,
    SM_BUSY,
    SM_IDLE,
    UNCLEAR,
    UNKNOWN,
    UTIL_BUSY,
    UTIL_IDLE,
    GpuEvidence,
)
from vllm_load.analysis.diagnosis.series import diagnose_runs
from vllm_load.analysis.diagnosis.verdict import LevelEvidence, level_verdict
from vllm_load.analysis.series.level_curve import level_curve
from vllm_load.analysis.series.saturation import analyse

#: the batch doubles (4 -> 8) while throughput grows 11 % and every step takes twice as long:
#: the batch rule's `compute`
BELOW = dict(value=4.0, tok_per_s=90.0, batch=4.0, queued=0.0, kv_max=0.1, step_time=0.010)
PAST = dict(value=8.0, tok_per_s=100.0, batch=8.0, queued=0.0, kv_max=0.1, step_time=0.020)
BATCH_RULE = (
    "the batch grew 2.00x (4.0 → 8.0) but throughput only 1.11x, with nothing waiting; an engine "
    "step took 10.0 → 20.0 ms"
)


def judge(gpu_below: GpuEvidence, gpu: GpuEvidence):
    below = LevelEvidence(**BELOW, gpu=gpu_below)
    return level_verdict(LevelEvidence(**PAST, gpu=gpu), below, ServerFacts(), saturated=True)


def test_without_gpu_telemetry_the_verdict_is_the_batch_rules_word_for_word():
    verdict = judge(GpuEvidence(), GpuEvidence())
    assert verdict.kind == "compute"
    assert verdict.reason == BATCH_RULE
    assert not any(k.startswith("gpu") for k in verdict.evidence)


def test_a_busy_gpu_supports_compute_and_the_verdict_names_its_figures():
    verdict = judge(
        GpuEvidence(util=0.98, sm_active=0.91, power_w=612.0),
        GpuEvidence(util=0.99, sm_active=0.93, power_w=655.0),
    )
    assert verdict.kind == "compute"
    assert verdict.reason == (
        BATCH_RULE + "; the GPU was busy: SM active 91% → 93%, GPU util 98% → 99%, 655 W"
    )
    assert verdict.evidence["gpu_sm_active"] == 0.93
    assert verdict.evidence["gpu_util"] == 0.99 and verdict.evidence["gpu_power_w"] == 655.0


def test_an_idle_gpu_at_saturation_is_not_compute_whatever_the_batch_rule_says():
    # the batch doubled and steps took twice as long, but the SMs had work a third of the time
    verdict = judge(GpuEvidence(sm_active=0.30), GpuEvidence(util=0.97, sm_active=0.32))
    assert verdict.kind == "undetermined"
    assert verdict.reason.startswith(
        BATCH_RULE + f", yet the GPU was not busy (busy from {SM_BUSY:.0%} SM activity, idle "
        f"below {SM_IDLE:.0%}): SM active 30% → 32%, GPU util 97%. "
    )
    assert "Not compute" in verdict.reason
    assert verdict.evidence["gpu_sm_active"] == 0.32


def test_utilisation_alone_judges_where_sm_activity_was_not_recorded():
    busy = judge(GpuEvidence(util=0.95), GpuEvidence(util=0.99))
    assert busy.kind == "compute" and busy.reason.endswith("; the GPU was busy: GPU util 95% → 99%")
    idle = judge(GpuEvidence(util=0.40), GpuEvidence(util=0.35))
    assert idle.kind == "undetermined" and "GPU util 40% → 35%" in idle.reason
    assert f"busy from {UTIL_BUSY:.0%} GPU utilisation" in idle.reason
    assert "SM activity not recorded" in idle.reason


def test_figures_between_busy_and_idle_leave_the_batch_rule_standing_and_say_so():
    verdict = judge(GpuEvidence(), GpuEvidence(sm_active=0.65))
    assert verdict.kind == "compute"
    assert verdict.reason == (
        BATCH_RULE + "; the GPU figures neither confirm nor rule it out (busy from "
        f"{SM_BUSY:.0%} SM activity, idle below {SM_IDLE:.0%}): SM active 65%"
    )


def test_simulated_figures_are_named_simulated_in_the_verdict():
    verdict = judge(GpuEvidence(), GpuEvidence(util=0.99, simulated=True))
    assert verdict.kind == "compute"
    assert verdict.reason.endswith(
        "; the GPU was busy: GPU util 99% (SIMULATED by vllm-load sim, not a real GPU)"
    )


@pytest.mark.parametrize(
    "gpu, state",
    [
        (GpuEvidence(), UNKNOWN),
        (GpuEvidence(power_w=300.0), UNKNOWN),
        (GpuEvidence(sm_active=SM_BUSY), BUSY),
        (GpuEvidence(sm_active=SM_IDLE), UNCLEAR),
        (GpuEvidence(sm_active=SM_IDLE - 0.01, util=1.0), IDLE),  # SM activity is the finer figure
        (GpuEvidence(sm_active=SM_BUSY - 0.01, util=1.0), UNCLEAR),
        (GpuEvidence(util=UTIL_BUSY), BUSY),
        (GpuEvidence(util=UTIL_IDLE - 0.01), IDLE),
        (GpuEvidence(util=(UTIL_BUSY + UTIL_IDLE) / 2), UNCLEAR),
    ],
)
def test_the_gpu_state_reads_sm_activity_first_then_utilisation(gpu, state):
    assert gpu.state() == state


def test_a_busy_gpu_alone_does_not_settle_a_level_the_batch_rule_leaves_undetermined():
    # throughput doubled with the batch: no step got longer, whatever the GPU shows
    below = LevelEvidence(**{**BELOW, "tok_per_s": 50.0}, gpu=GpuEvidence(sm_active=0.9))
    past = LevelEvidence(**PAST, gpu=GpuEvidence(sm_active=0.95))
    verdict = level_verdict(past, below, ServerFacts(), saturated=True)
    assert verdict.kind == "undetermined"
    assert verdict.reason.endswith("; the GPU was busy: SM active 90% → 95%")


def test_other_limits_are_judged_as_before_whatever_the_gpu_shows():
    full = LevelEvidence(**{**PAST, "queued": 3.0, "kv_max": 0.97}, gpu=GpuEvidence(sm_active=0.2))
    verdict = level_verdict(full, LevelEvidence(**BELOW), ServerFacts(), saturated=True)
    assert verdict.kind == "kv_cache"
    below_knee = level_verdict(LevelEvidence(**PAST, gpu=GpuEvidence(sm_active=0.2)), None,
                               ServerFacts(), saturated=False)  # fmt: skip
    assert below_knee.kind == "not_saturated"


def _table(sm: list[float], util: list[float]) -> pd.DataFrame:
    """A run's per-level table: the batch grows with the users, throughput stops at 16."""
    users = [1.0, 4.0, 16.0, 64.0]
    tok = [100.0, 390.0, 1000.0, 1010.0]
    return pd.DataFrame(
        {
            "level": range(4),
            "value": users,
            "run_id": "r",
            "success_rate": 1.0,
            "total_tok_per_s": tok,
            "req_per_s": [t / 100 for t in tok],
            "input_tok_per_s": [t / 2 for t in tok],
            "output_tok_per_s": [t / 2 for t in tok],
            "server_batch": users,
            "server_queued": 0.0,
            "server_kv_usage_max": 0.2,
            "server_step_time": [0.01, 0.0103, 0.025, 0.063],  # lengthening with the batch
            "gpu_util_mean": util,
            "gpu_sm_active_mean": sm,
            "gpu_power_mean": math.nan,
        }
    )


def _diagnose(table: pd.DataFrame, run: dict):
    curve = level_curve([table])
    return diagnose_runs([(run, table)], curve, analyse(curve))


SIM_RUN = {"gpu_metrics": {"sources": [{"source": "x", "samples": 9, "simulated": True}]}}
REAL_RUN = {"gpu_metrics": {"sources": [{"source": "x", "samples": 9, "simulated": False}]}}


def test_a_series_knee_on_a_busy_gpu_is_compute_with_the_gpu_named_simulated_where_it_was():
    table = _table(sm=[0.2, 0.5, 0.91, 0.93], util=[0.6, 0.9, 0.99, 0.99])
    diagnosis, (per_run,) = _diagnose(table, SIM_RUN)
    assert diagnosis.kind == "compute", diagnosis.sentence
    assert "the GPU was busy: SM active 91% → 93%, GPU util 99% → 99% (SIMULATED" in (
        diagnosis.sentence
    )
    assert per_run[64.0]["kind"] == "compute" and "SIMULATED" in per_run[64.0]["reason"]
    real, _ = _diagnose(table, REAL_RUN)
    assert real.kind == "compute" and "SIMULATED" not in real.sentence


def test_a_series_whose_gpu_idles_past_the_knee_is_not_called_compute():
    table = _table(sm=[0.1, 0.2, 0.3, 0.3], util=[0.3, 0.4, 0.45, 0.45])
    diagnosis, (per_run,) = _diagnose(table, REAL_RUN)
    assert diagnosis.kind == "undetermined", diagnosis.sentence
    assert "SM activity, idle below 50%): SM active 20% → 30%, GPU util 40% → 45%. Not" in (
        diagnosis.sentence
    )
    assert {v["kind"] for u, v in per_run.items() if u >= 16} == {"undetermined"}
    no_gpu = table.assign(gpu_util_mean=math.nan, gpu_sm_active_mean=math.nan)
    unchanged, _ = _diagnose(no_gpu, {})
    assert unchanged.kind == "compute" and "GPU" not in unchanged.sentence
