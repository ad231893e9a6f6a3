"""`vllm-load tune`: the stepped test over a matrix of server settings, ranked; or a report's
advice proved (`--advice`, in `tuning/advice_loop.py`); or, with `--slo` and neither, the highest
level at which one configuration meets the SLO (`tuning/slo_max.py`); with `--guided` too, the
flags that raise that level, one at a time as the verdict advises (`tuning/guided.py`).

For every combination of `--matrix NAME=V1,V2,...` values, the server command (a template with
`{NAME}` fields; `num_speculative_tokens` needs none: `server.command_settings` sets it) is
started, the stepped test runs once it is ready, and the server is stopped, `--runs` times in rounds (`tuning/runs.py`). Each run is tagged `config.NAME=value` in run.json,
which makes every combination its own series in the report. The result is a configuration table
with the best configuration for throughput (highest peak tok/s, or with `--rank-by goodput` the
highest peak goodput: requests per second meeting the `--slo`s) and for latency (lowest p99 E2E
averaged over the tested levels, the same levels for every configuration). Runs already
completed in the tune directory are not run again, so an interrupted tune resumes.
"""

from __future__ import annotations

import argparse
import glob
import os

from ..analysis.decisions.slo_search import DEFAULT_MAX_LEVELS
from ..load_kinds import kind_named
from ..run_format.files import safe_name
from ..server.command_settings import SETTINGS
from ..settings import Settings
from ..store.cli import add_store_argument
from ..store.groups import remember_group
from ..user_values import SettingsError, gpu_count_argument
from .common import (
    add_name_argument,
    add_ready_timeout_argument,
    add_runs_argument,
    add_server_cmd_argument,
)
from .errors import CommandFailed
from .run import add_managed_run_options
from .tuning.guided_options import add_guided_arguments
from .tuning.matrix import (
    RANK_BY,
    combinations,
    format_table,
    parse_matrix,
    rank,
    server_command,
    template_fields,
)
from .tuning.runs import Configuration, TuneRuns, TuneState, write_report

# a run's --slo only judges its levels; a tune's alone is what the SLO-max search looks for
SLO_HELP = (
    "a latency SLO (repeatable; the forms of `vllm-load run --slo`: per request ttft<=2s, "
    "tpot<=50ms, ...; per level ttft_p99<=2s; attainment>=0.99). Alone (no --matrix, no "
    "--advice): the SLO the search finds the highest level to meet (--guided: and the flags that "
    "raise it); with --matrix, the report's judge and --rank-by goodput's"
)


# --- the command --------------------------------------------------------------------------------------
EPILOG = (
    'Examples: vllm-load tune --host http://127.0.0.1:8000 --model M --server-cmd "vllm serve '
    '{model} --max-num-seqs {max_num_seqs}" --matrix max_num_seqs=64,256 --runs 2; the advice '
    "of a report, proved: vllm-load tune --advice reports/r.summary.json --host "
    'http://127.0.0.1:8000 --server-cmd "vllm serve M --max-num-seqs 2" (configuration A; B '
    "is the same command with the advised values); the highest concurrency meeting an SLO, to "
    'within 5 %: vllm-load tune --slo "ttft_p99<=500ms,itl_p99<=50ms" --host '
    'http://127.0.0.1:8000 --server-cmd "vllm serve M" --max-level 512 (--rates 1,64 for a '
    "request rate); and the flags that raise it, one at a time as the verdict advises: add "
    "--guided --bound max_num_seqs=2..256 --max-runs 60. Per-level progress of each run: "
    "--loglevel INFO."
)


