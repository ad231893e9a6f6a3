"""`vllm-load tune --slo ... --guided --server-cmd ...`: from the configuration given, move one
server flag at a time as the bottleneck verdict at the SLO-max level advises, keeping a change
only where it raised the SLO-max (`analysis/decisions/guided_search.py` decides; this module
measures).

Each configuration is a step: its SLO-max found `--runs` times (`slo_max.py`'s search, each
with its own server start, in `steps/NN/run-K/` of the tune directory), the verdict read at
its SLO-max level (`guided_verdict.py`), then judged against the best so far. Every finished
step is recorded in `guided.json` at once, and each search keeps its own levels as it goes:
Ctrl-C keeps every finished step and level, and the same command resumes, measuring none
again. A server that does not start, or a level's run that does not complete, is recorded as
such and the search goes on from the best configuration.
"""

from __future__ import annotations

import argparse
import copy
import os
from dataclasses import dataclass, field
from typing import Callable

from ...analysis.decisions.guided_search import (
    BUDGET_SPENT,
    MEASURED,
    NO_FLAG,
    RUN_FAILED,
    SERVER_FAILED,
    START_FAILED,
    FlagBound,
    GuidedStep,
    Move,
    best_step,
    better,
    next_move,
    stop_reason,
)
from ...analysis.decisions.slo_search import Bounds, next_step
from ...load_kinds import kind_named
from ...run_format.files import safe_name
from ...server.process import ServerError, ServerProcess, wait_ready
from ...settings import Settings
from ...slo import SloSpec, parse_slo
from ...user_values import SettingsError
from ..errors import CommandFailed, Interrupted
from .guided_options import flag_bounds, parse_starts, render, slots_of, start_config
from .guided_report import format_steps, summarize_search, write_outputs
from .pareto_points import guided_page, search_page
from .runs import progress
from .slo_max import RESUME, Search, bounds_of, search_record
from .slo_max_report import format_levels, summarize
from .slo_max_report import write_outputs as write_search
from .slo_max_state import SearchState, read_search_file, write_search_file

STATE_FILE = "guided.json"


# --- its file ------------------------------------------------------------------------------------
@dataclass
class GuidedState:
    """What `guided.json` holds: what the search is (only the same one resumes) and every
    finished step, in order."""

    search: dict
    steps: list[GuidedStep] = field(default_factory=list)
    result: dict = field(default_factory=dict)

    def save(self, directory: str) -> None:
        path = os.path.join(directory, STATE_FILE)
        write_search_file(path, self.search, "steps", self.steps, self.result)

    @classmethod
    def load(cls, directory: str, search: dict) -> "GuidedState":
        path = os.path.join(directory, STATE_FILE)
        # the bounds and the budget may change between starts; the search itself may not
        steps = read_search_file(
            path,
            search,
            "steps",
            lambda s: GuidedStep(**s),
            ("flag_bounds", "max_runs"),
            "a guided search",
        )
        return cls(search, steps or [])


# --- measuring one configuration -------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """What every configuration is measured with."""

    spec: SloSpec
    levels: Bounds
    unit: str
    runs: int


def _search_once(
    args: argparse.Namespace, directory: str, step: GuidedStep, plan: Plan, max_levels: int
) -> tuple[str, str, SearchState | None]:
    """One SLO-max search of the step's configuration: (outcome, reason, its state)."""
    run_args = copy.copy(args)
    run_args.server_cmd = step.command
    run_args.meta = [*args.meta, *(f"config.{k}={v}" for k, v in sorted(step.config.items()))]
    bounds = Bounds(
        plan.levels.min_level, plan.levels.max_level, max_levels, integer=plan.levels.integer
    )
    os.makedirs(directory, exist_ok=True)
    state = SearchState.load(directory, search_record(run_args, plan.spec, bounds))
    state.save(directory)
    search = Search(run_args, directory, state)
    if not next_step([lv.probe for lv in state.levels], bounds).done:
        failed = _start(search, args, step.command, directory)
        if failed:
            return SERVER_FAILED, failed, state
    try:
        final = search.run(bounds, plan.unit)
    except CommandFailed as e:
        return RUN_FAILED, str(e).replace(f"; {RESUME}", ""), state
    state.result = summarize(final, state.levels, plan.spec, plan.unit)
    write_slo_max(directory, state, plan.unit)
    return MEASURED, "", state


