"""The advice `tune --advice SOURCE` proves: one series' diagnosis, read from a report's
`NAME.summary.json` (`series[].diagnosis`) or from a run directory (its report data built in
memory, as `vllm-load report` would write it).

A source that cannot be proved is one line and exit 2: unreadable or not a summary, no
diagnosis, several series and no `--series`, a diagnosis that found no server limit to move
(`not_saturated`, `undetermined`, `client`: the load generator's `--workers` is no server flag,
`failures`) or whose advice the loop cannot run (a flag without a value to set, such as more
replicas).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from ...analysis.diagnosis.kinds import KINDS
from ...server.command_settings import SETTINGS
from ...user_values import SettingsError


@dataclass(frozen=True)
class FlagAdvice:
    """One piece of advice: a server flag, its value now (None when not known) and the advised
    one (None for advice no flag value carries out, such as more replicas)."""

    flag: str
    current: str | None
    advised: str | None
    expected: str = ""
    cost: str = ""

    @property
    def runnable(self) -> bool:
        """Whether the loop can carry it out: a `--flag`, or a setting set by name
        (`server.command_settings`: `num_speculative_tokens`), with a value to set."""
        if self.advised is None:
            return False
        return self.flag in SETTINGS or (
            self.flag.startswith("--")
            and len(self.flag) > 2
            and not any(c.isspace() for c in self.flag)
        )

    @property
    def name(self) -> str:
        """The flag as a `config.NAME` tag: `--max-num-seqs` -> `max_num_seqs`; a setting's
        name as it is."""
        return self.flag if self.flag in SETTINGS else self.flag[2:].replace("-", "_")


@dataclass(frozen=True)
class Diagnosis:
    """One series' diagnosis, as the summary JSON carries it."""

    source: str
    series: str
    kind: str
    value: float | None  # the level its verdict is for, in the series' kind of load
    sentence: str
    advice: tuple[FlagAdvice, ...]
    predicted_knee: float | None  # the capacity model's knee for the configuration as run
    advised_knee: float | None  # and with the advice applied

    @property
    def runnable(self) -> list[FlagAdvice]:
        return [a for a in self.advice if a.runnable]

    @property
    def skipped(self) -> list[FlagAdvice]:
        return [a for a in self.advice if not a.runnable]

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "series": self.series,
            "kind": self.kind,
            "value": self.value,
            "sentence": self.sentence,
            "advice": [
                {"flag": a.flag, "from": a.current, "to": a.advised, "expected": a.expected}
                | ({"cost": a.cost} if a.cost else {})
                for a in self.advice
            ],
            "predicted_knee": self.predicted_knee,
            "advised_knee": self.advised_knee,
        }


