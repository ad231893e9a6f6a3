"""`vllm_load.workload` stays pure: importing it (or its trace reader, `workload.traces`) brings in
no gevent, Locust, network or data frame library (it is imported by every load process, and by
tools that run no load)."""

from __future__ import annotations

import subprocess
import sys

from support import ROOT

FORBIDDEN = (
    "gevent",
    "geventhttpclient",
    "locust",
    "socket",
    "ssl",
    "http.client",
    "urllib.request",
    "aiohttp",
    "pandas",
    "numpy",
    "scipy",
    "matplotlib",
)


def test_importing_the_package_imports_nothing_heavy():
    code = (
        "import sys; import vllm_load.workload, vllm_load.workload.traces; "
        f"print(' '.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [], f"vllm_load.workload imports {proc.stdout.strip()}"
