"""Setting one flag of a server command (`server/server_command.py`), as `tune --advice` makes
configuration B: `--flag V` and `--flag=V` replaced, an absent flag appended, and the lines
where either would run something else than meant refused."""

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
