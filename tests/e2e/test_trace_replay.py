"""`vllm-load run --trace` end to end against the simulator: requests leave on schedule, each
with the trace's lengths and shared prompt blocks, so the server's prefix cache sees the reuse
the trace's hash_ids imply and nothing more; the same through a master and two workers; the
other published formats replay; a malformed trace is one line naming its file and line.

The 60 s sample (`sample:mooncake_60s`: bursts, shared hash_ids) is replayed at its own speed,
so a test lasts about a minute; on the simulator at --time-scale 0.1 a request takes tens of
milliseconds, so the replay is the client's schedule, not a server's backlog. That whole minute
in one process, and through a master and two workers at twice its speed, are in the timing job
(`pytest -m timing`), with the 5 ms and the 2 % between the client's and the server's tokens per
window; the default suite replays the sample through a master and two workers at four times its
speed beside other tests, with every check but those tolerances.
"""

import json
import os

import numpy as np
import pandas as pd
import pytest
from support.runhelpers import (
    client_flags,
    load_run_files,
    only_run_dir,
    run_vllm_load,
    skip_where_flagged,
)

from vllm_load.analysis.levels.server_side import read_server_metrics
from vllm_load.analysis.replay.read import Replay, read_replays
from vllm_load.analysis.replay.server_rate import NOT_SCRAPED
from vllm_load.analysis.replay.windows import ReplayWindow
from vllm_load.client import steal
from vllm_load.run.outcomes import EXIT_CODES
from vllm_load.run.worker_loss import MISSING_HEARTBEATS
from vllm_load.sim.child import SimulatorProcess

#: the simulator stands in for a server on other machines, but here it shares the client's two
#: cores: its bursts of prompt processing held a load process's wake-up past 5 ms at p99 (p99
#: 3.9-4.9 ms over 4 runs at its own priority, 1.0-3.2 ms at nice 19, master and 2 workers)
SERVER_NICE = 19
#: ... so on a busy machine it starts slowly: at load ~6 (two suites side by side) one did not
#: answer /health within the default 30 s, and the three tests sharing it errored
SERVER_START_S = 120.0

LATE_P99 = 0.005  # seconds: the "sent within 5 ms of schedule at p99"
#: lateness within milliseconds: no other test's load beside it (tests/conftest.py). Even so, on
#: these VMs one replay in four or five missed the 5 ms p99 (a fresh clone's .ci/run: 5.65 ms),
#: its late sends finding their process idle: the host had taken its CPU (client/steal.py). Each
#: such send records that steal (`stolen_s`), and the replay's p99 without them must hold
on_schedule = pytest.mark.alone


def replay(tmp_path, sim, *args, expect: int | None = 0):
    proc = run_vllm_load(
        "run", "--host", sim.url, "--out", str(tmp_path), "--max-in-flight", "64",
        "--metrics-interval", "0.5", *args, timeout=300, expect=expect,
    )  # fmt: skip
    run_dir = only_run_dir(tmp_path)
    requests, steps, run, _ = load_run_files(run_dir)
    return proc, run_dir, requests, steps, run


def server_counters(run_dir: str) -> dict[str, float]:
    """The server's counters over the run: last scrape minus first (the run starts at 0)."""
    scraped = pd.read_csv(os.path.join(run_dir, "server_metrics.csv"))
    names = ("prefix_cache_hits", "prefix_cache_queries", "prompt_tokens_total")
    return {n: float(scraped[n].iloc[-1] - scraped[n].iloc[0]) for n in names}


def check_replay(requests: pd.DataFrame, steps: pd.DataFrame, run: dict, run_dir: str) -> Replay:
    trace = run["trace"]
    assert run["outcome"] == "completed"
    assert list(steps["kind"]) == ["trace"] and len(requests) == trace["requests"]
    assert sorted(requests["trace_index"]) == list(range(trace["requests"]))  # each once
    assert requests["ok"].all() and (requests["task"] == "trace").all()
    # exact lengths: what the server counted is what the trace asked
    assert (requests["prompt_tokens"] == requests["requested_prompt_tokens"]).all()
    assert (requests["completion_tokens"] == requests["requested_completion_tokens"]).all()
    late = requests["queued_s"].to_numpy(np.float64)
    stolen = requests["stolen_s"].to_numpy(np.float64)
    print("lateness p50/p99/max ms:", np.percentile(late, [50, 99]) * 1000, late.max() * 1000)
    print("sends 1 ms late or more (ms late, ms the host took):", list(zip(
        np.round(late[late >= steal.LATE] * 1000, 2), stolen[late >= steal.LATE] * 1000)))  # fmt: skip
    # each send 1 ms late or more records the host's steal meanwhile, and none sent sooner does
    # (queued_s is rounded to 0.1 µs in the CSV)
    assert not np.isnan(stolen[late >= steal.LATE + 1e-6]).any()
    assert np.isnan(stolen[late < steal.LATE - 1e-6]).all()
    server = server_counters(run_dir)
    print("server:", server, "trace:", trace)
    assert (
        server["prompt_tokens_total"] == trace["prompt_tokens"] == requests["prompt_tokens"].sum()
    )
    predicted = trace["predicted_cached_tokens"]
    assert predicted > 0.3 * trace["prompt_tokens"]  # the sample reuses blocks
    assert abs(server["prefix_cache_hits"] / predicted - 1) <= 0.05
    # per window along the trace, the client's throughput against the server's own counters
    scraped = read_server_metrics(os.path.join(run_dir, "server_metrics.csv")).frame
    (replay,) = read_replays(requests, steps, run, scraped)
    assert replay.window_s == run["settings"]["trace_window"]
    on_time = replay.lateness
    print(on_time.sentence())
    assert on_time.p99 == pytest.approx(np.percentile(late, 99))
    ratios = [w.server.output_ratio for w in replay.windows]
    print("per-window client/server generated tok/s:", [round(r, 4) for r in ratios])
    assert len(ratios) >= 5
    # a window not compared says why, from the run's own scrapes (late or slow on a busy host)
    assert all(w.server.why_not not in ("", NOT_SCRAPED) for w in uncompared(replay))
    return replay


