"""Agentic JSONL traces (`workload.traces.agentic_sessions`, docs/traces.md): sessions of turns with
their lengths and tool latencies, subagent sessions hung from their parent's turn; a line that
names an unknown parent, a turn of a session never opened, or a turn out of order is refused
with its file and line, and `vllm-load run` says so in one line, exit 2, before any load."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from vllm_load.workload.traces import TraceError, TraceLimits, detect_format, read_trace

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "data", "agentic_trace.jsonl")


def write(tmp_path, entries: list[dict]) -> str:
    path = tmp_path / "agentic.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in entries) + b"\n")
    return str(path)


def turn(session: str, number: int, ms: float = 0, **more) -> dict:
    return {
        "session": session,
        "turn": number,
        "timestamp": ms,
        "input_length": 100 + 50 * number,
        "output_length": 10,
        **more,
    }


def test_the_example_is_three_sessions_with_two_subagents():
    trace = read_trace(EXAMPLE)
    assert trace.format == "agentic" and detect_format('{"session": "a", "turn": 0}') == "agentic"
    assert [r.session.id for r in trace.requests] == ["a1", "b1", "c1"]
    assert [r.at for r in trace.requests] == [0.0, 0.15, 0.8]  # top-level starts, ms to s
    a1 = trace.requests[0].session
    assert [t.input_tokens for t in a1.turns] == [200, 260, 340]
    assert [t.wait for t in a1.turns] == [0.0, 0.12, 0.05]
    assert [[c.id for c in t.children] for t in a1.turns] == [[], ["a1.s0", "a1.s1"], []]
    s0, s1 = a1.turns[1].children
    assert s0.parent == "a1" and len(s0.turns) == 2 and s1.turns[0].wait == 0.03
    assert trace.sent_requests == 9  # every turn, the subagents' too
    assert "3 sessions" in trace.describe()


def test_window_and_speed_keep_the_sessions():
    trace = read_trace(EXAMPLE)
    later = trace.window(0.1)
    assert [r.session.id for r in later.requests] == ["b1", "c1"] and later.sent_requests == 3
    faster = trace.faster(2)
    assert faster.requests[0].session.turns[1].wait == pytest.approx(0.06)
    assert faster.requests[0].session.turns[1].children[1].turns[0].wait == pytest.approx(0.015)
    assert faster.requests[2].at == pytest.approx(0.4)


@pytest.mark.parametrize(
    "entries, line, words",
    [
        (
            [turn("a", 0), turn("k", 0, parent="nobody")],
            2,
            "session 'k' names parent 'nobody', which no earlier line opens",
        ),
        (
            [turn("a", 0), turn("b", 0), turn("b", 2)],
            3,
            "turn 2 of session 'b' after its turn 0",
        ),
        ([turn("a", 0), turn("z", 1)], 2, "turn 1 of session 'z', which no earlier line opens"),
        (
            [turn("k", 0, parent="a"), turn("a", 0)],
            1,
            "session 'k' names parent 'a', which no earlier line opens",
        ),
        (
            [turn("a", 0), turn("k", 0, parent="a", parent_turn=3)],
            2,
            "fans out from turn 3 of 'a', which has turns 0 to 0 so far",
        ),
        ([turn("a", 0), turn("a", 1, tool_latency_ms=-5)], 2, '"tool_latency_ms" must be 0'),
        ([turn("a", 0), {"session": "a", "turn": 1}], 2, 'no "timestamp" field'),
        (
            [turn("a", 0), turn("k", 0, parent="a"), turn("k", 1, parent="b")],
            3,
            "session 'k' names parent 'b' here and 'a' on line 2",
        ),
    ],
)
def test_a_bad_line_is_refused_with_its_number(tmp_path, entries, line, words):
    path = write(tmp_path, entries)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: ") and words in message, message
    assert "\n" not in message


def test_every_turn_counts_against_the_limits(tmp_path):
    path = write(tmp_path, [turn("a", 0), turn("a", 1), turn("a", 2)])
    with pytest.raises(TraceError, match=rf"^{path}:3: more than 2 turns"):
        read_trace(path, limits=TraceLimits(requests=2))
    with pytest.raises(TraceError, match=rf"^{path}:2: 160 tokens .* above --trace-max-tokens"):
        read_trace(path, limits=TraceLimits(tokens=150))


def test_run_refuses_an_unknown_parent_in_one_line_before_any_load(tmp_path):
    """Nothing listens at the target: the trace is refused before it would be tried."""
    path = write(tmp_path, [turn("a", 0), turn("a", 1), turn("k", 0, 5, parent="gone")])
    argv = ["run", "--host", "http://127.0.0.1:9", "--agentic", "--trace", path]
    done = subprocess.run(
        [sys.executable, "-m", "vllm_load", *argv, "--out", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = done.stderr.strip()
    assert done.returncode == 2, (done.stdout, err)
    assert err.count("\n") == 0 and f"{path}:3: session 'k' names parent 'gone'" in err, err
    assert not (tmp_path / "runs").exists()  # nothing was started
    plain = write(
        tmp_path, [{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": []}]
    )
    mooncake = subprocess.run(
        [sys.executable, "-m", "vllm_load", "run", "--host", "http://127.0.0.1:9", "--agentic"]
        + ["--trace", plain, "--out", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert mooncake.returncode == 2 and "this is a mooncake trace" in mooncake.stderr
