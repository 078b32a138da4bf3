"""The local e2e cluster's definitions (no cluster started here: `make e2e` starts one)."""

from __future__ import annotations

import json

import pytest

from infra.config import parse_config
from tools import cluster
from tools.render import stack_config


def test_gpu_node_carries_what_the_prod_stack_selects_and_tolerates() -> None:
    prod = parse_config(*stack_config("prod"), {})
    node = cluster.kwok_node(cluster.GPU_NODE, gpus=8, cpu="64", memory="512Gi")
    labels = node["metadata"]["labels"]
    for key, value in prod.workers.gpu_node_selector:
        assert labels.get(key) == value, f"node {cluster.GPU_NODE}: label {key}={value} missing"
    taints = node["spec"]["taints"]
    for toleration in prod.workers.gpu_tolerations:
        assert {"key": toleration.key, "value": toleration.value, "effect": toleration.effect} in (
            taints
        ), f"node {cluster.GPU_NODE}: no taint matching {toleration}"
    assert node["status"]["capacity"][prod.workers.gpu_resource] == "8"
    replicas = prod.workers.replicas
    assert int(node["status"]["allocatable"]["cpu"]) >= replicas * int(prod.workers.cpu_request)


def test_cpu_node_has_no_gpu_and_no_taint() -> None:
    node = cluster.kwok_node(cluster.CPU_NODE, gpus=0, cpu="16", memory="64Gi")
    assert "taints" not in node["spec"]
    assert "nvidia.com/gpu" not in node["status"]["capacity"]


@pytest.mark.parametrize("stack", ["dev", "prod", "e2e", "gke", "eks", "aks"])
def test_every_stack_storage_class_has_volumes(stack: str) -> None:
    cfg = parse_config(*stack_config(stack), {})
    volumes = [
        d
        for d in cluster._storage()
        if d["kind"] == "PersistentVolume"
        and d["spec"]["storageClassName"] == cfg.storage.storage_class
    ]
    assert len(volumes) == cluster.VOLUMES_PER_CLASS, f"stack {stack}: no volumes of its class"
    assert all("ReadWriteMany" in v["spec"]["accessModes"] for v in volumes)


def test_kubeconfig_is_self_contained(tmp_path) -> None:
    for name in ("ca.crt", "admin.crt", "admin.key"):
        (tmp_path / name).write_bytes(name.encode())
    doc = json.loads(cluster.kubeconfig_text("https://127.0.0.1:6443", tmp_path, "admin"))
    assert doc["current-context"] == cluster.CONTEXT
    user = doc["users"][0]["user"]
    assert set(user) == {"client-certificate-data", "client-key-data"}, "no file paths inside"


@pytest.mark.parametrize("cloud", sorted(cluster.CLOUD_GPU_NODES))
def test_each_clouds_gpu_node_carries_what_its_stack_selects_and_tolerates(cloud: str) -> None:
    cfg = parse_config(*stack_config(cloud), {})
    name, labels, taints = cluster.CLOUD_GPU_NODES[cloud]
    node = cluster.kwok_node(name, gpus=8, cpu="64", memory="512Gi", gpu_labels=labels,
                             gpu_taints=taints)  # fmt: skip
    have = node["metadata"]["labels"]
    for key, value in cfg.workers.gpu_node_selector:
        assert key in have and value in (None, have[key]), f"node {name}: no label {key}"
    assert cluster.GPU_LABEL[0] not in have, f"node {name} carries GKE's label"
    tolerated = {t.key for t in cfg.workers.gpu_tolerations}
    missing = [t for t in node["spec"].get("taints", []) if t["key"] not in tolerated]
    assert missing == [], f"node {name}: stack {cloud} tolerates none of {missing}"
