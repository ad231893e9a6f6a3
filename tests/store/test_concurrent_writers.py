"""Two processes ending runs at once on one SQLite store lose nothing (docs/store.md): both open
a store that does not exist yet (its tables created once), then write their runs at the same
time, each run in its own transaction. They do it on several new stores in turn, so that the
opening of each new one is raced (without serialised transactions one in three pairs of
processes failed with "table runs already exists")."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time

from vllm_load.figures import level_figures

#: one writer: once the go file appears, opens each new store in turn and writes its runs to it
WRITER = textwrap.dedent(
    """
    import os, sys, time
    import alembic.command, alembic.script, sqlalchemy  # imported before the go: both open at once
    from vllm_load.store.db import open_store
    from vllm_load.store.location import locate
    from vllm_load.store.record import StoredLevel, StoredRun

    folder, tag, stores, n, keys = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    while not os.path.exists(os.path.join(folder, "go")):
        time.sleep(0.001)
    for s in range(stores):
        store = open_store(locate(os.path.join(folder, f"results-{s}.sqlite")))
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


def test_two_processes_writing_new_sqlite_stores_at_once_lose_no_run(tmp_path):
    stores, n = 5, 4
    keys = ",".join(f.key for f in level_figures())
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), tag, str(stores), str(n), keys],
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    time.sleep(1.0)  # both have imported and wait for the go
    (tmp_path / "go").write_text("")
    errors = [w.communicate(timeout=240)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors
    for s in range(stores):
        db = sqlite3.connect(str(tmp_path / f"results-{s}.sqlite"))
        run_ids = {r for (r,) in db.execute("SELECT run_id FROM runs")}
        assert run_ids == {f"{tag}-{i}" for tag in "ab" for i in range(n)}
        assert db.execute("SELECT count(*) FROM levels").fetchone() == (2 * n * 3,)
        assert db.execute("SELECT count(*) FROM figures").fetchone() == (
            2 * n * 3 * len(keys.split(",")),
        )
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [("0001",)]
