"""geventhttpclient's private API: the response's body buffer and connection, and the connection
pool's address lookup (checked with geventhttpclient 2.5.1 and 2.6.1)."""

from __future__ import annotations

from typing import Callable


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
