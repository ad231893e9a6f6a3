"""Several targets in one test (--hosts, or a repeated --host): which replica each request goes to.

Each load process spreads its own requests; the processes do not coordinate, so with P
processes each target gets about 1/T of every process's requests (round-robin) or of its
in-flight requests (least-loaded), and the whole test the same. A user keeps one connection
per target (`LLMUser`), so a target's requests never wait for another target's connection.

- `round-robin`: the targets in turn, request by request: each gets the same number of requests,
  so a slow replica shows as its own latency and in-flight count, not as fewer requests.
- `least-loaded`: the target with the fewest of this process's requests in flight (ties: the
  next in turn), as a least-outstanding-requests balancer would: a slow replica gets fewer.

A record names its target by base URL in requests.csv's `target` column (empty when the test
had one target: the run's host).
"""

from __future__ import annotations

from typing import Sequence

BALANCES = ("round-robin", "least-loaded")


def target_list(host: str, hosts: Sequence[str]) -> list[str]:
    """The test's targets: --hosts (or the repeated --host) in order, --host first if it is not
    among them; --host alone when there are none."""
    host = host.rstrip("/")
    return [host, *(h for h in hosts if h != host)] if host not in hosts else list(hosts)


class TargetPicker:
    """One load process's choice of target per request (see the module docstring)."""

    def __init__(self, hosts: Sequence[str], balance: str = "round-robin") -> None:
        if not hosts:
            raise ValueError("no targets")
        if balance not in BALANCES:
            raise ValueError(f"balance must be one of {', '.join(BALANCES)}, got {balance!r}")
        self.hosts = tuple(hosts)
        self.balance = balance
        self.in_flight = [0] * len(hosts)
        self._turn = 0

    @property
    def several(self) -> bool:
        return len(self.hosts) > 1

    def pick(self) -> int:
        """The target of the next request (its index in `hosts`), counted in flight until
        `done(index)`."""
        n = len(self.hosts)
        index = self._turn % n
        if self.balance == "least-loaded":
            flights = self.in_flight
            index = min(range(index, index + n), key=lambda i: flights[i % n]) % n
        self._turn = index + 1
        self.in_flight[index] += 1
        return index

    def done(self, index: int) -> None:
        self.in_flight[index] -= 1
