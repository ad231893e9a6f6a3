"""deploy/kubernetes/runs-reader: the pod that lets `kubectl cp` copy the run directories off the
volume after a headless Job, checked without a cluster: it validates strictly, mounts the volume
the masters write their runs to, at the same path, read-only, runs nothing of vllm-load, and ends
by itself."""

from __future__ import annotations

import os
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml
from support import ROOT
from support.kustomize import containers, render

DEPLOY = os.path.join(ROOT, "deploy", "kubernetes")
READER = os.path.join(DEPLOY, "runs-reader")
#: the masters that write run directories: the web UI's (a Deployment) and the headless Job
MASTERS = {"web": (DEPLOY, "Deployment"), "headless": (os.path.join(DEPLOY, "headless"), "Job")}
K8S_VERSIONS = ("1.30.0", "1.37.0")


def the_pod() -> dict:
    docs = render(READER)
    assert [d["kind"] for d in docs] == ["Pod"], docs
    return docs[0]


def master_runs(variant: str) -> tuple[str, str, str, str]:
    """(namespace, claim, mount path, --out) of the variant's master."""
    directory, kind = MASTERS[variant]
    (master,) = [
        d
        for d in render(directory)
        if d["kind"] == kind and d["metadata"]["name"] == "vllm-load-master"
    ]
    spec = master["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    (container,) = containers(master)
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    args = container["args"]
    return (
        master["metadata"]["namespace"],
        volume["persistentVolumeClaim"]["claimName"],
        mount["mountPath"],
        args[args.index("--out") + 1],
    )


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_reader_validates_strictly(version):
    kubernetes_validate.validate(the_pod(), version, strict=True)


@pytest.mark.parametrize("variant", list(MASTERS))
def test_it_mounts_the_masters_runs_read_only_where_they_write_them(variant):
    namespace, claim, path, out = master_runs(variant)
    pod = the_pod()
    assert pod["metadata"]["namespace"] == namespace
    (volume,) = pod["spec"]["volumes"]
    assert volume["persistentVolumeClaim"] == {"claimName": claim, "readOnly": True}
    (container,) = containers(pod)
    (mount,) = container["volumeMounts"]
    assert (mount["name"], mount["mountPath"], mount["readOnly"]) == (volume["name"], path, True)
    assert out == path  # the run directories are under the mount


def test_it_runs_nothing_of_vllm_load_and_ends_by_itself():
    pod = the_pod()
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and 0 < spec["activeDeadlineSeconds"] <= 3600
    (container,) = containers(pod)
    # `command` replaces the image's entry point (vllm-load); sleep is bounded too
    assert container["command"][0] == "sleep" and int(container["command"][1]) <= 3600
    assert "args" not in container
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True


def test_it_uses_the_masters_image():
    headless = render(MASTERS["headless"][0])
    images = {c["image"] for d in headless for c in containers(d)}
    (container,) = containers(the_pod())
    assert images == {container["image"]}


@pytest.mark.skipif(not shutil.which("kubectl"), reason="no kubectl installed")
def test_the_render_is_what_kubectl_kustomize_builds():
    built = subprocess.run(
        ["kubectl", "kustomize", READER], capture_output=True, text=True, timeout=120
    )
    assert built.returncode == 0, built.stderr
    assert [d for d in yaml.safe_load_all(built.stdout) if d] == [the_pod()]
