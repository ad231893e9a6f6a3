"""Reading a run's optional CSVs (server_metrics.csv, client_health.csv): what is sound, and a
sentence for the report about what was not.

These files only add to a report, so a bad line in one never stops it: a line with the wrong
number of fields, a value that is not a number where one belongs, or a time that is not
finite is skipped and counted; a file whose header lacks what the analysis needs is left out
whole. Either way `CsvRead.note` says so, naming the file.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class CsvRead:
    """An optional file's sound rows (None when it is absent, empty or left out) and what the
    report must say about the rest ("" when nothing was left out)."""

    frame: pd.DataFrame | None
    note: str = ""


def _number(text: str) -> float:
    return math.nan if text == "" else float(text)


def read_optional_csv(
    path: str, required: tuple[str, ...], text_columns: tuple[str, ...] = ()
) -> CsvRead:
    """`path` with every column numeric but `text_columns`, `required` in its header and its
    first column (time) finite in every row kept."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return CsvRead(None)
    name = os.path.basename(path)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            rows = list(csv.reader(fh))
    except (UnicodeDecodeError, csv.Error) as e:
        return CsvRead(None, f"{path} is not readable CSV ({e}): left out.")
    header, body = rows[0] if rows else [], rows[1:]
    missing = [c for c in required if c not in header]
    if missing:
        return CsvRead(
            None, f"{path} does not have the columns of a {name} ({', '.join(missing)}): left out."
        )
    columns: dict[str, list] = {c: [] for c in header}
    skipped, first = 0, ""
    for line, row in enumerate(body, start=2):
        try:
            if len(row) != len(header):
                raise ValueError(f"{len(row)} fields, the header has {len(header)}")
            values: list[str | float] = [
                v if c in text_columns else _number(v) for c, v in zip(header, row)
            ]
            time = _number(row[header.index(required[0])])
            if not math.isfinite(time):
                raise ValueError(f"{required[0]} is {row[header.index(required[0])]!r}")
        except ValueError as e:
            skipped += 1
            first = first or f"line {line}: {str(e)[:80]}"
            continue
        for c, v in zip(header, values):
            columns[c].append(v)
    frame = pd.DataFrame(columns)
    for c in text_columns:
        if c in frame:
            frame[c] = frame[c].astype("string")
    note = f"{path}: {skipped:,} bad line(s) skipped (the first, {first})." if skipped else ""
    return CsvRead(None if frame.empty else frame, note)
