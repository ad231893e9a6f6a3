"""The parts of a trace a replay takes (a window, a speed, each load process's share), the prefix
reuse its hash_ids imply, and what a trace argument names."""

from __future__ import annotations

import os

import pytest

from vllm_load.workload.traces import (
    SAMPLE_TRACES,
    Trace,
    TraceError,
    TraceRequest,
    resolve_trace,
    reuse_summary,
    reused_blocks,
)


def make_trace(times, hash_ids=None) -> Trace:
    ids = hash_ids or [()] * len(times)
    requests = tuple(
        TraceRequest(at, 100 + i, 10 + i, tuple(ids[i]), i) for i, at in enumerate(times)
    )
    return Trace("t.jsonl", "mooncake", requests)


TRACE = make_trace([0.0, 1.0, 2.5, 2.5, 4.0, 7.0, 9.5])


def test_duration_is_the_last_request_time():
    assert TRACE.duration == 9.5
    assert make_trace([0.0]).duration == 0.0


def test_a_window_starts_the_replay_at_its_start():
    window = TRACE.window(2.0, 5.0)  # 2 <= at < 7
    assert [(r.at, r.index) for r in window.requests] == [(0.5, 2), (0.5, 3), (2.0, 4)]
    assert window.duration == 2.0
    assert [r.input_tokens for r in window.requests] == [102, 103, 104]  # the rest kept
    assert (window.path, window.format, window.block_tokens) == ("t.jsonl", "mooncake", 512)


def test_a_window_includes_its_start_and_excludes_its_end():
    assert [r.index for r in TRACE.window(2.5, 4.5).requests] == [2, 3, 4]
    assert [r.index for r in TRACE.window(7.0).requests] == [5, 6]  # to the end
    assert TRACE.window().requests == TRACE.requests


@pytest.mark.parametrize(
    "start, duration, says",
    [
        (-1.0, None, "the window's start must be 0 s or later"),
        (float("nan"), None, "the window's start must be 0 s or later"),
        (0.0, 0.0, "the window's duration must be above 0 s"),
        (0.0, float("nan"), "the window's duration must be above 0 s"),
        (5.0, 1.0, "no request from 5 s to 6 s (the trace's requests run from 0 to 9.5 s"),
        (10.0, None, "no request from 10 s to the end"),
    ],
)
def test_a_window_that_cannot_be_replayed(start, duration, says):
    with pytest.raises(TraceError) as caught:
        TRACE.window(start, duration)
    assert str(caught.value).startswith("t.jsonl: ") and says in str(caught.value)


def test_faster_divides_every_time():
    assert [r.at for r in TRACE.faster(2).requests] == [0, 0.5, 1.25, 1.25, 2, 3.5, 4.75]
    assert [r.at for r in TRACE.faster(0.5).requests][-1] == 19.0
    assert [r.index for r in TRACE.window(2.0).faster(2).requests] == [2, 3, 4, 5, 6]
    for speed in (0, -1, float("nan"), float("inf")):
        with pytest.raises(TraceError, match="the speed must be a number above 0"):
            TRACE.faster(speed)


@pytest.mark.parametrize("processes", [1, 2, 3, 7, 10])
def test_the_shares_of_all_processes_are_the_whole_trace(processes):
    shares = [TRACE.share(processes, i) for i in range(processes)]
    indexes = sorted(r.index for share in shares for r in share)
    assert indexes == list(range(len(TRACE.requests)))  # each request in exactly one share
    for i, share in enumerate(shares):
        assert [r.index for r in share] == list(range(i, len(TRACE.requests), processes))
        assert [r.at for r in share] == sorted(r.at for r in share)  # times unchanged, in order


def test_a_share_that_does_not_exist():
    for processes, index in [(0, 0), (2, 2), (2, -1)]:
        with pytest.raises(TraceError, match="no share"):
            TRACE.share(processes, index)


def test_reused_blocks_follow_the_chain_of_ids():
    requests = make_trace(
        [0, 1, 2, 3, 4, 5, 6],
        [
            (1, 2, 3),
            (1, 2, 4),  # shares the first two blocks
            (1, 2, 3, 5),  # the first three
            (2, 3),  # 2 and 3 seen, but after 1: not this prefix
            (9, 9, 9),  # the same id again within one request is not reuse
            (9, 9, 9, 9),
            (),
        ],
    ).requests
    assert reused_blocks(requests) == [0, 2, 3, 0, 0, 3, 0]
    assert reused_blocks(requests[1:]) == [0, 2, 0, 0, 3, 0]  # only what came before counts


def test_reuse_summary_counts_blocks_and_tokens():
    requests = (
        TraceRequest(0.0, 1100, 5, (1, 2, 3)),
        TraceRequest(1.0, 1300, 5, (1, 2, 4)),  # 2 full blocks of 512 reused
        TraceRequest(2.0, 1000, 5, (1, 2)),  # both: the last one, 488 tokens, is this prompt's end
    )
    summary = reuse_summary(Trace("t", "mooncake", requests))
    assert summary == {
        "requests": 3,
        "blocks": 8,
        "reused_blocks": 4,
        "reused_share": 0.5,
        "input_tokens": 3400,
        "reused_tokens": 1024 + 1000,
    }
    assert reuse_summary(make_trace([0.0, 1.0]))["reused_share"] == 0.0  # no hash_ids


def test_resolve_trace_names_a_file_or_a_sample(tmp_path):
    assert resolve_trace("/data/trace.jsonl") == "/data/trace.jsonl"
    assert resolve_trace("~/t.csv") == os.path.expanduser("~/t.csv")
    for name in SAMPLE_TRACES:
        path = resolve_trace(f"sample:{name}")
        assert os.path.isfile(path) and os.path.basename(path) == SAMPLE_TRACES[name]


def test_an_unknown_sample_lists_the_samples():
    with pytest.raises(TraceError) as caught:
        resolve_trace("sample:sharegpt")
    assert str(caught.value) == (
        "sample:sharegpt: no such sample trace (the samples: sample:mooncake_60s, "
        "sample:burstgpt_sample, sample:azure_sample)"
    )
    with pytest.raises(TraceError, match="no trace given"):
        resolve_trace(" ")
