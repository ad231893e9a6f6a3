"""The diagnosis-accuracy harness (bench/diagnosis_accuracy.py) runs its CI slice end to end:
the simulator's truth is read for every level, the confusion table is printed and results.json
holds every case. Whether the verdicts are right is the harness's finding, not asserted here
(the rules decide it; bench/README.md records the full run's table)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import ROOT

from vllm_load.analysis.diagnosis.kinds import KINDS

BENCH = os.path.join(ROOT, "bench", "diagnosis_accuracy.py")


def harness(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, BENCH, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@pytest.mark.timeout(200)
def test_the_slice_reads_the_truth_prints_the_table_and_writes_every_case(tmp_path):
    proc = harness("--slice", "--keep-runs", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    header = "told?     true kind"
    assert header in out and "wrong+advice" in out, out
    table = out[out.index(header) :].splitlines()
    assert any(line.startswith("told      all ") for line in table), out
    assert any(line.startswith("not told  all ") for line in table), out
    assert (
        "wrong verdicts with advice: " in out and "right when told, levels a limit held: " in out
    ), out
    assert "right when not told, levels a limit held: " in out, out

    with open(tmp_path / "results.json", encoding="utf-8") as fh:
        results = json.load(fh)
    cases = results["cases"]
    assert [(c["regime"], c["told"]) for c in cases] == [
        ("slice-budget-40", True),
        ("slice-budget-40", False),
        ("slice-kv", True),
        ("slice-kv", False),
    ]
    truths = {}
    for case in cases:
        assert case["error"] == "", case
        regime = next(r for r in results["regimes"] if r["name"] == case["regime"])
        assert [lv["value"] for lv in case["levels"]] == regime["levels"], case
        for lv in case["levels"]:
            assert lv["verdict"] in KINDS, lv
            assert lv["outcome"] in ("right", "undetermined", "missed", "wrong", "unscored"), lv
            truth = lv["truth"]
            assert truth is not None and truth["steps"] > 0, lv  # scraped over its window
            start, end = lv["window"]
            assert 0 < start < end, lv
            truths[case["regime"], case["told"], lv["value"]] = truth
        # one run judged both ways: told, its run.json holds the regime's flags; not told, a
        # copy whose run.json holds none (--server-args changes nothing in the test)
        side = "told" if case["told"] else "not-told"
        with open(tmp_path / "runs" / f"{case['regime']}-{side}" / "run.json") as fh:
            given = json.load(fh)["settings"]["server_args"]
        assert ("--max-num-seqs" in given) if case["told"] else given == "", (side, given)
    for (regime, told, value), truth in truths.items():  # the same run, the same truth
        assert truth == truths[regime, not told, value], (regime, value)
    # the simulator's own account of what held the queue: past the knee each limit holds in
    # most steps (the budget of 40 tokens at 24 users, 4 requests' KV at 16); at 2 users nobody
    # is blocked (2 users' 256-token prompts may still spend the 40-token budget: at_limit)
    for told in (True, False):
        budget = truths["slice-budget-40", told, 24]
        assert "max_num_batched_tokens" in budget["kinds"] and budget["waited"] >= 0.5, budget
        kv = truths["slice-kv", told, 16]
        assert kv["kinds"] == ["kv_cache"] and kv["blocked"]["kv_cache"] >= 0.5, kv
        for regime in ("slice-budget-40", "slice-kv"):
            low = truths[regime, told, 2]
            assert low["kinds"][0] in ("none", "borderline", "at_limit"), low  # waited < 50 %
    # the table counts exactly the scored levels
    scored = sum(lv["outcome"] != "unscored" for c in cases for lv in c["levels"])
    counted = sum(row["n"] for side in results["confusion"].values() for row in side.values())
    assert counted == scored

    # the kept runs re-read with the same rules: the same verdicts, the same table, nothing started
    again = harness("--rejudge", str(tmp_path), "--out", str(tmp_path / "again"), timeout=60)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert " -> " not in again.stdout, again.stdout  # no level's verdict changed
    with open(tmp_path / "again" / "results.json", encoding="utf-8") as fh:
        rejudged = json.load(fh)
    assert rejudged["confusion"] == results["confusion"]
    assert [lv["verdict"] for c in rejudged["cases"] for lv in c["levels"]] == [
        lv["verdict"] for c in cases for lv in c["levels"]
    ]


def test_bad_arguments_are_one_line_and_exit_2(tmp_path):
    proc = harness("--cases", "0", "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2 and "--cases must be at least 1" in proc.stderr, proc.stderr
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "old").mkdir()
    proc = harness("--slice", "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "give a new --out" in proc.stderr
    proc = harness("--only", "(", "--list", timeout=60)  # argparse's usage, then the one line
    assert proc.returncode == 2 and "--only '(' is not a regular expression" in proc.stderr
    for args, says in (
        (("--only", "no-such-regime", "--list"), "no regime's name matches --only"),
        (("--rejudge", str(tmp_path / "runs")), "no readable results.json"),
    ):
        proc = harness(*args, "--out", str(tmp_path / "x"), timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.strip().count("\n") == 0 and says in proc.stderr, (args, proc.stderr)
    listed = harness("--list", "--only", "^0[45]-", "--out", str(tmp_path / "x"), timeout=60)
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert listed.returncode == 0 and names == ["04-mixed", "05-seqs"], listed.stdout
