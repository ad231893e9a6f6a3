"""Speculative decoding per level, from the server's `vllm:spec_decode_*` counters
(`server_metrics.csv`), over each level's measured window.

Over the scrapes inside the window [`window_start`, `window_end`] (the first at or after its
start to the last at or before its end: counter differences between two real scrapes, none
interpolated, so that they are exactly what the server counted between them):

- acceptance length: 1 + accepted tokens / drafts (a draft is one sequence's step; the 1 is the
  target's own token), the tokens a decoding step yields per sequence;
- draft acceptance rate: accepted tokens / draft tokens. It falls as K rises whatever the drafts
  are worth, so nothing ranks by it (`figures.SPECULATION`);
- per draft position: drafts whose token there was accepted / drafts.

A server without speculation has none of the counters: its levels have no figures (NaN, and the
tables and the report leave them out), never zeros. A level's figures are unknown (NaN, with
`spec_unknown` saying why) where one of the counters went back between two of its scrapes (the
server restarted: the difference would be meaningless, or negative), where fewer than two
scrapes fall inside its window, or where it verified no draft.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...figures import spec_columns, spec_position_key
from ...run_format.files import spec_position_columns as scraped_positions
from ..frame_records import row_dicts
from .scrapes import counter_growth

#: the per-level column that says why a speculating server's level has no figures ("" if it has)
UNKNOWN = "spec_unknown"
_COUNTERS = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")


def speculating(server: pd.DataFrame | None) -> bool:
    """Whether the server exposed the speculation counters at all."""
    return (
        server is not None
        and "spec_drafts" in server
        and bool(pd.to_numeric(server["spec_drafts"], errors="coerce").notna().any())
    )


def _counters(server: pd.DataFrame) -> list[str]:
    return [c for c in (*_COUNTERS, *scraped_positions(server.columns)) if c in server]


def spec_over(server: pd.DataFrame, a: float, b: float) -> dict[str, float | str]:
    """The speculation figures over the scrapes inside [a, b], and why they are unknown ("")."""
    positions = scraped_positions(server.columns)
    out: dict[str, float | str] = dict.fromkeys(
        [*spec_columns(), *(spec_position_key(p) for p in range(len(positions)))], np.nan
    )
    delta = counter_growth(server, _counters(server), a, b)
    if isinstance(delta, str):
        out[UNKNOWN] = delta
        return out
    drafts = delta.get("spec_drafts", np.nan)
    if not drafts > 0:
        out[UNKNOWN] = "no drafts verified in the measured window"
        out["spec_drafts"] = drafts
        return out
    accepted, draft_tokens = delta["spec_accepted_tokens"], delta["spec_draft_tokens"]
    out["spec_drafts"] = drafts
    out["spec_acceptance_length"] = 1.0 + accepted / drafts
    out["spec_draft_acceptance_rate"] = accepted / draft_tokens if draft_tokens > 0 else np.nan
    for p, column in enumerate(positions):
        out[spec_position_key(p)] = delta[column] / drafts
    out[UNKNOWN] = ""
    return out


def level_speculation(server: pd.DataFrame | None, metrics: pd.DataFrame) -> pd.DataFrame | None:
    """Per level of a run's table (`level`, `window_start`, `window_end`): its speculation
    figures and `spec_unknown`; None where the server does not speculate."""
    if not speculating(server):
        return None
    assert server is not None  # speculating() checked it
    rows = [
        {"level": rec["level"], **spec_over(server, rec["window_start"], rec["window_end"])}
        for rec in row_dicts(metrics)
    ]
    return pd.DataFrame(rows)


def with_speculation(metrics: pd.DataFrame, server: pd.DataFrame | None) -> pd.DataFrame:
    """`measure_levels`'s per-level table with its speculation columns filled from the run's
    server_metrics.csv (`RunData`'s; left NaN where the server does not speculate), and, where it
    does, the per-position columns and `spec_unknown`."""
    figures = level_speculation(server, metrics)
    if figures is None:
        return metrics
    out = metrics.copy()
    for column in figures.columns.drop("level"):
        out[column] = figures[column].to_numpy()
    return out


def speculation_findings(run_id: str, metrics: pd.DataFrame) -> list[str]:
    """What a report must say about a run's speculation figures: the levels where they are
    unknown, and why."""
    if UNKNOWN not in metrics:
        return []
    unknown = metrics[metrics[UNKNOWN].fillna("").astype(str) != ""]
    return [
        f"Run {run_id}: speculative decoding figures unknown at {value:,.4g}: {why}."
        for value, why in zip(unknown["value"], unknown[UNKNOWN])
    ]
