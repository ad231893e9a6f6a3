"""The simulator's fault injection: which faults requests draw, and what each looks like on the wire."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass

import pytest

from vllm_load.cli.main import build_parser
from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.cli import ConfigError, build_config
from vllm_load.sim.config import FaultConfig
from vllm_load.sim.faults import FaultPlan


def sim_args(*argv: str):
    return build_parser().parse_args(["sim", *argv])


def draws(config: FaultConfig, n: int) -> list:
    plan = FaultPlan(config)
    return [plan.draw() for _ in range(n)]


def test_no_fault_is_drawn_by_default():
    plan = FaultPlan(FaultConfig())
    assert not plan.enabled and {plan.draw() for _ in range(100)} == {None} and not plan.injected


def test_faults_follow_their_rates_and_repeat_with_the_seed():
    config = FaultConfig(error_rate=0.1, reset_rate=0.2, stall_rate=0.05, stall_seconds=3.0, seed=7)
    first = draws(config, 20000)
    assert first == draws(config, 20000)
    assert first != draws(
        FaultConfig(error_rate=0.1, reset_rate=0.2, stall_rate=0.05, seed=8), 20000
    )
    kinds = [f.kind if f else None for f in first]
    for kind, rate in (("error", 0.1), ("reset", 0.2), ("stall", 0.05), (None, 0.65)):
        assert abs(kinds.count(kind) / len(kinds) - rate) < 0.015, kind
    assert {f.seconds for f in first if f and f.kind == "stall"} == {3.0}


def test_fault_options_are_checked():
    config = build_config(
        sim_args("--fault-error-rate", "0.3", "--fault-error-status", "429", "--seed", "5")
    )
    assert config.faults == FaultConfig(error_rate=0.3, error_status=429, seed=5)
    assert not build_config(sim_args()).faults.enabled
    with pytest.raises(ConfigError, match="add up to more than 1"):
        build_config(sim_args("--fault-reset-rate", "0.6", "--fault-stall-rate", "0.6"))
    with pytest.raises(ConfigError, match="--fault-bad-sse-rate must be between 0 and 1"):
        build_config(sim_args("--fault-bad-sse-rate", "1.5"))
    with pytest.raises(SystemExit):  # argparse: only 500, 503 and 429
        sim_args("--fault-error-status", "404")


@dataclass
class Exchange:
    """What a raw HTTP/1.1 client saw: the bytes, how the connection ended, the longest silence."""

    data: bytes
    ended: str  # "eof", "reset" or "timeout"
    longest_gap: float

    @property
    def status(self) -> int:
        return int(self.data.split(b" ", 2)[1]) if self.data else 0


def exchange(port: int, stream: bool, timeout: float = 5.0) -> Exchange:
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 20,
            "min_tokens": 20,
            "stream": stream,
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    data, ended, gap = b"", "eof", 0.0
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head + body)
        last = time.monotonic()
        try:
            while chunk := sock.recv(65536):
                now = time.monotonic()
                gap, last = max(gap, now - last), now
                data += chunk
        except ConnectionResetError:
            ended = "reset"
        except socket.timeout:
            ended = "timeout"
    return Exchange(data, ended, gap)


FAST = (
    "--ttft",
    "0.01",
    "--itl",
    "0.005",
    "--fault-stall-seconds",
    "0.6",
    "--fault-slow-first-token-seconds",
    "0.6",
)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize(
    "fault", ["error", "reset", "bad_sse", "stall", "slow_first_token", "close_after_headers"]
)
def test_each_fault_on_the_wire(fault, stream):
    extra = ("--fault-error-status", "429") if fault == "error" else ()
    with SimulatorProcess(*FAST, f"--fault-{fault.replace('_', '-')}-rate", "1", *extra) as sim:
        seen = exchange(sim.port, stream)
    head, _, body = seen.data.partition(b"\r\n\r\n")
    complete = body.rstrip().endswith(b"data: [DONE]\n\n\r\n0") or (
        not stream and body.endswith(b"}")
    )
    if fault == "error":
        assert seen.status == 429 and b"Retry-After: 1" in head
        assert json.loads(body)["error"] == {
            "message": "injected fault: HTTP 429",
            "type": "RateLimitError",
            "param": None,
            "code": 429,
        }
        return
    assert seen.status == 200
    if fault == "reset":
        assert seen.ended == "reset"
    elif fault == "close_after_headers":
        assert seen.ended == "eof" and body == b""
    elif fault == "bad_sse":
        assert b'"content":" the\n\n' in body if stream else body.endswith(b'"content":" the')
        if stream:  # the stream goes on after the malformed event
            assert complete
    else:  # stall and slow first token: a silence of the configured length, then a normal response
        assert complete and seen.ended == "eof" and 0.55 < seen.longest_gap < 1.5
