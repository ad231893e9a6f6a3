"""Live per-level figures for the web UI: counts, rates, percentiles, token series."""

import pytest

from vllm_load.run.live import LiveStats
from vllm_load.rundir.histogram import LogHistogram
from vllm_load.rundir.records import RequestRecord


def row(level, start, e2e, ok=1, ttft=0.1, out=10, user_class="ClosedLoopUser"):
    return RequestRecord(
        request_id="x",
        worker="w",
        level=level,
        users=4,
        endpoint="chat",
        stream=1,
        start_ts=start,
        end_ts=start + e2e,
        ttft=ttft if ok else None,
        e2e=e2e,
        tpot=None,
        itl_mean=None,
        itl_p50=None,
        itl_p90=None,
        itl_p99=None,
        itl_max=None,
        itl_hist=LogHistogram.of([0.02] * (out - 1)).format() if ok else "",
        n_chunks=out if ok else 0,
        chunks_merged=0,
        chunk_marks="",
        prompt_tokens=100 if ok else None,
        completion_tokens=out if ok else None,
        requested_prompt_tokens=100,
        requested_completion_tokens=out,
        ok=ok,
        status=200 if ok else 500,
        error="" if ok else "http_status",
        error_message="",
        user_class=user_class,
    ).to_row()


def test_level_figures_and_series():
    live = LiveStats()
    live.level_started(0, 4)
    for i in range(9):
        live.add(row(0, 1000.0 + i, 1.0))
    live.add(row(0, 1009.0, 1.0, ok=0))
    snap = live.snapshot(now=1012.0)
    assert snap["current_level"] == 0 and snap["current_users"] == 4
    level = snap["levels"][0]
    assert level["finished"] == 10 and level["success_pct"] == 90.0
    assert level["req_per_s"] == pytest.approx(10 / 10.0)  # first start 1000, last end 1010
    assert level["output_tok_per_s"] == pytest.approx(90 / 10.0)
    assert level["ttft_p50_ms"] == pytest.approx(100, rel=0.01)
    assert level["itl_p99_ms"] == pytest.approx(20, rel=0.01)
    series = snap["series"]
    assert series[-1]["t"] == 1011
    by_second = {p["t"]: p for p in series}
    # 5-second smoothing: seconds 1001..1005 each finished one 10-token request
    assert by_second[1005]["output_tok_per_s"] == pytest.approx(50 / 5)
    assert by_second[1005]["total_tok_per_s"] == pytest.approx(5 * 110 / 5)


def test_personas_are_broken_down_only_when_there_are_several():
    live = LiveStats()
    live.level_started(0, 4)
    live.add(row(0, 1000.0, 1.0))
    assert live.snapshot(now=1002.0)["personas"] == []
    for i in range(3):
        live.add(row(0, 1001.0 + i, 2.0, ttft=0.5, out=20, user_class="Rag"))
    live.add(row(0, 1004.0, 2.0, ok=0, user_class="Rag"))
    personas = {p["user_class"]: p for p in live.snapshot(now=1010.0)["personas"]}
    assert set(personas) == {"ClosedLoopUser", "Rag"}
    rag = personas["Rag"]
    assert rag["finished"] == 4 and rag["success_pct"] == 75.0 and rag["level"] == 0
    assert rag["ttft_p50_ms"] == pytest.approx(500, rel=0.01)
    assert personas["ClosedLoopUser"]["finished"] == 1
    assert live.snapshot(now=1010.0)["levels"][0]["finished"] == 5  # the level: both together
