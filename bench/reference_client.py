#!/usr/bin/env python3
"""A reference load client written the way vLLM's `benchmarks/benchmark_serving.py` is.

What vllm-load is compared with in `bench/client_capacity.py` and `bench/timing_accuracy.py`.
The shape of the code follows benchmark_serving's OpenAI chat request function and its
concurrency limit (written here from scratch, not copied):

- one `aiohttp.ClientSession` for every request (a `TCPConnector` with room for every
  connection), the payload sent with `json=`;
- one asyncio task per request, each `async with semaphore:` (an `asyncio.Semaphore` of the
  concurrency) around the request, so at most `--concurrency` requests are in flight;
- streamed responses read line by line with `async for line in response.content`, each
  `data:` line stripped, `time.perf_counter()` taken for it and then `json.loads`-ed, the text
  appended to the generated text, every gap appended to a Python list of ITLs;
- non-streaming responses (benchmark_serving always streams) are read whole and `json.loads`-ed.

Two deliberate differences, so that both clients measure the same quantities: TTFT/ITL count
content chunks only (the role-only first chunk is not a token, as in vllm-load), and E2E ends
at `data: [DONE]`. The per-chunk work (timestamp, JSON decode, list append) is the same.

The run is one level: requests are queued (each task waits on the semaphore) until
`--seconds` after the start; then nothing new starts, the queued tasks are cancelled and those
in flight finish (at most `--drain-timeout` s). Every finished request becomes a row of a run
directory in vllm-load's format (requests.csv, steps.csv, run.json), the first `--warmup`
finishers counting as warm-up and the level marked as cut by its time cap, so
`vllm_load.analysis.levels.measure.measure_levels` measures both clients the same way.

    python bench/reference_client.py --url http://127.0.0.1:8000 --concurrency 100 \\
        --output-tokens 512 --seconds 20 --warmup 100 --run-dir /tmp/ref
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field

import aiohttp

PATH = "/v1/chat/completions"
TIMEOUT = aiohttp.ClientTimeout(total=6 * 60 * 60)  # as benchmark_serving: no practical limit
NEVER = 10**9  # measured requests of the level: the time cap ends it


@dataclass
class Output:
    """What one request measured (benchmark_serving's RequestFuncOutput, plus wall-clock times)."""

    start_ts: float = 0.0
    latency: float = 0.0
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    generated_text: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    status: int = 0
    success: bool = False
    error: str = ""


def make_payload(model: str, prompt: str, output_tokens: int, stream: bool) -> dict:
    """The request body: exact output length forced as vllm-load forces it."""
    payload = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        payload["stream_options"] = {"include_usage": True}
    return payload


def make_prompt(index: int, words: int) -> str:
    """A prompt of about `words` tokens that starts differently for every request."""
    return f"Request {index}: " + " ".join(["hello"] * max(1, words - 3))


async def read_stream(response: aiohttp.ClientResponse, out: Output, st: float) -> None:
    """benchmark_serving's loop: per line strip, timestamp, json.loads, keep text and gaps."""
    most_recent = st
    async for chunk_bytes in response.content:
        chunk_bytes = chunk_bytes.strip()
        if not chunk_bytes:
            continue
        chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
        if chunk == "[DONE]":
            out.latency = time.perf_counter() - st
            out.success = out.ttft is not None
            return
        timestamp = time.perf_counter()
        data = json.loads(chunk)
        if choices := data.get("choices"):
            content = choices[0]["delta"].get("content")
            if content:
                if out.ttft is None:
                    out.ttft = timestamp - st
                else:
                    out.itl.append(timestamp - most_recent)
                most_recent = timestamp
                out.generated_text += content
        if usage := data.get("usage"):
            out.prompt_tokens, out.completion_tokens = (
                usage.get("prompt_tokens"),
                usage.get("completion_tokens"),
            )
    out.error = "disconnect: stream ended without data: [DONE]"


async def request_func(session: aiohttp.ClientSession, url: str, payload: dict) -> Output:
    """Send one request and read it to the end."""
    out = Output(start_ts=time.time())
    st = time.perf_counter()
    try:
        async with session.post(
            url=url, json=payload, headers={"Content-Type": "application/json"}
        ) as response:
            out.status = response.status
            if response.status != 200:
                out.error = f"http_status: HTTP {response.status}"
                await response.read()
            elif payload["stream"]:
                await read_stream(response, out, st)
            else:
                data = json.loads(await response.read())
                out.latency = out.ttft = time.perf_counter() - st
                out.generated_text = data["choices"][0]["message"]["content"] or ""
                usage = data.get("usage") or {}
                out.prompt_tokens, out.completion_tokens = (
                    usage.get("prompt_tokens"),
                    usage.get("completion_tokens"),
                )
                out.success = True
    except (aiohttp.ClientError, OSError, ValueError, KeyError) as e:
        out.error = f"disconnect: {type(e).__name__}: {e}"[:300]
    if not out.success and not out.latency:
        out.latency = time.perf_counter() - st
    return out


async def run_level(args: argparse.Namespace) -> tuple[list[Output], float, float]:
    """Keep `concurrency` requests in flight (semaphore) until `seconds` have passed, then drain.

    Returns the finished requests and the level's start and end (Unix time)."""
    url = args.url.rstrip("/") + PATH
    semaphore = asyncio.Semaphore(args.concurrency)
    done: list[Output] = []
    level_start = time.time()
    level_end_at = time.perf_counter() + args.seconds
    connector = aiohttp.TCPConnector(
        limit=args.concurrency, limit_per_host=args.concurrency, keepalive_timeout=60
    )
    async with aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session:

        async def limited_request_func(index: int) -> None:
            async with semaphore:
                if time.perf_counter() >= level_end_at:
                    return  # queued past the end of the level: never sent
                payload = make_payload(
                    args.model,
                    make_prompt(index, args.input_tokens),
                    args.output_tokens,
                    not args.no_stream,
                )
                done.append(await request_func(session, url, payload))

        tasks: set[asyncio.Task] = set()
        index = 0
        while time.perf_counter() < level_end_at:
            while (
                len(tasks) < 2 * args.concurrency
            ):  # a queue behind the semaphore, as benchmark_serving's
                tasks.add(asyncio.create_task(limited_request_func(index)))
                index += 1
            finished, tasks = await asyncio.wait(
                tasks,
                timeout=max(0.0, level_end_at - time.perf_counter()),
                return_when=asyncio.FIRST_COMPLETED,
            )
            for task in finished:
                task.result()
        level_end = time.time()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=args.drain_timeout)
            for task in late:
                task.cancel()
    return done, level_start, level_end


