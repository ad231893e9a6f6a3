"""Several targets in one test (--hosts): each target's figures per level, its own /metrics
beside them, and a target lost during the run.

The levels are the test's (one measured set, one window per level, over every target); a
target's figures are its own measured requests' latencies and the work its successful requests
did inside the level's window (`breakdown.label_table`), and the server's side is that target's
own scrapes compared over the same windows as a single target's are
(`server_side.level_server_figures` with its requests only).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...run_format.stream_columns import StreamColumns
from ..frame_records import row_dicts
from . import as_floats
from .breakdown import label_table
from .server_side import TOLERANCE, level_server_figures
from .window_rates import ChunkMarks

#: a target is lost when its requests fail to the end of the run, this many at least, started
#: after its last success started (a replica that stopped answering; one failure at the end is
#: not a loss). From its start: a replica stopping refuses new connections while it finishes the
#: streams it has, so its last success can end after the failures that got it ejected
LOST_AFTER = 3


@dataclass(frozen=True)
class TargetLoss:
    """A target whose requests all failed from some time to the end of the run."""

    last_ok: float  # wall time its last successful request started (NaN: it never had one)
    first_failed: float  # start of the first of the failures that followed
    level: int  # the level that request belonged to
    failed: int  # requests that failed from then on
    errors: str  # their error categories, most frequent first ("connect 40, disconnect 2")
    last_sent: float = np.nan  # wall time its last request started
    #: the run's requests that started after that, all to the other targets: a target the load
    #: processes ejected (`client.target_picker`) is sent nothing more while the run goes on
    sent_after: int = 0


@dataclass(frozen=True)
class TargetFigures:
    """One target's figures (see the module docstring)."""

    url: str
    table: pd.DataFrame  # per level: `breakdown.label_table`'s columns, `target` its label
    server: pd.DataFrame | None  # per level: `level_server_figures` on its own scrapes
    scrape_note: str  # why its /metrics gave nothing ("" when it did, or was not scraped)
    loss: TargetLoss | None


def target_figures(
    requests: pd.DataFrame,
    labelled: pd.DataFrame,
    metrics: pd.DataFrame,
    targets: list[dict],
    servers: list[pd.DataFrame | None],
    interval: float | None = None,
    ok_marks: ChunkMarks | None = None,
    streams: StreamColumns | None = None,
) -> list[TargetFigures]:
    """Each target of run.json's `targets` (url, in order), with `servers[i]` its scrapes (None:
    not scraped). Empty for a run of one target. `ok_marks`: the labelled successful rows' chunk
    marks (`LevelMeasurement.labelled_marks`); `streams`: `requests`' (`RunData.streams`)."""
    if len(targets) < 2:
        return []
    table = label_table(labelled, metrics, "target", ok_marks)
    sent_to = requests["target"].astype("string").fillna("") if "target" in requests else None
    out = []
    for info, server in zip(targets, servers):
        url = str(info.get("url", ""))
        rows = (
            np.flatnonzero((sent_to == url).to_numpy(dtype=bool))
            if sent_to is not None
            else np.arange(0)
        )
        mine = requests.iloc[rows]
        compared = None
        if server is not None and len(server) >= 2:
            own = streams.take(rows) if streams is not None else None
            compared = level_server_figures(server, metrics, mine, interval, streams=own)
            # (where the scrapes cannot resolve a window, its client side is the whole level's)
            compared.loc[~compared["comparable"], "client_output_tok_per_s"] = np.nan
        scrape = info.get("scrape") or {}
        note = str(scrape.get("note", "")) if not scrape.get("samples") else ""
        out.append(
            TargetFigures(
                url,
                table[table["target"] == url].reset_index(drop=True),
                compared,
                note,
                target_loss(mine, as_floats(requests["start_ts"])),
            )
        )
    return out


