"""A throwaway PostgreSQL server for the results store's tests: Debian's package (`initdb`,
`pg_ctl`), a cluster in a temporary folder listening on 127.0.0.1 at a free port, trust
authentication, stopped and removed afterwards. Run as the `postgres` user when the tests run as
root (initdb refuses root)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from typing import Iterator

from vllm_load.sim.child import free_port


def _binary(name: str) -> str:
    """A PostgreSQL program: on the PATH, else Debian's (/usr/lib/postgresql/VERSION/bin, which
    the package does not put on the PATH), the newest version's; "" when there is none."""
    found = shutil.which(name)
    if found:
        return found
    versions = glob.glob(f"/usr/lib/postgresql/*/bin/{name}")
    return max(versions, key=lambda p: int(p.split("/")[4]), default="") if versions else ""


def _as_server_user() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def available() -> str:
    """Why no server can be started here ("" when one can)."""
    if not (_binary("initdb") and _binary("pg_ctl")):
        return (
            "PostgreSQL's initdb and pg_ctl are not installed (Debian: apt-get install postgresql)"
        )
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root without runuser to start PostgreSQL as its own user"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install -e '.[test]')"
    return ""


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A running server; yields its base URL (`postgresql+psycopg://postgres@127.0.0.1:PORT`)."""
    folder = tempfile.mkdtemp(prefix="vllm-load-pg-")
    data, port = os.path.join(folder, "data"), free_port()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    user = _as_server_user()
    run = lambda *cmd: subprocess.run(  # noqa: E731
        [*user, *cmd], check=True, capture_output=True, text=True, timeout=120
    )
    try:
        run(_binary("initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
        run(
            _binary("pg_ctl"),
            "-D",
            data,
            "-l",
            os.path.join(folder, "log"),
            "-w",
            "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        )
        try:
            yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
        finally:
            run(_binary("pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def create_database(base_url: str, name: str) -> str:
    """A new, empty database on the server; its URL."""
    import psycopg

    plain = base_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(f"{plain}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{base_url}/{name}"
