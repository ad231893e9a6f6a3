"""The built-in workloads beyond fixed lengths, end to end against the simulator: the shipped
dataset's conversations (history carried, prefix cache hit, exact output lengths) and exact
prompt and output lengths drawn from distributions."""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd
from support.runhelpers import load_run_files, only_run_dir, run_vllm_load

from vllm_load.analysis.levels.measure import level_metrics
from vllm_load.sim.child import SimulatorProcess


def test_dataset_conversations_carry_history_and_hit_the_prefix_cache(tmp_path):
    # no network is needed: the sample ships with the package, the simulator is local
    with SimulatorProcess(
        "--time-scale", "0.05", "--max-num-seqs", "16", "--enable-prompt-tokens-details"
    ) as sim:
        run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--dataset",
            "sample",
            "--dataset-max-prompt",
            "200",
            "--think-time",
            "0.05,0.2",
            "--levels",
            "4,8",
            "--requests-per-level",
            "40",
            "--warmup-requests",
            "4",
            "--metrics-interval",
            "0.2",
            "--out",
            str(tmp_path / "runs"),
        )
    run_dir = only_run_dir(tmp_path / "runs")
    requests, steps, run, _ = load_run_files(run_dir)
    assert run["outcome"] == "completed" and run["user_classes"] == {"DatasetUser": 1}
    assert run["settings"]["dataset"] == "sample" and run["prompts"] is None
    # the length filter counted first prompts with the server's /tokenize and skipped the long ones
    workload = run["workload"]["DatasetUser"]
    assert workload["skipped"].get("prompt over max_prompt", 0) > 0, workload
    assert workload["conversations"] + sum(workload["skipped"].values()) == 150
    assert requests["ok"].all(), requests["error_message"].dropna().tolist()
    assert set(requests["user_class"]) == {"DatasetUser"}
    assert set(requests["task"]) == {"dataset_conversation"}
    # every output length was asked for exactly (the file's reply lengths) and generated so
    assert (requests["completion_tokens"] == requests["requested_completion_tokens"]).all()
    assert requests["requested_completion_tokens"].nunique() > 10
    assert requests["requested_prompt_tokens"].isna().all()  # a dataset prompt is what it is
    # conversations of several turns; a later turn's prompt holds the earlier turns
    assert requests["turn"].max() >= 2
    later = requests[requests["turn"] >= 1]
    assert (later["prompt_tokens"] > 0).all()
    # the simulator's prefix cache holds the history of later turns (per request, and per level
    # from /metrics), and never a first turn's prompt beyond a shared template prefix
    assert (later["cached_tokens"].fillna(0) > 0).mean() > 0.9
    first = requests[requests["turn"] == 0]
    assert first["prompt_tokens"].max() <= 200 + 32  # (+ the chat template's own tokens)
    assert (first["cached_tokens"].fillna(0) < first["prompt_tokens"] / 2).all()
    metrics = level_metrics(requests, steps)
    assert (metrics["completion_exact_share"] == 1.0).all()

    report = tmp_path / "report.html"
    run_vllm_load("report", run_dir, "-o", str(report), "--quiet")
    html = report.read_text(encoding="utf-8")
    table = html[html.index('<table class="turns">') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr><td>(\d+)</td>(.*?)</tr>", table, re.S)
    cached = {int(turn): re.findall(r"<td>([^<]*)</td>", cells)[4] for turn, cells in rows}
    # (turns are numbered from 1 in the report)
    assert all(float(cached[turn].rstrip("%")) > 0 for turn in (2, 3)), cached
    server = html[html.index('<table class="server-levels">') :]
    rates = re.findall(
        r"<td>([\d.]+)% \([\d,]+ / [\d,]+\)</td>", server[: server.index("</table>")]
    )
    assert rates and max(float(r) for r in rates) > 0


def test_drawn_lengths_are_exact_per_request(tmp_path):
    with SimulatorProcess("--time-scale", "0.05", "--max-num-seqs", "16") as sim:
        run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--input-lengths",
            "uniform:64,400",
            "--output-lengths",
            "lognormal:24,10,min=4,max=80",
            "--levels",
            "4",
            "--requests-per-level",
            "60",
            "--warmup-requests",
            "2",
            "--out",
            str(tmp_path / "runs"),
        )
    requests, steps, run, _ = load_run_files(only_run_dir(tmp_path / "runs"))
    assert run["settings"]["input_lengths"] == "uniform:64,400"
    assert requests["ok"].all()
    asked_in = requests["requested_prompt_tokens"].to_numpy(np.float64)
    asked_out = requests["requested_completion_tokens"].to_numpy(np.float64)
    # drawn: spread over the range, every one sent exactly
    assert asked_in.min() >= 64 and asked_in.max() <= 400 and np.std(asked_in) > 50
    assert asked_out.min() >= 4 and asked_out.max() <= 80 and len(set(asked_out)) > 10
    assert (requests["prompt_tokens"] == requests["requested_prompt_tokens"]).all()
    assert (requests["completion_tokens"] == requests["requested_completion_tokens"]).all()
    metrics = level_metrics(requests, steps)
    assert (metrics["prompt_exact_share"] == 1.0).all()


