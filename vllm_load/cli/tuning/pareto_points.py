"""A tuning search's configurations as Pareto points (`analysis/decisions/pareto.py`), from what
the search measured: each level of a `--matrix` configuration (its report curve, the means over
its runs) and each level of an SLO-max search (a run of that level alone). The GPUs that served
a point are `--gpus`, else the runs' meta (`--meta gpus=N`); a point without them is named on
the page, never drawn per GPU of a guess."""

from __future__ import annotations

import math
from dataclasses import asdict

from ...analysis.decisions.guided_search import GuidedStep
from ...analysis.decisions.pareto import ConfigurationPoint, per_user, per_user_limit
from ...report.search.outputs import search_files, write_search_outputs
from ...report.search.page_model import LevelJudged, PathTable, SearchPage
from ...slo import SloSpec, parse_slo
from . import written
from .guided_report import step_rows
from .runs import ConfigResult, Configuration
from .slo_max_report import item_cell
from .slo_max_state import Level, SearchState


def matrix_points(
    configurations: list[Configuration], results: list[ConfigResult], gpus: float | None
) -> list[ConfigurationPoint]:
    """Every level of every completed configuration of a `--matrix` tune; `gpus`: --gpus."""
    by_key = {Configuration(r.config, "").key: r for r in results}
    points = []
    for c in configurations:
        result = by_key.get(c.key)
        if result is None or result.outcome != "completed":
            continue
        slo_max = result.slo_value if result.slo_value == result.slo_value else None
        for f in result.level_figures:
            points.append(
                ConfigurationPoint(
                    dict(c.shown or c.config),
                    c.command,
                    gpus or result.gpus,
                    f["level"],
                    f["total_tok_per_s"],
                    f["output_tok_per_s_per_user"],
                    f["meets_slo"],
                    slo_max,
                    c.name,
                    ", ".join(result.run_dirs),
                )
            )
    return points


def run_level_figures(run_dir: str) -> tuple[float, float, float | None]:
    """(total tok/s, output tok/s per user, GPUs from its meta) of a one-level run; NaN and
    None where it cannot be read (the page names the point as missing them)."""
    # at call time: keeps numpy and pandas out of every command's start (cli.main)
    from ...analysis.levels.measure import measure_levels
    from ...analysis.series.model_comparison import parse_gpus
    from ...run_format.load import analysis_columns, load_run

    try:
        data = load_run(run_dir, analysis_columns())
    except (OSError, ValueError):
        return math.nan, math.nan, None
    metrics = measure_levels(data.requests, data.steps, data.streams).metrics
    meta = data.run.get("meta") or {}
    gpus = parse_gpus(meta.get("gpus")) if isinstance(meta, dict) else None
    if len(metrics) != 1:  # one level per run is what the search writes
        return math.nan, math.nan, gpus
    row = metrics.iloc[0]
    return float(row["total_tok_per_s"]), per_user(float(row["tpot_p50"])), gpus


def slo_max_points(
    levels: list[Level], server_cmd: str, slo_max: float | None, gpus: float | None
) -> list[ConfigurationPoint]:
    """Every level of an SLO-max search, in the order measured; `gpus`: --gpus."""
    points = []
    for lv in levels:
        total, user, meta_gpus = run_level_figures(lv.run_dir)
        points.append(
            ConfigurationPoint(
                {},
                server_cmd,
                gpus or meta_gpus,
                lv.level,
                total,
                user,
                lv.probe.met,
                slo_max,
                source=lv.run_dir,
            )
        )
    return points


def guided_points(steps: list[GuidedStep], gpus: float | None) -> list[ConfigurationPoint]:
    """Each configuration a guided search tried, at its SLO-max level (where the SLO holds, by
    the search's judgement); one without an SLO-max is named, not drawn. `gpus`: --gpus, else the
    meta of its first run."""
    points = []
    for step in steps:
        value = step.value
        meta_gpus = run_level_figures(step.run_dirs[0])[2] if step.run_dirs and not gpus else None
        points.append(
            ConfigurationPoint(
                dict(step.config),
                step.command,
                gpus or meta_gpus,
                math.nan if value is None else value,
                _figure(step.total_tok_per_s if value is not None else None),
                _figure(step.output_tok_per_s_per_user if value is not None else None),
                True if value is not None else None,
                value,
                f"step {step.index}",
                ", ".join(step.run_dirs),
            )
        )
    return points


def _figure(value: float | None) -> float:
    return math.nan if value is None else value


# --- the page of a search -------------------------------------------------------------------------
def slo_line(spec: SloSpec) -> float | None:
    """The output tok/s per user the SLO's limits on the gap between tokens imply."""
    limits = [(t.metric, t.limit) for t in spec.thresholds]
    return per_user_limit(limits + [(o.metric, o.limit) for o in spec.objectives])


