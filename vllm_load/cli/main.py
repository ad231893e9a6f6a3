"""The `vllm-load` command: one subcommand per job, each in the module that owns it.

Each subcommand module exposes `configure_parser(parser)` and `main(args) -> int`. A command
builds only its own subcommand's parser (`build_parser(only=...)`), which imports its module;
`build_parser()` builds them all. Each keeps its heavy imports (pandas, matplotlib, Locust,
aiohttp) inside the functions that need them: `vllm-load sim` (asyncio) never imports Locust
(which monkey-patches the standard library with gevent), and `--help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import re
import signal
import sys

from .. import __version__
from ..compat.argparse import DefaultsHelpFormatter
from ..huge_pages import numpy_without_huge_pages
from ..stop_signals import COMMAND_STOP, EXIT_STOPPED, command_named
from ..user_values import SettingsError
from .errors import CommandFailed

#: exit status of a subcommand that raised: a bad option or unusable target, a failure while
#: running, Ctrl-C (a subcommand's own result, e.g. a run that ended early, is what it returns)
EXIT_USAGE, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, EXIT_STOPPED

#: the commands a SIGTERM or SIGHUP stops as Ctrl-C does, at any moment (`stop_signals`); the
#: others keep their default
STOP_AS_CTRL_C = frozenset({"run", "master", "worker"})

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("vllm_load.cli.run", "run a stepped load test against an OpenAI-compatible server"),
    "master": ("vllm_load.cli.run", "start a Locust master for workers on other machines"),
    "worker": ("vllm_load.cli.run", "start Locust worker(s) that connect to a master"),
    "campaign": (
        "vllm_load.cli.campaign",
        "repeat a test n times (server restarted between runs), optionally refine the knee, report",
    ),
    "demo": (
        "vllm_load.cli.demo",
        "run the whole pipeline against the built-in simulator, with its report",
    ),
    "report": (
        "vllm_load.report.cli",
        "build the HTML report (with multi-run statistics) from run directories",
    ),
    "compare": ("vllm_load.cli.compare", "is configuration B really better than A, or noise?"),
    "store": (
        "vllm_load.store.cli",
        "the results store every run is written to: import existing run directories",
    ),
    "history": ("vllm_load.store.cli", "list the runs in the results store, filtered"),
    "regress": (
        "vllm_load.store.cli",
        "has a stored configuration regressed against a baseline? A CI gate across stored runs",
    ),
    "sim": ("vllm_load.sim.cli", "serve the simulated vLLM OpenAI server"),
    "validate-client": (
        "vllm_load.cli.validate_client",
        "prove the client is not the bottleneck: the same users against an echo server",
    ),
    "tune": (
        "vllm_load.cli.tune",
        "run the stepped test over a matrix of server settings and rank the configurations, "
        "or prove a report's advice (--advice)",
    ),
}


class HelpFormatter(DefaultsHelpFormatter):
    """Shows each option's default, unless its help already states it."""

    def help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        # a flag's False says nothing; 0 is a value worth showing (0 == False, so not `in`)
        default = action.default
        if "(default" in text or default is False or default in (None, "", [], argparse.SUPPRESS):
            return text
        return super().help_string(action)


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line saying what is wrong (usage is in --help)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command's parser; with `only` (the subcommand the command line names), only that
    subcommand's options: building one imports its module, and the modules of the others cost
    every command their imports (SQLAlchemy's alone was about half of `vllm-load run`'s start).
    The others stay listed, with their one-line help, in `vllm-load --help`."""
    parser = OneLineErrorParser(
        prog="vllm-load",
        description="Load testing for vLLM and other OpenAI-compatible inference servers, built on Locust.",
    )
    parser.add_argument("--version", action="version", version=f"vllm-load {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if only is not None and name != only:
            continue
        module = importlib.import_module(module_name)
        module.configure_parser(sub_parser, name)
        sub_parser.formatter_class = HelpFormatter
        sub_parser.set_defaults(_module=module_name)
    return parser


def honour_ctrl_c() -> None:
    """Make SIGINT interrupt us, and every process we start, even when we were started with it
    ignored (a non-interactive shell's background job, `nohup` in a script, some CI runners).

    SIGINT is how a run, a campaign or a tuning is stopped cleanly (files flushed, outcome
    `interrupted`, how to resume). Python installs its KeyboardInterrupt handler only when it
    finds SIGINT at the default, and an ignored signal stays ignored through exec: without this,
    such a `vllm-load run` forwarded SIGINT to a Locust that ignored it and ran to the end.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


#: a negative percentage (`-5%`), which argparse reads as an option (a plain `-0.05` it reads as
#: a value)
_NEGATIVE_PERCENT = re.compile(r"-(?:\d+(?:\.\d*)?|\.\d+)%")


def joined_negative_percents(argv: list[str]) -> list[str]:
    """`--fail-if-worse -5%` as `--fail-if-worse=-5%`: a long option's value that is a negative
    percentage, joined to it so that argparse reads it as the value it is."""
    out: list[str] = []
    for token in argv:
        previous = out[-1] if out else ""
        if (
            _NEGATIVE_PERCENT.fullmatch(token)
            and previous.startswith("--")
            and previous != "--"
            and "=" not in previous
        ):
            out[-1] = f"{previous}={token}"
        else:
            out.append(token)
    return out


def main(argv: list[str] | None = None) -> int:
    """The `vllm-load` command (`argv`: sys.argv's arguments), its exit status. Called with
    `argv`, from a program of its own, it leaves that program's signal handlers as it found them;
    as the command, a stop signal that comes as it exits is still taken in."""
    # first: a stop signal while the subcommands are imported is one line too, not a traceback
    COMMAND_STOP.install()
    name = "-"
    try:
        name = command_named(sys.argv[1:] if argv is None else argv)
        numpy_without_huge_pages()  # before any subcommand imports NumPy
        parser = build_parser(only=name)
        args = parser.parse_args(joined_negative_percents(sys.argv[1:] if argv is None else argv))
        name = args.command or name
        if args.command not in STOP_AS_CTRL_C:
            COMMAND_STOP.restore()
        if not args.command:
            parser.print_help()
            return 2
        module = importlib.import_module(args._module)
        COMMAND_STOP.proceed()  # imported: a stop deferred meanwhile (`__main__`) is raised here
        honour_ctrl_c()
        # the one error path of every subcommand: one line, and the exit status chosen here
        return int(module.main(args) or 0)
    except SettingsError as e:  # a bad option or an unusable target
        print(f"vllm-load {name}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except CommandFailed as e:  # work that was started and could not be done
        print(f"vllm-load {name}: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as e:  # an `errors.Interrupted` says how to carry on
        how = f"; {e}" if str(e) else ""
        print(f"vllm-load {name}: interrupted{how}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if argv is not None:
            COMMAND_STOP.restore()


if __name__ == "__main__":
    sys.exit(main())
