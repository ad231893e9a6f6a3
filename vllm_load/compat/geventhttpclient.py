"""geventhttpclient's private API: the response's body buffer and connection, the connection
pool's address lookup, and a POST whose head is built once (checked with geventhttpclient 2.5.1
and 2.6.1; `PostHead` and `post` with 2.6.1)."""

from __future__ import annotations

import errno
from typing import Callable

import gevent.socket
from geventhttpclient.response import HTTPSocketPoolResponse

from .gevent import send_all

_REQUEST_ID, _LENGTH = "{request-id}", "{content-length}"  # (valid header values: sentinels)


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
    fields given, then `Host`), with the two per-request fields, `X-Request-Id` and
    `Content-Length`, left to fill in. `post` sends a bytes body behind it."""

    __slots__ = ("_start", "_middle", "_end")

    def __init__(self, client, path: str, headers: dict[str, str]) -> None:
        fields = {**headers, "X-Request-Id": _REQUEST_ID, "Content-Length": _LENGTH}
        head = client._build_request("POST", path, body=b"", headers=fields, chunked=False)
        start, rest = head.split(_REQUEST_ID)
        middle, end = rest.split(_LENGTH)
        self._start, self._middle, self._end = (
            start.encode("latin-1"),
            middle.encode("latin-1"),
            end.encode("latin-1"),
        )

    def of(self, request_id: str, length: int) -> bytes:
        """The head of one request (`request_id`: ASCII)."""
        return b"%s%s%s%d%s" % (self._start, request_id.encode(), self._middle, length, self._end)


def post(client, head: bytes, body: bytes) -> HTTPSocketPoolResponse:
    """POST `head` + `body` on the client's connection and return the response once its headers
    are in: what `client.request("POST", ...)` does with a bytes body of known length and no
    `Expect`, without building and checking the head anew for every request. As there, a POST
    is not retried (RFC 9110, 9.2.2); a connection reset or broken while sending may still carry
    the server's early answer, which is returned if it parses (else its error is raised)."""
    pool = client._connection_pool
    sock = pool.get_socket()
    try:
        send_all(sock, head + body)
    except gevent.socket.error as e:
        if e.errno not in (errno.ECONNRESET, errno.EPIPE):
            pool.release_socket(sock)
            raise
    return HTTPSocketPoolResponse(
        sock, pool, block_size=client.block_size, method="POST", headers_type=client.headers_type
    )
