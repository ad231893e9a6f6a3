"""`vllm-load tune --advice SOURCE`: a report's advice, proved on the server.

The diagnosis of SOURCE (`source.py`) advises flags and values. Configuration A is the server
command as it was run (`--server-cmd`); B is the same command with each advised flag set to its
advised value (replaced where the command gives it, appended where it does not:
`server/server_command.py`). Both run `--runs` times (at least two: the verdict is a test
across runs) in rounds, A B A B, with `tune`'s machinery (`runs.py`: the server started and
stopped around every run, runs tagged `config.NAME=value`, completed runs kept on a new start),
then `loop_verdict.py` says whether the advice paid off. Advice no flag value carries out (more
replicas) is named and left out.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys

from ...run_format.advice_record import append_loop
from ...run_format.files import safe_name
from ...server.command_settings import setting_value, with_setting
from ...server.server_command import with_flag
from ...settings import Settings
from ...store.groups import remember_group
from ...user_values import SettingsError
from .loop_verdict import decide, loop_outcome, write_verdict
from .runs import Configuration, TuneRuns, TuneState, progress, write_report
from .source import Diagnosis, read_diagnosis

#: how A's value of a flag shows when its command does not set it and the report did not know it
#: (not a tag: the diagnosis takes `config.NAME` tags as the server's configuration)
SERVER_DEFAULT = "server default"


def advised_configurations(
    diagnosis: Diagnosis, command: str, server_args: str = ""
) -> tuple[Configuration, Configuration, list[str]]:
    """A (the command as given) and B (the advice applied), and what to warn about: a flag
    whose value in the command is not the one the report says the server ran with. With
    `server_args` (`--server-args`, the flags the runs record for the diagnosis), B's runs
    record them with the advised values."""
    a_config: dict[str, str] = {}
    a_shown: dict[str, str] = {}
    b_config: dict[str, str] = {}
    b_command, b_args = command, server_args
    warnings = []
    for advice in diagnosis.runnable:
        assert advice.advised is not None  # runnable
        try:
            now = setting_value(command, advice.flag)
            b_command = with_setting(b_command, advice.flag, advice.advised)
        except ValueError as e:
            raise SettingsError(f"--server-cmd: {e}") from None
        if b_args and advice.flag.startswith("--"):  # a named setting is in the runs' tags
            try:
                b_args = with_flag(b_args, advice.flag, advice.advised)
            except ValueError as e:
                raise SettingsError(f"--server-args: {e}") from None
        if now is not None and advice.current is not None and now != advice.current:
            warnings.append(
                f"the advice says {advice.flag} was {advice.current}, --server-cmd has {now}: A "
                f"runs with {now} (is this the command the report's runs were made with?)"
            )
        known = now if now is not None else advice.current
        if known is not None:
            a_config[advice.name] = known
        a_shown[advice.name] = known if known is not None else SERVER_DEFAULT
        b_config[advice.name] = advice.advised
    if a_shown == b_config:
        given = ", ".join(f"{x.flag} {x.advised}" for x in diagnosis.runnable)
        raise SettingsError(
            f"--server-cmd already runs with the advised values ({given}): nothing to prove"
        )
    return (
        Configuration(a_config, command, "A", a_shown),
        Configuration(
            b_config, b_command, "B", overrides={"server_args": b_args} if b_args else {}
        ),
        warnings,
    )


def _check_resume(state: TuneState, directory: str, recorded: dict) -> None:
    """The same tune directory resumes only the same comparison."""
    before = state.extra.get("advice")
    if before is not None and before.get("commands") != recorded["commands"]:
        raise SettingsError(
            f"{directory} holds runs of other commands (A: {before['commands'].get('A')}; B: "
            f"{before['commands'].get('B')}): pass --name to prove this advice in another"
        )


def prove_advice(args: argparse.Namespace, runs: int) -> int:
    """Run A and B `runs` times each, then say whether the advice paid off."""
    Settings.from_options(args)
    diagnosis = read_diagnosis(args.advice, args.series)
    a, b, warnings = advised_configurations(diagnosis, args.server_cmd, args.server_args)

    def say(text: str) -> None:
        progress(args.name, text)

    say(f"{diagnosis.kind} at {diagnosis.series!r}: {diagnosis.sentence}".rstrip(": "))
    for skipped in diagnosis.skipped:
        say(f"left out: {skipped.flag}: the loop cannot run it (no flag value to set)")
    for warning in warnings:
        print(f"vllm-load tune: warning: {warning}", file=sys.stderr, flush=True)
    say(f"A (as run): {a.command}")
    say(f"B (advised): {b.command}")
    directory = os.path.join(args.out, safe_name(args.name, "advice"))
    os.makedirs(directory, exist_ok=True)
    state = TuneState.load(directory, "advice")
    recorded = {
        "source": os.path.abspath(args.advice),
        "series": diagnosis.series,
        "commands": {"A": a.command, "B": b.command},
    }
    _check_resume(state, directory, recorded)
    state.extra["advice"] = recorded
    state.save(directory)
    result_a, result_b = TuneRuns(args, directory, state).run_all([a, b], runs, strict=True)
    say("comparing A and B")
    verdict = decide(diagnosis, (a, b), (result_a, result_b), directory)
    print("\n" + verdict.text() + "\n", flush=True)
    path = write_verdict(verdict, directory)
    kept = append_loop(
        diagnosis.kind,
        loop_outcome(verdict.throughput.verdict),
        {
            "advice": [
                f"{x.flag} {a.shown[x.name]} -> {b.config[x.name]}" for x in diagnosis.runnable
            ],
            "verdict": verdict.conclusion,
            "directory": os.path.abspath(directory),
            "when": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    )
    print(f"Advice record: {kept}")
    state.extra["verdict"] = verdict.conclusion
    state.save(directory)
    print(f"Report: {write_report(result_a.run_dirs + result_b.run_dirs, directory, args.slo)}")
    print(f"Verdict: {path}")
    return 0 if remember_group(directory, args.store, "tune") else 1