def target_loss(requests: pd.DataFrame, run_starts: np.ndarray | None = None) -> TargetLoss | None:
    """`requests` (one target's, any level) failing from some point to the end of the run, at
    least `LOST_AFTER` of them started after the last success did; None otherwise. `run_starts`: every
    request's start, each target's, for how many the run sent after the target's last."""
    if not len(requests):
        return None
    ok = as_floats(requests["ok"]) == 1
    start = as_floats(requests["start_ts"])
    last_ok = float(start[ok].max()) if ok.any() else np.nan
    after = ~ok & (start > last_ok) if ok.any() else ~ok  # (so nothing started after succeeded)
    if after.sum() < LOST_AFTER:
        return None
    failed = requests[after]
    first = int(np.argmin(start[after]))
    errors = failed["error"].astype("string").fillna("").replace("", "unknown").value_counts()
    return TargetLoss(
        last_ok,
        float(start[after][first]),
        int(as_floats(failed["level"])[first]),
        int(after.sum()),
        ", ".join(f"{e} {n}" for e, n in errors.items()),
        float(start.max()),
        int((run_starts > start.max()).sum()) if run_starts is not None else 0,
    )


def _server_cells(target: TargetFigures, level: int) -> dict:
    """The target's own /metrics over the part of the level's window between two of its scrapes:
    generated tok/s, the target's requests' output tok/s over the same span, client / server."""
    cells = {
        "compared_output_tok_per_s": np.nan,
        "server_output_tok_per_s": np.nan,
        "client_server_ratio": np.nan,
        "not_compared": "",
    }
    if target.server is None:
        return {**cells, "not_compared": target.scrape_note or "not scraped"}
    rows = target.server[target.server["level"] == level]
    if not len(rows):
        return cells
    row = rows.iloc[0]
    if not row["comparable"]:
        return {**cells, "not_compared": str(row["not_comparable_reason"])}
    server, client = float(row["server_gen_tok_per_s"]), float(row["client_output_tok_per_s"])
    return {
        "compared_output_tok_per_s": client,
        "server_output_tok_per_s": server,
        "client_server_ratio": client / server if server else np.nan,
        "not_compared": "",
    }


def rows_of(target: TargetFigures) -> list[dict]:
    """One row per level of the target: its measured requests' figures and its server's."""
    return [{**row, **_server_cells(target, int(row["level"]))} for row in row_dicts(target.table)]


def _clock(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%H:%M:%S UTC")


def target_findings(run_id: str, targets: list[TargetFigures]) -> list[str]:
    """What the targets' figures say: each lost target, and each whose own /metrics disagree
    with its requests (each sentence with the figures it stands on)."""
    lead = f"Run {run_id}: target" if run_id else "Target"
    lines = []
    for target in targets:
        loss = target.loss
        if loss is not None:
            since = (
                f"started after its last success (started {_clock(loss.last_ok)})"
                if loss.last_ok == loss.last_ok
                else "from its first request"
            )
            ejected = (
                f"; no new request went to it after {_clock(loss.last_sent)}: the "
                f"{loss.sent_after} the run sent after that all went to the other targets"
                if loss.sent_after
                else ""
            )
            lines.append(
                f"{lead} {target.url} was lost during level {loss.level}: its {loss.failed} "
                f"requests {since} to the end of the run failed ({loss.errors}){ejected}; the "
                "other targets' rows are their own requests'."
            )
        for row in rows_of(target):
            ratio = row["client_server_ratio"]
            if ratio == ratio and abs(ratio - 1) > TOLERANCE:
                lines.append(
                    f"{lead} {target.url}, level {row['level']}: its requests' output "
                    f"{row['compared_output_tok_per_s']:,.0f} tok/s against its /metrics' "
                    f"{row['server_output_tok_per_s']:,.0f} (client / server {ratio:.3f}, "
                    f"beyond {TOLERANCE:.0%})."
                )
    return lines


def target_table_text(targets: list[TargetFigures]) -> str:
    """The targets' rows as the table `vllm-load run` prints, then what they say."""
    header = ("target", "level", "measured", "failed", "out tok/s", "E2E p50 s", "client/server")
    rows = [
        (
            target.url,
            f"{row['value']:,.4g}",
            f"{row['measured']}",
            f"{row['failed']}",
            f"{row['output_tok_per_s']:,.0f}",
            f"{row['e2e_p50']:.3f}",
            f"{row['client_server_ratio']:.3f}"
            if row["client_server_ratio"] == row["client_server_ratio"]
            else "-",
        )
        for target in targets
        for row in rows_of(target)
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in (header, *rows)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + [f"- {line}" for line in target_findings("", targets)])
