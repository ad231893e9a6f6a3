"""What `tune --matrix` and `tune --slo` alone write at their end (issue 47, item 3): the page
with the search path, the Pareto frontier of total tok/s per GPU against output tok/s per user
and the chosen configuration's command, with its JSON and Markdown beside it. In process: each
run the search would start is a synthetic run of the same shape (`run_format/synthetic.py`),
whose server serves `max_num_seqs` sequences at once and queues the users beyond them."""

from __future__ import annotations

import json
import os

import pytest

from vllm_load.cli.main import main
from vllm_load.cli.tuning import slo_max
from vllm_load.cli.tuning.runs import TunedRun, TuneRuns
from vllm_load.run_format.synthetic import ServerModel, SyntheticRun, write_synthetic_run
from vllm_load.slo import parse_slo


def _synthetic(base: str, seqs: int, levels: tuple[int, ...], gpus: str | None) -> str:
    spec = SyntheticRun(
        levels=levels,
        requests_per_level=40,
        warmup_requests=4,
        output_tokens=64,
        server=ServerModel(max_num_seqs=seqs),
        seed=seqs * 1000 + levels[0],
        meta={"gpus": gpus} if gpus else {},
    )
    return write_synthetic_run(base, spec)


def _no_report(run_dirs, directory, slo):
    return os.path.join(directory, "report.html")


@pytest.fixture
def grid(monkeypatch):
    """`tune --matrix` whose runs are synthetic: the configuration's `s` is its batch."""

    def run(self, configuration, where):
        seqs = int(configuration.config["s"])
        run_dir = _synthetic(os.path.join(self.directory, "runs"), seqs, (2, 8, 32), "2")
        return TunedRun(configuration.config, run_dir, "completed")

    monkeypatch.setattr(TuneRuns, "_run", run)
    # the tune's report of every run is not what this tests, and takes seconds
    monkeypatch.setattr("vllm_load.cli.tune.write_report", _no_report)


def _tune(tmp_path, *extra: str) -> list[str]:
    return [
        "tune",
        "--host",
        "http://127.0.0.1:9",
        "--out",
        str(tmp_path),
        "--name",
        "t",
        *extra,
    ]


def test_a_grid_writes_its_frontier_and_the_command_of_the_configuration_chosen(
    tmp_path, capsys, grid
):
    matrix = ["--server-cmd", "vllm serve m --max-num-seqs {s}", "--matrix", "s=4,16"]
    code = main([*_tune(tmp_path, *matrix), "--slo", "ttft_p99<=500ms,itl_p99<=40ms"])
    lines = capsys.readouterr().out.strip().splitlines()
    directory = tmp_path / "t"
    assert code == 0
    page = next(line for line in lines if line.startswith("Page: "))
    for name in ("pareto.html", "pareto.json", "pareto.md"):
        assert str(directory / name) in page and (directory / name).exists()
    data = json.loads((directory / "pareto.json").read_text())
    points = data["points"]
    # every level of every configuration is a point, per GPU over the meta's 2 GPUs
    assert [(p["configuration"]["s"], p["level"]) for p in points] == [
        (s, float(u)) for s in ("4", "16") for u in (2, 8, 32)
    ]
    for p in points:
        assert p["gpus"] == 2.0 and p["missing"] is None
        assert p["total_tok_per_s_per_gpu"] == pytest.approx(p["total_tok_per_s"] / 2)
        # 1 / the median TPOT: the synthetic server's ITL is about 12 ms, longer in a larger batch
        assert 40 < p["output_tok_per_s_per_user"] < 100
    by = {(p["configuration"]["s"], p["level"]): p for p in points}
    user = [by[("16", u)]["output_tok_per_s_per_user"] for u in (2.0, 8.0, 32.0)]
    assert user[0] > user[1] > user[2]  # 2, 8, then 16 sequences decode together
    # 4 sequences queue the users beyond them: at 8 and 32 users the TTFT misses 500 ms
    assert [by[("4", u)]["meets_slo"] for u in (2.0, 8.0, 32.0)] == [True, False, False]
    assert [by[("16", u)]["meets_slo"] for u in (2.0, 8.0)] == [True, True]
    assert not by[("16", 32.0)]["meets_slo"]
    # the most tok/s per GPU meeting the SLO: 16 sequences at 8 users
    chosen = [p for p in points if p["chosen"]]
    assert [(p["configuration"]["s"], p["level"]) for p in chosen] == [("16", 8.0)]
    assert data["chosen"]["command"] == "vllm serve m --max-num-seqs 16"
    # nothing beats 16 sequences at 32 users on throughput, nor one at 2 users on interactivity
    assert by[("16", 32.0)]["on_frontier"]
    assert not by[("4", 32.0)]["on_frontier"]  # 16 sequences at 32 users: more of both
    assert data["slo_per_user_tok_per_s"] == pytest.approx(25.0)  # 1 / 40 ms
    assert [row[1] for row in data["path"]["rows"]] == ["s=4", "s=16"]
    md = (directory / "pareto.md").read_text()
    assert "```\nvllm serve m --max-num-seqs 16\n```" in md and "| s=16 | 8 |" in md
    html = (directory / "pareto.html").read_text()
    assert 'id="chart-pareto"' in html and "data:image/png;base64," in html
    assert "vllm serve m --max-num-seqs 16" in html and "http" not in html.split("<body>")[1]


