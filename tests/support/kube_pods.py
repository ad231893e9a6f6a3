"""deploy/kubernetes's pods as processes on this machine: the containers' arguments and
environment exactly as Kubernetes would build them from the rendered manifests, run as the
pods' user, in a network namespace of their own where the Services' names resolve (the
cluster's DNS, played by /etc/hosts in a mount namespace of their own).

`python -m support.kube_pods OUT [--headless]` (root, inside `unshare --mount --net`; tests/ on
sys.path) starts the simulator, the master and two workers. Web UI (deploy/kubernetes): it logs
in with the Secret's password, waits for the workers, starts a test from the UI and waits for
its run directory in OUT. Headless (deploy/kubernetes/headless, the master a Job): it waits for
the master to wait for both workers, run its levels and exit. It prints one JSON line (what it
saw) and exits 0, or exits 1 with the processes' logs.
The Secret's API key is required by the simulator, so the test only passes if the master and
the workers send the key they got from the Secret.

What differs from a cluster: `--out` is OUT instead of the volume's /work/runs, the ConfigMap's
test settings are made small (as a user editing settings.yaml would), and the simulator is
given `--api-key` to check the key arrives.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time

import requests

from support import ROOT
from support.kustomize import render

DEPLOY = os.path.join(ROOT, "deploy", "kubernetes")
HEADLESS = os.path.join(DEPLOY, "headless")
POD_USER = 1000
WORKERS = 2
SECRET = {"api-key": "smoke-test-key", "web-password": "smoke-test-password"}
SMALL_TEST = {
    "LEVELS": "2",
    "INPUT_TOKENS": "64",
    "OUTPUT_TOKENS": "8",
    "REQUESTS_PER_LEVEL": "10",
    "WARMUP_REQUESTS": "2",
}


def the(docs: list[dict], kind: str, name: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def expand(arg: str, env: dict) -> str:
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        arg,
    )


def pod_process(docs: list[dict], name: str, settings: dict) -> tuple[list[str], dict]:
    """(argv, environment) of the Deployment's (or Job's) one container, as the kubelet builds
    them."""
    (doc,) = [
        d for d in docs if d["kind"] in ("Deployment", "Job") and d["metadata"]["name"] == name
    ]
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(the(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
        env.update(settings)
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = SECRET[ref["key"]]
    argv = [expand(a, env) for a in container["args"]]
    bindir = os.path.dirname(sys.executable)
    return [os.path.join(bindir, "vllm-load"), *argv], {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "PYTHONUNBUFFERED": "1",
        **env,
    }


DROP = ["setpriv", f"--reuid={POD_USER}", f"--regid={POD_USER}", "--clear-groups", "--"]


def pod_user_can_run_python() -> bool:
    """Whether the pods' user can start this interpreter by its path, as vllm-load starts Locust
    (a venv whose python links into root's home cannot: then the pods run as root here)."""
    probe = "import subprocess, sys; subprocess.run([sys.executable, '-c', ''], check=True)"
    result = subprocess.run([*DROP, sys.executable, "-c", probe], capture_output=True, cwd="/tmp")
    return result.returncode == 0


class Pods:
    def __init__(self, logs: str, as_pod_user: bool) -> None:
        self.logs = logs
        self.drop = DROP if as_pod_user else []
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict) -> None:
        log = open(os.path.join(self.logs, f"{name}.log"), "w")
        self.procs[name] = subprocess.Popen(
            self.drop + argv,
            env=env,
            cwd="/tmp",
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def descendants(self) -> list[int]:
        pids, todo = [], [p.pid for p in self.procs.values()]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            try:
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/children") as fh:
                        todo += [int(c) for c in fh.read().split()]
            except OSError:
                pass
        return pids

    def stop(self) -> None:
        pids = self.descendants()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # vllm-load forwards it to its Locust
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for proc in self.procs.values():
            proc.wait()

    def dump(self) -> str:
        out = []
        for name in self.procs:
            with open(os.path.join(self.logs, f"{name}.log"), errors="replace") as fh:
                out.append(f"--- {name} ---\n{fh.read()[-3000:]}")
        return "\n".join(out)


def wait(what: str, check, seconds: float, pods: Pods):
    deadline = time.monotonic() + seconds
    while True:
        try:
            value = check()
            if value:
                return value
        except requests.RequestException:
            pass
        dead = [n for n, p in pods.procs.items() if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {'exited: ' + ', '.join(dead) if dead else 'timed out'}")
        time.sleep(0.3)


def main(out: str, headless: bool = False) -> int:
    directory, component = (HEADLESS, "../simulator") if headless else (DEPLOY, "simulator")
    docs = render(directory, workers=WORKERS, components=(component,))
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    hosts = os.path.join(out, "hosts")
    names = [d["metadata"]["name"] for d in docs]
    with open(hosts, "w") as fh:
        fh.write("127.0.0.1 localhost " + " ".join(sorted(set(names))) + "\n")
    subprocess.run(["mount", "--bind", hosts, "/etc/hosts"], check=True)
    runs = os.path.join(out, "runs")
    os.makedirs(runs)
    os.chown(runs, POD_USER, POD_USER)

    as_pod_user = pod_user_can_run_python()
    pods = Pods(out, as_pod_user)
    seen: dict = {"user": POD_USER if as_pod_user else "root"}
    try:
        sim_argv, sim_env = pod_process(docs, "vllm-load-sim", {})
        # the simulator requires the key the Secret gives the master and the workers
        pods.start("sim", [*sim_argv, "--api-key", SECRET["api-key"]], sim_env)
        wait(
            "simulator",
            lambda: requests.get("http://vllm-load-sim:8000/health", timeout=2).ok,
            30,
            pods,
        )
        argv, env = pod_process(docs, "vllm-load-master", SMALL_TEST)
        argv[argv.index("--out") + 1] = runs
        pods.start("master", argv, env)
        seen["master_argv"] = argv[1:]
        for i in range(WORKERS):
            argv, env = pod_process(docs, "vllm-load-worker", {})
            pods.start(f"worker{i}", argv, env)
        if headless:
            seen["master_exit"] = pods.procs["master"].wait(timeout=120)
            run_json = completed_run(runs)
            if run_json is None:
                raise RuntimeError("the headless master exited without a completed run")
        else:
            run_json = run_from_the_web_ui(docs, runs, pods, seen)
        with open(run_json) as fh:
            run = json.load(fh)
        seen["outcome"] = run.get("outcome")
        seen["requests_recorded"] = run.get("requests_recorded")
        seen["workers_seen"] = run.get("workers")
        seen["run_dir"] = os.path.relpath(os.path.dirname(run_json), runs)
        with open(os.path.join(os.path.dirname(run_json), "requests.csv"), newline="") as fh:
            rows = list(csv.DictReader(fh))
        seen["statuses"] = sorted({row["status"] for row in rows})
        seen["errors"] = sorted({row["error"] for row in rows if row["error"]})
        seen["request_workers"] = len({row["worker"] for row in rows})
    except Exception as e:  # noqa: BLE001 - reported with the logs
        pods.stop()
        print(json.dumps(seen))
        print(f"{type(e).__name__}: {e}\n{pods.dump()}", file=sys.stderr)
        return 1
    pods.stop()
    seen["api_key_in_logs"] = SECRET["api-key"] in pods.dump()
    print(json.dumps(seen))
    return 0


def run_from_the_web_ui(docs: list[dict], runs: str, pods: Pods, seen: dict) -> str:
    """Log in, wait for the workers, start a test from the UI: its completed run.json."""
    ui = "http://vllm-load-master:8089"
    web = requests.Session()
    seen["anonymous_stats"] = wait(
        "web UI", lambda: web.get(ui + "/llm/stats", timeout=2).status_code, 60, pods
    )
    login = web.post(
        ui + "/login_submit",
        data={"username": "admin", "password": SECRET["web-password"]},
        timeout=10,
    )
    login.raise_for_status()
    seen["workers"] = wait(
        "workers",
        lambda: (
            web.get(ui + "/stats/requests", timeout=5).json().get("worker_count") == WORKERS
            and WORKERS
        ),
        60,
        pods,
    )
    seen["swarm"] = web.post(ui + "/swarm", data={"host": env_target(docs)}, timeout=10).json()
    return wait("run directory", lambda: completed_run(runs), 120, pods)


def env_target(docs: list[dict]) -> str:
    return the(docs, "ConfigMap", "vllm-load-settings")["data"]["TARGET"]


def completed_run(runs: str) -> str | None:
    for root, _dirs, files in os.walk(runs):
        if "run.json" in files:
            path = os.path.join(root, "run.json")
            try:
                with open(path) as fh:
                    if json.load(fh).get("outcome") == "completed":
                        return path
            except ValueError:
                pass
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], headless="--headless" in sys.argv[2:]))
