"""The results store (docs/store.md): a run's metadata and per-level figures stored as the
report measures them, a figure declared in `figures.py` stored with no edit of the store, a run
stored once, a store at a newer schema refused with nothing written, a store that cannot be
reached at the end of a run leaving the run whole with the command to store it later, a
password in the store's URL never printed."""

from __future__ import annotations

import hashlib
import os
import sqlite3

import pytest

from vllm_load import figures
from vllm_load.analysis.levels.measure import measure_levels
from vllm_load.cli.main import main
from vllm_load.figures import PerRequest
from vllm_load.run_format.load import load_run
from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run
from vllm_load.store.cli import remember

SPEC = dict(levels=(4, 8), warmup_requests=4, requests_per_level=20, output_tokens=32)


def _runs(base, n: int, **meta) -> list[str]:
    return [
        write_synthetic_run(
            str(base),
            SyntheticRun(
                **SPEC,
                seed=i,
                start_ts=1_790_000_000.0 + 3600 * i,
                meta={"gpus": "2", "gpu": "H100", **meta},
            ),
        )
        for i in range(n)
    ]


def _db(path) -> sqlite3.Connection:
    return sqlite3.connect(str(path))


def _figures(store, run_id: str) -> dict[tuple[float, str], float]:
    rows = _db(store).execute(
        "SELECT l.value, f.figure, f.value FROM figures f JOIN levels l ON f.level = l.id "
        "JOIN runs r ON l.run = r.id WHERE r.run_id = ?",
        (run_id,),
    )
    return {(value, figure): v for value, figure, v in rows}


def test_import_stores_metadata_and_every_figure_as_the_report_measures_it(tmp_path, capsys):
    store = tmp_path / "results.sqlite"
    (path,) = _runs(tmp_path / "runs", 1)
    assert main(["store", "import", str(tmp_path / "runs"), "--store", str(store)]) == 0
    run = load_run(path)
    metrics = measure_levels(run.requests, run.steps, run.streams).metrics
    stored = _figures(store, run.run_id)
    declared = [f.key for f in figures.level_figures() if f.key in metrics]
    expected = {
        (row["value"], key): row[key]
        for row in metrics.to_dict("records")
        for key in declared
        if row[key] == row[key]  # a figure the level has no value of is not stored
    }
    assert stored == pytest.approx(expected, rel=1e-12)
    assert ("8.0", "ttft_p99") in {(str(v), k) for v, k in stored}
    row = (
        _db(store)
        .execute("SELECT model, outcome, vllm_version, gpu_kind, gpu_count, load_kind FROM runs")
        .fetchone()
    )
    assert row == ("synthetic/model-8b", "completed", "synthetic", "H100", 2, "concurrency")

    # imported again: left as it is, nothing duplicated
    assert main(["store", "import", path, "--store", str(store)]) == 0
    assert "already stored: " in capsys.readouterr().out
    assert _db(store).execute("SELECT count(*) FROM runs").fetchone() == (1,)
    assert len(_figures(store, run.run_id)) == len(stored)


#: a per-request figure the store never names: each request's longest token gap
LONGEST_GAP = PerRequest("itl_max", "longest gap", "s", "the longest gap between two tokens")


def test_a_newly_declared_figure_is_stored_without_editing_the_store(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "PER_REQUEST", [*figures.PER_REQUEST, LONGEST_GAP])
    store = tmp_path / "results.sqlite"
    (path,) = _runs(tmp_path / "runs", 1)
    assert main(["store", "import", path, "--store", str(store)]) == 0
    stored = _figures(store, load_run(path).run_id)
    assert {k for _, k in stored} >= {"itl_max_p50", "itl_max_p99"}
    assert all(stored[(v, "itl_max_p99")] > 0 for v in (4.0, 8.0))


