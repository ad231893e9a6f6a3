"""Write a report from plain Locust CSVs: HTML (self-contained, as `render`'s), Markdown and
summary JSON, each saying in its headline that its figures come from Locust's aggregates."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import __version__
from ..analysis.frame_records import row_dicts
from ..analysis.levels.locust_csv import PERCENTILES, PlateauRule
from ..analysis.series.saturation import SaturationRule
from . import charts
from .charts import STYLE, Chart, figure, floats, log_level_axis, plot_with_ci, png_base64, slug
from .locust_model import LocustReportData, LocustRun, build_locust_data
from .model import SeriesReport
from .render import Progress, ReportPaths, side_paths, write_documents
from .summary_files import clean, records, saturation_json

SOURCE = "locust_csv"


def latency_chart(series: Sequence[SeriesReport]) -> Chart | None:
    """Approximate p50 and p99 and the exact mean of Locust's response time per level."""
    if not series:
        return None
    with plt.rc_context(STYLE):
        fig, (ax,) = figure()
        values: list[float] = []
        for s in series:
            for metric, name in (("e2e_p99", "p99 (approx.)"), ("e2e_p50", "p50 (approx.)")):
                values.extend(plot_with_ci(ax, s, metric, f"{s.label}: {name}"))
            ax.plot(
                floats(s.curve, "value"),
                floats(s.curve, "e2e_mean_mean"),
                ":",
                marker=".",
                label=f"{s.label}: mean",
            )
        log_level_axis(ax, values)
        ax.set_ylabel("response time, whole request (s)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="best")
        ax.set_title("Locust's response time vs concurrency (percentiles rounded by Locust)")
        png = png_base64(fig)
    return Chart(
        "latency",
        "Response time vs concurrency",
        "Approximate p50 and p99 and mean response time (whole request) at each level",
        png,
    )


def timeline_chart(run: LocustRun) -> Chart | None:
    """Successful requests/s and users over a Locust run, its levels' measured parts shaded."""
    tl = run.timeline
    if tl.empty:
        return None
    t0 = float(np.nanmin(tl["t"]))
    with plt.rc_context(STYLE):
        fig, (ax,) = figure(width=9.5, height=3.2)
        ax.plot(tl["t"] - t0, tl["req_per_s"], color="tab:blue", linewidth=1.0, label="req/s")
        ax.set_ylabel("successful requests/s", color="tab:blue")
        ax.set_xlabel("seconds since Locust's first history row")
        ax.set_ylim(bottom=0)
        for rec in row_dicts(run.metrics):
            ax.axvspan(
                rec["window_start"] - t0, rec["window_end"] - t0, color="tab:green", alpha=0.1
            )
        users_ax = ax.twinx()
        users_ax.grid(False)
        users_ax.step(
            tl["t"] - t0,
            tl["users"],
            where="post",
            color="tab:orange",
            linewidth=1.0,
            label="users (Locust)",
        )
        users_ax.set_ylabel("users", color="tab:orange")
        users_ax.set_ylim(bottom=0)
        lines = ax.get_lines()[:1] + users_ax.get_lines()
        ax.legend(lines, [ln.get_label() for ln in lines], loc="upper left", fontsize=7)
        ax.set_title(
            f"Locust run {run.run_id}: requests/s between history rows and users; "
            "shaded: each level's measured part",
            fontsize=8,
        )
        png = png_base64(fig)
    return Chart(
        f"timeline-{slug(run.run_id)}",
        f"Timeline of Locust run {run.run_id}",
        "Successful requests per second and Locust's user count over the run",
        png,
    )


@dataclass
class LocustRunView:
    run: LocustRun
    anchor: str
    failures: list[dict] = field(default_factory=list)
    plateaus: list[dict] = field(default_factory=list)
    chart: Chart | None = None


def _run_view(i: int, run: LocustRun) -> LocustRunView:
    stamps = run.levels.dates
    first_ts = float(np.nanmin(stamps)) if len(stamps) else 0.0
    plateaus = [
        {
            "users": p.users,
            "from_s": p.start - first_ts,
            "to_s": p.end - first_ts,
            "held_s": p.span,
            "measured_from_s": stamps[p.steady] - first_ts if p.steady is not None else None,
            "used": p.used,
            "reason": p.reason,
        }
        for p in run.levels.plateaus
    ]
    failures = row_dicts(run.source.failures) if run.source.failures is not None else []
    return LocustRunView(run, f"run-{i + 1}", failures, plateaus, timeline_chart(run))


def _throughput_keys(value):
    """`value` with the saturation analysis' `tok_per_s` / `total_tok_per_s` keys named
    `throughput`: here they hold the judged figure, in `throughput.unit`."""
    if isinstance(value, dict):
        return {
            ("throughput" if k in ("tok_per_s", "total_tok_per_s") else k): _throughput_keys(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_throughput_keys(v) for v in value]
    return value


def locust_summary(data: LocustReportData) -> dict:
    """The summary JSON: the same figures as the HTML, and where they come from."""
    return clean(
        {
            "source": SOURCE,
            "vllm_load_version": __version__,
            "generated_at": data.generated_at,
            "caveats": data.caveats,
            "percentiles_approximate": True,
            "not_available": [
                "ttft",
                "itl",
                "tpot",
                "prompt_tokens",
                "total_tok_per_s",
                "achieved_concurrency",
                "server_metrics",
            ],
            "response_length": data.length,
            "throughput": asdict(data.rule.throughput),
            "rule": {
                "saturation": data.rule.describe(),
                "failures": data.rule.describe_failures(),
                "levels": data.plateau_rule.describe(),
            },
            "series": [
                {
                    "label": s.label,
                    "n_runs": s.n_runs,
                    "runs": [data.runs[i].prefix for i in s.series.run_indices],
                    "saturation": _throughput_keys(saturation_json(s)),
                    "findings": s.findings,
                    "levels": records(s.curve),
                }
                for s in data.series
            ],
            "runs": [
                {
                    "prefix": r.prefix,
                    "run_id": r.run_id,
                    "series": r.series_label,
                    "levels": records(r.metrics),
                    "plateaus": [asdict(p) for p in r.levels.plateaus],
                }
                for r in data.runs
            ],
        }
    )


def build_locust_report(
    prefixes: Sequence[str],
    out_html: str,
    progress: bool = True,
    rule: SaturationRule = SaturationRule(),
    plateau_rule: PlateauRule = PlateauRule(),
    length: str = "bytes",
) -> ReportPaths:
    """Measure the Locust CSV `prefixes` and write the HTML report at `out_html`, with its
    Markdown and summary JSON beside it. Raises `LocustCsvError` (a ValueError) on CSVs that
    hold no level."""
    bar = Progress(total=2 * len(prefixes) + 3, enabled=progress)
    try:
        data = build_locust_data(prefixes, rule, plateau_rule, length, step=bar.step)
        throughput = data.rule.throughput
        overview = [
            c
            for c in (
                charts.throughput_vs_concurrency(data.series, throughput),
                latency_chart(data.series),
                charts.latency_throughput_tradeoff(data.series, throughput),
            )
            if c is not None
        ]
        bar.step("charts: overview")
        runs = [_run_view(i, r) for i, r in enumerate(data.runs)]
        bar.step("charts: runs")
        paths = side_paths(out_html)
        context = dict(
            data=data,
            runs=runs,
            overview_charts=overview,
            throughput=throughput,
            percentiles=PERCENTILES,
            title="vllm-load report from Locust CSVs",
            version=__version__,
        )
        write_documents(paths, "locust", context, locust_summary(data))
        levels = pd.concat([r.metrics for r in data.runs], ignore_index=True)
        levels.insert(0, "source", SOURCE)
        levels.to_csv(paths.csv, index=False)
        bar.step("written")
        return paths
    finally:
        bar.close()
