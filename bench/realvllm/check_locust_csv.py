"""Check 1: `vllm-load report PREFIX --locust-length tokens` per level against vLLM's /metrics.

    python bench/realvllm/check_locust_csv.py SUMMARY_JSON METRICS_CSV

For every level the report measured (its window_start..window_end, wall time), the server's
finished requests (`vllm:request_success_total`) and generated tokens
(`vllm:generation_tokens_total`) over the same window, per second, beside the report's
req/s and output tok/s. vLLM counts a generated token when its engine step ends and a request
when it finishes; Locust counts both when the response ends, so over a window of N request
durations the two differ by the work in flight at its edges (about 1/N).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics_window import load, window  # noqa: E402


def main(summary: str, metrics: str) -> None:
    frame = load(metrics)
    runs = json.load(open(summary))["runs"]
    print(
        f"{'users':>5} {'win s':>6} {'req/s rep':>9} {'srv':>7} {'diff':>7} "
        f"{'tok/s rep':>9} {'srv':>7} {'diff':>7} {'e2e ms rep':>10} {'srv':>7}"
    )
    for run in runs:
        for lv in run["levels"]:
            w = window(frame, lv["window_start"], lv["window_end"])
            s = w["seconds"]
            rps, tps = w["request_success_total"] / s, w["generation_tokens_total"] / s
            e2e = 1000 * w["e2e_sum"] / w["e2e_count"] if w["e2e_count"] else float("nan")
            print(
                f"{lv['users']:>5.0f} {s:>6.1f} {lv['req_per_s']:>9.3f} {rps:>7.3f} "
                f"{100 * (lv['req_per_s'] / rps - 1):>+6.1f}% {lv['output_tok_per_s']:>9.1f} "
                f"{tps:>7.1f} {100 * (lv['output_tok_per_s'] / tps - 1):>+6.1f}% "
                f"{1000 * lv['e2e_mean']:>10.0f} {e2e:>7.0f}"
            )


if __name__ == "__main__":
    main(*sys.argv[1:3])
