"""The report's "Replay over time": a run's trace replays (`analysis.replay`) as a chart, their
tables' rows, and their entries in summary.json and summary.csv.

The chart has three panels over the replay's time, one point per window: throughput (the
client's total tok/s, and the server's from `/metrics` where it was scraped), requests in flight
against the cap, and TTFT p50 and p99.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import numpy as np

from ..analysis.replay.read import Line, Replay
from ..analysis.replay.server_rate import ServerSpan
from ..analysis.replay.verdicts import LATE_LIMIT_S, PREFIX_TOLERANCE
from ..analysis.replay.windows import ReplayWindow
from ..load_kinds import TRACE
from .model import RunSummary

if TYPE_CHECKING:
    from .charts import Chart


@dataclass
class ReplayView:
    """One replay of a run, as the templates show it."""

    replay: Replay
    anchor: str
    lines: list[Line]
    chart: Chart | None = None


def _column(replay: Replay, name: str, scale: float = 1.0) -> np.ndarray:
    """A window figure (`server.<name>`: the server's side) per window."""
    owner, _, name = name.rpartition(".")
    return (
        np.array(
            [getattr(getattr(w, owner) if owner else w, name) for w in replay.windows],
            dtype=np.float64,
        )
        * scale
    )


def replay_chart(run_id: str, replay: Replay, key: str) -> Chart | None:
    """Throughput (client and server), in flight and TTFT per window over the replay."""
    from .charts import STYLE, Chart, plt, png_base64  # matplotlib: not for summary.json's readers

    if not replay.windows:
        return None
    edges = np.array([replay.windows[0].start_s] + [w.end_s for w in replay.windows])
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(3, 1, figsize=(9.5, 7.2), sharex=True)
        tok, flight, ttft = axes
        tok.stairs(
            _column(replay, "total_tok_per_s"), edges, baseline=None, label="client total tok/s"
        )
        server = _column(replay, "server.server_total_tok_per_s")
        if not np.isnan(server).all():
            tok.stairs(
                server, edges, baseline=None, linestyle="--", label="server total tok/s (/metrics)"
            )
        tok.set_ylabel("tok/s")
        tok.set_title(f"Run {run_id}: replay of level {replay.level.level} over time", fontsize=9)
        flight.stairs(
            _column(replay, "in_flight"),
            edges,
            baseline=None,
            color="tab:red",
            label="in flight (mean)",
        )
        flight.axhline(replay.level.cap, color="grey", linestyle=":", label="cap")
        flight.set_ylabel("requests")
        ttft.stairs(_column(replay, "ttft_p50", 1000.0), edges, baseline=None, label="TTFT p50")
        ttft.stairs(
            _column(replay, "ttft_p99", 1000.0),
            edges,
            baseline=None,
            linestyle="--",
            label="TTFT p99",
        )
        ttft.set_ylabel("ms")
        ttft.set_xlabel("seconds since the replay started")
        for ax in axes:
            ax.set_ylim(bottom=0)
            ax.legend(loc="upper left", fontsize=7)
        png = png_base64(fig)
    return Chart(
        key,
        f"Replay over time, run {run_id}",
        "Per window of the replay: the client's and the server's total tokens per second, the "
        "requests in flight against the cap, and TTFT p50 and p99",
        png,
    )


def replay_views(run: RunSummary, run_anchor: str) -> list[ReplayView]:
    """The views of a run's replays (none for a run that replayed no trace)."""
    from .charts import slug

    out = []
    for i, replay in enumerate(run.replays):
        anchor = f"replay-{run_anchor}-{i + 1}"
        key = f"replay-{slug(run.run_id)}-{replay.level.level}"
        out.append(
            ReplayView(replay, anchor, replay.lines(), replay_chart(run.run_id, replay, key))
        )
    return out


def server_record(server: ServerSpan) -> dict:
    return {
        **dataclasses.asdict(server),
        "output_ratio": server.output_ratio,
        "total_ratio": server.total_ratio,
    }


def window_record(window: ReplayWindow) -> dict:
    """A window's figures, the server's beside the client's prefixed `server.`."""
    record = {k: v for k, v in dataclasses.asdict(window).items() if k != "server"}
    return {**record, **{f"server.{k}": v for k, v in server_record(window.server).items()}}


def replay_json(replay: Replay) -> dict:
    """A replay as summary.json holds it (seconds, tok/s; NaN as null by `summary.clean`)."""
    t = replay.totals
    prefix = replay.prefix_cache
    return {
        "level": replay.level.level,
        "cap": replay.level.cap,
        "trace_start": replay.level.trace_start,
        "trace": dataclasses.asdict(replay.trace) if replay.trace else None,
        "window_s": replay.window_s,
        "window_rule": replay.window_rule,
        "totals": {
            **{
                k: v
                for k, v in dataclasses.asdict(t).items()
                if k not in ("percentiles", "slo", "server")
            },
            **t.percentiles,
            "window_s": t.window_s,
        },
        "server": server_record(t.server),
        "slo": dataclasses.asdict(t.slo) if t.slo else None,
        "lateness": {
            **dataclasses.asdict(replay.lateness),
            "limit_s": LATE_LIMIT_S,
            "kept_up": replay.lateness.kept_up,
        },
        "prefix_cache": (
            {
                **dataclasses.asdict(prefix),
                "server_rate": prefix.server_rate,
                "predicted_rate": prefix.predicted_rate,
                "difference": prefix.difference,
                "tolerance": PREFIX_TOLERANCE,
                "agrees": prefix.agrees,
            }
            if prefix
            else None
        ),
        "windows": [window_record(w) for w in replay.windows],
        "findings": [line.text for line in replay.lines()],
    }


def replay_rows(run: dict) -> Iterator[tuple]:
    """summary.csv's rows of a run's replays (`summary_dict`'s `replays`): `replay` scope, the
    level (kind `trace`, its value the s into the trace it starts at), metric `cap` (the cap on
    requests in flight), `window<i>.<figure>`, `total.<figure>`, `server.<figure>` (the whole
    replay's server side), `lateness.<figure>`, `prefix_cache.<figure>` or `slo.<figure>`; a
    window's server side is `window<i>.server.<figure>`."""
    for replay in run.get("replays") or []:
        start = replay["trace_start"]

        def row(metric: str, value) -> tuple:
            return (
                "replay",
                run["series"],
                run["run_id"],
                TRACE.name,
                start,
                metric,
                "value",
                value,
            )

        def cells(prefix: str, record: dict | None) -> Iterator[tuple]:
            for name, value in (record or {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    yield row(f"{prefix}.{name}", value)

        yield row("cap", replay["cap"])  # the cap on requests in flight: the Locust users run
        yield from cells("total", replay["totals"])
        yield from cells("server", replay["server"])
        yield from cells("lateness", replay["lateness"])
        yield from cells("prefix_cache", replay["prefix_cache"])
        yield from cells("slo", replay["slo"])
        for window in replay["windows"]:
            yield from cells(f"window{window['index']}", window)
