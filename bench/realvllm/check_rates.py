"""Check 3: a `vllm-load run --rates` run's offered / achieved rates against vLLM's /metrics.

    python bench/realvllm/check_rates.py REPORT_SUMMARY_JSON METRICS_CSV

Per level, over the report's measured window: vLLM's finished requests per second
(`vllm:request_success_total`) and the requests it started (by its TTFT histogram count: a
request counts there when its first token comes) beside the report's achieved rate, its req/s and
its offered rate, and the keep-up verdict.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics_window import load, window  # noqa: E402


def main(summary: str, metrics: str) -> None:
    frame = load(metrics)
    for run in json.load(open(summary))["runs"]:
        print(run["path"])
        print(
            f"{'rate':>5} {'win s':>6} {'offered':>7} {'achieved':>8} {'req/s':>6} {'srv done/s':>10} "
            f"{'diff(ach)':>9} {'srv 1st tok/s':>13} {'out tok/s':>9} {'srv':>7} kept up"
        )
        for lv in run["levels"]:
            w = window(frame, lv["window_start"], lv["window_end"])
            s = w["seconds"]
            done = w["request_success_total"] / s
            first = w["ttft_count"] / s
            print(
                f"{lv.get('requested_rate', float('nan')):>5.2f} {s:>6.1f} "
                f"{lv.get('offered_rate', float('nan')):>7.3f} {lv.get('achieved_rate', float('nan')):>8.3f} "
                f"{lv['req_per_s']:>6.3f} {done:>10.3f} "
                f"{100 * (lv.get('achieved_rate', float('nan')) / done - 1):>+8.1f}% {first:>13.3f} "
                f"{lv['output_tok_per_s']:>9.1f} {w['generation_tokens_total'] / s:>7.1f} "
                f"{lv.get('rate_kept_up')} {lv.get('rate_behind', '')}"
            )


if __name__ == "__main__":
    main(*sys.argv[1:3])
