"""Alembic's environment for the results store: migrations run on the connection `db` opened
(in its transaction, so that two processes opening a new store one after the other create it
once), never on a URL of their own."""

from __future__ import annotations

from alembic import context

from vllm_load.store.schema import METADATA

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=METADATA, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
