"""A trace replay read over time (`analysis.replay`): window figures against hand-computed ones,
the server's throughput beside the client's, the lateness verdict, the prefix-cache line, and
runs that replayed no trace."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from vllm_load.analysis.levels.server_side import read_server_metrics
from vllm_load.analysis.replay.plan import replay_levels
from vllm_load.analysis.replay.read import read_replays
from vllm_load.analysis.replay.verdicts import PrefixCacheCheck, lateness, prefix_cache
from vllm_load.analysis.replay.windows import window_length
from vllm_load.run_format.load import analysis_columns, load_run
from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run
from vllm_load.run_format.synthetic_trace import TraceRequest, TraceRun, write_trace_run
from vllm_load.slo import parse_slo

#: five requests (times from the replay's start; TTFT and E2E from their schedule)
HAND = (
    TraceRequest(at=0.0, prompt_tokens=100, output_tokens=11, ttft=0.2, e2e=1.2, queued=0.001),
    TraceRequest(at=0.5, prompt_tokens=200, output_tokens=5, ttft=0.4, e2e=2.4, queued=0.002),
    TraceRequest(at=1.0, prompt_tokens=50, output_tokens=8, ttft=0.3, e2e=0.5, ok=False),
    TraceRequest(at=2.5, prompt_tokens=100, output_tokens=11, ttft=0.1, e2e=1.1, queued=0.003),
    TraceRequest(at=3.0, prompt_tokens=300, output_tokens=11, ttft=0.3, e2e=0.8),
)


def replays(run_dir: str, slo=(), window=None):
    data = load_run(run_dir, analysis_columns())
    server = read_server_metrics(os.path.join(run_dir, "server_metrics.csv")).frame
    return read_replays(
        data.requests, data.steps, data.run, server, parse_slo(list(slo)), window, data.streams
    )


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("trace"))
    return write_trace_run(base, TraceRun(HAND, cap=4, scrape_interval=0.1, trace_start=30.0))


def test_window_figures_are_the_hand_computed_ones(hand):
    (replay,) = replays(hand, window=2.0)
    first, second = replay.windows
    assert (first.start_s, first.end_s) == (0.0, 2.0)
    assert second.start_s == 2.0 and second.end_s == pytest.approx(3.8)  # the last request's end
    assert (first.trace_s, second.trace_s) == (30.0, 32.0)
    # due: 0.0, 0.5, 1.0 | 2.5, 3.0; ended: 1.2, 1.5 (failed) | 2.9, 3.6, 3.8
    assert (first.scheduled, first.ended, first.failed) == (3, 2, 1)
    assert (second.scheduled, second.ended, second.failed) == (2, 3, 0)
    # in flight from sending (schedule + queued_s) to end: 1.199 + 1.498 + 0.5 over 2 s ...
    assert first.in_flight == pytest.approx((1.199 + 1.498 + 0.5) / 2)
    # ... 0.9 + 1.097 + 0.8 over 1.8 s
    assert second.in_flight == pytest.approx((0.9 + 1.097 + 0.8) / 1.8)
    # tokens served inside: request 0 whole (100 + 11), request 1's prompt (200) and first token,
    # and 1.1 s of its 2 s decode of 4 tokens; the failure counts nothing
    assert first.output_tok_per_s == pytest.approx((11 + 1 + 4 * 1.1 / 2) / 2)
    assert first.total_tok_per_s == pytest.approx((100 + 11 + 200 + 1 + 2.2) / 2)
    # request 1's last 0.9 s of decode, requests 3 and 4 whole
    assert second.output_tok_per_s == pytest.approx((1.8 + 11 + 11) / 1.8)
    assert second.total_tok_per_s == pytest.approx((1.8 + 100 + 11 + 300 + 11) / 1.8)
    # latencies of the successful requests due in the window (linear percentiles)
    assert first.ttft_p50 == pytest.approx(0.3) and first.ttft_p99 == pytest.approx(0.398)
    assert first.e2e_p50 == pytest.approx(1.8) and first.e2e_p99 == pytest.approx(2.388)
    assert second.ttft_p50 == pytest.approx(0.2) and second.e2e_p50 == pytest.approx(0.95)
    # ITL from the merged histograms (0.5 % buckets): 10 gaps of 0.1 s and 4 of 0.5 s ...
    assert first.itl_p50 == pytest.approx(0.1, rel=0.006)
    assert first.itl_p99 == pytest.approx(0.5, rel=0.006)
    # ... then 10 of 0.1 s and 10 of 0.05 s (nearest rank: the 10th of 20 is 0.05 s)
    assert second.itl_p50 == pytest.approx(0.05, rel=0.006)
    assert second.itl_p99 == pytest.approx(0.1, rel=0.006)
    # how late the requests due in the window were sent: 0, 1 and 2 ms -> p99 1.98 ms
    assert first.late_p99 == pytest.approx(0.00198)


def test_the_whole_replay_is_one_level_measured_whole(hand):
    (replay,) = replays(hand, slo=["ttft<=350ms"])
    t = replay.totals
    assert (t.requests, t.ok, t.failed) == (5, 4, 1)
    assert t.window_s == pytest.approx(3.8)
    assert t.total_tok_per_s == pytest.approx((111 + 205 + 111 + 311) / 3.8)
    assert t.output_tok_per_s == pytest.approx(38 / 3.8)
    assert t.req_per_s == pytest.approx(4 / 3.8)
    assert t.in_flight == pytest.approx((1.199 + 2.398 + 0.5 + 1.097 + 0.8) / 3.8)
    assert t.percentiles["ttft_p50"] == pytest.approx(0.25)
    assert t.percentiles["e2e_p99"] == pytest.approx(np.percentile([1.2, 2.4, 1.1, 0.8], 99))
    # ttft<=350ms: requests 0, 3 and 4 are good (1 is too slow, 2 failed); 80 % succeeded,
    # short of the 99 % attainment
    assert (t.slo.good, t.slo.good_share, t.slo.met) == (3, 0.6, False)
    assert t.slo.goodput_req_per_s == pytest.approx(3 / 3.8)
    assert "success (80.0% of requests succeeded)" in t.slo.bound_by
    assert "3 of the replay's requests were good (60.0%)" in t.slo.sentence()


def test_the_server_s_throughput_is_compared_window_by_window(tmp_path, hand):
    (agrees,) = replays(hand, window=2.0)
    first, second = agrees.windows
    # between the window's first and last scrapes (every 0.1 s, from the replay's start)
    assert first.server.compare_s == pytest.approx(2.0)
    assert second.server.compare_s == pytest.approx(1.8)
    for w in agrees.windows:
        span = w.server
        assert span.why_not == ""
        assert span.server_total_tok_per_s == pytest.approx(span.client_total_tok_per_s)
        assert span.server_output_tok_per_s == pytest.approx(span.client_output_tok_per_s)
        assert (span.total_ratio, span.output_ratio) == (pytest.approx(1.0), pytest.approx(1.0))
    assert agrees.totals.server.output_ratio == pytest.approx(1.0)
    line = agrees.server_line().text
    assert (
        "client/server 1.000 generated, 1.000 in all; per window, over the 2 of 2 windows" in line
    )
    # a server that counted 10 % more (other traffic) shows in every window
    more = write_trace_run(
        str(tmp_path), TraceRun(HAND, cap=4, scrape_interval=0.1, server_scale=1.1)
    )
    (other,) = replays(more, window=2.0)
    for w in other.windows:
        assert w.server.output_ratio == pytest.approx(1 / 1.1)
        assert w.server.total_ratio == pytest.approx(1 / 1.1)
    assert f"client/server {1 / 1.1:.3f} generated" in other.server_line().text


def test_a_window_the_scrapes_cannot_resolve_is_not_compared(tmp_path):
    # scrapes every 1 s: a 2 s window holds fewer than 4 scrape intervals
    run = write_trace_run(str(tmp_path), TraceRun(HAND, cap=4, scrape_interval=1.0))
    (replay,) = replays(run, window=2.0)
    for w in replay.windows:
        assert np.isnan(w.server.output_ratio) and "< 4 × 1 s scrape intervals" in w.server.why_not
    assert replay.server_line().text == (
        "Throughput against the server's /metrics is not compared: over the whole replay, "
        "window 3.00 s between scrapes < 4 × 1 s scrape intervals (a smaller --metrics-interval "
        "makes it comparable)."
    )


def test_without_server_metrics_nothing_is_compared(tmp_path):
    run = write_trace_run(str(tmp_path), TraceRun(HAND, cap=4))
    (replay,) = replays(run, window=2.0)
    assert all(np.isnan(w.server.server_total_tok_per_s) for w in replay.windows)
    assert replay.server_line() is None
    assert not any("/metrics" in line.text for line in replay.lines())


def test_a_client_that_kept_to_the_schedule_says_so_with_its_figures(hand):
    (replay,) = replays(hand)
    late = replay.lateness
    # queued 1, 2, 0, 3, 0 ms: p99 2.96 ms
    assert late.kept_up and late.p99 == pytest.approx(0.00296) and late.late == 0
    assert late.sentence().startswith(
        "The client kept up with the trace: p99 send lateness 3.0 ms (p50 1.0 ms, max 3.0 ms) "
        "over 5 requests, within 5.0 ms of schedule."
    )


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"level": 0, "worker": "w1", "ok": 1, **row} for row in rows],
        columns=["level", "worker", "ok", "start_ts", "end_ts", "queued_s"],
    )


def test_a_late_client_says_it_could_not_keep_up_and_why():
    # cap 1: request 1 is due while request 0 holds the only slot (sent 0.5 s late, when it
    # ended); request 2 is 20 ms late with the slot free
    requests = _frame(
        [
            {"start_ts": 0.0, "end_ts": 1.0, "queued_s": 0.0},
            {"start_ts": 0.5, "end_ts": 2.0, "queued_s": 0.5},
            {"start_ts": 3.0, "end_ts": 3.5, "queued_s": 0.02},
        ]
    )
    late = lateness(requests, 0, cap=1)
    assert late.kept_up is False
    assert (late.late, late.at_cap) == (2, 1)
    assert late.p99 == pytest.approx(0.02 + 0.98 * 0.48)
    text = late.sentence()
    assert text.startswith(
        "The client could not keep up with the trace: p99 send lateness 490.4 ms"
    )
    assert "2 requests (66.7%) were sent more than 5.0 ms late" in text
    assert "late: 1 due while the cap of 1 requests in flight was taken" in text
    assert "1 with a slot free (a busy load process: see client health)." in text
    assert "hypervisor" not in text  # nothing recorded a stall by the host


def test_late_sends_the_host_stalled_are_told_apart_from_the_clients_own():
    # 100 requests 0.1 s apart, each done before the next: three sent 8 ms late while the host
    # took their CPU (stolen_s > 0), one 6 ms late without (a busy process); the rest on time
    rows = [
        {"start_ts": 0.1 * i, "end_ts": 0.1 * i + 0.05, "queued_s": 0.0, "stolen_s": np.nan}
        for i in range(100)
    ]
    for i in (10, 40, 70):
        rows[i].update(queued_s=0.008, stolen_s=0.01)
    rows[90].update(queued_s=0.006, stolen_s=0.0)
    requests = _frame(rows).assign(stolen_s=[r["stolen_s"] for r in rows])
    late = lateness(requests, 0, cap=8)
    assert late.kept_up is False and (late.late, late.at_cap, late.stolen) == (4, 0, 3)
    # the 6 ms send alone over the limit: 1 % of 0.06 ms at the 99th percentile of 100
    assert late.p99_without_steal == pytest.approx(0.00006)
    text = late.sentence()
    assert (
        "4 requests (4.0%) were sent more than 5.0 ms late: 3 with a slot free while the "
        "machine's hypervisor took their load process's CPU (steal in /proc/stat" in text
    )
    assert "1 with a slot free (a busy load process: see client health)." in text
    assert text.endswith(
        "Counting the 3 sends the host stalled as on time, p99 send lateness is 0.1 ms, "
        "within 5.0 ms."
    )
    # without a record of the host's steal, the same sends are the client's own
    unknown = lateness(requests.drop(columns="stolen_s"), 0, cap=8)
    assert unknown.stolen == 0 and "hypervisor" not in unknown.sentence()


def test_the_cap_is_shared_among_the_load_processes():
    # cap 2 over two processes: each holds one slot; w2's request is due while w2's own slot
    # is taken, though the whole client has one request in flight below the cap of 2
    requests = _frame(
        [
            {"worker": "w1", "start_ts": 0.0, "end_ts": 1.0, "queued_s": 0.0},
            {"worker": "w2", "start_ts": 0.0, "end_ts": 2.0, "queued_s": 0.0},
            {"worker": "w2", "start_ts": 1.5, "end_ts": 3.0, "queued_s": 0.5},
        ]
    )
    late = lateness(requests, 0, cap=2)
    assert (late.late, late.at_cap, late.processes) == (1, 1, 2)
    assert "the cap of 2 requests in flight (1 per process) was taken" in late.sentence()


def test_a_run_without_sending_times_says_lateness_is_unknown():
    requests = _frame([{"start_ts": 0.0, "end_ts": 1.0, "queued_s": np.nan}])
    late = lateness(requests, 0, cap=4)
    assert late.kept_up is None and "is unknown" in late.sentence()


def _server(hits: float, queries: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ts": [0.0, 10.0],
            "prefix_cache_hits": [0.0, hits],
            "prefix_cache_queries": [0.0, queries],
        }
    )


def test_the_prefix_cache_line_compares_the_server_with_the_trace():
    within = prefix_cache(_server(9_800, 40_000), 0.0, 10.0, 10_000, 40_960)
    assert within.server_rate == pytest.approx(0.245) and within.predicted_rate == pytest.approx(
        10_000 / 40_960
    )
    assert within.difference == pytest.approx(-0.02) and within.agrees
    assert within.sentence() == (
        "Prefix cache: the server's prefix cache hit 9,800 of the 40,000 prompt tokens it looked "
        "up over the replay (24.5%, vllm:prefix_cache_hits / queries); the trace's hash_ids imply "
        "10,000 cached of 40,960 prompt tokens (24.4%): hits -2.0% from the prediction, within 5%."
    )
    short = prefix_cache(_server(8_500, 40_000), 0.0, 10.0, 10_000, 40_960)
    assert (
        short.agrees is False and "hits -15.0% from the prediction, beyond 5%" in short.sentence()
    )
    # the counters cover the replay's part that was scraped: said when it is not all of it
    assert "covered only part" in prefix_cache(_server(1, 2), -1.0, 10.0, 1, 2).sentence()


def test_the_prefix_cache_line_without_one_side():
    unknown = prefix_cache(None, 0.0, 10.0, 10_000, 40_960)
    assert unknown.agrees is None
    assert "the server's prefix-cache counters were not scraped" in unknown.sentence()
    assert "10,000 cached of 40,960 prompt tokens (24.4%)" in unknown.sentence()
    no_hashes = prefix_cache(_server(100, 1_000), 0.0, 10.0, None, 1_000)
    assert "the trace implies no reuse to compare with" in no_hashes.sentence()
    assert prefix_cache(None, 0.0, 10.0, None, 1_000) is None
    assert PrefixCacheCheck(5.0, 10.0, 0, 10, True).agrees is False  # hits where none implied


def test_the_replay_reads_the_server_s_prefix_cache_over_its_span(tmp_path):
    # requests 1 and 3 find 512 and 1,024 tokens in the cache; the trace implied 1,600
    requests = tuple(
        TraceRequest(at=float(i), prompt_tokens=1024, server_hits=hits)
        for i, hits in enumerate((0, 512, 0, 1024))
    )
    run = write_trace_run(
        str(tmp_path), TraceRun(requests, scrape_interval=0.5, predicted_cached_tokens=1_600)
    )
    (replay,) = replays(run)
    check = replay.prefix_cache
    assert (check.server_hits, check.server_queries) == (1536.0, 4096.0)
    assert check.predicted_hits == 1600 and check.prompt_tokens == 4096 and check.covered
    assert check.difference == pytest.approx(1536 / 1600 - 1) and check.agrees


def test_window_length_is_a_round_twelfth_unless_asked():
    assert window_length(61.3) == 5.0
    assert window_length(5.0) == 1.0  # never under a second
    assert window_length(700.0) == 30.0
    assert window_length(7200.0) == 600.0
    assert window_length(100.0, asked=2.5) == 2.5
    assert window_length(1000.0, asked=0.01) == 2.0  # at most 500 windows


def test_the_window_length_the_run_recorded_is_used_unless_the_report_gives_one(tmp_path):
    run = write_trace_run(str(tmp_path), TraceRun(HAND, settings={"trace_window": 1.0}))
    (recorded,) = replays(run)
    assert recorded.window_s == 1.0 and len(recorded.windows) == 4
    assert recorded.window_rule == "1 s windows as asked"
    (given,) = replays(run, window=2.0)
    assert given.window_s == 2.0 and len(given.windows) == 2


def test_requests_missing_against_the_schedule_are_said(tmp_path):
    run = write_trace_run(str(tmp_path), TraceRun(HAND, scheduled=8, outcome="interrupted"))
    (replay,) = replays(run)
    first = replay.lines()[0]
    assert first.warn and first.text.startswith(
        "5 of the 8 requests the replay scheduled were recorded (the run's outcome: interrupted)"
    )


def test_runs_that_replayed_no_trace_have_no_replay(tmp_path):
    run = write_synthetic_run(str(tmp_path), SyntheticRun(levels=(2, 4), requests_per_level=10))
    assert replays(run) == []  # written before levels had a kind
    data = load_run(run, analysis_columns())
    steps = data.steps.assign(kind="concurrency", value=data.steps["users"])
    assert replay_levels(steps) == []
    assert read_replays(data.requests, steps, data.run) == []


def test_a_replay_after_another_level_counts_only_its_own_requests(tmp_path):
    # a concurrency level's request runs 1 s into the replay: the server served its tokens and
    # held it in flight then, but it was not due in the replay
    earlier = (
        TraceRequest(at=-3.0, prompt_tokens=100, output_tokens=11, ttft=0.5, e2e=1.5),
        TraceRequest(at=-1.5, prompt_tokens=100, output_tokens=11, ttft=0.5, e2e=2.5),
    )
    run = write_trace_run(
        str(tmp_path), TraceRun(HAND, cap=4, earlier=earlier, scrape_interval=0.1)
    )
    (replay,) = replays(run, window=2.0)
    assert replay.level.level == 1
    first, second = replay.windows
    assert (first.scheduled, first.ended, first.failed) == (3, 2, 1)
    assert (replay.totals.requests, replay.totals.ok) == (5, 4)
    assert replay.lateness.requests == 5 and replay.lateness.p99 == pytest.approx(0.00296)
    # its last 1 s in flight, and its last 1 s of decode (10 tokens over 2 s): 5 tokens
    assert first.in_flight == pytest.approx((1.199 + 1.498 + 0.5 + 1.0) / 2)
    assert first.output_tok_per_s == pytest.approx((11 + 1 + 4 * 1.1 / 2 + 5) / 2)
    assert first.server.output_ratio == pytest.approx(1.0)
    assert first.ttft_p50 == pytest.approx(0.3)  # the replay's own requests only
    assert trace_indexes(run) == {0: [None, None], 1: [0, 1, 2, 3, 4]}


def trace_indexes(run: str) -> dict:
    data = load_run(run)
    frame = data.requests.sort_values("start_ts")
    return {
        int(level): [None if pd.isna(v) else int(v) for v in group["trace_index"]]
        for level, group in frame.groupby("level")
    }


def test_a_request_dated_before_the_replay_started_counts_in_its_first_window(tmp_path):
    # a load process whose clock runs 10 ms behind dates its first request before the level
    early = (TraceRequest(at=-0.01, prompt_tokens=100, output_tokens=11, ttft=0.2, e2e=1.2),)
    run = write_trace_run(str(tmp_path), TraceRun(early + HAND[1:], cap=4))
    (replay,) = replays(run, window=2.0)
    assert [w.scheduled for w in replay.windows] == [3, 2]
    assert sum(w.ended for w in replay.windows) == replay.totals.requests == 5


def test_a_replay_whose_requests_all_failed_says_so_without_latencies(tmp_path):
    failed = tuple(TraceRequest(at=0.5 * i, ok=False, e2e=0.2) for i in range(4))
    run = write_trace_run(str(tmp_path), TraceRun(failed, cap=4))
    (replay,) = replays(run)
    line = replay.summary_line()
    assert line.warn and "4 requests over 1.7 s, 0 succeeded and 4 failed" in line.text
    assert "TTFT p50 -, p99 -; ITL p99 -; E2E p99 -;" in line.text
    assert [w.failed for w in replay.windows] == [2, 2]  # 1 s windows; ends at 0.2, 0.7 | 1.2, 1.7
