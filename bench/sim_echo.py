#!/usr/bin/env python3
"""How fast the echo simulator answers: the ceiling a load-generating client is measured against.

Starts `vllm-load sim --echo` with 1 and then 2 worker processes and drives it at concurrency 100
with `wrk` (Debian package `wrk`; POST bodies through a Lua script) or, without wrk, with a
closed-loop aiohttp client. Prints non-streaming requests/s and streaming chunks/s (each
response is `--tokens` content chunks, one token each). Not part of the test suite:

    python bench/sim_echo.py [--duration 10] [--concurrency 100] [--tokens 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from vllm_load.sim.child import SimulatorProcess  # noqa: E402

PATH = "/v1/chat/completions"


def request_body(tokens: int, stream: bool) -> str:
    return json.dumps(
        {
            "model": "sim-llama-8b",
            "max_tokens": tokens,
            "ignore_eos": True,
            "stream": stream,
            "messages": [
                {"role": "user", "content": "Say hello to the load generator, and keep going."}
            ],
        }
    )


def run_wrk(
    url: str, body: str, concurrency: int, duration: float, threads: int
) -> tuple[float, int]:
    """(requests/s, non-2xx + socket errors) from wrk."""
    script = (
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = {json.dumps(body)}\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(script)
    try:
        out = subprocess.run(
            [
                "wrk",
                f"-t{threads}",
                f"-c{concurrency}",
                f"-d{duration:g}s",
                "-s",
                fh.name,
                url + PATH,
            ],
            capture_output=True,
            text=True,
            timeout=duration + 60,
        ).stdout
    finally:
        os.unlink(fh.name)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = sum(
        int(n)
        for n in re.findall(
            r"(?:Non-2xx or 3xx responses|connect|read|write|timeout)[: ]+(\d+)", out
        )
    )
    return rate, errors


async def _aiohttp_rate(
    url: str, body: str, concurrency: int, duration: float
) -> tuple[float, int]:
    import aiohttp

    data, done, errors = body.encode(), 0, 0
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + duration
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def user() -> None:
            nonlocal done, errors
            while loop.time() < stop_at:
                async with session.post(
                    url + PATH, data=data, headers={"Content-Type": "application/json"}
                ) as resp:
                    await resp.read()
                    if resp.status == 200:
                        done += 1
                    else:
                        errors += 1

        start = loop.time()
        await asyncio.gather(*(user() for _ in range(concurrency)))
        return done / (loop.time() - start), errors


def run_aiohttp(
    url: str, body: str, concurrency: int, duration: float, threads: int
) -> tuple[float, int]:
    return asyncio.run(_aiohttp_rate(url, body, concurrency, duration))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    parser.add_argument("--concurrency", type=int, default=100, help="open connections")
    parser.add_argument("--tokens", type=int, default=100, help="tokens per response")
    parser.add_argument(
        "--server-workers", default="1,2", help="simulator process counts to measure"
    )
    parser.add_argument("--client", choices=["auto", "wrk", "aiohttp"], default="auto")
    args = parser.parse_args()
    use_wrk = args.client == "wrk" or (args.client == "auto" and shutil.which("wrk"))
    if args.client == "wrk" and not shutil.which("wrk"):
        print("wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 2
    threads = max(1, min(4, os.cpu_count() or 1))
    measure = run_wrk if use_wrk else run_aiohttp
    client = (
        f"wrk ({threads} threads, {shutil.which('wrk')})"
        if use_wrk
        else ("aiohttp closed loop" + ("" if args.client == "aiohttp" else " (wrk not found)"))
    )
    print(
        f"echo simulator at concurrency {args.concurrency}, {args.tokens} tokens per response, "
        f"{args.duration:g}s per figure; client: {client}; {os.cpu_count()} CPUs shared by client and server"
    )
    print(
        f"{'workers':>7}  {'non-streaming req/s':>20}  {'streaming req/s':>16}  {'streaming chunks/s':>19}  errors"
    )
    for workers in [int(w) for w in args.server_workers.split(",")]:
        with SimulatorProcess("--echo", "--server-workers", str(workers)) as sim:
            time.sleep(0.5 * workers)  # every worker bound before measuring
            measure(
                sim.url, request_body(args.tokens, False), args.concurrency, 1.0, threads
            )  # warm-up
            plain, e1 = measure(
                sim.url, request_body(args.tokens, False), args.concurrency, args.duration, threads
            )
            streamed, e2 = measure(
                sim.url, request_body(args.tokens, True), args.concurrency, args.duration, threads
            )
        print(
            f"{workers:>7}  {plain:>20,.0f}  {streamed:>16,.0f}  {streamed * args.tokens:>19,.0f}  {e1 + e2}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
