"""Setting one flag of a server command (`server/server_command.py`), as `tune --advice` makes
configuration B: `--flag V` and `--flag=V` replaced, an absent flag appended, and the lines
where either would run something else than meant refused. And the server a tune or campaign
starts (`server/process.py`): stopped whole, in our session, and ended with a killed vllm-load."""

from __future__ import annotations

import os
import shlex

import pytest

from vllm_load.server.server_command import flag_value, shell_words, with_flag

FLAG = "--max-num-seqs"


@pytest.mark.parametrize(
    "command, value, expected",
    [
        # a word of its own, in the middle and at the end
        (
            "vllm serve m --max-num-seqs 2 --port 8000",
            "2",
            "vllm serve m --max-num-seqs 8 --port 8000",
        ),
        ("vllm serve m --max-num-seqs 2", "2", "vllm serve m --max-num-seqs 8"),
        # joined with =
        (
            "vllm serve m --max-num-seqs=2 --port 8000",
            "2",
            "vllm serve m --max-num-seqs=8 --port 8000",
        ),
        # vLLM's underscore spelling, and a quoted value
        ("vllm serve m --max_num_seqs '2'", "2", "vllm serve m --max_num_seqs 8"),
        ('vllm serve m "--max-num-seqs=2"', "2", "vllm serve m --max-num-seqs=8"),
        # absent: appended
        ("vllm serve m --port 8000", None, "vllm serve m --port 8000 --max-num-seqs 8"),
        ("vllm serve m   ", None, "vllm serve m --max-num-seqs 8"),
        # a flag that only starts the same is another flag
        ("sim --max-num-seqs-x 3", None, "sim --max-num-seqs-x 3 --max-num-seqs 8"),
        # given twice: both set (an argument parser takes the last)
        ("s --max-num-seqs 2 --max-num-seqs=4", "4", "s --max-num-seqs 8 --max-num-seqs=8"),
        # a command of several parts keeps them when the flag is there to replace
        (
            "cd /x && vllm serve m --max-num-seqs 2 2>&1 | tee log",
            "2",
            "cd /x && vllm serve m --max-num-seqs 8 2>&1 | tee log",
        ),
    ],
)
def test_a_flag_is_replaced_where_given_and_appended_where_not(command, value, expected):
    assert flag_value(command, FLAG) == value
    assert with_flag(command, FLAG, "8") == expected
    assert flag_value(expected, FLAG) == "8"


def test_a_value_the_shell_would_split_is_quoted():
    out = with_flag("vllm serve m", "--served-model-name", "my model")
    assert shlex.split(out)[-2:] == ["--served-model-name", "my model"]
    assert flag_value(out, "--served-model-name") == "my model"


@pytest.mark.parametrize(
    "command, why",
    [
        # appended after a pipe or a redirection it would go to the wrong command
        ("vllm serve m 2>&1 | tee log", "more than one command"),
        ("vllm serve m > log", "redirection"),
        ("vllm serve m; echo done", "more than one command"),
        # inside an inner command's quotes: which word to replace would be a guess
        ('bash -c "vllm serve m --max-num-seqs 2"', "only inside quotes"),
        # a flag without its value
        ("vllm serve m --max-num-seqs", "has no value"),
        ("vllm serve m --max-num-seqs --port 1", "has no value"),
        ("vllm serve 'm", "unclosed"),
    ],
)
def test_lines_where_the_flag_cannot_be_set_safely_are_refused(command, why):
    with pytest.raises(ValueError, match=why):
        with_flag(command, FLAG, "8")


def test_shell_words_follow_the_shell():
    line = """a 'b c' "d \\"e\\"" f\\ g h&&i"""
    words = shell_words(line)
    assert [w.text for w in words] == ["a", "b c", 'd "e"', "f g", "h", "&&", "i"]
    assert [w.operator for w in words] == [False] * 5 + [True, False]
    assert [w.text for w in words if not w.operator] == shlex.split(line.replace("&&", " "))


def test_stopping_a_server_waits_for_every_process_of_its_group_not_only_the_shell(tmp_path):
    # a child that ignores SIGTERM outlives the command's shell, as vLLM's API server and engine
    # processes held the port after `vllm serve`'s shell exited; stop() returns once it is gone
    import os
    import sys
    import time

    from vllm_load.server.process import ServerProcess

    pid_file = tmp_path / "child.pid"
    child = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    server = ServerProcess(f'{sys.executable} -c "{child}" & sleep 60')
    server.start()
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    t0 = time.monotonic()
    server.stop(timeout=1.0)
    assert time.monotonic() - t0 >= 1.0  # it waited for the child, then killed it
    try:
        os.kill(pid, 0)
        alive = (
            os.path.exists(f"/proc/{pid}")
            and "Z" not in open(f"/proc/{pid}/stat").read().split()[2]
        )
    except ProcessLookupError:
        alive = False
    assert not alive, "the server's child outlived stop()"


