"""Two processes ending runs at once on one store lose nothing (docs/store.md): both open a store
that does not exist yet (its tables created once), then write their runs at the same time, each
run in its own transaction; on an SQLite file and on a real PostgreSQL server. They do it on
several new stores in turn, so that the opening of each new one is raced (on SQLite, without
serialised transactions one in three pairs of processes failed with "table runs already
exists")."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
from support.postgres import available, create_database, postgres_server

from vllm_load.figures import level_figures

#: one writer: once the go file appears, opens each new store in turn and writes its runs to it
WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    import alembic.command, alembic.script, sqlalchemy  # imported before the go: both open at once
    from vllm_load.store.db import open_store
    from vllm_load.store.location import locate
    from vllm_load.store.record import StoredLevel, StoredRun

    go, tag, n, keys, stores = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5])
    while not os.path.exists(go):
        time.sleep(0.001)
    for where in stores:
        store = open_store(locate(where))
        for i in range(n):
            levels = [
                StoredLevel(lv, "concurrency", float(users), "target_reached",
                            {k: float(i + lv) for k in keys.split(",")})
                for lv, users in enumerate((8, 32, 128))
            ]
            run = StoredRun(f"{tag}-{i}", "m", "2026-11-29T00:00:00Z", "", "completed", "0.32",
                            "", "H100", 1, "", "concurrency", "test", "/runs", levels=levels)
            assert store.write(run)
        store.close()
    """
)
ROUNDS, RUNS = 5, 4


@pytest.fixture(params=["sqlite", "postgresql"])
def new_stores(request, tmp_path):
    """ROUNDS stores that do not exist yet (SQLite files, or databases with no table)."""
    if request.param == "sqlite":
        yield [str(tmp_path / f"results-{s}.sqlite") for s in range(ROUNDS)]
        return
    if why := available():
        pytest.skip(why)
    with postgres_server() as base:
        yield [create_database(base, f"results_{s}") for s in range(ROUNDS)]


def _count(where: str, sql: str):
    from sqlalchemy import create_engine, text

    from vllm_load.store.location import locate

    location = locate(where)
    assert location is not None
    engine = create_engine(location.url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql)).fetchall()
    finally:
        engine.dispose()


def test_two_processes_writing_new_stores_at_once_lose_no_run(new_stores, tmp_path):
    keys = ",".join(f.key for f in level_figures())
    go = str(tmp_path / "go")
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, go, tag, str(RUNS), keys, json.dumps(new_stores)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    time.sleep(1.0)  # both have imported and wait for the go
    (tmp_path / "go").write_text("")
    errors = [w.communicate(timeout=240)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors
    for where in new_stores:
        run_ids = {r for (r,) in _count(where, "SELECT run_id FROM runs")}
        assert run_ids == {f"{tag}-{i}" for tag in "ab" for i in range(RUNS)}
        assert _count(where, "SELECT count(*) FROM levels") == [(2 * RUNS * 3,)]
        figures = 2 * RUNS * 3 * len(keys.split(","))
        assert _count(where, "SELECT count(*) FROM figures") == [(figures,)]
        assert _count(where, "SELECT version_num FROM alembic_version") == [(_head(),)]


def _head() -> str:
    """The newest schema revision this vllm-load knows: where a new store is created."""
    from alembic.script import ScriptDirectory

    from vllm_load.store.db import _alembic_config

    return ScriptDirectory.from_config(_alembic_config(None)).get_current_head()
