"""`vllm-load tune --advice SOURCE`: a report's advice proved on the simulator (A as run against
B with the advice applied, twice each, compare's verdict), and every source or option it cannot
prove refused with one line before any server starts."""

from __future__ import annotations

import json
import sys

import pytest
from support.runhelpers import only_run_dir, run_vllm_load

from vllm_load.cli.main import main
from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run
from vllm_load.sim.child import SimulatorProcess, free_port
from vllm_load.user_values import SettingsError

SIM = f"{sys.executable} -m vllm_load sim --time-scale 0.1"
#: small and quick: the sequence cap of 2 saturates at 2-4 users, 8 does not up to 8
TEST = (
    "--levels",
    "1,2,4,8",
    "--input-tokens",
    "64",
    "--output-tokens",
    "32",
    "--requests-per-level",
    "8",
    "--warmup-requests",
    "2",
    "--ready-timeout",
    "30",
)


def diagnosis(**changes) -> dict:
    """A sequence-cap diagnosis as the report gives it: raise --max-num-seqs from 2 to 8."""
    return {
        "kind": "max_num_seqs",
        "value": 4.0,
        "sentence": "Throughput saturates at ~4 concurrent: running requests stay at the cap of "
        "2 while others wait for capacity.",
        "advice": [
            {
                "flag": "--max-num-seqs",
                "from": "2",
                "to": "8",
                "expected": "the knee moves from ~2 to ~8 concurrent while KV-cache usage "
                "stays below 90 %",
                "cost": "ITL grows with the batch",
            },
            {"flag": "more replicas", "from": None, "to": None, "expected": "x", "cost": "y"},
        ],
        "predicted_knee": 2.0,
        "advised_knee": 8.0,
        **changes,
    }


def write_summary(path, *series: dict) -> str:
    path.write_text(json.dumps({"format": 2, "series": list(series)}))
    return str(path)


def one_series(label: str = "sim-llama-8b", **changes) -> dict:
    return {"label": label, "model": "sim-llama-8b", "diagnosis": diagnosis(**changes)}


def advice_loop(tmp_path, runs: int) -> tuple[tuple[str, ...], str, str]:
    """`vllm-load tune --advice` on the simulator, `runs` runs a side: the command, its output,
    and the port its servers used. Checks what every loop shows whatever its verdict: both
    commands named before anything ran, the advice it cannot run left out, the runs A B A B."""
    port = free_port()
    source = write_summary(tmp_path / "r.summary.json", one_series())
    loop = (
        "tune",
        "--advice",
        source,
        "--server-cmd",
        f"{SIM} --port {port} --max-num-seqs 2",
        "--host",
        f"http://127.0.0.1:{port}",
        *TEST,
        "--runs",
        str(runs),
        "--out",
        str(tmp_path / "tunes"),
    )
    out = run_vllm_load(*loop, timeout=400).stdout
    # both commands, before anything ran; the advice it cannot run, named
    assert f"A (as run): {SIM} --port {port} --max-num-seqs 2" in out
    assert f"B (advised): {SIM} --port {port} --max-num-seqs 8" in out
    assert "left out: more replicas" in out
    assert out.index("B (advised)") < out.index("starting the server")
    # interleaved, A B A B, each run announced
    order = [line for line in out.splitlines() if line.endswith("starting the server")]
    assert [line.split("] ")[1].split(":")[0] for line in order] == [
        "A (max_num_seqs=2)",
        "B (max_num_seqs=8)",
    ] * runs
    assert [line.split(": run ")[1][:3] for line in order] == [
        f"{i}/{runs}" for i in range(1, runs + 1) for _ in "AB"
    ]
    return loop, out, str(port)


