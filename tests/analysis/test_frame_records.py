"""`row_dicts` gives what `DataFrame.to_dict("records")` gives: the same rows, keys, values and
Python types, for every kind of column the analysis hands around."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from vllm_load.analysis.frame_records import row_dicts


def _same(a, b) -> bool:
    return type(a) is type(b) and (a == b or (a is b) or (a != a and b != b))


FRAMES = {
    "numbers": pd.DataFrame(
        {"level": [0, 1, 2], "value": [1.0, math.nan, 4.5], "ok": [True, False, True]}
    ),
    "mixed object": pd.DataFrame(
        {
            "kind": ["concurrency", None, "rate"],
            "boxed": pd.Series([np.float64(1.5), np.int64(3), np.bool_(True)], dtype=object),
            "when": pd.to_datetime(["2026-01-01", "2026-01-02", None]),
            "took": pd.to_timedelta([1, 2, 3], unit="s"),
        }
    ),
    "extension dtypes": pd.DataFrame(
        {
            "n": pd.array([1, None, 3], dtype="Int64"),
            "flag": pd.array([True, None, False], dtype="boolean"),
            "text": pd.array(["a", None, "c"], dtype="string"),
            "cat": pd.Categorical(["x", "y", "x"]),
        }
    ),
    "all object": pd.DataFrame(
        {
            "a": pd.Series([np.datetime64("2026-01-01"), np.timedelta64(5, "s")], dtype=object),
            "b": pd.Series([pd.NA, "s"], dtype=object),
        }
    ),
    "wide": pd.DataFrame({f"c{i}": [float(i), i * 2.0] for i in range(300)}),
    "duplicate names": pd.DataFrame([[1, "x", 2.5]], columns=["a", "a", "b"]),
    "no rows": pd.DataFrame({"a": pd.Series([], dtype=float), "b": pd.Series([], dtype=object)}),
    "no columns": pd.DataFrame(index=[0, 1]),
    "odd index": pd.DataFrame({"v": [1, 2]}, index=["p", "q"]),
}


@pytest.mark.filterwarnings("ignore:DataFrame columns are not unique")
@pytest.mark.parametrize("name", sorted(FRAMES))
def test_row_dicts_are_to_dicts_records(name):
    frame = FRAMES[name]
    expected, got = frame.to_dict("records"), row_dicts(frame)
    assert [list(r) for r in got] == [list(r) for r in expected]
    for want, have in zip(expected, got):
        for key in want:
            assert _same(have[key], want[key]), (key, have[key], want[key])
