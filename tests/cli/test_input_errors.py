"""Input that cannot be used is one line on stderr naming the problem and what to do, a non-zero
exit and no traceback, before anything is started or analysed: a --tokenizer or --dataset that
cannot be read, a run or report directory that cannot be written, a busy simulator port, a URL
where a worker wants a host name, an empty --levels item or value, --rates with --levels,
--images to /v1/completions. A worker with no master says it waits for it."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
from support import ROOT

from vllm_load.run_format.synthetic import write_synthetic_run
from vllm_load.sim.child import SimulatorProcess, free_port
from vllm_load.user_values import SettingsError

#: nothing listens there: a check that came after the target's would fail on the target instead
NO_TARGET = "http://127.0.0.1:9"


def vllm_load(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`vllm-load ARGS`; whatever it started is killed if it has not ended within `timeout`
    (a command that should have refused its input may have started Locust instead)."""
    cmd = [sys.executable, "-m", "vllm_load", *args]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        stdout, stderr = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def one_error_line(proc: subprocess.CompletedProcess, name: str) -> str:
    """The one line `vllm-load NAME` printed, after checking it exited 2 with nothing more."""
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, (proc.returncode, output[-3000:])
    assert "Traceback" not in output, output[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"vllm-load {name}: error: "), output[-3000:]
    return lines[0]


@pytest.fixture
def tokenizer_dirs(tmp_path) -> dict[str, tuple[str, str]]:
    """--tokenizer values that cannot be used, each with what its error says."""
    empty, broken = tmp_path / "empty", tmp_path / "broken"
    empty.mkdir()
    broken.mkdir()
    (broken / "tokenizer.json").write_text('{"version": "1.0", "model": ')  # cut short
    return {
        "missing": (str(tmp_path / "nowhere"), "neither 'sim' nor an existing directory"),
        "empty": (str(empty), "has no tokenizer.json"),
        "broken": (str(broken), "cannot be read as a tokenizer"),
    }


@pytest.mark.parametrize("case", ["missing", "empty", "broken"])
def test_a_tokenizer_that_cannot_be_used_is_one_line(tmp_path, tokenizer_dirs, case):
    path, says = tokenizer_dirs[case]
    proc = vllm_load("run", "--host", NO_TARGET, "--tokenizer", path, "--out", str(tmp_path / "o"))
    line = one_error_line(proc, "run")
    assert "--tokenizer: " in line and says in line and path in line
    assert not os.path.exists(tmp_path / "o")


DATASETS = {
    "empty": ("", "no usable entry (empty)"),
    "malformed": ('{"prompt": "hi"}\n{"prompt": \n', "data.jsonl:2: not valid JSON"),
    "not-an-entry": ('{"text": "hi"}\n', 'needs "prompt", "messages" or "conversations"'),
    "missing-image": (
        '{"prompt": "hi"}\n{"prompt": "and?", "images": ["cat.png"]}\n',
        "data.jsonl:2: image cat.png: No such file or directory",
    ),
}


@pytest.mark.parametrize("case", list(DATASETS))
def test_a_dataset_that_cannot_be_read_is_one_line(tmp_path, case):
    text, says = DATASETS[case]
    path = tmp_path / "data.jsonl"
    path.write_text(text)
    proc = vllm_load("run", "--host", NO_TARGET, "--dataset", str(path), "--out", str(tmp_path))
    line = one_error_line(proc, "run")
    assert "--dataset: " in line and says in line and "docs/workload.md" in line


@pytest.mark.parametrize(
    "args, says",
    [
        (("--levels", ""), "--levels is empty: give a value, or leave the option out"),
        (("--levels", "2,,4"), "--levels has an empty item in '2,,4'"),
        (("--levels", "2,4", "--rates", "3"), "--rates and --levels are two ways"),
        (("--images", "2", "--endpoint", "completions"), "--images sends images as chat content"),
    ],
    ids=["empty-levels", "empty-item", "rates-and-levels", "images-to-completions"],
)
def test_levels_that_are_not_what_was_meant_are_refused(tmp_path, args, says):
    line = one_error_line(
        vllm_load("run", "--host", NO_TARGET, *args, "--out", str(tmp_path)), "run"
    )
    assert says in line


def test_an_unwritable_run_directory_is_one_line_before_locust_starts(tmp_path):
    with SimulatorProcess() as sim:
        line = one_error_line(vllm_load("run", "--host", sim.url, "--out", "/proc/nope"), "run")
        run_dir = one_error_line(
            vllm_load("run", "--host", sim.url, "--run-dir", "/proc/nope/run"), "run"
        )
    assert line.endswith(
        "--out /proc/nope: cannot write in /proc/nope (No such file or "
        "directory): give a writable directory"
    )
    assert "--run-dir /proc/nope/run: cannot write in /proc/nope" in run_dir


