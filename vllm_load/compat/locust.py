"""Locust's private API: a user's stopping state, a worker's report on demand, the CSV writer's
row writers, the worker report interval (checked with locust 2.40.0 and 2.47.0), the endpoint
names of two web UI views, how long a worker waits for its master's heartbeat (checked
with 2.47.0), the shape worker's loop (2.40.0 and 2.47.0) and a worker's heartbeats left on the
master (2.47.0)."""

from __future__ import annotations

import logging
import time

import gevent
from locust import runners
from locust.user.task import LOCUST_STATE_STOPPING


def user_stopping(user) -> bool:
    """Whether the runner has asked this user to stop gracefully (`user._state` is
    LOCUST_STATE_STOPPING): `User.stop(force=False)` sets it on a running user instead of
    killing it, and expects the user to return from its task."""
    return user._state == LOCUST_STATE_STOPPING


def send_worker_report(runner) -> None:
    """Send the master a worker report now (`WorkerRunner._send_stats()`, what the worker's
    report loop does every WORKER_REPORT_INTERVAL): fires `report_to_master` to fill the report,
    then sends it, with Locust's stats, as a "stats" message."""
    runner._send_stats()


def set_worker_report_interval(seconds: float) -> None:
    """How often a worker reports to the master: `locust.runners.WORKER_REPORT_INTERVAL`, a
    module global the worker's report loop reads on every pass (so setting it before the loop
    starts, or while it sleeps, takes effect)."""
    runners.WORKER_REPORT_INTERVAL = seconds


def set_master_heartbeat_timeout(seconds: int) -> None:
    """How long a worker goes without a heartbeat from its master before it quits:
    `locust.runners.MASTER_HEARTBEAT_TIMEOUT` (60 s by default), a module global the worker's
    `heartbeat_timeout_checker` reads every second, measured from the last heartbeat the master
    answered (none before the first: a worker still waiting to connect is not timed out)."""
    runners.MASTER_HEARTBEAT_TIMEOUT = seconds


def master_silent_for(runner) -> float | None:
    """Seconds since a worker last heard its master's heartbeat
    (`WorkerRunner.last_heartbeat_timestamp`, a time.time() set on every heartbeat the master
    answers); None before the first."""
    last = runner.last_heartbeat_timestamp
    return None if last is None else time.time() - last


def rewrite_csv_files(writer) -> None:
    """Write a `StatsCSVFileWriter`'s stats, failures and exceptions CSVs afresh from the current
    stats, and append a row to its stats history, as its write loop does every interval.

    Relies on the writer's open file handles and csv writers (`*_csv_filehandle`,
    `*_csv_writer`), its header rows (`requests_csv_columns`, `failures_columns`,
    `exceptions_columns`), and its row writers `_requests_data_rows(csv_writer)`,
    `_failures_data_rows(csv_writer)`, `_exceptions_data_rows(csv_writer)` and
    `_stats_history_data_rows(csv_writer, now)`.
    """
    writer.requests_csv_filehandle.seek(0)
    writer.requests_csv_filehandle.truncate()
    writer.requests_csv_writer.writerow(writer.requests_csv_columns)
    writer._requests_data_rows(writer.requests_csv_writer)
    writer.failures_csv_filehandle.seek(0)
    writer.failures_csv_filehandle.truncate()
    writer.failures_csv_writer.writerow(writer.failures_columns)
    writer._failures_data_rows(writer.failures_csv_writer)
    writer.exceptions_csv_filehandle.seek(0)
    writer.exceptions_csv_filehandle.truncate()
    writer.exceptions_csv_writer.writerow(writer.exceptions_columns)
    writer._exceptions_data_rows(writer.exceptions_csv_writer)
    writer._stats_history_data_rows(writer.stats_history_csv_writer, time.time())


