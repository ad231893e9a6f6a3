"""Plain Locust CSVs (`locust --csv PREFIX --csv-full-history`) as the report reads them: which
prefix an argument names, and the stats history (with the failures, when written) of one prefix.
The only module that reads them; `analysis.levels.locust_csv` turns them into levels."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

HISTORY_SUFFIX = "_stats_history.csv"
FAILURES_SUFFIX = "_failures.csv"
REQUIRED = ("Timestamp", "User Count", "Name", "Total Request Count", "Total Failure Count")
AGGREGATED = "Aggregated"


class LocustCsvError(ValueError):
    """Locust CSVs that cannot be read into levels; the message is one line saying why."""


@dataclass
class LocustHistory:
    """What `read_history` read from one prefix."""

    prefix: str
    history: pd.DataFrame  # PREFIX_stats_history.csv, every row
    failures: pd.DataFrame | None  # PREFIX_failures.csv, when present

    @property
    def run_id(self) -> str:
        return os.path.basename(self.prefix) or self.prefix

    @property
    def names(self) -> tuple[str, ...]:
        """The request names (`TYPE name`) of its per-name rows, sorted."""
        rows = self.history[self.history["Name"].astype(str) != AGGREGATED]
        types = rows["Type"].fillna("").astype(str) if "Type" in rows else ""
        return tuple(sorted(set((types + " " + rows["Name"].astype(str)).str.strip())))


def locust_prefix(arg: str) -> str | None:
    """The Locust `--csv` prefix `arg` names (the prefix itself, or one of its CSV files), or
    None when it names none."""
    for suffix in (HISTORY_SUFFIX, "_stats.csv", FAILURES_SUFFIX, "_exceptions.csv"):
        if arg.endswith(suffix) and os.path.isfile(arg):
            return arg[: -len(suffix)]
    if not os.path.isdir(arg) and os.path.isfile(arg + HISTORY_SUFFIX):
        return arg
    return None


def read_history(prefix: str) -> LocustHistory:
    """Read `PREFIX_stats_history.csv` (and `PREFIX_failures.csv` when there); one-line
    `LocustCsvError` when it is missing, not Locust's, or written without --csv-full-history."""
    import pandas as pd  # at call time: `locust_prefix` is asked before any analysis

    path = prefix + HISTORY_SUFFIX
    try:
        history = pd.read_csv(path, dtype={"Name": str, "Type": str}, keep_default_na=False)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise LocustCsvError(f"{path}: cannot be read as Locust's stats history ({e})") from None
    missing = [c for c in REQUIRED if c not in history]
    if missing:
        raise LocustCsvError(f"{path}: not a Locust stats history (no {', '.join(missing)} column)")
    if history.empty:
        raise LocustCsvError(f"{path} has no rows: did the Locust test run?")
    if (history["Name"].astype(str) == AGGREGATED).all():
        raise LocustCsvError(
            f"{path} has only Locust's Aggregated rows, whose percentiles are over the whole test: "
            "run Locust with --csv-full-history as well as --csv (per-name rows with percentiles "
            "over the last ~10 s) to report per level"
        )
    failures = None
    if os.path.isfile(prefix + FAILURES_SUFFIX):
        try:
            failures = pd.read_csv(prefix + FAILURES_SUFFIX, keep_default_na=False)
        except (pd.errors.ParserError, pd.errors.EmptyDataError):
            failures = None
    return LocustHistory(prefix=prefix, history=history, failures=failures)
