"""Build a report: measure the runs, draw the charts, write HTML, Markdown, JSON and CSV.

`build_report` is the one entry point (used by `vllm-load report` and `vllm-load demo`). The
HTML is a single self-contained file: charts are embedded PNGs, styles inline, no scripts,
no external requests; every string from a run (model ids, error messages, metadata) goes
through jinja2's autoescaping.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Sequence

import jinja2

from .. import __version__
from ..analysis.frame_records import row_dicts
from ..analysis.levels import server_queue, server_side
from ..analysis.levels.client_side import LATE_RULE
from ..analysis.replay.verdicts import LATE_LIMIT_S, PREFIX_TOLERANCE
from ..analysis.series.saturation import SaturationRule
from ..figures import spec_position_keys
from ..load_kinds import KINDS
from ..run_format.files import write_atomic
from ..run_format.lost_workers import LostWorker, lost_workers
from ..server.loss import MIN_STREAK, NO_ANSWER_SHARE
from ..slo import SloSpec
from . import charts, disagg_section, gpu_section, persona_charts, speculation_section
from .cells import (
    figure_value,
    interval,
    md,
    md_code,
    mean_ci,
    ms,
    num,
    pct,
    report_figures,
    secs,
    signed_pct,
)
from .model import ReportData, RunSummary, SeriesReport, build_report_data
from .parallel import in_two_processes
from .replay_section import ReplayView, replay_views
from .summary_files import summary_dict, write_summary_csv
from .target_section import target_rows
from .template_cache import template_cache
from .why import WhyView, why_view


@dataclass(frozen=True)
class ReportPaths:
    """Where one report's files were written."""

    html: str
    json: str
    csv: str
    markdown: str
    notes: tuple[str, ...] = ()  # what the report left out of the runs' files, and why


@dataclass
class SeriesView:
    report: SeriesReport
    anchor: str
    charts: list[charts.Chart] = field(default_factory=list)
    why: WhyView | None = None  # its "Why it saturates" section


@dataclass
class RunView:
    summary: RunSummary
    anchor: str
    errors: list[dict]
    environment: list[tuple[str, str]]
    chart: charts.Chart | None = None
    validation: dict | None = None
    lost_levels: set = field(default_factory=set)
    server_chart: charts.Chart | None = None
    persona_chart: charts.Chart | None = None  # when the run had several personas
    turn_chart: charts.Chart | None = None  # when it held conversations
    replays: list[ReplayView] = field(default_factory=list)  # its trace replays over time
    gpu_chart: charts.Chart | None = None  # GPU telemetry per level (`gpu_section`)
    speculation_chart: charts.Chart | None = None  # where the server speculated
    disagg_chart: charts.Chart | None = None  # where its prefill and decode servers were scraped
    targets: list[dict] = field(default_factory=list)  # per target and level (several targets)
    target_chart: charts.Chart | None = None


def lost_worker_text(entry) -> str:
    """`worker X (host H, pid P), lost during level L: 2 requests in flight abandoned` from a
    run.json `workers_lost` entry (older runs list bare ids, or no host, pid or count)."""
    lost = LostWorker.of(entry)
    what = lost.what_was_lost()
    when = lost.when()
    return lost.named() + (f", lost {when}" if when else "") + (f": {what}" if what else "")


#: what the key findings stand on, for the methodology (the queue rule follows it)
FINDINGS_RULE = (
    "Each finding names the figures it stands on. They open with how a run ended when it did not "
    "walk its whole ladder (run.json's outcome: interrupted, stopped by a --stop-when rule, every load worker lost, never closed), "
    f"when its target stopped answering (it ended on at least {MIN_STREAK} failures, "
    f"{NO_ANSWER_SHARE:.0%} of them no answer: connect, disconnect, timeouts, with no success after "
    "them) or when it lost a load worker. A "
    "level with failed requests is explained by them, by category and count (requests.csv's error, "
    "with an HTTP error's status), never by the client."
)


