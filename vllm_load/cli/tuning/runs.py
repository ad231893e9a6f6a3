"""The runs of a tuning: every configuration's server started, the stepped test run once it is
ready, the server stopped; each configuration `--runs` times, in rounds (A B A B: drift over the
session spreads over every configuration alike), every run tagged `config.NAME=value` so that a
configuration's runs are one series in the report. `tune.json` records every run as it ends, so
running the same command again does only the runs still missing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import asdict, dataclass, field

from ...run_format.files import write_atomic
from ...server.process import ServerError, ServerProcess, wait_ready
from ...slo import parse_slo
from ...user_values import SettingsError
from ..errors import CommandFailed, Interrupted, server_log
from ..run import run_headless
from ..run_end import failed_levels
from . import written

STATE_FILE = "tune.json"
RESUME = "run the same command again to do the remaining runs (completed ones are kept)"


@dataclass(frozen=True)
class Configuration:
    """One server configuration: its values (the runs' `config.NAME=value` tags) and the server
    command that runs it."""

    config: dict[str, str]
    command: str
    name: str = ""  # what the output calls it ("A", "B"); its values when empty
    #: its values as the output shows them, where some are not tags (a server default)
    shown: dict[str, str] = field(default_factory=dict)
    #: run options its runs take instead of the command's (`--server-args` with its values)
    overrides: dict[str, object] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return json.dumps(self.config, sort_keys=True)

    @property
    def label(self) -> str:
        values = ", ".join(f"{k}={v}" for k, v in (self.shown or self.config).items())
        return f"{self.name} ({values})" if self.name else values


@dataclass
class TunedRun:
    """One run of a configuration, as `tune.json` keeps it."""

    config: dict
    run_dir: str
    outcome: str


@dataclass
class ConfigResult:
    """One configuration's outcome and its headline figures, over its completed runs."""

    config: dict
    run_dirs: list[str]
    outcome: str  # "completed" when every run was, else the outcome of the one that was not
    peak_tok_per_s: float = math.nan
    peak_value: float = math.nan
    saturation: str = ""
    p99_at_peak: float = math.nan
    mean_e2e_p99: float = math.nan
    # with --slo: the peak of good requests/s, and the highest level meeting the SLOs
    goodput_peak: float = math.nan
    goodput_peak_value: float = math.nan
    slo_value: float = math.nan
    # the saturation point (NaN when not saturated within the tested levels), and those levels
    knee_value: float = math.nan
    levels: list[float] = field(default_factory=list)
    #: per level, the figures of its Pareto point (`pareto_points.level_figures`)
    level_figures: list[dict] = field(default_factory=list)
    gpus: float | None = None  # from the runs' meta (`--meta gpus=N`), where they name it
    #: with speculative decoding: tokens per decoding step per sequence at the peak level (mean
    #: over runs); NaN where the server did not speculate
    acceptance_length: float = math.nan

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.config.items())


def measure(result: ConfigResult, slo: list[str] | None = None) -> None:
    """Fill the headline figures of a completed configuration from its runs (one series),
    judged against `slo` (`--slo` items; default: those the runs were started with)."""
    # at call time: keeps pandas and matplotlib out of every command's start (cli.main)
    from ...analysis.decisions.pareto import level_figures
    from ...analysis.series.model_comparison import gpu_count
    from ...report.model import build_report_data

    data = build_report_data(result.run_dirs, slo=parse_slo(slo))
    series = data.series[0]
    result.level_figures = level_figures(series.curve, bool(data.slo))
    result.gpus = gpu_count(series.series.model, [r.run for r in series.runs])[0]
    sat = series.saturation
    if sat.peak is not None:
        result.peak_tok_per_s, result.peak_value, result.p99_at_peak = (
            sat.peak.tok_per_s,
            sat.peak.value,
            sat.peak.e2e_p99,
        )
    result.saturation = sat.status
    if sat.saturated and sat.saturation is not None:
        result.knee_value = sat.saturation.value
    result.levels = [float(u) for u in series.curve["value"]]
    result.acceptance_length = _at_peak(series.curve, "spec_acceptance_length_mean", sat.peak)
    p99 = series.curve["e2e_p99_mean"].astype(float)
    result.mean_e2e_p99 = float(p99.mean()) if p99.notna().any() else math.nan
    head = series.slo_headline
    if head is not None:
        result.goodput_peak, result.goodput_peak_value = head.goodput_peak, head.goodput_peak_value
        result.slo_value = head.best.mean


def _at_peak(curve, column: str, peak) -> float:
    """`column` of the curve at the peak's level; NaN without a peak or the column."""
    if peak is None or column not in curve:
        return math.nan
    row = curve[curve["value"] == peak.value]
    return float(row[column].iloc[0]) if len(row) else math.nan


def write_report(run_dirs: list[str], directory: str, slo: list[str] | None) -> str:
    """The report of the tuning's completed runs, `report.html` in its directory (each
    configuration a series); returns its path. Not rebuilt (and one line says so) where it was
    last written from these same runs and options (`written`)."""
    html = os.path.join(directory, "report.html")
    key = written.fingerprint("report", written.run_files(run_dirs), slo or [])
    if written.unchanged(directory, "report", key, [html]):
        print("Report unchanged: the same completed runs and options as when it was written")
        return html
    # at call time: keeps pandas and matplotlib out of every command's start (cli.main)
    from ...report.render import build_report

    paths = build_report(run_dirs, html, progress=True, slo=parse_slo(slo))
    written.remember(directory, "report", key)
    return paths.html


