"""`vllm-load report`: build the report over one or more run directories."""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import sys
from typing import TYPE_CHECKING

from ..run_format.files import safe_name
from ..user_values import SettingsError, writable_directory
from .partial_runs import add_allow_partial, refuse_partial

if TYPE_CHECKING:
    from ..slo import SloSpec


def _gpus(text: str) -> tuple[str, float]:
    model, sep, count = text.rpartition("=")
    try:
        value = float(count)
    except ValueError:
        value = -1.0
    if not sep or not model or value <= 0:
        raise argparse.ArgumentTypeError(f"expected MODEL=GPUS with a positive count, got {text!r}")
    return model, value


def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    parser.description = (
        "Measure run directories and write a self-contained HTML report with per-level tables, "
        "multi-run statistics (mean, 95% t-CI, CoV), saturation analysis, recommendations and charts; "
        "plus NAME.summary.json, NAME.summary.csv and NAME.md beside it. Runs of the same model and "
        "settings are grouped, so pass every repeat of a test to get confidence intervals. "
        "Plain Locust CSVs work too: give the --csv prefix of a test run with "
        "--csv-full-history (levels are its user-count plateaus; figures from Locust's aggregates)."
    )
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR_OR_GLOB",
        help="run directories, globs, or directories holding runs (e.g. runs/ or 'runs/*/2026*'); "
        "or Locust --csv prefixes (or their PREFIX_stats_history.csv), one per run",
    )
    parser.add_argument(
        "-o",
        "--output",
        default="",
        help="HTML file to write (default: reports/<model>-<UTC time>.html)",
    )
    parser.add_argument(
        "--gpus-per-model",
        action="append",
        default=[],
        type=_gpus,
        metavar="MODEL=GPUS",
        help="GPU count of a model for per-GPU throughput (repeatable; overrides run.json meta 'gpus')",
    )
    parser.add_argument(
        "--scaling",
        default="",
        metavar="FROM,TO",
        help="levels for the scaling ratio, FROM below TO (nearest tested levels are used, and "
        "the report says so; default: 10,200 where both were tested, else the lowest to the "
        "highest level)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="the saturation point is the lowest level whose mean is within this fraction of "
        "the peak mean (default 0.05)",
    )
    parser.add_argument(
        "--max-failed-share",
        type=float,
        default=0.01,
        metavar="SHARE",
        help="a level where more than this share of measured requests failed in any run is left "
        "out of peak, saturation and recommendations (default 0.01)",
    )
    parser.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="SLO",
        help="judge every level against this latency SLO (repeatable): per request ttft<=2s, "
        "tpot<=50ms, e2e<=20s, itl_max<=500ms; per level ttft_p99<=2s, e2e_p99<=20s; "
        "attainment>=99%% (the share of good requests a level needs). Adds goodput and the "
        "highest level meeting the SLOs (default: the --slo the runs were started with)",
    )
    parser.add_argument(
        "--trace-window",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help='the length of the windows a trace replay is read in (its "Replay over time"): '
        "default: the run's own --trace-window, else about a twelfth of the replay, rounded "
        "down to 1, 2, 5, 10, 30 or 60 s",
    )
    locust = parser.add_argument_group(
        "plain Locust CSVs (a --csv prefix instead of run directories)"
    )
    locust.add_argument(
        "--locust-length",
        choices=("bytes", "tokens"),
        default="bytes",
        help="what Locust's response length counts: bytes (its default: no token figures) or "
        "tokens (the locustfile reports each response's generated tokens as its length: "
        "output tok/s, and saturation judged on it) (default: bytes)",
    )
    locust.add_argument(
        "--locust-warmup",
        default="25%",
        metavar="SHARE_OR_SECONDS",
        help="the first part of every user-count plateau left out as warm-up: a share (25%%) "
        "or seconds (30s) (default: 25%%)",
    )
    locust.add_argument(
        "--locust-min-level",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="a user count held at least this long is a level; shorter ones (ramp steps) are "
        "skipped (default: 5)",
    )
    add_allow_partial(parser, "report")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def output_writable(path: str) -> None:
    """Refuse, in one line, a report path whose directory cannot be written (or made)."""
    writable_directory(os.path.dirname(os.path.abspath(path)), f"--output {path}")


def _default_output(run_dirs: list[str]) -> str:
    models = set()
    for path in run_dirs:
        models.add(os.path.basename(os.path.dirname(os.path.abspath(path))))
    name = safe_name(models.pop(), "report") if len(models) == 1 else "comparison"
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return os.path.join("reports", f"{name}-{stamp}.html")


