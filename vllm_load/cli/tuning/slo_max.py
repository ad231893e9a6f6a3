"""`vllm-load tune --slo ...` without `--matrix` or `--advice`: the highest concurrency (or
request rate, with `--rates`) at which one configuration meets the SLO, to within 5 %.

The search (`analysis/decisions/slo_search.py`) picks each next level from the levels measured
so far; each level is one headless run of that level alone, into `runs/` of the search's
directory (the server, when `--server-cmd` starts one, stays up between them). Each finished
level is judged (`analysis/decisions/slo_interval.py`: every item's estimate and 95 % interval,
holds / fails / straddles) and recorded in `slo_max.json` at once, so Ctrl-C keeps every
finished level and the same command resumes where it stopped, running no finished level
again. At the end: the levels as a table (terminal and `slo_max.md`), `slo_max.json`, and
one final line with the SLO-max, its bracket, and how many levels ran.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict

from ...analysis.decisions.slo_interval import (
    LevelSample,
    judge_level,
    level_verdict,
)
from ...analysis.decisions.slo_search import (
    NONE_MET,
    Bounds,
    Step,
    next_step,
)
from ...load_kinds import kind_named
from ...run_format.files import safe_name
from ...server.process import ServerError, ServerProcess, wait_ready
from ...settings import Settings
from ...slo import SloSpec, parse_slo
from ...user_values import SettingsError
from ..errors import CommandFailed, Interrupted, server_log
from ..run import run_headless
from .runs import progress
from .slo_max_report import format_levels, summarize, write_outputs
from .slo_max_state import STATE_FILE, Level, SearchState

RESUME = "run the same command again to carry on (finished levels are kept)"
#: the options whose values make a level comparable with the search's others: a resumed search
#: with other values would mix two workloads in one curve
WORKLOAD = (
    "model",
    "endpoint",
    "stream",
    "input_tokens",
    "output_tokens",
    "input_lengths",
    "output_lengths",
    "dataset",
    "think_time",
    "arrivals",
    "max_in_flight",
    "requests_per_level",
    "warmup_requests",
    "shared_prefix_tokens",
    "images",
)


# --- a level measured ---------------------------------------------------------------------------
def level_sample(run_dir: str, spec: SloSpec) -> tuple[LevelSample, dict, str]:
    """The measured requests of a one-level run, each threshold's values (`judge_level`), and
    why the client was late during it ("" on time)."""
    # at call time: keeps numpy and pandas out of every command's start (cli.main)
    import numpy as np

    from ...analysis.decisions.goodput import as_floats, good_requests, threshold_values
    from ...analysis.levels.client_side import late_levels, level_client_health, read_client_health
    from ...analysis.levels.measure import measure_levels
    from ...figures import per_request
    from ...run_format.files import CLIENT_HEALTH_CSV
    from ...run_format.load import analysis_columns, load_run

    data = load_run(run_dir, analysis_columns())
    meas = measure_levels(data.requests, data.steps, data.streams)
    measured = meas.labelled
    ok = as_floats(measured, "ok") == 1
    figures = {}
    for o in spec.objectives:
        source = per_request(o.metric)
        if source is not None and not source.from_histogram and o.metric in measured:
            figures[o.metric] = as_floats(measured, o.metric)
    rows = data.requests.index.get_indexer(measured.index[ok])
    itl = data.streams.itl.merge(rows, np.arange(len(rows)), len(rows))
    sample = LevelSample(ok, good_requests(measured, spec), figures, itl)
    health = read_client_health(os.path.join(run_dir, CLIENT_HEALTH_CSV)).frame
    late = late_levels(level_client_health(health, meas.metrics, data.requests))
    thresholds = {t.metric: threshold_values(measured, t) for t in spec.thresholds}
    return sample, thresholds, "; ".join(late.values())


def judge_run(level: float, run_dir: str, spec: SloSpec) -> Level:
    sample, thresholds, late = level_sample(run_dir, spec)
    if not len(sample.ok):
        raise CommandFailed(
            f"the level at {level:g} in {run_dir} measured no request: raise --level-time-cap "
            f"or lower --warmup-requests; {RESUME}"
        )
    items = judge_level(sample, spec, thresholds)
    return Level(level, run_dir, [asdict(i) for i in items], level_verdict(items), late)


# --- the command ----------------------------------------------------------------------------------
def bounds_of(args: argparse.Namespace, settings: Settings) -> Bounds:
    """The search's bounds from the options; one line for bad ones."""
    rates = bool(settings.rates)
    given = list(settings.rates) if rates else list(settings.levels)
    low = args.min_level if args.min_level is not None else (min(given) if rates else 1)
    high = args.max_level if args.max_level is not None else max(given)
    if args.max_levels < 2:
        raise SettingsError(f"--max-levels must be at least 2, got {args.max_levels}")
    if not 0 < low <= high:
        raise SettingsError(f"--min-level {low:g} and --max-level {high:g}: need 0 < min <= max")
    if not rates and (low != int(low) or high != int(high)):
        raise SettingsError("concurrency levels are whole users: give whole --min/--max-level")
    return Bounds(float(low), float(high), args.max_levels, integer=not rates)


def search_record(args: argparse.Namespace, spec: SloSpec, bounds: Bounds) -> dict:
    return {
        "slo": spec.items(),
        "kind": "rate" if bounds.integer is False else "concurrency",
        "server_cmd": args.server_cmd,
        "host": args.host,
        "workload": {k: getattr(args, k, None) for k in WORKLOAD},
        "bounds": asdict(bounds),
    }