def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    parser.epilog = EPILOG
    add_server_cmd_argument(
        parser,
        "the server command. With --matrix, a template with {NAME} fields filled from it, e.g. "
        '"vllm serve {model} --max-num-seqs {max_num_seqs} --max-num-batched-tokens '
        '{max_num_batched_tokens}"; with --advice, the command as it was run (configuration A); '
        "with --slo alone, the configuration to search (without it, the search runs against "
        "the server already at --host)",
    )
    parser.add_argument(
        "--matrix",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="values of one template field (repeatable; every combination is tested); "
        "num_speculative_tokens=0,1,3 needs no field: it sets K, --speculative-config's JSON on "
        "vLLM (n-gram where the command gives none; 0: no --speculative-config) or "
        "--speculative-tokens on vllm-load sim",
    )
    parser.add_argument(
        "--advice",
        default="",
        metavar="SOURCE",
        help="instead of --matrix: prove the advice of SOURCE (a report's NAME.summary.json, or "
        "a run directory): --server-cmd as it is (A) against it with each advised flag set to "
        "its advised value (B), then compare's verdict on peak throughput and p99 E2E, and "
        "whether the knee moved where the advice said (verdict.json in the tune directory)",
    )
    parser.add_argument(
        "--series",
        default="",
        metavar="LABEL",
        help="with --advice: the series of SOURCE whose advice to prove (needed when it has "
        "several; the labels are the report's)",
    )
    add_runs_argument(
        parser,
        None,
        "runs of each configuration, in rounds (A B A B...), each configuration's runs one "
        "series (default 1; with --advice 2, and at least 2: the comparison is across runs)",
    )
    add_ready_timeout_argument(parser, "seconds to wait for each started server to be ready")
    add_slo_max_arguments(parser)
    add_guided_arguments(parser)
    parser.add_argument(
        "--gpus",
        type=gpu_count_argument,
        default=None,
        metavar="N",
        help="GPUs serving each configuration, for the page's total tok/s per GPU (pareto.html "
        "in the tune directory; default: the runs' meta, --meta gpus=N; without either, the "
        "page names the points it cannot draw per GPU)",
    )
    parser.add_argument(
        "--rank-by",
        choices=RANK_BY,
        default="throughput",
        help="the best configuration has the highest peak total tok/s (throughput) or the "
        "highest peak goodput, requests/s meeting the --slo (goodput; needs --slo)",
    )
    add_name_argument(
        parser,
        "",
        "tune name (default: tune, or advice with --advice); the same name resumes (skips "
        "completed runs)",
    )
    add_managed_run_options(
        parser,
        "base URL the started server answers on",
        "tunes",
        "base directory: the tune lives in OUT/NAME",
        helps={"slo": SLO_HELP},
    )
    add_store_argument(parser, "the results store the tune and its runs are written to at its end")


def add_slo_max_arguments(parser: argparse.ArgumentParser) -> None:
    """The bounds of the SLO-max search (`--slo` with neither --matrix nor --advice)."""
    parser.add_argument(
        "--min-level",
        type=float,
        default=None,
        help="SLO-max search: the level it starts at and never goes below (default: 1 user, or "
        "the lowest of --rates)",
    )
    parser.add_argument(
        "--max-level",
        type=float,
        default=None,
        help="SLO-max search: the highest level it may try (default: the highest of --levels, "
        "or of --rates)",
    )
    parser.add_argument(
        "--max-levels",
        type=int,
        default=DEFAULT_MAX_LEVELS,
        help="SLO-max search: at most this many levels measured, each a run of one level "
        f"(default {DEFAULT_MAX_LEVELS}); the search grows the level (doubling) until the SLO "
        "fails, then measures where the SLO's figures, interpolated between the levels that "
        "met and missed it, reach their limits, until those two are within 5 %%",
    )


def runs_wanted(args: argparse.Namespace) -> int:
    """How many runs of each configuration: --runs, or the mode's default."""
    if args.runs is None:
        return 2 if args.advice else 1
    if args.advice and args.runs < 2:
        raise SettingsError(
            f"--advice needs --runs 2 or more, got {args.runs}: the verdict is Welch's t-test "
            "across runs, and with one run a side no test is possible"
        )
    if args.runs < 1:
        raise SettingsError(f"--runs must be at least 1, got {args.runs}")
    return args.runs


