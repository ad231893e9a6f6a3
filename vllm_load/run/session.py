"""One test on the master (or the single local process): the `RunSession`.

It creates the run directory, follows the shape's level changes (and drains the last level),
appends the records that arrive (`add_rows`), keeps Locust's CSVs and the client-health and
/metrics files beside them, watches the workers, and closes the run when the test is over.
How it is wired into Locust's events, in each process role, is `wiring`. The module is long
because every event of one test meets here; what stands alone already lives beside it (the
plan in `steps`, the measured set in `measured_set`, the files in `recorder`, the live figures
in `live`).
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import time
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

import gevent
from gevent.event import Event
from locust import stats as locust_stats
from locust.runners import STATE_MISSING, LocalRunner, MasterRunner

from ..client.context import LoadContext
from ..client.health import CLIENT_LIMIT, HealthSample, HealthWriter
from ..client.replay_share import LevelShare, check_trace_fits, replay_header, trace_segment
from ..client.target_picker import target_list
from ..compat.locust import declare_missing, rewrite_csv_files
from ..load_kinds import RATE, TRACE, Level
from ..run_format.files import (
    CLIENT_HEALTH_CSV,
    SERVER_METRICS_CSV,
    role_metrics_csv,
    target_metrics_csv,
)
from ..run_format.records import (
    ERROR_INDEX,
    ERROR_MESSAGE_INDEX,
    LEVEL_INDEX,
    START_INDEX,
    WORKER_INDEX,
)
from ..server.control import max_model_len, model_ids, target_info
from ..settings import Settings
from ..stop_when import parse_stop_when
from ..user_values import SettingsError, parse_host
from ..workload.arrivals import process_share
from .capacity_note import cache_config, capacity_note
from .end_summary import print_summary
from .gpu_scraper import GpuTelemetry
from .live import LiveStats
from .live_verdict import LiveVerdicts
from .measured_set import LevelFollower
from .outcomes import EXIT_CODES
from .prometheus_export import PrometheusExport
from .recorder import RunRecorder, new_run_dir
from .server_metrics import MetricsScraper
from .start import exact_prompts_plan, run_header, wanted_classes
from .steps import LevelChange, LevelPlan, LevelProgress, StepController
from .stop_rules import StopRules
from .worker_loss import (
    MISSING_HEARTBEATS,
    PROCESS_EXITED,
    AbandonedAtLoss,
    WorkerProcess,
    child_exited,
)

if TYPE_CHECKING:
    from ..workload.traces import Trace

logger = logging.getLogger("vllm_load")

# The last level's drain may last a request timeout, plus this for the last reports to arrive.
DRAIN_SLACK = 10.0
DRAIN_MESSAGE = "vllm_load_drain"  # master -> workers: the last level is over, send nothing new
LEVEL_MESSAGE = "vllm_load_level"  # master -> a worker: a level's kind and its share (`LevelShare`)
# seconds from a trace level's start to its segment's: the level's users are all running by then
TRACE_LEAD = 0.5
# seconds from finding a worker's process exited to counting it lost (`_exit_confirmed`)
EXIT_GRACE = 0.5


def level_plan(settings: Settings, segment: "Trace | None" = None) -> LevelPlan:
    """The stepped plan of these settings: the trace `segment` (--trace) as one level, --rates'
    open-loop levels, or --levels' users."""
    counts: dict[str, Any] = {
        "warmup_requests": settings.warmup_requests,
        "requests_per_level": settings.requests_per_level,
        "level_time_cap": settings.level_time_cap,
        "cooldown": settings.level_cooldown,
        "drain_timeout": settings.request_timeout + DRAIN_SLACK,
        "measured_timeout": settings.request_timeout + DRAIN_SLACK,
    }
    if segment is not None:
        load = Level(
            TRACE,
            settings.trace_start,
            settings.max_in_flight,
            requests=segment.sent_requests,
            duration=segment.duration,
        )
        return LevelPlan((load,), **counts)
    if settings.rates:
        return LevelPlan.open_loop(settings.rates, settings.max_in_flight, **counts)
    return LevelPlan.concurrency(settings.levels, **counts)


