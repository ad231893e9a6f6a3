"""The report's "Targets" of a run with several (--hosts) in summary.json: each target, its loss
and its rows (`analysis.levels.per_target`)."""

from __future__ import annotations

from ..analysis.levels.per_target import rows_of
from .model import RunSummary


def _plain(value):
    return None if isinstance(value, float) and value != value else value


def target_rows(run: RunSummary) -> list[dict]:
    """`rows_of` every target of the run, target by target, as the report's table shows them."""
    return [row for target in run.targets for row in rows_of(target)]


def targets_json(run: RunSummary) -> list[dict]:
    """summary.json's `targets`: each target, its loss if any, and its rows ([] with one)."""
    return [
        {
            "url": t.url,
            "scrape_note": t.scrape_note,
            "lost": None
            if t.loss is None
            else {
                "level": t.loss.level,
                "failed": t.loss.failed,
                "errors": t.loss.errors,
                "last_ok": _plain(t.loss.last_ok),
            },
            "levels": [{k: _plain(v) for k, v in row.items()} for row in rows_of(t)],
        }
        for t in run.targets
    ]
