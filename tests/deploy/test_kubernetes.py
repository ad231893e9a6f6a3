"""deploy/kubernetes checked without a cluster: every object validates against the Kubernetes
schemas (kubernetes-validate ships them, so nothing is fetched), and rendered with 4 workers
the master and the workers are wired to each other, the Services to the containers' ports, the
CLI accepts every container's arguments, and the API key reaches the pods only from the Secret.

The render is tests/support/kustomize.py (kustomize's fields that the kustomization uses);
where kubectl is installed it is checked against `kubectl kustomize`.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml
from support import ROOT
from support.kustomize import Unsupported, containers, render, split_image

from vllm_load.cli.main import build_parser
from vllm_load.compat.argparse import parser_actions, subcommand_parsers
from vllm_load.run.prometheus_export import METRICS_PATH
from vllm_load.settings import Settings
from vllm_load.user_values import SettingsError, split_listen_address
from vllm_load.web.bind import is_loopback, open_web_ui_refusal

DEPLOY = os.path.join(ROOT, "deploy", "kubernetes")
#: the two ways of running: the web UI's master (a Deployment), one headless test (a Job); each
#: variant's directory, its master's kind, and the simulator component as its kustomization names it
VARIANTS = {
    "web": (DEPLOY, "Deployment", "simulator"),
    "headless": (os.path.join(DEPLOY, "headless"), "Job", "../simulator"),
}
MASTER = "vllm-load-master"
SECRET_EXAMPLE = os.path.join(DEPLOY, "secret.example.yaml")
#: the oldest and the newest Kubernetes whose schemas the pinned kubernetes-validate ships that
#: the manifests are checked against
K8S_VERSIONS = ("1.30.0", "1.37.0")
SECRET = "vllm-load"
#: environment variables that hold a secret, and the Secret's key each comes from
SECRET_ENV = {"OPENAI_API_KEY": "api-key", "VLLM_LOAD_WEB_PASSWORD": "web-password"}
WORKERS = 4


def rendered(workers: int = WORKERS, simulator: bool = True, variant: str = "web") -> list[dict]:
    directory, _, component = VARIANTS[variant]
    return render(directory, workers=workers, components=(component,) if simulator else ())


def master_of(docs: list[dict]) -> dict:
    """The master: a Deployment (web UI) or a Job (headless), exactly one."""
    found = [d for d in workloads(docs) if d["metadata"]["name"] == MASTER]
    assert len(found) == 1, f"{MASTER}: {len(found)} found"
    return found[0]


def the(docs: list[dict], kind: str, name: str) -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def workloads(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["kind"] in ("Deployment", "Job")]


# --- the checks, each returning what is wrong (the negative tests feed them broken renders) ---


def schema_problems(docs: list[dict], version: str) -> list[str]:
    problems = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            problems.append(f"{doc['kind']}/{doc['metadata']['name']}: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:  # an unknown kind fails too
            problems.append(e.message)
    return problems


def container_env(doc: dict, container: dict, docs: list[dict]) -> tuple[dict, dict]:
    """(plain, from secrets): the container's environment as Kubernetes builds it, the plain
    values (ConfigMaps through envFrom, then env literals) and the variables set from a Secret
    (name -> (secret, key))."""
    plain: dict[str, str] = {}
    secret: dict[str, tuple[str, str]] = {}
    namespace = doc["metadata"].get("namespace")
    for source in container.get("envFrom", []):
        assert set(source) == {"configMapRef"}, source
        config = the(docs, "ConfigMap", source["configMapRef"]["name"])
        assert config["metadata"].get("namespace") == namespace
        plain.update(config.get("data", {}))
    for var in container.get("env", []):
        if "value" in var:
            plain[var["name"]] = var["value"]
            secret.pop(var["name"], None)
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            secret[var["name"]] = (ref["name"], ref["key"])
            plain.pop(var["name"], None)
    return plain, secret


def expand(arg: str, env: dict) -> str:
    """Kubernetes' $(NAME) expansion of a command or argument: $$ escapes, an undefined name stays."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        arg,
    )


