"""`vllm-load history` lists the stored runs of a model, oldest first, filtered by `--where`, with
a figure at its best level or at `--level`; bad keys and figures are refused in one line. The
schema the migrations build is the one `store.schema` declares."""

from __future__ import annotations

import json

import pytest

from vllm_load.cli.main import main
from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run

SPEC = dict(levels=(4, 8), warmup_requests=4, requests_per_level=20, output_tokens=32)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    base = tmp_path_factory.mktemp("history")
    for i, (model, gpu) in enumerate(
        [("org/a", "H100"), ("org/b", "H100"), ("org/a", "A100"), ("org/a", "H100")]
    ):
        write_synthetic_run(
            str(base / "runs"),
            SyntheticRun(
                **SPEC,
                model=model,
                seed=i,
                start_ts=1_790_000_000.0 + 3600 * (3 - i),  # the last written is the oldest
                meta={"gpu": gpu, "gpus": "1"},
            ),
        )
    path = str(base / "results.sqlite")
    assert main(["store", "import", str(base / "runs"), "--store", path]) == 0
    return path


def _listed(store, capsys, *args) -> list[dict]:
    capsys.readouterr()
    assert main(["history", *args, "--json", "--store", store]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_history_lists_a_models_runs_oldest_first_filtered(store, capsys):
    runs = _listed(store, capsys, "--model", "org/a")
    assert [r["model"] for r in runs] == ["org/a"] * 3
    assert [r["started_at"] for r in runs] == sorted(r["started_at"] for r in runs)
    h100 = _listed(store, capsys, "--model", "org/a", "--where", "meta.gpu=H100")
    assert len(h100) == 2 and all(r["meta"]["gpu"] == "H100" for r in h100)
    assert (
        _listed(store, capsys, "--where", "gpu_kind=A100", "--where", "model=org/a")[0]["gpu_kind"]
        == "A100"
    )
    assert _listed(store, capsys, "--where", "gpu_kind=B200") == []


def test_history_shows_a_figure_at_its_peak_or_at_a_level(store, capsys):
    peak = _listed(store, capsys, "--model", "org/b")
    assert peak[0]["at_level"] == 8.0 and peak[0]["total_tok_per_s"] > 0
    at4 = _listed(store, capsys, "--model", "org/b", "--figure", "ttft_p99", "--level", "4")
    assert at4[0]["at_level"] == 4.0 and 0 < at4[0]["ttft_p99"] < 1
    capsys.readouterr()
    assert main(["history", "--model", "org/b", "--store", store]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[-2:] == ["total", "tok/s"]
    assert table[1].endswith(" at 8") and table[-1].startswith("1 run(s) in sqlite:///")


@pytest.mark.parametrize(
    "args, says",
    [
        (["--where", "colour=red"], "--where colour: no such key"),
        (["--where", "model"], "--where takes KEY=VALUE"),
        (["--figure", "speed"], "--figure speed: no such figure"),
    ],
)
def test_bad_history_arguments_are_one_line_and_exit_2(store, capsys, args, says):
    capsys.readouterr()
    assert main(["history", *args, "--store", store]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_the_migrations_build_the_declared_schema(tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from vllm_load.store.db import open_store
    from vllm_load.store.location import locate
    from vllm_load.store.schema import METADATA

    store = open_store(locate(str(tmp_path / "s.sqlite")))
    try:
        with store.engine.begin() as conn:
            assert compare_metadata(MigrationContext.configure(conn), METADATA) == []
    finally:
        store.close()
