"""Per-level figures over the measured window, checked against numbers worked out by hand."""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest
from support.level_frames import make_requests, make_steps, ok

from vllm_load.analysis.levels.hist import hist_percentiles, merge_hist_column
from vllm_load.analysis.levels.measure import level_metrics, measure_levels
from vllm_load.analysis.levels.table import format_level_table
from vllm_load.run_format.histogram import LogHistogram, bucket_value


@pytest.fixture
def two_levels():
    requests = make_requests(
        [
            # level 0: W = 1, K = 3, ended by target
            ok(0, 2, 100.0, 101.0, itl="50:100"),  # a: warm-up (first to finish)
            ok(0, 2, 100.5, 102.0, completion=8, ttft=0.3, itl="100:3;200:1"),  # b: measured
            {
                "level": 0,
                "users": 2,
                "start_ts": 101.0,
                "end_ts": 103.0,
                "ok": 0,
                "status": 500,
                "error": "http_status",
            },  # c: measured failure
            ok(
                0, 2, 102.0, 104.0, prompt=None, completion=None, ttft=0.5, itl="100:1;300:4"
            ),  # d: no usage
            ok(0, 2, 103.0, 105.0),  # e: after W + K: not measured
            # level 1: W = 1, K = 3, cut by its time cap at 115
            ok(1, 3, 110.0, 111.0),  # f: warm-up
            ok(1, 3, 110.0, 113.0),  # g: measured
            ok(1, 3, 111.0, 116.0),  # h: finished after the level ended
        ]
    )
    # arrival order is not time order
    requests = requests.sample(frac=1.0, random_state=3).reset_index(drop=True)
    steps = make_steps(
        [
            (0, 2, 100.0, 110.0, 1, 4, 600.0, "target_reached"),
            (1, 3, 110.0, 115.0, 1, 4, 5.0, "time_cap"),
        ]
    )
    return requests, steps


def test_measured_window_counts_and_throughput(two_levels):
    m = level_metrics(*two_levels).set_index("level")
    l0 = m.loc[0]
    assert (l0.started, l0.warmup, l0.measured, l0.ok, l0.failed) == (5, 1, 3, 2, 1)
    assert l0.finished == 5
    assert l0.success_rate == pytest.approx(2 / 3)
    # window: end of the 1st finished (101) to the last measured end (104)
    assert (l0.window_start, l0.window_end, l0.window_s) == (101.0, 104.0, 3.0)
    # work done inside [101, 104] by every successful request, any level (window_rates):
    # requests: a 0, b (102-101)/1.5, d 1, e (104-103)/2
    assert l0.req_per_s == pytest.approx((2 / 3 + 1 + 0.5) / 3)
    # prompt tokens, spread over start -> first chunk: a, b before 101; d [102, 102.5] and
    # e [103, 103.1] inside, with 10 each (d has no usage: its requested counts, flagged)
    assert l0.input_tok_per_s == pytest.approx(20 / 3)
    # output: b's 7 after its first chunk (100.8) over [100.8, 102], 1 s inside; d's 10 inside;
    # e's first (103.1) and 9 over [103.1, 105], 0.9 s inside; a's all before 101
    output = 7 * 1 / 1.2 + 10 + 1 + 9 * 0.9 / 1.9
    assert l0.output_tok_per_s == pytest.approx(output / 3)
    assert l0.total_tok_per_s == pytest.approx((20 + output) / 3)
    assert l0.usage_missing == 1
    assert l0.prompt_exact_share == 1.0 and l0.completion_exact_share == 0.0
    # in flight during [101, 104]: b 1 s, c 2 s, d 2 s, e 1 s -> 6 s / 3 s
    assert l0.achieved_concurrency == pytest.approx(2.0)
    assert l0.stop_reason == "target_reached"