def cli_args(doc: dict, docs: list[dict]) -> list[str]:
    """The arguments the container's entry point (`vllm-load`) gets, expanded."""
    (container,) = pod_spec(doc)["containers"]
    plain, _ = container_env(doc, container, docs)
    return [expand(a, plain) for a in container["args"]]


def parse(argv: list[str]):
    return build_parser().parse_args(argv)


def argument_problems(docs: list[dict]) -> list[str]:
    """Every container: the vllm-load image run through its entry point, with arguments the
    CLI's own parser accepts, every $(NAME) defined by a plain variable, none from a Secret."""
    problems = []
    parser = build_parser()
    for doc in workloads(docs):
        name = doc["metadata"]["name"]
        for container in pod_spec(doc)["containers"]:
            if split_image(container["image"])[0] != image_name(docs):
                problems.append(f"{name}: image {container['image']} is not vllm-load's")
            if "command" in container:
                problems.append(f"{name}: command replaces the image's entry point (vllm-load)")
            plain, secret = container_env(doc, container, docs)
            for arg in container.get("args", []):
                for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg):
                    if var in secret:
                        problems.append(f"{name}: $({var}) puts a secret on the command line")
                    elif var not in plain:
                        problems.append(f"{name}: $({var}) is not defined")
            argv = [expand(a, plain) for a in container.get("args", [])]
            try:
                args = parser.parse_args(argv)
            except SystemExit:
                problems.append(f"{name}: vllm-load rejects {argv}")
                continue
            known = subcommand_options(parser, args.command)
            problems += [
                f"{name}: {a} is not spelt as the option is (argparse takes a prefix)"
                for a in argv
                if a.startswith("--") and a.split("=")[0] not in known
            ]
            if args.command == "master":  # its values, checked as `vllm-load master` checks them
                try:
                    Settings.from_options(args)
                except SettingsError as e:
                    problems.append(f"{name}: {e}")
    return problems


def subcommand_options(parser, command: str) -> set[str]:
    sub = subcommand_parsers(parser)[command]
    return {s for action in parser_actions(sub) for s in action.option_strings}


def image_name(docs: list[dict]) -> str:
    """The image every variant's kustomization sets (they must agree)."""
    names = set()
    for directory, _, _ in VARIANTS.values():
        with open(os.path.join(directory, "kustomization.yaml")) as fh:
            (entry,) = yaml.safe_load(fh)["images"]
        names.add(entry.get("newName", entry["name"]))
    (name,) = names
    return name


def port_of(container: dict, port) -> int | None:
    """A Service's targetPort (a name or a number) as the container's port number."""
    for p in container.get("ports", []):
        if port in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    return None


def selected(docs: list[dict], service: dict) -> list[dict]:
    selector = service["spec"]["selector"]
    return [
        d
        for d in workloads(docs)
        if d["metadata"].get("namespace") == service["metadata"].get("namespace")
        and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    ]


def service_problems(docs: list[dict]) -> list[str]:
    """Each Service selects exactly one Deployment, and each of its ports reaches a port that
    Deployment's container declares, under the same number (the one the CLI is told to use)."""
    problems = []
    for service in (d for d in docs if d["kind"] == "Service"):
        name = service["metadata"]["name"]
        targets = selected(docs, service)
        if len(targets) != 1:
            problems.append(f"Service {name} selects {len(targets)} Deployments")
            continue
        (container,) = pod_spec(targets[0])["containers"]
        for port in service["spec"]["ports"]:
            number = port_of(container, port.get("targetPort", port["port"]))
            if number != port["port"]:
                problems.append(
                    f"Service {name} port {port['name']} reaches container port {number}"
                )
    return problems