def main(args: argparse.Namespace) -> int:
    # every option is checked before any server starts
    if args.guided and (args.matrix or args.advice or not args.slo):
        raise SettingsError(
            "--guided searches from one configuration: give --slo, and neither "
            "--matrix nor --advice"
        )
    if not args.guided and (args.bound or args.start or args.max_runs is not None):
        raise SettingsError("--bound, --start and --max-runs belong to --guided")
    if args.guided:
        # at call time: its verdicts' statistics keep numpy and pandas out of every command's start
        from .tuning.guided import guided

        return guided(args)
    if not args.matrix and not args.advice and args.slo:
        return slo_max(args)
    if not args.server_cmd:
        raise SettingsError(
            "--matrix and --advice start the server: pass --server-cmd (or --slo alone, to "
            "search the SLO-max of the server at --host)"
        )
    runs = runs_wanted(args)
    args.name = args.name or ("advice" if args.advice else "tune")
    if args.advice:
        if args.matrix:
            raise SettingsError(
                "--advice tests the advised values against --server-cmd as it is: give --advice "
                "or --matrix, not both"
            )
        if args.rank_by != "throughput":
            raise SettingsError("--rank-by ranks a --matrix tune: --advice gives a verdict instead")
        if getattr(args, "trace", ""):
            raise SettingsError(
                "--advice tests a knee that concurrency levels find; a trace replays its own "
                "schedule: compare configurations on it with --matrix instead"
            )
        # at call time: its verdict's statistics keep numpy and pandas out of every command's start
        from .tuning.advice_loop import prove_advice

        return prove_advice(args, runs)
    if args.series:
        raise SettingsError("--series picks the series of --advice's SOURCE: use it with --advice")
    matrix = parse_matrix(args.matrix)
    settings = Settings.from_options(args)
    fields = template_fields(args.server_cmd)
    missing = fields - set(matrix) - {"model"}
    if missing:
        raise SettingsError(
            f"--server-cmd has fields with no --matrix values: {', '.join(sorted(missing))}"
        )
    unused = set(matrix) - fields - set(SETTINGS)
    if unused:
        raise SettingsError(
            f"--matrix {', '.join(sorted(unused))} not used in --server-cmd (add {{NAME}} to it)"
        )
    if "model" in fields and not args.model:
        raise SettingsError("--server-cmd uses {model}: pass --model")
    if args.rank_by == "goodput" and not args.slo:
        raise SettingsError("--rank-by goodput ranks by requests/s meeting the SLOs: pass --slo")
    configurations = [
        Configuration(config, server_command(args.server_cmd, config, fields, args.model))
        for config in combinations(matrix)
    ]
    directory = os.path.join(args.out, safe_name(args.name, "tune"))
    os.makedirs(directory, exist_ok=True)
    state = TuneState.load(directory, "matrix")
    results = TuneRuns(args, directory, state).run_all(configurations, runs)
    table = format_table(results, args.rank_by, bool(args.slo))
    print("\n" + table + "\n")
    best_t, best_l = rank(results, args.rank_by)
    best_for = (
        f"best for goodput: highest peak of requests/s meeting the SLOs ({', '.join(args.slo)})"
        if args.rank_by == "goodput"
        else "best for throughput: highest peak total tok/s"
    )
    rule = f"{best_for}; best for latency: lowest p99 E2E latency averaged over the tested levels"
    if runs > 1:
        rule += f"; each configuration's figures are the means of its {runs} runs"
    with open(os.path.join(directory, "configurations.md"), "w", encoding="utf-8") as fh:
        fh.write(f"# Tune {args.name}\n\n```\n{table}\n```\n\n{rule}.\n")
    state.extra["best"] = {
        args.rank_by: best_t.config if best_t else None,
        "latency": best_l.config if best_l else None,
        "rule": rule,
    }
    state.save(directory)
    completed = [d for r in results if r.outcome == "completed" for d in r.run_dirs]
    if completed:
        print(f"Report: {write_report(completed, directory, args.slo)}")
    print(f"Configuration table: {os.path.join(directory, 'configurations.md')}")
    # at call time: its page draws with matplotlib, kept out of every command's start
    from .tuning.pareto_points import matrix_page, search_page

    unit = kind_named("rate" if settings.rates else "concurrency").unit
    best = {args.rank_by: best_t, "latency": best_l}
    page = matrix_page(args.name, args.slo, configurations, results, args.gpus, unit, best)
    print(f"Page: {search_page(page, directory)}")
    stored = remember_group(directory, args.store, "tune")
    if best_t is None:
        raise CommandFailed("no configuration could be ranked (see the table above)")
    return 0 if stored else 1


def slo_max(args: argparse.Namespace) -> int:
    """`--slo` with neither --matrix nor --advice: the SLO-max search of one configuration."""
    if args.series or args.rank_by != "throughput":
        raise SettingsError(
            "--series and --rank-by belong to --advice and --matrix, not to --slo alone"
        )
    if args.runs not in (None, 1):
        raise SettingsError("the SLO-max search measures each level once: leave out --runs")
    if getattr(args, "trace", ""):
        raise SettingsError("the SLO-max search steps levels; a trace replays its own schedule")
    args.name = args.name or "slo-max"
    # at call time: its judging of levels keeps numpy and scipy out of every command's start
    from .tuning.slo_max import find_slo_max

    directory = os.path.join(args.out, safe_name(args.name, "slo-max"))
    try:
        code = find_slo_max(args)
    except CommandFailed:  # no level met the SLO, or a level failed: what it measured is kept
        if glob.glob(os.path.join(directory, "runs", "*", "*", "run.json")):
            remember_group(directory, args.store, "tune")
        raise
    return code if remember_group(directory, args.store, "tune") else 1
