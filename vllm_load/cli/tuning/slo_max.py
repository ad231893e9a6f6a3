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
import json
import math
import os
from dataclasses import asdict, dataclass, field

from ...analysis.decisions.slo_interval import (
    HOLDS,
    ItemFigure,
    LevelSample,
    judge_level,
    level_verdict,
)
from ...analysis.decisions.slo_search import (
    BUDGET,
    CONVERGED,
    MAX_MET,
    NONE_MET,
    Bounds,
    Probe,
    Step,
    next_step,
)
from ...load_kinds import kind_named
from ...run_format.files import safe_name, write_atomic
from ...server.process import ServerError, ServerProcess, wait_ready
from ...settings import Settings
from ...slo import SloSpec, parse_slo
from ...user_values import SettingsError
from ..errors import CommandFailed, Interrupted, server_log
from ..run import run_headless
from .runs import progress

STATE_FILE = "slo_max.json"
TABLE_FILE = "slo_max.md"
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


@dataclass
class Level:
    """One measured level, as `slo_max.json` keeps it."""

    level: float
    run_dir: str
    items: list[dict]  # ItemFigure fields, per SLO item
    verdict: str  # holds / fails / straddles / unknown: what its intervals prove

    @property
    def figures(self) -> list[ItemFigure]:
        return [ItemFigure(**i) for i in self.items]

    @property
    def probe(self) -> Probe:
        return Probe(self.level, tuple(f.ratio for f in self.figures))


