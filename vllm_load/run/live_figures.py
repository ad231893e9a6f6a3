"""What the web UI's live per-level table shows: the figures declared for it (`figures.LIVE`).

`LivePlan` reads the declarations once per live session (`run.live.LiveStats`): which
per-request quantities each finished request contributes, and how (`timed`: seconds from a
record column, into a running log histogram; `histogram`: a per-token quantity from the row's
own histogram column, ITL's `itl_hist`; `summed`: a count such as reasoning tokens, summed for a
mean), and the table's columns. A figure shown only with another (`only_with`: TTFAT with
reasoning tokens) has that one computed too, and is a column only where some level has it > 0.

In the live JSON, latencies are in ms (`ttft_p99_ms`), a share in % (`success_pct`), anything
else under its figure's key (`req_per_s`, `reasoning_tokens_mean`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..figures import LIVE, Figure, PerRequest, level_figures
from ..run_format.records import COLUMNS

#: the per-request quantities the live time series (`run.live_series`) takes, whatever the table shows
SERIES_SOURCES = ("ttft", "itl")
#: the level figures the live view computes itself (`run.live.LiveLevel.level_figure`)
LEVEL_KEYS = frozenset({"req_per_s", "total_tok_per_s", "output_tok_per_s", "success_rate"})


def live_key(figure: Figure) -> str:
    """The figure's name in the live JSON."""
    if figure.unit == "s":
        return f"{figure.key}_ms"
    if figure.unit == "share":
        return f"{figure.key.removesuffix('_rate')}_pct"
    return figure.key


def live_header(figure: Figure) -> str:
    label = figure.label[:1].upper() + figure.label[1:]
    return label + {"s": " (ms)", "share": " (%)"}.get(figure.unit, "")


@dataclass(frozen=True)
class LiveColumn:
    """One figure of the live per-level table: its JSON key, header and declaration."""

    key: str
    header: str
    figure: Figure


class LivePlan:
    """The live figures and what a record row gives them, from `figures.level_figures()`."""

    def __init__(self) -> None:
        figures = level_figures()
        by_key = {f.key: f for f in figures}
        shown = [f for f in figures if LIVE in f.shown]
        needed = [by_key[f.only_with] for f in shown if f.only_with in by_key]
        #: every figure the live levels compute: those shown, and those they are shown with
        self.computed: list[LiveColumn] = [
            LiveColumn(live_key(f), live_header(f), f) for f in dict.fromkeys([*shown, *needed])
        ]
        self.columns = [c for c in self.computed if LIVE in c.figure.shown]
        #: only_with (a figure key) -> its key in the live JSON
        self.only_with = {f.only_with: live_key(by_key[f.only_with]) for f in shown if f.only_with}
        sources: dict[str, PerRequest] = {}
        for key in SERIES_SOURCES:
            source = next(f.source for f in figures if f.source and f.source.key == key)
            sources[key] = source
        for column in self.computed:
            _check(column.figure)
            if column.figure.source is not None:
                sources.setdefault(column.figure.source.key, column.figure.source)
        #: (quantity, record column index) of the per-request seconds kept as histograms
        self.timed = tuple(
            (key, COLUMNS.index(key))
            for key, s in sources.items()
            if s.unit == "s" and not s.from_histogram
        )
        #: (quantity, index of its `<key>_hist` column) of the per-token quantities
        self.histogram = tuple(
            (key, COLUMNS.index(f"{key}_hist")) for key, s in sources.items() if s.from_histogram
        )
        #: (quantity, record column index) of the counts kept as sums, for their means
        self.summed = tuple(
            (key, COLUMNS.index(key)) for key, s in sources.items() if s.unit != "s"
        )
        # the column indices alone, for `run.live.Finished.of` (once per request)
        self.timed_at = tuple(i for _, i in self.timed)
        self.histogram_at = tuple(i for _, i in self.histogram)
        self.summed_at = tuple(i for _, i in self.summed)
        self.ttft_at = [key for key, _ in self.timed].index("ttft")
        self.itl_at = [key for key, _ in self.histogram].index("itl")

    def table_columns(self, present: Callable[[str], bool]) -> list[tuple[str, str]]:
        """(key, header) of the columns shown, given `present(json_key)`: whether some level's
        figure of that key is > 0 (a reasoning model's TTFAT: where reasoning tokens were)."""
        return [
            (c.key, c.header)
            for c in self.columns
            if not c.figure.only_with or present(self.only_with[c.figure.only_with])
        ]


def _check(figure: Figure) -> None:
    """A declaration the live view cannot keep running is refused when the view is set up."""
    source = figure.source
    if source is None:
        if figure.key not in LEVEL_KEYS:
            raise ValueError(
                f"figures: {figure.key} is marked LIVE, but the live view computes only "
                f"{', '.join(sorted(LEVEL_KEYS))} of the level figures: remove LIVE from it"
            )
        return
    if source.unit != "s" and figure.stat != "mean":
        raise ValueError(
            f"figures: {figure.key} is marked live, but the live view keeps only means of "
            f"per-request counts: show {source.key}_mean live instead"
        )
    column = f"{source.key}_hist" if source.from_histogram else source.key
    if column not in COLUMNS:
        raise ValueError(
            f"figures: {figure.key} is marked live, but requests.csv has no {column} column"
        )