# Locust's web UI, as vllm-load's web view extends it (`web/view.py`): the Flask endpoint names
# of two of its views (blueprint "locust", view functions `index` and `request_stats`). The
# index renders webui/dist/index.html, an HTML page that ends with </body>; request_stats answers
# /stats/requests with JSON that carries "user_count" (the header's users) and "extended_stats"
# (the rows of template_args' extended tables), from a response memoized for 2 s.
WEB_INDEX_ENDPOINT = "locust.index"
WEB_STATS_ENDPOINT = "locust.request_stats"


def tick_shape_every(runner, seconds: float) -> None:
    """Tick the runner's load shape every `seconds` instead of Locust's second.

    Locust's `Runner.shape_worker` asks the shape for its next (users, spawn rate[, classes])
    once a second: a level whose requests have all ended waits up to a second for the next one
    to start, while its users go on sending requests nobody measures. This sets, on this runner
    only, a `shape_worker` with Locust's loop and a shorter sleep; `start_shape` spawns
    `self.shape_worker`, so the instance attribute is the one it runs. What the loop does on a
    tick is Locust's: start the new user count when the tick changed, and quit a headless test
    (stop one run from the web UI) when the shape returns None.
    """

    def shape_worker() -> None:
        environment = runner.environment
        while runner.state in (runners.STATE_INIT, runners.STATE_SPAWNING, runners.STATE_RUNNING):
            started = time.time()
            shape = environment.shape_class
            current = shape.tick() if shape is not None else None
            if current is None:
                _shape_logger.info("Shape test stopping")
                options = environment.parsed_options
                if options is not None and options.headless:
                    runner.quit()
                else:
                    runner.stop()
                runner.shape_greenlet = None
                runner.shape_last_tick = None
                return
            if runner.shape_last_tick != current:
                user_count, spawn_rate, *classes = current
                runner.start(
                    user_count=user_count,
                    spawn_rate=spawn_rate,
                    user_classes=classes[0] if classes else None,
                )
                runner.shape_last_tick = current
            gevent.sleep(max(seconds - (time.time() - started), 0))

    runner.shape_worker = shape_worker


_shape_logger = logging.getLogger("locust.runners")


def declare_missing(runner, client_id: str) -> None:
    """Have a `MasterRunner` count a worker missing at its next heartbeat check (within
    `locust.runners.HEARTBEAT_INTERVAL`, 1 s) instead of after 3 more missed heartbeats: its
    `WorkerNode.heartbeat`, the heartbeats left before `heartbeat_worker` marks it STATE_MISSING
    (and moves its users to the others when rebalancing is on), set below 0 (checked with
    2.47.0)."""
    node = runner.clients.get(client_id)
    if node is not None:
        node.heartbeat = -1


#: how long a quitting master waits for its workers' last reports (Locust's own quit waits 0.5 s)
FINAL_REPORTS_WAIT = 5.0


def wait_for_final_reports(runner, timeout: float = FINAL_REPORTS_WAIT) -> None:
    """Have a `MasterRunner` quit as Locust's `MasterRunner.quit` does (stop, send each worker
    `quit`, kill its greenlets, which receive the workers' messages), but kill them only once
    every worker has quit or `timeout` has passed, not after a fixed 0.5 s.

    A worker sent `quit` stops its users and sends its last report (its last rows, and the
    requests its stopped users had in flight), then `quit`, which removes it from `clients`
    (checked with 2.47.0). On a busy machine that took longer than 0.5 s: the reports came after
    the master had stopped listening, and the run counted 0 or 2 of the 4 requests cut off."""
    quitting = False

    def quit() -> None:
        nonlocal quitting
        if quitting:  # the last worker's `quit` arrived: its handler calls quit() again
            return
        quitting = True
        runner.stop(send_stop_to_client=False)
        for client in runner.clients.all:
            runner.server.send_to_client(runners.Message("quit", None, client.id))
        waited = time.monotonic()
        while time.monotonic() - waited < timeout and any(
            c.state != runners.STATE_MISSING for c in runner.clients.all
        ):
            gevent.sleep(0.05)
        runner.greenlet.kill(block=True)

    runner.quit = quit
