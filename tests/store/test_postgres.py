"""The results store on a real PostgreSQL server (Debian's package, started by the test): runs
imported, listed and drawn (the trend page) as on SQLite, a store at a newer schema refused with
nothing written, and the password in the URL never printed nor written to the page."""

from __future__ import annotations

import json

import pytest
from support.postgres import available, create_database, postgres_server

from vllm_load.cli.main import main
from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run
from vllm_load.store.cli import remember

pytestmark = pytest.mark.skipif(bool(available()), reason=available() or "available")


def test_runs_stored_on_postgresql_are_listed_and_a_newer_schema_is_refused(tmp_path, capsys):
    paths = [
        write_synthetic_run(
            str(tmp_path / "runs"),
            SyntheticRun(
                levels=(4, 8),
                warmup_requests=4,
                requests_per_level=20,
                output_tokens=32,
                seed=i,
                start_ts=1_790_000_000.0 + 3600 * i,
            ),
        )
        for i in range(2)
    ]
    with postgres_server() as base:
        url = create_database(base, "results")
        # trust authentication takes any password: what matters is that it is never shown
        secret = url.replace("postgresql+psycopg://postgres@", "postgresql://postgres:pg-s3cret@")
        assert main(["store", "import", paths[0], "--store", secret]) == 0
        assert remember(paths[1], secret, 0) == 0
        stored = capsys.readouterr()
        assert "postgres:***@" in stored.out
        assert main(["history", "--json", "--figure", "ttft_p99", "--store", secret]) == 0
        out = capsys.readouterr().out
        listed = [json.loads(line) for line in out.splitlines()]
        assert [r["path"] for r in listed] == paths
        assert all(0 < r["ttft_p99"] < 1 for r in listed)

        # a tune's directory: its runs, stored already, linked to it (a table named groups,
        # a column named group_id: as on SQLite)
        runs = [
            {"config": {"s": str(i)}, "run_dir": p, "outcome": "completed"}
            for i, p in enumerate(paths)
        ]
        (tmp_path / "tune.json").write_text(
            json.dumps({"format": 2, "mode": "matrix", "runs": runs})
        )
        assert main(["store", "import", str(tmp_path), "--store", secret]) == 0
        assert "tune " + tmp_path.name + " stored: 2 run(s), 0 newly stored, 2 linked" in (
            capsys.readouterr().out
        )
        assert main(["history", "--groups", "--json", "--store", secret]) == 0
        (group,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert group["labels"] == ["s=0", "s=1"] and group["run_ids"] == [
            r["run_id"] for r in listed
        ]

        page = tmp_path / "trend.html"
        assert main(["history", "--html", str(page), "--store", secret]) == 0
        drawn = capsys.readouterr()
        assert "postgres:***@" in drawn.out and "postgres:***@" in page.read_text()

        import psycopg

        plain = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute("UPDATE alembic_version SET version_num = '0099'")
        capsys.readouterr()
        assert main(["history", "--store", secret]) == 2
        printed = capsys.readouterr()
        assert "schema revision 0099" in printed.err and "nothing was written" in printed.err
        with psycopg.connect(plain) as conn:
            assert conn.execute("SELECT count(*) FROM runs").fetchone() == (2,)
    text = stored.out + stored.err + printed.out + printed.err + out + drawn.out + drawn.err
    assert "pg-s3cret" not in text and "pg-s3cret" not in page.read_text()
