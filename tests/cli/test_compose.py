"""The compose file checked without a Docker engine: it parses, every vllm-load service's
command is accepted by the CLI's own parser, and the image's entry point exists."""

import configparser
import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml
from support import ROOT

from vllm_load.cli.main import build_parser

COMPOSE = os.path.join(ROOT, "docker-compose.yml")


def interpolate(text: str, env: dict) -> str:
    """Compose's ${VAR:-default} and ${VAR} substitution."""

    def sub(match):
        name, default = match.group(1), match.group(3)
        return env.get(name) or (default if default is not None else "")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", sub, text)


def compose(env: dict | None = None) -> dict:
    with open(COMPOSE) as fh:
        return yaml.safe_load(interpolate(fh.read(), env or {}))


def command_argv(service: dict) -> list[str]:
    command = service["command"]
    return list(command) if isinstance(command, list) else shlex.split(command)


@pytest.mark.parametrize(
    "env", [{}, {"MASTER_MODE": "--headless", "WORKERS": "8", "TARGET": "http://vllm:8000"}]
)
def test_every_vllm_load_service_command_parses(env):
    services = compose(env)["services"]
    ours = {name: s for name, s in services.items() if s.get("image") == "vllm-load:latest"}
    assert set(ours) == {"sim", "master", "worker"}
    parser = build_parser()
    for name, service in ours.items():
        args = parser.parse_args(command_argv(service))
        assert args.command == name
    master = parser.parse_args(command_argv(ours["master"]))
    assert master.expect_workers == int(env.get("WORKERS", 1))
    assert master.web == ("MASTER_MODE" not in env)


def test_gpu_target_is_behind_a_profile_and_reserves_gpus():
    vllm = compose()["services"]["vllm"]
    assert vllm["profiles"] == ["gpu"]
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]


def test_image_entry_point_is_the_installed_console_script():
    with open(os.path.join(ROOT, "Dockerfile")) as fh:
        dockerfile = fh.read()
    entry = re.search(r'^ENTRYPOINT \["([^"]+)"\]', dockerfile, re.M).group(1)
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    lines = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    scripts = {
        name.strip(): target.strip() for name, target in (line.split("=", 1) for line in lines)
    }
    assert entry in {k.strip() for k in scripts}
    assert scripts[entry].strip() == "vllm_load.cli.main:main"
    for path in re.findall(r"^COPY (\S+) ", dockerfile, re.M):
        assert os.path.exists(os.path.join(ROOT, path)), path


def compose_client() -> list[str] | None:
    """`docker compose` (v2 plugin) if present, else Debian's `docker-compose`."""
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.mark.parametrize("env", [{}, {"MASTER_MODE": "--headless"}])
def test_compose_config_validates(env):
    client = compose_client()
    if client is None:
        pytest.skip(
            "no compose client installed (.ci/run installs Debian's docker-compose as root)"
        )
    result = subprocess.run(
        [*client, "-f", COMPOSE, "config", "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
