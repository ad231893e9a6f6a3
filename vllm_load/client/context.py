"""What the Locust users of one load process share: settings, prompts, the record buffer.

`LoadContext.of(environment)` is the process's one context. Its prompts come from the process's
one calibration for the target (`prompts.prompt_plan`: the run session's in a local test, or
the one the launching command handed over), taken when the first user starts; the users append
their finished records to its `RecordBuffer`, which the session ships to the master (or the
local recorder).
"""

from __future__ import annotations

import logging
import secrets
import socket
import time
from random import getrandbits
from typing import TYPE_CHECKING

import gevent.event
import gevent.lock
import gevent.socket
from geventhttpclient import HTTPClient

from ..compat.geventhttpclient import resolve_with
from ..gc_policy import quiet_collector
from ..load_kinds import CONCURRENCY, RATE, TRACE, LoadKind, kind_named
from ..run_format.records import RequestRecord
from ..server.control import HttpError, model_ids, request_json
from ..settings import Settings
from ..user_values import SettingsError
from ..workload.cancel import CancelDraws, parse_cancel_after
from ..workload.images import parse_image_size
from ..workload.lengths import LengthDraws
from .arrival_clock import Arrivals
from .clock import WALL_CLOCK, hold_receive_timestamps
from .prompts import (
    CalibrationError,
    PromptFactory,
    PromptPlan,
    prompt_plan,
)
from .replay_share import LevelShare, TraceReplay
from .streamed import StreamedTokens
from .target_picker import TargetPicker, target_list

if TYPE_CHECKING:
    from ..workload.synthetic_images import SyntheticImages

logger = logging.getLogger(__name__)


class RecordBuffer:
    """Finished records of this process, waiting to be shipped to the master."""

    def __init__(self) -> None:
        self._rows: list[tuple] = []

    def append(self, record: RequestRecord) -> None:
        self._rows.append(record.to_row())

    def drain(self) -> list[tuple]:
        rows, self._rows = self._rows, []
        return rows

    def take(self, n: int) -> list[tuple]:
        """The oldest `n` rows (or fewer), removed."""
        rows = self._rows[:n]
        del self._rows[:n]
        return rows

    def __len__(self) -> int:
        return len(self._rows)


class AddressCache:
    """The target's addresses, looked up once per process instead of once per connection.

    geventhttpclient resolves the host for every new connection, through gevent's resolver
    (a pool of 10 threads whose answers come back one hub turn at a time). 1000 users
    starting at once made 1000 lookups, and every reconnect after a failure another; a
    target's address does not change during a benchmark, so one lookup serves them all
    (aiohttp, which other benchmark clients use, caches them too).
    """

    def __init__(self) -> None:
        self._addresses: dict[tuple[str, int], list] = {}
        self._lock = gevent.lock.Semaphore()

    def lookup(self, host: str, port: int) -> list:
        addresses = self._addresses.get((host, port))
        if addresses is None:
            with self._lock:
                addresses = self._addresses.get((host, port))
                if addresses is None:  # a failure is not kept: the next connection asks again
                    addresses = gevent.socket.getaddrinfo(
                        host, port, 0, socket.SOCK_STREAM, socket.SOL_TCP
                    )
                    self._addresses[(host, port)] = addresses
        return addresses

    def install(self, client: HTTPClient) -> None:
        """Make `client`'s connection pool take its addresses from this cache."""
        resolve_with(client, self.lookup)


