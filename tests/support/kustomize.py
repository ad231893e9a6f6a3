"""deploy/kubernetes rendered without kustomize: the fields its kustomization uses, and no others.

`render(directory)` does what `kubectl kustomize directory` does for a kustomization made of
these fields (`FIELDS`), in kustomize's order:

- `resources`: YAML files (every document) or directories (rendered first, recursively);
- `components`: directories holding a `kind: Component` whose only field is `resources`;
- `namespace`: set on every namespaced object; a Namespace object is renamed to it;
- `replicas`: `spec.replicas` of the Deployments (StatefulSets, ...) of that name;
- `images`: `newName` / `newTag` / `digest` for every container image of that name;
- `replacements`: a scalar copied from one object's field (`source`: kind, name, fieldPath) to
  fields of others (`targets`: select kind/name, fieldPaths with `[name=x]` list selectors),
  the target keeping its type (an int copied into a string field is written as a string),
  after every other transformer, as kustomize does.

Any other field raises `Unsupported`, so a kustomization cannot grow a field that a test would
silently leave out. `workers=` and `components=` render as if `kustomize edit set replicas
vllm-load-worker=N` and `kustomize edit add component NAME` had been run first.
tests/deploy/test_kubernetes.py checks the render against `kubectl kustomize` where kubectl is
installed.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any

import yaml

FIELDS = {
    "apiVersion",
    "kind",
    "namespace",
    "resources",
    "components",
    "images",
    "replicas",
    "replacements",
}
COMPONENT_FIELDS = {"apiVersion", "kind", "resources"}
#: kinds without a namespace (those a manifest here could hold)
CLUSTER_SCOPED = {
    "Namespace",
    "PersistentVolume",
    "StorageClass",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "CustomResourceDefinition",
}
SCALABLE = {"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"}
WORKER = "vllm-load-worker"


class Unsupported(Exception):
    """The kustomization uses something `render` does not do."""


def load_kustomization(directory: str) -> dict:
    with open(os.path.join(directory, "kustomization.yaml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def load_documents(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc]


def render(
    directory: str, workers: int | None = None, components: tuple[str, ...] = ()
) -> list[dict]:
    """The objects `kubectl kustomize directory` prints (in no particular order)."""
    kustomization = copy.deepcopy(load_kustomization(directory))
    if workers is not None:
        entries = kustomization.setdefault("replicas", [])
        entries[:] = [e for e in entries if e["name"] != WORKER]
        entries.append({"name": WORKER, "count": workers})
    if components:
        kustomization["components"] = [*kustomization.get("components", []), *components]
    return _build(directory, kustomization)


def _build(directory: str, kustomization: dict) -> list[dict]:
    unknown = set(kustomization) - FIELDS
    if unknown:
        raise Unsupported(f"{directory}: kustomization fields not rendered: {sorted(unknown)}")
    docs: list[dict] = []
    for entry in kustomization.get("resources", []):
        path = os.path.join(directory, entry)
        if os.path.isdir(path):
            docs += _build(path, load_kustomization(path))
        else:
            docs += load_documents(path)
    for entry in kustomization.get("components", []):
        path = os.path.join(directory, entry)
        component = load_kustomization(path)
        if component.get("kind") != "Component" or set(component) - COMPONENT_FIELDS:
            raise Unsupported(f"{path}: only a Component with resources is rendered")
        docs += [
            d for r in component.get("resources", []) for d in load_documents(os.path.join(path, r))
        ]
    if "namespace" in kustomization:
        _set_namespace(docs, kustomization["namespace"])
    for entry in kustomization.get("replicas", []):
        _set_replicas(docs, entry)
    for entry in kustomization.get("images", []):
        _set_image(docs, entry)
    for entry in kustomization.get("replacements", []):
        _replace(docs, entry)
    return docs


def _set_namespace(docs: list[dict], namespace: str) -> None:
    for doc in docs:
        if doc["kind"] == "Namespace":
            doc["metadata"]["name"] = namespace
        elif doc["kind"] not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = namespace


def _set_replicas(docs: list[dict], entry: dict) -> None:
    if set(entry) - {"name", "count"}:
        raise Unsupported(f"replicas entry {entry}")
    for doc in docs:
        if doc["kind"] in SCALABLE and doc["metadata"]["name"] == entry["name"]:
            doc["spec"]["replicas"] = entry["count"]


def containers(doc: dict) -> list[dict]:
    """The containers (init containers included) of a workload's pod template, or a Pod's."""
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", {}) if "template" in spec else spec
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def split_image(image: str) -> tuple[str, str, str]:
    """(name, tag, digest) of an image reference; a registry's port is part of the name."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    return name, tag, digest


def _set_image(docs: list[dict], entry: dict) -> None:
    if set(entry) - {"name", "newName", "newTag", "digest"}:
        raise Unsupported(f"images entry {entry}")
    for doc in docs:
        for container in containers(doc):
            name, tag, digest = split_image(container["image"])
            if name != entry["name"]:
                continue
            name = entry.get("newName", name)
            if "digest" in entry:
                tag, digest = "", entry["digest"]
            elif "newTag" in entry:
                tag, digest = str(entry["newTag"]), ""
            container["image"] = (
                name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
            )


def _select(docs: list[dict], select: dict) -> list[dict]:
    if set(select) - {"kind", "name"}:
        raise Unsupported(f"replacement selector {select}")
    return [
        d
        for d in docs
        if all(
            d["kind"] == select[k] if k == "kind" else d["metadata"]["name"] == select[k]
            for k in select
        )
    ]


def _path(fieldpath: str) -> list[str]:
    """`a.b.[name=x].c` as its steps (kustomize's field path; no dots inside a step here)."""
    return fieldpath.split(".")


def _walk(node: Any, steps: list[str], fieldpath: str) -> tuple[Any, Any]:
    """(parent, key) of the last step, every step before it required to exist."""
    for i, step in enumerate(steps):
        match = re.fullmatch(r"\[(\w+)=(.*)\]", step)
        if match:
            key, value = match.groups()
            found = [
                item for item in node if isinstance(item, dict) and str(item.get(key)) == value
            ]
            if len(found) != 1:
                raise KeyError(f"{fieldpath}: {step} matches {len(found)} items")
            node = found[0]
            continue
        if i == len(steps) - 1:
            if not isinstance(node, dict) or step not in node:
                raise KeyError(f"{fieldpath}: no {step}")
            return node, step
        if step.isdigit() and isinstance(node, list):
            node = node[int(step)]
        else:
            node = node[step]
    raise KeyError(fieldpath)


def _replace(docs: list[dict], entry: dict) -> None:
    if set(entry) - {"source", "targets"}:
        raise Unsupported(f"replacement {entry}")
    source = entry["source"]
    if set(source) - {"kind", "name", "fieldPath"}:
        raise Unsupported(f"replacement source {source}")
    sources = _select(docs, {k: source[k] for k in ("kind", "name") if k in source})
    if len(sources) != 1:
        raise KeyError(f"replacement source {source} matches {len(sources)} objects")
    parent, key = _walk(sources[0], _path(source.get("fieldPath", "metadata.name")), "source")
    value = parent[key]
    for target in entry["targets"]:
        if set(target) - {"select", "fieldPaths"}:
            raise Unsupported(f"replacement target {target}")
        for doc in _select(docs, target["select"]):
            for fieldpath in target["fieldPaths"]:
                parent, key = _walk(doc, _path(fieldpath), fieldpath)
                old = parent[key]
                # kustomize copies the scalar's text and keeps the target's type
                parent[key] = str(value) if isinstance(old, str) else value
