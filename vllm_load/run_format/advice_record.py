"""The record of `tune --advice` loops: one JSON line per loop, what advice of a verdict kind was
tried and whether it paid off, so a later report can say how often advice of its kind did
(`docs/diagnosis.md`, "Does the advice pay off").

It lives outside any run directory (advice is judged across runs and servers): at
`$VLLM_LOAD_ADVICE_RECORD`, else `$XDG_DATA_HOME/vllm-load/advice-record.jsonl` (default
`~/.local/share/...`). Lines that do not parse are skipped and counted, never fatal: the record is
history, not input a report depends on.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

RECORD_ENV = "VLLM_LOAD_ADVICE_RECORD"
PAID_OFF, DID_NOT, UNDETERMINED = "paid_off", "did_not_pay_off", "undetermined"
OUTCOMES = (PAID_OFF, DID_NOT, UNDETERMINED)


def record_path() -> str:
    explicit = os.environ.get(RECORD_ENV)
    if explicit:
        return explicit
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(base, "vllm-load", "advice-record.jsonl")


@dataclass(frozen=True)
class AdviceScore:
    """The loops of one verdict kind: how many paid off, did not, stayed undetermined."""

    kind: str
    paid_off: int = 0
    did_not: int = 0
    undetermined: int = 0

    @property
    def loops(self) -> int:
        return self.paid_off + self.did_not + self.undetermined

    def sentence(self) -> str:
        text = (
            f"Advice of this kind ({self.kind}) paid off in {self.paid_off} of {self.loops} "
            f"`tune --advice` loop{'s' if self.loops != 1 else ''} recorded"
        )
        if self.undetermined:
            text += f" ({self.undetermined} undetermined at their n)"
        return text + "."


def append_loop(kind: str, outcome: str, detail: dict, path: str | None = None) -> str:
    """Append one loop's outcome for verdict `kind`; returns the record's path."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome {outcome!r} is none of {OUTCOMES}")
    path = path or record_path()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    line = json.dumps({"kind": kind, "outcome": outcome, **detail}, sort_keys=True) + "\n"
    # one write to a file opened for appending: two loops ending at once never mix their lines
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)
    return path


def score(kind: str, path: str | None = None) -> AdviceScore | None:
    """The recorded loops of verdict `kind` (None when there are none, or no record)."""
    path = path or record_path()
    counts = dict.fromkeys(OUTCOMES, 0)
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("kind") == kind:
                    outcome = entry.get("outcome")
                    if outcome in counts:
                        counts[outcome] += 1
    except OSError:
        return None
    found = AdviceScore(kind, counts[PAID_OFF], counts[DID_NOT], counts[UNDETERMINED])
    return found if found.loops else None
