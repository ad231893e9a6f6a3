"""The fault matrix's runs: a short stepped test against the simulator with one fault on, made
once per pytest session (`shared_runs`) for every test that asserts on it: tests/e2e/test_faults.py
judges each run's rows and counts, tests/e2e/test_survivorship.py the line and exit status of the
runs whose levels failed (a run's start is most of its cost, so the two read one run)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from support.runhelpers import only_run_dir, run_vllm_load
from support.shared_runs import shared_run
from vllm_load.sim.child import SimulatorProcess

RATE = "0.2"
OUTPUT_TOKENS = 16
#: the run's levels (users), each measuring REQUESTS after its warm-up
LEVELS = (4, 8)
REQUESTS = 40


@dataclass(frozen=True)
class FaultCase:
    """One fault: simulator options, client options, and the failures it must produce."""

    sim: tuple[str, ...]
    client: tuple[str, ...] = ()
    category: str | None = None  # None: the fault must not fail any request
    status: int = 200  # HTTP status of the failed rows


CASES = {
    "error_500": FaultCase(("--fault-error-rate", RATE), category="http_status", status=500),
    "error_503": FaultCase(
        ("--fault-error-rate", RATE, "--fault-error-status", "503"),
        category="http_status",
        status=503,
    ),
    "error_429": FaultCase(
        ("--fault-error-rate", RATE, "--fault-error-status", "429"),
        category="http_status",
        status=429,
    ),
    "reset": FaultCase(("--fault-reset-rate", RATE), category="disconnect"),
    "bad_sse": FaultCase(("--fault-bad-sse-rate", RATE), category="bad_sse"),
    "stall": FaultCase(
        ("--fault-stall-rate", RATE, "--fault-stall-seconds", "1.5"),
        ("--stall-timeout", "0.4"),
        category="timeout_stall",
    ),
    "slow_first_token": FaultCase(
        ("--fault-slow-first-token-rate", RATE, "--fault-slow-first-token-seconds", "1.5"),
        ("--ttft-timeout", "0.4"),
        category="timeout_ttft",
    ),
    # silence after the headers, caught by --stall-timeout before any content: a TTFT failure
    "slow_first_token_stall": FaultCase(
        ("--fault-slow-first-token-rate", RATE, "--fault-slow-first-token-seconds", "1.5"),
        ("--stall-timeout", "0.4"),
        category="timeout_ttft",
    ),
    "slow_first_token_outliers": FaultCase(
        ("--fault-slow-first-token-rate", "0.1", "--fault-slow-first-token-seconds", "0.3")
    ),
    "close_after_headers": FaultCase(
        ("--fault-close-after-headers-rate", RATE), category="disconnect"
    ),
    # non-streaming responses: the same faults on a JSON body
    "json_error_503": FaultCase(
        ("--fault-error-rate", RATE, "--fault-error-status", "503"),
        ("--no-stream",),
        category="http_status",
        status=503,
    ),
    "json_reset": FaultCase(("--fault-reset-rate", RATE), ("--no-stream",), category="disconnect"),
    "json_bad_body": FaultCase(
        ("--fault-bad-sse-rate", RATE), ("--no-stream",), category="bad_sse"
    ),
    "json_close_after_headers": FaultCase(
        ("--fault-close-after-headers-rate", RATE), ("--no-stream",), category="disconnect"
    ),
}

#: cases whose category and code path another case already covers (error_503, json_error_503,
#: reset): in the slow suite only, to keep the default suite's time
SLOW_CASES = {"error_500", "error_429", "json_reset"}

#: the simulator of a fault's options (see `simulators`)
Simulators = Callable[[tuple[str, ...]], SimulatorProcess]


@contextlib.contextmanager
def simulators() -> Iterator[Simulators]:
    """The simulator of a fault's options, each started at its first ask and stopped at the end:
    the streamed and JSON cases of one fault, and the two slow-first-token cases, run against
    the same one (a simulator's start is about a third of a case's time). Each case judges only
    its own run."""
    with contextlib.ExitStack() as stack:
        started: dict[tuple[str, ...], SimulatorProcess] = {}

        def of(options: tuple[str, ...]) -> SimulatorProcess:
            if options not in started:
                started[options] = stack.enter_context(
                    SimulatorProcess(
                        "--time-scale", "0.05", "--max-num-seqs", "16", "--seed", "3", *options
                    )
                )
            return started[options]

        yield of


@dataclass(frozen=True)
class FaultRun:
    """A fault case's run: its directory and what `vllm-load run` wrote to stderr."""

    run_dir: str
    stderr: str


def fault_run(name: str, simulator: Simulators) -> FaultRun:
    """The run of CASES[name], made the first time any test of the session asks (on any xdist
    worker); it exited 0 where the fault fails no request, else 5 (more than 1 % failed:
    levels_failed)."""
    case = CASES[name]

    def make(folder: Path) -> None:
        proc = run_vllm_load(
            "run",
            "--host",
            simulator(case.sim).url,
            "--levels",
            ",".join(map(str, LEVELS)),
            "--input-tokens",
            "128",
            "--output-tokens",
            str(OUTPUT_TOKENS),
            "--requests-per-level",
            str(REQUESTS),
            "--warmup-requests",
            "4",
            "--out",
            str(folder / "runs"),
            *case.client,
            timeout=180,  # a guard: under coverage on a loaded machine a case took 80 s
            expect=0 if case.category is None else 5,
        )
        (folder / "stderr.txt").write_text(proc.stderr, encoding="utf-8")

    folder = shared_run(f"fault-{name}", make)
    stderr = (folder / "stderr.txt").read_text(encoding="utf-8")
    return FaultRun(only_run_dir(folder / "runs"), stderr)
