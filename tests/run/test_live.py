"""Live per-level figures for the web UI: counts, rates, percentiles, token series.

The series' tokens/s come from the load processes' running counts of the tokens received
(`LiveStats.streamed`), the rest from the finished requests' rows.
"""

import pytest

from vllm_load.client.endpoint import RequestSpec
from vllm_load.client.sse import SseMeter
from vllm_load.client.streamed import StreamedTokens
from vllm_load.run.live import LiveStats
from vllm_load.run.live_series import FIGURES, PERSONA_FIGURES
from vllm_load.run_format.histogram import LogHistogram
from vllm_load.run_format.records import RequestRecord


def row(level, start, e2e, ok=1, ttft=0.1, out=10, user_class="ClosedLoopUser", target=""):
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
        target=target,
    ).to_row()


def streamed(live, process, at, prompt, output, user_class="ClosedLoopUser"):
    """One report of a process's tokens received so far (`client.streamed.StreamedTokens`)."""
    live.streamed(process, at, {user_class: [float(prompt), float(output)]})


def test_level_figures_and_series():
    live = LiveStats()
    live.level_started(0, 4, at=1000.0)
    for i in range(9):
        live.add(row(0, 1000.0 + i, 1.0))
    live.add(row(0, 1009.0, 1.0, ok=0))
    for i in range(11):  # 100 prompt and 10 output tokens a second, reported every second
        streamed(live, "w", 1000.0 + i, 100 * i, 10 * i)
    snap = live.snapshot(now=1012.0)
    assert snap["current_level"] == 0 and snap["current_users"] == 4
    level = snap["levels"][0]
    assert level["finished"] == 10 and level["success_pct"] == 90.0
    assert level["req_per_s"] == pytest.approx(10 / 10.0)  # first start 1000, last end 1010
    assert level["output_tok_per_s"] == pytest.approx(90 / 10.0)
    assert level["ttft_p50_ms"] == pytest.approx(100, rel=0.01)
    assert level["itl_p99_ms"] == pytest.approx(20, rel=0.01)
    series = snap["series"]
    assert series["step"] == 1 and series["window"] == 5
    # points up to now - 2 s (the settle time), from the second after the level's mark
    assert series["t"][-1] == 1010
    by_second = dict(zip(series["t"], zip(series["output_tok_per_s"], series["total_tok_per_s"])))
    # a 5-second window: the window before 1006 (1001..1005) received 5 x (10 + 100) tokens
    assert by_second[1006] == (pytest.approx(50 / 5), pytest.approx(5 * 110 / 5))
    assert by_second[1001] == (pytest.approx(10 / 5), pytest.approx(110 / 5))  # the first second


def test_several_targets_are_broken_down_one_row_per_target_and_level():
    live = LiveStats()
    live.level_started(0, 4)
    live.add(row(0, 1000.0, 1.0))
    assert live.snapshot(now=1002.0)["targets"] == []  # one target: no rows
    a, b = "http://127.0.0.1:8001", "http://127.0.0.1:8002"
    for i in range(3):
        live.add(row(0, 1001.0 + i, 1.0, ttft=0.1, target=a))
        live.add(row(0, 1001.0 + i, 2.0, ttft=0.4, target=b))
    live.add(row(0, 1005.0, 0.01, ok=0, target=b))
    targets = {t["target"]: t for t in live.snapshot(now=1010.0)["targets"]}
    assert set(targets) == {a, b}
    assert targets[a]["finished"] == 3 and targets[a]["success_pct"] == 100.0
    assert targets[b]["finished"] == 4 and targets[b]["success_pct"] == 75.0
    assert targets[b]["ttft_p50_ms"] == pytest.approx(400, rel=0.01)
    assert targets[a]["ttft_p50_ms"] == pytest.approx(100, rel=0.01)


def test_personas_are_broken_down_one_row_per_persona_and_level():
    live = LiveStats()
    live.level_started(0, 4)
    live.add(row(0, 1000.0, 1.0))
    (alone,) = live.snapshot(now=1002.0)["personas"]  # one persona: its row, named
    assert alone["user_class"] == "ClosedLoopUser" and alone["finished"] == 1
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


