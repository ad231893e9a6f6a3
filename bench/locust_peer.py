"""Locust's own `FastHttpUser`, written as a Locust user would: a peer of vllm-load in
`bench/client_capacity.py` (non-streaming only).

Each user posts the reference client's non-streaming body (`reference_client.make_payload`: a
chat request, a prompt that starts differently every time, the exact output length forced) with
`json=`, back to back (`constant(0)`), reads the reply as `bench/realvllm/plain_locust.py` does
(`catch_response`, `usage.completion_tokens` as the response length) and lets Locust's `request`
event report it. A listener on that event keeps each request's start, latency and outcome, and
when the test stops they are written as a run directory in vllm-load's format (the reference
client's `write_run_dir`), so `measure_levels` measures all three clients the same way: the first
`--peer-warmup` finishers are warm-up, the level lasts `--run-time` from the test's start.
`--stop-timeout` lets the requests in flight at the end finish.

    locust -f bench/locust_peer.py --headless -u 100 -r 1000 --run-time 15s --stop-timeout 30 \\
        --host http://127.0.0.1:8000 --peer-run-dir /tmp/locust-peer --peer-output-tokens 8
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

from locust import FastHttpUser, constant, events, task

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_client import PATH, Output, make_payload, make_prompt, write_run_dir  # noqa: E402

_numbers = itertools.count()
_outputs: list[Output] = []
_level_start: list[float] = []


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    parser.add_argument("--peer-run-dir", default="", help="where the run directory goes")
    parser.add_argument("--peer-model", default="sim-llama-8b", help="model id to request")
    parser.add_argument("--peer-input-tokens", type=int, default=64, help="prompt words")
    parser.add_argument("--peer-output-tokens", type=int, default=8, help="exact output length")
    parser.add_argument(
        "--peer-warmup", type=int, default=0, help="first finishers to discard (0: the users)"
    )


@events.test_start.add_listener
def _started(environment, **_kw) -> None:
    _level_start.append(time.time())


@events.request.add_listener
def _kept(start_time, response_time, response_length, exception, **_kw) -> None:
    latency = response_time / 1000.0
    _outputs.append(
        Output(
            start_ts=start_time,
            latency=latency,
            ttft=latency if exception is None else None,
            completion_tokens=response_length if exception is None else None,
            status=200 if exception is None else 0,
            success=exception is None,
            error="" if exception is None else f"disconnect: {exception}",
        )
    )


@events.test_stop.add_listener
def _stopped(environment, **_kw) -> None:
    opts = environment.parsed_options
    if not opts.peer_run_dir or not _level_start:
        return
    start = _level_start[0]
    args = argparse.Namespace(
        url=environment.host,
        model=opts.peer_model,
        concurrency=opts.num_users,
        input_tokens=opts.peer_input_tokens,
        output_tokens=opts.peer_output_tokens,
        no_stream=True,
        seconds=float(opts.run_time),
        warmup=opts.peer_warmup or opts.num_users,
    )
    client = {"name": "Locust FastHttpUser (bench/locust_peer.py)"}
    write_run_dir(opts.peer_run_dir, _outputs, args, start, start + args.seconds, client)


class ChatPeer(FastHttpUser):
    wait_time = constant(0)

    @task
    def chat(self) -> None:
        opts = self.environment.parsed_options
        body = make_payload(
            opts.peer_model,
            make_prompt(next(_numbers), opts.peer_input_tokens),
            opts.peer_output_tokens,
            False,
        )
        with self.client.post(PATH, json=body, name="chat", catch_response=True) as resp:
            try:
                tokens = resp.json()["usage"]["completion_tokens"]
            except Exception as exc:  # noqa: BLE001 (any bad reply is a failure)
                resp.failure(f"no usage: {exc}")
                return
            resp.request_meta["response_length"] = tokens
            resp.success()
