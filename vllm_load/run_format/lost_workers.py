"""A load worker the master lost during a run, as run.json's `workers_lost` lists it
(docs/run-format.md): read once here for the printed table, the report's findings and its test
environment."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LostWorker:
    worker: str  # Locust's id of the worker
    level: int | None  # the level running when it was found lost (None: not recorded)
    host: str = ""  # the machine it ran on and its process id (older runs record neither)
    pid: int | None = None
    found: str = ""  # how: `process_exited` (a local worker) or `missing_heartbeats`
    in_flight: int | None = None  # its requests in flight then, abandoned (None: not recorded)
    unsent: int = 0  # a trace level's requests of its share it had not sent yet, never sent
    # whether a level was running then (False: found lost while none ran, between levels or as
    # the test stopped, so no level held less than its load for it; older runs: taken as running)
    during_level: bool = True

    @classmethod
    def of(cls, entry: object) -> "LostWorker":
        """A `workers_lost` entry: a dict, or a bare worker id (older runs)."""
        if not isinstance(entry, dict):
            return cls(str(entry), None)
        return cls(
            str(entry.get("worker", "?")),
            _whole(entry.get("level")),
            str(entry.get("host") or ""),
            _whole(entry.get("pid")),
            str(entry.get("found") or ""),
            _whole(entry.get("in_flight")),
            _whole(entry.get("unsent")) or 0,
            entry.get("during_level") is not False,
        )

    def named(self) -> str:
        """`worker vm_1f2e (host vm, pid 4242)`: how a table or a finding names it."""
        where = ", ".join(
            part
            for part in (
                f"host {self.host}" if self.host else "",
                f"pid {self.pid}" if self.pid is not None else "",
            )
            if part
        )
        return f"worker {self.worker}" + (f" ({where})" if where else "")

    def held_less(self) -> int | None:
        """The level that held less than its load for the loss (None: none did, or unknown)."""
        return self.level if self.during_level else None

    def when(self) -> str:
        """`during level 2`, `after level 2 had ended`, or "" (not recorded)."""
        if self.level is None:
            return ""
        return (
            f"during level {self.level}"
            if self.during_level
            else f"after level {self.level} had ended"
        )

    def what_was_lost(self) -> str:
        """`3 requests in flight abandoned, 40 of its trace share never sent` ("" when unknown)."""
        parts = []
        if self.in_flight is not None:
            s = "" if self.in_flight == 1 else "s"
            parts.append(f"{self.in_flight:,} request{s} in flight abandoned")
        if self.unsent:
            parts.append(f"{self.unsent:,} of its trace share never sent")
        return ", ".join(parts)


def lost_workers(run: dict) -> list[LostWorker]:
    """run.json's `workers_lost`, read."""
    entries = run.get("workers_lost") or []
    return [LostWorker.of(e) for e in entries] if isinstance(entries, list) else []


def lost_during_levels(run: dict) -> list[LostWorker]:
    """The workers of `lost_workers` lost while a level ran: the ones that cost a level its
    load (a worker that went silent as the test stopped cost none)."""
    return [w for w in lost_workers(run) if w.during_level]


def _whole(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    return None