def write_slo_max(directory: str, state: SearchState, unit: str) -> None:
    """The search's `slo_max.md` and `slo_max.json`, as `tune --slo` alone writes them."""
    write_search(directory, state, format_levels(state.levels, unit))


def _start(search: Search, args: argparse.Namespace, command: str, directory: str) -> str:
    """Start the configuration's server for `search`; the reason it did not start, or ""."""
    search.say(f"starting the server: {command}")
    server = ServerProcess(command, os.path.join(directory, "server.log"))
    try:
        process = server.start()
        wait_ready(
            args.host,
            args.ready_timeout,
            args.api_key or os.environ.get("OPENAI_API_KEY") or None,
            process,
        )
    except ServerError as e:
        server.stop()
        return f"{e}; the server's output is in {os.path.join(directory, 'server.log')}"
    except KeyboardInterrupt:
        server.stop()
        raise Interrupted(RESUME) from None
    search.server = server  # the search stops it when it ends
    return ""


def measure_step(
    args: argparse.Namespace, directory: str, step: GuidedStep, plan: Plan, max_levels: int
) -> None:
    """Fill `step` in: its SLO-max searches (each `max_levels` at most), its verdict."""
    # at call time: reading the verdict keeps numpy and pandas out of every command's start
    from .guided_verdict import read_verdict

    states = []
    for k in range(plan.runs):
        where = os.path.join(directory, "steps", f"{step.index:02d}", f"run-{k + 1}")
        outcome, reason, state = _search_once(args, where, step, plan, max_levels)
        if state is not None:
            step.runs_used += sum(lv.runs for lv in state.levels)
            step.run_dirs += [lv.run_dir for lv in state.levels]
        if outcome != MEASURED:
            step.outcome, step.reason = outcome, reason
            return
        assert state is not None
        states.append(state)
        step.slo_max.append(state.result["slo_max"])
    first = states[0].result
    step.bracket, step.status = list(first["bracket"]), first["status"]
    verdict = read_verdict(step.run_dirs, first["slo_max"], plan.spec)
    step.verdict_kind, step.verdict_level = verdict.kind, verdict.level
    step.advice = verdict.advice
    step.knee_measured, step.knee_predicted = verdict.knee_measured, verdict.knee_predicted
    step.total_tok_per_s = verdict.total_tok_per_s
    step.output_tok_per_s_per_user = verdict.output_tok_per_s_per_user


# --- the search ---------------------------------------------------------------------------------
Measure = Callable[[GuidedStep, int], None]