def test_an_unwritable_report_is_refused_before_the_analysis(tmp_path, monkeypatch):
    from vllm_load.report import cli as report_cli
    from vllm_load.report import render

    run_dir = write_synthetic_run(str(tmp_path / "runs"))

    def analyse(*_a, **_kw):
        raise AssertionError("the analysis ran before the output was checked")

    monkeypatch.setattr(render, "build_report", analyse)
    parser = argparse.ArgumentParser()
    report_cli.configure_parser(parser, "report")
    args = parser.parse_args([run_dir, "-o", "/proc/nope/r.html", "--quiet"])
    with pytest.raises(SettingsError) as caught:
        report_cli.main(args)
    assert str(caught.value).startswith("--output /proc/nope/r.html: cannot write in /proc/nope")
    line = one_error_line(vllm_load("report", run_dir, "-o", "/proc/nope/r.html"), "report")
    assert "cannot write in /proc/nope" in line


def test_a_busy_simulator_port_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = one_error_line(vllm_load("sim", "--port", str(port), timeout=30), "sim")
    assert f"port {port} is busy" in line and "choose another --port" in line


def test_a_busy_web_ui_port_is_one_line_before_the_target_is_asked(tmp_path):
    # Locust binds the web UI in its own process: a port in use there was a traceback and exit 2
    # after the target's checks; here no target answers, so a refusal means it was checked first
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = vllm_load(
            "run", "--host", f"http://127.0.0.1:{free_port()}", "--web", "--web-port", str(port),
            "--out", str(tmp_path), timeout=60,
        )  # fmt: skip
    line = one_error_line(proc, "run")
    assert f"the web UI: port {port} is busy" in line and "choose another --web-port" in line


@pytest.mark.parametrize(
    "host, says",
    [("http://10.0.0.5", "is a URL"), ("10.0.0.5:5557", "has a port: give the port with")],
)
def test_a_worker_wants_a_host_name_not_a_url(host, says):
    line = one_error_line(vllm_load("worker", "--master-host", host), "worker")
    assert "--master-host" in line and says in line


def test_a_worker_with_no_master_says_it_waits_for_it(tmp_path):
    port = free_port()
    log = tmp_path / "worker.log"
    with open(log, "w") as fh:
        worker = subprocess.Popen(
            [sys.executable, "-m", "vllm_load", "worker", "--master-host", "127.0.0.1"]
            + ["--master-port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=fh,
            start_new_session=True,
        )
    locust: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "Starting Locust" not in log.read_text():
            locust = locust or psutil.Process(worker.pid).children(recursive=True)
            time.sleep(0.1)
        first = log.read_text().splitlines()[0]
        assert first.startswith(f"vllm-load worker: waiting for master at 127.0.0.1:{port}"), first
        worker.send_signal(signal.SIGINT)
        worker.wait(timeout=20)
    finally:
        for process in locust:  # in a process group of its own
            if process.is_running():
                process.kill()
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


def test_a_second_target_that_is_down_or_serves_another_model_is_one_line(tmp_path):
    """Several targets (a repeated --host): each is checked as the first is, before any load."""
    out = str(tmp_path / "runs")
    with (
        SimulatorProcess("--time-scale", "0.01") as first,
        SimulatorProcess("--time-scale", "0.01", "--served-model-name", "other") as other,
    ):
        down = one_error_line(vllm_load("run", "--host", first.url, "--host", NO_TARGET), "run")
        assert f"cannot use the target {NO_TARGET}" in down
        wrong = one_error_line(vllm_load("run", "--host", first.url, "--host", other.url), "run")
        assert f"is not served by {other.url}" in wrong and "it serves: other" in wrong
        twice = vllm_load("run", "--host", first.url, "--hosts", f"{first.url},{first.url}/")
        assert "--hosts names" in one_error_line(twice, "run") and not os.path.exists(out)


def test_a_hostile_trace_is_one_line_before_the_target(tmp_path):
    """Issue 52: a 10^12-token line grew the load process to 22.7 GB; now refused, with its
    line, before the target is asked or Locust started."""
    path = tmp_path / "hostile.jsonl"
    good = '{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": []}\n'
    path.write_text(good + good.replace("100", "1000000000000"))
    line = one_error_line(vllm_load("run", "--host", NO_TARGET, "--trace", str(path)), "run")
    assert f"--trace: {path}:2: 1000000000010 tokens" in line and "--trace-max-tokens" in line
