"""`vllm-load compare A B` on synthetic runs: verdicts, files, --fail-if-worse, bad input."""

import glob
import json
import os

import pytest

from vllm_load.cli.main import main
from vllm_load.run_format.synthetic import ServerModel, SyntheticRun, write_synthetic_run


def _runs(base, max_num_seqs: int, n: int, levels=(8, 64), seed0: int = 0) -> list[str]:
    return [
        write_synthetic_run(
            str(base),
            SyntheticRun(
                levels=levels,
                warmup_requests=4,
                requests_per_level=40,
                input_tokens=256,
                output_tokens=32,
                server=ServerModel(max_num_seqs=max_num_seqs, run_noise=0.02),
                seed=seed0 + i,
                start_ts=1_790_000_000.0 + 3600 * (seed0 + i),
            ),
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    """Three runs of a server batching 16 sequences (A) and three batching 64 (B)."""
    base = tmp_path_factory.mktemp("ab")
    _runs(base / "a", 16, 3)
    _runs(base / "b", 64, 3, seed0=10)
    return str(base / "a"), str(base / "b")


def test_more_batching_is_significantly_better_at_high_concurrency(sides, tmp_path, capsys):
    a, b = sides
    out = str(tmp_path / "ab.html")
    code = main(["compare", a, b, "--a-name", "seqs16", "--b-name", "seqs64", "-o", out])
    assert code == 0
    printed = capsys.readouterr().out
    assert "64: total tok/s: B better" in printed
    data = json.load(open(str(tmp_path / "ab.json")))
    assert data["sides"]["a"]["n_runs"] == 3 and data["comparisons_tested"] == 16
    at64 = {f["figure"]: f for f in data["levels"][1]["figures"]}
    assert data["levels"][1]["level"] == 64
    tok = at64["total_tok_per_s"]
    assert tok["verdict"] == "B better" and tok["test"] == "Welch's t-test across runs"
    assert tok["rel_diff"] > 0.5 and tok["p_adjusted"] < 0.05 and tok["ci_low"] > 0
    assert at64["e2e_p50"]["verdict"] == "B better"  # no queue in front of the batch
    assert at64["itl_p99"]["verdict"] == "B worse"  # but a bigger batch decodes each step slower
    # at 8 users both batch everyone: no throughput verdict either way
    at8 = {f["figure"]: f for f in data["levels"][0]["figures"]}
    assert at8["total_tok_per_s"]["verdict"] != "B worse"
    html = open(out).read()
    assert '<td class="l better">B better</td>' in html and "data:image/png;base64," in html
    assert "16 comparisons were tested" in html
    md = open(str(tmp_path / "ab.md")).read()
    assert "## 64 users" in md and "**B better**" in md


def test_fail_if_worse_exits_1_when_b_is_the_slower(sides, tmp_path, capsys):
    a, b = sides
    out = str(tmp_path / "ba.html")
    assert main(["compare", b, a, "-o", out, "--fail-if-worse", "5%"]) == 1
    assert "is significantly worse" in capsys.readouterr().out
    assert json.load(open(str(tmp_path / "ba.json")))["failed"] is True
    # the right way round, the bigger batch still pays in ITL (each decode step is longer:
    # +18 % at 64 sequences): the gate catches that at 5 %, and lets it through at 25 %
    assert main(["compare", a, b, "-o", out, "--fail-if-worse", "0.05"]) == 1
    worse = json.load(open(str(tmp_path / "ba.json")))["worse"]
    assert [(w["level"], w["figure"]) for w in worse] == [(64, "itl_p99")]
    assert main(["compare", a, b, "-o", out, "--fail-if-worse", "25%"]) == 0
    # a drop written as a negative share, bare (argparse read "-5%" as an option) or with =
    for gate in (["--fail-if-worse", "-5%"], ["--fail-if-worse=-5%"], ["--fail-if-worse", "-0.05"]):
        assert main(["compare", a, b, "-o", out, *gate]) == 1, gate
        assert json.load(open(str(tmp_path / "ba.json")))["fail_if_worse"] == 0.05
    assert main(["compare", a, b, "-o", out, "--fail-if-worse", "-25%"]) == 0


def test_several_runs_a_side_with_vs_and_one_run_a_side(sides, tmp_path, capsys):
    a, b = sides
    a_runs = sorted(glob.glob(os.path.join(a, "*", "*")))
    b_runs = sorted(glob.glob(os.path.join(b, "*", "*")))
    out = str(tmp_path / "vs.html")
    assert main(["compare", *a_runs[:2], "vs", *b_runs[:2], "-o", out]) == 0
    assert json.load(open(str(tmp_path / "vs.json")))["sides"]["b"]["n_runs"] == 2
    out1 = str(tmp_path / "one.html")
    assert main(["compare", a_runs[0], b_runs[0], "-o", out1]) == 0
    one = json.load(open(str(tmp_path / "one.json")))
    figures = {f["figure"]: f for f in one["levels"][1]["figures"]}
    assert figures["total_tok_per_s"]["test"] == "none"
    assert "impossible" in figures["total_tok_per_s"]["note"]
    ttft = figures["ttft_p99"]
    assert ttft["test"] == "none" and ttft["verdict"] == "no test possible at n = 1"
    assert ttft["requests_test"]["test"] == "bootstrap of the percentile over requests"


def test_levels_only_one_side_tested_are_dropped_and_named(sides, tmp_path, capsys):
    a, _ = sides
    _runs(tmp_path / "c", 64, 2, levels=(8, 32))
    apart = _runs(tmp_path / "e", 64, 1, levels=(16,))
    assert main(["compare", a, *apart, "-o", str(tmp_path / "d.html")]) == 2
    assert "share no measured level" in capsys.readouterr().err
    assert main(["compare", a, str(tmp_path / "c"), "-o", str(tmp_path / "d.html")]) == 0
    printed = capsys.readouterr().out
    assert "levels dropped: only A measured 64 users; only B measured 32 users" in printed
    assert json.load(open(str(tmp_path / "d.json")))["levels_only_b"] == [32.0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["nowhere", "{b}"], "nowhere: no such run directory"),
        (["{a}", "{b}", "{a}"], "got 3 run arguments"),
        (["{a}", "vs"], "give A's runs, 'vs', then B's runs"),
        (["{a}", "{a}"], "is in both A and B"),
        (["{a}", "{b}", "--fail-if-worse", "five"], "--fail-if-worse takes a share"),
        (["{a}", "{b}", "--fail-if-worse", "5"], "write a percentage with %"),
        (["{a}", "{b}", "--alpha", "1.5"], "--alpha must be between 0 and 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(sides, tmp_path, capsys, args, message):
    a, b = sides
    argv = [x.format(a=a, b=b) for x in args]
    assert main(["compare", *argv, "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vllm-load compare: error: ") and message in err
    assert "\n" not in err


def test_help_says_what_it_does(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "--fail-if-worse" in text and "Welch" in text and "vs" in text


def test_runs_of_different_workloads_are_refused_or_compared_with_a_loud_warning(
    sides, tmp_path, capsys
):
    a, _ = sides
    longer = [
        write_synthetic_run(
            str(tmp_path / "long"),
            SyntheticRun(
                levels=(8, 64),
                warmup_requests=4,
                requests_per_level=40,
                input_tokens=256,
                output_tokens=64,
                seed=20 + i,
            ),
        )
        for i in range(2)
    ]
    out = str(tmp_path / "w.html")
    assert main(["compare", a, *longer[:1], "-o", out]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "did not send the same workload" in err
    assert "output_tokens: A 32, B 64" in err and "--allow-different-workloads" in err
    assert not os.path.exists(out)
    code = main(["compare", a, str(tmp_path / "long"), "-o", out, "--allow-different-workloads"])
    assert code == 0
    assert "WARNING: different workloads: output_tokens: A 32, B 64" in capsys.readouterr().err
    assert "did not send the same workload" in open(out).read()
    assert "**These sides did not send the same workload**" in open(str(tmp_path / "w.md")).read()
    data = json.load(open(str(tmp_path / "w.json")))
    assert data["workload_differences"] == ["output_tokens: A 32, B 64"]
    # a side whose own runs differ is named too
    mixed = ["compare", *glob.glob(os.path.join(a, "*", "*"))[:1], *longer[:1], "vs", longer[1]]
    assert main([*mixed, "-o", out]) == 2
    assert "A's runs differ in output_tokens (32 in" in capsys.readouterr().err


def test_one_run_a_side_has_no_verdict_and_no_gate_to_pass(tmp_path, capsys):
    """An 85 % throughput drop at n = 1 read "no significant difference at this n", and
    --fail-if-worse passed it with "0 comparisons tested"."""
    (fast,) = _runs(tmp_path / "fast", 64, 1)
    (slow,) = _runs(tmp_path / "slow", 4, 1, seed0=5)
    out = str(tmp_path / "one.html")
    assert main(["compare", fast, slow, "-o", out]) == 0
    printed = capsys.readouterr().out
    assert "Outcome: no test possible at n = 1: no verdict on any of the 16 comparisons" in printed
    data = json.load(open(str(tmp_path / "one.json")))
    tok = {f["figure"]: f for f in data["levels"][1]["figures"]}["total_tok_per_s"]
    assert tok["rel_diff"] < -0.5 and tok["verdict"] == "no test possible at n = 1"
    everything = open(out).read() + open(str(tmp_path / "one.md")).read() + json.dumps(data)
    assert "no significant difference at this n" not in everything
    assert main(["compare", fast, slow, "-o", out, "--fail-if-worse", "5%"]) == 1
    captured = capsys.readouterr()
    assert "Outcome: no test possible at n = 1" in captured.out
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("vllm-load compare: error: --fail-if-worse 5%: nothing was tested")


def test_the_outcome_is_printed_also_when_nothing_differs(tmp_path, capsys):
    a = _runs(tmp_path / "a", 16, 2)
    b = _runs(tmp_path / "b", 16, 2, seed0=10)
    assert main(["compare", *a, "vs", *b, "-o", str(tmp_path / "same.html")]) == 0
    printed = capsys.readouterr().out
    assert not [line for line in printed.splitlines() if line.startswith("  ")]  # no verdicts
    (outcome,) = [line for line in printed.splitlines() if line.startswith("Outcome: ")]
    assert outcome == (
        "Outcome: B better on 0, worse on 0, no significant difference at this n on 16 of the "
        "16 comparisons tested"
    )


def _with_settings(src: str, dst, **settings) -> str:
    """A copy of run directory `src` under `dst` whose run.json records `settings`."""
    import shutil

    copy = shutil.copytree(src, str(dst / os.path.basename(src)))
    path = os.path.join(copy, "run.json")
    run = json.load(open(path))
    run["settings"].update(settings)
    json.dump(run, open(path, "w"))
    return copy


def test_runs_with_and_without_images_are_different_workloads(sides, tmp_path, capsys):
    """Issue 46: a side sending --images 2 compared with one sending none as one workload."""
    a, _ = sides
    (src,) = glob.glob(os.path.join(a, "*", "*"))[:1]
    plain = {"images": 0, "image_size": "512x512", "image_format": "jpeg"}
    without = _with_settings(src, tmp_path / "text", **plain)
    with_images = _with_settings(src, tmp_path / "images", **{**plain, "images": 2})
    out = str(tmp_path / "i.html")
    assert main(["compare", without, with_images, "-o", out]) == 2
    err = capsys.readouterr().err
    assert "did not send the same workload" in err and "images: A 0, B 2" in err
    bigger = _with_settings(
        src, tmp_path / "big", **{**plain, "images": 2, "image_size": "1024x1024"}
    )
    assert main(["compare", with_images, bigger, "-o", out]) == 2
    assert "image_size: A '512x512', B '1024x1024'" in capsys.readouterr().err
    # without images, how an image would have been made is no part of the workload
    other = _with_settings(src, tmp_path / "other", **{**plain, "image_format": "png"})
    assert main(["compare", without, other, "-o", out]) == 0
