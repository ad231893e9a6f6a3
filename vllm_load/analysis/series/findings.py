"""Key findings of one series: sentences built from its saturation analysis and its curve.

Each sentence names the figures it stands on, and says a cause only where a figure shows it:
how the runs ended opens the findings (`outcome`), a level with failures is explained by its
failures (`failures`), and a TTFT that grows is put down to the server's queue only where the
server's own metrics show requests waiting there (`levels.server_queue`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ..levels.client_side import shown_past
from ..levels.server_queue import queued
from ..number_text import signed_pct
from .curve import column, value_text
from .failures import kept
from .outcome import RunOutcome, lost_levels, unreached
from .saturation import Saturation, SaturationRule, level_point


def _pct(x: float) -> str:
    return signed_pct(x, "n/a")


def _figure(x: float) -> str:
    """A throughput as sentences write it: whole units, or 3 significant figures below 100
    (requests/s)."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}"


def _s(seconds: float) -> str:
    if seconds != seconds:
        return "n/a"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def ttft_growth(curve: pd.DataFrame, noun: str) -> str:
    """How TTFT p99 grows from the lowest to the highest level of `curve` (the levels kept), when it
    at least doubles: the figures, then the server's queue at the highest level where its metrics
    say (requests waiting there, or none), and whether the client was late at either end ("" when
    it does not double)."""
    ttft = column(curve, "ttft_p99_mean")
    if len(curve) < 2 or not (ttft[0] > 0 and ttft[-1] == ttft[-1] and ttft[-1] / ttft[0] >= 2):
        return ""
    users = column(curve, "value")
    low, high = value_text(users[0]), value_text(users[-1])
    text = (
        f"TTFT p99 grows {ttft[-1] / ttft[0]:.1f}x, from {_s(ttft[0])} at {low} to {_s(ttft[-1])} "
        f"at {high} {noun}"
    )
    waiting = column(curve, "server_waiting_mean")[-1]
    queue_time = column(curve, "server_queue_time_mean")[-1]
    shown = []
    if waiting == waiting:
        shown.append(f"{waiting:,.1f} requests waiting on average (vllm:num_requests_waiting)")
    if queue_time == queue_time:
        shown.append(f"a mean queue time of {_s(queue_time)} (vllm:request_queue_time_seconds)")
    verdict = queued(waiting, queue_time, column(curve, "ttft_p50_mean")[-1])
    if verdict:
        text += (
            f"; at {high} the server's metrics show {' and '.join(shown)}: requests wait in its "
            "queue before their first token"
        )
    elif verdict is not None:
        text += f"; the server's metrics show no queue at {high} ({' and '.join(shown)})"
    if "client_late" in curve and curve["client_late"].iloc[[0, -1]].astype(bool).any():
        text += " (the client was late there: those TTFTs are its reading, see below)"
    return text + "."