class GuidedSearch:
    """The steps of one guided search: the decisions are `guided_search`'s, `measure` fills a
    step in (the real one starts servers and runs levels; a test's may not)."""

    def __init__(
        self,
        state: GuidedState,
        bounds: dict[str, FlagBound],
        command_of: Callable[[dict[str, str]], str],
        measure: Measure,
        say: Callable[[str], None],
        save: Callable[[], None],
        max_levels: int,
        runs: int = 1,
        max_runs: int | None = None,
    ):
        self.state, self.bounds, self.command_of = state, bounds, command_of
        self.measure, self.say, self.save = measure, say, save
        self.max_levels, self.runs, self.max_runs = max_levels, runs, max_runs

    def _levels_left(self) -> int:
        """How many levels each search of the next step may measure (0: too few to search)."""
        if self.max_runs is None:
            return self.max_levels
        used = sum(s.runs_used for s in self.state.steps)
        each = (self.max_runs - used) // self.runs
        return min(self.max_levels, each) if each >= 2 else 0

    def _moved(self, best: GuidedStep, move: Move) -> dict[str, str]:
        return {**best.config, **move.values}

    def _command_of_move(self, best: GuidedStep, move: Move) -> str:
        return self.command_of(self._moved(best, move))

    def _finish(self, step: GuidedStep, best: GuidedStep | None) -> None:
        if best is None:
            step.kept = step.outcome == MEASURED and step.value is not None
            step.why = (
                "the starting configuration"
                if step.kept
                else (step.reason or "no level met the SLO")
            )
        else:
            step.kept, step.why = better(best, step)
        self.state.steps.append(step)
        self.save()
        slo_max = "-" if step.value is None else f"{step.value:g}"
        said = f"step {step.index} ({step.change}): SLO-max {slo_max}"
        self.say(f"{said}; {'kept' if step.kept else 'not kept'}: {step.why}")

    def run(self, start: dict[str, str]) -> str:
        """Run the search to its end; returns why it stopped (`guided_search`'s reasons)."""
        steps = self.state.steps
        if steps:
            self.say(f"resuming: {len(steps)} step{'s' if len(steps) > 1 else ''} already done")
        else:
            levels = self._levels_left()
            if not levels:
                return BUDGET_SPENT
            step = GuidedStep(0, dict(start), self.command_of(start), "start", None)
            self.measure(step, levels)
            self._finish(step, None)
        while True:
            reason = stop_reason(steps)
            if reason is not None:
                return reason
            best = best_step(steps)
            assert best is not None
            tried = {s.command for s in steps}
            move = next_move(steps, self.bounds, tried, self._command_of_move)
            if move is None:
                return NO_FLAG
            levels = self._levels_left()
            if not levels:
                return BUDGET_SPENT
            config = self._moved(best, move)
            change = move.change + (f" ({move.note})" if move.note else "")
            step = GuidedStep(len(steps), config, self.command_of(config), change, best.index)
            step.moved = {"flag": move.flag, "from": move.old, "to": move.value, "note": move.note}
            if move.also:
                step.moved["also"] = [
                    {"flag": m.flag, "from": m.old, "to": m.value} for m in move.also
                ]
            self.say(f"step {step.index}: {change}, from step {best.index}")
            self.measure(step, levels)
            self._finish(step, best)


# --- the command --------------------------------------------------------------------------------
def guided_search(args: argparse.Namespace, runs: int) -> int:
    """The guided search `args` describe: exit 0 with its path and best configuration,
    CommandFailed when the starting configuration has no SLO-max."""
    settings = Settings.from_options(args)
    spec = parse_slo(args.slo)
    if not spec:
        raise SettingsError("the guided search needs an --slo with a limit")
    levels = bounds_of(args, settings)
    unit = kind_named("rate" if not levels.integer else "concurrency").unit
    bounds = flag_bounds(args.bound)
    if args.max_runs is not None and args.max_runs < 2 * runs:
        raise SettingsError(
            f"--max-runs {args.max_runs} is too few: one SLO-max search measures 2 levels at least"
        )
    starts = parse_starts(args.start, args.server_cmd)
    if "model" in slots_of(args.server_cmd) and not args.model:
        raise SettingsError("--server-cmd uses {model}: pass --model")
    start = start_config(args.server_cmd, starts, bounds, args.model)
    directory = os.path.join(args.out, safe_name(args.name, "guided"))
    os.makedirs(directory, exist_ok=True)
    record = search_record(args, spec, levels)
    record.update(
        runs=runs,
        start=start,
        flag_bounds={k: [v.low, v.high] for k, v in bounds.items()},
        max_runs=args.max_runs,
    )
    state = GuidedState.load(directory, record)
    state.save(directory)
    plan = Plan(spec, levels, unit, runs)
    search = GuidedSearch(
        state,
        bounds,
        lambda config: render(args.server_cmd, config, args.model),
        lambda step, max_levels: measure_step(args, directory, step, plan, max_levels),
        lambda text: progress(args.name, text),
        lambda: state.save(directory),
        args.max_levels,
        runs,
        args.max_runs,
    )
    reason = search.run(start)
    state.result = summarize_search(state.steps, reason, spec, unit)
    table = format_steps(state.steps, unit)
    print("\n" + table + "\n", flush=True)
    path = write_outputs(directory, state.search, state.steps, state.result, table)
    state.save(directory)
    print(f"Steps: {path}; {os.path.join(directory, STATE_FILE)}")
    page = guided_page(args.name, state.search, state.steps, state.result, unit, args.gpus)
    print(f"Page: {search_page(page, directory)}")
    if reason == START_FAILED or best_step(state.steps) is None:
        raise CommandFailed(state.result["line"])
    print(state.result["line"], flush=True)
    return 0


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
    return guided_search(args, runs)