def fail(environment, message: str, code: int = 2) -> None:
    """Stop the test on an error its load cannot go on with: one line, exit status `code`."""
    environment.process_exit_code = code
    gevent.spawn_later(0.1, environment.runner.quit)
    logger.error("%s", message)
    print(f"vllm-load: error: {message}", file=sys.stderr, flush=True)


class RunSession:
    """One test on the master: its settings, run directory and Locust CSV writer."""

    def __init__(self, environment) -> None:
        self.environment = environment
        options = environment.parsed_options
        self.settings = Settings.from_options(options)
        # a --trace's segment, read before anything starts (a bad file: one line, no run dir)
        self.segment = trace_segment(self.settings) if self.settings.trace else None
        host = self.host = parse_host(environment.host or "").rstrip(
            "/"
        )  # a web UI user may type any host
        self.target = target_info(host, api_key=self.settings.api_key or None)
        self.model = self.settings.model or next(iter(model_ids(self.target.get("models"))), "")
        if not self.model:
            raise SettingsError(
                f"cannot tell which model {host} serves ({self.target.get('models_error', 'no models listed')}); pass --model"
            )
        if self.segment is not None:
            check_trace_fits(self.segment, max_model_len(self.target.get("models"), self.model))
            for note in self.segment.notes:
                logger.warning("%s", note)
        self.user_classes = wanted_classes(environment.user_classes or [], self.settings)
        self.all_classes_wanted = len(self.user_classes) == len(environment.user_classes or [])
        run_dir = self.settings.run_dir or new_run_dir(self.settings.out, self.model)
        self.gpu = GpuTelemetry.open(self.settings)  # GPU telemetry: refused here, before any file
        plan = exact_prompts_plan(self.settings, host, self.target, self.model, self.user_classes)
        self.prometheus = PrometheusExport.open(self.settings, host)  # its port: before any file
        self.recorder = RunRecorder(
            run_dir,
            run_header(
                environment.runner,
                self.settings,
                host,
                self.target,
                self.model,
                self.user_classes,
                run_dir,
                plan,
            ),
        )
        self.csv_writer = locust_stats.StatsCSVFileWriter(
            environment,
            locust_stats.PERCENTILES_TO_REPORT,
            os.path.join(run_dir, "locust"),
            full_history=False,
        )
        self._csv_greenlet = gevent.spawn(self.csv_writer.stats_writer)
        self.targets = target_list(host, self.settings.hosts)
        self._scrape_greenlets: list[gevent.Greenlet] = []
        self.scraper: MetricsScraper | None = None  # the one target's (the live verdict reads it)
        self.target_scrapers: list[MetricsScraper] = []  # each of several targets' own
        if len(self.targets) > 1:
            self.recorder.run_info["targets"] = [
                {"url": url, "server_metrics": target_metrics_csv(i)}
                for i, url in enumerate(self.targets)
            ]
        if self.settings.metrics_interval > 0:
            files = [SERVER_METRICS_CSV] if len(self.targets) == 1 else None
            for i, url in enumerate(self.targets):
                scraper = MetricsScraper(
                    url,
                    os.path.join(run_dir, files[i] if files else target_metrics_csv(i)),
                    self.settings.metrics_interval,
                    self.model,
                    self.settings.api_key or None,
                )
                self.target_scrapers.append(scraper)
                self._scrape_greenlets.append(gevent.spawn(scraper.run, gevent.sleep))
            if files:
                self.scraper = self.target_scrapers[0]
        self.role_scrapers = self._role_scrapers(run_dir)
        self.gpu.start(run_dir)  # GPU telemetry: gpu_metrics.csv
        self.salt = secrets.randbits(48)  # names this run's trace prompt blocks
        self.controller = StepController(level_plan(self.settings, self.segment))
        rules = parse_stop_when(self.settings.stop_when)
        self.stop_rules = StopRules(rules) if rules else None
        if rules:
            self.controller.stop_check = self.stop_check
        scraping = self.settings.metrics_interval > 0
        labels = cache_config(host, self.model, self.settings.api_key or None) if scraping else {}
        if self.segment is not None:
            self.recorder.run_info["trace"] = replay_header(
                self.settings, self.segment, plan, labels
            )
            self.recorder.write_run_json()
        if note := capacity_note(
            self.settings, self.recorder.run_info, self.controller.plan.levels, labels
        ):
            logger.info(note)
        self.follower = LevelFollower()  # every level's requests, from their start to their end
        for level in self.controller.plan.thin_levels():
            logger.warning(
                "level %d: %d measured requests for %d users measure a slice of one wave (the "
                "first to start after the warm-up); leave --requests-per-level unset for 2 per user",
                level,
                self.controller.plan.counts(level).measured,
                self.controller.plan.users(level),
            )
        self.worker_flights: dict[
            str, tuple[bool, int]
        ] = {}  # worker -> (draining, in flight), as reported
        self.worker_processes: dict[str, WorkerProcess] = {}  # where each worker runs
        self.trace_shares: dict[int, dict[str, int]] = {}  # trace level -> {worker: its share}
        self.lost_levels: set[int] = set()  # levels a worker was lost during, while they ran
        self._exits_seen: set[str] = set()  # workers whose process was found exited
        self.abandoned_at_loss = AbandonedAtLoss()
        self.live = LiveStats()
        self.live.verdicts = LiveVerdicts(self.scraper, self.recorder.run_info, self.gpu)
        self.health = HealthWriter(os.path.join(run_dir, CLIENT_HEALTH_CSV))
        environment.vllm_load_live = self.live  # the web UI keeps showing the last test
        self.prometheus.serve(self)  # --prometheus: this run's own metrics
        self.completed = False
        self.failure = ""  # why a load process could not start its users, if one could not
        self.closed = False
        self._closing: Event | None = None  # set once a close is done; a second close waits for it
        self.stopped_at: float | None = None
        # a stop signal (Ctrl-C, SIGTERM) came: the run was interrupted, whatever its workers
        # did as it stopped (starved of a CPU, they miss heartbeats while they quit)
        self.signalled = False
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
        self._take_local_starts()
        users = self.controller.tick(now, self.progress, self.in_flight)
        for change in self.controller.take_changes():
            self.level_changed(change)
        self.live.sample(now, self.environment.runner.user_count, self.in_flight(as_reported=True))
        return users

    def progress(self, level: int) -> LevelProgress:
        """What `level`'s requests have done, as far as every load process has reported."""
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner):  # as far as this process's starts are all in
            return self.follower.progress(level, ["local"])
        return self.follower.progress(level, self.live_workers())

    def live_workers(self) -> list[str]:
        """The workers neither Locust counts missing nor this session has found lost."""
        lost = self.lost_workers()
        clients = self.environment.runner.clients.all
        return sorted(c.id for c in clients if c.state != STATE_MISSING and c.id not in lost)

    def lost_workers(self) -> set[str]:
        return {entry["worker"] for entry in self.recorder.run_info["workers_lost"]}

    def add_starts(self, starts: list[float], worker: str, until: float) -> None:
        """Requests a load process has sent (their start times), all of them up to `until`."""
        first = self.recorder.level_starts[:1]
        for ts in starts:
            if first and ts >= first[0]:  # (a web UI's earlier test may still report a few)
                self.follower.started(self.recorder.level_of(ts), ts, worker)
        self.follower.reported(worker, until)

    def _take_local_starts(self) -> None:
        if not isinstance(self.environment.runner, MasterRunner):
            context = LoadContext.of(self.environment)
            until, starts = context.take_starts()
            self.add_starts(starts, "local", until)
            if context.failure:
                self.load_failed(context.failure, "local")

    def load_failed(self, message: str, worker: str) -> None:
        """A load process's users cannot start (`LoadContext.failure`): stop the test, once."""
        if not self.failure:
            self.failure = f"load process {worker}: {message}"
            fail(self.environment, self.failure)

    def in_flight(self, as_reported: bool = False) -> int:
        """Requests in flight in every load process; while a worker has not yet reported that it
        drains, at least one (its count may predate the drain), unless `as_reported` (the charts)."""
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner):
            return LoadContext.of(self.environment).in_flight
        total = 0
        for worker in self.live_workers():
            draining, flying = self.worker_flights.get(worker, (False, 1))
            total += flying if draining or as_reported else max(flying, 1)
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
        if change.kind == "drain":
            self._drain(change)
            self.live.drain_started(change.level, change.users, change.at)
            return
        if change.kind == "drained":
            drain = self.recorder.run_info.setdefault("drain", {})
            drain.update(
                ended_at=change.at, reason=change.reason, in_flight_at_end=self.in_flight()
            )
            self.recorder.write_run_json()
            return
        if change.kind == "start":
            assert change.load is not None  # (a start says what the level is)
            counts = self.controller.plan.counts(change.level)
            self.follower.level_started(counts.selected)
            self.recorder.start_level(
                change.level,
                change.load,
                change.at,
                counts.warmup,
                counts.selected,
                self.controller.plan.time_cap(change.level),
            )
            rate = change.load.value if change.load.kind is RATE else None
            self.live.level_started(change.level, change.users, change.at, rate, change.load.text())
            if self.stop_rules is not None:
                self.stop_rules.level_started(
                    change.level, change.load, counts.warmup, counts.measured, change.at
                )
            self._send_level(change.level, change.load, change.at)
        else:
            reason = "workers_lost" if change.level in self.lost_levels else change.reason
            self.recorder.end_level(change.level, change.at, reason)
            progress = self.progress(change.level)
            logger.info(
                "level %d ended (%s): %d requests started, %d of the first %d to start still open",
                change.level,
                change.reason,
                progress.started,
                progress.open,
                self.controller.plan.counts(change.level).selected,
            )
            if change.level == len(self.controller.plan.levels) - 1:
                self.completed = True

    def _send_level(self, level: int, load: Level, at: float) -> None:
        """Tell every load process what the level is and its share of it (`LevelShare`): its
        share of a rate (`workload.arrivals`), or of a trace segment's requests and when the
        segment starts."""
        runner, settings = self.environment.runner, self.settings
        master = isinstance(runner, MasterRunner)
        processes = self.live_workers() if master else ["local"]
        start = at + TRACE_LEAD + load.users / settings.spawn_rate_per_level
        if load.kind is TRACE and load.requests is not None:  # a lost worker's share is unsent
            shares = {
                p: len(range(i, load.requests, len(processes))) for i, p in enumerate(processes)
            }
            self.trace_shares[level] = shares
        for index, process in enumerate(processes):
            share = LevelShare(level, load.kind.name, load.value)
            if load.kind is RATE:
                rate, phase = process_share(load.value, len(processes), index)
                share = replace(share, rate=rate, phase=phase, arrivals=settings.arrivals)
            elif load.kind is TRACE:
                share = replace(
                    share, processes=len(processes), index=index, at=start, salt=self.salt
                )
            if master:
                runner.send_message(LEVEL_MESSAGE, asdict(share), client_id=process)
            else:
                LoadContext.of(self.environment).begin_level(share)
        logger.info("level %d: %s", level, self._level_text(load, start - at))

    def _level_text(self, load: Level, lead: float) -> str:
        """The log line of a level's start."""
        if load.kind is RATE:
            return f"{load.value:g} requests/s, at most {load.users} in flight"
        if load.kind is TRACE and self.segment is not None:
            s = self.settings
            return (
                f"replaying {s.trace} from {s.trace_start:g} s: {self.segment.sent_requests} "
                f"requests over {self.segment.duration:,.1f} s (x{s.trace_speed:g}), at most "
                f"{load.users} in flight, starting in {lead:.1f} s"
            )
        return f"{load.users} users"

    def add_health(self, sample: dict, worker: str) -> None:
        """One load process's CPU and loop lag over its last report interval, with its level."""
        health = HealthSample(**{**sample, "worker": worker})
        if self.recorder.levels:
            health.level = self.recorder.level_of(health.ts)
        self.health.write([health])

    def add_rows(self, rows, worker: str | None = None) -> None:
        if rows:
            has_levels = bool(self.follower.tallies)
            for row in self.recorder.add_rows(rows, worker):
                if self.abandoned_at_loss.ended(str(row[WORKER_INDEX]), row[START_INDEX]):
                    self.recorder.add_abandoned([row[START_INDEX]], -1)  # a lost worker's, ended
                if has_levels and row[START_INDEX] >= self.recorder.level_starts[0]:
                    self.follower.ended(row[LEVEL_INDEX], row[START_INDEX], str(row[WORKER_INDEX]))
                    if self.stop_rules is not None:
                        self.stop_rules.add(row, row[LEVEL_INDEX])
                if row[ERROR_INDEX] == CLIENT_LIMIT:
                    self.client_limit(row[ERROR_MESSAGE_INDEX], str(row[WORKER_INDEX]))
                self.prometheus.add(row, self.live.add(row))

    def stop_check(self, level: int, over: str) -> bool:
        """Whether a --stop-when rule trips on the running `level` (`over`: why it ended, ""
        while it runs); a trip is logged and recorded in run.json (`stopped_by`)."""
        assert self.stop_rules is not None  # (the controller asks only when there are rules)
        runner = self.environment.runner
        workers = self.live_workers() if isinstance(runner, MasterRunner) else None
        trip = self.stop_rules.check(
            bool(over),
            lambda ts, worker: self.follower.rank(level, ts, worker, workers),
            self.follower.open_starts,
            time.time(),
        )
        if trip is None:
            return False
        self.recorder.run_info["stopped_by"] = trip.as_json()
        self.recorder.write_run_json()
        logger.warning("%s; the test drains and stops", trip.line())
        return True

    def add_abandoned(self, starts: list[float], worker: str) -> None:
        """Requests a load process stopped before they ended (no row will come)."""
        starts = self.abandoned_at_loss.not_counted(worker, starts)
        self.recorder.add_abandoned(starts)
        self.follower.abandoned(worker, starts)

    def client_limit(self, message: str, worker: str) -> None:
        """A load process hit a client-side limit (`client.health.client_limit`): what it measures from now on
        is its own machine, so the test stops, saying which limit to raise."""
        info = self.recorder.run_info  # (in run.json at the close: out of files, not now)
        if "client_limit" not in info:
            info["client_limit"] = {"message": message, "worker": worker, "at": time.time()}
            fail(self.environment, f"{message} (load process {worker})", EXIT_CODES[CLIENT_LIMIT])

    def worker_process(self, worker: str, reported: object) -> None:
        """Where `worker` runs, from its report (`worker_loss.WorkerProcess`)."""
        if worker not in self.worker_processes:
            found = WorkerProcess.reported(reported)
            if found is not None:
                self.worker_processes[worker] = found

    def check_workers(self) -> None:
        """Record workers the master lost (`worker_loss`): Locust counts a worker missing after 3
        missed heartbeats (unless a stop signal came: a worker quitting on a busy machine misses
        them too); one the master forked is lost once its process has exited."""
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner):
            return
        lost = self.lost_workers()
        for client in list(runner.clients.all):
            if client.id in lost:
                continue
            if client.state == STATE_MISSING and not self.signalled:  # (not one quitting)
                self._lose(client.id, MISSING_HEARTBEATS)
            elif self._exited(client.id) and client.id not in self._exits_seen:
                self._exits_seen.add(client.id)
                gevent.spawn_later(EXIT_GRACE, self._exit_confirmed, client.id)

    def _exited(self, worker: str) -> bool:
        """Whether `worker` is a process this master forked that has exited, while the test runs
        (at its end the workers quit)."""
        process = self.worker_processes.get(worker)
        return (
            self.stopped_at is None
            and process is not None
            and process.is_my_child()
            and child_exited(process.pid)
        )

    def _exit_confirmed(self, worker: str) -> None:
        """A worker whose process exited is lost if Locust still counts it a worker, and the test
        still runs, `EXIT_GRACE` later: a worker that quits (Ctrl-C reaches the workers with the
        master) has said so by then, and Locust has let it go."""
        runner = self.environment.runner
        if worker in runner.clients and worker not in self.lost_workers() and self._exited(worker):
            self._lose(worker, PROCESS_EXITED)
            declare_missing(runner, worker)  # Locust moves its users now, not in ~4 s

    def _lose(self, worker: str, found: str) -> None:
        """A worker is gone. Its records that reached the master stay; its requests in flight
        (reported started, with no row) never end: abandoned; a trace level's share it had not
        sent is never sent; the level running ends as `workers_lost`."""
        level = max(self.controller.level, 0)
        in_flight = self.follower.lost(worker)
        self.recorder.add_abandoned(in_flight)
        self.abandoned_at_loss.add(worker, in_flight)
        entry: dict[str, Any] = {"worker": worker, "lost_at": time.time(), "level": level}
        if process := self.worker_processes.get(worker):
            entry.update(host=process.host, pid=process.pid)
        levels = self.recorder.levels
        running = (
            self.controller.phase == "running" and bool(levels[level:]) and not levels[level].end_ts
        )
        entry.update(found=found, in_flight=len(in_flight), during_level=running)
        if worker in self.worker_flights:  # what it counted itself, at its last report
            entry["in_flight_reported"] = self.worker_flights[worker][1]
        share = self.trace_shares.get(level, {}).get(worker)
        if running and share is not None:
            entry["unsent"] = self.follower.forgo(level, worker, share)
        if running:
            self.lost_levels.add(level)
        self.recorder.run_info["workers_lost"].append(entry)
        logger.warning(
            "worker %s lost %s level %d (%s): %d request(s) in flight abandoned",
            worker,
            "during" if running else "after",
            level,
            found.replace("_", " "),
            len(in_flight),
        )
        self.recorder.write_run_json()

    def all_workers_lost(self) -> bool:
        runner = self.environment.runner
        return (
            isinstance(runner, MasterRunner)
            and bool(self.recorder.run_info["workers_lost"])
            and not self.live_workers()
        )

    def stopped(self) -> None:
        self.stopped_at = time.time()
        self.live.stopped(self.stopped_at)
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
            "client_limit"
            if "client_limit" in self.recorder.run_info
            else "stopped"  # (a rule that tripped at the last level's end too)
            if "stopped_by" in self.recorder.run_info and self.controller.phase == "done"
            else "completed"
            if self.completed
            else "workers_lost"
            if self.all_workers_lost() and not self.signalled
            else "interrupted"
        )
        self.recorder.close(outcome, reason=outcome)
        self.prometheus.stop()
        self.health.close()
        self.closed = True
        checks = print_summary(self.recorder.run_dir)
        if checks is not None:
            self.recorder.run_info["end_checks"] = checks.as_json()
            self.recorder.write_run_json()

    def _role_scrapers(self, run_dir: str) -> dict[str, MetricsScraper]:
        """--role-metrics: a scraper of each role's server (a disaggregated deployment's prefill
        and decode instances behind the tested proxy), each to its own CSV."""
        roles = self.settings.role_metrics
        if not roles or self.settings.metrics_interval <= 0:
            return {}
        scrapers = {}
        self.recorder.run_info["roles"] = {}
        for role, url in roles.items():
            scraper = MetricsScraper(
                url,
                os.path.join(run_dir, role_metrics_csv(role)),
                self.settings.metrics_interval,
                self.model,
                self.settings.api_key or None,
            )
            scrapers[role] = scraper
            self.recorder.run_info["roles"][role] = {
                "url": url,
                "server_metrics": role_metrics_csv(role),
            }
            self._scrape_greenlets.append(gevent.spawn(scraper.run, gevent.sleep))
        return scrapers

    def _stop_scraping(self) -> None:
        """Take one last scrape (the counters after the last request) and record how scraping went."""
        self.gpu.stop(self.recorder.run_info)  # GPU telemetry: its last readings, run.json
        for scraper in (*self.target_scrapers, *self.role_scrapers.values()):
            scraper.stop()
        gevent.joinall(self._scrape_greenlets, timeout=self.settings.metrics_interval + 10)
        gevent.killall(self._scrape_greenlets, block=False)
        for i, scraper in enumerate(self.target_scrapers):
            if self.scraper is not None:
                self.recorder.run_info["server_metrics"] = asdict(scraper.status)
            else:
                self.recorder.run_info["targets"][i]["scrape"] = asdict(scraper.status)
            if scraper.status.note and not scraper.status.samples:
                logger.warning("%s", scraper.status.note)
        for role, scraper in self.role_scrapers.items():
            self.recorder.run_info["roles"][role]["scrape"] = asdict(scraper.status)
            if scraper.status.note and not scraper.status.samples:
                logger.warning("%s server: %s", role, scraper.status.note)
