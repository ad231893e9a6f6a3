"""Wiring vllm-load into Locust's events: one `RunSession` per test on the master.

- Workers ship their finished records inside Locust's own worker reports
  (`report_to_master`), and push a last report as soon as their users stop.
- The master (or a single local process) keeps one `RunSession` per test: it creates the run
  directory, follows the shape's level changes, appends arriving records, keeps Locust's CSVs
  beside them, and closes the run when the test is over.

In headless mode the master's `test_stop` fires before the workers' last reports arrive (they
come during Locust's quit), so a run is closed at `quit`; after a test started from the web UI,
where `quit` may be hours away, it is closed a few seconds after `test_stop`.
"""

from __future__ import annotations

import logging
import math
import os
import platform
import signal
import socket
import sys
import time
from dataclasses import asdict

import gevent
import locust
from gevent.event import Event
from locust import events as locust_events
from locust import stats as locust_stats
from locust.runners import STATE_MISSING, LocalRunner, MasterRunner, WorkerRunner

from .. import __version__
from ..client.context import LoadContext, prompt_plan
from ..client.health import HealthProbe, HealthSample, HealthWriter
from ..client.prompts import CalibrationError
from ..compat.locust import rewrite_csv_files, send_worker_report, set_worker_report_interval
from ..gc_policy import quiet_collector
from ..rundir.files import CLIENT_HEALTH_CSV, SERVER_METRICS_CSV
from ..settings import Settings, SettingsError, add_arguments, parse_host
from ..target.api import max_model_len, model_ids, target_info
from ..web.auth import add_arguments as add_web_arguments
from ..web.view import install_web_ui
from .live import LiveStats
from .recorder import RunRecorder, new_run_dir, utc_iso
from .server_metrics import MetricsScraper
from .steps import LevelChange, LevelPlan, StepController

logger = logging.getLogger("vllm_load")

LOCAL_FLUSH_INTERVAL = 0.5
# In a single-process run the users share the process with the recorder: a flush of every row
# of the last interval in one go would hold the hub, and every chunk arriving meanwhile would be
# read that late. A row of a 512-token stream costs ~60-70 µs (CSV line, live histograms; it
# was ~125 µs and 32-row slices held the hub 4 ms). Slices of this many rows, with a turn of the
# event loop between them, keep each hold near half a millisecond.
LOCAL_FLUSH_SLICE = 8
# The pause between slices. It must be a timer, not sleep(0): gevent runs a greenlet that
# sleeps 0 again in the same pass of callbacks, and checks the clock only every 50 callbacks,
# so 1000 rows in slices went through without one poll for I/O: an 80 ms stall at 1000
# streams, in which first chunks were read merged with later ones and dated by the later.
LOCAL_FLUSH_PAUSE = 0.0001
HEALTH_INTERVAL = 1.0  # seconds per client health sample in local runs (workers: each report)
WORKER_CHECK_INTERVAL = 1.0
WEB_UI_CLOSE_GRACE = 5.0
# The last level's drain may last a request timeout, plus this for the last reports to arrive.
DRAIN_SLACK = 10.0
DRAIN_MESSAGE = "vllm_load_drain"  # master -> workers: the last level is over, send nothing new


