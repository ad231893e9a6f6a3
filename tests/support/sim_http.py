"""Small blocking HTTP helpers shared by the simulator tests (loopback only; no tests here)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request


def call(
    url: str, body=None, headers: dict | None = None, raw: bytes | None = None, timeout: float = 30
):
    """(status, decoded JSON or text) of a GET, or of a POST when `body`/`raw` is given."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(
        url,
        data=data,
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST" if data is not None else "GET",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, payload, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, payload, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
    if "json" in ctype:
        return status, json.loads(payload)
    return status, payload.decode()


def sse_events(text: str) -> list:
    """The `data:` payloads of an SSE body, JSON-decoded except the final [DONE]."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def metric_value(metrics_text: str, name: str) -> float:
    """The value of a label-less-by-choice sample line `name{...} value` (first match)."""
    for line in metrics_text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def listening_pid(port: int) -> int | None:
    """The process listening on 127.0.0.1:`port` (from /proc/net/tcp's inode and /proc/*/fd)."""
    inodes = set()
    with open("/proc/net/tcp") as fh:
        for line in fh.readlines()[1:]:
            fields = line.split()
            if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(
                os.readlink(f"/proc/{pid}/fd/{fd}") in inodes
                for fd in os.listdir(f"/proc/{pid}/fd")
            ):
                return int(pid)
        except OSError:
            continue
    return None
