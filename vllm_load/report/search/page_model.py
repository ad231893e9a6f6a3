"""The numbers of a search's page, as the search hands them over (`SearchPage`) and as the page
shows them (`SearchView`: the frontier, the chosen configuration, each point's row)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...analysis.decisions.pareto import ConfigurationPoint, Frontier, choose, pareto_frontier
from ...analysis.decisions.slo_interval import ItemFigure


@dataclass(frozen=True)
class PathTable:
    """The search's path: one row per step as the search names them (a configuration run, a
    level measured), in the order it took them."""

    header: tuple[str, ...]
    rows: list[tuple[str, ...]]
    note: str = ""


@dataclass(frozen=True)
class LevelJudged:
    """One level of an SLO-max search: each SLO item's estimate and 95 % interval there."""

    level: float
    order: int  # 1 for the first level measured
    met: bool
    verdict: str
    figures: list[ItemFigure]


@dataclass
class SearchPage:
    """Everything a search's page, JSON and Markdown show."""

    title: str
    kind: str  # "matrix", "slo-max", ... : what searched
    unit: str  # of the levels: "users", "req/s"
    slo: list[str]  # the --slo items
    path: PathTable
    points: list[ConfigurationPoint]
    result_line: str  # the search's own final line
    per_user_line: float | None = None  # output tok/s per user the SLO's ITL/TPOT limit implies
    host: str = ""  # the server searched, where no command started it
    gpus_source: str = ""  # where the GPU count came from
    levels: list[LevelJudged] = field(default_factory=list)  # an SLO-max search's
    bracket: tuple[float | None, float | None] | None = None
    slo_max: float | None = None


@dataclass(frozen=True)
class PointRow:
    point: ConfigurationPoint
    on_frontier: bool
    chosen: bool
    missing: str  # what keeps it off the chart ("" when drawn)


@dataclass(frozen=True)
class SearchView:
    page: SearchPage
    frontier: Frontier
    chosen: ConfigurationPoint | None
    rows: list[PointRow]

    @property
    def command(self) -> str:
        """The chosen configuration's server command, or what stands for it."""
        if self.chosen is None:
            return ""
        if self.chosen.server_cmd:
            return self.chosen.server_cmd
        return f"(the server at {self.page.host}: the search did not start it, its command is not known)"

    @property
    def choice_line(self) -> str:
        """Why that configuration, in one sentence."""
        c, unit = self.chosen, self.page.unit
        if c is None:
            if not self.page.points:
                return "No configuration was measured"
            if self.page.slo and not any(p.meets_slo for p in self.page.points):
                return "No configuration met the SLO at any level: none is chosen"
            return "No point has every figure (see what each lacks below): none is chosen"
        rule = "met the SLO" if c.meets_slo else "was measured"
        within = f" up to {c.slo_max:g} {unit} (its SLO-max)" if c.slo_max is not None else ""
        return (
            f"{c.label}: the most total tok/s per GPU of every point that {rule}, "
            f"{c.total_tok_per_s_per_gpu:,.0f} tok/s per GPU at {c.level:g} {unit} with "
            f"{c.output_tok_per_s_per_user:,.1f} output tok/s per user; serve it{within}"
        )


def view(page: SearchPage) -> SearchView:
    frontier = pareto_frontier(page.points)
    chosen = choose(page.points)
    on = {id(p) for p in frontier.frontier}
    why = {id(p): text for p, text in frontier.missing}
    rows = [PointRow(p, id(p) in on, p is chosen, why.get(id(p), "")) for p in page.points]
    return SearchView(page, frontier, chosen, rows)


def finite(value: float | None) -> float | None:
    """A figure for JSON: None where it is not a finite number."""
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None
