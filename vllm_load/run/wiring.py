"""Wiring vllm-load into Locust's events, in each of the three process roles.

- A worker ships the starts of the requests it sent and its finished records inside Locust's
  own worker reports (`report_to_master`), with its count of the tokens received so far (the
  live tok/s), and pushes a last report as soon as its users stop.
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
from typing import Any

import gevent
from locust import events as locust_events
from locust.runners import STATE_INIT, MasterRunner, WorkerRunner

from .. import stop_signals
from ..client.context import LoadContext
from ..client.health import HealthProbe
from ..client.prompts import CalibrationError
from ..client.replay_share import LevelShare
from ..compat.locust import (
    master_silent_for,
    send_worker_report,
    set_master_heartbeat_timeout,
    set_worker_report_interval,
    tick_shape_every,
    wait_for_final_reports,
)
from ..gc_policy import quiet_collector
from ..parent_death import die_with_parent, forked_from, note_forks
from ..settings import add_arguments
from ..user_values import SettingsError
from .outcomes import EXIT_CODES
from .session import DRAIN_MESSAGE, LEVEL_MESSAGE, RunSession, fail
from .worker_loss import WorkerProcess

logger = logging.getLogger("vllm_load")

LOCAL_FLUSH_INTERVAL = 0.2  # (a level ends once its measured rows are in)
# In a single-process run the users share the process with the recorder: a flush of every row
# of the last interval in one go would hold the hub, and every chunk arriving meanwhile would be
# read that late. A row of a 512-token stream costs ~60-70 µs (CSV line, live histograms; it
# was ~125 µs and 32-row slices held the hub 4 ms). Slices of this many rows, with a turn of the
# event loop once the slices added since the last one took LOCAL_FLUSH_HOLD, keep each hold
# near half a millisecond. (A non-streamed row costs ~10 µs: a turn after each slice of them
# was a timer and a poll every 80 µs.)
LOCAL_FLUSH_SLICE = 8
LOCAL_FLUSH_HOLD = 0.0005
# The pause between slices. It must be a timer, not sleep(0): gevent runs a greenlet that
# sleeps 0 again in the same pass of callbacks, and checks the clock only every 50 callbacks,
# so 1000 rows in slices went through without one poll for I/O: an 80 ms stall at 1000
# streams, in which first chunks were read merged with later ones and dated by the later.
LOCAL_FLUSH_PAUSE = 0.0001
#: seconds between the load shape's ticks (Locust's is 1 s): how soon a level whose measured
#: requests have all ended gives way to the next, or the last one to the drain
SHAPE_TICK = 0.2
HEALTH_INTERVAL = 1.0  # seconds per client health sample in local runs (workers: each report)
WORKER_CHECK_INTERVAL = 1.0
WEB_UI_CLOSE_GRACE = 5.0
# A worker whose master has not answered a heartbeat for this long quits (Locust's default is
# 60 s, in which a worker whose master was killed sends load that nobody records). The master
# answers each of the worker's 1 s heartbeats and itself counts a worker missing after 3 s
# without one, so a live master is well inside this.
MASTER_GONE_AFTER = 5  # seconds (Locust keeps it an int)


_installed = False


def install(events=locust_events) -> None:
    """Register vllm-load's listeners on Locust's events (called by the locustfiles)."""
    global _installed
    if _installed:
        return
    _installed = True
    if stop_signals.imported() is not None:  # a stop while Locust imported: nothing has started
        sys.exit(EXIT_CODES["interrupted"])
    # records ride on worker reports: report every second so levels end promptly
    set_worker_report_interval(1.0)
    set_master_heartbeat_timeout(MASTER_GONE_AFTER)
    note_forks()  # a worker forked by `--processes` dies with the process it was forked from
    # each level starts its users at once on purpose; Locust's warning about it is noise here
    logging.getLogger("locust.runners").addFilter(
        lambda record: "spawn rate is very high" not in record.getMessage()
    )

    @events.init_command_line_parser.add_listener
    def _(parser, **_kw):
        add_arguments(parser)

    @events.init.add_listener
    def _(environment, runner, **_kw):
        _quiet_ctrl_c()
        if not isinstance(runner, WorkerRunner):
            _stop_signals.install(environment)
        if stop_signals.release() is not None:  # a stop while Locust started: nothing is written
            sys.exit(EXIT_CODES["interrupted"])
        if isinstance(runner, WorkerRunner):
            _install_worker(environment, runner)
            return
        if isinstance(runner, MasterRunner):
            _install_master(environment)
        else:
            _install_local(environment)

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
        else:  # a headless test that stopped is closing its run
            _stop_signals.closing()

    @events.quitting.add_listener
    def _(**_kw):
        _stop_signals.closing()

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


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP (`stop_signals.listened`) in a process that writes a run (the
    master, or a local run).

    The first stops the test as Ctrl-C does (a KeyboardInterrupt: Locust stops the users, the run
    is closed as interrupted). Once the run is being closed (`closing`: a headless test stopped,
    or Locust quitting), one more is only logged: raised inside the close, it would end the
    process with a traceback and leave run.json `running`. Locust installs its own SIGTERM
    handler only after a headless shape test has ended (until then SIGTERM would kill the process
    with every file unclosed), and that handler starts a second shutdown; `closing` takes SIGTERM
    back.

    The KeyboardInterrupt is not raised where the signal found the process: that is any
    greenlet (the master's listener of worker reports, which died of it, and the master, deaf
    to its workers, exited 2 with no run closed). It is thrown into the main greenlet from the
    event loop, where a Ctrl-C arrives when the loop waits: Locust there waits for the test and
    stops it on a KeyboardInterrupt. Before a headless test has started (a master waiting for
    its workers) Locust does not catch one there, and there is nothing to close: the process
    exits with the status of an interrupted run."""

    def __init__(self) -> None:
        self.stopping = False
        self.environment = None
        self.main: Any = None  # the main greenlet

    def install(self, environment=None) -> None:
        if environment is not None:  # (Locust's init runs in the main greenlet)
            self.environment, self.main = environment, gevent.getcurrent()
        for signum in stop_signals.listened():
            signal.signal(signum, self.on_signal)

    def closing(self) -> None:
        self.stopping = True
        self.install()

    def on_signal(self, signum, _frame) -> None:
        if self.stopping:
            logger.warning("%s: already stopping, closing the run", signal.Signals(signum).name)
            return
        self.stopping = True
        session = RunSession.current(self.environment) if self.environment is not None else None
        if session is not None:
            session.signalled = True
        gevent.get_hub().loop.run_callback(self._stop)

    def _stop(self) -> None:
        """(In the event loop.) Stop the test in the main greenlet."""
        main = self.main
        if main is None or main.dead:
            raise KeyboardInterrupt  # (the hub hands it to the main greenlet)
        main.throw(
            SystemExit(EXIT_CODES["interrupted"]) if self._not_started() else KeyboardInterrupt
        )

    def _not_started(self) -> bool:
        environment = self.environment
        options = getattr(environment, "parsed_options", None)
        runner = getattr(environment, "runner", None)
        return (
            bool(getattr(options, "headless", False))
            and runner is not None
            and runner.state == STATE_INIT
            and getattr(runner, "shape_greenlet", None) is None
        )