def test_timeline_points_windows_and_level_marks():
    live = LiveStats()
    live.level_started(0, 2, at=100.2)
    received = 0
    streamed(live, "w", 100.0, 0, 0)
    for t in range(100, 110):
        live.sample(t + 0.5, users=2, in_flight=2)
        live.add(row(0, t + 0.1, 0.5, ttft=0.05))  # ends at t + 0.6: one request a second
        received += 10
        streamed(live, "w", t + 1.0, 0, received)
    live.add(row(0, 104.0, 0.5, ok=0))
    live.level_started(1, 8, at=110.0)
    for t in range(110, 120):
        live.sample(t + 0.5, users=8, in_flight=7)
        for k in range(4):
            live.add(row(1, t + 0.1 * k, 0.5, ttft=0.2))
        received += 40
        streamed(live, "w", t + 1.0, 0, received)
    series = live.snapshot(now=125.0)["series"]
    assert series["t"] == list(range(101, 124))  # closed up to now - settle
    assert [(m["kind"], m["level"], m["users"], m["t"]) for m in series["marks"]] == [
        ("start", 0, 2, 100.2),
        ("start", 1, 8, 110.0),
    ]
    point = {name: dict(zip(series["t"], series[name])) for name in FIGURES}
    assert point["output_tok_per_s"][108] == pytest.approx(10 * 5 / 5)  # 10 tokens a second
    assert point["output_tok_per_s"][119] == pytest.approx(4 * 10 * 5 / 5)
    assert point["ttft_p99_ms"][108] == pytest.approx(50, rel=0.01)
    assert point["ttft_p50_ms"][119] == pytest.approx(200, rel=0.01)
    assert point["itl_p99_ms"][119] == pytest.approx(20, rel=0.01)
    assert point["errors_per_s"][106] == pytest.approx(1 / 5)  # the failure at 104.5, in 101..105
    assert point["errors_per_s"][110] == 0
    assert point["users"][108] == 2 and point["in_flight"][108] == 2
    assert point["users"][119] == 8 and point["in_flight"][119] == 7
    # a page that has the points up to 120 asks for the rest only
    later = live.snapshot(now=125.0, since=120)["series"]
    assert later["t"] == [121, 122, 123] and later["marks"] == series["marks"]
    assert live.snapshot(now=125.0, series=False).keys() == {
        "current_level",
        "current_users",
        "verdict",
        "figures",
        "levels",
        "personas",
        "targets",
    }


def test_timeline_points_hold_each_personas_figures():
    """Chat users from the start, RAG users (slower first token, longer answers) from 105: each
    persona's line, and none before its first request."""
    live = LiveStats()
    live.level_started(0, 4, at=100.0)
    streamed(live, "w", 100.0, 0, 0)
    for t in range(100, 115):
        live.add(row(0, t + 0.1, 0.5, ttft=0.05))
        counts = {"ClosedLoopUser": [0.0, 10.0 * (t - 99)]}
        if t >= 105:
            live.add(row(0, t + 0.1, 0.5, ttft=0.4, out=30, user_class="Rag"))
            counts["Rag"] = [0.0, 30.0 * (t - 104)]
        live.streamed("w", t + 1.0, counts)
    live.add(row(0, 112.0, 0.5, ok=0, user_class="Rag"))
    series = live.snapshot(now=120.0)["series"]
    assert set(series["personas"]) == {"ClosedLoopUser", "Rag"}
    chat, rag = series["personas"]["ClosedLoopUser"], series["personas"]["Rag"]
    assert set(rag) == set(PERSONA_FIGURES)
    at = {t: i for i, t in enumerate(series["t"])}
    assert rag["output_tok_per_s"][at[104]] is None and rag["ttft_p99_ms"][at[104]] is None
    assert rag["output_tok_per_s"][at[112]] == pytest.approx(30 * 5 / 5)
    assert rag["ttft_p99_ms"][at[112]] == pytest.approx(400, rel=0.01)
    assert chat["ttft_p99_ms"][at[112]] == pytest.approx(50, rel=0.01)
    assert (
        rag["errors_per_s"][at[114]] == pytest.approx(1 / 5) and chat["errors_per_s"][at[114]] == 0
    )
    # the personas add up to the whole
    assert series["output_tok_per_s"][at[112]] == pytest.approx(
        chat["output_tok_per_s"][at[112]] + rag["output_tok_per_s"][at[112]]
    )
    later = live.snapshot(now=120.0, since=115)["series"]
    assert later["t"] == [116, 117, 118] and len(later["personas"]["Rag"]["ttft_p99_ms"]) == 3


def test_timeline_stops_with_the_test_and_takes_late_rows_in_the_next_point():
    live = LiveStats()
    live.level_started(0, 2, at=10.0)
    live.add(row(0, 10.0, 1.0))
    streamed(live, "w", 12.0, 0, 0)
    live.snapshot(now=20.0)  # closes the points up to 18
    live.add(row(0, 12.0, 1.0, ok=0))  # ended at 13, arrives after its points were closed
    streamed(live, "w", 13.0, 0, 30)  # the same for tokens received from 12 to 13
    live.stopped(at=21.0)
    series = live.snapshot(now=500.0)["series"]
    assert series["t"][-1] == 22  # no points for the idle time after the test
    late = dict(zip(series["t"], series["output_tok_per_s"]))
    assert late[18] == 0 and late[19] == pytest.approx(30 / 5)  # counted once, in the next window
    errors = dict(zip(series["t"], series["errors_per_s"]))
    assert errors[18] == 0 and errors[19] == pytest.approx(1 / 5)