def test_level_cut_by_time_cap_measures_its_first_to_start_and_flags_those_that_ended_after_it(
    two_levels,
):
    l1 = level_metrics(*two_levels).set_index("level").loc[1]
    # by start: f (of the two started at 110, the first to end) is the warm-up, g and h are
    # measured; h ended at 116, after the cap at 115: measured and flagged, not dropped
    assert (l1.started, l1.finished, l1.measured, l1.ok, l1.measured_after_end) == (3, 2, 2, 2, 1)
    # the window ends at the level's last finish before it was cut
    assert (l1.window_start, l1.window_end) == (111.0, 113.0)
    # inside [111, 113]: g 2 s of 3 and h 2 s of 5; f ended at 111
    assert l1.req_per_s == pytest.approx((2 / 3 + 0.4) / 2)
    # g: 9 tokens over [110.1, 113], 2 s inside; h: prefill [111, 111.1] (10), first chunk at
    # 111.1, 9 over [111.1, 116], 1.9 s inside. h finished after the level: its work still counts
    output = 9 * 2 / 2.9 + 1 + 9 * 1.9 / 4.9
    assert l1.total_tok_per_s == pytest.approx((10 + output) / 2)
    # in flight during [111, 113]: g 2 s, h 2 s
    assert l1.achieved_concurrency == pytest.approx(2.0)


def test_latency_percentiles_over_successful_measured_requests(two_levels):
    l0 = level_metrics(*two_levels).set_index("level").loc[0]
    # E2E of b and d: 1.5 and 2.0, linear interpolation between them
    assert l0.e2e_p50 == pytest.approx(1.75)
    assert l0.e2e_p90 == pytest.approx(1.95)
    assert l0.e2e_p99 == pytest.approx(1.995)
    assert l0.ttft_p50 == pytest.approx(0.4)
    # ITL: b and d merged = {100: 4, 200: 1, 300: 4}; the warm-up's bucket 50 is left out
    assert l0.itl_p50 == pytest.approx(bucket_value(200))  # rank ceil(4.5) = 5
    assert l0.itl_p90 == pytest.approx(bucket_value(300))  # rank ceil(8.1) = 9
    assert l0.itl_p99 == pytest.approx(bucket_value(300))
    assert math.isnan(level_metrics(*two_levels).set_index("level").loc[1].itl_p50)


def test_no_warmup_window_starts_at_level_start():
    requests = make_requests([ok(0, 1, 50.0, 52.0), ok(0, 1, 52.0, 54.0), ok(0, 1, 54.0, 56.0)])
    steps = make_steps([(0, 1, 49.0, 57.0, 0, 2, 600.0, "target_reached")])
    m = level_metrics(requests, steps).iloc[0]
    assert (m.window_start, m.window_end, m.measured) == (49.0, 54.0, 2)
    assert m.total_tok_per_s == pytest.approx(40 / 5)
    assert m.achieved_concurrency == pytest.approx(4 / 5)  # 2 + 2 s in flight over 5 s


def test_a_slow_or_failed_request_among_the_first_to_start_is_measured():
    """Survivorship: a level's measured requests are its first to start after the warm-up, not
    its first to finish; a slow one that ends after many later ones is measured, and so is a
    failure, while the window (and throughput) stays the W-th to (W + K)-th finish."""
    rows = [ok(0, 2, 100.0 + i * 0.01, 100.5 + i * 0.01) for i in range(2)]  # warm-up
    rows.append(ok(0, 2, 100.50, 110.0, ttft=9.0))  # measured: a 9 s TTFT
    rows.append({**ok(0, 2, 100.51, 103.0), "ok": 0, "error": "timeout_stall", "ttft": None})
    rows += [ok(0, 2, 101.0 + i * 0.5, 101.5 + i * 0.5) for i in range(2)]  # measured, fast
    rows += [ok(0, 2, 102.0 + i * 0.5, 102.5 + i * 0.5) for i in range(10)]  # load after them
    steps = make_steps([(0, 2, 100.0, 110.1, 2, 6, 600.0, "target_reached")])
    m = level_metrics(make_requests(rows), steps).iloc[0]
    assert (m.measured, m.ok, m.failed, m.measured_after_end) == (4, 3, 1, 0)
    assert m.ttft_p99 > 8.0  # the slow request is in the percentiles
    assert m.e2e_p50 == pytest.approx(0.5)  # the two fast ones and the slow one: 0.5, 0.5, 9.5
    # finishes by time: 100.5, 100.51 (warm-up), 101.5, 102.0, 102.5, 103.0 (the failure)
    assert (m.window_start, m.window_end) == (100.51, 103.0)