def _environment(run: dict) -> list[tuple[str, str]]:
    """The "Test environment" rows of one run: target, model, versions, client, settings, metadata."""
    target = run.get("target") or {}
    models = ((target.get("models") or {}).get("data")) or []
    client = run.get("client") or {}
    prompts = run.get("prompts") or {}
    rows = [
        ("target", target.get("host", "-")),
        (
            "server version",
            json.dumps(target.get("version"), sort_keys=True) if target.get("version") else "-",
        ),
        (
            "models served",
            ", ".join(
                f"{m.get('id')} (max_model_len {m.get('max_model_len', '?')}, root {m.get('root', '-')})"
                for m in models
                if isinstance(m, dict)
            )
            or "-",
        ),
        ("model tested", run.get("model", "-")),
        ("outcome", run.get("outcome", "-")),
        ("started / ended", f"{run.get('started_at', '-')} / {run.get('ended_at', '-')}"),
        (
            "vllm-load / Locust",
            f"{run.get('vllm_load_version', '-')} / {run.get('locust_version', '-')}",
        ),
        ("client", ", ".join(f"{k}={v}" for k, v in client.items()) or "-"),
        ("workers seen", ", ".join(map(str, run.get("workers_seen") or [])) or "-"),
        (
            "workers lost",
            "; ".join(lost_worker_text(w) for w in run.get("workers_lost") or []) or "none",
        ),
        ("prompts", ", ".join(f"{k}={v}" for k, v in prompts.items()) or "-"),
        ("requests recorded", str(run.get("requests_recorded", "-"))),
    ]
    for key, value in sorted((run.get("settings") or {}).items()):
        if key in ("meta", "run_dir", "out"):
            continue
        rows.append(
            (
                f"setting: {key}",
                ",".join(map(str, value)) if isinstance(value, list) else str(value),
            )
        )
    for key, value in sorted((run.get("meta") or {}).items()):
        rows.append((f"meta: {key}", str(value)))
    return [(k, str(v)) for k, v in rows]


def template_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("vllm_load.report", "templates"),
        bytecode_cache=template_cache(),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
    )
    env.filters.update(
        num=num, ms=ms, secs=secs, pct=pct, signed_pct=signed_pct, md=md, md_code=md_code
    )
    env.filters["records"] = row_dicts  # a frame's rows, as to_dict("records") but cheaper
    env.globals.update(
        interval=interval,
        mean_ci=mean_ci,
        lost_worker_text=lost_worker_text,
        report_figures=report_figures,
        figure_value=figure_value,
        spec_position_keys=spec_position_keys,  # speculation per draft position (_speculation.html)
        gpu_source_line=gpu_section.source_line,  # GPU telemetry (_gpu.html, _gpu.md)
        kinds=KINDS,  # a comparison row's levels are its own kind's (`ModelRow.kind`)
    )
    return env


