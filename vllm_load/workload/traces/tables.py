"""The CSV traces, columns found by name in the header (other columns are ignored):

- **BurstGPT** (HPMLL/BurstGPT): `Timestamp` (seconds from the trace's start), `Model`,
  `Request tokens`, `Response tokens`, `Total tokens`, `Log Type` (the v2 files add `Session ID`
  and `Elapsed time`). A row whose `Response tokens` is 0 is a request that failed in the
  original log (BurstGPT's `*_without_fails_*` files leave them out): it is skipped and counted
  (`Trace.skip_reasons`), as vLLM's BurstGPT sampling skips it.
- **Azure LLM inference traces** 2023 and 2024 (Azure/AzurePublicDataset): `TIMESTAMP` (a date
  and time, `2023-11-16 18:15:46.6805900`, 7 fractional digits, kept whole), `ContextTokens`,
  `GeneratedTokens`.

A blank line is skipped; a row with another number of fields than the header, a token count
that is not a whole number above 0, or a time that does not parse is refused.
"""

from __future__ import annotations

import csv
import operator
from typing import Callable, Iterator

from .fields import BadValue, Datetimes, shown, text_time, token_text
from .replay_plan import TraceError, TraceLimits
from .rows import Rows

BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
FAILED = "failed in the original log (Response tokens 0)"


def read_burstgpt(path: str, limits: TraceLimits) -> Rows:
    """Every request of a BurstGPT CSV, in file order; failed ones skipped and counted."""
    rows = Rows(units_per_second=1.0, limits=limits)
    for line, (timestamp, prompt, response) in _table(path, "BurstGPT", BURSTGPT_COLUMNS, rows):
        try:
            try:
                output = token_text(response, "Response tokens", "output")
            except BadValue:
                if not _is_zero(response):
                    raise
                rows.skip_reasons[FAILED] += 1
                continue
            time = text_time(timestamp, "Timestamp")
            rows.add(line, time, token_text(prompt, "Request tokens", "prompt"), output)
        except BadValue as e:
            raise TraceError(f"{path}:{line}: {e}") from None
    return rows


def read_azure(path: str, limits: TraceLimits) -> Rows:
    """Every request of an Azure LLM inference trace CSV, in file order."""
    rows = Rows(units_per_second=1e9, limits=limits)  # nanoseconds
    datetimes = Datetimes("TIMESTAMP")
    for line, (timestamp, context, generated) in _table(path, "Azure", AZURE_COLUMNS, rows):
        try:
            rows.add(
                line,
                datetimes.ns(timestamp),
                token_text(context, "ContextTokens", "prompt"),
                token_text(generated, "GeneratedTokens", "output"),
            )
        except BadValue as e:
            raise TraceError(f"{path}:{line}: {e}") from None
    return rows


def header_names(line: str) -> list[str]:
    """A CSV header line's column names, spaces around them removed."""
    return [name.strip() for name in next(csv.reader([line]), [])]


def _table(
    path: str, kind: str, columns: tuple[str, ...], rows: Rows
) -> Iterator[tuple[int, tuple[str, ...]]]:
    """Each data row's line number and `columns`, in order, to the end of the file (then
    `rows.lines` is how many lines it has)."""
    with open(path, "rb") as fh:
        reader = csv.reader(_decoded(fh))
        pick: Callable[[list[str]], tuple[str, ...]] | None = None
        width = 0
        try:
            for fields in reader:
                if not fields:  # a blank line
                    continue
                if pick is None:
                    pick = _header(path, reader.line_num, kind, columns, fields)
                    width = len(fields)
                    continue
                if len(fields) != width:
                    raise TraceError(
                        f"{path}:{reader.line_num}: {len(fields)} fields where the header has "
                        f"{width} ({shown(','.join(fields))}; fix or remove the line)"
                    )
                yield reader.line_num, pick(fields)
        except UnicodeDecodeError:
            raise TraceError(
                f"{path}:{reader.line_num + 1}: not UTF-8 text (a {kind} trace is a CSV file)"
            ) from None
        except csv.Error as e:
            raise TraceError(f"{path}:{reader.line_num}: not valid CSV: {e}") from None
        rows.lines = reader.line_num


def _header(
    path: str, line: int, kind: str, columns: tuple[str, ...], names: list[str]
) -> Callable[[list[str]], tuple[str, ...]]:
    """What takes `columns`, in order, from a row under this header."""
    names = [name.strip() for name in names]
    missing = [c for c in columns if c not in names]
    if missing:
        raise TraceError(
            f"{path}:{line}: no column {', '.join(missing)} in the header {shown(','.join(names))} "
            f"(a {kind} trace's header has {', '.join(columns)})"
        )
    return operator.itemgetter(*(names.index(c) for c in columns))


def _decoded(lines: Iterator[bytes]) -> Iterator[str]:
    """The file's lines as text, one at a time, so a byte that is not UTF-8 is found on its own
    line; a byte order mark before the first is dropped."""
    for line in lines:
        yield line.decode("utf-8").lstrip("\ufeff")
        break
    for line in lines:
        yield line.decode("utf-8")


def _is_zero(text: str) -> bool:
    try:
        return float(text) == 0
    except ValueError:
        return False
