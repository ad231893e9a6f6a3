"""Reading every open response stream of a process from one greenlet.

A greenlet per stream that parks on its own socket costs, for every chunk, a watcher started
and stopped, a timeout armed and cancelled, two greenlet switches and a hub loop iteration; at
1000 streams those costs are most of the client's CPU, and while the client catches up with a
burst the next token of a stream can land before the last one was read (the kernel then merges
the two and dates both by the later one). The pump instead registers every stream's socket in
one epoll set: each wake-up reads all streams that have bytes, in one pass, with no switch per
chunk. A stream's owner parks once until its body is complete (or fails) and gets back the
time of its `[DONE]` or the exception that ended it.

Linux only (epoll); elsewhere `available()` is False and streams are read in place.
"""

from __future__ import annotations

import socket
import time

from gevent import spawn
from gevent.monkey import get_original
from gevent.hub import Waiter, get_hub

from .clock import ANCILLARY_SIZE, WallClock, received_at
from .stream import SseMeter, StreamError

try:  # Locust's monkey-patching takes epoll out of `select` (it would block the hub); the pump only polls
    _epoll, _EPOLLIN = get_original("select", ["epoll", "EPOLLIN"])
except AttributeError:
    _epoll = _EPOLLIN = None

RECV_SIZE = 65536
STALL_CHECK_SECONDS = 0.1


class StreamBody:
    """The body of one streamed HTTP response as it is read: the HTTP parser, the SSE meter,
    the time of `[DONE]`.

    Every read goes through `take(data, arrived)`; reads are never dated earlier than the one
    before (bytes that came with the headers are dated when the body reading started).
    """

    __slots__ = ("response", "meter", "first_token", "floor", "t_done", "_buf")

    def __init__(self, response, meter: SseMeter, first_token) -> None:
        self.response = response
        self.meter = meter
        self.first_token = first_token
        self.floor = time.perf_counter()
        self.t_done: float | None = None
        self._buf = response._body_buffer  # the parser appends decoded body bytes here, in place
        if self._buf:
            self._consume(self.floor)

    @property
    def complete(self) -> bool:
        return bool(self.response.message_complete)

    def take(self, data: bytes, arrived: float) -> bool:
        """Feed one read that arrived at perf_counter time `arrived`; True once the body is complete."""
        if not data:
            raise StreamError("disconnect", "server closed the connection mid-stream")
        if arrived < self.floor:
            arrived = self.floor
        self.floor = arrived
        self.response.feed(data)
        self._consume(arrived)
        return self.response.message_complete

    def _consume(self, now: float) -> None:
        meter = self.meter
        meter.consume(self._buf, now)
        if self.first_token is not None and meter.chunk_times:
            self.first_token.cancel()  # the --ttft-timeout is met
            self.first_token = None
        if meter.done and self.t_done is None:
            self.t_done = now

    def finish(self) -> float:
        """Close the body (an event without a final blank line counts) and return the end time."""
        if self._buf:
            self.meter.consume(self._buf + b"\n\n", time.perf_counter())
        if not self.meter.done:
            raise StreamError("disconnect", "stream ended without data: [DONE]")
        return self.t_done if self.t_done is not None else time.perf_counter()


class _Pumped:
    """A stream registered with the pump, and the greenlet waiting for it."""

    __slots__ = ("raw", "body", "waiter", "stall", "last_read")

    def __init__(self, raw: socket.socket, body: StreamBody, stall: float) -> None:
        self.raw = raw
        self.body = body
        self.waiter = Waiter()
        self.stall = stall
        self.last_read = time.perf_counter()


class StreamPump:
    """One greenlet that reads the bodies of all registered streams as their bytes arrive."""

    def __init__(self, clock: WallClock) -> None:
        self._clock = clock
        self._epoll = _epoll()
        self._streams: dict[int, _Pumped] = {}
        self._greenlet = None
        self._stall_timer = None

    def read(self, raw: socket.socket, body: StreamBody, stall_timeout: float) -> None:
        """Park the calling greenlet until `body` is complete; raise what ended it otherwise.

        `raw` is the OS socket under the response's gevent socket (non-blocking, receive
        timestamps on). A stream with no byte for `stall_timeout` seconds fails with
        `socket.timeout`, as a blocking read with that timeout would have.
        """
        fd = raw.fileno()
        pumped = _Pumped(raw, body, stall_timeout)
        self._streams[fd] = pumped
        self._epoll.register(fd, _EPOLLIN)
        if self._greenlet is None:
            self._greenlet = spawn(self._run)
        self.read_ready()
        try:
            pumped.waiter.get()
        finally:
            self._forget(fd, pumped)

    def _forget(self, fd: int, pumped: _Pumped) -> None:
        if self._streams.get(fd) is pumped:
            del self._streams[fd]
            try:
                self._epoll.unregister(fd)
            except OSError:  # already closed
                pass

    def _run(self) -> None:
        hub = get_hub()
        watcher = hub.loop.io(self._epoll.fileno(), 1)
        self._stall_timer = hub.loop.timer(STALL_CHECK_SECONDS, STALL_CHECK_SECONDS, ref=False)
        self._stall_timer.start(self._check_stalls)
        try:
            while self._streams:
                hub.wait(watcher)
                self.read_ready()
        finally:
            self._stall_timer.stop()
            self._stall_timer = None
            self._greenlet = None

    def read_ready(self) -> None:
        """Read every registered stream that has bytes waiting, once; never blocks.

        The pump's greenlet calls this when epoll says bytes are waiting; a user greenlet calls it
        too before it parks, so that a crowd of greenlets with other work (a wave of requests
        starting) cannot keep arrived chunks unread for longer than one greenlet's turn.
        """
        streams, clock = self._streams, self._clock
        if not streams:
            return
        perf_counter = time.perf_counter
        for fd, _event in self._epoll.poll(0):
            pumped = streams.get(fd)
            if pumped is None:
                continue
            try:
                data, ancillary, _flags, _addr = pumped.raw.recvmsg(RECV_SIZE, ANCILLARY_SIZE)
            except BlockingIOError:
                continue
            except Exception as e:  # resets and the like end this stream, never the pump
                self._end(fd, pumped, e)
                continue
            now = perf_counter()
            pumped.last_read = now
            arrived = received_at(ancillary, clock) if ancillary else None
            try:
                if pumped.body.take(data, arrived if arrived is not None and arrived <= now else now):
                    self._end(fd, pumped, None)
            except Exception as e:
                self._end(fd, pumped, e)

    def _end(self, fd: int, pumped: _Pumped, error: BaseException | None) -> None:
        """Unregister a finished stream and wake its owner (from the hub, as a Waiter wants)."""
        self._forget(fd, pumped)
        loop = get_hub().loop
        if error is None:
            loop.run_callback(pumped.waiter.switch, None)
        else:
            loop.run_callback(pumped.waiter.throw, error)

    def _check_stalls(self) -> None:
        now = time.perf_counter()
        for fd, pumped in list(self._streams.items()):
            if now - pumped.last_read > pumped.stall:
                self._forget(fd, pumped)
                pumped.waiter.throw(socket.timeout(f"no bytes for {pumped.stall:g} s"))


_PUMP: StreamPump | None = None


def available() -> bool:
    return _epoll is not None and bool(ANCILLARY_SIZE)


def pump(clock: WallClock) -> StreamPump:
    """This process's pump (made on first use)."""
    global _PUMP
    if _PUMP is None:
        _PUMP = StreamPump(clock)
    return _PUMP