def test_agentic_sessions_answer_tool_calls_after_the_tool_latency(tmp_path):
    """--agentic against the simulator (a tool call for half the turns): a turn follows only a
    reply that called tools, after a wait drawn from --tool-latency-ms, with the call and its
    results in its history, whose prefix the server's cache holds."""
    with SimulatorProcess(
        "--time-scale", "0.02", "--max-num-seqs", "16", "--enable-prompt-tokens-details"
    ) as sim:
        run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--agentic",
            "--agentic-turns",
            "4",
            "--tool-latency-ms",
            "uniform:10,50",
            "--tool-result-tokens",
            "32",
            "--input-tokens",
            "256",
            "--output-tokens",
            "16",
            "--levels",
            "3",
            "--requests-per-level",
            "30",
            "--warmup-requests",
            "3",
            "--out",
            str(tmp_path / "runs"),
        )
    run_dir = only_run_dir(tmp_path / "runs")
    requests, _, run, _ = load_run_files(run_dir)
    assert run["outcome"] == "completed" and run["user_classes"] == {"AgenticUser": 1}
    assert run["workload"]["AgenticUser"]["tool_latency_ms"] == "uniform:10,50"
    assert requests["ok"].all(), requests["error_message"].dropna().tolist()
    assert set(requests["task"]) == {"agentic_session"}
    assert requests["turn"].max() <= 3 and (requests["turn"] >= 1).sum() >= 5
    for _, session in requests.sort_values("turn").groupby("conversation"):
        turns = session["turn"].tolist()
        assert turns == list(range(len(turns)))
        # every turn but the last answered the tool calls of the one before, after its wait
        assert (session["tool_calls"].iloc[:-1] > 0).all(), session
        waits = session["tool_wait_s"].iloc[1:]
        assert ((waits >= 0.01) & (waits <= 0.05)).all(), session
        assert session["tool_wait_s"].isna().iloc[0]
        # the turn before is in the cache: its prompt, whole blocks of it
        before = session["prompt_tokens"].shift(1).iloc[1:]
        cached = session["cached_tokens"].iloc[1:]
        assert ((cached >= before - 16) & (cached <= before)).all(), session
        grown = session["prompt_tokens"].diff().iloc[1:]
        assert (grown > 32).all()  # the call, its result of 32 tokens and the template's tokens

    # sessions.csv: one row per session, its turns, tool calls, waits and idle share
    sessions = pd.read_csv(os.path.join(run_dir, "sessions.csv"))
    assert sorted(sessions["session"]) == sorted(requests["conversation"].unique())
    by_session = requests.groupby("conversation")
    turns = by_session.size()
    indexed = sessions.set_index("session").sort_index()
    assert (indexed["turns"] == turns.sort_index()).all()
    tools = indexed["tool_calls"]
    assert (tools == by_session["tool_calls"].sum().sort_index()).all() and tools.sum() > 0
    waited = sessions.dropna(subset=["tool_wait_s"])
    assert len(waited) == (turns > 1).sum()
    assert ((waited["idle_share"] > 0) & (waited["idle_share"] < 1)).all()
    assert np.allclose(waited["idle_share"], waited["tool_wait_s"] / waited["e2e"])
    assert (waited["cached_share"] > 0.3).all()  # the later turns' history was cached
    assert (sessions["ttft_by_turn"].str.count(";") + 1 == sessions["turns"]).all()

    report = tmp_path / "report.html"
    run_vllm_load("report", run_dir, "-o", str(report), "--quiet")
    html = report.read_text(encoding="utf-8")
    table = html[html.index('<table class="sessions">') :]
    cells = re.findall(r"<td>([^<]*)</td>", table[: table.index("</table>")])
    assert int(cells[0]) == len(sessions) and cells[5].endswith("%"), cells
    assert '<table class="turns">' in html  # TTFT by turn index, beside its chart


