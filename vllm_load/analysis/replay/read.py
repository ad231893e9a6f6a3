"""A run's trace replays read as the report shows them: per window, as wholes, and what they say.

`read_replays` finds the run's trace levels (`plan`), cuts each into windows (`windows`),
measures it whole (`whole`) and judges its lateness and prefix cache (`verdicts`). Each
`Replay` says what it found in sentences that name their figures (`Replay.lines`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...run_format.stream_columns import StreamColumns
from ...slo import SloSpec
from ..levels import as_floats
from ..levels.server_side import scrape_interval
from ..levels.spans import own_streams, success_spans
from .plan import ReplayLevel, TraceRecord, replay_levels
from .server_rate import NOT_SCRAPED, ServerView
from .verdicts import Lateness, PrefixCacheCheck, lateness, prefix_cache
from .whole import ReplayTotals, ratio_range, replay_totals
from .windows import ReplayWindow, replay_windows, window_edges, window_length


@dataclass(frozen=True)
class Line:
    """One sentence of a replay's findings; `warn` when it says something went wrong."""

    text: str
    warn: bool = False


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds == seconds else "-"


def _s(seconds: float) -> str:
    return f"{seconds:,.2f} s" if seconds == seconds else "-"


@dataclass(frozen=True)
class Replay:
    """One trace level of a run, read over time and as a whole."""

    level: ReplayLevel
    trace: TraceRecord | None
    window_s: float  # the windows' length
    window_rule: str  # how that length was chosen
    windows: tuple[ReplayWindow, ...]
    totals: ReplayTotals
    lateness: Lateness
    prefix_cache: PrefixCacheCheck | None
    notes: tuple[str, ...] = ()  # what the report must say about the replay's records

    def summary_line(self) -> Line:
        t = self.totals
        p = t.percentiles
        what = f"The replay of {self.trace.describe()}" if self.trace else "The replay"
        return Line(
            f"{what}: {t.requests:,} requests over {t.window_s:,.1f} s, {t.ok:,} succeeded and "
            f"{t.failed:,} failed; {t.total_tok_per_s:,.0f} total tok/s "
            f"({t.output_tok_per_s:,.0f} output); TTFT p50 {_ms(p['ttft_p50'])}, "
            f"p99 {_ms(p['ttft_p99'])}; ITL p99 {_ms(p['itl_p99'])}; E2E p99 "
            f"{_s(p['e2e_p99'])}; {t.in_flight:,.1f} requests in flight on average (cap "
            f"{self.level.cap:,.0f}).",
            warn=t.failed > 0,
        )

    def server_line(self) -> Line | None:
        s = self.totals.server
        if s.why_not == NOT_SCRAPED:
            return None
        if s.why_not:
            return Line(
                "Throughput against the server's /metrics is not compared: over the whole "
                f"replay, {s.why_not} (a smaller --metrics-interval makes it comparable)."
            )
        windows = [w.server for w in self.windows if w.server.compare_s == w.server.compare_s]
        low, high, n = ratio_range([w.output_ratio for w in windows])
        total_low, total_high, _ = ratio_range([w.total_ratio for w in windows])
        per_window = (
            f"; per window, over the {n} of {len(self.windows)} windows the scrapes resolve, "
            f"generated {low:.3f} to {high:.3f} and total {total_low:.3f} to {total_high:.3f}"
            if n
            else f"; no window is long enough to compare ({self.windows[0].server.why_not})"
        )
        return Line(
            f"Throughput against the server's /metrics, over the replay's {s.compare_s:,.1f} s "
            f"between scrapes: the server counted {s.server_output_tok_per_s:,.0f} generated tok/s "
            f"and {s.server_total_tok_per_s:,.0f} in all (vllm:generation_tokens, + "
            f"prompt_tokens), the client {s.client_output_tok_per_s:,.0f} and "
            f"{s.client_total_tok_per_s:,.0f}: client/server {s.output_ratio:.3f} generated, "
            f"{s.total_ratio:.3f} in all{per_window}."
        )

    def lines(self) -> list[Line]:
        """What the replay says, every sentence naming its figures."""
        out = [Line(note, warn=True) for note in self.notes]
        out.append(self.summary_line())
        out.append(Line(self.lateness.sentence(), warn=self.lateness.kept_up is False))
        server = self.server_line()
        if server is not None:
            out.append(server)
        if self.prefix_cache is not None:
            out.append(Line(self.prefix_cache.sentence(), warn=self.prefix_cache.agrees is False))
        if self.totals.slo is not None:
            out.append(Line(self.totals.slo.sentence(), warn=not self.totals.slo.met))
        return out