def test_fewer_than_w_finished_has_no_window():
    requests = make_requests([ok(0, 4, 10.0, 11.0)])
    steps = make_steps([(0, 4, 10.0, None, 2, 12, 600.0, None)])
    m = level_metrics(requests, steps).iloc[0]
    assert m.measured == 0 and m.warmup == 1
    assert math.isnan(m.window_s) and math.isnan(m.total_tok_per_s) and math.isnan(m.success_rate)


def test_steps_rewritten_twice_or_missing_a_level():
    requests = make_requests(
        [
            ok(0, 2, 10.0, 11.0),
            ok(0, 2, 10.0, 12.0),
            ok(1, 4, 20.0, 21.0),
            ok(1, 4, 20.0, 22.0),
            ok(1, 4, 20.5, 23.0),
        ]
    )
    steps = make_steps(
        [(0, 2, 9.0, None, 1, 3, 600.0, None), (0, 2, 10.0, None, 1, 3, 600.0, None)]
    )
    m = level_metrics(requests, steps).set_index("level")
    assert list(m.index) == [0, 1]
    assert m.loc[0, "measured"] == 1 and m.loc[0, "window_s"] == pytest.approx(1.0)
    # level 1 comes from its requests, with the other level's W and K
    assert m.loc[1, "users"] == 4 and m.loc[1, "measured"] == 2
    assert (m.loc[1, "window_start"], m.loc[1, "window_end"]) == (21.0, 23.0)


def test_empty_run_and_table():
    requests = make_requests([])
    steps = make_steps([(0, 2, 9.0, None, 1, 3, 600.0, None)])
    m = level_metrics(requests, steps)
    assert len(m) == 1 and m.iloc[0].measured == 0
    assert format_level_table(m).splitlines()[2].split()[0] == "2"
    assert format_level_table(m.iloc[0:0]) == ""


def test_format_level_table(two_levels):
    text = format_level_table(level_metrics(*two_levels))
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["users", "achieved", "started", "measured", "req/s"]
    assert "E2E p99 s" in lines[0] and "success %" in lines[0]
    first = lines[2].split()
    assert first[:4] == ["2", "2.0", "5", "3"]  # users, achieved, started, measured
    assert first[4] == "0.72" and first[-1] == "66.7"
    assert not first[3].endswith("~")  # 3 measured is not fewer than 2 users


def test_the_table_flags_a_level_that_measured_fewer_requests_than_it_had_users(two_levels):
    requests, steps = two_levels
    metrics = level_metrics(requests, steps)
    metrics.loc[metrics["level"] == 1, ["users", "value"]] = 1000.0  # 2 measured, of 1,000 users
    lines = format_level_table(metrics).splitlines()
    assert lines[2].split()[3] == "3" and lines[3].split()[3] == "2~"
    assert lines[4].startswith("~ fewer measured requests than users")
    assert lines[-1] == "  1,000 users: 2 measured of 1,000 users"
    assert len({len(line) for line in lines[:4]}) == 1  # fixed width


def test_vectorised_histograms_match_loghistogram():
    rng = random.Random(7)
    texts, groups, reference = [], [], [LogHistogram(), LogHistogram(), LogHistogram()]
    for _ in range(300):
        gaps = [rng.lognormvariate(-4, 0.7) for _ in range(rng.randint(0, 30))]
        hist = LogHistogram.of(gaps)
        g = rng.randrange(3)
        texts.append(hist.format() if gaps else None)
        groups.append(g)
        reference[g].merge(hist)
    counts = merge_hist_column(pd.Series(texts, dtype="string"), np.array(groups), 3)
    qs = (1, 50, 90, 99, 100)
    got = hist_percentiles(counts, qs)
    for g in range(3):
        assert counts[g].sum() == reference[g].total
        assert list(got[g]) == pytest.approx([reference[g].percentile(q) for q in qs])


