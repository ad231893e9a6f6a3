"""A frame's rows as dicts, as `DataFrame.to_dict("records")` gives them, at a fraction of its cost.

pandas builds those rows with `itertuples`, which takes every column through `.iloc[:, k]`: on
the frames the analysis hands around (a few levels, 70 to 500 columns) that indexing was 85 ms of
the 250 ms the end-of-run summary took after its imports, and ~0.2 s of a report. `records` reads
each column once as it stands and boxes the values the same way (checked with pandas 3.0),
so every caller gets the same dicts, the same keys in the same order, the same Python types.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionDtype
from pandas.api.types import is_bool, is_float, is_integer

_OBJECT = np.dtype(object)


def row_dicts(frame: pd.DataFrame) -> list[dict]:
    """`frame.to_dict("records")`: one dict a row, column name to value."""
    columns = frame.columns.tolist()
    values = [
        list(map(native, column)) if boxed(dtype) else list(column)
        for dtype, (_, column) in zip(frame.dtypes.values, frame.items())
    ]
    if not columns:  # zip() of no columns would give no rows
        return [{} for _ in range(len(frame))]
    return [dict(zip(columns, row)) for row in zip(*values)]


def boxed(dtype) -> bool:
    """Whether pandas boxes this column's values into native ones (object and extension dtypes);
    a numpy column's values already are, iterated."""
    return dtype == _OBJECT or isinstance(dtype, ExtensionDtype)


def native(value):
    """A value of an object or extension column as `to_dict` gives it (pandas' own boxing:
    numpy scalars to Python's, datetimes to Timestamp or Timedelta, NA to None)."""
    if is_float(value):
        return float(value)
    if is_integer(value):
        return int(value)
    if is_bool(value):
        return bool(value)
    if isinstance(value, np.datetime64):
        return pd.Timestamp(value)
    if isinstance(value, np.timedelta64):
        return pd.Timedelta(value)
    if value is pd.NA:
        return None
    return value
