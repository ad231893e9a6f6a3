"""The options several subcommands share, each declared once here.

Like `settings.add_arguments(parser, defaults=...)`, each helper takes what differs between
commands (a default, the help in the command's words) and declares the flag, its type and its
meaning in one place; a flag that means something else in another command has another name.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..user_values import host_argument

#: the help of --workers where it is not worded for the command
WORKERS_HELP = "local Locust worker processes (0: a single process)"


class HostAction(argparse.Action):
    """--host given once: the target. Given again, where the command takes several targets (its
    parser has --hosts): every --host, in order, becomes --hosts, and --host is the first.
    Elsewhere a second --host is refused (argparse would keep the last one silently)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        first = getattr(namespace, self.dest, None)
        if first is None:
            setattr(namespace, self.dest, values)
            return
        if not hasattr(namespace, "hosts"):
            parser.error(f"--host given twice ({first}, {values}): this command tests one target")
        hosts = namespace.hosts = list(namespace.hosts or [])
        hosts.extend(h for h in (first, values) if h not in hosts)


def add_host_argument(parser: Any, help: str, required: bool = True) -> None:
    """--host: the base URL of the OpenAI-compatible server under test."""
    parser.add_argument(
        "--host",
        required=required,
        default=None,
        type=host_argument,
        action=HostAction,
        help=help,
    )


def add_workers_argument(parser: Any, help: str = WORKERS_HELP) -> None:
    """--workers: local Locust worker processes (0: the test runs in a single process)."""
    parser.add_argument("--workers", type=int, default=0, help=help)


def add_loglevel_argument(parser: Any, default: str = "INFO") -> None:
    """--loglevel: Locust's log level."""
    parser.add_argument("--loglevel", default=default, help="Locust log level")


def add_server_cmd_argument(
    parser: Any, help: str, metavar: str = "CMD", required: bool = False
) -> None:
    """--server-cmd: a shell command vllm-load runs the server with, in the foreground."""
    parser.add_argument("--server-cmd", required=required, default="", metavar=metavar, help=help)


def add_ready_timeout_argument(
    parser: Any,
    help: str = "seconds to wait for /health and /v1/models after a (re)start of the server",
) -> None:
    """--ready-timeout: how long a started server may take to answer."""
    parser.add_argument("--ready-timeout", type=float, default=900.0, help=help)


def declared_defaults(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The options `parser` declares, each at its default, as `parse_args` would give them for
    a command line that sets none (a string default through the option's type), without
    building or parsing one."""
    from ..compat.argparse import parser_actions

    values: dict[str, Any] = {}
    for action in parser_actions(parser):
        if action.dest == argparse.SUPPRESS or action.default == argparse.SUPPRESS:
            continue
        default = action.default
        if isinstance(default, str) and action.type is not None:
            default = action.type(default)  # type: ignore[operator]
        values[action.dest] = default
    return argparse.Namespace(**values)


def add_runs_argument(parser: Any, default: int | None, help: str) -> None:
    """--runs: independent runs of one configuration (the n of its statistics)."""
    parser.add_argument("--runs", type=int, default=default, metavar="N", help=help)


def add_name_argument(parser: Any, default: str, help: str) -> None:
    """--name: the directory (under --out) of a command that resumes: the same name resumes."""
    parser.add_argument("--name", default=default, help=help)


def add_no_report_argument(parser: Any, help: str = "do not write the HTML report") -> None:
    """--no-report: skip the HTML report at the end."""
    parser.add_argument("--no-report", action="store_true", help=help)