def _scaling(text: str) -> tuple[float, float]:
    """--scaling FROM,TO as two positive levels, FROM below TO (the ratio is TO's throughput over
    FROM's: `5,3` read "scales 0.5x from 4 to 2")."""
    try:
        levels = [float(x) for x in text.split(",")]
        if len(levels) != 2 or not all(0 < v < math.inf for v in levels):
            raise ValueError
    except ValueError:
        raise SettingsError(f"--scaling takes two positive levels FROM,TO, got {text!r}") from None
    low, high = levels
    if low >= high:
        raise SettingsError(
            f"--scaling takes FROM,TO with FROM below TO (the ratio is TO's throughput over "
            f"FROM's), got {text!r}: write {high:g},{low:g}"
            if low > high
            else f"--scaling takes two different levels FROM,TO, got {text!r}"
        )
    return low, high


def main(args: argparse.Namespace) -> int:
    from ..run_format.run_paths import expand_run_paths
    from ..slo import parse_slo

    scaling = _scaling(args.scaling) if args.scaling else (None, None)
    if not 0 <= args.tolerance < 1:
        raise SettingsError(f"--tolerance must be in [0, 1), got {args.tolerance}")
    if not 0 <= args.max_failed_share < 1:
        raise SettingsError(f"--max-failed-share must be in [0, 1), got {args.max_failed_share}")
    if not (math.isfinite(args.trace_window) and args.trace_window >= 0):
        raise SettingsError(
            f"--trace-window must be seconds, 0 or more (0: the default), got {args.trace_window}"
        )
    prefixes = _locust_prefixes(args.runs)
    run_dirs: list[str] = []
    slo: SloSpec | None = None
    out = ""
    if not prefixes:  # (Locust CSVs: their own checks, `_locust_report`)
        try:
            run_dirs = expand_run_paths(args.runs)
        except ValueError as e:  # a path that holds no run
            raise SettingsError(str(e)) from None
        slo = parse_slo(args.slo)
        out = args.output or _default_output(run_dirs)
        output_writable(out)  # before the analysis, which can take minutes
    # only now, the paths checked: pandas and matplotlib are ~1.5 s of CPU that a refusal of a
    # mistyped path waited for (they stay out of every command's start too: cli.main)
    from ..analysis.series.saturation import SaturationRule
    from .render import build_report

    rule = SaturationRule(
        tolerance=args.tolerance,
        scaling_from=scaling[0],
        scaling_to=scaling[1],
        max_failed_share=args.max_failed_share,
    )
    if prefixes:
        return _locust_report(args, prefixes, rule)
    try:
        paths = build_report(
            run_dirs,
            out,
            dict(args.gpus_per_model),
            progress=not args.quiet,
            rule=rule,
            slo=slo,
            trace_window=args.trace_window or None,
        )
    except ValueError as e:  # runs that cannot be read or compared
        raise SettingsError(str(e)) from None
    for note in paths.notes:
        print(f"vllm-load report: left out: {note}", file=sys.stderr)
    print(f"Report: {paths.html}")
    print(f"Summary: {paths.json}, {paths.csv}, {paths.markdown}")
    refuse_partial(paths.notes, args.allow_partial, "report")
    return 0


def _locust_prefixes(args: list[str]) -> list[str]:
    """The Locust --csv prefixes the arguments name, all of them or none (one line otherwise)."""
    from ..run_format.locust_files import locust_prefix

    found = [locust_prefix(a) for a in args]
    prefixes = [p for p in found if p is not None]
    if prefixes and len(prefixes) != len(found):
        other = next(a for a, p in zip(args, found) if p is None)
        raise SettingsError(
            f"{other!r} is not a Locust --csv prefix: give either Locust CSV prefixes or run "
            "directories, not both"
        )
    return prefixes


def _locust_report(args: argparse.Namespace, prefixes: list[str], rule) -> int:
    """`vllm-load report PREFIX...`: the report from plain Locust CSVs."""
    from ..analysis.levels.locust_csv import PlateauRule, parse_warmup
    from .locust_render import build_locust_report

    if args.slo:
        raise SettingsError(
            "--slo needs per-request records: Locust's CSVs hold only aggregates (run the test "
            "with vllm-load to judge SLOs)"
        )
    if args.locust_min_level <= 0:
        raise SettingsError(f"--locust-min-level must be positive, got {args.locust_min_level}")
    try:
        warmup, share = parse_warmup(args.locust_warmup)
        plateau_rule = PlateauRule(args.locust_min_level, warmup, share)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        out = args.output or os.path.join("reports", f"locust-{stamp}.html")
        output_writable(out)
        paths = build_locust_report(
            prefixes, out, not args.quiet, rule, plateau_rule, args.locust_length
        )
    except ValueError as e:  # LocustCsvError: CSVs that hold no level, or cannot be read
        raise SettingsError(str(e)) from None
    print(f"Report (from Locust's aggregates): {paths.html}")
    print(f"Summary: {paths.json}, {paths.csv}, {paths.markdown}")
    return 0
