"""The compose file checked without a Docker engine: it parses, every vllm-load service's
command is accepted by the CLI's own parser, the image's entry point exists, and no web UI is
public without a login (every port is published on the host's loopback only, the master's web
UI included; `docker compose config` shows the same)."""

import configparser
import importlib
import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml
from support import ROOT

from vllm_load.cli.main import build_parser
from vllm_load.web.bind import is_loopback, open_web_ui_refusal

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
    # the command takes the stop signals before it imports the subcommands (`stop_signals`)
    assert scripts[entry].strip() == "vllm_load.__main__:main"
    module, _, name = scripts[entry].strip().partition(":")
    assert callable(getattr(importlib.import_module(module), name))
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


def published(service: dict) -> list[tuple[str, int]]:
    """(host address, container port) of each port a service publishes, in compose's short
    ("[IP:]HOST:CONTAINER[/proto]") or long ({host_ip, published, target}) form; "" for every
    interface."""
    ports = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            ports.append((str(port.get("host_ip", "")), int(port["target"])))
            continue
        parts = str(port).split("/")[0].rsplit(":", 2)
        host_ip = parts[0] if len(parts) == 3 else ""
        ports.append((host_ip.strip("[]"), int(parts[-1])))
    return ports


def public_ui_problems(services: dict) -> list[str]:
    """What would make a web UI (or anything else) reachable from other machines without a
    login: a port published beyond the host's loopback, or a master whose web UI the CLI
    would refuse to serve as configured; and a master its workers (other containers) cannot
    reach."""
    problems = [
        f"{name} publishes port {target} on {host_ip or 'every interface'}"
        for name, service in services.items()
        for host_ip, target in published(service)
        if not is_loopback(host_ip)
    ]
    master = build_parser().parse_args(command_argv(services["master"]))
    if master.web:
        refusal = open_web_ui_refusal(
            master.web_host, master.web_login, master.web_insecure_no_login
        )
        if refusal:
            problems.append(f"master: {refusal}")
    if is_loopback(master.master_bind_host):
        problems.append("master: the workers (other containers) cannot reach a loopback bind")
    return problems


@pytest.mark.parametrize("env", [{}, {"MASTER_MODE": "--headless"}, {"WORKERS": "8"}])
def test_no_web_ui_is_public_without_a_login(env):
    assert public_ui_problems(compose(env)["services"]) == []


def test_a_public_ui_is_caught():
    services = compose()["services"]
    exposed = {**services, "master": {**services["master"], "ports": ["8089:8089"]}}
    assert public_ui_problems(exposed) == ["master publishes port 8089 on every interface"]
    argv = [a for a in command_argv(services["master"]) if a != "--web-insecure-no-login"]
    unflagged = {**services, "master": {**services["master"], "command": argv}}
    (problem,) = public_ui_problems(unflagged)
    assert "without a login" in problem


@pytest.mark.parametrize("env", [{}, {"MASTER_MODE": "--headless"}])
def test_compose_config_validates_and_shows_no_public_ui(env):
    client = compose_client()
    if client is None:
        pytest.skip(
            "no compose client installed (.ci/run installs Debian's docker-compose as root)"
        )
    result = subprocess.run(
        [*client, "-f", COMPOSE, "--profile", "gpu", "config"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert {"sim", "master", "worker", "vllm"} <= set(services)
    assert public_ui_problems(services) == []