def wiring_problems(docs: list[dict]) -> list[str]:
    """The workers reach the master through its Service, the master listens where the Service
    sends them and waits for as many workers as run, and writes run directories to its volume."""
    problems = []
    master_doc = master_of(docs)
    worker_doc = the(docs, "Deployment", "vllm-load-worker")
    service = the(docs, "Service", "vllm-load-master")
    master, worker = parse(cli_args(master_doc, docs)), parse(cli_args(worker_doc, docs))
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    spec = master_doc["spec"]
    if master_doc["kind"] == "Job":
        if spec.get("parallelism", 1) != 1 or spec.get("completions", 1) != 1:
            problems.append("more than one master")
        if spec.get("backoffLimit") != 0 or pod_spec(master_doc)["restartPolicy"] != "Never":
            problems.append("a failed headless test would be started again")
        if not spec.get("activeDeadlineSeconds"):
            problems.append("the headless test has no time bound")
        if master.web:
            problems.append("the Job's master serves a web UI: nobody would start its test")
    elif spec["replicas"] != 1:
        problems.append("more than one master")
    if selected(docs, service) != [master_doc]:
        problems.append("the master Service does not select the master alone")
    if worker.master_host != service["metadata"]["name"]:
        problems.append(f"workers connect to {worker.master_host}, not the master Service")
    if is_loopback(master.master_bind_host):
        problems.append(
            f"the master listens for workers on {master.master_bind_host}: other pods cannot reach it"
        )
    if not worker.master_port == master.master_bind_port == ports.get("master"):
        problems.append(
            f"workers connect to port {worker.master_port}, the master binds "
            f"{master.master_bind_port}, the Service forwards {ports.get('master')}"
        )
    if master_doc["kind"] == "Job":
        pass  # headless: no web UI, and the Service has no web port to reach
    elif master.web_port != ports.get("web") or master.web_host != "0.0.0.0" or not master.web:
        problems.append(
            f"web UI on {master.web_host}:{master.web_port}, Service port {ports.get('web')}"
        )
    if master.expect_workers != worker_doc["spec"]["replicas"]:
        problems.append(
            f"the master expects {master.expect_workers} workers, "
            f"{worker_doc['spec']['replicas']} run"
        )
    if worker.processes != 1:
        problems.append("a worker pod runs more than one load process (sized for one core)")
    mounts = {
        m["mountPath"]: m["name"] for m in pod_spec(master_doc)["containers"][0]["volumeMounts"]
    }
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod_spec(master_doc).get("volumes", [])
        if "persistentVolumeClaim" in v
    }
    out = os.path.normpath(master.out)
    on_volume = [
        p for p, v in mounts.items() if v in claims and (out + "/").startswith(p.rstrip("/") + "/")
    ]
    if not on_volume:
        problems.append(f"run directories ({out}) are not on a persistent volume")
    elif claims[mounts[on_volume[0]]] not in {
        d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"
    }:
        problems.append("the runs volume's claim is not in the manifests")
    return problems


def web_ui_problems(docs: list[dict]) -> list[str]:
    """A master's web UI is behind its login: the CLI would serve it as configured, and in a
    cluster (every pod and any port-forward reaches the Service) never without --web-login,
    whatever opt-out it names."""
    master = parse(cli_args(master_of(docs), docs))
    if not master.web:
        return []
    problems = []
    refusal = open_web_ui_refusal(master.web_host, master.web_login, master.web_insecure_no_login)
    if refusal:
        problems.append(f"the master would refuse to start: {refusal}")
    if not master.web_login:
        problems.append("the web UI has no login")
    return problems


def prometheus_problems(docs: list[dict]) -> list[str]:
    """The master serves its own metrics (--prometheus) where its pod's scrape annotations
    point: on an address other pods reach, at the annotated port and path, and the container
    declares that port."""
    doc = master_of(docs)
    annotations = doc["spec"]["template"]["metadata"].get("annotations", {})
    master = parse(cli_args(doc, docs))
    if not master.prometheus:
        return ["the master serves no metrics for Prometheus (--prometheus)"]
    host, port = split_listen_address(master.prometheus)
    problems = []
    if annotations.get("prometheus.io/scrape") != "true":
        problems.append("the master's pod is not annotated for scraping")
    if annotations.get("prometheus.io/port") != str(port):
        problems.append(
            f"scrape annotation port {annotations.get('prometheus.io/port')}, metrics on {port}"
        )
    if annotations.get("prometheus.io/path") != METRICS_PATH:
        problems.append(f"scrape annotation path {annotations.get('prometheus.io/path')}")
    if is_loopback(host):
        problems.append(f"metrics on {host}: a scraper in another pod cannot reach them")
    if port_of(pod_spec(doc)["containers"][0], port) != port:
        problems.append(f"the master's container declares no port {port}")
    return problems


