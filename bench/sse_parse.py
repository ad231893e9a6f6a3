"""How fast vllm-load's SSE meter takes content chunks out of a stream, against a plain parser.

The per-chunk path is the client's hot loop. This bench feeds one 512-token
chat stream, framed the way vLLM and the simulator write it, to `vllm_load.client.sse.SseMeter` in
reads of a given size, and to a straightforward parser (split events, `json.loads` every
`data:` line, look at the delta) in the same reads; it prints chunks/s for both and their
ratio. Pure CPU, no network: run it when changing vllm_load/client/sse.py and compare.

    python bench/sse_parse.py            # 64 KB, 4 KB and one-event reads, best of 5
    python bench/sse_parse.py --quick    # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vllm_load.client.sse import SseMeter  # noqa: E402

HEAD = b'data: {"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1700000000,"model":"sim-model","choices":['


def chat_stream(tokens: int) -> list[bytes]:
    """The events of one chat stream with usage, as vLLM writes it: role chunk, content chunks (the
    last one with the finish reason), usage, [DONE]."""
    events = [
        HEAD
        + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
    ]
    events += [
        HEAD
        + b'{"index":0,"delta":{"content":" tok%d"},"logprobs":null,"finish_reason":null}]}\n\n' % i
        for i in range(tokens - 1)
    ]
    events.append(
        HEAD + b'{"index":0,"delta":{"content":" tok%d"},"logprobs":null,"finish_reason":"length",'
        b'"stop_reason":null}]}\n\n' % (tokens - 1)
    )
    events.append(
        b'data: {"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1700000000,'
        b'"model":"sim-model","choices":[],"usage":{"prompt_tokens":2048,"total_tokens":%d,"completion_tokens":%d}}\n\n'
        % (2048 + tokens, tokens)
    )
    events.append(b"data: [DONE]\n\n")
    return events


def reads(events: list[bytes], size: int) -> list[bytes]:
    """The stream cut into reads of `size` bytes (0: one event per read)."""
    if size == 0:
        return list(events)
    whole = b"".join(events)
    return [whole[i : i + size] for i in range(0, len(whole), size)]


def meter_stream(pieces: list[bytes], now: float) -> int:
    meter, buf = SseMeter(), bytearray()
    for piece in pieces:
        buf += piece
        meter.consume(buf, now)
    return len(meter.chunk_times)


def plain_stream(pieces: list[bytes], now: float) -> int:
    """A straightforward client: split on blank lines, parse every data line, keep content."""
    times, buf = [], b""
    for piece in pieces:
        buf += piece
        *events, buf = buf.split(b"\n\n")
        for event in events:
            if not event.startswith(b"data:") or event == b"data: [DONE]":
                continue
            message = json.loads(event[5:])
            for choice in message.get("choices") or ():
                if (choice.get("delta") or {}).get("content"):
                    times.append(now)
    return len(times)


def chunks_per_second(parse, pieces: list[bytes], tokens: int, repeats: int, rounds: int) -> float:
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(repeats):
            if parse(pieces, 1.0) != tokens:
                raise SystemExit(f"{parse.__name__} counted the wrong number of chunks")
        best = max(best, repeats * tokens / (time.perf_counter() - t0))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=512, help="content chunks per stream")
    parser.add_argument("--repeats", type=int, default=200, help="streams per timing")
    parser.add_argument(
        "--rounds", type=int, default=5, help="timings per figure; the best is printed"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke test: 64 tokens, few repeats")
    parser.add_argument("--out", default="", help="unused (accepted like the other benches)")
    args = parser.parse_args(argv)
    if args.quick:
        args.tokens, args.repeats, args.rounds = 64, 20, 2
    events = chat_stream(args.tokens)
    print(
        f"one chat stream of {args.tokens} content chunks ({len(b''.join(events)):,} bytes), best of {args.rounds}"
    )
    print(f"{'reads':<20} {'SseMeter chunks/s':>18} {'plain json chunks/s':>20} {'ratio':>6}")
    for label, size in (("64 KB", 65536), ("4 KB", 4096), ("one event per read", 0)):
        pieces = reads(events, size)
        ours = chunks_per_second(meter_stream, pieces, args.tokens, args.repeats, args.rounds)
        plain = chunks_per_second(plain_stream, pieces, args.tokens, args.repeats, args.rounds)
        print(f"{label:<20} {ours:>18,.0f} {plain:>20,.0f} {ours / plain:>5.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