def gpus_source(gpus: float | None, points: list[ConfigurationPoint]) -> str:
    if gpus:
        return f"--gpus {gpus:g}"
    if any(p.gpus for p in points):
        return "the runs' meta (--meta gpus=N)"
    return "not known: pass --gpus N (or --meta gpus=N to the runs)"


def _or_dash(value: float, spec: str) -> str:
    return format(value, spec) if value == value else "-"


def matrix_page(
    name: str,
    slo: list[str],
    configurations: list[Configuration],
    results: list[ConfigResult],
    gpus: float | None,
    unit: str,
    best: dict[str, ConfigResult | None],
) -> SearchPage:
    """A `--matrix` tune's page: its configurations in the order run, and all their levels;
    `best`: the tune's best configuration for each thing it ranks by."""
    by_key = {Configuration(r.config, "").key: r for r in results}
    named = [f"best for {by}: {r.label}" for by, r in best.items() if r is not None]
    rows: list[tuple[str, ...]] = []
    for i, c in enumerate(configurations, 1):
        r = by_key.get(c.key) or ConfigResult(c.config, [], "not run")
        rows.append(
            (
                str(i),
                c.label,
                str(len(r.run_dirs)),
                _or_dash(r.peak_tok_per_s, ",.0f"),
                _or_dash(r.peak_value, "g"),
                _or_dash(r.slo_value, "g") if slo else "-",
                r.outcome,
            )
        )
    header = ("step", "configuration", "runs", "peak total tok/s", "at level",
              "meets the SLO up to", "outcome")  # fmt: skip
    points = matrix_points(configurations, results, gpus)
    note = "A grid: every configuration runs whatever the others measured."
    return SearchPage(
        f"Tune {name}: {len(configurations)} configurations",
        "matrix",
        unit,
        list(slo),
        PathTable(header, rows, note),
        points,
        "; ".join(named) or "no configuration could be ranked",
        slo_line(parse_slo(slo)),
        gpus_source=gpus_source(gpus, points),
    )


def slo_max_page(name: str, state: SearchState, unit: str, gpus: float | None) -> SearchPage:
    """An SLO-max search's page: its levels in the order measured, with the bracket."""
    search, result = state.search, state.result
    items = [f.item for f in state.levels[0].figures] if state.levels else []
    rows = [
        (
            str(i),
            f"{lv.level:g}",
            *(item_cell(f) for f in lv.figures),
            "yes" if lv.probe.met else "no",
            lv.verdict,
        )
        for i, lv in enumerate(state.levels, 1)
    ]
    low, high = result.get("bracket") or (None, None)
    slo_max = result.get("slo_max")
    points = slo_max_points(state.levels, search.get("server_cmd") or "", slo_max, gpus)
    return SearchPage(
        f"SLO-max {name}: {', '.join(search['slo'])}",
        "slo-max",
        unit,
        list(search["slo"]),
        PathTable(("step", unit, *items, "met", "proven"), rows, METHOD),
        points,
        result.get("line", ""),
        slo_line(parse_slo(search["slo"])),
        host=search.get("host") or "",
        gpus_source=gpus_source(gpus, points),
        levels=[
            LevelJudged(lv.level, i, lv.probe.met, lv.verdict, lv.figures)
            for i, lv in enumerate(state.levels, 1)
        ],
        bracket=(low, high),
        slo_max=slo_max,
    )


METHOD = (
    "Each item: the estimate as the report computes it (95% interval). met: every estimate "
    "within its limit (what the search follows); proven: holds when every interval is within "
    "its limit, fails when one is wholly beyond it, straddles otherwise."
)


def search_page(page: SearchPage, directory: str) -> str:
    """Write the page, its JSON and Markdown in `directory`; what the final lines name. Not
    rebuilt (and one line says so) where it was last written showing this same page."""
    files = search_files(directory)
    key = written.fingerprint("page", asdict(page))
    if written.unchanged(directory, "page", key, [files.html, files.json, files.markdown]):
        print("Page unchanged: it shows the same configurations and results as when it was written")
    else:
        write_search_outputs(directory, page)
        written.remember(directory, "page", key)
    return f"{files.html} (and {files.json}, {files.markdown})"


def guided_page(
    name: str, search: dict, steps: list[GuidedStep], result: dict, unit: str, gpus: float | None
) -> SearchPage:
    """A guided search's page: its steps in the order tried, each configuration at its SLO-max."""
    header, rows = step_rows(steps, unit)
    points = guided_points(steps, gpus)
    note = (
        "Each step: one flag moved from the best configuration so far, as the bottleneck verdict "
        "at its SLO-max level advised; kept only where its SLO-max is better. A point is a "
        "configuration at its SLO-max, where the SLO holds."
    )
    return SearchPage(
        f"Guided search {name}: {', '.join(search['slo'])}",
        "guided",
        unit,
        list(search["slo"]),
        PathTable(header, rows, note),
        points,
        result.get("line", ""),
        slo_line(parse_slo(search["slo"])),
        gpus_source=gpus_source(gpus, points),
    )