_stop_signals = StopSignals()


def _quiet_ctrl_c() -> None:
    """A KeyboardInterrupt that gevent's hub catches (Ctrl-C while the hub runs) is thrown into
    the main greenlet as ever, but not printed as if it were an error, with a timestamp (the
    hub's documented `NOT_ERROR`)."""
    hub = gevent.get_hub()
    if not issubclass(KeyboardInterrupt, hub.NOT_ERROR):
        hub.NOT_ERROR = (*hub.NOT_ERROR, KeyboardInterrupt)


def _start_probe() -> HealthProbe:
    probe = HealthProbe()
    gevent.spawn(probe.run, gevent.sleep)
    return probe


def _install_worker(environment, runner) -> None:
    options = environment.parsed_options
    if options is not None and options.processes and forked_from() is not None:
        # forked by `--processes`: the kernel ends it when that process dies, even by SIGKILL
        die_with_parent(forked_from())
    context = LoadContext.of(environment)
    probe = _start_probe()
    process = WorkerProcess.this_one().report()  # (a worker lost is named by it)

    @environment.events.report_to_master.add_listener
    def _(client_id, data, **_kw):
        data["vllm_process"] = process
        data["vllm_started"] = context.take_starts()  # before the rows: a row's start is in
        rows = context.buffer.drain()
        if rows:
            data["vllm_records"] = rows
        abandoned = context.drain_abandoned()
        if abandoned:
            data["vllm_abandoned"] = abandoned
        data["vllm_health"] = asdict(probe.sample(client_id))
        data["vllm_flight"] = [context.draining, context.in_flight]
        data["vllm_tokens"] = context.streamed.report()
        if context.failure:  # its users cannot start: the master stops the test, saying why
            data["vllm_failure"] = context.failure

    runner.register_message(DRAIN_MESSAGE, lambda **_kw: context.start_draining())
    runner.register_message(
        LEVEL_MESSAGE, lambda msg, **_kw: context.begin_level(LevelShare(**msg.data))
    )

    @environment.events.quitting.add_listener
    def _(**_kw):
        silent = master_silent_for(runner)
        if silent is not None and silent >= MASTER_GONE_AFTER:  # Locust quit the worker for it
            where = f"{options.master_host}:{options.master_port}" if options else "the master"
            message = (
                f"the master at {where} stopped answering ({silent:.0f} s without a heartbeat)"
            )
            print(f"vllm-load: error: {message}; this worker stopped", file=sys.stderr, flush=True)
            environment.process_exit_code = 1

    @environment.events.test_stop.add_listener
    def _(**_kw):
        context.arrivals.stop()  # a test stopped mid-level sends nothing until the next starts
        # ship the last records (and Locust's stats with them) before the worker says it stopped
        send_worker_report(runner)