def test_agentic_fan_out_runs_subagents_beside_their_parent(tmp_path):
    """--fan-out 2 with every tool-calling turn fanning out (the simulator always calls a tool
    with --tool-choice required): each fan-out starts 2 subagent sessions that name their
    parent, run in parallel on their own connections, and end before the parent's next turn,
    whose tool results are their answers; a level of 2 users had more than 2 requests in
    flight, and the report's session section says so."""
    with SimulatorProcess("--time-scale", "0.02", "--max-num-seqs", "16") as sim:
        run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--agentic",
            "--tool-choice",
            "required",
            "--agentic-turns",
            "2",
            "--fan-out",
            "2",
            "--fan-out-share",
            "1",
            "--tool-latency-ms",
            "fixed:10",
            "--tool-result-tokens",
            "8",
            "--input-tokens",
            "128",
            "--output-tokens",
            "8",
            "--levels",
            "2",
            "--requests-per-level",
            "16",
            "--warmup-requests",
            "2",
            "--out",
            str(tmp_path / "runs"),
        )
    run_dir = only_run_dir(tmp_path / "runs")
    requests, _, run, _ = load_run_files(run_dir)
    assert run["workload"]["AgenticUser"]["fan_out"] == 2
    assert requests["ok"].all(), requests["error_message"].dropna().tolist()
    sessions = pd.read_csv(os.path.join(run_dir, "sessions.csv"), keep_default_na=False)
    parents = sessions[sessions["depth"] == 0].set_index("session")
    children = sessions[sessions["depth"] == 1]
    assert len(children) >= 2 and set(children["parent"]) <= set(parents.index)
    assert (sessions["depth"] <= 1).all() and (children["subagents"] == 0).all()
    by_parent = children.groupby("parent")
    assert (by_parent.size() == 2).all()  # (at most 2 turns: one fan-out per parent)
    subagent_rows = requests[requests["parent"].fillna("") != ""]
    assert set(subagent_rows["task"]) == {"subagent"}
    for parent, kids in by_parent:
        turns = requests[requests["conversation"] == parent].sort_values("turn")
        if len(turns) < 2:
            continue  # (cut off by the end of the run)
        assert parents.loc[parent, "subagents"] == 2
        fanned, after = turns.iloc[0], turns.iloc[1]
        # the subagents start when the fanning turn ends and end before the parent goes on
        assert (kids["start_ts"] >= fanned["end_ts"] - 1e-3).all()
        assert (kids["end_ts"] <= after["start_ts"] + 1e-3).all()
        assert after["tool_wait_s"] >= (kids["end_ts"].max() - kids["start_ts"].min()) - 0.01
        # they ran in parallel: their spans overlap
        assert kids["start_ts"].max() < kids["end_ts"].min()

    report = tmp_path / "report.html"
    run_vllm_load("report", run_dir, "-o", str(report), "--quiet")
    html = report.read_text(encoding="utf-8")
    assert f"{len(children)} were subagent sessions" in html
    table = html[html.index('<table class="flight">') :]
    cells = re.findall(r"<td>([^<]*)</td>", table[: table.index("</table>")])
    assert cells[1] == "2" and int(cells[3]) > 2, cells  # 2 users, more requests in flight


def test_agentic_trace_replays_sessions_and_subagents_in_order(tmp_path):
    """--agentic --trace of an agentic trace (tests/data/agentic_trace.jsonl): every turn of its
    3 sessions and 2 subagents is sent once, with the trace's output lengths, each turn after
    the one before it ended plus its tool latency, a subagent after its parent's turn, and the
    parent's next turn after its subagents."""
    trace = os.path.join(os.path.dirname(__file__), "..", "data", "agentic_trace.jsonl")
    with SimulatorProcess("--time-scale", "0.02", "--max-num-seqs", "16") as sim:
        run_vllm_load(
            "run",
            "--host",
            sim.url,
            "--agentic",
            "--trace",
            trace,
            "--out",
            str(tmp_path / "runs"),
        )
    run_dir = only_run_dir(tmp_path / "runs")
    requests, _, run, _ = load_run_files(run_dir)
    assert requests["ok"].all(), requests["error_message"].dropna().tolist()
    assert run["trace"]["requests"] == 9 and run["trace"]["output_tokens"] == 104
    assert len(requests) == 9 and set(requests["task"]) == {"agentic_trace"}
    assert sorted(requests["completion_tokens"]) == sorted([16, 12, 12, 10, 10, 8, 10, 14, 12])
    sessions = pd.read_csv(os.path.join(run_dir, "sessions.csv"), keep_default_na=False)
    assert sorted(sessions["turns"]) == [1, 1, 2, 2, 3]
    assert sorted(sessions["depth"]) == [0, 0, 0, 1, 1]
    rows = {
        (s, int(t)): row for (s, t), row in requests.set_index(["conversation", "turn"]).iterrows()
    }
    top = sessions.set_index("session")
    a1 = top[top["subagents"] == 2].index[0]
    kids = sessions[sessions["parent"] == a1]["session"].tolist()
    assert rows[(a1, 1)]["start_ts"] >= rows[(a1, 0)]["end_ts"] + 0.12 - 0.005
    for kid in kids:
        assert rows[(kid, 0)]["start_ts"] >= rows[(a1, 1)]["end_ts"] - 0.005
        assert (
            rows[(a1, 2)]["start_ts"]
            >= max(rows[k]["end_ts"] for k in rows if k[0] == kid) + 0.05 - 0.005
        )
