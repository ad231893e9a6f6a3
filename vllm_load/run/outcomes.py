"""How a test ended, and the exit status each ending gives: declared once, read by `vllm-load
run` (its exit status and its --help), the run session (a client limit stops the test) and the
docs. A pipeline can trust the status: 0 only when every level ran, measured what it should and
failed no more than the rule allows."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    name: str  # run.json's `outcome` (or what `vllm-load run` concludes after reading the run)
    exit_code: int
    meaning: str


OUTCOMES: tuple[Outcome, ...] = (
    Outcome("completed", 0, "every level ran, measured its requests and failed at most 1% of them"),
    Outcome(
        "workers_lost",
        3,
        "a load worker was lost: every one (the test stopped), or some (their users moved to the "
        "others, their requests in flight were abandoned, and the level running is marked "
        "workers_lost in steps.csv)",
    ),
    Outcome(
        "target_lost",
        4,
        "the target stopped answering (the run ended on a streak of connect/disconnect/timeout "
        "failures and /v1/models no longer answers)",
    ),
    Outcome(
        "levels_failed",
        5,
        "a level failed more than 1% of its measured requests, or measured none (a target "
        "that refuses or drops requests, a load process that sent nothing)",
    ),
    Outcome(
        "client_limit",
        6,
        "a load process ran out of a client-side resource (file descriptors, local ports, "
        "socket buffers): the test was stopped, and the message says which limit to raise",
    ),
    Outcome(
        "stopped",
        7,
        "a --stop-when rule ended the ladder early: the line names the rule, the level that "
        "tripped it and the figure (run.json `stopped_by`)",
    ),
    Outcome("interrupted", 130, "interrupted (Ctrl-C, SIGTERM)"),
)

EXIT_CODES: dict[str, int] = {o.name: o.exit_code for o in OUTCOMES}


def exit_status_help() -> str:
    """The exit statuses, for `--help`."""
    listed = "; ".join(f"{o.exit_code} {o.meaning}" for o in OUTCOMES)
    return (
        f"exit status of a headless test: {listed}; 2 for bad arguments or an unusable target, "
        "1 when the test did not start. The run directory is complete and analysable in each "
        "case"
    )
