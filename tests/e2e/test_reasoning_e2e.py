"""A reasoning model on the simulator: 200 reasoning tokens, then 56 answer tokens, a 50 ms
engine step (at --time-scale 0.1: 5 ms). The time to the first answer token is the TTFT plus
200 token gaps at every level, the reasoning and answer counts are the server's, and an SLO on
it binds where one on TTFT does not."""

from __future__ import annotations

import pytest
from support.runhelpers import client_flags, load_run_files, only_run_dir, run_vllm_load

from vllm_load.analysis.decisions.goodput import level_goodput
from vllm_load.analysis.levels.measure import measure_levels
from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.trace import read_trace
from vllm_load.slo import parse_slo

SCALE = 0.1
STEP = ("--step-base", "0.05", "--decode-cost", "0", "--prefill-cost", "0")


@pytest.mark.alone  # each request's TTFAT within 5 % of TTFT + 200 gaps: a fresh-clone CI
# (2026-11-26) read one 7.7 % over, its first answer chunk read 77 ms late beside another test
def test_time_to_first_answer_token_is_ttft_plus_the_reasoning_and_an_slo_binds_on_it(
    tmp_path,
):
    trace_path = str(tmp_path / "trace.jsonl")
    with SimulatorProcess(
        *STEP, "--time-scale", str(SCALE), "--reasoning-tokens", "200", "--trace", trace_path
    ) as sim:
        proc = run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--levels",
            "1,4",
            "--input-tokens",
            "128",
            "--output-tokens",
            "256",  # 200 reasoning, 56 answer: the answer's length is not what is judged
            "--requests-per-level",
            "3",
            "--warmup-requests",
            "1",
            "--slo",
            "ttfat_p99<=500ms",
            "--out",
            str(tmp_path),
            timeout=240,
        )
    assert "TTFAT p50 ms" in proc.stdout and "reasoning tok mean" in proc.stdout, proc.stdout
    requests, steps, _, _ = load_run_files(only_run_dir(tmp_path))
    ok = requests[requests["ok"] == 1]
    assert len(ok) >= 8
    assert (ok["completion_tokens"] == 256).all()
    assert (ok["reasoning_tokens"] == 200).all() and (ok["answer_tokens"] == 56).all()
    assert (ok["reasoning_source"] == "usage").all()
    measurement = measure_levels(requests, steps)
    metrics = measurement.metrics
    # every request, at every level: its TTFAT is its TTFT plus the span the simulator's own
    # trace has from its first token to its first answer token (200 steps of 5 ms, later where
    # the busy simulator's steps fired late: its record, not a tolerance, says by how much)
    # (within 5 % at each level where the run did not itself find its client busy: a late read
    # there dates a chunk late, and the run says so)
    assert set(ok["level"]) == {0, 1}
    trace = read_trace(trace_path)
    span = ok["request_id"].map(lambda rid: trace[rid].tokens[200] - trace[rid].tokens[0])
    print("the simulator's reasoning spans (s):", list(span.round(4)))
    flagged = client_flags(only_run_dir(tmp_path))
    print("levels the run flagged (tolerance not held there):", flagged)
    judged = ok[~ok["level"].isin(list(flagged))]
    expected = judged["ttft"] + span[judged.index]
    assert list(judged["ttfat"]) == pytest.approx(list(expected), rel=0.05)
    for _, level in metrics.iterrows():
        if int(level["level"]) not in flagged:
            thinking = span[ok["level"] == level["level"]].median()
            assert level["ttfat_p50"] == pytest.approx(level["ttft_p50"] + thinking, rel=0.05)
        assert level["reasoning_tokens_mean"] == 200 and level["answer_tokens_mean"] == 56
    # ~1 s to the first answer token, a few ms to the first token: one limit binds on one
    on_answer = level_goodput(requests, measurement, parse_slo(["ttfat_p99<=500ms"]))
    on_first = level_goodput(requests, measurement, parse_slo(["ttft_p99<=500ms"]))
    assert not on_answer["slo_met"].any() and on_first["slo_met"].all()
    assert set(on_answer["slo_binding"]) == {"ttfat_p99<=500ms"}
    if flagged:
        pytest.skip(f"TTFAT within 5 % not checked at the levels the run flagged: {flagged}")
