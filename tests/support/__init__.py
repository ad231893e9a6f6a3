"""Helpers shared by the tests (none of them a test): imported as `from support.X import ...`.

setup.cfg's `pythonpath = tests` puts tests/ on sys.path for pytest; a subprocess script that
needs a helper gets `TESTS` as an argument and puts it on its own sys.path. Fixtures live in
tests/conftest.py. Test modules never import each other.

- `runhelpers`: running vllm-load as a child process, reading a run directory back
- `sim_http`: blocking HTTP calls to the simulator, SSE bodies, /metrics values
- `sse_chunks`: chat-completion SSE chunks as vLLM streams them
- `shared_runs`: one run made once per pytest session for every test that asserts on it
- `fault_runs`: the fault matrix's runs (one fault each), shared by test_faults and test_survivorship
- `reports`: synthetic run directories and the PNGs embedded in a report
- `report_summary`: a run's report summary made in the test's process, as `vllm-load report`
  writes it, for tests that read only the summary
- `hf_tokenizer`: a small, real Hugging Face tokenizer directory built locally
- `netns`: test hosts in network namespaces (root only)
- `read_lag`: how late a gevent process reads bytes sent on a steady beat
- `kustomize`: deploy/kubernetes rendered as `kubectl kustomize` would, without kustomize
- `browser`: headless Chromium for the browser tests, and the marks that skip them without it
- `prometheus_scrape`: vllm-load's own /metrics (--prometheus): rows fed in, scrapes parsed
  back, the Grafana dashboard's queries
"""

from __future__ import annotations

import ast
import os
from typing import Iterator

#: the tests/ folder
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the repository's root
ROOT = os.path.dirname(TESTS)
#: tests/data
DATA = os.path.join(TESTS, "data")


def user_cache_dir(name: str) -> str:
    """vllm-load's folder `name` in the user's cache directory (XDG_CACHE_HOME or ~/.cache), kept
    between runs of the suite on one machine."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vllm-load", name)


def python_files(top: str) -> Iterator[str]:
    """The .py files under ROOT/`top` (a folder of the repository), in a stable order."""
    for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            yield os.path.join(folder, name)


def parse_file(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as fh:
        return ast.parse(fh.read(), path)
