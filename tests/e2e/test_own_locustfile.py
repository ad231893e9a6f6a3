"""A locustfile written from docs/workload.md ("Your own workload") runs as vllm-load runs the
built-in test: headless in one process and through a master with two workers, its records
labelled with persona, task, conversation and turn, and the report breaking figures down by
them."""

from __future__ import annotations

import os
import re

import pytest
from support import ROOT
from support.runhelpers import load_run_files, only_run_dir, run_vllm_load

from vllm_load.sim.child import SimulatorProcess


def readme_locustfile() -> str:
    """The first Python block of docs/workload.md's "Your own workload" section."""
    with open(os.path.join(ROOT, "docs", "workload.md"), encoding="utf-8") as fh:
        text = fh.read()
    section = text[text.index("## Your own workload") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "docs/workload.md's 'Your own workload' section has no Python block"
    return match.group(1)


# in one process the same users run as through workers (test_locustfiles runs personas.py so);
# the single-process variant of this one is in the slow set
@pytest.mark.parametrize("workers", [pytest.param(0, marks=pytest.mark.slow), 2])
def test_readme_locustfile_runs_with_personas_and_conversations(tmp_path, workers):
    locustfile = tmp_path / "my_workload.py"
    locustfile.write_text(readme_locustfile(), encoding="utf-8")
    with SimulatorProcess("--time-scale", "0.05", "--max-num-seqs", "16") as sim:
        run_vllm_load(
            "run",
            "-f",
            str(locustfile),
            "--host",
            sim.url,
            "--workers",
            str(workers),
            "--levels",
            "4,12",
            "--requests-per-level",
            "12",
            "--warmup-requests",
            "4",
            "--out",
            str(tmp_path / "runs"),
            timeout=300,
        )
    run_dir = only_run_dir(tmp_path / "runs")
    requests, steps, run, _stats = load_run_files(run_dir)
    assert run["outcome"] == "completed" and list(steps["stop_reason"]) == ["target_reached"] * 2
    assert run["user_classes"] == {"Chatter": 3, "Summariser": 1}
    assert run["prompts"] is None  # no user class sends calibrated exact-length prompts
    assert run["client"]["mode"] == ("master" if workers else "local")
    if workers:
        assert requests["worker"].nunique() == 2
    assert requests["ok"].all(), requests.loc[requests["ok"] != 1, "error_message"].tolist()

    by_class = requests.groupby("user_class")
    assert set(by_class.groups) == {"Chatter", "Summariser"}
    assert set(requests.loc[requests["user_class"] == "Chatter", "task"]) == {"two_turns"}
    assert set(requests.loc[requests["user_class"] == "Summariser", "task"]) == {"summarise"}
    summaries = requests[requests["user_class"] == "Summariser"]
    assert summaries["conversation"].isna().all() and (summaries["turn"] == 0).all()

    chats = requests[requests["user_class"] == "Chatter"]
    assert chats["conversation"].notna().all() and set(chats["turn"]) == {0, 1}
    # the second turn carries the first turn's question and the server's answer as history
    turns = chats.pivot_table(index="conversation", columns="turn", values="prompt_tokens")
    both = turns.dropna()
    assert len(both) >= 5, turns
    first_reply = chats[chats["turn"] == 0].set_index("conversation")["completion_tokens"]
    assert (both[1] > both[0] + first_reply.reindex(both.index)).all()
    # a conversation's two turns are one user's, in order, with the think time between them
    for _, group in chats.groupby("conversation"):
        if len(group) == 2:
            first, second = group.sort_values("turn").itertuples()
            assert second.start_ts >= first.end_ts + 0.4, group
            assert second.queued_s < 0.4, group  # the think time is not client-side queueing

    report = tmp_path / "report.html"
    run_vllm_load("report", run_dir, "-o", str(report), "--quiet")
    html = report.read_text(encoding="utf-8")
    assert "Per persona" in html and "Per conversation turn" in html
    persona_rows = re.findall(r'<td class="l">(Chatter|Summariser)</td>', html)
    counts = requests.groupby(["level", "user_class"]).size()
    assert persona_rows.count("Chatter") == 2 and persona_rows.count("Summariser") == 2, counts