def test_timeline_stays_bounded_over_a_long_test():
    live = LiveStats()
    live.timeline.max_points = 100
    live.level_started(0, 2, at=0.0)
    for t in range(0, 1000):
        live.sample(t + 0.5, users=2, in_flight=2)
        live.add(row(0, t + 0.2, 0.5))
        streamed(live, "w", t + 0.7, 0, 10 * t)
        if t % 50 == 0:
            live.snapshot(now=t)
    series = live.snapshot(now=1000.0)["series"]
    assert 50 <= len(series["t"]) <= 100
    assert series["step"] == 16 and series["window"] == 16
    assert all(t % 16 == 0 for t in series["t"][-20:])
    assert series["t"] == sorted(series["t"])
    # one 10-token request a second, whatever the step
    assert series["output_tok_per_s"][-1] == pytest.approx(10)
    assert len(live.timeline._seconds) <= 2 * 2 * 16 + 2  # only the seconds later points need


def test_rate_levels_and_the_drain_are_marked():
    live = LiveStats()
    live.level_started(0, 500, at=10.0, rate=2.0)
    live.level_started(1, 500, at=20.0, rate=4.0)
    live.drain_started(1, 500, at=30.0)
    marks = live.snapshot(now=31.0)["series"]["marks"]
    assert [(m["kind"], m["level"], m["users"], m["rate"], m["t"]) for m in marks] == [
        ("start", 0, 500, 2.0, 10.0),
        ("start", 1, 500, 4.0, 20.0),
        ("drain", 1, 500, None, 30.0),
    ]


class _Stream:
    """A request as `client.streamed.StreamedTokens` reads it: spec, SSE meter, usage."""

    def __init__(self, prompt: int, output: int) -> None:
        self.spec = RequestSpec("chat", True, b"{}", prompt, output, user_class="ClosedLoopUser")
        self.meter = SseMeter()
        self.usage: dict | None = None


def test_closed_loop_waves_give_a_flat_tokens_line():
    """8 users in step, each request 1.98 s (first token at 50 ms, then 190 tokens evenly),
    back to back; the process reports its tokens received every second, its rows at their end.
    Counted from the rows, a 5 s window holds 2 or 3 waves by turns (±20 %); counted as
    received, the line is flat."""
    users, period, first, prompt, output, t0 = 8, 1.98, 0.05, 128, 190, 100.0
    live, tokens = LiveStats(), StreamedTokens()
    live.level_started(0, users, at=t0)
    flying: dict[int, tuple[int, _Stream]] = {}  # user -> (request number, request)
    ends = []
    for report in range(42):
        now = t0 + 0.3 + report
        for user in range(users):
            number = int((now - t0) / period)
            was, request = flying.get(user, (-1, None))
            for done in range(was, number):  # the requests that ended since the last report
                if request is not None:
                    request.meter.chunk_times[:] = [0.0] * output
                    request.usage = {"prompt_tokens": prompt, "completion_tokens": output}
                    tokens.ended(request)
                    end = t0 + (done + 1) * period
                    live.add(row(0, end - period, period, out=output))
                    ends.append(end)
                request = _Stream(prompt, output)
                tokens.started(request)
            flying[user] = (number, request)
            since = now - t0 - number * period - first
            received = 0 if since < 0 else min(output, 1 + int(since / ((period - first) / output)))
            request.meter.chunk_times[:] = [0.0] * received
        live.streamed("local", *[now, tokens.counts()])
    series = live.snapshot(now=t0 + 45)["series"]
    steady = [i for i, t in enumerate(series["t"]) if t0 + 8 <= t <= t0 + 38]
    for figure, per_request in (("total_tok_per_s", prompt + output), ("output_tok_per_s", output)):
        values = [series[figure][i] for i in steady]
        mean = sum(values) / len(values)
        assert mean == pytest.approx(users * per_request / period, rel=0.01)
        assert max(values) < mean * 1.01 and min(values) > mean * 0.99, (figure, values)
    # what the rows alone would have said: the saw-tooth
    by_rows = [sum(1 for end in ends if t - 5 <= end < t) * output / 5 for t in (t0 + 10, t0 + 11)]
    assert max(by_rows) / min(by_rows) > 1.4, by_rows


def test_a_level_is_marked_with_its_kind_of_load_s_name():
    live = LiveStats()
    live.level_started(0, 64, at=10.0, label="0 s into the trace")
    live.level_started(1, 8, at=20.0)  # (a caller that names none: the users, as before)
    marks = live.snapshot(now=21.0)["series"]["marks"]
    assert [m.get("label") for m in marks] == ["0 s into the trace", None]
