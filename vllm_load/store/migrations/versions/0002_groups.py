"""Tunes and campaigns, their runs linked to them, and whether each level met its run's SLOs.

Revision ID: 0002
Revises: 0001

New tables only and one nullable column (`levels.slo_met`): a store at 0001 is upgraded in place
with its runs as they were (a run stored before has no SLO judgement: unknown, never 0).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "groups",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("directory", sa.String(2000), nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.Column("stored_at", sa.String(40), nullable=False),
        sa.UniqueConstraint("kind", "directory"),
    )
    op.create_table(
        "group_runs",
        sa.Column(
            "group_id", sa.Integer, sa.ForeignKey("groups.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("run", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("label", sa.String(500), nullable=False),
        sa.PrimaryKeyConstraint("run"),
    )
    op.add_column("levels", sa.Column("slo_met", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("levels") as batch:
        batch.drop_column("slo_met")
    op.drop_table("group_runs")
    op.drop_table("groups")
