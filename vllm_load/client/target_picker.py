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

A target that stops answering is ejected: once `EJECT_AFTER` of its requests in a row found
nothing to connect to (`connect`: refused, unreachable), with no success between, the process
sends it no new request for the rest of the test; the requests it already had in flight end
and are recorded like every other (their failures are the run's). A target that answers,
however badly (HTTP errors, timeouts), is never ejected: those are figures of the server. The
last target left is never ejected either: with nothing else to send to, the run goes on failing
and ends as any run whose target was lost. Each process ejects on its own requests; the report
names a lost target and the time new requests stopped going to it
(`analysis.levels.per_target`).
"""

from __future__ import annotations

from typing import Sequence

BALANCES = ("round-robin", "least-loaded")
#: a target is ejected after this many of its requests in a row failed to connect
EJECT_AFTER = 3
#: the error category of a request that found nothing to connect to (client/request.py)
NOTHING_TO_CONNECT = "connect"


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
        self._unreached = [0] * len(hosts)  # each target's requests in a row that found nobody
        self.ejected: set[int] = set()

    @property
    def several(self) -> bool:
        return len(self.hosts) > 1

    def pick(self) -> int:
        """The target of the next request (its index in `hosts`), never an ejected one, counted
        in flight until `done(index, error)`."""
        n = len(self.hosts)
        turns = [i % n for i in range(self._turn, self._turn + n) if i % n not in self.ejected]
        index = turns[0]
        if self.balance == "least-loaded":
            flights = self.in_flight
            index = min(turns, key=lambda i: flights[i])
        self._turn = index + 1
        self.in_flight[index] += 1
        return index

    def done(self, index: int, error: str = "") -> bool:
        """The request sent to target `index` ended, with `error` (its category; "" when it
        succeeded); True when that ejects the target: its `EJECT_AFTER`-th in a row with nothing
        to connect to, unless it is the last one left."""
        self.in_flight[index] -= 1
        if error != NOTHING_TO_CONNECT:
            self._unreached[index] = 0
            return False
        self._unreached[index] += 1
        if (
            index in self.ejected
            or self._unreached[index] < EJECT_AFTER
            or len(self.ejected) >= len(self.hosts) - 1
        ):
            return False
        self.ejected.add(index)
        return True