# --- progress ---------------------------------------------------------------------------------------
class Progress:
    """A progress bar on a terminal (rich), plain lines otherwise, nothing when disabled."""

    def __init__(self, total: int, enabled: bool):
        self.enabled = enabled
        self._bar = None
        if enabled and sys.stderr.isatty():
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True
            )
            self._bar.start()
            self._task = self._bar.add_task("report", total=total)

    def step(self, description: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=description[-70:])
        else:
            print(f"report: {description}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def write_documents(paths, template: str, context: dict, summary: dict, env=None) -> None:
    """The three documents every report writes: `template`.html and `template`.md rendered
    with `context` at `paths.html` and `paths.markdown`, and `summary` as JSON at `paths.json`
    (each atomically, its folder made when missing); `env` when the template needs filters of
    its own beyond `template_env`'s."""
    os.makedirs(os.path.dirname(os.path.abspath(paths.html)), exist_ok=True)
    env = env or template_env()
    write_atomic(paths.html, env.get_template(f"{template}.html").render(**context))
    write_atomic(paths.markdown, env.get_template(f"{template}.md").render(**context))
    write_atomic(paths.json, json.dumps(summary, indent=2, ensure_ascii=False))


def html_and_base(out_html: str) -> tuple[str, str]:
    """The HTML document's path (".html" added when missing) and the stem its siblings share."""
    if out_html.endswith(".html"):
        return out_html, out_html[:-5]
    return out_html + ".html", out_html


def side_paths(out_html: str) -> ReportPaths:
    html, base = html_and_base(out_html)
    return ReportPaths(
        html=html, json=f"{base}.summary.json", csv=f"{base}.summary.csv", markdown=f"{base}.md"
    )


def _title(data: ReportData) -> str:
    models = sorted({s.series.model for s in data.series})
    if len(models) == 1:
        return f"vllm-load report: {models[0]}"
    return f"vllm-load report: {len(models)} models" if models else "vllm-load report"


#: the charts of one run's section, drawn from its summary
RUN_CHARTS: tuple[Callable[[RunSummary], charts.Chart | None], ...] = (
    charts.run_timeline,
    charts.server_state,
    persona_charts.persona_levels,
    persona_charts.turns,
    gpu_section.gpu_levels,
    speculation_section.speculation_levels,
    persona_charts.target_levels,
    disagg_section.disagg_levels,
)


def drawn_charts(data: ReportData) -> Iterator[charts.Chart | None]:
    """The report's charts (`_views` takes them in this order): the overview's, each series'
    distributions, each run's `RUN_CHARTS`; drawn in two processes where it can (`parallel`)."""
    series = data.series
    pieces: list[Callable[[], charts.Chart | None]] = [
        lambda: charts.throughput_vs_concurrency(series),
        lambda: charts.goodput_vs_concurrency(series) if data.slo else None,
        lambda: charts.latency_vs_concurrency(series),
        lambda: charts.latency_throughput_tradeoff(series),
    ]
    pieces += [functools.partial(charts.distributions, s) for s in series]
    pieces += [functools.partial(draw, r) for r in data.runs for draw in RUN_CHARTS]
    return iter(in_two_processes(pieces))


def _views(
    data: ReportData, progress: Progress
) -> tuple[list[SeriesView], list[RunView], list[charts.Chart]]:
    drawn = drawn_charts(data)
    overview = [c for c in (next(drawn) for _ in range(4)) if c is not None]
    progress.step("charts: overview")
    series = []
    for i, s in enumerate(data.series):
        view = SeriesView(report=s, anchor=f"series-{i + 1}")
        view.why = why_view(s, view.anchor)
        dist = next(drawn)
        if dist is not None:
            view.charts.append(dist)
        series.append(view)
    runs = []
    for i, r in enumerate(data.runs):
        values = dict(zip(r.metrics["level"], r.metrics["value"]))
        errors = [
            {
                "value": values.get(e["level"], math.nan),
                "error": f"{e['error']} {e['status']}" if e.get("status") else e["error"],
                "count": int(e["count"]),
            }
            for e in row_dicts(r.errors)
        ]
        lost_levels = {w.held_less() for w in lost_workers(r.run)} - {None}
        (
            timeline,
            server_chart,
            persona_chart,
            turn_chart,
            gpu_chart,
            spec_chart,
            target_chart,
            pd_chart,
        ) = (next(drawn) for _ in RUN_CHARTS)
        runs.append(
            RunView(
                summary=r,
                anchor=f"{i + 1}",
                errors=errors,
                lost_levels=lost_levels,
                environment=_environment(r.run),
                chart=timeline,
                validation=r.client_validation,
                server_chart=server_chart,
                persona_chart=persona_chart,
                turn_chart=turn_chart,
                replays=replay_views(r, f"{i + 1}"),
                gpu_chart=gpu_chart,
                speculation_chart=spec_chart,
                disagg_chart=pd_chart,
                targets=target_rows(r),
                target_chart=target_chart,
            )
        )
        progress.step(f"charts: run {r.run_id}")
    return series, runs, overview


def build_report(
    run_dirs: Sequence[str],
    out_html: str,
    gpus_per_model: Mapping[str, float] | None = None,
    progress: bool = True,
    rule: SaturationRule = SaturationRule(),
    slo: SloSpec | None = None,
    trace_window: float | None = None,
) -> ReportPaths:
    """Measure `run_dirs`, and write the HTML report at `out_html` with its summary files beside it.
    The levels are judged against `slo`, else the SLOs the runs were started with; a trace
    replay is read in windows of `trace_window` s (default: about a twelfth of it).

    Raises ValueError when a directory is not a readable run.
    """
    bar = Progress(total=2 * len(run_dirs) + 4, enabled=progress)
    try:
        data = build_report_data(
            run_dirs, gpus_per_model, rule, step=bar.step, slo=slo, trace_window=trace_window
        )
        series, runs, overview = _views(data, bar)
        paths = side_paths(out_html)
        notes = tuple(f"run {r.run_id}: {note}" for r in data.runs for note in r.input_notes)
        context = dict(
            data=data,
            partial=notes,
            series=series,
            runs=runs,
            overview_charts=overview,
            title=_title(data),
            version=__version__,
            late_rule=LATE_RULE,
            server_causes=server_side.DISAGREEMENT_CAUSES,
            min_intervals=server_side.MIN_INTERVALS,
            findings_rule=FINDINGS_RULE + " " + server_queue.describe(),
            replay_late_limit=LATE_LIMIT_S,
            replay_prefix_tolerance=PREFIX_TOLERANCE,
        )
        summary = summary_dict(data)
        write_documents(paths, "report", context, summary)
        write_summary_csv(summary, paths.csv)
        bar.step("written")
        return dataclasses.replace(paths, notes=notes)
    finally:
        bar.close()
