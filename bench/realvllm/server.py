"""`vllm serve` on 127.0.0.1 for the length of a `with` block, stopped by its process group.

The server runs in its own session (process group), so stopping it (SIGTERM to the group, then
SIGKILL after a grace period) also stops vLLM's engine-core and worker processes, and a Ctrl-C
in the terminal does not reach it before this code stops it in order.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from . import StepError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read().decode("utf-8"))


def get_text(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode("utf-8", "replace")


def tail(path: str, lines: int = 25) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return ""


def _group_gone(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait up to `timeout` s for the leader to exit and its whole process group to be gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            proc.wait(timeout=1.0) if proc.returncode is None else None
            return True
        time.sleep(0.2)
    return False


class VllmServer:
    """`vllm serve MODEL_DIR` from the venv, its log in `log`, ready when /v1/models answers."""

    def __init__(
        self,
        venv: str,
        model_dir: str,
        log: str,
        model_name: str = "tiny-llama",
        max_model_len: int = 4096,
        kv_cache_gb: float = 2.0,
        startup_timeout: float = 300.0,
        extra_args: list[str] | None = None,
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model_name = model_name
        self.log = log
        self.startup_timeout = startup_timeout
        self.cmd = [
            os.path.join(venv, "bin", "vllm"),
            "serve",
            model_dir,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "bfloat16",
            "--max-model-len",
            str(max_model_len),
            "--served-model-name",
            model_name,
            *(extra_args or []),
        ]
        self.env = dict(
            os.environ,
            VLLM_CPU_KVCACHE_SPACE=f"{kv_cache_gb:g}",
            VLLM_TARGET_DEVICE="cpu",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
        )
        self.proc: subprocess.Popen | None = None
        self.startup_s = float("nan")

    def start(self) -> "VllmServer":
        print(
            f"[real-vllm] starting vllm serve on {self.url} (usually 60-100 s; log: {self.log})",
            flush=True,
        )
        with open(self.log, "w", encoding="utf-8") as fh:
            fh.write("$ " + " ".join(self.cmd) + "\n")
            fh.flush()
            # a process group of its own (stopped as one), in our session: with autogroup
            # scheduling a session is a CPU-share group, and vllm-load in another session than
            # vLLM's waited up to ~1 s per second for a CPU (same session: < 30 ms/s)
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                process_group=0,
            )
        t0 = time.monotonic()
        last_note = t0
        while True:
            elapsed = time.monotonic() - t0
            if self.proc.poll() is not None:
                self._show_tail()
                raise StepError(
                    f"vllm serve exited with {self.proc.returncode} after {elapsed:.0f} s; "
                    f"its log's last lines are above ({self.log})"
                )
            try:
                models = get_json(self.url + "/v1/models", timeout=2.0)
                if any(m.get("id") == self.model_name for m in models.get("data", [])):
                    self.startup_s = elapsed
                    print(
                        f"[real-vllm] vllm serve ready after {elapsed:.0f} s (pid {self.proc.pid})",
                        flush=True,
                    )
                    return self
            except (OSError, ValueError):
                pass
            if elapsed > self.startup_timeout:
                self._show_tail()
                raise StepError(
                    f"vllm serve did not answer /v1/models within {self.startup_timeout:.0f} s "
                    f"(--startup-timeout); its log's last lines are above ({self.log})"
                )
            if time.monotonic() - last_note >= 15:
                last_note = time.monotonic()
                line = tail(self.log, 1).strip()
                print(f"  waiting for vllm serve: {elapsed:.0f} s  {line[-110:]}", flush=True)
            time.sleep(1.0)

    def _show_tail(self) -> None:
        print(
            f"--- last lines of {self.log} ---\n{tail(self.log).rstrip()}\n---",
            file=sys.stderr,
            flush=True,
        )

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM to the server's process group, SIGKILL to it after `grace` seconds."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            if _group_gone(proc, wait):
                break
        print(f"[real-vllm] vllm serve (pid {proc.pid}) stopped", flush=True)

    def __enter__(self) -> "VllmServer":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