def secret_problems(docs: list[dict]) -> list[str]:
    """The API key (and the web UI's password) reach the pods only through the Secret: no
    Secret object in what `kubectl apply -k` applies (it would overwrite the real one), no
    ConfigMap entry or literal variable or argument that could carry them, and every container
    that talks to the target, or serves the login, takes them from the Secret."""
    problems = []
    secretish = re.compile(r"api[_-]?key|passw|secret|bearer|(^|_)token\b", re.I)
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "Secret":
            problems.append(f"Secret/{name} is applied by the kustomization")
        if kind == "ConfigMap":
            problems += [
                f"ConfigMap/{name} holds {k}" for k in doc.get("data", {}) if secretish.search(k)
            ]
    for doc in workloads(docs):
        name = doc["metadata"]["name"]
        for container in pod_spec(doc)["containers"]:
            plain, secret = container_env(doc, container, docs)
            problems += [f"{name}: {k} is a literal" for k in plain if secretish.search(k)]
            for var, ref in secret.items():
                if ref != (SECRET, SECRET_ENV.get(var)):
                    problems.append(f"{name}: {var} comes from {ref}")
            for arg in container.get("args", []):
                if re.match(r"--api-key\b|--web-password\b", arg):
                    problems.append(f"{name}: {arg} on the command line")
    for doc in (master_of(docs), the(docs, "Deployment", "vllm-load-worker")):
        name = doc["metadata"]["name"]
        _, secret = container_env(doc, pod_spec(doc)["containers"][0], docs)
        if secret.get("OPENAI_API_KEY") != (SECRET, "api-key"):
            problems.append(f"{name}: OPENAI_API_KEY does not come from the Secret")
    master = master_of(docs)
    if "--web-login" in pod_spec(master)["containers"][0]["args"]:
        _, secret = container_env(master, pod_spec(master)["containers"][0], docs)
        if "VLLM_LOAD_WEB_PASSWORD" not in secret:
            problems.append("--web-login without the password from the Secret")
    return problems


# --- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("simulator", [False, True], ids=["base", "simulator"])
def test_every_object_validates_strictly(version, simulator, variant):
    docs = rendered(simulator=simulator, variant=variant)
    assert {d["kind"] for d in docs} >= {
        "Namespace",
        "ConfigMap",
        "PersistentVolumeClaim",
        "Service",
        "Deployment",
        VARIANTS[variant][1],
    }
    assert schema_problems(docs, version) == []


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_secret_example_validates_and_holds_the_keys_the_pods_read(version):
    with open(SECRET_EXAMPLE) as fh:
        (secret,) = [d for d in yaml.safe_load_all(fh) if d]
    assert schema_problems([secret], version) == []
    assert secret["metadata"]["name"] == SECRET
    assert set(secret["stringData"]) == set(SECRET_ENV.values())
    namespace = {d["metadata"]["name"] for d in rendered() if d["kind"] == "Namespace"}
    assert {secret["metadata"]["namespace"]} == namespace


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_rendered_with_4_workers_master_and_workers_are_wired(variant):
    docs = rendered(workers=4, variant=variant)
    assert the(docs, "Deployment", "vllm-load-worker")["spec"]["replicas"] == 4
    master_doc = master_of(docs)
    assert master_doc["kind"] == VARIANTS[variant][1]
    master = parse(cli_args(master_doc, docs))
    assert master.command == "master" and master.expect_workers == 4
    assert master.web == (variant == "web")
    worker = parse(cli_args(the(docs, "Deployment", "vllm-load-worker"), docs))
    assert (worker.command, worker.master_host, worker.master_port) == (
        "worker",
        "vllm-load-master",
        5557,
    )
    assert wiring_problems(docs) == []
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {
        "vllm-load"
    }


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_worker_count_is_set_in_one_place(variant):
    for workers in (1, 13):
        docs = rendered(workers=workers, simulator=False, variant=variant)
        assert parse(cli_args(master_of(docs), docs)).expect_workers == workers
        assert wiring_problems(docs) == []


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_service_ports_reach_the_containers_ports(variant):
    docs = rendered(variant=variant)
    assert service_problems(docs) == []
    sim = parse(cli_args(the(docs, "Deployment", "vllm-load-sim"), docs))
    assert (sim.command, sim.host, sim.port) == ("sim", "0.0.0.0", 8000)
    settings = the(docs, "ConfigMap", "vllm-load-settings")["data"]
    assert settings["TARGET"] == "http://vllm-load-sim:8000"  # the simulator's Service


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_web_ui_is_behind_its_login(variant):
    assert web_ui_problems(rendered(variant=variant)) == []


