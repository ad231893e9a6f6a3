"""`vllm-load compare A B`: is configuration B really better than A, or is it noise?"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys

from ..report.partial_runs import add_allow_partial, refuse_partial
from ..user_values import SettingsError, parse_share
from .errors import CommandFailed

#: the word that separates A's runs from B's when a side names more than one
SEPARATOR = "vs"

DESCRIPTION = (
    "Compare two configurations, A and B, each one or more runs, level by level: for total and "
    "output tok/s, TTFT p50/p99, ITL p99, E2E p50/p99 and success rate (and joules per output "
    "token and per request where the runs recorded GPU telemetry; acceptance length and draft "
    "acceptance rate where both sides' servers speculated, the rate with no better side, only "
    "higher or lower), both means, the "
    "difference with its confidence interval, a p-value and a verdict (B better, B worse, or no "
    "significant difference at this n), Holm-corrected across the headline figures. With two or "
    "more runs per side the test is Welch's t-test across runs; with one run a side no verdict is "
    "given (requests of one run share its speed; request-level figures are shown for "
    'information; the verdict reads "no test possible at n = 1"). Runs whose workloads differ '
    "(lengths, endpoint, dataset...) are refused unless --allow-different-workloads. Writes "
    "OUT.html, OUT.md and OUT.json, and prints a one-line outcome. Exit status: 0, 1 when "
    "--fail-if-worse is crossed or nothing could be tested, 2 on bad input or on runs cut short "
    "(unless --allow-partial)."
)

EPILOG = (
    "Examples: vllm-load compare 'runs/base/*' 'runs/tuned/*' --a-name base --b-name tuned; "
    "vllm-load compare RUN_A1 RUN_A2 RUN_A3 vs RUN_B1 RUN_B2 RUN_B3 -o ab.html; as a CI gate, "
    "vllm-load compare 'runs/main/*' 'runs/pr/*' --fail-if-worse 5%."
)


def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUNS",
        help=f"A then B: two run directories, globs or directories holding runs; or A's then "
        f"B's separated by '{SEPARATOR}' when a side takes several",
    )
    parser.add_argument("--a-name", default="A", help="what to call A in the output")
    parser.add_argument("--b-name", default="B", help="what to call B in the output")
    parser.add_argument(
        "-o",
        "--output",
        default="",
        help="HTML file to write, with .md and .json beside it "
        "(default: reports/compare-<UTC time>.html)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level, after the multiple-comparison correction (default 0.05)",
    )
    parser.add_argument(
        "--correction",
        choices=("level", "all", "none"),
        default="level",
        help="Holm's correction over each level's headline figures, over every level and "
        "figure, or none (default level)",
    )
    parser.add_argument(
        "--fail-if-worse",
        default=None,
        metavar="PCT",
        help="exit 1 when B is significantly worse than A by more than this on any headline "
        "figure (throughput lower, latency higher), e.g. 5%% or 0.05 (-5%% reads as 5%%: worse "
        "is always B's bad direction)",
    )
    parser.add_argument(
        "--allow-different-workloads",
        action="store_true",
        help="compare sides whose runs sent different workloads (lengths, endpoint, streaming, "
        "dataset, shared prefix, user classes...: refused without this), saying how they differ",
    )
    add_allow_partial(parser, "comparison")
    parser.add_argument(
        "--resamples",
        type=int,
        default=2000,
        help="bootstrap resamples for the request-level percentile test (default 2000)",
    )
    parser.add_argument(
        "--bootstrap-seed", type=int, default=0, help="seed of the bootstrap resampling (default 0)"
    )


def split_sides(runs: list[str]) -> tuple[list[str], list[str]]:
    """A's and B's patterns: two bare arguments, or the two sides of a `vs`."""
    if SEPARATOR in runs:
        at = runs.index(SEPARATOR)
        a, b = runs[:at], runs[at + 1 :]
        if not a or not b or SEPARATOR in b:
            raise SettingsError(f"give A's runs, '{SEPARATOR}', then B's runs")
        return a, b
    if len(runs) != 2:
        raise SettingsError(
            f"got {len(runs)} run arguments: give A and B as two (quoted) globs, or separate "
            f"A's runs from B's with '{SEPARATOR}'"
        )
    return [runs[0]], [runs[1]]


def main(args: argparse.Namespace) -> int:
    # at call time: keeps pandas, scipy and matplotlib out of every command's start (cli.main)
    from ..analysis.decisions.ab import BETTER, WORSE
    from ..report.compare_model import build_compare_data, dropped_text, outcome_text
    from ..report.compare_render import write_comparison
    from ..run_format.run_paths import expand_run_paths

    if not 0 < args.alpha < 1:
        raise SettingsError(f"--alpha must be between 0 and 1, got {args.alpha}")
    if args.resamples < 100:
        raise SettingsError(f"--resamples must be at least 100, got {args.resamples}")
    if args.a_name == args.b_name:
        raise SettingsError(f"--a-name and --b-name are both {args.a_name!r}")
    threshold = (
        parse_share(args.fail_if_worse, "--fail-if-worse")
        if args.fail_if_worse is not None
        else None
    )
    a_patterns, b_patterns = split_sides(list(args.runs))
    try:
        a_paths, b_paths = expand_run_paths(a_patterns), expand_run_paths(b_patterns)
        data = build_compare_data(
            a_paths,
            b_paths,
            args.a_name,
            args.b_name,
            alpha=args.alpha,
            correction=args.correction,
            resamples=args.resamples,
            seed=args.bootstrap_seed,
            fail_if_worse=threshold,
            allow_different_workloads=args.allow_different_workloads,
        )
    except ValueError as e:  # no such run, unreadable run, nothing in common
        raise SettingsError(str(e)) from None
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    paths = write_comparison(data, args.output or os.path.join("reports", f"compare-{stamp}.html"))
    res = data.result
    for difference in data.workload_differences:
        print(f"WARNING: different workloads: {difference}", file=sys.stderr)
    for note in data.a.notes + data.b.notes:
        print(f"vllm-load compare: left out: {note}", file=sys.stderr)
    for line in data.a.gpu_sources + data.b.gpu_sources:  # GPU telemetry: simulated says so
        print(f"run {line}")
    print(
        f"{args.a_name} ({len(a_paths)} run(s)) vs {args.b_name} ({len(b_paths)} run(s)): "
        f"{res.n_tested} comparisons tested at {len(res.levels)} level(s), alpha {res.alpha:g}"
    )
    dropped = dropped_text(data)
    if dropped:
        print(f"levels dropped: {dropped}")
    for c in res.comparisons:
        if c.verdict in (BETTER, WORSE):
            print(f"  {c.level:g}: {c.figure.label}: {c.verdict} ({c.rel_diff * 100:+.1f}%)")
    print(f"Comparison: {paths.html}")
    print(f"Also: {paths.markdown}, {paths.json}")
    print(f"Outcome: {outcome_text(data)}")
    refuse_partial(data.a.notes + data.b.notes, args.allow_partial, "comparison")
    if threshold is not None and not res.n_tested:
        raise CommandFailed(
            f"--fail-if-worse {threshold * 100:g}%: nothing was tested (no test possible with "
            "one run on a side), so the gate cannot pass: run each side at least twice"
        )
    if data.failed:
        print(
            f"--fail-if-worse {threshold * 100 if threshold is not None else 0:g}%: "
            f"{args.b_name} is significantly worse on {len(data.worse)} figure(s)"
        )
        return 1
    return 0
