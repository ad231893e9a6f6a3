"""The command's stop signals in the windows where a KeyboardInterrupt raised where the command
happened to be went wrong (`stop_signals.CommandStop`): caught after it left an exec() of a
string (CPython then ended `python -m vllm_load` with SIGINT: exit -2), and between claiming the
run directory and starting Locust (the claim was left behind)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from vllm_load.cli import run as cli_run
from vllm_load.cli.errors import Interrupted
from vllm_load.cli.run import prepare, run_options
from vllm_load.sim.child import SimulatorProcess
from vllm_load.stop_signals import COMMAND_STOP, CommandStop
from vllm_load.user_values import SettingsError

# the command's handler, a SIGTERM that arrives inside exec'd code (as one arrives while a
# dataclass is made during an import), caught; the program then ends as `python -m vllm_load`
# ends, by returning to the interpreter (a SystemExit under -c would exit before the check)
CAUGHT_AFTER_EXEC = "\n".join(
    [
        "import os, signal",
        "from vllm_load.stop_signals import COMMAND_STOP",
        "COMMAND_STOP.install()",
        "try:",
        "    exec('import os, signal; os.kill(os.getpid(), signal.SIGTERM); x = sum(range(9))')",
        "except KeyboardInterrupt:",
        "    print('caught', flush=True)",
        "COMMAND_STOP.done()",
    ]
)


def test_a_stop_caught_after_it_left_an_exec_of_a_string_does_not_kill_the_process_later():
    done = subprocess.run(
        [sys.executable, "-c", CAUGHT_AFTER_EXEC], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "caught\n", "")


@pytest.fixture
def command_stop():
    """The process's `COMMAND_STOP`, as a command's before any signal (other tests count
    into it), put back as it was after the test."""
    saved = dict(vars(COMMAND_STOP))
    vars(COMMAND_STOP).update({k: v for k, v in vars(CommandStop()).items() if k != "_previous"})
    yield COMMAND_STOP
    vars(COMMAND_STOP).clear()
    vars(COMMAND_STOP).update(saved)


def test_a_stop_while_the_run_directory_is_claimed_gives_the_claim_back_and_starts_nothing(
    tmp_path, command_stop
):
    run_dir = tmp_path / "run"
    with SimulatorProcess() as sim:
        launch = prepare(run_options(sim.url, run_dir=str(run_dir)))
    assert launch.claim is not None and launch.claim.held()
    # a SIGTERM now (the command's handler, as the signal calls it): counted, not raised where
    # the command is, since nothing would then give the claim back
    try:
        command_stop.on_signal(signal.SIGTERM, None)
    except KeyboardInterrupt:
        launch.claim.give_back()
        pytest.fail("raised where the command was: nothing would give the claim back")
    launch.cmd = [sys.executable, "-c", "raise SystemExit('Locust must not be started')"]
    with pytest.raises(Interrupted, match="the test had not started, nothing was written"):
        launch.run()
    assert not run_dir.exists() and launch.stop_signals == 1
    assert not command_stop.deferred  # once Locust is done with, a first stop is raised again


def test_a_refused_claim_leaves_the_stop_signals_raised_again(tmp_path, command_stop, monkeypatch):
    run_dir = tmp_path / "run"
    os.makedirs(run_dir)
    (run_dir / "run.json").write_text('{"outcome": "claimed", "claim": "x"}\n')
    monkeypatch.setattr(cli_run, "refuse_existing_run", lambda run_dir: None)  # (the race)
    with SimulatorProcess() as sim:
        with pytest.raises(SettingsError, match="another run started at the same time"):
            prepare(run_options(sim.url, run_dir=str(run_dir)))
    assert not command_stop.deferred
    with pytest.raises(KeyboardInterrupt):
        command_stop.on_signal(signal.SIGTERM, None)


def test_a_stop_while_the_command_imports_is_raised_once_the_imports_are_done():
    """`__main__` defers the stop signals while the command imports (an `import orjson`
    interrupted by a raise segfaulted); `cli.main` raises the one that came, after them."""
    stop = CommandStop()
    stop.defer()
    stop.on_signal(signal.SIGHUP, None)  # (inside an import: not raised there)
    stop.on_signal(signal.SIGTERM, None)
    with pytest.raises(KeyboardInterrupt):
        stop.proceed()
    assert not stop.deferred
    stop.on_signal(signal.SIGTERM, None)  # a later one: the command is already stopping
    quiet = CommandStop()
    quiet.defer()
    quiet.proceed()  # none came: nothing raised


def test_the_command_defers_the_stop_signals_until_its_modules_are_imported():
    done = subprocess.run(
        [sys.executable, "-c", DEFERRED_IN_IMPORTS], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.splitlines() == ["deferred True", "cli.main imported"], done.stderr


# `__main__.main` with cli.main's import swapped for a probe: the stop signals are deferred
# while the command's modules are imported
DEFERRED_IN_IMPORTS = "\n".join(
    [
        "import sys, types",
        "from vllm_load import __main__ as entry",
        "from vllm_load.stop_signals import COMMAND_STOP",
        "probe = types.ModuleType('vllm_load.cli.main')",
        "def main():",
        "    print('deferred', COMMAND_STOP.deferred)",
        "    print('cli.main imported')",
        "    return 0",
        "probe.main = main",
        "sys.modules['vllm_load.cli.main'] = probe",
        "entry.main()",
    ]
)
