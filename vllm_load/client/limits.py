"""Failures that are the load process's own limits, never the server's.

A socket the client cannot open (no file descriptor left, no free local port, no kernel buffer)
fails before anything reaches the server; recorded as a `disconnect` or `connect` it would blame
the server for the client's machine. Such a failure is `client_limit`, and its message names the
limit and how to raise it; the run session stops the test on the first one (`run.session`).
"""

from __future__ import annotations

import errno
import resource

CATEGORY = "client_limit"


def _open_files() -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    shown = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    return (
        f"this load process ran out of file descriptors (EMFILE: ulimit -n is {soft}, hard "
        f"limit {shown}); run vllm-load from a shell with a higher limit (ulimit -n 65536, or "
        "LimitNOFILE= for a service) or spread the users over more processes (--workers N)"
    )


def _ports() -> str:
    return (
        "no free local port to connect from (EADDRNOTAVAIL): the machine's ephemeral ports "
        "(sysctl net.ipv4.ip_local_port_range) are in use; widen that range, or send from more "
        "load machines (vllm-load worker)"
    )


_MESSAGES = {
    errno.EMFILE: _open_files,
    errno.ENFILE: lambda: (
        "the machine ran out of file descriptors (ENFILE: sysctl fs.file-max); raise it, or "
        "send from more load machines (vllm-load worker)"
    ),
    errno.EADDRNOTAVAIL: _ports,
    errno.ENOBUFS: lambda: (
        "the kernel had no buffer space for another socket (ENOBUFS); raise net.core.rmem_max/"
        "wmem_max and the socket memory limits (net.ipv4.tcp_mem), or spread the users over "
        "more load machines"
    ),
}


def client_limit(e: BaseException) -> str | None:
    """The message for a failure that is a client-side resource limit; None for any other."""
    if not isinstance(e, OSError):
        return None
    message = _MESSAGES.get(e.errno or 0)
    return message() if message else None
