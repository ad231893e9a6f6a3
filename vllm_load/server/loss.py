"""Did the target stop answering during a run? Decided after the run, from its run directory.

A server that dies mid-run does not end the run: every request after that fails fast (`connect`)
or is cut (`disconnect`), each level ends on its count of finished requests, and the run walks
every level with outcome `completed`. It is then recorded faithfully, but a pipeline must not
take it for a good run. The rule:

- the run ends with a streak of failed requests and no success after its first one: at least
  `MIN_STREAK` requests, at least `NO_ANSWER_SHARE` of them failures that mean no answer came
  (`connect`, `disconnect` or a timeout), and
- the target still does not answer `GET /v1/models` after the run.

Failures the server answered (`http_status`, `bad_sse`, `server_error`) never count: an
answering server is not lost, however badly it answers. The probe keeps random failures at the
end of a run (fault injection, a flaky network) from reading as a dead server.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from .control import HttpError, request_json

#: the category of a request the client closed on purpose (docs/run-format.md; run_format's
#: `records.CANCELLED`, a floor this package does not import): no sign of the server either way
CANCELLED = "cancelled"
#: failure categories that mean the server did not answer (docs/run-format.md)
NO_ANSWER = ("connect", "disconnect", "timeout_ttft", "timeout_stall", "timeout_total")
MIN_STREAK = 5
NO_ANSWER_SHARE = 0.9
PROBE_TIMEOUT = 10.0


@dataclass
class FinalStreak:
    """The requests that ended the run after its last success, in the order they ended."""

    level: int  # the level during which the first of them ended
    users: int  # that level's users
    count: int
    by_error: dict[str, int] = field(default_factory=dict)

    def no_answer(self) -> int:
        return sum(n for error, n in self.by_error.items() if error in NO_ANSWER)

    def describe(self) -> str:
        """e.g. `4,062 connect failures, 16 disconnect failures`."""
        parts = sorted(self.by_error.items(), key=lambda item: -item[1])
        return ", ".join(f"{n:,} {error} failure{'s' if n != 1 else ''}" for error, n in parts)


def final_streak(run_dir: str) -> FinalStreak | None:
    """The failures after the run's last successful request (None when it ended on a success):
    as the run's own process found them (run.json's `end_checks`), else from its requests."""
    recorded = _recorded_streak(run_dir)
    if recorded is not _NOT_RECORDED:
        return recorded  # type: ignore[return-value]
    # at call time: keeps pandas out of every command's start (cli.run imports this)
    import pandas as pd

    try:
        rows = pd.read_csv(
            os.path.join(run_dir, "requests.csv"),
            usecols=["level", "users", "end_ts", "ok", "error"],
            dtype={"error": "string"},
            keep_default_na=True,
        )
    except (OSError, ValueError):
        return None
    try:
        steps = pd.read_csv(
            os.path.join(run_dir, "steps.csv"), usecols=["level", "users", "start_ts"]
        )
    except (OSError, ValueError):
        steps = None
    return streak_in(rows, steps)


_NOT_RECORDED = object()


def _recorded_streak(run_dir: str) -> object:
    """run.json's `end_checks.final_streak` (a `FinalStreak`, or None), `_NOT_RECORDED` when the
    run has none or it is damaged (then the requests say)."""
    try:
        with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as fh:
            checks = json.load(fh).get("end_checks")
        recorded = checks["final_streak"]
        if recorded is None:
            return None
        streak = FinalStreak(**recorded)
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return _NOT_RECORDED
    fine = all(isinstance(v, int) for v in (streak.level, streak.users, streak.count))
    return streak if fine and isinstance(streak.by_error, dict) else _NOT_RECORDED


def streak_in(rows, steps=None) -> FinalStreak | None:
    """`final_streak` of a run already read: its requests (`level`, `users`, `end_ts`, `ok`,
    `error`) and, when known, its steps (`level`, `users`, `start_ts`), as data frames."""
    import pandas as pd  # at call time, as above

    if "error" in rows:  # (closed by the client on purpose: says nothing of the server)
        rows = rows[rows["error"].astype("string").fillna("") != CANCELLED]
    if rows.empty:
        return None
    ok = pd.to_numeric(rows["ok"], errors="coerce").fillna(0).to_numpy() == 1
    end = pd.to_numeric(rows["end_ts"], errors="coerce")
    # what ended after the last success (sorting only those: a report reads a million rows)
    tail = rows[end > end[ok].max()] if ok.any() else rows
    if tail.empty:
        return None
    tail = tail.sort_values("end_ts", kind="stable")
    first = tail.iloc[0]
    level, users = _level_at(steps, float(first["end_ts"])) or (
        _whole(first["level"]),
        _whole(first["users"]),
    )
    counts = tail["error"].astype("string").fillna("unknown").value_counts()
    return FinalStreak(
        level=level,
        users=users,
        count=len(tail),
        by_error={str(k): int(v) for k, v in counts.items()},
    )


def _level_at(steps, ts: float) -> tuple[int, int] | None:
    """(level, users) running at `ts` by steps.csv; None when it cannot tell. (A request's own
    level is the one it started in: the first failures may have started a level earlier.)"""
    import pandas as pd  # at call time, as above

    if steps is None or steps.empty or "start_ts" not in steps:
        return None
    started = steps[pd.to_numeric(steps["start_ts"], errors="coerce") <= ts]
    if started.empty:
        return None
    last = started.iloc[-1]
    return _whole(last["level"]), _whole(last["users"])


def _whole(value) -> int:
    """A level or user count from requests.csv (-1 when the cell is empty)."""
    return -1 if value != value or value is None else int(value)


def ended_unanswered(streak: FinalStreak | None) -> bool:
    """Whether a run's final streak is the rule's (at least `MIN_STREAK` failures after the last
    success, at least `NO_ANSWER_SHARE` of them no answer); the probe is `still_answers`."""
    return (
        streak is not None
        and streak.count >= MIN_STREAK
        and streak.no_answer() >= NO_ANSWER_SHARE * streak.count
    )


def still_answers(host: str, api_key: str | None) -> bool:
    """Whether the target answers GET /v1/models now."""
    try:
        request_json(host.rstrip("/") + "/v1/models", api_key=api_key, timeout=PROBE_TIMEOUT)
    except HttpError:
        return False
    return True


def target_lost(run_dir: str, host: str, api_key: str | None = None) -> str | None:
    """One line saying when the target stopped answering, or None when it did not (the rule above)."""
    streak = final_streak(run_dir)
    if streak is None or not ended_unanswered(streak) or still_answers(host, api_key):
        return None
    return (
        f"the target stopped answering during level {streak.level} (users {streak.users}): "
        f"{streak.describe()} and no success after them, and {host}/v1/models does not answer now; "
        f"{run_dir} holds what was measured"
    )
