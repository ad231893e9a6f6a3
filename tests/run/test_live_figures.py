"""The live per-level table shows the figures declared for it (`figures.LIVE`): a reasoning
model's TTFAT and reasoning tokens once a level has had reasoning, never without; a figure
declared in a test is kept running and shown without the live code being edited."""

from __future__ import annotations

import pytest

from vllm_load import figures
from vllm_load.figures import PerRequest
from vllm_load.run.live import LiveStats
from vllm_load.run_format.histogram import LogHistogram
from vllm_load.run_format.records import RequestRecord
from vllm_load.web.columns import extended_tables, table_columns

#: the live table's figures before reasoning, as the web UI has always had them
PLAIN = [
    "req_per_s",
    "total_tok_per_s",
    "output_tok_per_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "success_pct",
]
REASONING = ["ttfat_p50_ms", "ttfat_p99_ms", "reasoning_tokens_mean"]


def row(level, start, ttft=0.1, reasoning=0, ok=1, out=64, user_class="ClosedLoopUser"):
    """A request whose first `reasoning` tokens were reasoning, 20 ms apart: its first answer
    token came `reasoning` gaps after its first token."""
    ttfat = ttft + 0.02 * reasoning
    return RequestRecord(
        request_id="x",
        worker="w",
        level=level,
        users=4,
        endpoint="chat",
        stream=1,
        start_ts=start,
        end_ts=start + 2.0,
        ttft=ttft if ok else None,
        e2e=2.0,
        tpot=None,
        itl_mean=None,
        itl_p50=None,
        itl_p90=None,
        itl_p99=None,
        itl_max=0.03 if ok else None,
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
        ttfat=ttfat if ok else None,
        reasoning_tokens=reasoning if ok else None,
        answer_tokens=out - reasoning if ok else None,
    ).to_row()


def keys(snapshot) -> list[str]:
    return [key for key, _ in snapshot["figures"]]


def test_without_reasoning_the_live_table_has_no_ttfat_columns():
    live = LiveStats()
    live.level_started(0, 4, at=1000.0)
    for i in range(10):
        live.add(row(0, 1000.0 + i))  # ttfat = ttft, no reasoning tokens
    snap = live.snapshot(now=1015.0)
    assert keys(snap) == PLAIN
    (level,) = snap["levels"]
    assert level["reasoning_tokens_mean"] == 0  # computed, so that its absence is known
    headers = [header for _, header in table_columns(snap["figures"])["levels"]]
    assert "TTFAT p99 (ms)" not in headers and "TTFT p99 (ms)" in headers


def test_with_reasoning_the_live_table_shows_ttfat_and_reasoning_tokens():
    """Level 0 of a plain model, level 1 of a reasoning one (50 reasoning tokens): the columns
    are there once a level had reasoning, with each level's figures."""
    live = LiveStats()
    live.level_started(0, 4, at=1000.0)
    for i in range(10):
        live.add(row(0, 1000.0 + i))
    assert keys(live.snapshot(now=1015.0)) == PLAIN
    live.level_started(1, 8, at=1020.0)
    for i in range(20):
        live.add(row(1, 1020.0 + i, ttft=0.2, reasoning=50))
    live.add(row(1, 1040.0, ok=0))  # a failure: counted, and nothing of it in the figures
    snap = live.snapshot(now=1045.0)
    assert keys(snap) == PLAIN[:5] + REASONING[:2] + PLAIN[5:8] + REASONING[2:] + PLAIN[8:]
    plain, reasoning = snap["levels"]
    assert reasoning["ttft_p50_ms"] == pytest.approx(200, rel=0.01)
    assert reasoning["ttfat_p50_ms"] == pytest.approx(200 + 50 * 20, rel=0.01)
    assert reasoning["ttfat_p99_ms"] == pytest.approx(1200, rel=0.01)
    assert reasoning["reasoning_tokens_mean"] == 50
    assert reasoning["finished"] == 21 and reasoning["success_pct"] == 95.24
    assert plain["ttfat_p50_ms"] == pytest.approx(plain["ttft_p50_ms"], rel=0.01)
    assert plain["reasoning_tokens_mean"] == 0
    # the persona rows carry them too, and both tables (ours, Locust's) name the columns
    (persona,) = [p for p in snap["personas"] if p["level"] == 1]
    assert persona["ttfat_p99_ms"] == pytest.approx(1200, rel=0.01)
    columns = table_columns(snap["figures"])
    assert ("ttfat_p99_ms", "TTFAT p99 (ms)") in columns["levels"]
    assert ("ttfat_p99_ms", "TTFAT p99 (ms)") in columns["personas"]
    llm, by_persona, by_target = extended_tables(columns)
    assert by_target["key"] == "llm_targets" and by_target["structure"][2]["key"] == "target"
    assert {"key": "ttfat_p50_ms", "title": "TTFAT p50 (ms)"} in llm["structure"]
    assert by_persona["key"] == "llm_personas"
    assert [c["key"] for c in by_persona["structure"]][:4] == [
        "level",
        "users",
        "user_class",
        "finished",
    ]


def test_a_figure_declared_live_is_kept_running_and_shown(monkeypatch):
    """A per-request figure declared in the test (each request's longest gap, as a level p99)
    is in the live table, from its requests.csv column, without the live code being edited."""
    longest = PerRequest("itl_max", "longest gap", "s", "the longest gap", live=("p99",))
    monkeypatch.setattr(figures, "PER_REQUEST", [*figures.PER_REQUEST, longest])
    live = LiveStats()
    live.level_started(0, 4, at=1000.0)
    for i in range(5):
        live.add(row(0, 1000.0 + i))
    snap = live.snapshot(now=1010.0)
    assert keys(snap) == PLAIN[:-1] + ["itl_max_p99_ms", "success_pct"]
    assert ("itl_max_p99_ms", "Longest gap p99 (ms)") in snap["figures"]
    assert snap["levels"][0]["itl_max_p99_ms"] == pytest.approx(30, rel=0.01)


def test_a_live_figure_the_view_cannot_keep_is_refused_when_it_starts(monkeypatch):
    tokens = PerRequest("answer_tokens", "answer tok", "tokens", "answer", live=("p99",))
    monkeypatch.setattr(figures, "PER_REQUEST", [*figures.PER_REQUEST[:-1], tokens])
    with pytest.raises(ValueError, match="answer_tokens_p99 is marked live, .*answer_tokens_mean"):
        LiveStats()
