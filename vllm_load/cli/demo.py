"""`vllm-load demo`: the whole pipeline in about a minute, with nothing to set up.

Starts the built-in simulator on a free loopback port (scaled so that it saturates within the
demo's levels), runs a scaled-down stepped test through exactly the code path of `vllm-load
run`, prints the per-level table, writes the HTML report, and stops everything it started.
"""

from __future__ import annotations

import argparse
import os

from ..settings import add_arguments
from ..sim.child import SimulatorProcess
from . import run as run_cli
from .common import add_no_report_argument, add_workers_argument
from .errors import CommandFailed

# A small server: 16 sequences per batch at the simulator's own pace, a step (one token for each
# sequence) every ~10 ms, as a real server of an 8B model decodes. The client has to read each
# stream's chunks apart: at --time-scale 0.25 (a token every 2.5 ms, 6,400 chunks/s at the top
# levels) a shared 2-core machine merged 40-96 % of them in reads and marked every level client
# late; at 10 ms it merged 4-5x fewer. tests/cli/test_demo.py holds SIM_ARGS to 10 ms or more.
SIM_ARGS = ("--max-num-seqs", "16", "--time-scale", "1")
# The simulator stands in for a server on other machines, but here it shares the client's two
# cores: at a lower priority, the load process is run as soon as it wakes instead of waiting
# behind the simulator's steps (the run-queue wait that marks a level client late).
SIM_NICE = 10
# The simulator's /metrics every 0.1 s: the top levels' windows last about a second, and the
# report compares the server's figures only over windows of several scrape intervals.
METRICS_INTERVAL = 0.1
# the run's options the demo offers, with its defaults: 48 measured requests, a whole wave of the
# top level's users, make the top levels' windows last about a second, enough for the /metrics
# cross-check; 32 output tokens (a request ~0.35 s) and a lowest level of 4 users keep the
# whole demo near 30 s
DEMO_DEFAULTS = {
    "levels": "4,8,16,32,48",
    "input_tokens": 512,
    "output_tokens": 32,
    "requests_per_level": 48,
    "warmup_requests": 4,
    "out": "runs",
}


def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    add_arguments(parser, only=DEMO_DEFAULTS, defaults=DEMO_DEFAULTS)
    add_workers_argument(parser)
    parser.add_argument("--report-dir", default="reports", help="where the HTML report goes")
    add_no_report_argument(parser, "skip the HTML report")
    parser.add_argument(
        "--sim-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra simulator option (repeatable, e.g. --sim-arg=--max-num-seqs=32)",
    )


def main(args: argparse.Namespace) -> int:
    sim_args = [*SIM_ARGS, *args.sim_arg]
    print(f"Starting the simulator ({' '.join(sim_args)}; nice {SIM_NICE}) ...", flush=True)
    with SimulatorProcess(*sim_args, nice=SIM_NICE) as sim:
        print(f"Simulator at {sim.url}", flush=True)
        run_args = run_cli.run_options(
            sim.url,
            **{name: getattr(args, name) for name in DEMO_DEFAULTS},
            workers=args.workers,
            loglevel="WARNING",
            meta=["demo=simulator"],
            metrics_interval=METRICS_INTERVAL,
            # the demo knows its server's flags, as a user would give them (only vLLM's are read)
            server_args=" ".join(sim_args),
        )
        launch = run_cli.prepare(run_args)
        run_dir = launch.run_dir
        code = launch.run()
    if code != 0 or not run_dir or not os.path.exists(os.path.join(run_dir, "run.json")):
        raise CommandFailed(
            f"the load test failed (Locust exited with code {code}); see its errors above"
        )
    if not args.no_report:
        # at call time: keeps pandas and matplotlib out of every command's start (cli.main)
        from ..report.render import build_report

        out_html = os.path.join(args.report_dir, f"demo-{os.path.basename(run_dir)}.html")
        paths = build_report([run_dir], out_html, progress=False)
        print(f"Report: {paths.html}", flush=True)
    return 0
