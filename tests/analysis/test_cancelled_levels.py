"""A request the client closed on purpose (--cancel-share, error `cancelled`) is counted in its
level's `cancelled`: in no latency percentile of the completed requests, no failure, no failed
category and no reason to call a level failed."""

from __future__ import annotations

import numpy as np
from support.level_frames import make_requests, make_steps, ok

from vllm_load.analysis.levels.measure import measure_levels
from vllm_load.analysis.levels.table import error_counts
from vllm_load.analysis.series.failures import level_problems
from vllm_load.run.live import LiveStats
from vllm_load.run_format.records import COLUMNS


def cancelled(level, users, start, end, chunks):
    """A stream closed after `chunks` tokens: its first token came early, and it ended early."""
    return {
        "level": level,
        "users": users,
        "start_ts": start,
        "end_ts": end,
        "ok": 0,
        "ttft": 0.01,
        "n_chunks": chunks,
        "error": "cancelled",
        "cancel_after": f"{chunks}tok",
    }


def level_with_cancellations():
    rows = [ok(0, 4, 99.5, 100.5)]  # warm-up
    rows += [ok(0, 4, 100.0 + i, 103.0 + i, ttft=1.0) for i in range(6)]
    rows += [cancelled(0, 4, 100.5 + i, 100.6 + i, 3) for i in range(3)]
    rows.append(
        {
            "level": 0,
            "users": 4,
            "start_ts": 101.2,
            "end_ts": 102.0,
            "ok": 0,
            "status": 503,
            "error": "http_status",
        }
    )
    steps = make_steps([(0, 4, 99.0, 120.0, 1, 11, 600.0, "target_reached")])
    return make_requests(rows), steps


def test_a_cancelled_request_is_counted_apart_from_successes_and_failures():
    requests, steps = level_with_cancellations()
    measurement = measure_levels(requests, steps)
    level = measurement.metrics.iloc[0]
    assert (level.measured, level.ok, level.failed, level.cancelled) == (10, 6, 1, 3)
    assert level.success_rate == 6 / 7  # of the requests that were not cancelled
    # the cancelled requests' 0.01 s TTFT and 0.1 s E2E are in no percentile
    for stat in ("p50", "p90", "p99"):
        assert np.isclose(level[f"ttft_{stat}"], 1.0) and np.isclose(level[f"e2e_{stat}"], 3.0)
    counts = error_counts(requests)
    assert list(counts["error"]) == ["http_status"]


def test_a_level_whose_only_misses_are_cancellations_has_no_problem():
    requests, steps = level_with_cancellations()
    requests = requests[requests["error"] != "http_status"].reset_index(drop=True)
    steps = make_steps([(0, 4, 99.0, 120.0, 1, 10, 600.0, "target_reached")])
    measurement = measure_levels(requests, steps)
    assert measurement.metrics.iloc[0].failed == 0
    assert level_problems(measurement) == []


def test_the_live_table_counts_cancelled_requests_on_their_own():
    requests, _ = level_with_cancellations()
    live = LiveStats()
    live.level_started(0, 4, at=100.0)
    for row in (
        requests.astype(object).where(requests.notna(), None)[list(COLUMNS)].itertuples(index=False)
    ):
        live.add(tuple(row))
    level = live.level(0)
    assert (level.ok, level.failed, level.cancelled) == (7, 1, 3)
    assert level.as_dict()["success_pct"] == round(100 * 7 / 8, 2)


def test_cancellations_after_the_last_success_are_no_streak_of_a_lost_server():
    import pandas as pd

    from vllm_load.run_format.records import CANCELLED
    from vllm_load.server import loss

    assert loss.CANCELLED == CANCELLED  # (the server package's own copy of the category)
    rows = pd.DataFrame(
        {
            "level": [0] * 7,
            "users": [4] * 7,
            "end_ts": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
            "ok": [1, 0, 0, 0, 0, 0, 0],
            "error": ["", *[CANCELLED] * 6],
        }
    )
    assert loss.streak_in(rows) is None
    rows.loc[6, "error"] = "connect"
    streak = loss.streak_in(rows)
    assert streak is not None and streak.by_error == {"connect": 1}


def test_a_cancelled_request_is_neither_good_nor_late_for_the_slos():
    from vllm_load.analysis.decisions.goodput import level_goodput
    from vllm_load.slo import parse_slo

    requests = make_requests(
        [
            ok(0, 2, 100.0, 102.0, ttft=0.5),
            ok(0, 2, 100.0, 102.0, ttft=0.6),
            ok(0, 2, 102.0, 104.0, ttft=0.5),
            cancelled(0, 2, 102.0, 102.2, 4),
        ]
    )
    steps = make_steps([(0, 2, 100.0, 104.5, 0, 4, 600.0, "target_reached")])
    row = level_goodput(requests, measure_levels(requests, steps), parse_slo(["ttft<=1s"])).iloc[0]
    assert row.slo_good == 3 and row.slo_good_share == 1.0 and row.slo_met == 1.0
