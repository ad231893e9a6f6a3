"""A reasoning model on the simulator: 200 reasoning tokens, then 56 answer tokens, a 50 ms
engine step (at --time-scale 0.1: 5 ms). The time to the first answer token is the TTFT plus
200 token gaps at every level, the reasoning and answer counts are the server's, and an SLO on
it binds where one on TTFT does not."""

from __future__ import annotations

import numpy as np
import pytest
from support.runhelpers import client_flags, load_run_files, only_run_dir, run_vllm_load

from vllm_load.analysis.decisions.goodput import level_goodput
from vllm_load.analysis.levels.client_side import as_floats, read_client_health
from vllm_load.analysis.levels.measure import measure_levels
from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.trace import read_trace
from vllm_load.slo import parse_slo

SCALE = 0.1
STEP = ("--step-base", "0.05", "--decode-cost", "0", "--prefill-cost", "0")


TOLERANCE = 0.05  # a request's TTFAT within 5 % of its TTFT plus the simulator's reasoning span


def client_lateness_s(run_dir: str, start: float, end: float) -> float:
    """The longest the run's client recorded being late over [start, end] (epoch seconds): the
    largest event-loop lag, or run-queue wait, of the health samples whose intervals overlap it.
    A read is late by at most that much (a fresh-clone CI, 2026-11-26, read a first answer
    chunk 77 ms late beside another test)."""
    health = read_client_health(f"{run_dir}/client_health.csv").frame
    figures = []
    for _, samples in health.sort_values("ts").groupby("worker"):
        ts = as_floats(samples, "ts")
        interval = np.diff(ts, prepend=np.nan)  # each sample covers from the one before
        waited = as_floats(samples, "runqueue_wait_ms_per_s") * interval
        over = (ts >= start) & ~(ts - interval > end)  # the first: from when the probe began
        lag = as_floats(samples, "loop_lag_max_ms")
        figures += [x / 1000 for x in (*lag[over], *waited[over]) if x == x]
    return max(figures, default=0.0)


def excused_misses(ok, span, run_dir: str, flagged: dict) -> dict[float, str]:
    """{level: why} for the requests whose TTFAT misses TTFT + `span` by more than `TOLERANCE`:
    how far, and how late the run's client recorded itself meanwhile; fails where neither the
    run flagged the request's level (`flagged`: `client_flags`) nor the client's recorded
    lateness covers the excess (a defect, not the host)."""
    excused: dict[float, str] = {}
    for idx, req in ok.iterrows():
        expected = req["ttft"] + span[idx]
        excess = abs(req["ttfat"] - expected) - TOLERANCE * expected
        if excess <= 0:
            continue
        first = req["start_ts"] + req["ttft"]
        late = client_lateness_s(run_dir, first, req["start_ts"] + req["ttfat"])
        why = (
            f"request {req['request_id']} (level {req['level']:g}): TTFAT {req['ttfat'] * 1000:.1f}"
            f" ms against {expected * 1000:.1f} ms ± {TOLERANCE:.0%}, {excess * 1000:.1f} ms over;"
            f" the client's recorded lateness meanwhile {late * 1000:.1f} ms"
        )
        if req["level"] in flagged:
            why += f"; the run flagged the level: {flagged[req['level']]}"
        assert late >= excess or req["level"] in flagged, why
        excused[req["level"]] = (
            f"{excused[req['level']]}; {why}" if req["level"] in excused else why
        )
    return excused


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
    run_dir = only_run_dir(tmp_path)
    requests, steps, _, _ = load_run_files(run_dir)
    ok = requests[requests["ok"] == 1]
    assert len(ok) >= 8
    assert (ok["completion_tokens"] == 256).all()
    assert (ok["reasoning_tokens"] == 200).all() and (ok["answer_tokens"] == 56).all()
    assert (ok["reasoning_source"] == "usage").all()
    measurement = measure_levels(requests, steps)
    metrics = measurement.metrics
    # every request, at every level: its TTFAT is its TTFT plus the span the simulator's own
    # trace has from its first token to its first answer token (200 steps of 5 ms, later where
    # the busy simulator's steps fired late: its record, not a tolerance, says by how much),
    # within 5 %; a request off by more is excused (the tolerance skipped, saying why) only where
    # the run says its client was late: it flagged the level (a late read dates a chunk late),
    # or its client recorded itself late meanwhile by as much as the excess (its health
    # samples: event-loop lag, run-queue wait); any other miss fails
    assert set(ok["level"]) == {0, 1}
    trace = read_trace(trace_path)
    span = ok["request_id"].map(lambda rid: trace[rid].tokens[200] - trace[rid].tokens[0])
    print("the simulator's reasoning spans (s):", list(span.round(4)))
    flagged = client_flags(run_dir)
    print("levels the run flagged (a miss of the tolerance excused there):", flagged)
    excused = excused_misses(ok, span, run_dir, flagged)
    for _, level in metrics.iterrows():
        thinking = span[ok["level"] == level["level"]].median()
        expected = level["ttft_p50"] + thinking
        # a median off by more holds only where one of its requests was excused above
        if level["ttfat_p50"] != pytest.approx(expected, rel=TOLERANCE):
            assert level["level"] in excused, (level["ttfat_p50"], expected, excused)
        assert level["reasoning_tokens_mean"] == 200 and level["answer_tokens_mean"] == 56
    # ~1 s to the first answer token, a few ms to the first token: one limit binds on one
    on_answer = level_goodput(requests, measurement, parse_slo(["ttfat_p99<=500ms"]))
    on_first = level_goodput(requests, measurement, parse_slo(["ttft_p99<=500ms"]))
    assert not on_answer["slo_met"].any() and on_first["slo_met"].all()
    assert set(on_answer["slo_binding"]) == {"ttfat_p99<=500ms"}
    if excused:
        print("TTFAT not held within 5 %, the run says why:", excused)
        pytest.skip(f"TTFAT within 5 % not held where the run says its client was late: {excused}")