def _window_rule(length: float, span: float, asked: float | None) -> str:
    if asked is not None and asked > 0:
        widened = "" if length == asked else f" (widened from {asked:g} s: at most 500 windows)"
        return f"{length:g} s windows as asked{widened}"
    return f"{length:g} s windows: about a twelfth of the replay's {span:,.1f} s, rounded down"


def _notes(trace: TraceRecord | None, recorded: int, run: dict) -> tuple[str, ...]:
    if trace is None:
        return (
            "run.json has no trace record: the trace's file, schedule and prefix reuse are unknown.",
        )
    if trace.requests >= 0 and recorded != trace.requests:
        return (
            f"{recorded:,} of the {trace.requests:,} requests the replay scheduled were recorded "
            f"(the run's outcome: {run.get('outcome', 'unknown')}): the figures are over those.",
        )
    return ()


def server_view(
    requests: pd.DataFrame,
    server: pd.DataFrame | None,
    run: dict,
    streams: StreamColumns | None = None,
) -> ServerView | None:
    """The run's scrapes and served tokens, for the server's side of each comparison."""
    if server is None or len(server) < 2:
        return None
    configured = (run.get("server_metrics") or {}).get("interval")
    spans = success_spans(requests, streams=streams)
    return ServerView(server, scrape_interval(server, configured), spans)


def read_replays(
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    run: dict,
    server: pd.DataFrame | None = None,
    slo: SloSpec = SloSpec(),
    window: float | None = None,
    streams: StreamColumns | None = None,
) -> list[Replay]:
    """Every trace level of a run (none for a run that replayed no trace). `window`: the
    windows' length in seconds (default: run.json's `settings.trace_window`, else about a
    twelfth of the replay); `streams`: the requests' parsed stream columns (`RunData.streams`;
    without them, the frame's own texts)."""
    levels = replay_levels(steps)
    if not levels:
        return []
    if streams is None:
        streams = own_streams(requests)
    trace = TraceRecord.of(run)
    view = server_view(requests, server, run, streams)
    recorded = run.get("settings", {}).get("trace_window")
    asked = window if window else (float(recorded) if recorded else None)
    out = []
    for lv in levels:
        totals = replay_totals(requests, steps, lv.level, view, slo, streams)
        if totals is None:
            continue
        ends = as_floats(requests.loc[as_floats(requests["level"]) == lv.level, "end_ts"])
        last = float(np.nanmax(ends)) if len(ends) else lv.start
        span = last - lv.start
        length = window_length(span, asked)
        speed = trace.speed if trace and trace.speed == trace.speed else 1.0
        edges = window_edges(lv.start, last, length)
        windows = replay_windows(requests, lv.level, edges, lv.trace_start, speed, view, streams)
        # the prediction is the trace's whole schedule: one replay level's alone
        predicted = trace.predicted_cached_tokens if trace and len(levels) == 1 else None
        prompt = trace.prompt_tokens if trace else -1
        out.append(
            Replay(
                level=lv,
                trace=trace,
                window_s=length,
                window_rule=_window_rule(length, span, asked),
                windows=tuple(windows),
                totals=totals,
                lateness=lateness(requests, lv.level, lv.cap),
                prefix_cache=prefix_cache(server, lv.start, last, predicted, prompt),
                notes=_notes(trace, totals.requests, run),
            )
        )
    return out