def read_summary(source: str) -> dict:
    """The summary of SOURCE: its JSON, or a run directory's built in memory."""
    if os.path.isdir(source):
        if not os.path.exists(os.path.join(source, "run.json")):
            raise SettingsError(
                f"--advice {source}: not a run directory (no run.json); give a run directory or "
                "a report's NAME.summary.json"
            )
        # at call time: keeps pandas and matplotlib out of every command's start (cli.main)
        from ...report.model import build_report_data
        from ...report.summary_files import summary_dict

        try:
            return summary_dict(build_report_data([source]))
        except ValueError as e:  # a run that cannot be read
            raise SettingsError(f"--advice {source}: {e}") from None
    try:
        with open(source, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise SettingsError(f"--advice {source}: no such file or directory") from None
    except (OSError, ValueError) as e:
        raise SettingsError(f"--advice {source}: not readable JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("series"), list):
        raise SettingsError(
            f"--advice {source}: not a report summary (no series list); give a report's "
            "NAME.summary.json or a run directory"
        )
    return data


def pick_series(summary: dict, source: str, label: str) -> dict:
    """The series named `label`, or the only one."""
    series = [s for s in summary["series"] if isinstance(s, dict)]
    labels = [str(s.get("label", "")) for s in series]
    if label:
        if label not in labels:
            raise SettingsError(
                f"--series {label!r} is not in {source} (its series: {', '.join(labels) or 'none'})"
            )
        return series[labels.index(label)]
    if len(series) != 1:
        listed = "; ".join(repr(x) for x in labels) or "none"
        raise SettingsError(
            f"{source} has {len(series)} series ({listed}): pick the one whose advice to prove "
            "with --series LABEL"
        )
    return series[0]


def _value(raw: object, what: str, where: str) -> str | None:
    """A flag value as text (8, 8.0 and "8" alike); None stays None."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise SettingsError(f"{where}: the advice's {what} {raw!r} is not a flag value")
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise SettingsError(f"{where}: the advice's {what} {raw!r} is not a flag value")
        return str(int(raw)) if raw.is_integer() else repr(raw)
    return str(raw)


def _knee(raw: object, what: str, where: str) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not raw > 0:
        raise SettingsError(f"{where}: {what} {raw!r} is not a level")
    return float(raw)


def parse_diagnosis(series: dict, source: str) -> Diagnosis:
    """The series' diagnosis, checked: a damaged one is named, never half read."""
    label = str(series.get("label", ""))
    where = f"{source} (series {label!r})"
    raw = series.get("diagnosis")
    if raw is None:
        raise SettingsError(
            f"{where} has no diagnosis: the report that gives it was built by this vllm-load, "
            "which does not diagnose"
            if os.path.isdir(source)
            else f"{where} has no diagnosis: it was built by a vllm-load that does not "
            "diagnose; build the report again (vllm-load report RUN...) or give the run directory"
        )
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: its diagnosis is not an object")
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise SettingsError(f"{where}: unknown diagnosis kind {kind!r} (known: {', '.join(KINDS)})")
    if KINDS[kind].nothing_to_prove:
        raise SettingsError(f"{where} is diagnosed {kind}: {KINDS[kind].nothing_to_prove}")
    items = raw.get("advice")
    if not isinstance(items, list):
        raise SettingsError(f"{where}: the diagnosis has no advice list")
    advice = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("flag"), str):
            raise SettingsError(f"{where}: a piece of advice without a flag: {item!r}")
        advice.append(
            FlagAdvice(
                item["flag"],
                _value(item.get("from"), "from", where),
                _value(item.get("to"), "to", where),
                str(item.get("expected") or ""),
                str(item.get("cost") or ""),
            )
        )
        together = item.get("also") or []  # flags set with it: the loop applies every piece
        if not isinstance(together, list) or not all(
            isinstance(a, dict) and isinstance(a.get("flag"), str) for a in together
        ):
            raise SettingsError(f"{where}: advice for {item['flag']} with a malformed 'also'")
        advice += [
            FlagAdvice(
                a["flag"],
                _value(a.get("from"), "from", where),
                _value(a.get("to"), "to", where),
                f"set with {item['flag']}",
            )
            for a in together
        ]
    value = raw.get("value", raw.get("users"))  # `users`: a summary of format 1
    diagnosis = Diagnosis(
        source=source,
        series=label,
        kind=str(kind),
        value=float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        else None,
        sentence=str(raw.get("sentence") or ""),
        advice=tuple(advice),
        predicted_knee=_knee(raw.get("predicted_knee"), "predicted_knee", where),
        advised_knee=_knee(raw.get("advised_knee"), "advised_knee", where),
    )
    if not diagnosis.runnable:
        listed = ", ".join(a.flag for a in diagnosis.advice) or "none"
        raise SettingsError(
            f"{where} is diagnosed {kind}, with no advice the loop can run (advice: {listed}; "
            "the loop sets a --flag or a named setting to a value, and none has one)"
        )
    names = [a.name for a in diagnosis.runnable]
    if len(set(names)) != len(names):
        raise SettingsError(f"{where}: the advice sets one flag twice ({', '.join(names)})")
    return diagnosis


def read_diagnosis(source: str, label: str = "") -> Diagnosis:
    """The diagnosis of SOURCE's series `label` (or its only series); SettingsError, one line,
    for a source the loop cannot prove."""
    summary = read_summary(source)
    return parse_diagnosis(pick_series(summary, source, label), source)