def findings(
    curve: pd.DataFrame,
    sat: Saturation,
    n_runs: int,
    rule: SaturationRule = SaturationRule(),
    outcomes: Sequence[RunOutcome] = (),
) -> list[str]:
    """Key findings of one series as sentences built from its numbers: how its runs ended
    (`outcomes`), throughput and latency from the levels `sat` kept, then every level with
    failures, then the checks on the whole curve. The levels are named as `sat.axis` says
    (users, or requests/s)."""
    noun = sat.axis.noun
    name, unit = rule.throughput.column, rule.throughput.unit
    more = sat.axis.more
    full = (
        curve[~np.isnan(column(curve, f"{name}_mean"))].sort_values("value").reset_index(drop=True)
    )
    curve = kept(full, sat.failed)
    out: list[str] = [text for o in outcomes for text in o.sentences()]
    if sat.peak is None:
        if sat.failed:
            return (
                out
                + [
                    f"Every tested level {sat.left_out_above}: no peak, "
                    "saturation point or recommendation is given."
                ]
                + [f.sentence(rule.max_failed_share) for f in sat.failed]
            )
        return out + [
            "No level has a measured throughput: every level either failed or ended before its warm-up."
        ]
    top = level_point(curve, len(curve) - 1, name)
    if not sat.axis.ladder:  # a trace replay: its load is the trace's, not a step on a ladder
        out.append(
            f"The replay served {_figure(top.tok_per_s)} {unit} over its measured window "
            f"({value_text(top.value)} {noun}); a trace's load is its own, so where throughput "
            "saturates is not tested: the replay over time says when the server fell behind, and "
            "a faster replay (--trace-speed) or a concurrency ladder (--levels) finds the knee."
        )
    elif sat.saturated and sat.saturation is not None:
        s = sat.saturation
        text = (
            f"Throughput saturates at ~{value_text(s.value)} {noun}: {_figure(s.tok_per_s)} {unit} there, against "
            f"a peak of {_figure(sat.peak.tok_per_s)} {unit} at {value_text(sat.peak.value)}"
        )
        cost = sat.past_saturation
        if (
            cost is not None
            and cost.e2e_p99_from == cost.e2e_p99_from
            and cost.e2e_p99_change > 0.05
        ):
            text += (
                f"; more {more} only adds latency (p99 E2E {_s(cost.e2e_p99_from)} at {value_text(cost.from_value)} "
                f"→ {_s(cost.e2e_p99_to)} at {value_text(cost.to_value)}, {_pct(cost.e2e_p99_change)}, for "
                f"{_pct(cost.throughput_change)} throughput)."
            )
        else:
            text += f"; more {more} adds no throughput."
        out.append(text)
    else:
        prev = level_point(curve, len(curve) - 2, name) if len(curve) > 1 else None
        gain = (
            f", {_pct(top.tok_per_s / prev.tok_per_s - 1)} over {value_text(prev.value)}"
            if prev and prev.tok_per_s
            else ""
        )
        missing = [lv for lv in unreached(outcomes) if lv >= top.value]
        if top.value == full["value"].iloc[-1] and missing:
            out.append(
                f"Throughput is still rising at the highest level reached ({value_text(top.value)} {noun}: "
                f"{_figure(top.tok_per_s)} {unit}{gain}), but the test did not finish its ladder "
                f"({', '.join(value_text(lv) for lv in missing)} {noun} not run to their end), so "
                "where throughput saturates is not known: run the whole ladder first."
            )
        elif top.value == full["value"].iloc[-1]:
            out.append(
                f"Throughput is still rising at the highest tested level ({value_text(top.value)} {noun}: "
                f"{_figure(top.tok_per_s)} {unit}{gain}): not saturated within the tested levels; test higher "
                f"{more}."
            )
        else:
            out.append(
                f"Throughput is still rising at the highest level kept ({value_text(top.value)} {noun}: "
                f"{_figure(top.tok_per_s)} {unit}{gain}); the levels above it "
                f"{sat.left_out_above}, so where "
                "throughput saturates is not known."
            )
    if sat.decision is not None:
        out.append(sat.decision_text)
    if sat.scaling is not None and sat.scaling.ratio == sat.scaling.ratio:
        sc = sat.scaling
        mean, users = column(curve, f"{name}_mean"), column(curve, "value")
        a, b = (mean[users == lv] for lv in (sc.from_value, sc.to_value))
        detail = [f"{_figure(a[0])} → {_figure(b[0])} {unit}"] if len(a) and len(b) else []
        detail += [sc.note()] if sc.substituted else []
        out.append(
            f"Throughput scales {sc.ratio:.1f}x from {value_text(sc.from_value)} to "
            f"{value_text(sc.to_value)} {noun}" + (f" ({'; '.join(detail)})." if detail else ".")
        )
    growth = ttft_growth(curve, noun)
    if growth:
        out.append(growth)
    if not sat.failed:
        out.append(
            f"100% success at every tested level (up to {value_text(full['value'].iloc[-1])} {noun})."
        )
    out.extend(f.sentence(rule.max_failed_share) for f in sat.failed)
    cov = column(curve, f"{name}_cov")
    curve = full  # the checks below are about every level
    achieved = column(curve, "achieved_concurrency_mean")
    users = column(curve, "value")
    # a level left out for its failures is explained by them (its own finding), not by the client,
    # and one a load worker was lost during by that loss (its run's finding)
    explained = np.isin(users, [f.value for f in sat.failed if f.excluded])
    explained |= np.isin(users, sorted(lost_levels(outcomes)))
    short = (
        np.flatnonzero((achieved < 0.9 * users) & ~explained)
        if not sat.axis.open_loop
        else np.array([], int)
    )
    if short.size:
        i = int(short[0])
        out.append(
            f"Achieved concurrency fell short of the requested one at {short.size} level(s), first at "
            f"{value_text(users[i])} ({achieved[i]:.1f} in flight on average): the client did not keep every user's "
            "request in flight, so those levels measure a lighter load than their label."
        )
    if "client_late" in curve and curve["client_late"].astype(bool).any():
        late = curve.loc[curve["client_late"].astype(bool), "value"]
        out.append(
            f"The client was late at {len(late)} of {len(curve)} level(s) ({', '.join(value_text(u) for u in late)} "
            f"{noun}): chunks came together in its reads or a load process waited for a CPU, so TTFT and "
            "ITL there are the client's reading, and throughput may be held back by the client; give the "
            "client CPUs of its own (or more workers) and repeat."
        )
    exact = column(curve, "prompt_exact_share_mean")
    if np.any(exact < 0.99):
        out.append(
            f"Prompt lengths were not exact: as few as {shown_past(np.nanmin(exact) * 100, 99, 1)}% "
            "of requests got the requested prompt token count."
        )
    cexact = column(curve, "completion_exact_share_mean")
    if np.any(cexact < 0.99):
        out.append(
            f"Output lengths were not exact: as few as {shown_past(np.nanmin(cexact) * 100, 99, 1)}% "
            "of requests produced the requested number of tokens (the server may ignore "
            "min_tokens/ignore_eos)."
        )
    missing_usage = np.nansum(column(curve, "usage_missing_mean"))
    if missing_usage > 0:
        out.append(
            f"The server sent no token usage for {missing_usage:,.0f} measured request(s) (mean "
            "per run, summed over levels); their requested token counts were used for throughput."
        )
    if n_runs >= 2 and not np.all(np.isnan(cov)):
        worst = float(np.nanmax(cov))
        word = "low" if worst < 0.05 else "moderate" if worst < 0.15 else "high"
        out.append(
            f"Run-to-run variation of throughput is {word} across {n_runs} runs: CoV at most {worst * 100:.1f}%."
        )
    elif n_runs < 2:
        out.append(
            "Single run: no confidence intervals; repeat the test (n ≥ 3) to tell real differences from noise."
        )
    return out
