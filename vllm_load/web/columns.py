"""The LLM view's tables, as columns of (key, title): the figures shown now (`run.live_figures`)
between the level's head and what limited it. Plain data, importable without Flask or Locust
(whose import patches the process for gevent)."""

from __future__ import annotations

#: the per-level table's first columns; its figures follow (`figures.LIVE`, `run.live_figures`)
LEVEL_HEAD = [("level", "Level"), ("users", "Users"), ("finished", "Finished")]
#: after them, what limited the level so far (`run.live_verdict`)
VERDICT_COLUMNS = [("verdict", "Limit"), ("verdict_reason", "Why (server /metrics)")]


#: Locust's extended tabs: (key, the snapshot's rows it shows, title)
TAB_ROWS = (
    ("llm", "levels", "LLM"),
    ("llm_personas", "personas", "LLM by persona"),
    ("llm_targets", "targets", "LLM by target"),
)
TABS = tuple((key, of) for key, of, _ in TAB_ROWS)


def table_columns(figures: list) -> dict[str, list]:
    """The LLM tables' (key, title) columns, given the figures shown now (a snapshot's
    `figures`: a reasoning model's TTFAT only where a level had reasoning): the levels' table,
    the personas' (the figures with the user class after the users, no verdict) and the
    targets' of a test of several (--hosts), likewise."""
    figures = [tuple(f) for f in figures]
    return {
        "levels": [*LEVEL_HEAD, *figures, *VERDICT_COLUMNS],
        "personas": [*LEVEL_HEAD[:2], ("user_class", "Persona"), *LEVEL_HEAD[2:], *figures],
        "targets": [*LEVEL_HEAD[:2], ("target", "Target"), *LEVEL_HEAD[2:], *figures],
    }


def extended_tables(columns: dict[str, list]) -> list[dict]:
    """Locust's extended tables (`template_args["extended_tables"]`) of these columns."""
    return [
        {"key": key, "structure": [{"key": k, "title": title} for k, title in columns[of]]}
        for key, of in TABS
    ]
