"""Runs whose files were cut short (a run killed mid-write, or still running): `report` and
`compare` both analyse what is sound, say what was left out, and exit 2 unless told to accept
it, so a cut run never passes a script or a CI gate as a whole one."""

from __future__ import annotations

import argparse
from typing import Sequence

from ..user_values import SettingsError

FLAG = "--allow-partial"


def add_allow_partial(parser: argparse.ArgumentParser, written: str) -> None:
    """The flag that accepts partial runs; `written`: what the command writes either way."""
    parser.add_argument(
        FLAG,
        action="store_true",
        help=f"exit 0 on runs whose files were cut short (a run killed mid-write, or still "
        f"running): the {written}, written either way, is from what is sound and says so at its "
        f"top; without this flag such a {written} exits 2",
    )


def refuse_partial(notes: Sequence[str], allowed: bool, written: str) -> None:
    """Raise the one-line refusal when `notes` says files were cut short and it is not `allowed`
    (after the command has written its output and printed the notes)."""
    if notes and not allowed:
        raise SettingsError(
            f"the {written} is from partial run files ({len(notes)} left out, above, and at "
            f"the {written}'s top): its figures may differ from the whole run's; pass {FLAG} "
            "to accept them"
        )
