"""The store's tables (SQLAlchemy Core), at the newest schema revision (`migrations/versions`).

`runs`: one row per run, its metadata in columns (what `history --where` filters on) and its
workload, settings, --meta and reader's notes as JSON. `levels`: one row per level of a run.
`figures`: one row per level and declared figure (`figures.level_figures`): long, not wide, so
that a figure declared in `figures.py` is stored with no migration and no edit here. A figure a
level has no value of has no row (unknown, never 0). `levels.slo_met`: 1 or 0 where the run was
started with `--slo` (settings `slo`) and the level met them or not, NULL where unknown or none.
`groups`: one row per tune or campaign (its directory, unique per kind), `group_runs` its runs,
each with its label there (a tune's configuration, a campaign's phase): a run is in one group at
most.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

METADATA = MetaData()

RUNS = Table(
    "runs",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(200), nullable=False, unique=True),
    Column("model", String(500), nullable=False, index=True),
    Column("started_at", String(40), nullable=False),
    Column("ended_at", String(40), nullable=False),
    Column("outcome", String(40), nullable=False),
    Column("vllm_version", String(100), nullable=False),
    Column("vllm_commit", String(100), nullable=False),
    Column("gpu_kind", String(200), nullable=False),
    Column("gpu_count", Integer, nullable=True),
    Column("server_args", Text, nullable=False),
    Column("load_kind", String(40), nullable=False),
    Column("tool_version", String(100), nullable=False),
    Column("path", Text, nullable=False),
    Column("workload", JSON, nullable=False),
    Column("settings", JSON, nullable=False),
    Column("meta", JSON, nullable=False),
    Column("notes", JSON, nullable=False),
    Column("stored_at", String(40), nullable=False),
)

LEVELS = Table(
    "levels",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("level", Integer, nullable=False),
    Column("kind", String(40), nullable=False),
    Column("value", Float, nullable=False),
    Column("stop_reason", String(40), nullable=False),
    Column("slo_met", Float, nullable=True),
    UniqueConstraint("run", "level"),
)

FIGURES = Table(
    "figures",
    METADATA,
    Column("level", Integer, ForeignKey("levels.id", ondelete="CASCADE"), nullable=False),
    Column("figure", String(100), nullable=False),
    Column("value", Float, nullable=False),
    PrimaryKeyConstraint("level", "figure"),
)

GROUPS = Table(
    "groups",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(20), nullable=False),  # "tune" or "campaign"
    Column("name", String(200), nullable=False),
    Column("directory", String(2000), nullable=False),
    Column("detail", JSON, nullable=False),  # what it decided (a tune's best, a verdict)
    Column("stored_at", String(40), nullable=False),
    UniqueConstraint("kind", "directory"),
)

GROUP_RUNS = Table(
    "group_runs",
    METADATA,
    Column("group_id", Integer, ForeignKey("groups.id", ondelete="CASCADE"), nullable=False),
    Column("run", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("label", String(500), nullable=False),
    PrimaryKeyConstraint("run"),
)

#: the `runs` columns `history --where` may name (besides meta.KEY)
FILTER_COLUMNS: tuple[str, ...] = (
    "run_id",
    "model",
    "outcome",
    "vllm_version",
    "vllm_commit",
    "gpu_kind",
    "gpu_count",
    "server_args",
    "load_kind",
    "tool_version",
)