@dataclass
class SearchState:
    """What `slo_max.json` holds: what the search is (it resumes only the same one) and every
    level measured so far, in order."""

    search: dict
    levels: list[Level] = field(default_factory=list)
    result: dict = field(default_factory=dict)

    def save(self, directory: str) -> None:
        data = {
            "format": 1,
            "search": self.search,
            "levels": [asdict(lv) for lv in self.levels],
            **({"result": self.result} if self.result else {}),
        }
        write_atomic(os.path.join(directory, STATE_FILE), json.dumps(data, indent=2, default=str))

    @classmethod
    def load(cls, directory: str, search: dict) -> "SearchState":
        """The directory's search, or a new one; SettingsError, one line, when it holds another
        search or cannot be read."""
        path = os.path.join(directory, STATE_FILE)
        if not os.path.exists(path):
            return cls(search)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            levels = [Level(**lv) for lv in data["levels"]]
            for lv in levels:
                lv.figures  # every item readable
            before = data["search"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SettingsError(f"cannot read {path} ({e}); pass --name to start another") from None
        changed = [k for k in search if k not in ("bounds",) and before.get(k) != search[k]]
        if changed:
            raise SettingsError(
                f"{directory} holds a search with other {', '.join(changed)} (it resumes only the "
                "same search): pass --name to start another"
            )
        return cls(search, levels)


# --- a level measured ---------------------------------------------------------------------------
def level_sample(run_dir: str, spec: SloSpec) -> tuple[LevelSample, dict]:
    """The measured requests of a one-level run, and each threshold's values (`judge_level`)."""
    # at call time: keeps numpy and pandas out of every command's start (cli.main)
    import numpy as np

    from ...analysis.decisions.goodput import as_floats, good_requests, threshold_values
    from ...analysis.levels.measure import measure_levels
    from ...figures import per_request
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
    return sample, {t.metric: threshold_values(measured, t) for t in spec.thresholds}


def judge_run(level: float, run_dir: str, spec: SloSpec) -> Level:
    sample, thresholds = level_sample(run_dir, spec)
    if not len(sample.ok):
        raise CommandFailed(
            f"the level at {level:g} in {run_dir} measured no request: raise --level-time-cap "
            f"or lower --warmup-requests; {RESUME}"
        )
    items = judge_level(sample, spec, thresholds)
    return Level(level, run_dir, [asdict(i) for i in items], level_verdict(items))


# --- what it prints and writes ------------------------------------------------------------------
def _value(value: float, limit: float, item: str) -> str:
    if value != value:
        return "?"
    if value == math.inf:
        return "inf"
    if item.startswith("missed"):
        return f"{value * 100:.3g}%"
    return f"{value * 1000:.4g} ms" if limit < 1 else f"{value:.4g} s"


def _cell(f: ItemFigure) -> str:
    interval = f"{_value(f.low, f.limit, f.item)}..{_value(f.high, f.limit, f.item)}"
    return f"{_value(f.estimate, f.limit, f.item)} ({interval})"


def format_levels(levels: list[Level], unit: str) -> str:
    """The levels measured, by level: each item's estimate (95 % interval), whether the estimates
    met the SLO, and what the intervals prove."""
    ordered = sorted(levels, key=lambda lv: lv.level)
    items = [f.item for f in ordered[0].figures] if ordered else []
    header = (unit, *items, "met", "proven", "order")
    order = {id(lv): i for i, lv in enumerate(levels, 1)}
    rows = [header] + [
        (
            f"{lv.level:g}",
            *(_cell(f) for f in lv.figures),
            "yes" if lv.probe.met else "no",
            lv.verdict,
            str(order[id(lv)]),
        )
        for lv in ordered
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _figures_text(level: Level) -> str:
    return "; ".join(
        f"{f.item} {_value(f.estimate, f.limit, f.item)} (95% interval {_cell(f).split('(')[1]}"
        for f in level.figures
    )


def summarize(step: Step, levels: list[Level], spec: SloSpec, unit: str) -> dict:
    """The search's result: what `slo_max.json` keeps under `result`, with its final line."""
    by_level = {lv.level: lv for lv in levels}
    low = by_level.get(step.low.level) if step.low else None
    high = by_level.get(step.high.level) if step.high else None
    below = [lv for lv in levels if high is None or lv.level < high.level]
    proven = [lv.level for lv in below if lv.verdict == HOLDS]
    slo = ", ".join(spec.items())
    n = len(levels)
    result = {
        "status": step.status,
        "slo_max": low.level if low else None,
        "bracket": [low.level if low else None, high.level if high else None],
        "width": None if step.width != step.width else step.width,
        "levels_run": n,
        "verdict_at_slo_max": low.verdict if low else None,
        "proven_up_to": max(proven) if proven else None,
    }
    if step.status == NONE_MET:
        assert high is not None
        line = (
            f"no level meets the SLO ({slo}): at the lowest, {high.level:g} {unit}, "
            f"{_figures_text(high)}; lower --min-level or loosen the SLO"
        )
    elif step.status == MAX_MET:
        assert low is not None
        line = (
            f"the SLO ({slo}) is met up to --max-level, {low.level:g} {unit} (proven: "
            f"{low.verdict}); the SLO-max is higher: raise --max-level. {n} levels run"
        )
    else:
        assert low is not None
        span = (
            f"met at {low.level:g}, not at {high.level:g} (bracket {step.width * 100:.1f}% wide)"
            if high is not None
            else f"met at {low.level:g}, no level above it measured"
        )
        why = {CONVERGED: "", BUDGET: " before the bracket was within 5% (raise --max-levels)"}
        line = f"SLO-max {low.level:g} {unit} for {slo}: {span}; {n} levels run{why[step.status]}"
        if low.verdict != HOLDS:
            held = f"{max(proven):g} {unit}" if proven else "no level"
            line += (
                f". At {low.level:g} the SLO {low.verdict} within the 95% intervals (more "
                f"requests per level would tell); proven to hold: {held}"
            )
    result["line"] = line
    return result


def write_outputs(directory: str, state: SearchState, table: str) -> str:
    """`slo_max.md` beside `slo_max.json`; returns the Markdown's path."""
    path = os.path.join(directory, TABLE_FILE)
    search = state.search
    text = (
        f"# SLO-max: {', '.join(search['slo'])}\n\n"
        f"Server: `{search['server_cmd'] or search['host']}`\n\n"
        f"```\n{table}\n```\n\n{state.result['line']}\n\n"
        "Each item: the estimate as the report computes it (95% interval). *met*: every estimate "
        "within its limit (what the search follows); *proven*: holds when every interval is "
        "within its limit, fails when one is wholly beyond it, straddles otherwise.\n"
    )
    write_atomic(path, text)
    state.save(directory)
    return path


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

    def run(self, bounds: Bounds, unit: str) -> Step:
        step = next_step([lv.probe for lv in self.state.levels], bounds)
        if self.state.levels:
            self.say(f"resuming: {len(self.state.levels)} levels already measured")
        try:
            while not step.done:
                assert step.level is not None
                level = self.measure(step.level, unit)
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
    print(f"Levels: {path}; {os.path.join(directory, STATE_FILE)}")
    if step.status == NONE_MET:
        raise CommandFailed(state.result["line"])
    print(state.result["line"], flush=True)
    return 0
