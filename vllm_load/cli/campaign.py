"""`vllm-load campaign`: n independent runs of one test, an optional fine sweep, one report.

The publication protocol: the same stepped test repeated n times (5 for publication) with the
server restarted between runs and a cooldown, then, with `--refine`, a finer sweep around the
saturation knee the coarse runs found. Every run is a normal run directory under the campaign
directory; `campaign.json` there records which runs finished, so running the same command
again after an interruption does only the missing runs. The report covers the completed runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field

from ..run_format.files import safe_name, write_atomic
from ..server.process import ServerError, ServerProcess, run_restart_command, wait_ready
from ..settings import Settings
from ..slo import parse_slo
from ..store.cli import add_store_argument
from ..store.groups import remember_group
from ..user_values import SettingsError, parse_levels
from .common import (
    add_name_argument,
    add_no_report_argument,
    add_ready_timeout_argument,
    add_runs_argument,
    add_server_cmd_argument,
)
from .errors import CommandFailed, Interrupted, server_log
from .run import LOCUSTFILE, add_managed_run_options, run_headless

STATE_FILE = "campaign.json"
RESUME = "run the same command again to finish the missing runs (completed runs are kept)"
#: run options that do not change what a run measures, so may differ on resume
NOT_COMPARED = frozenset({"out", "run_dir", "api_key_set", "meta", "slo"})


@dataclass
class CampaignRun:
    run_dir: str
    phase: str  # "coarse" or "refine"
    outcome: str


@dataclass
class CampaignState:
    """What `campaign.json` holds: the options the campaign was started with and its runs so far."""

    name: str
    options: dict
    refine_levels: list[int] | None = None
    runs: list[CampaignRun] = field(default_factory=list)

    def completed(self, phase: str) -> list[str]:
        return [r.run_dir for r in self.runs if r.phase == phase and r.outcome == "completed"]

    def save(self, directory: str) -> None:
        text = json.dumps({"format": 1, **asdict(self)}, indent=2)
        write_atomic(os.path.join(directory, STATE_FILE), text)

    @classmethod
    def load(cls, directory: str) -> "CampaignState | None":
        path = os.path.join(directory, STATE_FILE)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return cls(
            name=data["name"],
            options=data["options"],
            refine_levels=data.get("refine_levels"),
            runs=[CampaignRun(**r) for r in data.get("runs", [])],
        )


# --- refinement -------------------------------------------------------------------------------------
def _nice_step(span: float, steps: int) -> int:
    """A round integer step (1, 2, 2.5, 5 x 10^k) closest to span / steps; the larger on a tie."""
    raw = max(span / max(steps, 1), 1.0)
    magnitude = 10 ** math.floor(math.log10(raw))
    candidates = [f * magnitude for f in (1, 2, 2.5, 5, 10) if float(f * magnitude).is_integer()]
    return int(min(candidates, key=lambda c: (abs(c - raw), -c)))


def refine_levels(
    tested: list[float], saturation_users: float | None, steps: int = 10
) -> list[int]:
    """Levels for the fine sweep: from the tested level below the knee to the one above it.

    With levels 10,50,100,200,500,750,1000 and the knee at 750 this gives 500, 550, ..., 1000.
    Not saturated: the two highest tested levels bracket the sweep.
    """
    tested = sorted(set(tested))
    if len(tested) < 2:
        raise ValueError("the coarse runs tested fewer than two levels; nothing to refine")
    if saturation_users is None or saturation_users not in tested:
        lo, hi = tested[-2], tested[-1]
    else:
        i = tested.index(saturation_users)
        lo, hi = tested[max(i - 1, 0)], tested[min(i + 1, len(tested) - 1)]
    step = _nice_step(hi - lo, steps)
    levels = list(range(int(lo), int(hi) + 1, step))
    if levels[-1] != int(hi):
        levels.append(int(hi))
    return levels


def knee_from_runs(run_dirs: list[str]) -> list[int]:
    """Fine-sweep levels from the saturation analysis of the completed coarse runs."""
    # at call time: keeps pandas and matplotlib out of every command's start (cli.main)
    from ..report.model import build_report_data

    data = build_report_data(run_dirs)
    series = data.series[0]
    sat = series.saturation
    knee = sat.saturation.value if sat.saturated and sat.saturation else None
    return refine_levels([float(u) for u in series.curve["value"]], knee)


# --- the command --------------------------------------------------------------------------------------
def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    add_managed_run_options(
        parser,
        "base URL of the server under test",
        "campaigns",
        "base directory: the campaign lives in OUT/NAME",
    )
    run = parser.add_argument_group("campaign")
    add_runs_argument(run, 5, "independent runs (n for the confidence intervals)")
    run.add_argument(
        "--run-cooldown",
        type=float,
        default=60.0,
        help="seconds of rest between runs",
    )
    add_name_argument(run, "", "campaign name (default: the model id); same name = resume")
    control = run.add_mutually_exclusive_group()
    control.add_argument(
        "--restart-cmd",
        default="",
        metavar="CMD",
        help="shell command that restarts the server and returns (e.g. 'docker restart vllm'); "
        "run between runs",
    )
    add_server_cmd_argument(
        control,
        "shell command that runs the server in the foreground; started before and stopped "
        "after every run",
    )
    add_ready_timeout_argument(run)
    run.add_argument(
        "--refine",
        action="store_true",
        help="then sweep finely around the knee the coarse runs found",
    )
    run.add_argument(
        "--refine-levels", default="", help="fine-sweep levels (default: derived from the knee)"
    )
    run.add_argument("--refine-runs", type=int, default=3, help="runs of the fine sweep")
    run.add_argument(
        "--refine-output-tokens", type=int, default=100, help="output tokens in the fine sweep"
    )
    run.add_argument(
        "--refine-requests",
        type=int,
        default=200,
        help="measured requests per level in the fine sweep",
    )
    add_no_report_argument(run, "do not write the report at the end")
    add_store_argument(run, "the results store the campaign and its runs are written to at its end")


def _compared_options(args: argparse.Namespace) -> dict:
    """The target and the run settings as run.json records them, minus what may change on resume."""
    public = Settings.from_options(args).public()
    compared = {"host": args.host}
    locustfile = getattr(args, "locustfile", LOCUSTFILE)
    if locustfile != LOCUSTFILE:  # recorded only when given: campaigns started before -f resume
        compared["locustfile"] = locustfile
    return {**compared, **{k: v for k, v in sorted(public.items()) if k not in NOT_COMPARED}}


def _validate(args: argparse.Namespace) -> None:
    if args.runs < 1 or args.refine_runs < 1:
        raise SettingsError("--runs and --refine-runs must be at least 1")
    if args.run_cooldown < 0:
        raise SettingsError(f"--run-cooldown must not be negative, got {args.run_cooldown}")
    if args.refine_levels:
        parse_levels(args.refine_levels)
    if getattr(args, "trace", ""):
        raise SettingsError(
            "a campaign refines concurrency levels around a knee; a trace replays its own "
            "schedule: repeat `vllm-load run --trace` instead (or `vllm-load tune --trace` to "
            "compare server configurations on it)"
        )


class Campaign:
    """Runs the phases of one campaign, keeping `campaign.json` current after every run."""

    def __init__(self, args: argparse.Namespace, directory: str, state: CampaignState):
        self.args = args
        self.directory = directory
        self.state = state
        self.server = (
            ServerProcess(args.server_cmd, os.path.join(directory, "server.log"))
            if args.server_cmd
            else None
        )

    def say(self, text: str) -> None:
        print(f"campaign {self.state.name}: {text}", flush=True)

    def _ready_server(self) -> None:
        """A fresh, ready server for the next run: started (server command), restarted between
        runs (restart command), or just waited for (it may still be starting)."""
        api_key = self.args.api_key or os.environ.get("OPENAI_API_KEY") or None
        process = None
        if self.server is not None:
            self.server.stop()
            self.say("starting the server")
            process = self.server.start()
        elif self.args.restart_cmd and self.state.runs:
            self.say("restarting the server")
            run_restart_command(self.args.restart_cmd, self.args.ready_timeout)
        wait_ready(self.args.host, self.args.ready_timeout, api_key, process)

    def _run_once(self, phase: str, overrides: dict) -> str:
        if self.state.runs and self.args.run_cooldown > 0:
            self.say(f"cooling down {self.args.run_cooldown:g} s")
            time.sleep(self.args.run_cooldown)
        self._ready_server()
        run_dir, outcome = run_headless(
            self.args,
            os.path.join(self.directory, "runs"),
            [f"campaign={self.state.name}", f"campaign_phase={phase}"],
            overrides,
        )
        self.state.runs.append(CampaignRun(run_dir=run_dir, phase=phase, outcome=outcome))
        self.state.save(self.directory)
        return outcome

    def phase(self, phase: str, count: int, overrides: dict) -> None:
        """Complete `count` runs of `phase`; `CommandFailed` when one did not (the campaign stops)."""
        while len(self.state.completed(phase)) < count:
            n = len(self.state.completed(phase)) + 1
            self.say(f"{phase} run {n}/{count}")
            outcome = self._run_once(phase, overrides)
            if outcome == "interrupted":
                raise Interrupted(RESUME)
            if outcome != "completed":
                self.say(f"run ended with outcome {outcome!r}; stopping")
                raise CommandFailed(
                    f"{phase} run {n}/{count} ended with outcome {outcome!r} (see "
                    f"{self.state.runs[-1].run_dir or 'the errors above'}); {RESUME}"
                )

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


def _campaign_name(args: argparse.Namespace) -> str:
    return safe_name(args.name or args.model, "campaign")


def main(args: argparse.Namespace) -> int:
    try:
        _validate(args)
        name = _campaign_name(args)
        directory = os.path.join(args.out, name)
        options = _compared_options(args)
        state = CampaignState.load(directory)
        if state is None:
            state = CampaignState(name=name, options=options)
        elif state.options != options:
            changed = sorted(
                k
                for k in set(state.options) | set(options)
                if state.options.get(k) != options.get(k)
            )
            raise SettingsError(
                f"campaign {name!r} in {directory} was started with different options "
                f"({', '.join(changed)}); pass --name to start another campaign"
            )
        os.makedirs(directory, exist_ok=True)
        state.save(directory)
    except ValueError as e:  # a campaign.json that cannot be read, refine levels from no runs
        raise SettingsError(str(e)) from None
    done = len(state.completed("coarse"))
    campaign = Campaign(args, directory, state)
    campaign.say(
        f"{directory}; {done}/{args.runs} runs already completed" if done else f"{directory}"
    )
    # a failure or Ctrl-C ends the campaign with campaign.json current (saved after every run)
    # and the server stopped; cli.main prints the one line
    try:
        campaign.phase("coarse", args.runs, {})
        if args.refine:
            if state.refine_levels is None:
                state.refine_levels = (
                    parse_levels(args.refine_levels)
                    if args.refine_levels
                    else knee_from_runs(state.completed("coarse"))
                )
                state.save(directory)
            levels = ",".join(map(str, state.refine_levels))
            campaign.say(f"fine sweep over levels {levels}")
            overrides = {
                "levels": levels,
                "output_tokens": args.refine_output_tokens,
                "requests_per_level": args.refine_requests,
            }
            campaign.phase("refine", args.refine_runs, overrides)
    except (ServerError, SettingsError, ValueError) as e:
        # during the work (a server that cannot be started, restarted or reached, a target its
        # run refused, no knee to refine around): a failure, not a usage error, as in tune
        raise CommandFailed(
            f"{e}{server_log(directory if args.server_cmd else None)}; {RESUME}"
        ) from None
    except Interrupted:
        raise
    # Ctrl-C outside a run (a cooldown, a server starting): still Ctrl-C, with how to resume
    except KeyboardInterrupt:
        raise Interrupted(RESUME) from None
    finally:
        campaign.close()
    stored = remember_group(directory, args.store, "campaign")
    if args.no_report:
        return 0 if stored else 1
    # at call time: keeps pandas and matplotlib out of every command's start (cli.main)
    from ..report.render import build_report

    completed = state.completed("coarse") + state.completed("refine")
    # this command's --slo judges every run, those of an earlier start included
    paths = build_report(
        completed,
        os.path.join(directory, "report.html"),
        progress=True,
        slo=parse_slo(args.slo),
    )
    campaign.say(f"report: {paths.html}")
    return 0 if stored else 1