def _install_master(environment) -> None:
    _environments.append(environment)
    tick_shape_every(environment.runner, SHAPE_TICK)
    wait_for_final_reports(environment.runner)
    if environment.parsed_options is not None:
        # a level is a concurrency: when a worker is lost (or joins), its users move to the others
        environment.parsed_options.enable_rebalancing = True

    @environment.events.worker_report.add_listener
    def _(client_id, data, **_kw):
        rows = data.get("vllm_records")
        session = getattr(environment, "vllm_load_session", None)
        if session is None or session.closed:
            return
        session.worker_process(client_id, data.get("vllm_process"))
        if data.get("vllm_failure"):
            session.load_failed(data["vllm_failure"], client_id)
        started = data.get("vllm_started")
        if started:  # (before the rows: a level follows its requests from their start)
            session.add_starts(started[1], client_id, started[0])
        if rows:
            session.add_rows(rows, client_id)
        if data.get("vllm_abandoned"):
            session.add_abandoned(data["vllm_abandoned"], client_id)
        if data.get("vllm_health"):
            session.add_health(data["vllm_health"], client_id)
        if data.get("vllm_tokens"):
            session.live.streamed(client_id, *data["vllm_tokens"])
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
    poll for I/O once the slices since it last did have held it LOCAL_FLUSH_HOLD. Rows stay in
    the buffer until added, so a close of the run during a pause still gets them."""
    held_since = time.perf_counter()
    for _ in range(-(-len(buffer) // LOCAL_FLUSH_SLICE)):
        session.add_rows(buffer.take(LOCAL_FLUSH_SLICE), worker)
        if time.perf_counter() - held_since >= LOCAL_FLUSH_HOLD:
            gevent.sleep(LOCAL_FLUSH_PAUSE)
            held_since = time.perf_counter()


def _install_local(environment) -> None:
    _environments.append(environment)
    tick_shape_every(environment.runner, SHAPE_TICK)
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
                    # as often as a worker's report: the walk of the requests in flight takes
                    # ~1 µs each, so ~1 ms at 1000 streams
                    session.live.streamed("local", *context.streamed.report())
                    last_health = time.monotonic()

    gevent.spawn(flush_forever)
