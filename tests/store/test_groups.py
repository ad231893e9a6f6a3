"""Tunes and campaigns in the results store: written with their runs linked to them when the
command ends (a run stored before is linked, not stored twice; a resumed one updates it), listed
by `history --groups`; a store at the previous schema revision is upgraded with its runs whole; a
store at a newer one is refused with nothing written. The commands end in-process on directories
whose runs are all completed already (synthetic runs): no server is started."""

from __future__ import annotations

import json
import sqlite3

from vllm_load.cli.main import build_parser, main
from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run
from vllm_load.store.groups import remember_group

SPEC = dict(levels=(4, 8), warmup_requests=4, requests_per_level=20, output_tokens=32)


def _run(base, seed: int, **meta) -> str:
    start = 1_790_000_000.0 + 60 * seed
    return write_synthetic_run(
        str(base), SyntheticRun(**SPEC, seed=seed, start_ts=start, meta=meta)
    )


def _tune_dir(tmp_path) -> tuple[str, list[str]]:
    """A matrix tune `t` whose every run completed (tune.json as `vllm-load tune` keeps it)."""
    # tagged as `vllm-load tune` tags its runs: their server flags are in its server command
    paths = [_run(tmp_path / "t" / "runs", i, **{"config.s": s}) for i, s in enumerate("24")]
    runs = [{"config": {"s": s}, "run_dir": p, "outcome": "completed"} for s, p in zip("24", paths)]
    state = {"format": 2, "mode": "matrix", "runs": runs, "results": []}
    (tmp_path / "t" / "tune.json").write_text(json.dumps(state))
    return str(tmp_path / "t"), paths


TUNE = ["--host", "http://127.0.0.1:9", "--server-cmd", "no-such-server {s}", "--matrix", "s=2,4"]


def _rows(store, sql: str) -> list[tuple]:
    return sqlite3.connect(str(store)).execute(sql).fetchall()


