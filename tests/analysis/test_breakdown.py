"""Per-persona, per-turn and per-conversation figures on hand-made measured requests."""

import numpy as np
import pandas as pd
import pytest

from vllm_load.analysis.levels.breakdown import conversation_summary, persona_table, turn_table


def rows(*specs):
    """(level, user_class, conversation, turn, start, ttft, e2e, prompt, completion, ok[, cached])"""
    out = []
    for spec in specs:
        level, cls, conv, turn, start, ttft, e2e, prompt, completion, ok, *cached = spec
        out.append(
            {
                "level": level,
                "user_class": cls,
                "task": "t",
                "conversation": conv or pd.NA,
                "turn": turn,
                "start_ts": start,
                "end_ts": start + e2e,
                "ttft": ttft if ok else np.nan,
                "e2e": e2e,
                "tpot": (e2e - ttft) / (completion - 1) if ok and completion > 1 else np.nan,
                "prompt_tokens": prompt if ok else pd.NA,
                "completion_tokens": completion if ok else pd.NA,
                "ok": int(ok),
                "cached_tokens": cached[0] if cached else pd.NA,
            }
        )
    frame = pd.DataFrame(out)
    for column in ("prompt_tokens", "completion_tokens", "cached_tokens", "turn"):
        frame[column] = frame[column].astype("Int64")
    frame["conversation"] = frame["conversation"].astype("string")
    return frame


METRICS = pd.DataFrame(
    {"level": [0], "value": [4], "window_start": [0.0], "window_end": [10.0], "window_s": [10.0]}
)


def test_persona_table_splits_a_level_by_user_class():
    labelled = rows(
        (0, "Chat", "c1", 0, 0.0, 0.1, 1.0, 100, 11, True),
        (0, "Chat", "c1", 1, 2.0, 0.3, 2.0, 300, 21, True),
        (0, "Chat", "c2", 0, 4.0, 0.2, 1.0, 100, 11, False),
        (0, "Rag", "", 0, 1.0, 0.5, 4.0, 2000, 41, True),
    )
    table = persona_table(labelled, METRICS).set_index("user_class")
    chat, rag = table.loc["Chat"], table.loc["Rag"]
    assert (chat.measured, chat.ok, chat.failed, chat.share) == (3, 2, 1, 0.75)
    assert (rag.measured, rag.ok, rag.share) == (1, 1, 0.25)
    assert chat.ttft_p50 == pytest.approx(0.2) and rag.e2e_p99 == pytest.approx(4.0)
    # whole requests inside the window: the tokens they generated over the window's 10 s
    assert chat.output_tok_per_s == pytest.approx((11 + 21) / 10)
    assert rag.output_tok_per_s == pytest.approx(41 / 10)


def test_one_user_class_needs_no_persona_table():
    labelled = rows((0, "Chat", "", 0, 0.0, 0.1, 1.0, 100, 11, True))
    assert persona_table(labelled, METRICS).empty


def test_turn_table_follows_the_history_and_the_cache():
    labelled = rows(
        (0, "Chat", "c1", 0, 0.0, 0.1, 1.0, 100, 10, True, 0),
        (0, "Chat", "c1", 1, 2.0, 0.05, 1.0, 300, 10, True, 96),
        (0, "Chat", "c2", 0, 0.0, 0.3, 1.0, 120, 10, True),
        (0, "Chat", "c2", 1, 2.0, 0.07, 1.0, 320, 10, True, 112),
        (0, "Chat", "c3", 1, 2.0, 0.07, 1.0, 0, 0, False),
        (0, "Rag", "", 0, 1.0, 0.5, 4.0, 2000, 41, True),  # not in a conversation
    )
    table = turn_table(labelled).set_index("turn")
    assert list(table.index) == [0, 1]
    assert (table.loc[0, "measured"], table.loc[1, "measured"], table.loc[1, "failed"]) == (2, 3, 1)
    assert table.loc[0, "prompt_tokens_mean"] == 110 and table.loc[1, "prompt_tokens_mean"] == 310
    # where the server said: c1's turn 0 said 0 (a zero), c2's said nothing (not a zero)
    assert table.loc[0, "cached_share"] == 0.0
    assert table.loc[1, "cached_share"] == pytest.approx((96 + 112) / (300 + 320))
    assert table.loc[1, "ttft_p50"] == pytest.approx(0.06)


def test_conversation_summary_times_whole_conversations():
    requests = rows(
        (0, "Chat", "c1", 0, 0.0, 0.1, 1.0, 100, 10, True),
        (0, "Chat", "c1", 1, 3.0, 0.1, 1.0, 300, 10, True),
        (1, "Chat", "c2", 0, 10.0, 0.1, 2.0, 100, 10, False),
        (1, "Rag", "", 0, 1.0, 0.5, 4.0, 2000, 41, True),
    )
    summary = conversation_summary(requests)
    assert summary["conversations"] == 2 and summary["turns_mean"] == 1.5
    assert summary["duration_mean"] == pytest.approx((4.0 + 2.0) / 2)
    assert summary["with_failed_turn"] == 1
    assert conversation_summary(requests[requests["user_class"] == "Rag"]) == {}