def test_a_web_ui_without_its_login_is_caught():
    docs = rendered()
    args = pod_spec(the(docs, "Deployment", "vllm-load-master"))["containers"][0]["args"]
    at = args.index("--web-login")
    args[at] = "--web-insecure-no-login"
    assert web_ui_problems(docs) == ["the web UI has no login"]
    del args[at]
    assert len(web_ui_problems(docs)) == 2


def test_a_master_on_loopback_is_caught():
    docs = rendered()
    args = pod_spec(the(docs, "Deployment", "vllm-load-master"))["containers"][0]["args"]
    at = args.index("--master-bind-host")
    del args[at : at + 2]  # vllm-load's default: 127.0.0.1
    (problem,) = wiring_problems(docs)
    assert "other pods cannot reach it" in problem


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_api_key_reaches_the_pods_only_through_the_secret(variant):
    assert secret_problems(rendered(variant=variant)) == []


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_container_runs_a_real_subcommand_with_options_it_accepts(variant):
    docs = rendered(variant=variant)
    assert argument_problems(docs) == []
    commands = {parse(cli_args(d, docs)).command for d in workloads(docs)}
    assert commands == {"master", "worker", "sim"}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_prometheus_scrapes_the_master_where_its_metrics_are_served(variant):
    assert prometheus_problems(rendered(variant=variant)) == []


