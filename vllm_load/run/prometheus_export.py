"""The tester's own metrics for Prometheus (--prometheus ADDR): served by the master (or the
single local process) at http://ADDR/metrics while a test runs, in Prometheus' text format.

Off unless asked. `PrometheusExport.open` binds the address before the run directory is made
(a port in use refuses the test in one line; `vllm-load run` tries it before Locust starts,
too), `serve` starts gevent's WSGI server in this process once the session exists, `add` takes
every record row (`prometheus_tallies`: counts and buckets only), and `stop` closes the server
when the run closes. A web UI that runs several tests serves each while it runs, from zero.

What is served (docs/prometheus.md lists it with the dashboard in deploy/grafana):
the requests' counts by outcome, and their latencies and tokens, from the rows
(`prometheus_tallies`); the test's state (phase, level, users, requests in flight) read from the
session at that moment; and the master process's own CPU and memory (prometheus_client's
`process_*`). The text is written here, not by prometheus_client's generic families: a scrape
runs in the master's event loop, where the users of a single-process run read their streams,
and for three user classes' histograms (1,358 lines) the library took 12 ms, this 0.7 ms.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterable, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector
from prometheus_client import generate_latest as library_text
from prometheus_client.utils import floatToGoString

from ..settings import Settings
from ..user_values import SettingsError, split_listen_address
from .live import Finished
from .live_figures import LivePlan
from .prometheus_tallies import LATENCY_BOUNDS, RequestTallies

logger = logging.getLogger("vllm_load")

PREFIX = "vllm_load_"
METRICS_PATH = "/metrics"
#: the phases a test goes through (`run.steps.StepController.phase`), then `stopped`
PHASES = ("idle", "running", "cooldown", "draining", "done", "stopped")
#: each histogram's name (after the prefix; `SeriesTally`'s attribute without `_seconds`) and help
HISTOGRAMS = {
    "ttft_seconds": "seconds from a successful streamed request's start to its first content chunk",
    "itl_seconds": "gaps between the content chunks of successful streams (every gap)",
    "e2e_seconds": "seconds from a successful request's start to its end",
}
_LE = [f'le="{floatToGoString(bound)}"' for bound in LATENCY_BOUNDS] + ['le="+Inf"']


@dataclass(frozen=True)
class RunState:
    """The test as a scrape finds it: its phase, level and load."""

    phase: str  # one of PHASES
    level: int  # the current level's index (-1 before the first)
    kind: str  # its kind of load (`load_kinds`): concurrency, rate, trace ("" before the first)
    unit: str  # the unit of its value: users, requests/s, s into the trace
    value: float  # its value in that unit
    users: int  # Locust users running
    in_flight: int  # requests in flight in every load process, as last reported


def run_state(session: Any) -> RunState:
    """What `session` (a `RunSession`, which imports this module) is doing now: read at a
    scrape, never per request."""
    controller = session.controller
    levels = controller.plan.levels
    load = levels[controller.level] if 0 <= controller.level < len(levels) else None
    return RunState(
        "stopped" if session.stopped_at is not None else controller.phase,
        controller.level,
        load.kind.name if load else "",
        load.kind.unit if load else "",
        load.value if load else float("nan"),
        session.environment.runner.user_count,
        session.in_flight(as_reported=True),
    )


def label_value(text: str) -> str:
    """A label's value as the text format quotes it."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels_text(names: Sequence[str], values: Iterable[str]) -> str:
    return ",".join(f'{n}="{label_value(v)}"' for n, v in zip(names, values))


def family(lines: list[str], name: str, kind: str, doc: str) -> str:
    """Open a family: its HELP and TYPE lines; returns its full name."""
    lines.append(f"# HELP {PREFIX}{name} {doc}")
    lines.append(f"# TYPE {PREFIX}{name} {kind}")
    return PREFIX + name


def requests_text(tallies: RequestTallies, lines: list[str]) -> None:
    """The request counters, latency histograms and token counters, from the tallies."""
    name = family(lines, "requests_total", "counter", "requests that ended, by outcome: ok, or "
                  "the error category of requests.csv's error column")  # fmt: skip
    names = ("outcome", "user_class", "task", "target")
    for key, count in sorted(tallies.requests.items()):
        lines.append(f"{name}{{{labels_text(names, key)}}} {count}")
    series = [
        (labels_text(("user_class", "target"), key), tally)
        for key, tally in sorted(tallies.series.items())
    ]
    for histogram, doc in HISTOGRAMS.items():
        name = family(lines, histogram, "histogram", doc)
        attribute = histogram.removesuffix("_seconds")
        for labels, tally in series:
            counts = getattr(tally, attribute)
            bucket = f"{name}_bucket{{{labels},"
            lines.extend(f"{bucket}{le}}} {count}" for le, count in zip(_LE, counts.cumulative()))
            lines.append(f"{name}_sum{{{labels}}} {floatToGoString(counts.total)}")
            lines.append(f"{name}_count{{{labels}}} {counts.count}")
    for kind in ("prompt", "completion"):
        name = family(lines, f"{kind}_tokens_total", "counter", f"{kind} tokens of the "
                      "successful requests (the server's usage, else the requested count)")  # fmt: skip
        for labels, tally in series:
            lines.append(f"{name}{{{labels}}} {getattr(tally, f'{kind}_tokens')}")