def test_a_tune_is_stored_when_it_ends_with_its_runs_linked(tmp_path, capsys, monkeypatch):
    from types import SimpleNamespace

    # the tune's report is not what this test is about (tests/cli/test_tune.py): not drawn here
    monkeypatch.setattr("vllm_load.cli.tune.write_report", lambda *a: SimpleNamespace(html="-"))
    store = tmp_path / "results.sqlite"
    directory, paths = _tune_dir(tmp_path)
    assert main(["store", "import", paths[0], "--store", str(store)]) == 0  # stored by its run
    tune = ["tune", *TUNE, "--out", str(tmp_path), "--name", "t", "--store", str(store)]
    capsys.readouterr()
    assert main(tune) == 0
    out = capsys.readouterr().out
    assert "(tune t stored: 2 run(s), 1 newly stored, 2 linked to it)" in out
    assert _rows(store, "SELECT count(*) FROM runs") == [(2,)]
    linked = "SELECT r.path, g.label FROM group_runs g JOIN runs r ON r.id = g.run ORDER BY r.path"
    assert _rows(store, linked) == [(paths[0], "s=2"), (paths[1], "s=4")]
    assert remember_group(directory, str(store), "tune")  # again, as a resume ends: once
    assert "(tune t already stored, updated: 2 run(s), 0 newly stored, 0 linked" in (
        capsys.readouterr().out
    )
    assert _rows(store, "SELECT kind, name, directory FROM groups") == [("tune", "t", directory)]
    assert main(["history", "--groups", "--json", "--store", str(store)]) == 0
    (listed,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert listed["labels"] == ["s=2", "s=4"] and listed["runs"] == 2
    assert listed["detail"]["best"]["throughput"] in ({"s": "2"}, {"s": "4"})
    assert main(["history", "--groups", "--store", str(store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        "tune t: 2 run(s) of synthetic/model-8b" in lines[0] and "best for throughput" in lines[0]
    )
    assert lines[-1].startswith("1 tune(s)/campaign(s) in sqlite:///")
    # its configurations are two series of the trend page, not one
    page = tmp_path / "trend.html"
    assert main(["history", "--html", str(page), "--store", str(store)]) == 0
    assert "(2 configuration(s), 2 point(s) from 2 run(s)" in capsys.readouterr().out
    assert "· config.s=2 ·" in page.read_text() and "· config.s=4 ·" in page.read_text()


def test_a_campaign_is_stored_when_it_ends(tmp_path, capsys):
    from vllm_load.cli.campaign import CampaignRun, CampaignState, _compared_options

    store = tmp_path / "results.sqlite"
    command = ["campaign", "--host", "http://127.0.0.1:9", "--out", str(tmp_path), "--name", "c"]
    command += ["--runs", "2", "--run-cooldown", "0", "--no-report", "--store", str(store)]
    args = build_parser().parse_args(command)
    paths = [_run(tmp_path / "c" / "runs", i) for i in range(2)]
    state = CampaignState("c", _compared_options(args))
    state.runs = [CampaignRun(p, "coarse", "completed") for p in paths]
    state.save(str(tmp_path / "c"))
    assert main(command) == 0
    assert "(campaign c stored: 2 run(s), 2 newly stored, 2 linked to it)" in (
        capsys.readouterr().out
    )
    assert _rows(store, "SELECT label FROM group_runs") == [("coarse",), ("coarse",)]
    assert _rows(store, "SELECT kind, name FROM groups") == [("campaign", "c")]


def test_a_store_at_the_previous_revision_is_upgraded_with_its_runs(tmp_path, capsys):
    """A store 0001 wrote (before tunes and campaigns were stored) keeps every run, level and
    figure through the upgrade, and takes groups afterwards."""
    from alembic import command
    from sqlalchemy import create_engine

    from vllm_load.store.db import _alembic_config

    store = tmp_path / "old.sqlite"
    engine = create_engine(f"sqlite:///{store}")
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0001")
    engine.dispose()
    db = sqlite3.connect(str(store))
    db.execute("PRAGMA foreign_keys = ON")
    row = ("r-old", "org/a", "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z", "completed", "0.30")
    db.execute(
        "INSERT INTO runs (id, run_id, model, started_at, ended_at, outcome, vllm_version, "
        "vllm_commit, gpu_kind, gpu_count, server_args, load_kind, tool_version, path, workload, "
        "settings, meta, notes, stored_at) VALUES (1, ?, ?, ?, ?, ?, ?, '', 'H100', 1, '', "
        "'concurrency', 'old', '/gone', '{}', '{}', '{}', '[]', '2026-01-01T00:11:00Z')",
        row,
    )
    db.execute("INSERT INTO levels VALUES (1, 1, 0, 'users', 8.0, 'requests')")
    db.execute("INSERT INTO figures VALUES (1, 'total_tok_per_s', 1234.5)")
    db.commit()
    db.close()
    assert _rows(store, "SELECT version_num FROM alembic_version") == [("0001",)]

    directory, _ = _tune_dir(tmp_path)
    assert main(["store", "import", directory, "--store", str(store)]) == 0
    assert _rows(store, "SELECT version_num FROM alembic_version") == [("0002",)]
    assert _rows(store, "SELECT count(*) FROM runs") == [(3,)]
    kept = "SELECT l.value, l.slo_met, f.figure, f.value FROM levels l JOIN figures f ON "
    kept += "f.level = l.id WHERE l.run = 1"
    assert _rows(store, kept) == [(8.0, None, "total_tok_per_s", 1234.5)]
    capsys.readouterr()
    assert main(["history", "--where", "run_id=r-old", "--json", "--store", str(store)]) == 0
    (old,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert old["total_tok_per_s"] == 1234.5 and old["vllm_version"] == "0.30"
    assert _rows(store, "SELECT count(*) FROM group_runs") == [(2,)]

    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from vllm_load.store.schema import METADATA

    engine = create_engine(f"sqlite:///{store}")
    with engine.begin() as conn:
        assert compare_metadata(MigrationContext.configure(conn), METADATA) == []
    engine.dispose()


def test_a_group_at_a_newer_schema_is_not_stored_and_says_how_to_later(tmp_path, capsys):
    store = tmp_path / "results.sqlite"
    directory, paths = _tune_dir(tmp_path)
    assert main(["store", "import", paths[0], "--store", str(store)]) == 0
    db = sqlite3.connect(str(store))
    db.execute("UPDATE alembic_version SET version_num = '0099'")
    db.commit()
    capsys.readouterr()
    assert remember_group(directory, str(store), "tune") is False
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "schema revision 0099" in err[0] and "nothing was written" in err[0]
    assert f"store it later with `vllm-load store import {directory} --store sqlite:///" in err[0]
    assert _rows(store, "SELECT count(*) FROM runs") == [(1,)]
    assert _rows(store, "SELECT count(*) FROM groups") == [(0,)]


def test_an_unreachable_postgresql_is_one_line_without_its_password(tmp_path, capsys):
    """At a tune's end and for the trend page alike: the URL shown with *** (the server at a
    port nothing listens on: no PostgreSQL needed)."""
    from vllm_load.sim.child import free_port

    directory, _ = _tune_dir(tmp_path)
    url = f"postgresql://bench:pg-s3cret@127.0.0.1:{free_port()}/results"
    assert remember_group(directory, url, "tune") is False
    at_end = capsys.readouterr()
    assert main(["history", "--html", str(tmp_path / "t.html"), "--store", url]) == 2
    drawn = capsys.readouterr()
    for printed in (at_end, drawn):
        (line,) = printed.err.strip().splitlines()
        assert "bench:***@127.0.0.1" in line and "pg-s3cret" not in printed.out + printed.err
    assert "vllm-load store import" in at_end.err and not (tmp_path / "t.html").exists()


def test_an_advice_tunes_server_commands_are_not_stored(tmp_path):
    """What advice was proved is kept, not the commands that ran it (a server's --api-key)."""
    from vllm_load.store.groups import read_group

    commands = {"A": "vllm serve m --api-key s3cret", "B": "vllm serve m --api-key s3cret -x"}
    advice = {"source": "r.summary.json", "series": "m", "commands": commands}
    state = {"format": 2, "mode": "advice", "runs": [], "advice": advice, "verdict": "paid off"}
    (tmp_path / "tune.json").write_text(json.dumps(state))
    group = read_group(str(tmp_path))
    assert group.detail == {
        "mode": "advice",
        "verdict": "paid off",
        "advice": {"source": "r.summary.json", "series": "m"},
    }


def test_an_slo_max_search_is_stored_as_a_tune_with_its_levels_and_result(
    tmp_path, capsys, monkeypatch
):
    from vllm_load.cli.tuning.slo_max_state import Level, SearchState

    directory = tmp_path / "s"
    paths = [_run(directory / "runs", i) for i in range(2)]

    def search(args):  # what find_slo_max leaves: its file, levels measured, its result
        assert args.store == str(store)
        state = SearchState({"slo": ["ttft_p99<=500ms"]})
        state.levels = [
            Level(float(n), p, [], v) for n, p, v in zip((4, 8), paths, ("holds", "fails"))
        ]
        state.result = {
            "status": "converged",
            "slo_max": 4.0,
            "bracket": [4.0, 8.0],
            "line": "SLO-max 4",
        }
        state.save(str(directory))
        return 0

    monkeypatch.setattr("vllm_load.cli.tuning.slo_max.find_slo_max", search)
    store = tmp_path / "results.sqlite"
    tune = ["tune", "--host", "http://127.0.0.1:9", "--slo", "ttft_p99<=500ms"]
    assert main([*tune, "--out", str(tmp_path), "--name", "s", "--store", str(store)]) == 0
    assert "(tune s stored: 2 run(s), 2 newly stored, 2 linked to it)" in capsys.readouterr().out
    linked = "SELECT r.path, g.label FROM group_runs g JOIN runs r ON r.id = g.run ORDER BY g.label"
    assert _rows(store, linked) == [(paths[0], "level=4"), (paths[1], "level=8")]
    assert main(["history", "--groups", "--store", str(store)]) == 0
    assert "; SLO-max 4.0 (bracket [4.0, 8.0])" in capsys.readouterr().out


def test_an_slo_max_search_that_met_no_level_keeps_what_it_measured(tmp_path, capsys, monkeypatch):
    from vllm_load.cli.errors import CommandFailed
    from vllm_load.cli.tuning.slo_max_state import Level, SearchState

    directory = tmp_path / "s"
    path = _run(directory / "runs", 0)

    def search(args):
        state = SearchState({"slo": ["ttft_p99<=1ms"]}, [Level(1.0, path, [], "fails")])
        state.save(str(directory))
        raise CommandFailed("no level meets the SLO (ttft_p99<=1ms)")

    monkeypatch.setattr("vllm_load.cli.tuning.slo_max.find_slo_max", search)
    store = tmp_path / "results.sqlite"
    tune = ["tune", "--host", "http://127.0.0.1:9", "--slo", "ttft_p99<=1ms", "--name", "s"]
    assert main([*tune, "--out", str(tmp_path), "--store", str(store)]) == 1
    assert "no level meets the SLO" in capsys.readouterr().err
    assert _rows(store, "SELECT label FROM group_runs") == [("level=1",)]