def test_without_a_gpu_count_the_points_are_named_not_drawn_and_gpus_sets_it(
    tmp_path, capsys, monkeypatch
):
    def run(self, configuration, where):
        run_dir = _synthetic(os.path.join(self.directory, "runs"), 8, (2, 8), None)
        return TunedRun(configuration.config, run_dir, "completed")

    monkeypatch.setattr(TuneRuns, "_run", run)
    monkeypatch.setattr("vllm_load.cli.tune.write_report", _no_report)
    matrix = ["--server-cmd", "vllm serve m --max-num-seqs {s}", "--matrix", "s=8"]
    assert main(_tune(tmp_path, *matrix)) == 0
    data = json.loads((tmp_path / "t" / "pareto.json").read_text())
    assert data["chosen"] is None
    assert all("GPU count" in p["missing"] and not p["on_frontier"] for p in data["points"])
    assert "not known: pass --gpus N" in data["gpus_source"]
    assert "none is chosen" in (tmp_path / "t" / "pareto.md").read_text()
    # the same tune again (it resumes: nothing runs) with --gpus: drawn, and chosen
    assert main([*_tune(tmp_path, *matrix), "--gpus", "4"]) == 0
    data = json.loads((tmp_path / "t" / "pareto.json").read_text())
    assert data["gpus_source"] == "--gpus 4" and data["chosen"]["command"]
    assert all(p["gpus"] == 4.0 and p["missing"] is None for p in data["points"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:
        main([*_tune(tmp_path, *matrix), "--gpus", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert bad.value.code == 2 and len(err) == 1 and "--gpus: takes a GPU count above 0" in err[0]


@pytest.fixture
def levels(monkeypatch):
    """`tune --slo` alone whose levels are synthetic runs of a server with room for 4."""

    def measure(self, level, unit):
        run_dir = _synthetic(os.path.join(self.directory, "runs"), 4, (int(level),), "1")
        return slo_max.judge_run(level, run_dir, parse_slo(self.state.search["slo"]))

    monkeypatch.setattr(slo_max.Search, "measure", measure)


def test_the_slo_max_search_writes_its_levels_and_bracket(tmp_path, capsys, levels):
    code = main(_tune(tmp_path, "--slo", "ttft_p99<=500ms", "--max-level", "64"))
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    directory = tmp_path / "t"
    # the page's line comes before the search's result, which stays the last line
    assert lines[-2].startswith(f"Page: {directory / 'pareto.html'}")
    assert lines[-1].startswith("SLO-max 4 users for ttft_p99<=500ms")
    data = json.loads((directory / "pareto.json").read_text())
    assert data["kind"] == "slo-max" and data["slo_max"] == 4.0 and data["bracket"] == [4.0, 5.0]
    state = json.loads((directory / "slo_max.json").read_text())
    measured = [lv["level"] for lv in state["levels"]]
    # the path is the levels in the order measured, each a point of the one configuration
    assert [float(row[1]) for row in data["path"]["rows"]] == measured
    assert [p["level"] for p in data["points"]] == measured
    assert all(p["gpus"] == 1.0 for p in data["points"])
    assert [p["meets_slo"] for p in data["points"]] == [u <= 4 for u in measured]
    assert all(p["slo_max"] == 4.0 for p in data["points"])
    # no --server-cmd: the search ran against --host, whose command it does not know
    assert data["chosen"]["level"] == 4.0 and "http://127.0.0.1:9" in data["chosen"]["command"]
    assert data["slo_per_user_tok_per_s"] is None  # a TTFT limit bounds no token rate
    html = (directory / "pareto.html").read_text()
    assert 'id="chart-levels"' in html and 'id="chart-pareto"' in html
    assert "SLO-max 4 users" in (directory / "pareto.md").read_text()


def test_a_search_that_meets_no_level_still_writes_what_it_measured(tmp_path, capsys, levels):
    done = main(_tune(tmp_path, "--slo", "ttft_p99<=10ms", "--min-level", "2"))
    assert done == 1
    err = capsys.readouterr().err
    assert "no level meets the SLO" in err
    data = json.loads((tmp_path / "t" / "pareto.json").read_text())
    assert data["chosen"] is None and [p["meets_slo"] for p in data["points"]] == [False]
    assert "none is chosen" in (tmp_path / "t" / "pareto.md").read_text()


def test_a_guided_search_page_draws_each_configuration_at_its_slo_max(tmp_path):
    """The guided search's steps (`guided.json`) as the page's points: each configuration at its
    SLO-max, per GPU of its runs' meta; one whose server did not start is named, not drawn."""
    from vllm_load.analysis.decisions.guided_search import SERVER_FAILED, GuidedStep
    from vllm_load.cli.tuning.pareto_points import guided_page, search_page

    def step(index, seqs, slo_max, total, user, **kw):
        run = _synthetic(str(tmp_path / "runs"), seqs, (2,), "2") if slo_max else None
        return GuidedStep(
            index,
            {"max_num_seqs": str(seqs)},
            f"vllm serve m --max-num-seqs {seqs}",
            "start" if index == 0 else f"--max-num-seqs 2 -> {seqs}",
            None if index == 0 else 0,
            slo_max=[slo_max] if slo_max else [],
            total_tok_per_s=total,
            output_tok_per_s_per_user=user,
            run_dirs=[run] if run else [],
            **kw,
        )

    steps = [
        step(0, 2, 4.0, 1200.0, 60.0, kept=True),
        step(1, 8, 16.0, 4000.0, 45.0, kept=True),
        step(2, 32, None, None, None, outcome=SERVER_FAILED, reason="exited with code 1"),
    ]
    search = {"slo": ["e2e_p90<=200ms", "itl_p99<=40ms"]}
    page = guided_page("g", search, steps, {"line": "best: SLO-max 16 users"}, "users", None)
    search_page(page, str(tmp_path))
    data = json.loads((tmp_path / "pareto.json").read_text())
    assert data["kind"] == "guided" and data["result"] == "best: SLO-max 16 users"
    assert [row[0] for row in data["path"]["rows"]] == ["0", "1", "2"]
    first, moved, failed = data["points"]
    # at its SLO-max, where the SLO holds, over the 2 GPUs its runs' meta names
    assert (first["level"], first["meets_slo"], first["gpus"]) == (4.0, True, 2.0)
    assert moved["total_tok_per_s_per_gpu"] == pytest.approx(2000.0) and moved["chosen"]
    assert data["chosen"]["command"] == "vllm serve m --max-num-seqs 8"
    assert first["on_frontier"]  # the more interactive of the two
    assert failed["missing"] and not failed["chosen"] and failed["meets_slo"] is None
    assert data["slo_per_user_tok_per_s"] == pytest.approx(25.0)
    html = (tmp_path / "pareto.html").read_text()
    assert "vllm serve m --max-num-seqs 8" in html and "step 2" in html


def test_a_page_that_shows_what_it_already_shows_is_not_rewritten(tmp_path, capsys):
    """A resume that ran nothing gives the same page: it is not drawn again (one line says so);
    a page with anything changed, or with a file gone, is."""
    from vllm_load.analysis.decisions.guided_search import GuidedStep
    from vllm_load.cli.tuning.pareto_points import guided_page, search_page

    steps = [
        GuidedStep(0, {"max_num_seqs": "2"}, "vllm serve m", "start", None, slo_max=[4.0]),
    ]
    search = {"slo": ["e2e_p90<=200ms"]}

    def page(line: str):
        return guided_page("g", search, steps, {"line": line}, "users", None)

    html = tmp_path / "pareto.html"
    search_page(page("best: SLO-max 4 users"), str(tmp_path))
    html.write_text("drawn before")  # what a rewrite would replace
    capsys.readouterr()
    search_page(page("best: SLO-max 4 users"), str(tmp_path))
    assert "Page unchanged" in capsys.readouterr().out
    assert html.read_text() == "drawn before"
    search_page(page("best: SLO-max 8 users"), str(tmp_path))  # a new result: drawn again
    assert "Page unchanged" not in capsys.readouterr().out
    assert "8 users" in html.read_text()
    (tmp_path / "pareto.md").unlink()
    search_page(page("best: SLO-max 8 users"), str(tmp_path))
    assert (tmp_path / "pareto.md").is_file()
