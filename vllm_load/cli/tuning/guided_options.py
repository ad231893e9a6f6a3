"""`tune --slo ... --guided`'s options and their checks, before the search (`guided.py`)
starts any server; and its configurations: a flag name and value each, made into the server
command."""

from __future__ import annotations

import argparse
import string

from ...analysis.decisions.guided_search import FlagBound, flag_of, name_of, parse_bound
from ...server.server_command import flag_value, with_flag
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


# --- the configurations ----------------------------------------------------------------------------
def parse_starts(items: list[str], template: str) -> dict[str, str]:
    """`--start NAME=VALUE` items: the first value of each `{NAME}` slot of the command."""
    slots = slots_of(template) - {"model"}
    starts: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name_of(name.strip()), value.strip()
        if not sep or not value or name not in slots:
            raise SettingsError(
                f"--start takes NAME=VALUE for a {{NAME}} slot of --server-cmd "
                f"(its slots: {', '.join(sorted(slots)) or 'none'}), got {item!r}"
            )
        starts[name] = value
    missing = slots - set(starts)
    if missing:
        raise SettingsError(
            f"--server-cmd has slots with no starting value: give --start "
            f"{' --start '.join(f'{m}=VALUE' for m in sorted(missing))}"
        )
    return starts


def slots_of(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def render(template: str, config: dict[str, str], model: str) -> str:
    """The command of a configuration: its slots filled, each other flag of `config` set
    (`server_command.with_flag`: replaced where the command gives it, else appended)."""
    slots = slots_of(template)
    command = template.format(**{k: v for k, v in config.items() if k in slots}, model=model)
    for name, value in config.items():
        if name not in slots:
            try:
                command = with_flag(command, flag_of(name), value)
            except ValueError as e:
                raise SettingsError(f"--server-cmd: {e}") from None
    return command


def start_config(
    template: str, starts: dict[str, str], bounds: dict[str, FlagBound], model: str
) -> dict[str, str]:
    """The starting configuration: the slots' values, and each bounded flag's value where the
    command gives it; one line for a start outside its bounds."""
    config = dict(starts)
    command = template.format(**starts, model=model)
    for name, bound in bounds.items():
        if name in config:
            continue
        try:
            value = flag_value(command, bound.flag)
        except ValueError as e:
            raise SettingsError(f"--server-cmd: {e}") from None
        if value is not None:
            config[name] = value
    for name, value in config.items():
        limit = bounds.get(name)
        if limit is not None and not _inside(limit, value):
            raise SettingsError(
                f"the starting {flag_of(name)} {value} is outside --bound "
                f"{name}={limit.low:g}..{limit.high:g}: start inside the bounds"
            )
    return config


def _inside(bound: FlagBound, value: str) -> bool:
    try:
        return bound.holds(float(value))
    except ValueError:
        return False


def flag_bounds(items: list[str]) -> dict[str, FlagBound]:
    bounds: dict[str, FlagBound] = {}
    for item in items:
        try:
            bound = parse_bound(item)
        except ValueError as e:
            raise SettingsError(str(e)) from None
        if bound.name in bounds:
            raise SettingsError(f"--bound {bound.name} given twice")
        bounds[bound.name] = bound
    return bounds