class RunSession:
    """One test on the master: its settings, run directory and Locust CSV writer."""

    def __init__(self, environment) -> None:
        self.environment = environment
        options = environment.parsed_options
        self.settings = Settings.from_options(options)
        host = self.host = parse_host(environment.host or "").rstrip(
            "/"
        )  # a web UI user may type any host
        self.target = target_info(host, api_key=self.settings.api_key or None)
        self.model = self.settings.model or next(iter(model_ids(self.target.get("models"))), "")
        if not self.model:
            raise SettingsError(
                f"cannot tell which model {host} serves ({self.target.get('models_error', 'no models listed')}); pass --model"
            )
        self.settings.check_fits(max_model_len(self.target.get("models"), self.model))
        plan = prompt_plan(host, self.model, self.settings)
        run_dir = self.settings.run_dir or new_run_dir(self.settings.out, self.model)
        runner = environment.runner
        self.recorder = RunRecorder(
            run_dir,
            {
                "format": 1,
                "run_id": os.path.basename(run_dir.rstrip("/")),
                "vllm_load_version": __version__,
                "locust_version": locust.__version__,
                "target": self.target,
                "model": self.model,
                "settings": self.settings.public(),
                "meta": self.settings.meta,
                "client": {
                    "hostname": socket.gethostname(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "mode": "master" if isinstance(runner, MasterRunner) else "local",
                    "workers": runner.worker_count if isinstance(runner, MasterRunner) else 1,
                    "command": " ".join(_redacted_argv()),
                },
                "prompts": plan.to_json(),
                "started_at": utc_iso(),
                "workers_lost": [],
            },
        )
        self.csv_writer = locust_stats.StatsCSVFileWriter(
            environment,
            locust_stats.PERCENTILES_TO_REPORT,
            os.path.join(run_dir, "locust"),
            full_history=False,
        )
        self._csv_greenlet = gevent.spawn(self.csv_writer.stats_writer)
        self.scraper: MetricsScraper | None = None
        if self.settings.metrics_interval > 0:
            self.scraper = MetricsScraper(
                host,
                os.path.join(run_dir, SERVER_METRICS_CSV),
                self.settings.metrics_interval,
                self.model,
                self.settings.api_key or None,
            )
            self._scrape_greenlet = gevent.spawn(self.scraper.run, gevent.sleep)
        self.controller = StepController(
            LevelPlan(
                tuple(self.settings.levels),
                self.settings.warmup_requests,
                self.settings.requests_per_level,
                self.settings.level_time_cap,
                self.settings.level_cooldown,
                drain_timeout=self.settings.request_timeout + DRAIN_SLACK,
            )
        )
        self.worker_flights: dict[
            str, tuple[bool, int]
        ] = {}  # worker -> (draining, in flight), as reported
        self.live = LiveStats()
        self.health = HealthWriter(os.path.join(run_dir, CLIENT_HEALTH_CSV))
        environment.vllm_load_live = self.live  # the web UI keeps showing the last test
        self.completed = False
        self.closed = False
        self._closing: Event | None = None  # set once a close is done; a second close waits for it
        self.stopped_at: float | None = None
        logger.info("run directory: %s", run_dir)

    # lifecycle ---------------------------------------------------------------------------------
    @classmethod
    def current(cls, environment) -> "RunSession | None":
        session = getattr(environment, "vllm_load_session", None)
        return None if session is None or session.closed else session

    @classmethod
    def ensure(cls, environment) -> "RunSession":
        """The open session of the running test, creating it (and closing a stale one) if needed."""
        session = cls.current(environment)
        if session is not None and session.stopped_at is None:
            return session
        if session is not None:
            session.close()
        session = cls(environment)
        environment.vllm_load_session = session
        return session

    def tick(self, now: float) -> int | None:
        """Users to run now (None: the test is over), recording any level change."""
        users = self.controller.tick(now, self.finished_in_level, self.in_flight)
        for change in self.controller.take_changes():
            self.level_changed(change)
        return users

    def finished_in_level(self, level: int) -> int:
        """Finished requests that started in `level`: the recorder's, and in a single process also
        those still waiting in its buffer. At thousands of requests per second the local flush
        (in slices, so as not to hold the event loop) takes rows in later than they finish, and a
        level that ends on a request count would run past it."""
        finished = self.recorder.finished_in_level(level)
        if isinstance(self.environment.runner, LocalRunner):
            starts = self.recorder.level_starts
            lo = starts[level] if 0 < level < len(starts) else -math.inf
            hi = starts[level + 1] if level + 1 < len(starts) else math.inf
            finished += LoadContext.of(self.environment).buffer.started_between(lo, hi)
        return finished

    def in_flight(self) -> int:
        """Requests in flight in every load process; while a worker has not yet reported that it
        drains, at least one (its count may predate the drain)."""
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner):
            return LoadContext.of(self.environment).in_flight
        total = 0
        for client in runner.clients.all:
            if client.state == STATE_MISSING:
                continue
            draining, flying = self.worker_flights.get(client.id, (False, 1))
            total += flying if draining else max(flying, 1)
        return total

    def worker_flight(self, worker: str, draining: bool, in_flight: int) -> None:
        self.worker_flights[worker] = (draining, in_flight)

    def _drain(self, change: LevelChange) -> None:
        """The last level is over: tell every load process to send nothing new."""
        runner = self.environment.runner
        if isinstance(runner, MasterRunner):
            runner.send_message(DRAIN_MESSAGE)
        else:
            LoadContext.of(self.environment).start_draining()
        self.recorder.run_info["drain"] = {
            "started_at": change.at,
            "in_flight_at_start": self.in_flight(),
        }
        logger.info(
            "level %d: letting the requests in flight finish (at most %.0f s)",
            change.level,
            self.controller.plan.drain_timeout,
        )

    def level_changed(self, change: LevelChange) -> None:
        settings = self.settings
        if change.kind == "drain":
            self._drain(change)
            return
        if change.kind == "drained":
            drain = self.recorder.run_info.setdefault("drain", {})
            drain.update(
                ended_at=change.at, reason=change.reason, in_flight_at_end=self.in_flight()
            )
            self.recorder.write_run_json()
            return
        if change.kind == "start":
            self.recorder.start_level(
                change.level,
                change.users,
                change.at,
                settings.warmup_requests,
                settings.warmup_requests + settings.requests_per_level,
                settings.level_time_cap,
            )
            self.live.level_started(change.level, change.users)
            logger.info("level %d: %d users", change.level, change.users)
        else:
            self.recorder.end_level(change.level, change.at, change.reason)
            logger.info(
                "level %d ended (%s) after %d finished requests",
                change.level,
                change.reason,
                self.recorder.finished_in_level(change.level),
            )
            if change.level == len(settings.levels) - 1:
                self.completed = True

    def add_health(self, sample: dict, worker: str) -> None:
        """One load process's CPU and loop lag over its last report interval, with its level."""
        health = HealthSample(**{**sample, "worker": worker})
        if self.recorder.levels:
            health.level = self.recorder.level_of(health.ts)
        self.health.write([health])

    def add_rows(self, rows, worker: str | None = None) -> None:
        if rows:
            for row in self.recorder.add_rows(rows, worker):
                self.live.add(row)

    def check_workers(self) -> None:
        """Record workers the master lost: Locust marks a worker missing after 3 missed heartbeats.

        Its records that reached the master stay; its requests in flight are gone.
        """
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner):
            return
        lost = self.recorder.run_info["workers_lost"]
        known = {entry["worker"] for entry in lost}
        for client in list(runner.clients.all):
            if client.state == STATE_MISSING and client.id not in known:
                level = max(self.controller.level, 0)
                lost.append({"worker": client.id, "lost_at": time.time(), "level": level})
                logger.warning("worker %s lost during level %d (no heartbeat)", client.id, level)
                self.recorder.write_run_json()

    def all_workers_lost(self) -> bool:
        runner = self.environment.runner
        return (
            isinstance(runner, MasterRunner)
            and bool(self.recorder.run_info["workers_lost"])
            and all(client.state == STATE_MISSING for client in runner.clients.all)
        )

    def stopped(self) -> None:
        self.stopped_at = time.time()
        self.recorder.write_run_json()

    def close(self) -> None:
        """Close the run once, whoever asks: the web UI's delayed close, quit and a new test may all
        come while a close waits for its last scrape; a second one waits for the first to finish
        (never writes the Locust CSVs the first has closed, never lets the process exit before)."""
        if self._closing is not None:
            self._closing.wait()
            return
        self._closing = Event()
        try:
            self._close()
        finally:
            self._closing.set()

    def _close(self) -> None:
        """Take in the last local records, write the final Locust CSVs and run.json, print the table."""
        if self.closed:
            return
        context = getattr(self.environment, "vllm_load_context", None)
        if context is not None and isinstance(self.environment.runner, LocalRunner):
            self.add_rows(context.buffer.drain())
            self.recorder.add_abandoned(context.drain_abandoned())
            probe = getattr(self.environment, "vllm_load_probe", None)
            if probe is not None:  # the last interval, so even a short run has a sample
                self.add_health(asdict(probe.sample("local")), "local")
        self._csv_greenlet.kill(block=True)  # dead before its files are written and closed here
        rewrite_csv_files(self.csv_writer)  # after the final worker reports
        self.csv_writer.close_files()
        self.recorder.run_info["locust_totals"] = {
            "requests": self.environment.stats.total.num_requests,
            "failures": self.environment.stats.total.num_failures,
        }
        self.check_workers()
        self._stop_scraping()
        outcome = (
            "completed"
            if self.completed
            else "workers_lost"
            if self.all_workers_lost()
            else "interrupted"
        )
        self.recorder.close(outcome, reason=outcome)
        self.health.close()
        self.closed = True
        print_summary(self.recorder.run_dir)

    def _stop_scraping(self) -> None:
        """Take one last scrape (the counters after the last request) and record how scraping went."""
        if self.scraper is None:
            return
        self.scraper.stop()
        self._scrape_greenlet.join(timeout=self.settings.metrics_interval + 10)
        self._scrape_greenlet.kill(block=False)
        self.recorder.run_info["server_metrics"] = asdict(self.scraper.status)
        if self.scraper.status.note and not self.scraper.status.samples:
            logger.warning("%s", self.scraper.status.note)