def test_a_damaged_run_is_named_and_the_others_are_stored(tmp_path, capsys):
    store = tmp_path / "results.sqlite"
    good, bad = _runs(tmp_path / "runs", 2)
    with open(os.path.join(bad, "requests.csv"), "w") as fh:
        fh.write("")
    code = main(["store", "import", good, bad, "--store", str(store)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"not imported: {bad}/requests.csv" in err
    assert _db(store).execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_a_store_at_a_newer_schema_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys):
    store = tmp_path / "results.sqlite"
    first, second = _runs(tmp_path / "runs", 2)
    assert main(["store", "import", first, "--store", str(store)]) == 0
    with _db(store) as db:  # as a later vllm-load would leave it
        db.execute("UPDATE alembic_version SET version_num = '0099'")
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    capsys.readouterr()
    assert main(["store", "import", second, "--store", str(store)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "schema revision 0099" in err[0] and "newer vllm-load" in err[0]
    assert "nothing was written" in err[0]
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before


def test_a_store_at_a_newer_schema_at_a_runs_end_keeps_both_and_says_how_to_import_later(
    tmp_path, capsys
):
    store = tmp_path / "results.sqlite"
    first, second = _runs(tmp_path / "runs", 2)
    assert main(["store", "import", first, "--store", str(store)]) == 0
    with _db(store) as db:
        db.execute("UPDATE alembic_version SET version_num = '0099'")
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    capsys.readouterr()
    assert remember(second, str(store), 0) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "schema revision 0099" in err[0], err
    assert f"`vllm-load store import {second} --store sqlite:///{store}`" in err[0]
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before


def _tree(path: str) -> dict[str, str]:
    out = {}
    for dirpath, _, names in os.walk(path):
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as fh:
                out[os.path.join(dirpath, name)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def test_a_store_that_cannot_be_written_at_a_runs_end_keeps_the_run_and_says_how_to_import_it(
    tmp_path, capsys
):
    (path,) = _runs(tmp_path / "runs", 1)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    before = _tree(path)
    # a store the user named: a run that would exit 0 exits 1 (a pipeline must not think it stored)
    assert remember(path, str(blocked / "results.sqlite"), 0) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "the run was not stored" in err[0]
    assert f"`vllm-load store import {path} --store sqlite:///{blocked}/results.sqlite`" in err[0]
    assert _tree(path) == before
    # an ended run's own exit status stays
    assert remember(path, str(blocked / "results.sqlite"), 5) == 5


def test_an_unreachable_postgresql_at_a_runs_end_is_one_line_without_its_password(tmp_path, capsys):
    (path,) = _runs(tmp_path / "runs", 1)
    before = _tree(path)
    url = "postgresql://bench:s3cr3t-pw@127.0.0.1:9/results"  # nothing listens on port 9
    assert remember(path, url, 0) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "the run was not stored" in line and "Connection refused" in line
    shown = "postgresql+psycopg://bench:***@127.0.0.1:9/results"
    assert f"`vllm-load store import {path} --store {shown}`" in line
    assert _tree(path) == before
    assert main(["store", "import", path, "--store", url]) == 2
    out = capsys.readouterr()
    assert "s3cr3t" not in line + out.out + out.err
    assert shown in out.err


def test_the_default_store_is_in_the_data_directory_and_the_environment_overrides_it(
    tmp_path, monkeypatch
):
    from vllm_load.store.location import STORE_ENV, locate

    monkeypatch.delenv(STORE_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    default = locate(None)
    assert default is not None and not default.explicit
    assert default.sqlite_path == str(tmp_path / "data" / "vllm-load" / "results.sqlite")
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "team.sqlite"))
    assert locate(None).sqlite_path == str(tmp_path / "team.sqlite")
    assert locate(str(tmp_path / "given.sqlite")).sqlite_path == str(tmp_path / "given.sqlite")
    assert locate("none") is None


def test_a_speculating_servers_figures_are_stored_as_the_report_measures_them(tmp_path):
    # the store measured runs with its own two calls, which left out speculative decoding
    from vllm_load.analysis.measured_run import measure_run
    from vllm_load.run_format.synthetic import ServerModel, SyntheticRun, write_synthetic_run

    spec = SyntheticRun(
        levels=(4, 16), requests_per_level=40, warmup_requests=4, output_tokens=64,
        scrape_interval=0.25, server=ServerModel(speculation=(0.9, 0.6, 0.3)),
    )  # fmt: skip
    path = write_synthetic_run(str(tmp_path / "runs"), spec)
    store = tmp_path / "results.sqlite"
    assert main(["store", "import", path, "--store", str(store)]) == 0
    stored = _figures(store, load_run(path).run_id)
    measured = measure_run(path).metrics
    for value, length in zip(measured["value"], measured["spec_acceptance_length"]):
        assert stored[(value, "spec_acceptance_length")] == pytest.approx(length)
    assert stored[(4.0, "spec_acceptance_length")] == pytest.approx(2.8)
