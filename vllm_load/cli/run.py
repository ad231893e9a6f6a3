"""`vllm-load run`, `master` and `worker`: Locust with vllm-load's locustfile and options.

They check the options and the target first (one clear line on a bad value or an unreachable
server, before any load is sent), then run Locust in a child process with the packaged
locustfile; every vllm-load option travels as a Locust custom argument, so these commands and
`locust -f locustfiles/chat_stepped.py` are the same test.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

from ..client.prompts import handed_over
from ..run.outcomes import EXIT_CODES, exit_status_help
from ..run.recorder import new_run_dir, refuse_existing_run
from ..run_format.claim import CLAIM_ENV, claim
from ..server.loss import target_lost
from ..settings import Settings, add_arguments
from ..stop_signals import COMMAND_STOP
from ..store.cli import add_store_argument, remember
from ..user_values import SettingsError, master_host_argument, port_argument
from ..web import bind
from ..web.auth import MISSING_PASSWORD, PASSWORD_ENV, web_password
from ..web.auth import add_arguments as add_web_user_argument
from .common import (
    add_host_argument,
    add_loglevel_argument,
    add_workers_argument,
    declared_defaults,
)
from .errors import CommandFailed, Interrupted
from .locust_process import Launch, api_key_env, locust_command
from .preflight import (
    check_gpu_sources,
    check_input_files,
    check_prometheus_port,
    check_web_port,
    check_writable,
)
from .run_end import (
    TARGET_LOST,
    conclude,
    lost_workers_line,
    read_run_json,
    run_outcome,
    stopped_run,
)
from .target_check import check_other_targets, check_target

LOCUSTFILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "locustfile.py"
)


def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    if name in ("run", "master"):
        add_host_argument(
            parser,
            "base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000 (with "
            "--hosts: their first, when not given)",
            required=False,
        )
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--headless", action="store_true", default=True, help="run without the web UI (default)"
        )
        mode.add_argument(
            "--web", action="store_true", help="serve Locust's web UI and start the test from it"
        )
        parser.add_argument("--web-port", type=port_argument, default=8089, help="web UI port")
        parser.add_argument("--web-host", default=bind.LOOPBACK, help=bind.WEB_HOST_HELP)
        parser.add_argument(
            "--web-login",
            action="store_true",
            help=f"protect the web UI with a login page: user --web-user, password only from "
            f"${PASSWORD_ENV} (never the command line); use TLS in front beyond a trusted network",
        )
        add_web_user_argument(parser)
        bind.add_arguments(parser)
    if name in ("run", "master"):
        parser.epilog = exit_status_help()
        add_store_argument(parser)
    if name == "run":
        add_workers_argument(parser)
    if name == "master":
        parser.add_argument(
            "--expect-workers", type=int, default=1, help="workers to wait for before starting"
        )
        parser.add_argument("--master-bind-host", default=bind.LOOPBACK, help=bind.MASTER_BIND_HELP)
        parser.add_argument(
            "--master-bind-port",
            type=port_argument,
            default=5557,
            help="port the master listens on for workers",
        )
    add_locustfile_argument(parser)
    if name == "worker":
        parser.add_argument(
            "--master-host",
            required=True,
            type=master_host_argument,
            help="host name or address of the vllm-load master (not a URL; its port: --master-port)",
        )
        parser.add_argument(
            "--master-port", type=port_argument, default=5557, help="port of the vllm-load master"
        )
        parser.add_argument(
            "--processes", type=int, default=1, help="worker processes on this machine"
        )
        add_loglevel_argument(parser)
        add_arguments(
            parser,
            only=("api_key",),
            helps={
                "api_key": "Bearer token (default: $OPENAI_API_KEY; the master's is used if unset)"
            },
        )
        return
    add_loglevel_argument(parser)
    add_arguments(parser)


def add_locustfile_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--locustfile",
        type=locustfile_argument,
        default=LOCUSTFILE,
        help="a locustfile of your own LLM users (docs/workload.md, 'Your own workload'); "
        "default: the built-in tests. Master and workers must use the same file",
    )


def locustfile_argument(value: str) -> str:
    """A locustfile path that exists and is a Python file."""
    path = os.path.abspath(os.path.expanduser(value))
    if not os.path.isfile(path):
        raise argparse.ArgumentTypeError(f"no such file: {value}")
    if not path.endswith(".py"):
        raise argparse.ArgumentTypeError(f"{value} is not a Python file (.py)")
    return path


def prepare(args: argparse.Namespace) -> Launch:
    """Validate everything that can be validated here; return how to start Locust."""
    if args.command == "worker":
        launch = Launch(
            locust_command(args), None, None, api_key_env(getattr(args, "api_key", "") or "")
        )
        launch.signal_group = True  # `--processes` workers get a stop signal as from a terminal
        return launch
    if getattr(args, "web_login", False):
        if not args.web:
            raise SettingsError("--web-login protects the web UI: use it with --web")
        if not web_password():
            raise SettingsError(MISSING_PASSWORD)
        if not args.web_user:
            raise SettingsError("--web-user must not be empty")
    if getattr(args, "web", False):
        refusal = bind.open_web_ui_refusal(
            args.web_host, args.web_login, args.web_insecure_no_login
        )
        if refusal:
            raise SettingsError(refusal)
    settings = Settings.from_options(args)
    if args.host is None:  # --hosts alone names the targets, the first as --host
        if not settings.hosts:
            raise SettingsError(
                "--host is required: the base URL of the server under test (or --hosts "
                "URL,URL for several)"
            )
        args.host = settings.hosts[0]
    if settings.run_dir:
        refuse_existing_run(settings.run_dir)
    if getattr(
        args, "meta_file", ""
    ):  # expanded here, so workers on other hosts never need the file
        args.meta = [f"{k}={v}" for k, v in settings.meta.items()]
        args.meta_file = ""
    if args.command == "run" and args.workers < 0:
        raise SettingsError(f"--workers must be 0 or more, got {args.workers}")
    segment = check_input_files(settings)
    check_gpu_sources(settings)
    check_prometheus_port(settings)
    if getattr(args, "web", False):
        check_web_port(args.web_host, args.web_port)
    builtin_synthetic = args.locustfile == LOCUSTFILE and not settings.dataset
    model, plan = check_target(args.host, settings, exact_prompts=builtin_synthetic, trace=segment)
    check_other_targets(args.host, model, plan, settings)
    # the web UI may run several tests, each in its own directory; headless runs get theirs now
    run_dir = None if args.web else (settings.run_dir or new_run_dir(settings.out, model))
    check_writable(settings)
    env = api_key_env(settings.api_key)
    if plan is not None:
        env.update(handed_over(plan, args.host, model, settings))
    if not run_dir:
        return Launch(locust_command(args), run_dir, settings, env)
    args.run_dir = run_dir
    # from the claim on, a stop signal is counted, not raised, until Launch.run acts on it: a
    # raise before Launch.run could give the claim back would leave it behind
    COMMAND_STOP.defer()
    try:
        claimed = claim(run_dir)  # last: a refusal before it leaves nothing behind
    except BaseException:
        COMMAND_STOP.resume()
        raise
    env[CLAIM_ENV] = claimed.token
    return Launch(locust_command(args), run_dir, settings, env, claim=claimed)


def main(args: argparse.Namespace) -> int:
    launch = prepare(args)
    if args.command == "worker":  # Locust says nothing until the master answers
        print(
            f"vllm-load worker: waiting for master at {args.master_host}:{args.master_port} "
            "(start it with `vllm-load master`; Ctrl-C to stop)",
            file=sys.stderr,
            flush=True,
        )
    run_dir, settings = launch.run_dir, launch.settings
    api_key = (settings.api_key if settings else getattr(args, "api_key", "")) or ""
    try:
        code = launch.run()
        if run_dir and launch.stop_signals:  # however Locust ended, the command was stopped
            raise Interrupted(stopped_run(run_dir, launch.kept()))
        if run_dir and not os.path.exists(os.path.join(run_dir, "run.json")):
            raise CommandFailed(
                f"the test did not start (Locust exited with code {code}); see Locust's errors above"
            )
        if launch.closed_by:
            raise CommandFailed(
                f"{launch.closed_by}; {run_dir} is marked interrupted and holds what was recorded"
            )
        if not run_dir or code not in (0, EXIT_CODES["client_limit"]):
            return code  # a worker, the web UI, or Locust's own error (said above)
        outcome, why = conclude(run_dir, args.host, api_key or None)
    except Interrupted:
        raise
    except KeyboardInterrupt:  # a stop signal once Locust had ended: the run is as it left it
        raise Interrupted(stopped_run(run_dir, launch.kept())) from None
    if outcome != "completed":
        # the run directory is complete and analysable, but a pipeline must not take it for a
        # good run
        print(f"vllm-load {args.command}: {why} (exit {EXIT_CODES[outcome]})", file=sys.stderr)
    return remember(run_dir, getattr(args, "store", None), EXIT_CODES[outcome])


# --- runs started by other commands (campaign, tune) ----------------------------------------------
def add_managed_run_options(
    parser: argparse.ArgumentParser,
    host_help: str,
    out_default: str,
    out_help: str,
    helps: dict[str, str] | None = None,
) -> None:
    """The options of `vllm-load run` for a command that starts runs itself into its own
    directory; `helps`, by `dest`, for the options that mean more to that command."""
    add_host_argument(parser, host_help)
    add_workers_argument(parser, "local Locust worker processes per run")
    add_loglevel_argument(parser, "WARNING")
    add_locustfile_argument(parser)
    # every run gets its own directory under OUT
    add_arguments(
        parser,
        defaults={"out": out_default},
        helps={"out": out_help, **(helps or {})},
        hidden={"run_dir"},
    )


def run_options(host: str, **options) -> argparse.Namespace:
    """The options of `vllm-load run --host HOST`, with `options` (by their `dest`, as typed
    values) in place of their defaults: a run for a command that starts one itself (demo,
    validate-client), from the options' declared defaults, without building and parsing a
    command line."""
    parser = argparse.ArgumentParser(add_help=False)
    configure_parser(parser, "run")
    args = declared_defaults(parser)
    args.host = host
    unknown = sorted(set(options) - set(vars(args)))
    if unknown:
        raise TypeError(f"vllm-load run has no option {', '.join(unknown)}")
    vars(args).update(options, command="run")
    return args


def run_headless(
    args: argparse.Namespace, out: str, extra_meta: list[str], overrides: dict | None = None
) -> tuple[str, str]:
    """One headless run of the test `args` describe, into `out`; returns (run directory, outcome)."""
    run_args = copy.copy(args)
    run_args.command, run_args.web, run_args.headless = "run", False, True
    run_args.out, run_args.run_dir = out, ""
    run_args.meta = [*args.meta, *extra_meta]
    for key, value in (overrides or {}).items():
        setattr(run_args, key, value)
    launch = prepare(run_args)
    run_dir, settings = launch.run_dir, launch.settings
    assert settings is not None  # prepare() gives None only for a worker
    code = launch.run()
    outcome = run_outcome(run_dir)
    if (code != 0 and outcome == "completed") or launch.closed_by:
        outcome = "failed"
    if outcome == "completed" and run_dir:
        lost = target_lost(run_dir, run_args.host, settings.api_key or None)
        if lost:
            print(f"vllm-load: {lost}", file=sys.stderr, flush=True)
            outcome = TARGET_LOST
        elif workers := lost_workers_line(read_run_json(run_dir)):
            print(f"vllm-load: {workers}", file=sys.stderr, flush=True)
            outcome = "workers_lost"
    return run_dir or "", outcome