@dataclass
class TuneState:
    """What `tune.json` holds: the mode that started the tuning, what it must resume with, every
    run so far, and the last results."""

    mode: str  # "matrix" or "advice"
    runs: list[TunedRun] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # what the mode keeps (the ranking, the advice)

    def completed(self, config: Configuration) -> list[str]:
        return [
            r.run_dir
            for r in self.runs
            if r.outcome == "completed" and json.dumps(r.config, sort_keys=True) == config.key
        ]

    def save(self, directory: str) -> None:
        data = {
            "format": 2,
            "mode": self.mode,
            "runs": [asdict(r) for r in self.runs],
            "results": self.results,
            **self.extra,
        }
        write_atomic(
            os.path.join(directory, STATE_FILE), json.dumps(data, indent=2, default=lambda v: None)
        )

    @classmethod
    def load(cls, directory: str, mode: str) -> "TuneState":
        """The directory's state, or a new one; SettingsError when it holds a tuning of the other
        mode or cannot be read."""
        path = os.path.join(directory, STATE_FILE)
        if not os.path.exists(path):
            return cls(mode)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            state = cls._from(data)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SettingsError(f"cannot read {path} ({e}); pass --name to start another") from None
        if state.mode != mode:
            raise SettingsError(
                f"{directory} holds a tuning of another kind ({state.mode}, this is {mode}): "
                "pass --name to start another"
            )
        return state

    @classmethod
    def _from(cls, data: dict) -> "TuneState":
        if data.get("format", 1) == 1:  # one run per configuration, in its result
            runs = [TunedRun(r["config"], r["run_dir"], r["outcome"]) for r in data["results"]]
            return cls("matrix", runs)
        known = {"format", "mode", "runs", "results"}
        return cls(
            data["mode"],
            [TunedRun(**r) for r in data["runs"]],
            list(data.get("results", [])),
            {k: v for k, v in data.items() if k not in known},
        )


def progress(name: str, text: str) -> None:
    """One line of a tuning's progress."""
    print(f"tune {name}: {text}", flush=True)


class TuneRuns:
    """Runs the configurations of one tuning, keeping `tune.json` current after every run."""

    def __init__(self, args: argparse.Namespace, directory: str, state: TuneState):
        self.args = args
        self.directory = directory
        self.state = state

    def say(self, text: str) -> None:
        progress(self.args.name, text)

    def _run(self, configuration: Configuration, where: str) -> TunedRun:
        server = ServerProcess(configuration.command, os.path.join(self.directory, "server.log"))
        try:
            process = server.start()
            wait_ready(
                self.args.host,
                self.args.ready_timeout,
                self.args.api_key or os.environ.get("OPENAI_API_KEY") or None,
                process,
            )
            self.say(f"{where}: server ready, running the test")
            run_dir, outcome = run_headless(
                self.args,
                os.path.join(self.directory, "runs"),
                [
                    *(f"config.{k}={v}" for k, v in configuration.config.items()),
                    f"tune={self.args.name}",
                ],
                configuration.overrides,
            )
        finally:
            server.stop()
        return TunedRun(configuration.config, run_dir, outcome)

    def _judged(self, run: TunedRun) -> TunedRun:
        """A strict tuning's run: one whose levels failed (`run.outcomes`' levels_failed, what
        `vllm-load run` would exit 5 on) is no good run of its configuration."""
        if run.outcome != "completed":
            return run
        failed = failed_levels(run.run_dir)
        if not failed:
            return run
        self.say(failed)
        return TunedRun(run.config, run.run_dir, "levels_failed")

    def run_all(
        self, configurations: list[Configuration], runs: int, strict: bool = False
    ) -> list[ConfigResult]:
        """Complete `runs` runs of every configuration, in rounds. A configuration whose run did
        not complete gets no more runs now (its result carries that outcome; the next start
        tries again). `strict` (a comparison, which needs every run good) also fails a run whose
        levels failed, and stops the tuning at the first run that failed (`CommandFailed`)."""
        failed: dict[str, TunedRun] = {}
        count = len(configurations)
        try:
            for round_ in range(1, runs + 1):
                for i, c in enumerate(configurations, 1):
                    where = f"[{i}/{count}] {c.label}: run {round_}/{runs}"
                    if c.key in failed:
                        continue
                    if len(self.state.completed(c)) >= round_:
                        self.say(f"{where} already completed")
                        continue
                    self.say(f"{where}: starting the server")
                    run = self._run(c, where)
                    if strict:
                        run = self._judged(run)
                    self.state.runs.append(run)
                    self.state.save(self.directory)
                    if run.outcome == "interrupted":
                        raise Interrupted(RESUME)
                    if run.outcome != "completed":
                        failed[c.key] = run
                        self.say(f"{where} ended with outcome {run.outcome!r}")
                        if strict:
                            raise CommandFailed(
                                f"{c.label} run {round_}/{runs} ended with outcome "
                                f"{run.outcome!r} (see {run.run_dir or 'the errors above'}): "
                                f"the comparison needs every run; {RESUME}"
                            )
        except (ServerError, SettingsError) as e:  # during the work: a failure, not a usage error
            # (each run's server is stopped by _run's finally; tune.json is current)
            raise CommandFailed(f"{e}{server_log(self.directory)}; {RESUME}") from None
        except (Interrupted, CommandFailed):
            raise
        # Ctrl-C outside a run (a server starting or stopping): still Ctrl-C, with how to resume
        except KeyboardInterrupt:
            raise Interrupted(RESUME) from None
        results = []
        for c in configurations:
            lost = failed.get(c.key)
            result = ConfigResult(
                c.config, self.state.completed(c)[:runs], lost.outcome if lost else "completed"
            )
            if not lost:
                measure(result, self.args.slo)
            results.append(result)
        self.state.results = [asdict(r) for r in results]
        self.state.save(self.directory)
        return results
