"""geventhttpclient's private API: the response's body buffer and connection, the connection
pool's address lookup, a POST whose head is built once, and a whole response read without its
parser when its head is plain (checked with geventhttpclient 2.5.1 and 2.6.1; `PostHead`, `post`
and `post_whole` with 2.6.1)."""

from __future__ import annotations

import errno
import re
from typing import Callable

import gevent.socket
from geventhttpclient.response import HTTPConnectionClosed, HTTPSocketPoolResponse

from .gevent import send_all

# (valid header values: sentinels)
_REQUEST_ID, _TRACEPARENT, _LENGTH = "{request-id}", "{traceparent}", "{content-length}"
_HEAD_LIMIT = 65536  # a head not ended within this many bytes goes to geventhttpclient's parser
# a control byte, or a line end that is not CRLF: such a head goes to geventhttpclient's parser
_ODD_BYTE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|(?<!\r)\n")


def body_buffer(response) -> bytearray:
    """The response's body buffer (`response._body_buffer`): the bytearray the parser appends
    each decoded (de-chunked) piece of body to, in place, as `feed()` parses it; the same object
    for the response's life, so a reader takes it once and consumes from it (in place too)."""
    return response._body_buffer


def response_socket(response):
    """The gevent socket a response is read from (`response._sock`), None once the response has
    given it back (a complete message returns it to the pool from inside `feed()`)."""
    return response._sock


def discard_connection(response) -> None:
    """Close a response's connection instead of returning it to the pool mid-message.

    A `HTTPSocketPoolResponse` holds its socket and pool in `_sock` and `_pool`; its `release()`
    (and `__del__`) would return a socket that has not been closed to the pool for reuse, unread
    body and all. Unset both here, then `pool.release_socket` closes the socket and frees its
    place in the pool.
    """
    sock, pool = getattr(response, "_sock", None), getattr(response, "_pool", None)
    response._sock = response._pool = None
    if sock is not None:
        if pool is not None:
            pool.release_socket(sock)
        else:
            sock.close()


def resolve_with(client, lookup: Callable[[str, int], list]) -> None:
    """Make the client's connection pool take its addresses from `lookup(host, port)`.

    The pool (`client._connection_pool`) keeps the host and port it connects to in
    `_connection_host` and `_connection_port`, and calls `_resolve()` for every new connection,
    which returns a `getaddrinfo` list (family, type, proto, canonname, sockaddr) to try in turn.
    """
    pool = client._connection_pool
    host, port = pool._connection_host, pool._connection_port
    pool._resolve = lambda: lookup(host, port)


def pool_addresses(client) -> list:
    """The addresses the client's next new connection would try: the pool's `_resolve()`, a
    `getaddrinfo` list (as `resolve_with` describes)."""
    return client._connection_pool._resolve()


class PostHead:
    """The head of one kind of POST (its path and header fields), built once by the client as
    `client.request` builds it for every request (`_build_request`: the request line, the
    fields given, then `Host`), with the per-request fields, `X-Request-Id`, `traceparent` (only
    in a `traced` head) and `Content-Length`, left to fill in. `post` sends a bytes body behind
    it."""

    __slots__ = ("_start", "_between", "_middle", "_end")

    def __init__(self, client, path: str, headers: dict[str, str], traced: bool = False) -> None:
        fields = {**headers, "X-Request-Id": _REQUEST_ID}
        if traced:
            fields["traceparent"] = _TRACEPARENT
        fields["Content-Length"] = _LENGTH
        head = client._build_request("POST", path, body=b"", headers=fields, chunked=False)
        start, rest = head.split(_REQUEST_ID)
        between = None  # from after the request id to the traceparent's value, in a traced head
        if traced:
            between, rest = rest.split(_TRACEPARENT)
        middle, end = rest.split(_LENGTH)
        self._start, self._middle, self._end = (
            start.encode("latin-1"),
            middle.encode("latin-1"),
            end.encode("latin-1"),
        )
        self._between = between.encode("latin-1") if between is not None else None

    def of(self, request_id: str, length: int, traceparent: str = "") -> bytes:
        """The head of one request (`request_id`, `traceparent`: ASCII; a traced head's
        `traceparent` must be given)."""
        if self._between is None:
            return b"%s%s%s%d%s" % (
                self._start,
                request_id.encode(),
                self._middle,
                length,
                self._end,
            )
        return b"%s%s%s%s%s%d%s" % (
            self._start,
            request_id.encode(),
            self._between,
            traceparent.encode(),
            self._middle,
            length,
            self._end,
        )


def _send(client, payload: bytes):
    """Send `payload` on a socket of the client's pool: (the pool, the socket). A connection
    reset or broken while sending may still carry the server's early answer, so the socket is
    kept for reading it; any other error gives the socket back and is raised."""
    pool = client._connection_pool
    sock = pool.get_socket()
    try:
        send_all(sock, payload)
    except gevent.socket.error as e:
        if e.errno not in (errno.ECONNRESET, errno.EPIPE):
            pool.release_socket(sock)
            raise
    return pool, sock


