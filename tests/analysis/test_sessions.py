"""Sessions as wholes (`analysis.sessions`): one row per conversation id over every level, its E2E
from the first start to the last end, its idle share the tool waits over that, its prompt's
cached share pooled over the turns whose server said, unknown (not zero) where none did."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vllm_load.analysis.sessions import SESSION_COLUMNS, session_summary, session_table


def frame(rows: list[dict]) -> pd.DataFrame:
    base = {
        "conversation": "",
        "user_class": "AgenticUser",
        "turn": 0,
        "ok": 1,
        "ttft": 0.1,
        "prompt_tokens": 100,
        "cached_tokens": np.nan,
        "tool_calls": 0,
        "tool_wait_s": np.nan,
    }
    return pd.DataFrame([{**base, **row} for row in rows])


# session a: 3 turns over 10 s, 2 tool waits (1 s and 3 s); its turns' prompts grow and the
# server said what it cached for two of them. session b: 1 turn, nothing cached said.
# a request outside any session is left out.
ROWS = [
    {"conversation": "a", "turn": 0, "start_ts": 100.0, "end_ts": 102.0, "tool_calls": 2},
    {
        "conversation": "a",
        "turn": 1,
        "start_ts": 103.0,
        "end_ts": 105.0,
        "prompt_tokens": 300,
        "cached_tokens": 96,
        "tool_calls": 1,
        "tool_wait_s": 1.0,
        "ttft": 0.25,
    },
    {
        "conversation": "a",
        "turn": 2,
        "start_ts": 108.0,
        "end_ts": 110.0,
        "prompt_tokens": 500,
        "cached_tokens": 288,
        "tool_wait_s": 3.0,
        "ttft": np.nan,
    },
    {"conversation": "b", "start_ts": 101.0, "end_ts": 104.0},
    {"conversation": "", "start_ts": 99.0, "end_ts": 120.0},
]


def test_one_row_per_session_with_its_figures():
    table = session_table(frame(ROWS).sample(frac=1.0, random_state=3))  # any row order
    assert list(table.columns) == list(SESSION_COLUMNS)
    assert table["session"].tolist() == ["a", "b"]  # by start
    a = table.iloc[0]
    assert (a.turns, a.failed_turns, a.tool_calls) == (3, 0, 3)
    assert a.e2e == pytest.approx(10.0) and a.tool_wait_s == pytest.approx(4.0)
    assert a.idle_share == pytest.approx(0.4)
    assert a.prompt_tokens == 900 and a.cached_tokens == 384
    assert a.cached_share == pytest.approx(384 / 800)  # over the turns that said only
    assert a.ttft_by_turn == "100.0;250.0;"
    b = table.iloc[1]
    assert b.e2e == pytest.approx(3.0)
    assert np.isnan(b.tool_wait_s) and np.isnan(b.idle_share)  # waited for no tool: unknown
    assert np.isnan(b.cached_tokens) and np.isnan(b.cached_share)


def test_a_failed_turn_counts_and_its_prompt_does_not():
    rows = [dict(r) for r in ROWS[:3]]
    rows[2].update(ok=0, prompt_tokens=np.nan, cached_tokens=np.nan)
    a = session_table(frame(rows)).iloc[0]
    assert a.failed_turns == 1 and a.prompt_tokens == 400
    assert a.cached_share == pytest.approx(96 / 300)


def test_the_summary_pools_the_sessions():
    summary = session_summary(session_table(frame(ROWS)))
    assert summary["sessions"] == 2 and summary["turns_mean"] == 2.0
    assert summary["tool_calls_mean"] == 1.5
    assert summary["idle_share_mean"] == pytest.approx(0.4)  # b waited for no tool
    assert summary["cached_share"] == pytest.approx(384 / 800)  # b's server said nothing
    assert summary["e2e_p50"] == pytest.approx(6.5)


def test_a_run_without_sessions_has_none():
    plain = frame([{"start_ts": 1.0, "end_ts": 2.0}])
    assert session_table(plain).empty and session_summary(session_table(plain)) == {}
    assert session_table(plain.drop(columns="conversation")).empty


def test_subagent_sessions_name_their_parent_and_depth():
    """A parent p fans out s0 and s1 (s1 fans out s1x, depth 2); each counts its subagents, and
    the summary says how many subagent sessions and fanning sessions there were."""
    rows = [
        {"conversation": "p", "start_ts": 0.0, "end_ts": 1.0, "level": 0, "users": 1},
        {"conversation": "s0", "parent": "p", "start_ts": 1.0, "end_ts": 2.0, "level": 0},
        {"conversation": "s1", "parent": "p", "start_ts": 1.0, "end_ts": 2.5, "level": 0},
        {"conversation": "s1x", "parent": "s1", "start_ts": 1.2, "end_ts": 1.4, "level": 0},
        {"conversation": "p", "turn": 1, "start_ts": 2.5, "end_ts": 3.0, "level": 0},
    ]
    requests = frame([{"parent": "", "users": 1, **row} for row in rows])
    table = session_table(requests).set_index("session")
    assert table.loc[["p", "s0", "s1", "s1x"], "depth"].tolist() == [0, 1, 1, 2]
    assert table.loc[["p", "s0", "s1", "s1x"], "subagents"].tolist() == [2, 0, 1, 0]
    assert table.loc["s1x", "parent"] == "s1" and table.loc["p", "parent"] == ""
    summary = session_summary(session_table(requests), requests)
    assert summary["subagent_sessions"] == 3 and summary["fanned_out"] == 2
    # one user's level: p's turn, then s0, s1 and s1x in flight at once (p's turn 0 ended as
    # they started, and is not counted with them)
    assert summary["flight"] == [{"level": 0, "users": 1, "requests": 5, "in_flight_peak": 3}]


def test_a_run_without_subagents_keeps_its_summary():
    requests = frame([{**row, "parent": ""} for row in ROWS])
    summary = session_summary(session_table(requests), requests)
    assert "subagent_sessions" not in summary and "flight" not in summary
    assert (session_table(requests)["depth"] == 0).all()


def test_peak_in_flight_counts_overlaps():
    from vllm_load.analysis.sessions import peak_in_flight

    starts, ends = np.array([0.0, 1.0, 2.0, 2.0]), np.array([1.0, 3.0, 2.5, 4.0])
    assert peak_in_flight(starts, ends) == 3
    assert peak_in_flight(np.array([]), np.array([])) == 0
