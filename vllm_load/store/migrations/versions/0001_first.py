"""The first schema: runs, their levels, and one row per level and declared figure.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(200), nullable=False, unique=True),
        sa.Column("model", sa.String(500), nullable=False, index=True),
        sa.Column("started_at", sa.String(40), nullable=False),
        sa.Column("ended_at", sa.String(40), nullable=False),
        sa.Column("outcome", sa.String(40), nullable=False),
        sa.Column("vllm_version", sa.String(100), nullable=False),
        sa.Column("vllm_commit", sa.String(100), nullable=False),
        sa.Column("gpu_kind", sa.String(200), nullable=False),
        sa.Column("gpu_count", sa.Integer, nullable=True),
        sa.Column("server_args", sa.Text, nullable=False),
        sa.Column("load_kind", sa.String(40), nullable=False),
        sa.Column("tool_version", sa.String(100), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("workload", sa.JSON, nullable=False),
        sa.Column("settings", sa.JSON, nullable=False),
        sa.Column("meta", sa.JSON, nullable=False),
        sa.Column("notes", sa.JSON, nullable=False),
        sa.Column("stored_at", sa.String(40), nullable=False),
    )
    op.create_table(
        "levels",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("stop_reason", sa.String(40), nullable=False),
        sa.UniqueConstraint("run", "level"),
    )
    op.create_table(
        "figures",
        sa.Column(
            "level", sa.Integer, sa.ForeignKey("levels.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("figure", sa.String(100), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("level", "figure"),
    )


def downgrade() -> None:
    op.drop_table("figures")
    op.drop_table("levels")
    op.drop_table("runs")