def test_malformed_histogram_is_an_error():
    with pytest.raises(ValueError):
        merge_hist_column(pd.Series(["1:2;x:3"], dtype="string"), np.array([0]), 1)
    with pytest.raises(ValueError):
        merge_hist_column(pd.Series(["1:2;3"], dtype="string"), np.array([0]), 1)


def test_measurement_keeps_histograms_and_measured_rows(two_levels):
    meas = measure_levels(*two_levels)
    assert meas.itl_counts.shape[0] == 2 and meas.itl_counts[0].sum() == 9
    assert sorted(meas.measured[meas.measured.level == 0].e2e) == [1.5, 2.0]


def _waves(
    users: int,
    n_waves: int,
    duration: float = 2.0,
    ttft: float = 0.2,
    prompt: int = 100,
    completion: int = 50,
    offset: float = 0.0,
) -> list[dict]:
    """A closed loop whose `users` requests all start together and finish together, wave after wave."""
    rows = []
    for wave in range(n_waves):
        t = 1000.0 + offset + wave * duration
        rows += [
            ok(
                0,
                users,
                t + u * 1e-4,
                t + duration + u * 1e-4,
                prompt=prompt,
                completion=completion,
                ttft=ttft,
            )
            for u in range(users)
        ]
    return rows


@pytest.mark.parametrize("warmup,target", [(10, 30), (8, 24), (12, 28), (3, 19)])
def test_throughput_does_not_depend_on_where_the_window_edges_fall_in_a_wave(warmup, target):
    """8 users finishing 8 at a time: W = 10, K = 20 spans two waves; counting the 20 requests
    that finish in it read 25 % high on a real vLLM. The work done inside the window does not."""
    users, duration = 8, 2.0
    requests = make_requests(_waves(users, 6, duration))
    steps = make_steps([(0, users, 1000.0, 1012.0, warmup, target, 600.0, "target_reached")])
    m = level_metrics(requests, steps).iloc[0]
    assert m.req_per_s == pytest.approx(users / duration, rel=1e-3)
    assert m.output_tok_per_s == pytest.approx(users * 50 / duration, rel=1e-3)
    assert m.input_tok_per_s == pytest.approx(users * 100 / duration, rel=1e-3)
    assert m.achieved_concurrency == pytest.approx(users, rel=1e-3)


def test_unmeasured_neighbours_and_in_flight_requests_count_their_work_inside_the_window():
    """Requests of the level after the measured ones (the last level's drain) and of the level
    before still did work inside the window: it counts, as the server counted it."""
    rows = [
        ok(0, 1, 100.0, 104.0, prompt=0, completion=41, ttft=0.0),  # spans the whole window
        ok(0, 1, 100.0, 101.0),
        ok(0, 1, 101.0, 102.0),
    ]
    requests = make_requests(rows)
    steps = make_steps([(0, 1, 100.0, 102.0, 1, 2, 600.0, "target_reached")])
    m = level_metrics(requests, steps).iloc[0]
    assert (m.window_start, m.window_end) == (101.0, 102.0)
    # the long request: its first token at 100.0, the other 40 over [100, 104], 1 s inside;
    # the measured one: all 10 output tokens (its first at 101.1)
    assert m.output_tok_per_s == pytest.approx(40 / 4 + 10)


