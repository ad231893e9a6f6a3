"""The whole replay as one level: its totals and percentiles, SLO attainment and goodput.

The replay is measured as every other level is (`levels.measure`), with its measured window
the whole replay: no warm-up, every one of its requests measured, the window from the level's
start (the replay's time 0) to the end of its last request. So its throughput counts the tokens
served inside that window (any level's requests, as the server counts them), its percentiles
are over its successful requests (ITL from their merged histograms), and with SLOs its goodput
and attainment come from `decisions.goodput` over the same requests and window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...figures import PERCENTILES
from ...run_format.stream_columns import StreamColumns
from ...slo import SloSpec
from ..decisions.goodput import UNKNOWN, binding_text, level_goodput
from ..frame_records import row_dicts
from ..levels import as_floats
from ..levels.measure import LevelMeasurement, measure_levels
from .server_rate import ServerSpan, ServerView
from .windows import in_flight_mean, sent_spans

#: the per-request figures whose percentiles the replay's totals show
TOTAL_FIGURES: tuple[str, ...] = ("ttft", "itl", "e2e", "tpot")


@dataclass(frozen=True)
class ReplaySlo:
    """The replay against the SLOs (`decisions.goodput`, the replay as one level)."""

    items: tuple[str, ...]  # the SLOs as --slo items
    good: int | None  # requests that succeeded within every per-request threshold (None: unknown)
    good_share: float  # of the replay's requests (NaN: unknown)
    goodput_req_per_s: float
    goodput_output_tok_per_s: float
    met: bool  # the replay met them (attainment and every percentile objective)
    bound_by: str  # the item it missed, or the one closest to its limit (`binding_text`)
    unknown: bool = False  # whether it met them is unknown: the run lacks a figure they name

    def sentence(self) -> str:
        slos = ", ".join(self.items)
        if self.unknown:
            return f"SLOs ({slos}): whether the replay met them is {UNKNOWN}: {self.bound_by}."
        verdict = "met them" if self.met else "missed them"
        bound = f"bound by {self.bound_by}" if not self.met else f"closest: {self.bound_by}"
        if self.good is None:
            good = f"how many of the replay's requests were good is {UNKNOWN}"
        else:
            good = (
                f"{self.good:,} of the replay's requests were good ({self.good_share:.1%}); "
                f"goodput {self.goodput_req_per_s:,.2f} req/s "
                f"({self.goodput_output_tok_per_s:,.0f} output tok/s)"
            )
        return f"SLOs ({slos}): {good}; the replay {verdict}, {bound}."


@dataclass(frozen=True)
class ReplayTotals:
    """The whole replay's figures (see the module doc)."""

    requests: int  # recorded: due during the replay's level
    ok: int
    failed: int
    window_start: float  # Unix seconds: the replay's time 0 ...
    window_end: float  # ... and the end of its last request
    req_per_s: float
    total_tok_per_s: float
    output_tok_per_s: float
    in_flight: float  # requests sent and not yet ended, mean over the window
    percentiles: dict[str, float] = field(default_factory=dict)  # `ttft_p99`, ... (seconds)
    server: ServerSpan = ServerSpan()  # the server's tok/s beside the client's
    slo: ReplaySlo | None = None

    @property
    def window_s(self) -> float:
        return self.window_end - self.window_start


def replay_measurement(
    requests: pd.DataFrame, steps: pd.DataFrame, level: int, streams: StreamColumns | None = None
) -> LevelMeasurement:
    """The run measured with `level`'s measured window the whole replay: no warm-up, every one
    of its requests measured (`streams`: as `measure_levels` takes them)."""
    plan = steps.copy()
    mine = plan["level"].astype("Int64") == level
    plan.loc[mine, "warmup_requests"] = 0
    plan.loc[mine, "target_requests"] = int((as_floats(requests["level"]) == level).sum())
    return measure_levels(requests, plan, streams)


def _slo(
    requests: pd.DataFrame, measurement: LevelMeasurement, level: int, spec: SloSpec
) -> ReplaySlo | None:
    goodput = level_goodput(requests, measurement, spec)
    rows = row_dicts(goodput[goodput["level"] == level])
    if not rows:
        return None
    row = rows[0]
    return ReplaySlo(
        items=tuple(spec.items()),
        good=int(row["slo_good"]) if row["slo_good"] == row["slo_good"] else None,
        good_share=float(row["slo_good_share"]),
        goodput_req_per_s=float(row["goodput_req_per_s"]),
        goodput_output_tok_per_s=float(row["goodput_output_tok_per_s"]),
        met=row["slo_met"] == 1,
        bound_by=binding_text(row["slo_binding"], row["slo_binding_value"], spec),
        unknown=row["slo_met"] != row["slo_met"],
    )


def replay_totals(
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    level: int,
    server: ServerView | None = None,
    slo: SloSpec = SloSpec(),
    streams: StreamColumns | None = None,
) -> ReplayTotals | None:
    """The whole replay of `level` (None when none of its requests was recorded); `requests`
    and `steps` are the run's, `streams` its requests' parsed stream columns (`RunData.streams`;
    without them, the frame's own texts)."""
    if not (as_floats(requests["level"]) == level).any():
        return None
    measurement = replay_measurement(requests, steps, level, streams)
    rows = row_dicts(measurement.metrics[measurement.metrics["level"] == level])
    row = rows[0]
    a, b = float(row["window_start"]), float(row["window_end"])
    sent, end = sent_spans(requests)
    stats = {
        f"{key}_p{p}": float(row.get(f"{key}_p{p}", math.nan))
        for key in TOTAL_FIGURES
        for p in PERCENTILES
    }
    return ReplayTotals(
        requests=int(row["started"]),
        ok=int(row["ok"]),
        failed=int(row["failed"]),
        window_start=a,
        window_end=b,
        req_per_s=float(row["req_per_s"]),
        total_tok_per_s=float(row["total_tok_per_s"]),
        output_tok_per_s=float(row["output_tok_per_s"]),
        in_flight=in_flight_mean(sent, end, a, b),
        percentiles=stats,
        server=server.over(a, b) if server is not None else ServerSpan(),
        slo=_slo(requests, measurement, level, slo) if slo else None,
    )


def ratio_range(ratios: list[float]) -> tuple[float, float, int]:
    """The lowest and highest of the known ratios, and how many are known."""
    known = np.array([r for r in ratios if r == r], dtype=np.float64)
    if not len(known):
        return math.nan, math.nan, 0
    return float(known.min()), float(known.max()), len(known)