def windows_off(replayed: Replay) -> list[str]:
    """The compared windows whose client tok/s is more than 2 % off the server's counters."""
    return [
        f"{w.start_s:.1f} s: {w.server.output_ratio:.4f}"
        for w in replayed.windows
        if w.server.output_ratio == w.server.output_ratio and abs(w.server.output_ratio - 1) > 0.02
    ]


def uncompared(replayed: Replay) -> list[ReplayWindow]:
    return [w for w in replayed.windows if w.server.output_ratio != w.server.output_ratio]


def compared_each_window(replayed: Replay) -> str:
    """ "" when every window but the last, short one was compared with the server's counters;
    else the run's own reasons for those it could not compare (its scrapes late or slow: a busy
    load process), for the test to skip with."""
    missed = uncompared(replayed)
    if len(missed) <= 1:
        return ""
    return "; ".join(
        f"window at {w.start_s:.1f} s not compared: {w.server.why_not}" for w in missed
    )


def check_summary(printed: str, replayed: Replay) -> None:
    """The run's own summary says whether it kept to the schedule (and why not) and what the
    cache found."""
    assert "s into the trace" in printed
    summary = printed[printed.index("Trace replay:") :]
    if replayed.lateness.kept_up:
        # a send the host stalled may be late beside a p99 within the limit: nothing to explain
        assert "- The client kept up with the trace: p99 send lateness" in summary
    else:
        assert "- The client could not keep up with the trace: p99 send lateness" in summary
        if replayed.lateness.stolen:
            assert "while the machine's hypervisor took their load process's CPU" in summary
            assert "the host stalled as on time, p99 send lateness is " in summary
    assert "Prefix cache: the server's prefix cache hit" in summary and "within 5%" in summary


def skip_for_starved_workers(run: dict, run_dir: str) -> None:
    """A worker the master found missing its heartbeats is lost, and the run says so (exit 3).
    On a busy machine a worker starved of CPU misses them (workers lost with a load process
    waiting 883 ms/s for a CPU, at load 21): skipped, saying so, only where every loss was of
    heartbeats and the run found its client waiting for a CPU; any other loss fails."""
    lost = run["workers_lost"]
    flagged = client_flags(run_dir)
    why = f"workers lost: {[(w['worker'], w['found']) for w in lost]}; client flags: {flagged}"
    print(why)
    assert lost and all(w["found"] == MISSING_HEARTBEATS for w in lost), why
    assert any("run-queue wait" in f for f in flagged.values()), why
    pytest.skip(f"the host starved the load workers: {why}")


def held_to_schedule(replayed: Replay) -> bool:
    """Within 5 ms at p99, or over it only by sends the host stalled (the summary says so)."""
    on_time = replayed.lateness
    return bool(on_time.kept_up or (on_time.stolen and on_time.p99_without_steal <= LATE_P99))


