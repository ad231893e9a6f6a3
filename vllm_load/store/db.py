"""Opening, upgrading, writing and reading the results store.

`open_store` connects, refuses a store at a schema newer than this vllm-load knows (one line,
nothing written), and upgrades an older one (or a new, empty one) to the newest revision with
Alembic, in the same transaction as the check. On SQLite every transaction takes the write lock
when it begins (`BEGIN IMMEDIATE`) and waits up to `BUSY_S` for another process's: two runs
ending at once write one after the other, and two processes opening a new file create its tables
once; on PostgreSQL an advisory lock does the same for the opening (its rows need none). A run
is written whole (its row, its levels, their figures) in one transaction, or not at all; a run
already stored (its run_id) is left as it is.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from .location import StoreLocation
from .record import StoredGroup, StoredLevel, StoredRun

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

#: how long a write waits for another process's transaction on the same SQLite file
BUSY_S = 120.0
#: the PostgreSQL advisory lock a store's opening holds while it checks and migrates the schema
MIGRATION_LOCK = 5050
MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")


class StoreError(Exception):
    """The store cannot be used: one line saying why (the URL's password never in it)."""


class NewerSchema(StoreError):
    """The store was written by a newer vllm-load: nothing is written to it."""


def _alembic_config(connection):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    config.attributes["connection"] = connection
    return config


def _check_revision(connection, location: StoreLocation) -> None:
    """Refuse a store whose revision this vllm-load's migrations do not know: a newer one."""
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    current = MigrationContext.configure(connection).get_current_revision()
    script = ScriptDirectory.from_config(_alembic_config(connection))
    known = {rev.revision for rev in script.walk_revisions()}
    if current is not None and current not in known:
        raise NewerSchema(
            f"the results store {location.shown} is at schema revision {current}, which this "
            f"vllm-load does not know (its newest is {script.get_current_head()}): it was "
            "written by a newer vllm-load; upgrade vllm-load or give another --store (nothing "
            "was written)"
        )


def _serialised_sqlite(engine) -> None:
    """Every transaction on the SQLite file takes its write lock when it begins."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None  # we say when transactions begin
        dbapi_connection.execute("PRAGMA foreign_keys = ON")

    @event.listens_for(engine, "begin")
    def _begin(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _engine(location: StoreLocation):
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    if location.sqlite_path:
        folder = os.path.dirname(os.path.abspath(location.sqlite_path))
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            raise StoreError(f"the results store {location.shown}: {e.strerror}") from None
        engine = create_engine(location.url, connect_args={"timeout": BUSY_S}, poolclass=NullPool)
        _serialised_sqlite(engine)
        return engine
    return create_engine(location.url, poolclass=NullPool)


@dataclass
class Store:
    """An open results store, at the newest schema."""

    location: StoreLocation
    engine: Engine

    def close(self) -> None:
        self.engine.dispose()

    def write(self, run: StoredRun) -> bool:
        """Store `run` whole, in one transaction; False (nothing written) when its run_id is
        stored already."""
        from sqlalchemy import select
        from sqlalchemy.exc import SQLAlchemyError

        from .schema import RUNS

        try:
            with self.engine.begin() as conn:
                if conn.execute(select(RUNS.c.id).where(RUNS.c.run_id == run.run_id)).first():
                    return False
                _insert(conn, run)
        except SQLAlchemyError as e:  # the transaction was rolled back: nothing of it stored
            raise StoreError(f"the results store {self.location.shown}: {_reason(e)}") from None
        return True

    def write_group(self, group: StoredGroup, runs: list[StoredRun]) -> GroupWritten:
        """Store the tune or campaign `group` and its `runs`, linked to it, in one transaction:
        the group once (its kind and directory), a run stored already (by `vllm-load run` or an
        import) linked where it is in no group yet, the others stored whole."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.engine.begin() as conn:
                return _insert_group(conn, group, runs)
        except SQLAlchemyError as e:  # the transaction was rolled back: nothing of it stored
            raise StoreError(f"the results store {self.location.shown}: {_reason(e)}") from None


@dataclass(frozen=True)
class GroupWritten:
    """What `write_group` did: the group new or stored already, runs stored and linked."""

    new: bool
    stored: int
    linked: int


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _insert_group(conn, group: StoredGroup, runs: list[StoredRun]) -> GroupWritten:
    from sqlalchemy import insert, select

    from .schema import GROUP_RUNS, GROUPS, RUNS

    where = (GROUPS.c.kind == group.kind) & (GROUPS.c.directory == group.directory)
    found = conn.execute(select(GROUPS.c.id).where(where)).first()
    if found:
        key = found[0]
        conn.execute(GROUPS.update().where(GROUPS.c.id == key).values(detail=group.detail))
    else:
        row = dict(
            kind=group.kind,
            name=group.name,
            directory=group.directory,
            detail=group.detail,
            stored_at=_now(),
        )
        key = conn.execute(insert(GROUPS).values(**row)).inserted_primary_key[0]
    stored = linked = 0
    for run in runs:
        have = conn.execute(select(RUNS.c.id).where(RUNS.c.run_id == run.run_id)).first()
        run_key = have[0] if have else _insert(conn, run)
        stored += not have
        if conn.execute(select(GROUP_RUNS.c.run).where(GROUP_RUNS.c.run == run_key)).first():
            continue
        label = group.labels.get(run.path, "")
        conn.execute(insert(GROUP_RUNS).values(group_id=key, run=run_key, label=label))
        linked += 1
    return GroupWritten(not found, stored, linked)


def _insert(conn, run: StoredRun) -> int:
    from sqlalchemy import insert

    from .schema import FIGURES, LEVELS, RUNS

    row = {k: v for k, v in asdict(run).items() if k != "levels"}
    row["stored_at"] = _now()
    run_key = conn.execute(insert(RUNS).values(**row)).inserted_primary_key[0]
    for level in run.levels:
        level_key = conn.execute(
            insert(LEVELS).values(
                run=run_key,
                level=level.level,
                kind=level.kind,
                value=level.value,
                stop_reason=level.stop_reason,
                slo_met=level.slo_met,
            )
        ).inserted_primary_key[0]
        if level.figures:
            conn.execute(
                insert(FIGURES),
                [{"level": level_key, "figure": k, "value": v} for k, v in level.figures.items()],
            )
    return run_key


def open_store(location: StoreLocation) -> Store:
    """Connect to the store and bring it to the newest schema. Raises NewerSchema on a store
    written by a newer vllm-load, StoreError when it cannot be reached or read."""
    from alembic import command
    from sqlalchemy.exc import SQLAlchemyError

    try:
        engine = _engine(location)
    except (SQLAlchemyError, ImportError, ValueError) as e:  # a bad URL, a driver not installed
        raise StoreError(f"the results store {location.shown}: {_reason(e)}") from None
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":  # two masters opening a new store: one creates it
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
            _check_revision(conn, location)
            command.upgrade(_alembic_config(conn), "head")
    except SQLAlchemyError as e:
        engine.dispose()
        raise StoreError(f"the results store {location.shown}: {_reason(e)}") from None
    except StoreError:
        engine.dispose()
        raise
    return Store(location, engine)


def _reason(error: Exception) -> str:
    """The database's own words, one line, without the URL (SQLAlchemy's message may hold it)."""
    from .location import hide_password

    orig = getattr(error, "orig", None)
    text = str(orig if orig is not None else error).strip().splitlines()
    return hide_password(text[0] if text else type(error).__name__)


def read_levels(conn, run_keys: list[int]) -> dict[int, list[StoredLevel]]:
    """The levels (with their figures) of the runs `run_keys`, by run key, in level order."""
    from sqlalchemy import select

    from .schema import FIGURES, LEVELS

    if not run_keys:
        return {}
    rows = conn.execute(
        select(LEVELS, FIGURES.c.figure, FIGURES.c.value.label("figure_value"))
        .outerjoin(FIGURES, FIGURES.c.level == LEVELS.c.id)
        .where(LEVELS.c.run.in_(run_keys))
        .order_by(LEVELS.c.run, LEVELS.c.level)
    ).mappings()
    levels: dict[tuple[int, int], StoredLevel] = {}
    for r in rows:
        key = (r["run"], r["level"])
        if key not in levels:
            levels[key] = StoredLevel(
                r["level"], r["kind"], r["value"], r["stop_reason"], {}, r["slo_met"]
            )
        if r["figure"] is not None:
            levels[key].figures[r["figure"]] = r["figure_value"]
    out: dict[int, list[StoredLevel]] = {}
    for (run_key, _), level in levels.items():
        out.setdefault(run_key, []).append(level)
    return out


@dataclass(frozen=True)
class Membership:
    """The tune or campaign a stored run belongs to, and its label there."""

    group_id: int
    kind: str
    name: str
    label: str


def read_memberships(conn, run_keys: list[int]) -> dict[int, Membership]:
    """The group of each run of `run_keys` that is in one, by run key."""
    from sqlalchemy import select

    from .schema import GROUP_RUNS, GROUPS

    if not run_keys:
        return {}
    rows = conn.execute(
        select(GROUP_RUNS.c.run, GROUPS.c.id, GROUPS.c.kind, GROUPS.c.name, GROUP_RUNS.c.label)
        .join(GROUPS, GROUPS.c.id == GROUP_RUNS.c.group_id)
        .where(GROUP_RUNS.c.run.in_(run_keys))
    )
    return {run: Membership(key, kind, name, label) for run, key, kind, name, label in rows}