class Search:
    """One SLO-max search: its server (when it starts one) and its levels."""

    def __init__(self, args: argparse.Namespace, directory: str, state: SearchState):
        self.args, self.directory, self.state = args, directory, state
        self.server: ServerProcess | None = None

    def say(self, text: str) -> None:
        progress(self.args.name, text)

    def _ensure_server(self) -> None:
        if not self.args.server_cmd or self.server is not None:
            return
        self.say(f"starting the server: {self.args.server_cmd}")
        self.server = ServerProcess(
            self.args.server_cmd, os.path.join(self.directory, "server.log")
        )
        process = self.server.start()
        wait_ready(
            self.args.host,
            self.args.ready_timeout,
            self.args.api_key or os.environ.get("OPENAI_API_KEY") or None,
            process,
        )

    def measure(self, level: float, unit: str) -> Level:
        self._ensure_server()
        rates = self.state.search["kind"] == "rate"
        # as a command line gives them: the run parses its options again
        overrides: dict[str, object] = (
            {"rates": f"{level:g}"} if rates else {"levels": f"{level:.0f}"}
        )
        self.say(f"level {len(self.state.levels) + 1}: {level:g} {unit}")
        run_dir, outcome = run_headless(
            self.args,
            os.path.join(self.directory, "runs"),
            [f"tune={self.args.name}", f"slo_max_level={level:g}"],
            overrides,
        )
        if outcome == "interrupted":
            raise Interrupted(RESUME)
        if outcome != "completed":
            raise CommandFailed(
                f"the run at {level:g} {unit} ended with outcome {outcome!r} (see "
                f"{run_dir or 'the errors above'}){server_log(self.directory)}; {RESUME}"
            )
        return judge_run(level, run_dir, parse_slo(self.state.search["slo"]))

    def measure_trusted(self, level: float, unit: str) -> Level:
        """The level measured. A miss while the client was late is measured once more: its
        latencies hold the load generator's own delay, so it says nothing yet of the server's
        limit. A second late miss is taken as a miss, its `late` kept for the table and the
        result (failing the search there would drop the levels below it that met the SLO:
        on a real vLLM, 7 users met at 2.92 s and 8 missed twice at 3.9-4.1 s, 124 ms/s late)."""
        measured = self.measure(level, unit)
        if measured.probe.met or not measured.late:
            return measured
        self.say(
            f"{level:g} {unit}: the SLO missed while the client was late ({measured.late}); "
            "measuring it again"
        )
        again = self.measure(level, unit)
        again.late_runs = [*measured.late_runs, measured.run_dir]
        if not again.probe.met and again.late:
            self.say(f"{level:g} {unit}: missed while late again ({again.late}): taken as a miss")
        return again

    def run(self, bounds: Bounds, unit: str) -> Step:
        step = next_step([lv.probe for lv in self.state.levels], bounds)
        if self.state.levels:
            count = len(self.state.levels)
            self.say(f"resuming: {count} level{'s' if count > 1 else ''} already measured")
        try:
            while not step.done:
                assert step.level is not None
                level = self.measure_trusted(step.level, unit)
                self.state.levels.append(level)
                self.state.save(self.directory)
                met = "met" if level.probe.met else "missed"
                self.say(f"{level.level:g} {unit}: the SLO {met} ({level.verdict} within 95%)")
                step = next_step([lv.probe for lv in self.state.levels], bounds)
        except (ServerError, SettingsError) as e:  # during the work: a failure, not a usage error
            raise CommandFailed(f"{e}{server_log(self.directory)}; {RESUME}") from None
        except (Interrupted, CommandFailed):
            raise
        except KeyboardInterrupt:  # outside a run: a server starting
            raise Interrupted(RESUME) from None
        finally:
            if self.server is not None:
                self.server.stop()
        return step


def find_slo_max(args: argparse.Namespace) -> int:
    """The SLO-max search `args` describe; exit 0 with its result, CommandFailed when no level
    meets the SLO."""
    settings = Settings.from_options(args)
    spec = parse_slo(args.slo)
    if not spec:
        raise SettingsError("the SLO-max search needs an --slo with a limit")
    bounds = bounds_of(args, settings)
    unit = kind_named("rate" if not bounds.integer else "concurrency").unit
    directory = os.path.join(args.out, safe_name(args.name, "slo-max"))
    os.makedirs(directory, exist_ok=True)
    state = SearchState.load(directory, search_record(args, spec, bounds))
    state.save(directory)
    step = Search(args, directory, state).run(bounds, unit)
    table = format_levels(state.levels, unit)
    state.result = summarize(step, state.levels, spec, unit)
    print("\n" + table + "\n", flush=True)
    path = write_outputs(directory, state, table)
    # at call time: matplotlib (~0.7 s of CPU) only once there is a page to draw, not before an
    # option is refused
    from .pareto_points import search_page, slo_max_page

    print(f"Levels: {path}; {os.path.join(directory, STATE_FILE)}")
    print(f"Page: {search_page(slo_max_page(args.name, state, unit, args.gpus), directory)}")
    if step.status == NONE_MET:
        raise CommandFailed(state.result["line"])
    print(state.result["line"], flush=True)
    return 0
