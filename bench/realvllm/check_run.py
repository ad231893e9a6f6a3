"""A vllm-load run directory's per-level figures against vLLM's /metrics on identical windows.

    python bench/realvllm/check_run.py REPORT_SUMMARY_JSON METRICS_CSV

vLLM's counters are cumulative but scraped once a second and its completions are bursty (on
this CPU up to 7 requests finish in one second and none for 9 s), so interpolating them at a
window's edges (which are themselves request ends) misplaces whole bursts. Here each level's
measured window is cut down to the scrapes inside it, [s_i, s_j], and both sides are counted
over exactly that: the server by its counters' increase between those two scrapes, the client
by its requests.csv (requests ended and first tokens in (s_i, s_j]) and by the analysis' own
window work (`work_in_window`: requests and tokens spread over the part of each request's life
they were done in, which is what the report's req/s and tok/s are), next to the report's figures
over its own window.
"""

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from metrics_window import load  # noqa: E402

from vllm_load.analysis.levels.measure import success_spans  # noqa: E402
from vllm_load.analysis.levels.window_rates import work_in_window  # noqa: E402
from vllm_load.run_format.load import read_requests_frame  # noqa: E402


def main(summary: str, metrics: str) -> None:
    frame = load(metrics)
    ts = frame["ts"].to_numpy()
    for run in json.load(open(summary))["runs"]:
        req = read_requests_frame(os.path.join(run["path"], "requests.csv"))
        spans = success_spans(req)
        end = req["end_ts"].to_numpy(dtype=float)
        first = (req["start_ts"] + req["ttft"]).to_numpy(dtype=float)
        print(run["path"])
        print(
            f"{'level':>5} {'inner s':>7} | {'done/s cli':>10} {'srv':>6} | {'1st/s cli':>9} {'srv':>6} | "
            f"{'out/s work':>10} {'srv':>6} {'d':>6} | {'in/s work':>9} {'srv@1st':>7} {'d':>6} | "
            f"{'req/s work':>10} | report: achieved req/s out/s in/s"
        )
        for lv in run["levels"]:
            a, b = lv["window_start"], lv["window_end"]
            i, j = np.searchsorted(ts, a), np.searchsorted(ts, b, side="right") - 1
            if j <= i:
                print(f"{lv['users']:>5} window too short for two scrapes")
                continue
            s_a, s_b = ts[i], ts[j]
            s = s_b - s_a
            d = {c: frame[c].iloc[j] - frame[c].iloc[i] for c in frame.columns}
            work = work_in_window(spans, s_a, s_b)
            done_c = ((end > s_a) & (end <= s_b)).sum() / s
            first_c = ((first > s_a) & (first <= s_b)).sum() / s
            out_s, in_s = d["generation_tokens_total"] / s, d["prompt_tokens_total"] / s
            label = lv.get("requested_rate") or float("nan")
            label = f"{label:g}/s" if label == label and label is not None else f"{lv['users']:g}"
            print(
                f"{label:>5} {s:>7.1f} | {done_c:>10.3f} {d['request_success_total'] / s:>6.3f} | "
                f"{first_c:>9.3f} {d['ttft_count'] / s:>6.3f} | "
                f"{work.output_tokens / s:>10.1f} {out_s:>6.1f} {100 * (work.output_tokens / s / out_s - 1):>+5.1f}% | "
                f"{work.prompt_tokens / s:>9.1f} {in_s:>7.1f} {100 * (work.prompt_tokens / s / in_s - 1):>+5.1f}% | "
                f"{work.requests / s:>10.3f} | {lv.get('achieved_rate') or float('nan'):.3f} "
                f"{lv['req_per_s']:.3f} {lv['output_tok_per_s']:.1f} {lv['input_tok_per_s']:.1f}"
            )


if __name__ == "__main__":
    main(*sys.argv[1:3])