def test_a_started_server_has_its_own_process_group_in_our_session(tmp_path):
    """With autogroup scheduling a session is a CPU-share group: a server in a session of its own
    (vLLM busy-polls a core) left the load process waiting for a CPU; in ours it shares it."""
    from vllm_load.server.process import ServerProcess

    server = ServerProcess("sleep 30")
    process = server.start()
    try:
        assert os.getpgid(process.pid) == process.pid  # stopped whole by its group
        assert os.getsid(process.pid) == os.getsid(0)  # in our session, not one of its own
    finally:
        server.stop(timeout=5.0)
    assert process.poll() is not None


def _group_members(pgid: int) -> list[int]:
    """The running processes of process group `pgid` (/proc; a zombie holds nothing)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        state, _ppid, pgrp = stat[stat.rindex(b")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state != b"Z":
            found.append(int(name))
    return found


LINUX_ONLY = pytest.mark.skipif(
    not os.path.isdir("/proc"), reason="Linux's parent-death signal and /proc"
)


@LINUX_ONLY
@pytest.mark.parametrize(
    "command, then",
    [
        ("sleep 300 & sleep 300; wait", "sleep"),
        ("cd / && sh -c 'sleep 300 & exec sleep 300'", "sleep"),
        # killed while stop() waits for a server that ignores SIGTERM: SIGKILL after the grace;
        # the shell ignores it before it forks (Python children that ignored it themselves were
        # killed by stop()'s SIGTERM before they got there, in a coverage run at load ~7)
        ("trap '' TERM; sleep 300 & sleep 300 & touch {ready}; wait", "stop"),
    ],
)
def test_a_server_group_ends_when_vllm_load_is_killed(command, then, tmp_path):
    # a SIGKILLed vllm-load never calls stop(); a parent-death signal on the shell alone did not
    # reach what the shell forked, and the server kept running with parent 1
    import signal
    import subprocess
    import sys
    import time

    ready = tmp_path / "ready"  # every process of the server ignores SIGTERM
    command = command.format(ready=shlex.quote(str(ready)))
    stop = (
        f"import os\nwhile not os.path.exists({str(ready)!r}): time.sleep(0.05)\n"
        "server.stop(timeout=300)"
    )
    starter = (
        "import time; from vllm_load.server import process; process.ORPHAN_GRACE_S = 1.0\n"
        f"server = process.ServerProcess({command!r}); print(server.start().pid, flush=True)\n"
        + ("time.sleep(300)" if then == "sleep" else stop)
    )
    vllm_load = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE)
    pgid = None
    try:
        assert vllm_load.stdout is not None
        pgid = int(vllm_load.stdout.readline())
        deadline = time.monotonic() + 20
        while len(_group_members(pgid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)  # the shell (or its exec'd sleep), two more, and the guard
        assert len(_group_members(pgid)) >= 3, "the server command did not start its processes"
        if then == "stop":  # stop() has sent SIGTERM and waits
            while not ready.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1)
        assert len(_group_members(pgid)) >= 2
        vllm_load.kill()
        vllm_load.wait()
        deadline = time.monotonic() + 5
        while _group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _group_members(pgid), "the server's processes outlived a killed vllm-load"
    finally:
        vllm_load.kill()
        vllm_load.wait()
        if pgid is not None and _group_members(pgid):
            os.killpg(pgid, signal.SIGKILL)


def test_a_server_that_exited_leaves_nothing_of_its_group_after_stop():
    import time

    from vllm_load.server.process import ServerProcess

    server = ServerProcess("exit 3")
    process = server.start()
    assert process.wait(timeout=10) == 3
    t0 = time.monotonic()
    server.stop(timeout=30.0)
    assert time.monotonic() - t0 < 5.0  # not the SIGTERM timeout: nothing ignored it
    assert not _group_members(process.pid)


@LINUX_ONLY
@pytest.mark.parametrize("guard_ended_first", [False, True], ids=["racing", "guard-ended-first"])
def test_a_server_whose_guard_cannot_start_is_not_started(tmp_path, monkeypatch, guard_ended_first):
    # unguarded, a killed vllm-load would leave it running: refused, saying where to look; also
    # where the guard had ended before the shell wrote to it (the shell died of SIGPIPE, and Popen
    # took it for a started server: a fresh-clone CI run, 2026-11-30)
    from vllm_load.server import process
    from vllm_load.server.process import ServerError, ServerProcess

    monkeypatch.setattr(process.group_guard, "__file__", str(tmp_path / "no-such-guard.py"))
    if guard_ended_first:
        start = process._Guard.start.__func__

        def start_then_end(cls, log):
            guard = start(cls, log)
            guard.process.wait()
            return guard

        monkeypatch.setattr(process._Guard, "start", classmethod(start_then_end))
    log = tmp_path / "server.log"
    server = ServerProcess(f"echo started > {tmp_path / 'ran'}; sleep 30", str(log))
    try:
        with pytest.raises(ServerError, match="was not started.*server.log"):
            server.start()
    finally:
        server.stop()
    assert "no-such-guard.py" in log.read_text()  # the guard's own error
    assert server.process is None and not (tmp_path / "ran").exists()