def state_text(state: RunState, info: dict[str, str], lines: list[str]) -> None:
    """The test's state as gauges, and the run's identity."""
    gauges = (
        ("in_flight", "requests in flight in every load process, as last reported", state.in_flight),
        ("users", "Locust users running", state.users),
        ("level_index", "the current level's index in the plan (-1 before the first)", state.level),
    )  # fmt: skip
    for name, doc, value in gauges:
        lines.append(f"{family(lines, name, 'gauge', doc)} {value}")
    name = family(lines, "level_value", "gauge", "the current level's value, in its kind of "
                  "load's unit (users, requests/s, s into the trace)")  # fmt: skip
    if state.kind:
        labels = labels_text(("kind", "unit"), (state.kind, state.unit))
        lines.append(f"{name}{{{labels}}} {floatToGoString(state.value)}")
    name = family(lines, "phase", "gauge", "1 for the test's current phase, 0 for the others")
    for phase in PHASES:
        lines.append(f'{name}{{phase="{phase}"}} {int(phase == state.phase)}')
    name = family(lines, "run_info", "gauge", "the run: its model and run directory")
    lines.append(f"{name}{{{labels_text(list(info), info.values())}}} 1")


class RunMetrics:
    """One run's /metrics text, made from its tallies and state when a scrape asks."""

    def __init__(
        self, tallies: RequestTallies, state: Callable[[], RunState], info: dict[str, str]
    ) -> None:
        self.tallies = tallies
        self.state = state
        self.info = info
        self.process = CollectorRegistry(auto_describe=False)  # this process's CPU and memory
        ProcessCollector(registry=self.process)

    def text(self) -> bytes:
        lines: list[str] = []
        requests_text(self.tallies, lines)
        state_text(self.state(), self.info, lines)
        lines.append("")
        return "\n".join(lines).encode() + library_text(self.process)

    def app(self, environ: dict, start_response: Callable) -> list[bytes]:
        """The WSGI app: GET /metrics, nothing else."""
        if environ.get("PATH_INFO") != METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [f"vllm-load serves its metrics at {METRICS_PATH}\n".encode()]
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        body = self.text()
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
        return [body]


def listen_socket(address: str) -> socket.socket:
    """A socket listening on `address` (HOST:PORT), or a `SettingsError` saying why not."""
    host, port = split_listen_address(address)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gevent's own listeners
        sock.bind((host, port))
        sock.listen(64)
    except OSError as e:
        sock.close()
        raise SettingsError(
            f"--prometheus {address}: cannot listen there ({e.strerror or e}): give a free port "
            "(or stop what listens on it)"
        ) from None
    return sock


class PrometheusExport:
    """One run's /metrics server, or nothing when --prometheus is not given."""

    def __init__(self, address: str, host: str, listener: socket.socket | None) -> None:
        self.address = address
        self.listener = listener
        self.tallies = RequestTallies(host) if listener is not None else None
        self.host = host
        self.server: Any = None  # gevent.pywsgi.WSGIServer, once serving
        self.itl_at = LivePlan().itl_at  # where a live `Finished` holds the row's ITL pairs

    @classmethod
    def open(cls, settings: Settings, host: str) -> PrometheusExport:
        """Bind --prometheus's address (a `SettingsError` when it cannot be), or an export that
        does nothing."""
        if not settings.prometheus:
            return cls("", host, None)
        return cls(settings.prometheus, host, listen_socket(settings.prometheus))

    def add(self, row, finished: Finished) -> None:
        """One record row, as the master appends it, with what the live figures read of it."""
        if self.tallies is not None:
            self.tallies.add(row, finished.hists[self.itl_at])

    def metrics(self, state: Callable[[], RunState], info: dict[str, str]) -> RunMetrics:
        """What a scrape reads, given how to read the test's state and the run's identity."""
        assert self.tallies is not None
        return RunMetrics(self.tallies, state, info)

    def serve(self, session: Any) -> None:
        """Start answering scrapes of `session` (a `RunSession`), its user classes' latencies
        and tokens from zero."""
        if self.listener is None or self.tallies is None:
            return
        from gevent.pywsgi import WSGIServer  # in the Locust process only

        self.tallies.expect([c.__name__ for c in session.user_classes], session.targets)
        info = {
            "model": session.model,
            "run_dir": os.path.basename(session.recorder.run_dir),
        }
        app = self.metrics(partial(run_state, session), info).app
        self.server = WSGIServer(self.listener, app, log=None, error_log=logger)
        self.server.start()
        logger.info("Prometheus metrics at http://%s%s", self.address, METRICS_PATH)

    def stop(self) -> None:
        """Stop serving and free the port (the run is closed)."""
        if self.server is not None:
            self.server.stop(timeout=1)
            self.server = None
        elif self.listener is not None:
            self.listener.close()
        self.listener = None
