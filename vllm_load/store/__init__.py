"""The results store: every run remembered, in a database that outlives its run directory
(docs/store.md).

An edge: it reads the run-directory contract (docs/run-format.md) and writes a database. A run's
metadata comes from its run.json (`record`); its per-level figures are those the report and
`compare` compute (`analysis.measured_run.measure_run`, with the GPUs' and speculative decoding's figures), one row per level
and declared figure (`figures.level_figures`), so a figure declared there reaches the store with
no migration. The schema (`schema`) is versioned and migrated by Alembic (`migrations/`);
`location` says where the store is (SQLite in the user's data directory unless told otherwise)
and hides any password in its URL; `db` opens, upgrades, writes and reads it; `cli` is
`vllm-load store import` and `vllm-load history`.
"""
