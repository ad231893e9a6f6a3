"""The SLO-max search's file (`slo_max.json`): what the search is, so that only the same one
resumes, and every level measured so far, in order, with its judgement."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from ...analysis.decisions.slo_interval import ItemFigure
from ...analysis.decisions.slo_search import Probe
from ...run_format.files import write_atomic
from ...user_values import SettingsError

STATE_FILE = "slo_max.json"
TABLE_FILE = "slo_max.md"


@dataclass
class Level:
    """One measured level, as `slo_max.json` keeps it."""

    level: float
    run_dir: str
    items: list[dict]  # ItemFigure fields, per SLO item
    verdict: str  # holds / fails / straddles / unknown: what its intervals prove

    @property
    def figures(self) -> list[ItemFigure]:
        return [ItemFigure(**i) for i in self.items]

    @property
    def probe(self) -> Probe:
        return Probe(self.level, tuple(f.ratio for f in self.figures))


@dataclass
class SearchState:
    """What `slo_max.json` holds: what the search is (it resumes only the same one) and every
    level measured so far, in order."""

    search: dict
    levels: list[Level] = field(default_factory=list)
    result: dict = field(default_factory=dict)

    def save(self, directory: str) -> None:
        data = {
            "format": 1,
            "search": self.search,
            "levels": [asdict(lv) for lv in self.levels],
            **({"result": self.result} if self.result else {}),
        }
        write_atomic(os.path.join(directory, STATE_FILE), json.dumps(data, indent=2, default=str))

    @classmethod
    def load(cls, directory: str, search: dict) -> "SearchState":
        """The directory's search, or a new one; SettingsError, one line, when it holds another
        search or cannot be read."""
        path = os.path.join(directory, STATE_FILE)
        if not os.path.exists(path):
            return cls(search)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            levels = [Level(**lv) for lv in data["levels"]]
            for lv in levels:
                lv.figures  # every item readable
            before = data["search"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SettingsError(f"cannot read {path} ({e}); pass --name to start another") from None
        changed = [k for k in search if k not in ("bounds",) and before.get(k) != search[k]]
        if changed:
            raise SettingsError(
                f"{directory} holds a search with other {', '.join(changed)} (it resumes only the "
                "same search): pass --name to start another"
            )
        return cls(search, levels)
