"""What building and writing one request's record costs, this tree's `record()` against another's.

A finished request's record is built on the client (`MeasuredRequest.record()`, then `to_row()`)
and written on the master (`RequestsCsvWriter.write_rows`), once per request. This bench builds
finished requests (a non-streamed reply, and a stream of `--chunks` content chunks) and times
record + row + write per request for this tree's `vllm_load/client/request.py` and for the one
at `--before` (read with `git show`, run against this tree's other modules), interleaved in one
process: the ratio after/before is taken round by round and its median printed, with each
side's best. Both must write the same bytes to requests.csv (the run format's contract); the
bench exits 1 if they do not. Pure CPU, no network.

    python bench/record_cost.py                  # against d699cf0 (records built by position)
    python bench/record_cost.py --before main    # against another commit
    python bench/record_cost.py --quick          # smoke test
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from types import ModuleType

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.sse_parse import chat_stream  # noqa: E402
from vllm_load.client import request as after  # noqa: E402
from vllm_load.client.endpoint import Endpoint, RequestSpec, Timeouts  # noqa: E402
from vllm_load.run_format.records import RequestsCsvWriter  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUEST_PY = "vllm_load/client/request.py"
# the last commit whose record() built the record from 43 positional values (issue 51, item 4)
POSITIONAL = "d699cf0"
#: packages renamed since (93443cb): an older request.py imports them by their old names
RENAMED = {"rundir": "run_format", "target": "server"}


def module_at(ref: str) -> ModuleType:
    """request.py as it was at `ref`, imported inside vllm_load.client (its relative imports
    reach this tree's modules)."""
    try:
        source = subprocess.run(
            ["git", "-C", ROOT, "show", f"{ref}:{REQUEST_PY}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"record_cost: cannot read {REQUEST_PY} at {ref!r} with git ({e})")
    for was, now in RENAMED.items():  # its imports, as this tree names those modules
        source = source.replace(f"from ..{was}.", f"from ..{now}.")
    name = "vllm_load.client.request_before"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "vllm_load.client"
    sys.modules[name] = module
    exec(compile(source, f"{ref}:{REQUEST_PY}", "exec"), module.__dict__)
    return module


def finished(module: ModuleType, endpoint: Endpoint, stream: bool, chunks: int):
    """A request of `module`'s `MeasuredRequest`, as `run()` leaves a successful one."""
    spec = RequestSpec("chat", stream, b"{}", 64, chunks, "LLMUser", "chat")
    request = module.MeasuredRequest(endpoint, spec, "0-1", 100.0)
    request.status, request.queued = 200, 0.0004
    usage = {"prompt_tokens": 64, "completion_tokens": chunks}
    if stream:
        now, buf = 100.05, bytearray()
        for event in chat_stream(chunks):
            buf += event
            request.meter.consume(buf, now)
            now += 0.01
        request.usage, request.end = request.meter.usage, request.meter.done_at
    else:
        request.usage, request.end = usage, 100.5
        request.json_text, request.json_reasoning = "hi " * chunks, False
    return request


def per_request_us(request, writer: RequestsCsvWriter, n: int) -> tuple[float, float]:
    """µs per request of record + row (the client's part), and of that + write (the master's),
    `n` requests (written in one batch)."""
    t0 = time.perf_counter()
    rows = [request.record("w").to_row() for _ in range(n)]
    t1 = time.perf_counter()
    writer.write_rows(rows)
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6


def measure(label: str, requests: dict, folder: str, n: int, rounds: int) -> None:
    writers = {
        side: RequestsCsvWriter(os.path.join(folder, f"{label.split(',')[0]}-{side}.csv"))
        for side in requests
    }
    times: dict[str, list[tuple[float, float]]] = {side: [] for side in requests}
    for _ in range(rounds):
        for side, request in requests.items():  # interleaved: the machine's drift hits both
            times[side].append(per_request_us(request, writers[side], n))
    for writer in writers.values():
        writer.close()
    contents = []
    for writer in writers.values():
        with open(writer.path, "rb") as fh:
            contents.append(fh.read())
    if contents[0] != contents[1]:
        raise SystemExit(f"record_cost: {label}: the two trees wrote different requests.csv bytes")
    for part, at in (("record + to_row", 0), ("+ write_rows", 1)):
        before = [t[at] for t in times["before"]]
        after_ = [t[at] for t in times["after"]]
        ratios = [a / b for a, b in zip(after_, before)]
        print(
            f"{label:<22} {part:<16} {min(before):>8.2f} {min(after_):>8.2f} "
            f"{statistics.median(ratios):>8.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=POSITIONAL, help="the commit to compare with")
    parser.add_argument("--chunks", type=int, default=64, help="content chunks of the stream")
    parser.add_argument("--requests", type=int, default=2000, help="requests per timing")
    parser.add_argument("--rounds", type=int, default=30, help="timings of each side")
    parser.add_argument("--quick", action="store_true", help="a smoke test: few requests, 3 rounds")
    parser.add_argument(
        "--out", default="", help="where the CSV files go (default: a temporary folder)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.rounds = 200, 3
    before = module_at(args.before)
    endpoint = Endpoint("http://127.0.0.1:9", Timeouts(1.0, 1.0, 1.0, 1.0))  # never connects
    print(
        f"record() + to_row() on the client, then RequestsCsvWriter.write_rows, best µs per request ({args.requests:,} a timing, "
        f"{args.rounds} rounds interleaved): before = {args.before}, after = this tree"
    )
    print(
        f"{'request':<22} {'µs per request':<16} {'before':>8} {'after':>8} {'after/before: median (range)'}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.out or scratch
        os.makedirs(folder, exist_ok=True)
        for label, stream in (("non-streamed", False), (f"streamed, {args.chunks} chunks", True)):
            requests = {
                "before": finished(before, endpoint, stream, args.chunks),
                "after": finished(after, endpoint, stream, args.chunks),
            }
            measure(label, requests, folder, args.requests, args.rounds)
    print("requests.csv bytes: identical (before and after)")
    endpoint.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