def _redacted_argv() -> list[str]:
    """sys.argv with the value of --api-key hidden."""
    out, hide = [], False
    for arg in sys.argv:
        if hide:
            out.append("***")
            hide = False
        elif arg == "--api-key":
            out.append(arg)
            hide = True
        elif arg.startswith("--api-key="):
            out.append("--api-key=***")
        else:
            out.append(arg)
    return out


def print_summary(run_dir: str) -> None:
    """The per-level table, the requests cut off at the stop, and where the run directory is."""
    abandoned = 0
    try:
        # at call time: pandas stays out of the load processes, which import this module too
        from ..analysis.client_side import late_levels, level_client_health, read_client_health
        from ..analysis.levels import format_level_table, level_metrics
        from ..rundir.load import load_run

        run = load_run(run_dir)
        abandoned = run.run.get("requests_abandoned", {}).get("total", 0)
        metrics = level_metrics(run.requests, run.steps)
        health = read_client_health(os.path.join(run_dir, CLIENT_HEALTH_CSV))
        table = format_level_table(
            metrics, late_levels(level_client_health(health, metrics, run.requests))
        )
    except Exception as e:  # a summary must never lose the run: say why it is missing instead
        logger.warning("could not summarise the run: %s", e)
        table = ""
    if table:
        print("\n" + table, flush=True)
    if abandoned:
        print(
            f"{abandoned} request(s) in flight when the test stopped were cut off: no rows, counted in run.json",
            flush=True,
        )
    print(f"\nRun directory: {run_dir}", flush=True)


