"""gevent's private API: the parts of a gevent socket the stream reader works on directly
(checked with gevent 25.5.1 and 26.9.0, libev loop; `send_all` with 26.9.0). Take each once per
connection or request: the reader uses them on every read.

The reader also relies on a protocol no name here stands for: when a socket is closed while its
read watcher is started, the hub calls `throw(error)` on the object the watcher's callback is
bound to (`Hub._cancel_wait`), which is how `reader.StreamReader.throw` learns of it.
"""

from __future__ import annotations

import gevent.socket


def raw_socket(sock):
    """The stdlib socket under a gevent socket (`sock._sock`): non-blocking, so its `recvmsg`
    returns what the kernel holds now (with ancillary data: the receive timestamps) or raises
    BlockingIOError, and socket options set on it apply to the gevent socket."""
    return sock._sock


def read_watcher(sock):
    """The gevent socket's read watcher (`sock._read_event`): the one io watcher the hub polls
    for this socket's readability, which `start(callback)`/`stop()` drive and whose `priority`
    (libev: -2..2, settable only while stopped) orders it among the ready watchers of a turn."""
    return sock._read_event


def send_all(sock, data: bytes) -> None:
    """`sock.sendall(data)`; on a plain (not TLS) gevent socket, first one `send` on the stdlib
    socket under it (`raw_socket`), which takes a request of a few hundred bytes whole on a
    connection with room in its buffer. gevent's own sendall reads `SO_SNDBUF` (a system call)
    and the clock and cuts memoryview chunks on every call: 5.4 µs against 2.0 µs for 700 bytes.
    What the kernel did not take, or all of it when there was no room, goes by gevent's
    sendall, which waits for room within the socket's timeout; errors are the send's own."""
    if type(sock) is gevent.socket.socket:  # (a TLS socket subclasses it: its bytes are encrypted)
        try:
            sent = raw_socket(sock).send(data)
        except BlockingIOError:
            sent = 0
        if sent == len(data):
            return
        data = data[sent:]
    sock.sendall(data)