def test_chunk_marks_place_a_stalled_streams_tokens_where_they_came():
    """A stream that stalls (other requests' prefills) gets its tokens in bursts: its chunk marks
    put them there, where spreading them evenly from first chunk to end would not."""
    from vllm_load.analysis.levels.window_rates import RequestSpans, work_in_window
    from vllm_load.client.sse import chunk_marks

    # 17 chunks: 8 in the first second after the first chunk, none for 10 s, 8 in the last second
    t0 = 100.0
    times = [t0 + 1 + i / 8 for i in range(9)] + [t0 + 12 + i / 8 for i in range(1, 9)]
    marks = chunk_marks(times, t0)
    assert marks.split(";")[0] == "1000.0" and len(marks.split(";")) == 17
    spans = RequestSpans.build([t0], [1.0], [t0 + 13.0], [0], [17], marks=[marks])
    stall = work_in_window(spans, t0 + 2.5, t0 + 11.5)
    # nothing came during the stall: only the one chunk whose segment spans it is spread over it
    assert stall.output_tokens < 1.0
    assert work_in_window(spans, t0, t0 + 2.0).output_tokens == pytest.approx(9.0)  # first + 8
    even = RequestSpans.build([t0], [1.0], [t0 + 13.0], [0], [17])
    assert work_in_window(even, t0 + 2.5, t0 + 11.5).output_tokens == pytest.approx(16 * 9 / 12)
    assert chunk_marks(times[:1], t0) == ""


def test_chunk_marks_rounded_past_the_requests_end_count_nothing_after_it():
    """Marks are kept to 0.1 ms: the last ones may read a few µs after the request's end, and a
    window may start exactly there (the W-th request's end). They belong to the request's life."""
    from vllm_load.analysis.levels.window_rates import RequestSpans, work_in_window

    spans = RequestSpans.build(
        [100.0],
        [0.0056],
        [100.01219],
        [0],
        [16],
        marks=["5.6;5.6;6.9;7.2;8.5;8.9;10.3;10.6;12.2;12.2;12.2"],
    )
    assert work_in_window(spans, 100.01219, 101.0).output_tokens == 0.0


def test_a_window_weighs_whole_lives_as_it_weighs_them_segment_by_segment():
    """`work_in_window` takes every share of a request whose life is inside the window as 1
    instead of weighing it: its sums equal weighing every request that meets the window, to the
    last bit, with window edges on starts and ends, lives of zero length, non-streamed requests,
    requests without marks and a mark missing amid others (a field that was not a number)."""
    from vllm_load.analysis.levels.window_rates import (
        ChunkMarks,
        RequestSpans,
        _work_per_request,
        work_in_window,
    )
    from vllm_load.run_format.stream_columns import MarkTable

    rng = np.random.default_rng(3)
    n = 3000
    start = np.round(rng.uniform(0.0, 100.0, n), 1)  # on a 0.1 s grid: edges fall on them
    life = np.round(rng.exponential(5.0, n), 1)
    life[::40] = 0.0
    end = start + life
    ttft = np.round(life * rng.uniform(0.0, 0.5, n), 2)
    ttft[::7] = life[::7]  # non-streamed: the first chunk at the end
    marks = np.full((n, 17), np.nan)
    for i in range(n):
        if i % 5 and life[i] > 0:
            k = rng.integers(2, 18)
            marks[i, :k] = np.sort(rng.uniform(ttft[i], life[i], k)) * 1000.0
    marks[::97, 3] = np.nan  # a hole amid the marks
    prompt, completion = rng.integers(1, 3000, n), rng.integers(0, 600, n)
    windows = [(10.0, 20.0), (start[5], end[9]), (0.0, 200.0), (end[3], end[3] + 0.1)]
    # marks as floats, and to 0.1 ms as a run writes them (kept as whole tenths)
    for table in (MarkTable(marks), MarkTable.of(np.round(marks, 1))):
        spans = RequestSpans.build(
            start, ttft, end, prompt, completion, chunk_marks=ChunkMarks.of(table)
        )
        for a, b in windows:
            near = np.flatnonzero((spans.start <= b) & (spans.end >= a))
            weighed = np.zeros((3, n))
            weighed[:, near] = _work_per_request(spans.take(near), a, b)
            work = work_in_window(spans, a, b)
            assert (work.requests, work.prompt_tokens, work.output_tokens) == tuple(
                float(w.sum()) for w in weighed
            )