# event wiring ------------------------------------------------------------------------------------
def fail(environment, message: str) -> None:
    logger.error("%s", message)
    print(f"vllm-load: error: {message}", file=sys.stderr, flush=True)
    environment.process_exit_code = 2
    gevent.spawn_later(0.1, environment.runner.quit)


_installed = False


def install(events=locust_events) -> None:
    """Register vllm-load's listeners on Locust's events (called by the locustfiles)."""
    global _installed
    if _installed:
        return
    _installed = True
    # records ride on worker reports: report every second so levels end promptly
    set_worker_report_interval(1.0)
    # each level starts its users at once on purpose; Locust's warning about it is noise here
    logging.getLogger("locust.runners").addFilter(
        lambda record: "spawn rate is very high" not in record.getMessage()
    )

    @events.init_command_line_parser.add_listener
    def _(parser, **_kw):
        add_arguments(parser)
        add_web_arguments(parser)

    @events.init.add_listener
    def _(environment, runner, web_ui=None, **_kw):
        if web_ui is not None:
            install_web_ui(environment, web_ui)
        if isinstance(runner, WorkerRunner):
            _install_worker(environment, runner)
            return
        if isinstance(runner, MasterRunner):
            _install_master(environment)
        else:
            _install_local(environment)
        # Locust installs its SIGTERM handler only after a headless shape test has ended, so until
        # then SIGTERM would kill the process with every file unclosed; make it stop the test the
        # way Ctrl-C does (Locust's own handler takes over once installed)
        signal.signal(signal.SIGTERM, _terminate_like_ctrl_c)

    events.spawning_complete.add_listener(_quiet_collector)

    @events.test_start.add_listener
    def _(environment, **_kw):
        LoadContext.of(environment).reset()
        if isinstance(environment.runner, WorkerRunner):
            return
        try:
            RunSession.ensure(environment)
        except (SettingsError, CalibrationError) as e:
            fail(environment, str(e))

    @events.test_stop.add_listener
    def _(environment, **_kw):
        session = RunSession.current(environment)
        if session is None:
            return
        session.stopped()
        options = environment.parsed_options
        if options is not None and not getattr(options, "headless", True):
            gevent.spawn_later(WEB_UI_CLOSE_GRACE, session.close)

    @events.quit.add_listener
    def _(**_kw):
        for environment in _environments:
            session = RunSession.current(environment)
            if session is not None:
                session.close()