# the whole minute at its own speed, in one process: the default suite replays the same trace
# through a master and two workers (below), with every check of this one but its length
@pytest.mark.timing
@on_schedule
def test_a_60_s_mooncake_trace_replays_on_schedule_with_its_prefix_reuse(tmp_path):
    with SimulatorProcess(
        "--time-scale", "0.1", nice=SERVER_NICE, startup_timeout=SERVER_START_S
    ) as sim:
        proc, run_dir, requests, steps, run = replay(
            tmp_path, sim, "--trace", "sample:mooncake_60s", "--trace-window", "10"
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    replayed = check_replay(requests, steps, run, run_dir)
    assert not windows_off(replayed)
    assert run["trace"]["duration"] > 55  # the whole minute, at its own speed
    check_summary(proc.stdout, replayed)
    assert held_to_schedule(replayed), replayed.lateness
    if why := compared_each_window(replayed):
        pytest.skip(why)


def replay_through_two_workers(tmp_path, speed: str, window: str, *more: str):
    """The sample replayed through a master and two workers at `speed`, checked as every replay
    is (check_replay, check_summary) and for each worker's share of the schedule."""
    with SimulatorProcess(
        "--time-scale", "0.1", nice=SERVER_NICE, startup_timeout=SERVER_START_S
    ) as sim:
        proc, run_dir, requests, steps, run = replay(
            tmp_path, sim, "--trace", "sample:mooncake_60s", "--workers", "2",
            "--trace-speed", speed, "--trace-window", window, *more, expect=None,
        )  # fmt: skip
    if proc.returncode == EXIT_CODES["workers_lost"]:
        skip_for_starved_workers(run, run_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    replayed = check_replay(requests, steps, run, run_dir)
    check_summary(proc.stdout, replayed)
    shares = requests.groupby("worker")["trace_index"].apply(lambda s: sorted(s % 2))
    assert len(shares) == 2  # every other request each: the shares interleave
    assert {tuple(set(s)) for s in shares} == {(0,), (1,)}
    return replayed, run_dir


# the tolerances of the replay through workers, alone: twice as fast, so each worker's half of the
# schedule is as dense as the whole at 1x. Beside two busy loops it failed once in three tries
# (2026-11-29, its reason not kept), and under coverage a compared window read 3.5 % apart
@pytest.mark.timing
@on_schedule
def test_a_master_and_two_workers_keep_to_the_schedule(tmp_path):
    replayed, run_dir = replay_through_two_workers(tmp_path, "2", "5")
    # a send backlog on a starved client moves tokens across a window's edges: off by more than
    # 2 % only where the run found its client busy (3.5 % under coverage beside load, 2026-11-29)
    misses = []
    if off := windows_off(replayed):
        misses.append(f"client/server tok/s more than 2 % apart in windows {off}")
    if not held_to_schedule(replayed):
        misses.append(f"send lateness over 5 ms at p99: {replayed.lateness.sentence()}")
    flags = client_flags(run_dir) if misses else {}
    skip_where_flagged(" | ".join(misses), flags, "the replay's timing")
    if why := compared_each_window(replayed):
        pytest.skip(why)


# the default suite's, beside other tests: what the workers sent and recorded, each its share,
# and what the run says of its own lateness (check_summary), not a tolerance on it (above); the
# whole sample, four times as fast (15 s), in 3 s windows: a window not compared with the
# server's counters names the reason its scrapes gave (check_replay; a 0.25 s interval, as 0.5 s
# left windows this short all uncompared)
def test_a_master_and_two_workers_each_take_their_share_of_the_schedule(tmp_path):
    replay_through_two_workers(tmp_path, "4", "3", "--metrics-interval", "0.25")


@pytest.fixture(scope="module")
def formats_sim():
    """One simulator for the tests below, which judge what the client sent and recorded (each
    request's lengths, its outcome), never the server's counters: a simulator's start is
    seconds of each test."""
    with SimulatorProcess(
        "--time-scale", "0.1", nice=SERVER_NICE, startup_timeout=SERVER_START_S
    ) as sim:
        yield sim


@pytest.mark.parametrize("sample", ["burstgpt_sample", "azure_sample"])
def test_the_other_published_formats_replay(tmp_path, sample, formats_sim):
    proc, run_dir, requests, steps, run = replay(
        tmp_path, formats_sim, "--trace", f"sample:{sample}", "--trace-duration", "10",
        "--trace-speed", "5",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    trace = run["trace"]
    assert trace["format"] == sample.split("_")[0] and 0 < trace["requests"] == len(requests)
    assert trace["duration"] <= 2.0  # 10 s of the trace, five times as fast
    assert requests["ok"].all()
    assert (requests["prompt_tokens"] == requests["requested_prompt_tokens"]).all()


def test_a_malformed_trace_line_is_one_error_naming_file_and_line(tmp_path, formats_sim):
    path = tmp_path / "trace.jsonl"
    good = {"timestamp": 0, "input_length": 300, "output_length": 20, "hash_ids": [1]}
    path.write_text(json.dumps(good) + "\n" + '{"timestamp": 5, "input_length": "x"}\n')
    proc = run_vllm_load(
        "run", "--host", formats_sim.url, "--trace", str(path), "--out", str(tmp_path / "runs"),
        expect=2,
    )  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and f"{path}:2:" in errors[0], proc.stderr
    assert not (tmp_path / "runs").exists()  # refused before any run directory or load


def test_a_trace_with_levels_or_rates_is_refused(tmp_path):
    for extra in (("--levels", "4"), ("--rates", "2")):
        proc = run_vllm_load(
            "run", "--host", "http://127.0.0.1:9", "--trace", "sample:mooncake_60s", *extra,
            expect=2,
        )  # fmt: skip
        assert "--trace replays a trace's own schedule" in proc.stderr