def test_the_advice_loop_runs_a_and_b_in_turns_keeps_its_verdict_and_resumes(tmp_path, monkeypatch):
    """The loop's machinery on the fewest runs a comparison takes (2 a side), beside other
    tests: whatever the verdict, it is written, kept in the advice record and given again on
    resume. That the advice pays off (a significance test across runs) is the bench job's:
    test_the_advice_to_raise_the_sequence_cap_pays_off_on_the_simulator."""
    from vllm_load.cli.tuning.loop_verdict import loop_outcome

    record = tmp_path / "advice-record.jsonl"
    monkeypatch.setenv("VLLM_LOAD_ADVICE_RECORD", str(record))
    loop, out, port = advice_loop(tmp_path, runs=2)
    assert "peak total tok/s: A" in out and "knee of B (advised): " in out
    directory = tmp_path / "tunes" / "advice"
    verdict = json.loads((directory / "verdict.json").read_text())
    peak = verdict["peak_throughput"]
    assert peak["a"]["n"] == peak["b"]["n"] == 2
    # the loop is kept in the advice record, which a later report of this kind reads
    (kept,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert (kept["kind"], kept["outcome"]) == ("max_num_seqs", loop_outcome(peak["verdict"]))
    assert kept["advice"] == ["--max-num-seqs 2 -> 8"] and f"Advice record: {record}" in out
    assert verdict["configurations"]["B"]["config"] == {"max_num_seqs": "8"}
    assert verdict["skipped_advice"] == ["more replicas"]
    assert (directory / "verdict.txt").read_text().strip() == verdict["text"]
    assert verdict["text"] in out and "Verdict: " in out
    assert (directory / "compare.html").exists() and (directory / "compare.json").exists()
    summary = json.loads((directory / "report.summary.json").read_text())
    assert sorted(s["n_runs"] for s in summary["series"]) == [2, 2]  # one series per configuration

    # the same command again: every run is kept, the verdict given again
    again = run_vllm_load(*loop, timeout=120)
    assert again.stdout.count("already completed") == 4
    # nor are the report and the comparison drawn again
    assert "Report unchanged" in again.stdout and "Comparison unchanged" in again.stdout
    assert "starting the server" not in again.stdout
    assert "peak total tok/s: A" in again.stdout and verdict["text"] in again.stdout
    # the same directory with another comparison is refused, not mixed in
    other = run_vllm_load(
        *loop[:4], f"{SIM} --port {port} --max-num-seqs 3", *loop[5:], timeout=60, expect=2
    )
    assert "holds runs of other commands" in other.stderr and "--name" in other.stderr


# a significance test across runs (3 a side: with 2, one slow B run on a loaded 2-core machine
# left +218 % at p = 0.08, Welch's df falling to 1 when A's runs agree), alone in the bench job;
# the default suite runs the same loop on 2 runs a side (above) and the verdict's sentences on
# synthetic runs (test_the_verdict_says_paid_off_or_not_from_the_runs_peaks)
@pytest.mark.timing
def test_the_advice_to_raise_the_sequence_cap_pays_off_on_the_simulator(tmp_path, monkeypatch):
    record = tmp_path / "advice-record.jsonl"
    monkeypatch.setenv("VLLM_LOAD_ADVICE_RECORD", str(record))
    _, out, _ = advice_loop(tmp_path, runs=3)
    peak = next(line for line in out.splitlines() if "peak total tok/s: A" in line)
    assert peak.endswith(": B better"), out
    assert "knee of B (advised): not saturated up to 8 users" in out or "~8 users" in out
    assert "the knee moved where the advice said" in out
    assert "Verdict: the advice paid off" in out

    directory = tmp_path / "tunes" / "advice"
    verdict = json.loads((directory / "verdict.json").read_text())
    assert verdict["peak_throughput"]["verdict"] == "B better"
    assert verdict["peak_throughput"]["a"]["n"] == verdict["peak_throughput"]["b"]["n"] == 3
    assert verdict["knee_moved_as_advised"] is True
    (kept,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert (kept["kind"], kept["outcome"]) == ("max_num_seqs", "paid_off")


def test_a_run_that_fails_stops_the_loop_with_its_outcome(tmp_path):
    port = free_port()
    source = write_summary(tmp_path / "r.summary.json", one_series())
    done = run_vllm_load(
        "tune",
        "--advice",
        source,
        "--server-cmd",
        f"{SIM} --port {port} --max-num-seqs 2 --fault-error-rate 0.5",
        "--host",
        f"http://127.0.0.1:{port}",
        *TEST,
        "--out",
        str(tmp_path),
        timeout=200,
        expect=1,
    )
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("vllm-load tune: error: A (max_num_seqs=2) run 1/2 ended with outcome")
    assert "levels_failed" in line and "run the same command again" in line
    assert "B (max_num_seqs=8): run 1/2: starting" not in done.stdout


def test_a_server_that_does_not_start_is_a_failure_naming_its_log(tmp_path, capsys):
    source = write_summary(tmp_path / "r.summary.json", one_series())
    code = main(
        [
            "tune",
            "--advice",
            source,
            "--server-cmd",
            f"{sys.executable} -c 'import sys; sys.exit(3)' --max-num-seqs 2",
            "--host",
            "http://127.0.0.1:9",
            *TEST,
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the server command exited with code 3" in line
    assert str(tmp_path / "advice" / "server.log") in line and "run the same command again" in line
    state = json.loads((tmp_path / "advice" / "tune.json").read_text())
    assert state["mode"] == "advice" and state["runs"] == []


def refused(capsys, *argv: str) -> str:
    """Run `vllm-load tune ARGV`: it must exit 2 with one line, before any server starts."""
    code = main(["tune", "--host", "http://127.0.0.1:9", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("vllm-load tune: error: "), err
    return err


def test_sources_that_cannot_be_proved_get_one_line(tmp_path, capsys):
    cmd = ("--server-cmd", "vllm serve m --max-num-seqs 2", "--out", str(tmp_path / "out"))

    def source(name: str, *series: dict) -> str:
        return write_summary(tmp_path / name, *series)

    def why(src: str, *more: str) -> str:
        return refused(capsys, "--advice", src, *cmd, *more)

    assert "no such file" in why(str(tmp_path / "missing.json"))
    (tmp_path / "broken.json").write_text('{"series": [')
    assert "not readable JSON" in why(str(tmp_path / "broken.json"))
    (tmp_path / "other.json").write_text('{"runs": []}')
    assert "not a report summary" in why(str(tmp_path / "other.json"))
    assert "not a run directory" in why(str(tmp_path))
    old = {"label": "m", "model": "m"}
    assert "has no diagnosis" in why(source("old.json", old))
    two = source("two.json", one_series("m (a=1)"), one_series("m (a=2)"))
    assert "2 series" in why(two) and "--series LABEL" in why(two)
    assert "'m (a=3)' is not in" in why(two, "--series", "m (a=3)")
    for kind, said in (
        ("not_saturated", "did not saturate"),
        ("undetermined", "could not name"),
        ("client", "no server flag"),
        ("failures", "levels failed"),
    ):
        line = why(source(f"{kind}.json", one_series(kind=kind, advice=[])))
        assert f"diagnosed {kind}" in line and said in line
    only_replicas = one_series(kind="compute", advice=[diagnosis()["advice"][1]])
    assert "no advice the loop can run" in why(source("compute.json", only_replicas))
    assert "unknown diagnosis kind 'seqs'" in why(source("kind.json", one_series(kind="seqs")))
    bad_to = one_series(advice=[{"flag": "--max-num-seqs", "from": "2", "to": [8]}])
    assert "is not a flag value" in why(source("to.json", bad_to))
    assert "is not a level" in why(source("knee.json", one_series(advised_knee="8")))
    # nothing was started or written
    assert not (tmp_path / "out").exists()


def test_a_run_directory_is_read_through_its_report(tmp_path, capsys):
    run_dir = write_synthetic_run(
        str(tmp_path / "runs"), SyntheticRun(levels=(4, 8), requests_per_level=20)
    )
    line = refused(
        capsys, "--advice", run_dir, "--server-cmd", "vllm serve m", "--out", str(tmp_path / "o")
    )
    # a synthetic run has no /metrics: no diagnosis, or one that names no limit to move
    assert run_dir in line and "diagnos" in line


def test_a_run_directory_gives_the_advice_its_report_gives(tmp_path):
    """The loop's source as a run directory: the run's report data built in memory, its series'
    diagnosis read as the summary JSON would carry it (the sequence cap given with
    --server-args, as a user of vLLM gives it: its /metrics do not show it)."""
    from vllm_load.cli.tuning.source import read_diagnosis

    with SimulatorProcess("--time-scale", "0.1", "--max-num-seqs", "2") as sim:
        run_vllm_load(
            "run", "--host", sim.url, "--server-args", "--max-num-seqs 2", *TEST[:-2],
            "--out", str(tmp_path), "--loglevel", "WARNING", timeout=120,
        )  # fmt: skip
    d = read_diagnosis(only_run_dir(tmp_path))
    assert d.kind == "max_num_seqs" and d.series == "sim-llama-8b"
    seqs = next(a for a in d.runnable if a.flag == "--max-num-seqs")
    assert seqs.current == "2" and int(seqs.advised or 0) > 2


def test_options_the_loop_cannot_use_are_refused(tmp_path, capsys):
    src = write_summary(tmp_path / "r.summary.json", one_series())
    out = ("--out", str(tmp_path / "out"))
    line = refused(
        capsys, "--advice", src, "--server-cmd", "s --max-num-seqs 2", "--runs", "1", *out
    )
    assert "--runs 2 or more" in line and "no test is possible" in line
    line = refused(capsys, "--advice", src, "--server-cmd", "s {x}", "--matrix", "x=1", *out)
    assert "not both" in line
    line = refused(capsys, "--server-cmd", "s {x}", "--matrix", "x=1", "--series", "m", *out)
    assert "use it with --advice" in line
    line = refused(capsys, "--advice", src, "--server-cmd", "s --max-num-seqs=8", *out)
    assert "already runs with the advised values (--max-num-seqs 8)" in line
    line = refused(capsys, "--advice", src, "--server-cmd", "s 2>&1 | tee log", *out)
    assert "cannot add --max-num-seqs" in line
    line = refused(
        capsys, "--advice", src, "--server-cmd", "s", "--trace", "sample:mooncake_60s", *out
    )
    assert "a trace replays its own schedule" in line and "--matrix" in line
    assert not (tmp_path / "out").exists()


def test_the_command_as_run_is_configuration_a_even_where_the_report_says_otherwise():
    from vllm_load.cli.tuning.advice_loop import advised_configurations
    from vllm_load.cli.tuning.source import parse_diagnosis

    d = parse_diagnosis(one_series(), "r.json")
    a, b, warnings = advised_configurations(d, "vllm serve m --max-num-seqs=4")
    assert a.config == {"max_num_seqs": "4"} and b.config == {"max_num_seqs": "8"}
    assert b.command == "vllm serve m --max-num-seqs=8"
    assert len(warnings) == 1 and "says --max-num-seqs was 2, --server-cmd has 4" in warnings[0]
    # not in the command: A runs with what the report read, and B appends the flag
    a, b, warnings = advised_configurations(d, "vllm serve m")
    assert a.config == {"max_num_seqs": "2"} and not warnings
    assert b.command == "vllm serve m --max-num-seqs 8"
    unknown = parse_diagnosis(
        one_series(advice=[{"flag": "--max-num-seqs", "from": None, "to": 8.0}]), "r.json"
    )
    a, b, _ = advised_configurations(unknown, "vllm serve m")
    # an unknown value is no tag (the diagnosis reads `config.NAME` tags as the server's values)
    assert a.config == {} and a.shown == {"max_num_seqs": "server default"}
    assert a.label == "A (max_num_seqs=server default)" and b.config == {"max_num_seqs": "8"}
    # the flags the runs record for the diagnosis (--server-args) follow each configuration
    given = "--max-num-seqs 2 --max-num-batched-tokens 64"
    a, b, _ = advised_configurations(d, "vllm serve m --max-num-seqs 2", given)
    assert a.overrides == {}
    assert b.overrides == {"server_args": "--max-num-seqs 8 --max-num-batched-tokens 64"}


@pytest.mark.parametrize("runs", ["0", "-1"])
def test_plain_tune_needs_at_least_one_run(tmp_path, capsys, runs):
    line = refused(
        capsys, "--server-cmd", "s {x}", "--matrix", "x=1", "--runs", runs, "--out", str(tmp_path)
    )
    assert "--runs must be at least 1" in line


def test_the_diagnosis_level_is_read_from_summary_formats_2_and_1():
    """Format 2 names the diagnosis' level `value`; a summary of format 1 named it `users`."""
    from vllm_load.cli.tuning.source import parse_diagnosis

    assert parse_diagnosis(one_series(), "r.json").value == 4.0
    old = diagnosis()
    old["users"] = old.pop("value")
    assert parse_diagnosis({**one_series(), "diagnosis": old}, "r.json").value == 4.0


def synthetic_side(base, seqs: int) -> list[str]:
    """Three synthetic runs of a server with `seqs` sequences, the loop's levels."""
    from vllm_load.run_format.synthetic import ServerModel

    server = ServerModel(max_num_seqs=seqs)
    spec = dict(levels=(1, 2, 4, 8), requests_per_level=12, warmup_requests=2, server=server)
    return [write_synthetic_run(str(base), SyntheticRun(seed=seed, **spec)) for seed in (1, 2, 3)]


def test_the_verdict_says_paid_off_or_not_from_the_runs_peaks(tmp_path):
    """The loop's verdict (`loop_verdict.decide`) on synthetic runs, in process: the comparison
    written, its sentence, the JSON and the advice record's outcome, whatever the machine's load
    (the simulator's loop above gives the same verdict only over runs the machine kept on time).
    A server of 2 sequences against one of 8, then the other way round."""
    from vllm_load.cli.tuning.advice_loop import advised_configurations
    from vllm_load.cli.tuning.loop_verdict import decide, loop_outcome, write_verdict
    from vllm_load.cli.tuning.runs import ConfigResult, measure
    from vllm_load.cli.tuning.source import parse_diagnosis

    d = parse_diagnosis(one_series(), "r.json")
    a, b = advised_configurations(d, "vllm serve m --max-num-seqs 2")[:2]
    sides = {}
    for seqs in (2, 8):
        sides[seqs] = ConfigResult({}, synthetic_side(tmp_path / str(seqs), seqs), "completed")
        measure(sides[seqs])
    for a_seqs, b_seqs, outcome, said in (
        (2, 8, "paid_off", "the advice paid off: B better on peak total tok/s (+"),
        (8, 2, "did_not_pay_off", "the advice did not pay off: B worse on peak total tok/s (-"),
    ):
        directory = tmp_path / f"{a_seqs}-{b_seqs}"
        directory.mkdir()
        verdict = decide(d, (a, b), (sides[a_seqs], sides[b_seqs]), str(directory))
        assert verdict.conclusion.startswith(said), verdict.conclusion
        assert verdict.throughput.a.n == verdict.throughput.b.n == 3
        assert loop_outcome(verdict.throughput.verdict) == outcome
        text = verdict.text()
        assert f"Verdict: {verdict.conclusion}" in text
        assert "A: vllm serve m --max-num-seqs 2" in text
        assert "B: vllm serve m --max-num-seqs 8" in text
        written = json.loads(open(write_verdict(verdict, str(directory))).read())
        assert written["verdict"] == verdict.conclusion and written["text"] == text
        assert (directory / "verdict.txt").read_text().strip() == text
        assert (directory / "compare.html").exists()


def test_flags_advised_together_are_set_together_in_configuration_b():
    # a cap raised past what the KV cache holds comes with its blocks (`advice.Also`)
    from vllm_load.cli.tuning.advice_loop import advised_configurations
    from vllm_load.cli.tuning.source import parse_diagnosis

    also = [{"flag": "--num-gpu-blocks-override", "from": "64", "to": "576"}]
    advice = [{"flag": "--max-num-seqs", "from": "2", "to": "32", "also": also}]
    d = parse_diagnosis(one_series(advice=advice), "r.json")
    a, b, _ = advised_configurations(d, "sim --max-num-seqs 2 --num-gpu-blocks-override 64")
    assert a.config == {"max_num_seqs": "2", "num_gpu_blocks_override": "64"}
    assert b.config == {"max_num_seqs": "32", "num_gpu_blocks_override": "576"}
    assert b.command == "sim --max-num-seqs 32 --num-gpu-blocks-override 576"
    with pytest.raises(SettingsError, match="malformed 'also'"):
        parse_diagnosis(one_series(advice=[{**advice[0], "also": "x"}]), "r.json")