def test_a_scrape_annotation_that_misses_the_metrics_is_caught():
    docs = rendered()
    master = the(docs, "Deployment", "vllm-load-master")
    master["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] = "9090"
    args = pod_spec(master)["containers"][0]["args"]
    args[args.index("--prometheus") + 1] = "9647"  # on loopback
    assert len(prometheus_problems(docs)) == 2, prometheus_problems(docs)


def test_the_image_is_the_one_the_dockerfile_builds_with_vllm_load_as_entry_point():
    with open(os.path.join(ROOT, "Dockerfile")) as fh:
        assert re.search(r'^ENTRYPOINT \["vllm-load"\]', fh.read(), re.M)
    images = {c["image"] for v in VARIANTS for d in rendered(variant=v) for c in containers(d)}
    assert images == {"vllm-load:latest"}


# --- broken manifests fail ------------------------------------------------------------------


def test_a_misspelt_or_mistyped_field_fails_validation():
    docs = rendered()
    worker = the(docs, "Deployment", "vllm-load-worker")
    worker["spec"]["replica"] = 4  # unknown field
    master = the(docs, "Deployment", "vllm-load-master")
    pod_spec(master)["containers"][0]["env"][0]["value"] = 4  # env values are strings
    problems = schema_problems(docs, K8S_VERSIONS[-1])
    assert len(problems) == 2, problems
    assert "replica" in problems[0] + problems[1]


def test_broken_wiring_is_caught():
    docs = rendered()
    worker = the(docs, "Deployment", "vllm-load-worker")
    args = pod_spec(worker)["containers"][0]["args"]
    args[args.index("--master-host") + 1] = "master"
    worker["spec"]["replicas"] = 5  # scaled by hand: the master still expects 4
    service = the(docs, "Service", "vllm-load-master")
    service["spec"]["ports"][1]["targetPort"] = 8080
    problems = wiring_problems(docs) + service_problems(docs)
    assert len(problems) == 3, problems


def test_a_key_outside_the_secret_is_caught():
    docs = rendered()
    broken = copy.deepcopy(docs)
    the(broken, "ConfigMap", "vllm-load-settings")["data"]["OPENAI_API_KEY"] = "sk-..."
    assert secret_problems(broken)
    broken = copy.deepcopy(docs)
    worker = pod_spec(the(broken, "Deployment", "vllm-load-worker"))["containers"][0]
    worker["env"] = [{"name": "OPENAI_API_KEY", "value": "sk-..."}]
    assert secret_problems(broken)
    broken = copy.deepcopy(docs)
    worker = pod_spec(the(broken, "Deployment", "vllm-load-worker"))["containers"][0]
    worker["args"] += ["--api-key", "$(OPENAI_API_KEY)"]
    assert secret_problems(broken) and argument_problems(broken)


def test_arguments_the_cli_rejects_are_caught():
    docs = rendered()
    master = pod_spec(the(docs, "Deployment", "vllm-load-master"))["containers"][0]
    master["args"] += ["--expect-worker", "4", "--levels", "$(LEVEL)"]  # a prefix; undefined
    problems = argument_problems(docs)
    assert len(problems) == 3, problems  # the prefix, $(LEVEL), and --levels' value
    master["args"] += ["--workers-expected", "4"]
    assert any("rejects" in p for p in argument_problems(docs))


def test_the_render_refuses_fields_it_does_not_do(tmp_path):
    copy_dir = tmp_path / "kubernetes"
    shutil.copytree(DEPLOY, copy_dir)
    path = copy_dir / "kustomization.yaml"
    kustomization = yaml.safe_load(path.read_text())
    kustomization["commonLabels"] = {"team": "perf"}
    path.write_text(yaml.safe_dump(kustomization))
    with pytest.raises(Unsupported):
        render(str(copy_dir))


# --- the render against kustomize itself ----------------------------------------------------


def kubectl_kustomize() -> bool:
    if not shutil.which("kubectl"):
        return False
    result = subprocess.run(["kubectl", "kustomize", "--help"], capture_output=True, timeout=60)
    return result.returncode == 0


@pytest.mark.skipif(not kubectl_kustomize(), reason="no kubectl with kustomize installed")
@pytest.mark.parametrize("simulator", [False, True], ids=["base", "simulator"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_render_is_what_kubectl_kustomize_builds(tmp_path, simulator, variant):
    """The kustomization edited as `kustomize edit set replicas` / `add component` would, built
    by kubectl (offline), against `render`."""
    directory, _, component = VARIANTS[variant]
    copy_root = tmp_path / "kubernetes"
    shutil.copytree(DEPLOY, copy_root)
    copy_dir = copy_root / os.path.relpath(directory, DEPLOY)
    path = copy_dir / "kustomization.yaml"
    kustomization = yaml.safe_load(path.read_text())
    kustomization["replicas"] = [{"name": "vllm-load-worker", "count": WORKERS}]
    if simulator:
        kustomization["components"] = [component]
    path.write_text(yaml.safe_dump(kustomization))
    built = subprocess.run(
        ["kubectl", "kustomize", str(copy_dir)], capture_output=True, text=True, timeout=120
    )
    assert built.returncode == 0, built.stderr
    theirs = [d for d in yaml.safe_load_all(built.stdout) if d]
    ours = rendered(simulator=simulator, variant=variant)

    def key(doc):
        return (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])

    assert sorted(theirs, key=key) == sorted(ours, key=key)