def post(client, head: bytes, body: bytes) -> HTTPSocketPoolResponse:
    """POST `head` + `body` on the client's connection and return the response once its headers
    are in: what `client.request("POST", ...)` does with a bytes body of known length and no
    `Expect`, without building and checking the head anew for every request. As there, a POST
    is not retried (RFC 9110, 9.2.2); a connection reset or broken while sending may still carry
    the server's early answer, which is returned if it parses (else its error is raised)."""
    pool, sock = _send(client, head + body)
    return HTTPSocketPoolResponse(
        sock, pool, block_size=client.block_size, method="POST", headers_type=client.headers_type
    )


def post_whole(client, head: bytes, body: bytes):
    """`post` for a response read whole (not streamed): a plain head (`HTTP/1.1`, a status of 200
    or more, a Content-Length, no Transfer-Encoding, no `Connection: close`) and its body are
    read here, without geventhttpclient's parser and its Python callback per header field; any
    other response, or one that ends early, goes to geventhttpclient's own response with the
    bytes read so far (its `pre_buffered`), which reads it, or fails it, as it always did."""
    pool, sock = _send(client, head + body)
    data = b""
    try:
        while True:
            more = sock.recv(client.block_size)
            if not more:
                break
            data += more
            end = data.find(b"\r\n\r\n")
            if end < 0 and len(data) > _HEAD_LIMIT:
                break
            if end >= 0:
                plain = _plain_head(data, end)
                if plain is None or len(data) > end + 4 + plain[1]:  # (theirs fails the head)
                    break
                return WholeResponse(client, pool, sock, plain[0], plain[1], data, end + 4)
    except gevent.socket.error as e:
        pool.release_socket(sock)
        if e.errno == errno.ECONNRESET and not data:  # (as HTTPSocketResponse._read_headers)
            raise HTTPConnectionClosed("connection closed.")
        raise
    except BaseException:
        pool.release_socket(sock)
        raise
    return _their_response(client, pool, sock, data)


def _their_response(client, pool, sock, data: bytes) -> HTTPSocketPoolResponse:
    return HTTPSocketPoolResponse(
        sock,
        pool,
        block_size=client.block_size,
        method="POST",
        headers_type=client.headers_type,
        pre_buffered=data,
    )


def _plain_head(data: bytes, end: int) -> tuple[int, int] | None:
    """(status, Content-Length) of a head `post_whole` reads itself, else None."""
    head = data[:end]
    if _ODD_BYTE.search(head):
        return None
    lines = head.split(b"\r\n")
    status_line = lines[0]
    if (
        not status_line.startswith(b"HTTP/1.1 ")
        or not status_line[9:12].isdigit()
        or status_line[12:13] not in (b"", b" ")
    ):
        return None
    status = int(status_line[9:12])
    if status < 200 or status in (204, 304):  # (interim answers; answers without a body)
        return None
    length = None
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        field = name.lower()
        if not colon or not name or name != name.strip():
            return None
        if field == b"content-length":
            value = value.strip()
            if length is not None or not value.isdigit():
                return None
            length = int(value)
        elif field == b"transfer-encoding" or (
            field == b"connection" and b"close" in value.lower()
        ):
            return None
    return None if length is None else (status, length)


class WholeResponse:
    """A response `post_whole` reads itself: its status once the head is in, `read()` its body
    (the rest of it from the socket), the connection back in its pool once the body is complete.
    `_sock` and `_pool` are named as a geventhttpclient response's, for `discard_connection`."""

    __slots__ = (
        "status_code",
        "message_complete",
        "_client",
        "_pool",
        "_sock",
        "_data",
        "_at",
        "_at_end",
    )

    def __init__(self, client, pool, sock, status: int, length: int, data: bytes, at: int) -> None:
        self.status_code = status
        self.message_complete = False
        self._client, self._pool, self._sock = client, pool, sock
        self._data, self._at = data, at  # the bytes read so far, and where the body starts
        self._at_end = at + length

    def read(self) -> bytes:
        """The whole body (then b""); raises what reading it raised."""
        sock, pool, data, end = self._sock, self._pool, self._data, self._at_end
        if sock is None or pool is None:
            return b""
        if len(data) < end:  # (a body longer than the first read: one buffer, not a copy a read)
            buf = bytearray(data)
            try:
                while len(buf) < end:
                    more = sock.recv(self._client.block_size)
                    if not more:
                        break
                    buf += more
            except BaseException:
                self._sock = self._pool = None
                pool.release_socket(sock)
                raise
            data = bytes(buf)
        self._sock = self._pool = None
        if len(data) != end:  # ended early, or more than its length: theirs reads or fails it
            theirs = _their_response(self._client, pool, sock, data)
            body = theirs.read()
            self.message_complete = theirs.message_complete
            return body
        pool.return_socket(sock)
        self.message_complete = True
        return data[self._at :]
