"""How a number is written wherever text shows it (the level table, the headline, the report's
cells, the verdicts' sentences): one place, so "-" for none and "±0%" for no change hold in all.
Plain Python: the load process's live verdict reads it, and pandas stays out of that process."""

from __future__ import annotations

import math


def missing(value) -> bool:
    """No value to show: None or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def num(value, spec: str = ",.2f") -> str:
    """A number as the tables write it ("-" for none): the report's cells and the headline."""
    if missing(value):
        return "-"
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def signed_pct(share, none: str = "-") -> str:
    """A change as a signed whole percentage; "±0%" where it rounds to nothing (a throughput
    0.2 % lower read "-0%"), `none` for no value."""
    if missing(share):
        return none
    return "±0%" if round(share * 100) == 0 else f"{share * 100:+.0f}%"


def secs(seconds) -> str:
    return "-" if missing(seconds) else f"{seconds:,.3f} s"
