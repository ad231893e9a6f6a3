"""Reading a streamed response inside the hub, one watcher callback per readable socket.

A gevent socket read parks its greenlet: the hub polls, switches to the greenlet, which reads
and switches back (two greenlet switches, a `Waiter` and a watcher start and stop per read).
At 1000 streams x 20 ms ITL that is 50k reads a second and most of a core. A `StreamReader`
instead keeps the socket's read watcher started for the whole body, and reads, parses and
timestamps each arrival in the watcher's callback, in the hub itself; the owner greenlet sleeps
until the message is complete (or the read fails) and is then switched to at once, from that
callback, as a `hub.wait()` would have been.

Every read is dated by the kernel's receive timestamp (`clock`): when its bytes reached the
machine, not when the hub got round to the socket. Bytes that came with the response headers
(read by geventhttpclient) are dated when the reader starts; no read is dated earlier than one
before it. A TLS socket is read by `read_unstamped`, a plain loop in the owner greenlet; both
readers hand each read to `take_read`.

Both read for a `request.MeasuredRequest` (the `request` argument): they feed its `meter`, set its
`stall_mark[0]` to the time of every read, and call its `end_first_token_wait()` once, when the
first content chunk is in. A read that brings the stream to the request's `cancel_at_chunk`
content chunks (--cancel-after N tok) fails the read with `ClientCancelled`: the request closes
its connection, as a user who stops reading.
"""

from __future__ import annotations

import time

from gevent import get_hub
from gevent.hub import Waiter

from ..compat.gevent import raw_socket, read_watcher
from ..compat.geventhttpclient import body_buffer
from .clock import ANCILLARY_SIZE, WALL_CLOCK, received_at
from .sse import SseMeter, StreamError


class ClientCancelled(Exception):
    """The client closes the request on purpose (--cancel-share): its time or tokens are up."""


RECV_SIZE = 65536
# libev runs the ready watchers of one loop iteration highest priority first (-2..2, default 0).
FIRST_CHUNK_PRIORITY = 2


def set_read_priority(watcher, priority: int) -> bool:
    """Set the priority of a (stopped) socket read watcher (`compat.gevent.read_watcher`); False
    where it cannot be set.

    A stream's first chunk is the one a late read cannot date: read after the next token has
    arrived, it is merged with it in the kernel's receive queue and takes its later receive
    timestamp, one ITL late. In a busy hub turn (1000 streams at 20 ms ITL: ~1000 ready sockets,
    ~20 ms) a ready socket waits for the turn in which it became ready to end, then for its place
    in the next; at the top priority only the first wait is left. A flowing stream read late
    shifts two of its ~500 gaps; a first chunk read late is its TTFT.
    """
    if watcher.active:
        return False
    try:
        watcher.priority = priority
    except (AttributeError, ValueError):  # libuv loops have no priorities
        return False
    return True


def take_read(response, buf: bytearray, meter: SseMeter, data: bytes, now: float) -> None:
    """Feed one read of a streamed body, dated `now`, to the HTTP parser and the meter; an empty
    read (the server closed the connection) before the message ended is a disconnect. `buf` is
    the response's body buffer (`compat.geventhttpclient.body_buffer`), where the parser puts
    the body."""
    if not data:
        raise StreamError("disconnect", "server closed the connection mid-stream")
    response.feed(data)  # (a completed message gives its socket back to the pool here)
    meter.consume(buf, now)


def read_unstamped(request, sock, response, floor: float) -> None:
    """Read the rest of a body in the calling greenlet, each read dated when it returns (no
    earlier than `floor`): for a TLS socket, whose bytes on the wire are not the chunks (and
    wherever the kernel gives no receive timestamps)."""
    buf = body_buffer(response)
    meter, mark, cancel_at = request.meter, request.stall_mark, request.cancel_at_chunk
    awaiting = True  # the first content chunk
    while not response.message_complete:
        if len(meter.chunk_times) >= cancel_at:
            raise ClientCancelled()
        if awaiting and meter.chunk_times:
            awaiting = False
            request.end_first_token_wait()
        data = sock.recv(RECV_SIZE)
        now = mark[0] = max(time.perf_counter(), floor)
        take_read(response, buf, meter, data, now)


