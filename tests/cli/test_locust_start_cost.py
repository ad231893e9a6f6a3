"""What every Locust process a run starts pays before its first request: gevent's patch_all in
Locust's import looked up its plugins by reading every installed distribution's metadata once
per patch event (25 readings, 0.15-0.2 s of CPU); `stop_signals.entry_points_read_once` reads
them once."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

from vllm_load.stop_signals import entry_points_read_once

# a Locust child as `cli.locust_process` starts it (`locust_main`), told only to print its
# version, counting the readings of the installed distributions
COUNT_READINGS = "\n".join(
    [
        "import sys",
        "from importlib import metadata",
        "readings = []",
        "read = metadata.distributions",
        "metadata.distributions = lambda **kw: readings.append(1) or read(**kw)",
        "sys.argv[1:] = ['--version']",
        "from vllm_load.stop_signals import locust_main",
        "try:",
        "    locust_main(True)",
        "except SystemExit:",
        "    pass",
        "print('readings', len(readings), file=sys.stderr)",
    ]
)


def test_a_locust_process_reads_the_installed_distributions_once_while_it_starts():
    done = subprocess.run(
        [sys.executable, "-c", COUNT_READINGS], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1] == "readings 1", done.stderr[-2000:]


def test_the_entry_points_read_once_are_those_read_each_time(monkeypatch):
    readings = []
    read = metadata.distributions
    monkeypatch.setattr(metadata, "distributions", lambda **kw: readings.append(1) or read(**kw))
    groups = ("gevent.plugins.monkey.will_patch_all", "console_scripts", "no.such.group")
    each_time = [sorted(metadata.entry_points(group=g)) for g in groups]
    assert each_time[0] and each_time[1] and not each_time[2]  # gevent's own plugin among them
    before = len(readings)
    with entry_points_read_once():
        once = [sorted(metadata.entry_points(group=g)) for g in groups]
    assert once == each_time
    assert len(readings) - before == 1
    assert metadata.entry_points.__module__ == "importlib.metadata"  # given back