_environments: list = []


def _quiet_collector(**_kw) -> None:
    """Once a level's users have started, what is alive lives about as long as the test: freeze
    it, and let the cyclic collector pause the process only rarely (`collector`)."""
    quiet_collector()


def _terminate_like_ctrl_c(signum, frame) -> None:
    raise KeyboardInterrupt


def _start_probe() -> HealthProbe:
    probe = HealthProbe()
    gevent.spawn(probe.run, gevent.sleep)
    return probe


def _install_worker(environment, runner) -> None:
    context = LoadContext.of(environment)
    probe = _start_probe()

    @environment.events.report_to_master.add_listener
    def _(client_id, data, **_kw):
        rows = context.buffer.drain()
        if rows:
            data["vllm_records"] = rows
        abandoned = context.drain_abandoned()
        if abandoned:
            data["vllm_abandoned"] = abandoned
        data["vllm_health"] = asdict(probe.sample(client_id))
        data["vllm_flight"] = [context.draining, context.in_flight]

    runner.register_message(DRAIN_MESSAGE, lambda **_kw: context.start_draining())

    @environment.events.test_stop.add_listener
    def _(**_kw):
        # ship the last records (and Locust's stats with them) before the worker says it stopped
        send_worker_report(runner)


def _install_master(environment) -> None:
    _environments.append(environment)
    if environment.parsed_options is not None:
        # a level is a concurrency: when a worker is lost (or joins), its users move to the others
        environment.parsed_options.enable_rebalancing = True

    @environment.events.worker_report.add_listener
    def _(client_id, data, **_kw):
        rows = data.get("vllm_records")
        session = getattr(environment, "vllm_load_session", None)
        if session is None or session.closed:
            return
        if rows:
            session.add_rows(rows, client_id)
        if data.get("vllm_abandoned"):
            session.recorder.add_abandoned(data["vllm_abandoned"])
        if data.get("vllm_health"):
            session.add_health(data["vllm_health"], client_id)
        if data.get("vllm_flight"):  # after its records: a worker drained is one whose rows are in
            session.worker_flight(client_id, *data["vllm_flight"])

    def watch_workers():
        while True:
            gevent.sleep(WORKER_CHECK_INTERVAL)
            session = RunSession.current(environment)
            if session is not None:
                session.check_workers()

    gevent.spawn(watch_workers)


def add_in_slices(session: RunSession, buffer, worker: str = "local") -> None:
    """Hand the rows waiting in `buffer` to `session`, a slice at a time, letting the event loop
    poll for I/O between slices. Rows stay in the buffer until added, so a close of the run
    during a pause still gets them."""
    for _ in range(-(-len(buffer) // LOCAL_FLUSH_SLICE)):
        session.add_rows(buffer.take(LOCAL_FLUSH_SLICE), worker)
        gevent.sleep(LOCAL_FLUSH_PAUSE)


def _install_local(environment) -> None:
    _environments.append(environment)
    context = LoadContext.of(environment)
    probe = environment.vllm_load_probe = _start_probe()

    def flush_forever():
        last_health = time.monotonic()
        while True:
            gevent.sleep(LOCAL_FLUSH_INTERVAL)
            session = RunSession.current(environment)
            if session is not None:
                add_in_slices(session, context.buffer)
                if time.monotonic() - last_health >= HEALTH_INTERVAL:
                    session.add_health(asdict(probe.sample("local")), "local")
                    last_health = time.monotonic()

    gevent.spawn(flush_forever)