def write_run_dir(
    run_dir: str,
    outputs: list[Output],
    args: argparse.Namespace,
    level_start: float,
    level_end: float,
    client: dict | None = None,
) -> None:
    """requests.csv, steps.csv and run.json in vllm-load's run format (docs/run-format.md);
    `client` is run.json's client (this one's by default; `locust_peer.py` names itself)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from vllm_load.client.sse import itl_summary
    from vllm_load.run_format.records import RequestRecord, RequestsCsvWriter

    os.makedirs(run_dir, exist_ok=True)
    writer = RequestsCsvWriter(os.path.join(run_dir, "requests.csv"))
    rows = []
    for i, out in enumerate(sorted(outputs, key=lambda o: o.start_ts + o.latency)):
        times = [out.ttft] if out.ttft is not None else []
        for gap in out.itl:
            times.append(times[-1] + gap)
        itl_mean, itl_p50, itl_p90, itl_p99, itl_max, hist = itl_summary(times)
        tpot = (
            (out.latency - out.ttft) / (out.completion_tokens - 1)
            if out.success and out.ttft is not None and (out.completion_tokens or 0) > 1
            else None
        )
        category, _, message = out.error.partition(": ")
        rows.append(
            RequestRecord(
                request_id=f"ref-{i}",
                worker="reference",
                level=0,
                users=args.concurrency,
                endpoint="chat",
                stream=0 if args.no_stream else 1,
                start_ts=out.start_ts,
                end_ts=out.start_ts + out.latency,
                ttft=out.ttft,
                e2e=out.latency,
                tpot=tpot,
                itl_mean=itl_mean,
                itl_p50=itl_p50,
                itl_p90=itl_p90,
                itl_p99=itl_p99,
                itl_max=itl_max,
                itl_hist=hist,
                n_chunks=len(times),
                chunks_merged=0,
                chunk_marks="",
                prompt_tokens=out.prompt_tokens,
                completion_tokens=out.completion_tokens,
                requested_prompt_tokens=args.input_tokens,
                requested_completion_tokens=args.output_tokens,
                ok=int(out.success),
                status=out.status,
                error=category if out.error else "",
                error_message=message,
            ).to_row()
        )
    writer.write_rows(rows)
    writer.close()
    with open(os.path.join(run_dir, "steps.csv"), "w", encoding="utf-8") as fh:
        fh.write(
            "level,users,start_ts,end_ts,warmup_requests,target_requests,time_cap,stop_reason\n"
        )
        fh.write(
            f"0,{args.concurrency},{level_start!r},{level_end!r},{args.warmup},{args.warmup + NEVER},"
            f"{args.seconds!r},time_cap\n"
        )
    with open(os.path.join(run_dir, "run.json"), "w", encoding="utf-8") as fh:
        json.dump(
            {
                "format": 1,
                "client": client
                or {"name": "reference (benchmark_serving style)", "aiohttp": aiohttp.__version__},
                "target": {"host": args.url},
                "model": args.model,
                "outcome": "completed",
                "settings": {k: v for k, v in vars(args).items() if k != "run_dir"},
            },
            fh,
            indent=2,
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--url", required=True, help="base URL of the server, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument("--model", default="sim-llama-8b", help="model id to request")
    parser.add_argument(
        "--concurrency", type=int, default=100, help="requests in flight (semaphore size)"
    )
    parser.add_argument(
        "--input-tokens", type=int, default=64, help="approximate prompt length (words)"
    )
    parser.add_argument("--output-tokens", type=int, default=512, help="exact output length")
    parser.add_argument("--no-stream", action="store_true", help="non-streaming requests")
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="length of the level (warm-up included)"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="first finished requests to discard (default: concurrency)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=60.0,
        help="most seconds to wait for requests in flight at the end",
    )
    parser.add_argument(
        "--run-dir", required=True, help="directory to write requests.csv, steps.csv, run.json into"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.concurrency < 1 or args.seconds <= 0:
        print("reference_client: --concurrency and --seconds must be positive", file=sys.stderr)
        return 2
    if args.warmup is None:
        args.warmup = args.concurrency
    outputs, level_start, level_end = asyncio.run(run_level(args))
    write_run_dir(args.run_dir, outputs, args, level_start, level_end)
    ok = sum(o.success for o in outputs)
    print(
        f"reference: {len(outputs)} requests finished ({ok} ok) in {level_end - level_start:.1f} s; {args.run_dir}",
        flush=True,
    )
    return 0 if outputs and ok == len(outputs) else 1


if __name__ == "__main__":
    sys.exit(main())
