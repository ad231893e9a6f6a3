"""Wiring vllm-load into Locust's events, in each of the three process roles.

- A worker ships its finished records inside Locust's own worker reports
  (`report_to_master`), and pushes a last report as soon as its users stop.
- The master (or a single local process) keeps one `RunSession` per test (`session`): it
  creates the run directory, follows the shape's level changes, appends arriving records,
  keeps Locust's CSVs beside them, and closes the run when the test is over.

In headless mode the master's `test_stop` fires before the workers' last reports arrive (they
come during Locust's quit), so a run is closed at `quit`; after a test started from the web UI,
where `quit` may be hours away, it is closed a few seconds after `test_stop`.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from dataclasses import asdict

import gevent
from locust import events as locust_events
from locust.runners import MasterRunner, WorkerRunner

from ..client.context import LoadContext
from ..client.health import HealthProbe
from ..client.prompts import CalibrationError
from ..compat.locust import send_worker_report, set_worker_report_interval
from ..gc_policy import quiet_collector
from ..settings import add_arguments
from ..values import SettingsError
from ..web import bind
from ..web.auth import add_arguments as add_web_arguments
from ..web.view import install_web_ui
from .session import DRAIN_MESSAGE, RATE_MESSAGE, RunSession

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
        bind.add_arguments(parser)
        bind.loopback_defaults(parser)

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
    runner.register_message(RATE_MESSAGE, lambda msg, **_kw: context.arrivals.start(**msg.data))

    @environment.events.test_stop.add_listener
    def _(**_kw):
        context.arrivals.stop()  # a test stopped mid-level sends nothing until the next starts
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
