"""`tune --slo ... --guided`'s options and their checks, before the search (`guided.py`)
starts any server."""

from __future__ import annotations

import argparse

from ...user_values import SettingsError


def add_guided_arguments(parser: argparse.ArgumentParser) -> None:
    """The guided search's options (`--slo ... --guided`: tuning/guided.py)."""
    parser.add_argument(
        "--guided",
        action="store_true",
        help="with --slo and --server-cmd: from that configuration, move one flag at a time as "
        "the bottleneck verdict at the SLO-max level advises, restart the server, find the "
        "SLO-max again, and keep a change only where it is better (Welch's t-test across "
        "--runs); stops when the verdict names no flag it can move or two steps in a row gain "
        "nothing (guided.json and guided.md in the tune directory)",
    )
    parser.add_argument(
        "--bound",
        action="append",
        default=[],
        metavar="NAME=LOW..HIGH",
        help="--guided: the values a flag may take, e.g. max_num_seqs=2..256 (repeatable); a "
        "value outside them is never tried (an advised one is brought to the bound)",
    )
    parser.add_argument(
        "--start",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="--guided: the starting value of a {NAME} slot of --server-cmd (repeatable)",
    )
    parser.add_argument(
        "--max-runs",
        type=int,
        default=None,
        help="--guided: the budget, in runs (each level of each SLO-max search is one run); "
        "the search stops when the next configuration's search could not get 2",
    )


def guided(args: argparse.Namespace) -> int:
    """`--slo --guided`: the guided search from `--server-cmd`."""
    if not args.server_cmd:
        raise SettingsError("--guided starts and restarts the server: pass --server-cmd")
    if args.series or args.rank_by != "throughput":
        raise SettingsError("--series and --rank-by belong to --advice and --matrix, not --guided")
    if getattr(args, "trace", ""):
        raise SettingsError("the guided search steps levels; a trace replays its own schedule")
    runs = 1 if args.runs is None else args.runs
    if runs < 1:
        raise SettingsError(f"--runs must be at least 1, got {runs}")
    args.name = args.name or "guided"
    # at call time: its verdicts' statistics keep numpy and pandas out of every command's start
    from .guided import guided_search

    return guided_search(args, runs)