class StreamReader:
    """Reads the rest of one HTTP response's SSE body from a plain (non-TLS) gevent socket with
    kernel receive timestamps on, for `request` (a `request.MeasuredRequest`), no read dated
    earlier than `floor`. What it needs of the request on every read is taken once, here."""

    __slots__ = (
        "_raw",
        "_watcher",
        "_response",
        "_buf",
        "_request",
        "_meter",
        "_clock",
        "_mark",
        "_waiter",
        "_floor",
        "_awaiting",
        "_urgent",
        "_cancel_at",
    )

    def __init__(self, request, sock, response, floor: float, clock=WALL_CLOCK) -> None:
        self._raw = raw_socket(sock)
        self._watcher = read_watcher(sock)
        self._response = response
        self._buf = body_buffer(response)
        self._request = request
        self._meter: SseMeter = request.meter
        self._clock = clock
        self._mark = request.stall_mark
        self._waiter: Waiter | None = None
        self._floor = floor
        self._awaiting = False  # the first content chunk (set by `read`)
        self._urgent = False  # read at FIRST_CHUNK_PRIORITY meanwhile
        self._cancel_at: int = request.cancel_at_chunk

    def read(self) -> None:
        """Park the calling greenlet until the message is complete. Raises what a read raised (OSError,
        StreamError, the parser's errors) and whatever is thrown into the greenlet meanwhile
        (timeouts, a stall, the user being stopped)."""
        watcher = self._watcher
        self._waiter = Waiter(get_hub())
        if len(self._meter.chunk_times) >= self._cancel_at:  # (the headers' bytes held them)
            raise ClientCancelled()
        if self._meter.chunk_times:  # the bytes that came with the headers held one
            self._request.end_first_token_wait()
        else:
            self._awaiting = True
            self._urgent = set_read_priority(watcher, FIRST_CHUNK_PRIORITY)
        watcher.start(self._readable)
        try:
            self._waiter.get()
        finally:
            watcher.stop()
            if self._urgent:
                set_read_priority(watcher, 0)

    def throw(self, *exc_info) -> None:
        """Fail the read (gevent calls this when another greenlet closes the socket under it)."""
        self._watcher.stop()
        assert self._waiter is not None  # read() set it before starting the watcher
        self._waiter.throw(*exc_info)

    def _readable(self) -> None:
        """The watcher's callback, in the hub: read what the kernel holds (until a read comes
        back short: a full one may have left more, which would otherwise wait for the next
        turn of the hub)."""
        while self._read_once():
            pass

    def _read_once(self) -> bool:
        """One read; True if it filled the buffer and the stream goes on."""
        try:
            data, ancillary, _flags, _addr = self._raw.recvmsg(RECV_SIZE, ANCILLARY_SIZE)
        except BlockingIOError:
            return False
        except OSError as e:
            self.throw(e)
            return False
        now = time.perf_counter()
        if ancillary:
            arrived = received_at(ancillary, self._clock)
            if arrived is not None and arrived <= now:
                now = arrived
        if now < self._floor:
            now = self._floor
        self._floor = self._mark[0] = now
        meter = self._meter
        try:
            take_read(self._response, self._buf, meter, data, now)
        except Exception as e:  # noqa: BLE001 - a closed or garbled stream fails its request, not the hub
            self.throw(e)
            return False
        if self._response.message_complete:
            self._watcher.stop()
            assert self._waiter is not None  # read() set it before starting the watcher
            self._waiter.switch(None)
            return False
        if len(meter.chunk_times) >= self._cancel_at:
            self.throw(ClientCancelled())
            return False
        if self._awaiting and meter.chunk_times:
            self._first_chunk_arrived()
        return len(data) == RECV_SIZE

    def _first_chunk_arrived(self) -> None:
        self._awaiting = False
        self._request.end_first_token_wait()
        if self._urgent:  # back among the flowing streams (a started watcher's priority is fixed)
            self._watcher.stop()
            self._urgent = not set_read_priority(self._watcher, 0)
            self._watcher.start(self._readable)
