"""Tunes and campaigns in the results store: read from their directories (`tune.json`,
`campaign.json`: the run-directory contract's state files), written with their runs linked to
them when the command ends (`remember_group`) or by `vllm-load store import DIR`.

A group's runs are every run its state file records whose directory can be read: completed or
not (their outcome is stored, as `vllm-load run` stores a failed run); a run already stored is
linked, not stored again.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from .location import locate
from .record import StoredGroup, StoredRun

TUNE, CAMPAIGN = "tune", "campaign"
#: the state file that makes a directory a tune or a campaign (cli/tuning/runs.py, cli/campaign.py)
STATE_FILES = {TUNE: "tune.json", CAMPAIGN: "campaign.json"}
#: a tune's SLO-max search keeps its own file (cli/tuning/slo_max_state.py)
SLO_MAX_FILE = "slo_max.json"


def _state_file(directory: str) -> tuple[str, str]:
    """The group kind of `directory` and its state file's name; ("", "") for neither."""
    for kind, name in (*STATE_FILES.items(), (TUNE, SLO_MAX_FILE)):
        if os.path.isfile(os.path.join(directory, name)):
            return kind, name
    return "", ""


def group_kind(directory: str) -> str:
    """ "tune" or "campaign" when `directory` holds one's state file, else ""."""
    return _state_file(directory)[0]


def _run_dir(directory: str, recorded: str) -> str:
    """A run directory as the state file recorded it (relative to where the command ran), else
    where it lies in the group's own `runs/` (the group moved, or is read from elsewhere)."""
    if recorded and os.path.isdir(recorded):
        return recorded
    return os.path.join(directory, "runs", os.path.basename(os.path.normpath(recorded)))


def _config_label(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def read_group(directory: str) -> StoredGroup:
    """The tune or campaign in `directory`. Raises ValueError when its state file cannot be
    read."""
    kind, name = _state_file(directory)
    path = os.path.join(directory, name or STATE_FILES[TUNE])
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
        if name == SLO_MAX_FILE:
            labels = {
                _run_dir(directory, lv["run_dir"]): f"level={lv['level']:g}"
                for lv in state["levels"]
                if lv.get("run_dir")
            }
            detail = {"mode": "slo_max", "slo": state["search"].get("slo")}
            detail.update(
                {k: state["result"][k] for k in ("slo_max", "bracket", "status", "line")}
                if state.get("result")
                else {}
            )
            name = os.path.basename(os.path.normpath(directory))
        elif kind == TUNE:
            runs = state["runs"] if state.get("format", 1) != 1 else state["results"]
            labels = {
                _run_dir(directory, r["run_dir"]): _config_label(r["config"])
                for r in runs
                if r.get("run_dir")
            }
            detail = {k: state[k] for k in ("mode", "best", "verdict") if k in state}
            # what advice was proved, not its server commands: they may hold a server's secrets
            advice = state.get("advice") or {}
            if advice:
                detail["advice"] = {k: advice.get(k) for k in ("source", "series")}
            name = os.path.basename(os.path.normpath(directory))
        else:
            labels = {
                _run_dir(directory, r["run_dir"]): r["phase"]
                for r in state["runs"]
                if r.get("run_dir")
            }
            detail = {"refine_levels": state.get("refine_levels"), "options": state["options"]}
            name = state["name"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: cannot be read ({e})") from None
    detail = json.loads(json.dumps(detail, default=str))
    return StoredGroup(kind, name, os.path.abspath(directory), detail, labels)


@dataclass(frozen=True)
class GroupRead:
    """A group and those of its runs that could be read; the others, named with why."""

    group: StoredGroup
    runs: list[StoredRun]
    unread: list[str]


def read_group_runs(directory: str) -> GroupRead:
    """The group in `directory` and its runs, measured as `store import` measures a run."""
    from .record import stored_run

    group = read_group(directory)
    runs, unread = [], []
    for path in group.labels:
        try:
            runs.append(stored_run(path))
        except (ValueError, OSError) as e:
            unread.append(f"{path}: {e}")
    return GroupRead(group, runs, unread)


def written_line(read: GroupRead, written) -> str:
    g = read.group
    what = "stored" if written.new else "already stored, updated"
    return (
        f"{g.kind} {g.name} {what}: {len(read.runs)} run(s), {written.stored} newly stored, "
        f"{written.linked} linked to it"
    )


def remember_group(directory: str, given: str | None, command: str) -> bool:
    """Store the tune or campaign that just ended in `directory`, with its runs (`vllm-load
    tune`'s and `campaign`'s last step). Never loses anything: where it cannot be stored, one
    line says why and how to store it later. False when a store the user named (`--store`, the
    environment) could not be written."""
    location = locate(given)
    if location is None:
        return True
    from .db import StoreError, open_store

    try:
        store = open_store(location)  # first: a store that cannot be used costs no measuring
        try:
            read = read_group_runs(directory)
            written = store.write_group(read.group, read.runs)
        finally:
            store.close()
    except (StoreError, ValueError, OSError) as e:
        later = f"vllm-load store import {directory}" + (
            f" --store {location.shown}" if given else ""
        )
        print(
            f"vllm-load {command}: the {command} was not stored: {e}; its directory is whole: "
            f"store it later with `{later}`",
            file=sys.stderr,
            flush=True,
        )
        return not location.explicit
    for line in read.unread:
        print(f"vllm-load {command}: a run was not stored: {line}", file=sys.stderr, flush=True)
    print(f"Results store: {location.shown} ({written_line(read, written)})", flush=True)
    return True
