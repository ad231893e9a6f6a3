"""How fast the web UI's login may be guessed: a backoff per client address, and a bound on
wrong passwords across all addresses.

Without it, 100 wrong passwords took 0.86 s. Here an address gets FREE_FAILURES wrong
passwords; after that each further try must wait a delay that doubles with every failure
(1 s, 2 s, 4 s ... up to 5 minutes), and across every address at most GLOBAL_BURST wrong
passwords pass at once, then one per 1/GLOBAL_RATE seconds. A try that comes too early is
turned away without its password being looked at (and does not count). A right password
clears its address's record. 100 wrong passwords from one address now take more than seven
hours.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

FREE_FAILURES = 5
FIRST_DELAY = 1.0
MAX_DELAY = 300.0
GLOBAL_BURST = 30
GLOBAL_RATE = 0.5  # wrong passwords per second, across all addresses, once the burst is spent
MAX_TRACKED = 10_000  # addresses remembered; the oldest are forgotten first


@dataclass
class _Record:
    failures: int = 0
    not_before: float = 0.0


@dataclass
class LoginThrottle:
    """Failed logins per client address, and the wait each must keep; `clock` is monotonic."""

    clock: Callable[[], float] = time.monotonic
    _clients: dict[str, _Record] = field(default_factory=dict)
    _tokens: float = float(GLOBAL_BURST)
    _filled_at: float | None = None

    def wait_for(self, client: str) -> float:
        """Seconds `client` must wait before its next try may be checked (0: now)."""
        now = self.clock()
        record = self._clients.get(client)
        own = max(0.0, record.not_before - now) if record else 0.0
        tokens = self._refill(now)
        shared = 0.0 if tokens >= 1.0 else (1.0 - tokens) / GLOBAL_RATE
        return max(own, shared)

    def failed(self, client: str) -> float:
        """Count a wrong password from `client`; returns the wait it now has."""
        now = self.clock()
        self._tokens = max(0.0, self._refill(now) - 1.0)
        record = self._clients.pop(client, None) or _Record()
        record.failures += 1
        if record.failures >= FREE_FAILURES:
            delay = FIRST_DELAY * 2.0 ** (record.failures - FREE_FAILURES)
            record.not_before = now + min(delay, MAX_DELAY)
        self._clients[client] = record  # (re)inserted last: the dict keeps the recent ones last
        while len(self._clients) > MAX_TRACKED:
            del self._clients[next(iter(self._clients))]
        return self.wait_for(client)

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)

    def __contains__(self, client: str) -> bool:
        """Whether `client`'s failures are remembered."""
        return client in self._clients

    def __len__(self) -> int:
        """How many addresses' failures are remembered."""
        return len(self._clients)

    def _refill(self, now: float) -> float:
        if self._filled_at is not None:
            self._tokens = min(
                float(GLOBAL_BURST), self._tokens + (now - self._filled_at) * GLOBAL_RATE
            )
        self._filled_at = now
        return self._tokens
