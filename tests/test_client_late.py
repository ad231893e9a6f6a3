"""Levels where the client was late: their TTFT and ITL are marked wherever they are shown
(terminal table, report), and validate-client does not call such a run's client proven."""

from __future__ import annotations

import math

import pandas as pd

from vllm_load.analysis.levels import LATE_MARK, TABLE_COLUMNS, format_level_table


def _metrics() -> pd.DataFrame:
    row = {col: 1.0 for _, col, _, _ in TABLE_COLUMNS}
    frame = pd.DataFrame([{**row, "level": i, "users": u} for i, u in enumerate((1, 2, 4))])
    frame["itl_p99"] = [0.02, 0.0, 0.0]  # the merged reads' zero gaps
    return frame


def _cells(line: str, header: str, table: str) -> str:
    head = table.splitlines()[0]
    start = head.index(header)
    return line[start - 2: start + len(header)].strip()  # right-justified under its header


def test_the_terminal_table_marks_late_levels_ttft_and_itl_and_says_why():
    text = format_level_table(_metrics(), {1: "62% of chunks merged in reads > 5%"})
    lines = text.splitlines()
    late_row, ok_row = lines[3], lines[2]
    assert _cells(late_row, "ITL p99 ms", text) == "0.00" + LATE_MARK
    assert _cells(late_row, "TTFT p50 ms", text).endswith(LATE_MARK)
    assert not _cells(ok_row, "ITL p99 ms", text).endswith(LATE_MARK)
    assert not _cells(late_row, "E2E p50 s", text).endswith(LATE_MARK)  # only what a late read dates
    assert lines[5].startswith(LATE_MARK + " client late: TTFT and ITL not trustworthy")
    assert lines[6].strip() == "2 users: 62% of chunks merged in reads > 5%"
    assert len({len(line) for line in lines[:5]}) == 1  # still fixed width


def test_an_unmarked_table_is_as_before():
    text = format_level_table(_metrics())
    assert LATE_MARK not in text and len(text.splitlines()) == 5
    assert format_level_table(_metrics(), {}) == text