class LoadContext:
    """What all users of one process share: settings, the prompt factory, the record buffer.

    Prompt calibration talks to the target, so it happens once, lazily, when the first user
    starts (before that user's first request is timed), under a lock the other users wait on.
    """

    def __init__(self, environment) -> None:
        self.environment = environment
        self.buffer = RecordBuffer()
        self.abandoned: list[float] = []  # start_ts of requests cut off by the end of the test
        self.starts: list[float] = []  # start_ts of requests sent since the session last took them
        # how early a user's next start may be dated, until it is sent, so that no report says
        # this process's starts are all in past one still to come: a user queued for the pacer, or
        # at its arrival (--rates), starts at that wall time (`pending_due`); one whose turnover
        # the pacer queued starts its next request that many seconds before sending it
        # (`pending_late`)
        self.pending_due: dict[int, float] = {}
        self.pending_late: dict[int, float] = {}
        self.addresses = AddressCache()
        self.process_tag = secrets.token_hex(4)
        self._sequence = 0
        self._lock = gevent.lock.Semaphore()
        self._settings: Settings | None = None
        self._settling = 0  # users that have not had a response yet
        self.in_flight = 0  # requests sent (or due) and not yet recorded
        self.streamed = StreamedTokens()  # tokens received so far, for the live tok/s; never reset
        self.draining = False  # the last level is over: users send nothing new
        self.failure = ""  # why this process's users cannot start (the master stops the test)
        self._drained = gevent.event.Event()  # never set: users wait on it once draining
        self.model: str | None = None
        self.targets: TargetPicker | None = None  # --hosts: made by `ensure_targets`
        self.prompts: PromptFactory | None = None
        self.plan: PromptPlan | None = None
        self._lengths: LengthDraws | None = None
        self._cancels: CancelDraws | None = None
        self.images: SyntheticImages | None = None  # --images: made by `ensure_images`
        self.extras: dict[str, object] = {}  # what one kind of user shares per process and test
        # with --rates and --trace; kept across `reset`, which a local test runs after its first
        # level starts
        self.arrivals = Arrivals()
        self.load_kind: LoadKind = CONCURRENCY  # the running level's kind (`begin_level`)
        self.replay: TraceReplay | None = None  # --trace: the segment, read at its level's start

    @classmethod
    def of(cls, environment) -> "LoadContext":
        context = getattr(environment, "vllm_load_context", None)
        if context is None:
            context = cls(environment)
            environment.vllm_load_context = context
        return context

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.from_options(self.environment.parsed_options)
        return self._settings

    @property
    def lengths(self) -> LengthDraws:
        """This process's per-request token counts (fixed, or drawn: --input/--output-lengths)."""
        if self._lengths is None:
            s = self.settings
            self._lengths = LengthDraws(
                s.input_tokens,
                s.output_tokens,
                s.input_lengths,
                s.output_lengths,
                seed=secrets.randbits(32),
            )
        return self._lengths

    @property
    def cancels(self) -> CancelDraws | None:
        """This process's choice of the requests to cancel (--cancel-share); None without."""
        s = self.settings
        if self._cancels is None and s.cancel_share > 0:
            after = parse_cancel_after(s.cancel_after)
            self._cancels = CancelDraws(s.cancel_share, after, seed=secrets.randbits(32))
        return self._cancels

    @property
    def worker_name(self) -> str:
        return str(getattr(self.environment.runner, "client_id", None) or "local")

    def next_request_id(self) -> str:
        self._sequence += 1
        return f"{self.process_tag}-{self._sequence}"

    @staticmethod
    def new_traceparent() -> str:
        """A W3C `traceparent` for a new request (--traceparent): version 00, a random 16-byte
        trace id and 8-byte span id, flags 01 (sampled). From `random`'s own generator, which
        Python reseeds in a forked child (load processes forked from one never share ids), with
        no system call per request (2.6-2.8 µs, as `os.urandom(24).hex()` took 2.4-3.8 µs on a
        loaded 2-core machine); an all-zero id, which W3C forbids, is never made."""
        return "00-%032x-%016x-01" % (getrandbits(128) or 1, getrandbits(64) or 1)

    def user_starting(self) -> None:
        self._settling += 1

    def user_settled(self) -> None:
        """A user has had its first response, or stopped before it did.

        Once every user has had one, their connections, parsers and pools exist and will live as
        long as the users: freeze them out of the cyclic collector (`collector`), as Locust's
        `spawning_complete` did for what existed then. Left in, they made the collector's next
        pass walk ~100 objects per user: 29 ms at 1000 users, in the middle of the first wave.
        """
        self._settling -= 1
        if self._settling == 0:
            quiet_collector()

    def begin_level(self, share: LevelShare) -> None:
        """A level starts (the run session's message): send as its kind of load says, this
        process's share of it."""
        self.load_kind = kind_named(share.kind)
        if self.load_kind is RATE:
            self.arrivals.start(share.rate, share.phase, share.arrivals)
        elif self.load_kind is TRACE:
            if self.replay is None or share.level == 0:  # (a new test may replay another)
                try:
                    self.replay = TraceReplay(self.settings)
                except SettingsError as e:  # (a worker without the file): the master stops
                    self.failure = self.failure or str(e)
                    return
            requests = self.replay.share(share)
            self.arrivals.start_trace(requests, WALL_CLOCK.perf(share.at))
        else:
            self.arrivals.stop()

    def start_draining(self) -> None:
        """The test is draining (`steps`): users finish the request they have and send no other."""
        self.draining = True
        self.arrivals.stop()

    def park(self) -> None:
        """Where a user waits, sending nothing, once the test drains; the end of the test stops it."""
        self._drained.wait()

    def take_starts(self) -> tuple[float, list[float]]:
        """The starts of the requests sent since the last call, and the wall time up to which
        they are all there (a level's measured requests are chosen by when they started): now,
        or the earliest start a request that is due but not yet sent may carry, whichever is
        earlier (`pending_due`, `pending_late`)."""
        starts, self.starts = self.starts, []
        now = WALL_CLOCK.wall(time.perf_counter())
        late = max(self.pending_late.values(), default=0.0)
        return min(now - late, min(self.pending_due.values(), default=now)), starts

    def sent(self, user: int) -> None:
        """`user`'s next request has started (or the user stopped): nothing of it is pending."""
        self.pending_due.pop(user, None)
        self.pending_late.pop(user, None)

    def drain_abandoned(self) -> list[float]:
        starts, self.abandoned = self.abandoned, []
        return starts

    def reset(self) -> None:
        """Forget settings and prompts so a new test (web UI) picks up new options."""
        self._settings = None
        self.failure = ""
        self.draining = False
        self.pending_due.clear()
        self.pending_late.clear()
        self.prompts = None
        self.plan = None
        self.model = None
        self.targets = None
        self._lengths = None
        self._cancels = None
        self.images = None
        self.extras = {}

    def _setting_up(self, step, *args):
        """`step(*args)`; if it cannot be done, the process's users cannot start: say so in
        `failure` (a worker's next report takes it to the master) before raising."""
        try:
            return step(*args)
        except (CalibrationError, HttpError) as e:
            self.failure = self.failure or str(e)
            raise

    def ensure_model(self, host: str) -> str:
        """The model every request names (--model, or the first the target serves), asked once."""
        if self.model is None:
            hold_receive_timestamps()
            with self._lock:
                if self.model is None:
                    self.model = self._setting_up(resolve_model, host, self.settings)
        return self.model

    def ensure_targets(self, host: str) -> TargetPicker:
        """Where this process's requests go: `host` (Locust's), or --hosts (`client/target_picker.py`)."""
        if self.targets is None:
            settings = self.settings
            self.targets = TargetPicker(target_list(host, settings.hosts), settings.balance)
        return self.targets

    def ensure_prompts(self, host: str) -> PromptFactory:
        """The exact-length prompt factory, from this process's plan for the target (`prompt_plan`:
        in a local test, the one its run session made)."""
        model = self.ensure_model(host)
        if self.prompts is None:
            with self._lock:
                if self.prompts is None:
                    self.plan = self._setting_up(prompt_plan, host, model, self.settings)
                    self.prompts = PromptFactory(self.plan, seed=secrets.randbits(32))
                    logger.info("prompts ready: %s", self.plan.to_json())
        return self.prompts

    def ensure_images(self) -> SyntheticImages | None:
        """The process's generated images (--images; None without), their pool made once."""
        settings = self.settings
        if settings.images and self.images is None:
            with self._lock:
                if self.images is None:
                    # (imported here: Pillow loads only into a process that sends images)
                    from ..workload.synthetic_images import SyntheticImages

                    self.images = SyntheticImages(
                        parse_image_size(settings.image_size),
                        settings.image_format,
                        seed=secrets.randbits(64),
                    )
        return self.images


def resolve_model(host: str, settings: Settings) -> str:
    """The --model, or the first model the target serves."""
    if settings.model:
        return settings.model
    try:
        ids = model_ids(
            request_json(host.rstrip("/") + "/v1/models", api_key=settings.api_key or None)
        )
    except HttpError as e:
        hint = (
            "give this process the server's key (--api-key or $OPENAI_API_KEY)"
            if e.status in (401, 403)
            else "pass --model"
        )
        raise CalibrationError(f"cannot list models at {host} ({e}); {hint}") from None
    if not ids:
        raise CalibrationError(f"{host}/v1/models lists no model; pass --model")
    return ids[0]
